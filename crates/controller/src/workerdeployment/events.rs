//! Events, the people's view of a reconcile: what execution did (Normal, one per write; a
//! refused gate start is a Warning), the error that stopped it (a Warning, once per distinct
//! message), versions that registered or drained, and gate runs that failed. Pure: the
//! reconciler publishes what these functions return.

use std::collections::BTreeMap;

use twc_api::conditions::{
    ACTIVE_POLLERS, PROGRESSING, READY, ROLLED_BACK, VERSIONS_KEPT, VERSIONS_KNOWN,
    WAITING_FOR_POLLERS,
};
use twc_api::{VersionStatus, WorkerDeployment, WorkerDeploymentStatus, controls};

use super::execute::{Applied, Done};
use crate::error::{Error, Verdict};
use crate::events::EventType;

pub use crate::events::Note;

fn normal(reason: &'static str, note: String) -> Note {
    Note {
        type_: EventType::Normal,
        reason,
        note,
    }
}

fn warning(reason: &'static str, note: String) -> Note {
    Note {
        type_: EventType::Warning,
        reason,
        note,
    }
}

/// One event per write that went through, in the order they were made.
pub fn of_applied(wd: &WorkerDeployment, target: &str, applied: &Applied) -> Vec<Note> {
    let gate_type = |step: &Option<usize>| {
        let of_step = step
            .map(|i| format!(" of step {}", i + 1))
            .unwrap_or_default();
        let name = super::observe::gate_config(wd, *step)
            .map(|g| g.workflow_type.as_str())
            .unwrap_or_default();
        format!("{name}{of_step}")
    };
    applied
        .done
        .iter()
        .filter_map(|done| match done {
            Done::Created { deployment, .. } => Some(normal(
                "DeploymentCreated",
                format!("created Deployment {deployment} for buildID {target}"),
            )),
            Done::Resettled { deployment, fields } => {
                let from = if wd.spec.has_worker_groups() {
                    "spec.workerGroups"
                } else if wd.spec.deployment.is_some() {
                    "spec.deployment"
                } else {
                    "spec.deploymentStrategy"
                };
                // The reason TWC-era dashboards know when only the strategy changed.
                let reason = if fields == &["strategy"] {
                    "DeploymentStrategyApplied"
                } else {
                    "DeploymentSettingsApplied"
                };
                Some(normal(
                    reason,
                    format!(
                        "set {} of Deployment {deployment} from {from}",
                        fields.join(", ")
                    ),
                ))
            }
            Done::Reconnected { deployment, build } => Some(normal(
                "DeploymentReconnected",
                format!(
                    "updated Deployment {deployment} (buildID {build}) for the changed connection"
                ),
            )),
            Done::Scaled {
                deployment,
                replicas: 0,
            } => Some(normal(
                "ScaledDown",
                format!("scaled Deployment {deployment} to 0"),
            )),
            Done::DeletedDeployment { deployment } => Some(normal(
                "DeploymentDeleted",
                format!("deleted Deployment {deployment}"),
            )),
            Done::GateStarted { run, step } => Some(normal(
                "GateWorkflowStarted",
                format!(
                    "started gate workflow {} ({}) on task queue {} pinned to buildID {target}",
                    gate_type(step),
                    run.workflow_id,
                    run.task_queue
                ),
            )),
            Done::GateStartFailed {
                task_queue,
                message,
                step,
            } => Some(warning(
                "TestWorkflowStartFailed",
                format!(
                    "cannot start gate workflow {} on task queue {task_queue}: {message}",
                    gate_type(step)
                ),
            )),
            Done::DeletedVersion { build } => Some(normal(
                "VersionDeleted",
                format!("deleted version {build} from Temporal"),
            )),
            Done::Promoted { build } => Some(normal(
                "VersionPromoted",
                format!("buildID {build} is now current"),
            )),
            Done::Ramped { build, percentage } => Some(normal(
                "RampChanged",
                format!("buildID {build} ramps at {percentage}%"),
            )),
            Done::Applied { .. }
            | Done::Scaled { .. }
            | Done::ClaimedManager
            | Done::RampCleared => None,
        })
        .collect()
}

/// The Warning for an error, unless it is quiet or the previous status already says it.
pub fn of_error(
    previous: &WorkerDeploymentStatus,
    error: &Error,
    verdict: Verdict,
) -> Option<Note> {
    let message = error.to_string();
    let already = previous
        .conditions
        .iter()
        .any(|c| c.type_ == READY && c.reason == verdict.reason && c.message == message);
    (verdict.warning && !already).then(|| warning(verdict.reason, message))
}

/// A failed or rolled-back target (Warning), and the rollout controls as they were acted on.
/// The current target's pollers came or went (TWC #448): a Warning when a task queue has none
/// (again, when the queues named change), a Normal event when all have some again; none for
/// "not known" (nothing happened that a person should hear about).
fn poller_note(before: &WorkerDeploymentStatus, after: &WorkerDeploymentStatus) -> Option<Note> {
    let current = after
        .target_version
        .as_ref()
        .is_some_and(|t| t.base.status == VersionStatus::Current);
    let progressing = |s: &WorkerDeploymentStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == PROGRESSING)
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let (reason, message) = progressing(after).filter(|_| current)?;
    let was = progressing(before);
    match reason.as_str() {
        WAITING_FOR_POLLERS if was.as_ref() != Some(&(reason.clone(), message.clone())) => {
            Some(warning(WAITING_FOR_POLLERS, message))
        }
        ACTIVE_POLLERS if was.is_none_or(|(r, _)| r != ACTIVE_POLLERS) => {
            Some(normal(ACTIVE_POLLERS, message))
        }
        _ => None,
    }
}

fn rollout_notes(before: &WorkerDeploymentStatus, after: &WorkerDeploymentStatus) -> Vec<Note> {
    let mut notes = Vec::new();
    if let Some(f) = &after.failed_version {
        let was = before.failed_version.as_ref();
        let reason = crate::plan::guard::failure_reason(&f.reason);
        if was.is_none_or(|w| w.build_id != f.build_id || w.reason != f.reason) {
            notes.push(warning(reason, f.message.clone()));
        }
        if f.rolled_back && !was.is_some_and(|w| w.build_id == f.build_id && w.rolled_back) {
            notes.push(warning(
                ROLLED_BACK,
                format!(
                    "new workflows no longer go to buildID {} ({})",
                    f.build_id, f.reason
                ),
            ));
        }
    }
    // A step's analysis that came to a verdict other than Failed (that one is the failure).
    let steps = |s: &WorkerDeploymentStatus| {
        s.target_version
            .as_ref()
            .map(|t| (t.base.build_id.clone(), t.analysis.clone()))
            .unwrap_or_default()
    };
    let ((build_before, was), (build, now)) = (steps(before), steps(after));
    for a in &now {
        let seen = build_before == build
            && was
                .iter()
                .any(|w| w.step == a.step && w.verdict == a.verdict);
        let reason = match a.verdict {
            twc_api::AnalysisVerdict::Passed => "AnalysisPassed",
            twc_api::AnalysisVerdict::Inconclusive => "AnalysisInconclusive",
            twc_api::AnalysisVerdict::Running | twc_api::AnalysisVerdict::Failed => continue,
        };
        if !seen {
            notes.push(normal(
                reason,
                format!(
                    "buildID {build} at {}%: {} of {} workflows closed on it failed ({}%)",
                    a.ramp_percentage, a.failed, a.closed, a.failed_percent
                ),
            ));
        }
    }
    let controls = |s: &WorkerDeploymentStatus| s.controls.clone().unwrap_or_default();
    let (b, a) = (controls(before), controls(after));
    if a.paused != b.paused {
        notes.push(if a.paused {
            normal(
                "RolloutPaused",
                format!(
                    "routing changes are paused (annotation {})",
                    controls::PAUSED
                ),
            )
        } else {
            normal("RolloutResumed", "routing changes resumed".into())
        });
    }
    if a.promoted_build_id != b.promoted_build_id
        && let Some(build) = &a.promoted_build_id
    {
        notes.push(normal(
            "PromotedOnRequest",
            format!(
                "promoting buildID {build} now, skipping the remaining steps (annotation {})",
                controls::PROMOTE
            ),
        ));
    }
    if a.retry != b.retry && a.retry.is_some() {
        let build = after
            .target_version
            .as_ref()
            .map(|t| t.base.build_id.as_str())
            .unwrap_or_default();
        notes.push(normal(
            "RetryRequested",
            format!(
                "cleared the failed mark of buildID {build}; its progress deadline starts again (annotation {})",
                controls::RETRY
            ),
        ));
    }
    notes
}

/// Events for what changed between two statuses: versions registered and drained (Normal),
/// gate runs that failed and versions kept because Temporal cannot account for them (Warning).
pub fn of_status(before: &WorkerDeploymentStatus, after: &WorkerDeploymentStatus) -> Vec<Note> {
    let mut notes: Vec<Note> = transitions(before, after)
        .into_iter()
        .map(|(reason, note)| normal(reason, note))
        .collect();
    notes.extend(
        gate_failures(before, after)
            .into_iter()
            .map(|note| warning("GateWorkflowFailed", note)),
    );
    notes.extend(rollout_notes(before, after));
    notes.extend(poller_note(before, after));
    let collisions = |s: &WorkerDeploymentStatus| s.collision_count.unwrap_or(0);
    if collisions(after) > collisions(before)
        && let Some(target) = &after.target_version
    {
        notes.push(warning(
            "BuildIDCollision",
            format!(
                "the pod template's build ID was taken by a different template already running; it gets buildID {} instead (collision count {})",
                target.base.build_id,
                collisions(after)
            ),
        ));
    }
    let kept = |s: &WorkerDeploymentStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == VERSIONS_KNOWN && c.status == "False")
            .map(|c| c.message.clone())
    };
    if let Some(message) = kept(after)
        && kept(before).as_ref() != Some(&message)
    {
        notes.push(warning(VERSIONS_KEPT, message));
    }
    notes
}

/// Gate runs that ended without success since the previous status (one event each).
fn gate_failures(before: &WorkerDeploymentStatus, after: &WorkerDeploymentStatus) -> Vec<String> {
    use twc_api::WorkflowExecutionStatus as S;
    let runs = |s: &WorkerDeploymentStatus| {
        s.target_version
            .as_ref()
            .map(|t| t.test_workflows.clone())
            .unwrap_or_default()
    };
    let old = runs(before);
    runs(after)
        .into_iter()
        .filter(|w| !matches!(w.status, S::Running | S::Completed))
        .filter(|w| {
            !old.iter()
                .any(|o| o.workflow_id == w.workflow_id && o.status == w.status)
        })
        .map(|w| {
            format!(
                "gate workflow {} (run {}) on task queue {} ended {:?}",
                w.workflow_id, w.run_id, w.task_queue, w.status
            )
        })
        .collect()
}

/// Every version in a status, by build ID.
pub fn versions(s: &WorkerDeploymentStatus) -> BTreeMap<String, VersionStatus> {
    s.target_version
        .iter()
        .map(|t| &t.base)
        .chain(s.current_version.iter().map(|c| &c.base))
        .chain(s.deprecated_versions.iter().map(|d| &d.base))
        .map(|b| (b.build_id.clone(), b.status))
        .collect()
}

/// Normal events for version transitions between two statuses: a version registered in
/// Temporal (its workers poll) and a version drained.
fn transitions(
    before: &WorkerDeploymentStatus,
    after: &WorkerDeploymentStatus,
) -> Vec<(&'static str, String)> {
    let (old, new) = (versions(before), versions(after));
    let mut out = Vec::new();
    for (build, status) in &new {
        let was = old
            .get(build)
            .copied()
            .unwrap_or(VersionStatus::NotRegistered);
        if was == VersionStatus::NotRegistered && *status != VersionStatus::NotRegistered {
            out.push((
                "VersionRegistered",
                format!("workers of buildID {build} poll Temporal; the version is registered"),
            ));
        }
        if *status == VersionStatus::Drained
            && was != VersionStatus::Drained
            && old.contains_key(build)
        {
            out.push((
                "VersionDrained",
                format!("buildID {build} has no open pinned workflows left"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use twc_api::{
        BaseWorkerDeploymentVersion, DeprecatedWorkerDeploymentVersion,
        TargetWorkerDeploymentVersion,
    };

    fn target(build: &str, status: VersionStatus) -> WorkerDeploymentStatus {
        WorkerDeploymentStatus {
            target_version: Some(TargetWorkerDeploymentVersion {
                base: BaseWorkerDeploymentVersion {
                    build_id: build.into(),
                    status,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_failure_a_rollback_a_verdict_and_each_control_are_said_once() {
        let reasons = |a: &WorkerDeploymentStatus, b: &WorkerDeploymentStatus| {
            rollout_notes(a, b)
                .into_iter()
                .map(|n| (n.type_, n.reason))
                .collect::<Vec<_>>()
        };
        let before = target("v2", VersionStatus::Ramping);
        let mut failed = before.clone();
        failed.failed_version = Some(twc_api::FailedVersion {
            build_id: "v2".into(),
            reason: "WorkersCrashLooping".into(),
            message: "m".into(),
            failed_at: None,
            rolled_back: true,
        });
        assert_eq!(
            reasons(&before, &failed),
            vec![
                (EventType::Warning, "WorkersCrashLooping"),
                (EventType::Warning, ROLLED_BACK)
            ]
        );
        assert_eq!(reasons(&failed, &failed), vec![]);

        let mut passed = before.clone();
        if let Some(t) = passed.target_version.as_mut() {
            t.analysis = vec![twc_api::StepAnalysis {
                step: 0,
                ramp_percentage: 10,
                closed: 20,
                failed: 1,
                failed_percent: 5,
                verdict: twc_api::AnalysisVerdict::Passed,
                checked_at: None,
            }];
        }
        assert_eq!(
            reasons(&before, &passed),
            vec![(EventType::Normal, "AnalysisPassed")]
        );
        assert_eq!(reasons(&passed, &passed), vec![]);

        let mut paused = before.clone();
        paused.controls = Some(twc_api::RolloutControls {
            paused: true,
            retry: Some("r".into()),
            ..Default::default()
        });
        assert_eq!(
            reasons(&before, &paused),
            vec![
                (EventType::Normal, "RolloutPaused"),
                (EventType::Normal, "RetryRequested")
            ]
        );
        assert_eq!(
            reasons(&paused, &before),
            vec![(EventType::Normal, "RolloutResumed")]
        );
    }

    #[test]
    fn events_for_registration_and_drainage_fire_once() {
        let reasons = |a, b| {
            transitions(&a, &b)
                .into_iter()
                .map(|(r, _)| r)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            reasons(
                target("v1", VersionStatus::NotRegistered),
                target("v1", VersionStatus::Inactive)
            ),
            vec!["VersionRegistered"]
        );
        assert!(
            reasons(
                target("v1", VersionStatus::Inactive),
                target("v1", VersionStatus::Current)
            )
            .is_empty()
        );
        let mut before = target("v2", VersionStatus::Current);
        before
            .deprecated_versions
            .push(DeprecatedWorkerDeploymentVersion {
                base: BaseWorkerDeploymentVersion {
                    build_id: "v1".into(),
                    status: VersionStatus::Draining,
                    ..Default::default()
                },
                ..Default::default()
            });
        let mut after = before.clone();
        after.deprecated_versions[0].base.status = VersionStatus::Drained;
        assert_eq!(reasons(before, after.clone()), vec!["VersionDrained"]);
        assert!(reasons(after.clone(), after).is_empty());
    }

    #[test]
    fn every_write_is_told_once_in_order_and_quiet_writes_are_not() {
        let wd: WorkerDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {
                "template": {"spec": {"containers": [{"name": "worker", "image": "w:v2"}]}},
                "rollout": {"strategy": "AllAtOnce", "gate": {"workflowType": "Check"}},
                "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "default"}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let applied = Applied {
            done: vec![
                Done::Created {
                    deployment: "w-v2".into(),
                    build: "v2".into(),
                },
                Done::Applied {
                    deployment: "w-v2".into(),
                },
                Done::Scaled {
                    deployment: "w-v1".into(),
                    replicas: 3,
                },
                Done::Scaled {
                    deployment: "w-v0".into(),
                    replicas: 0,
                },
                Done::GateStartFailed {
                    task_queue: "q".into(),
                    message: "no".into(),
                    step: None,
                },
                Done::ClaimedManager,
                Done::Promoted { build: "v2".into() },
            ],
            ..Default::default()
        };
        let notes = of_applied(&wd, "v2", &applied);
        let reasons: Vec<&str> = notes.iter().map(|n| n.reason).collect();
        assert_eq!(
            reasons,
            [
                "DeploymentCreated",
                "ScaledDown",
                "TestWorkflowStartFailed",
                "VersionPromoted"
            ]
        );
        assert_eq!(notes[2].type_, EventType::Warning);
        assert_eq!(
            notes[2].note,
            "cannot start gate workflow Check on task queue q: no"
        );
    }

    #[test]
    fn an_error_is_a_warning_once_until_its_message_changes() {
        let e = Error::ConnectionNotFound("Connection ns/c not found".into());
        let mut previous = WorkerDeploymentStatus::default();
        let first = of_error(&previous, &e, e.verdict(0));
        assert_eq!(
            first.as_ref().map(|n| (n.type_, n.reason)),
            Some((EventType::Warning, "ConnectionNotFound"))
        );
        crate::conditions::set_condition(
            &mut previous.conditions,
            READY,
            "False",
            "ConnectionNotFound",
            &e.to_string(),
            None,
            std::time::SystemTime::UNIX_EPOCH,
        );
        assert_eq!(of_error(&previous, &e, e.verdict(0)), None, "already said");
        let other = Error::ConnectionNotFound("Connection ns/d not found".into());
        assert!(of_error(&previous, &other, other.verdict(0)).is_some());
    }
}
