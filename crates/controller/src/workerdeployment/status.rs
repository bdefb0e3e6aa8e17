//! The WorkerDeployment's status: a pure function of what was observed, the plan and what
//! execution did ([`Applied`]), or of the previous status and the error that stopped the
//! reconcile. Computed once per reconcile, on failure paths too, and written once.

use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use twc_api::conditions::{self as reason, PROGRESSING, READY, ROLLED_BACK, VERSIONS_KNOWN};
use twc_api::{
    BaseWorkerDeploymentVersion, CurrentWorkerDeploymentVersion, DeprecatedWorkerDeploymentVersion,
    ObservedConnectionRef, RolloutControls, TargetWorkerDeploymentVersion, TaskQueue,
    VersionStatus, WorkerDeployment, WorkerDeploymentStatus,
};

use super::execute::{Applied, Done};
use crate::conditions::{set_condition, set_kstatus, time};
use crate::connections::ConnKey;
use crate::error::{Error, Verdict};
use crate::observed::Pollers;
use crate::plan::{Observed, Plan, guard};
use crate::temporal::DeploymentState;

/// `Ready=False` reasons that waiting cannot change (kstatus `Stalled=True`, "failed" for
/// Helm 4, Flux and Argo CD): the spec, the controller's install, the ClusterConnection's policy
/// or the server must change first, or (a failed rollout) a new template or a retry is asked
/// for. Every other reason reads `Reconciling=True`: a missing Connection or Secret may be on
/// its way (a release applies objects in no set order), Temporal may come back.
pub const STALLED_REASONS: &[&str] = &[
    reason::INVALID_SPEC,
    reason::CLUSTER_CONNECTION_UNSUPPORTED,
    reason::CONNECTION_NOT_ALLOWED,
    reason::TEMPORAL_SERVER_UNSUPPORTED,
    reason::PROGRESS_DEADLINE_EXCEEDED,
    reason::WORKERS_CRASH_LOOPING,
    reason::ANALYSIS_FAILED,
    reason::ABORTED,
    reason::STEP_GATE_FAILED,
];

/// How a reconcile ended, for the status.
pub enum Outcome<'a> {
    /// Planned and executed without error: `observed` is what was read, before execution.
    Executed {
        observed: &'a Observed,
        plan: &'a Plan,
        applied: &'a Applied,
    },
    /// Stopped by `error` (observing, or part way through execution).
    Failed { error: &'a Error, verdict: Verdict },
}

/// The next status of `wd`, from its `previous` status and how this reconcile ended.
/// `connection` is the reference resolved this time (None: it was not, keep the previous one);
/// `identity` is the controller's, as execution wrote to Temporal.
pub fn next(
    wd: &WorkerDeployment,
    previous: &WorkerDeploymentStatus,
    outcome: Outcome<'_>,
    connection: Option<&ConnKey>,
    identity: &str,
    now: SystemTime,
) -> WorkerDeploymentStatus {
    let generation = wd.metadata.generation;
    // Conditions left as they were speak of the generation they were computed for.
    let observed_generation = match &outcome {
        Outcome::Failed { verdict, .. } if !verdict.warning => previous.observed_generation,
        _ => generation,
    };
    let reconciled = matches!(outcome, Outcome::Executed { .. });
    // A quiet error leaves every condition as it was, kstatus' two included.
    let recomputed = !matches!(&outcome, Outcome::Failed { verdict, .. } if !verdict.warning);
    let mut status = match outcome {
        Outcome::Executed {
            observed,
            plan,
            applied,
        } => {
            let after = effective(observed, applied, identity);
            let mut s = versions(wd, &plan.target_build_id, &after);
            s.conditions = previous.conditions.clone();
            s.collision_count = (plan.collision_count > 0)
                .then(|| i32::try_from(plan.collision_count).unwrap_or(i32::MAX));
            if let Some(t) = s.target_version.as_mut() {
                t.target_since = plan.target_since.and_then(time);
                t.analysis = plan.analysis.clone();
            }
            s.failed_version = plan.failure.as_ref().map(guard::record);
            s.controls = Some(plan.controls.clone()).filter(|c| *c != RolloutControls::default());
            s.restarts_waiting = super::credentials::waiting(plan, &applied.held);
            s.last_rollout = Some(super::timeline::record(
                previous.last_rollout.as_ref(),
                &plan.target_build_id,
                &after,
                now,
            ));
            let target = s.target_version.clone().unwrap_or_default();
            for (type_, st, why, msg) in
                rollout_conditions(&target, plan, observed.pollers.as_ref())
            {
                set_condition(&mut s.conditions, type_, st, why, &msg, generation, now);
            }
            if let Some((st, why, msg)) = rolled_back(plan, &s.conditions) {
                set_condition(
                    &mut s.conditions,
                    ROLLED_BACK,
                    st,
                    why,
                    &msg,
                    generation,
                    now,
                );
            }
            if let Some((st, why, msg)) = versions_known(plan, &s.conditions) {
                set_condition(
                    &mut s.conditions,
                    VERSIONS_KNOWN,
                    st,
                    why,
                    &msg,
                    generation,
                    now,
                );
            }
            s
        }
        Outcome::Failed { error, verdict } => {
            let mut s = previous.clone();
            // A concurrent routing change, or Temporal catching up, is re-read at once; the
            // conditions stay as they were.
            if verdict.warning {
                for type_ in [READY, PROGRESSING] {
                    set_condition(
                        &mut s.conditions,
                        type_,
                        "False",
                        verdict.reason,
                        &error.to_string(),
                        generation,
                        now,
                    );
                }
            }
            s
        }
    };
    if recomputed {
        let terminal = status.conditions.iter().any(|c| {
            c.type_ == READY && c.status == "False" && STALLED_REASONS.contains(&c.reason.as_str())
        });
        set_kstatus(
            &mut status.conditions,
            terminal,
            reconciled,
            generation,
            now,
        );
    }
    status.observed_generation = observed_generation;
    status.observed_connection_ref = match connection {
        Some(k) => Some(observed_ref(k)),
        None => previous.observed_connection_ref.clone(),
    };
    status
}

/// The state after execution: `observed` with what `applied` changed (deleted Deployments and
/// versions, started gate runs, the manager identity claimed, the routing changed at `now`).
pub fn effective(observed: &Observed, applied: &Applied, identity: &str) -> Observed {
    let mut o = observed.clone();
    let now = o.now;
    // The routing changed when its write was answered.
    let routed = applied.routed_at.unwrap_or(now);
    // The writes' answers carry the worker deployment's new conflict token.
    if let Some(token) = &applied.conflict_token {
        o.temporal.conflict_token = token.clone();
    }
    for done in &applied.done {
        let state = &mut o.temporal;
        match done {
            Done::DeletedDeployment { deployment } => {
                o.deployments.retain(|_, d| d.name != *deployment);
            }
            Done::GateStarted { run, step: None } => o.target.gates.push(run.clone()),
            Done::GateStarted {
                run,
                step: Some(step),
            } => {
                let gates = o
                    .target
                    .step_gates
                    .get_or_insert_with(|| crate::plan::StepGates {
                        step: *step,
                        runs: Vec::new(),
                    });
                if gates.step == *step {
                    gates.runs.push(run.clone());
                }
            }
            Done::DeletedVersion { build } => {
                state.versions.remove(build);
            }
            Done::ClaimedManager => state.manager_identity = identity.to_string(),
            Done::Promoted { build } => {
                promote(state, build, routed);
                state.last_modifier_identity = identity.to_string();
            }
            Done::Ramped { build, percentage } => {
                if state.ramping_build_id.as_deref() != Some(build.as_str()) {
                    state.ramping_since = Some(routed);
                }
                state.ramping_build_id = Some(build.clone());
                state.ramp_percentage = *percentage;
                state.ramp_changed_at = Some(routed);
                if let Some(v) = state.versions.get_mut(build) {
                    v.status = VersionStatus::Ramping;
                }
                state.last_modifier_identity = identity.to_string();
            }
            Done::RampCleared => {
                state.ramping_since = None;
                state.ramping_build_id = None;
                state.ramp_percentage = 0.0;
                state.last_modifier_identity = identity.to_string();
            }
            // Its status says what it is as soon as it is written, not one reconcile later
            // when the cache shows it (a second status write per new version).
            Done::Created { deployment, build } if !build.is_empty() => {
                o.deployments.entry(build.clone()).or_insert_with(|| {
                    crate::plan::ObservedDeployment {
                        name: deployment.clone(),
                        build_id: build.clone(),
                        ..Default::default()
                    }
                });
            }
            Done::Created { .. }
            | Done::Applied { .. }
            | Done::Reconnected { .. }
            | Done::Resettled { .. }
            | Done::Scaled { .. }
            | Done::GateStartFailed { .. } => {}
        }
    }
    o
}

/// A successful SetCurrent of `build` at `now`: the old current version drains.
fn promote(state: &mut DeploymentState, build: &str, now: SystemTime) {
    if state.current_build_id.as_deref() != Some(build) {
        state.routing.current_changed_at = Some(now);
    }
    if let Some(old) = state.current_build_id.replace(build.to_string())
        && old != build
        && let Some(v) = state.versions.get_mut(&old)
    {
        v.status = VersionStatus::Draining;
        v.last_current_at = Some(now);
    }
    if state.ramping_build_id.as_deref() == Some(build) {
        state.ramping_build_id = None;
        state.ramp_percentage = 0.0;
    }
    if let Some(v) = state.versions.get_mut(build) {
        v.status = VersionStatus::Current;
    }
}

fn base(observed: &Observed, build: &str, namespace: &str) -> BaseWorkerDeploymentVersion {
    let d = observed.deployments.get(build);
    let reference = |name: &str| ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some("Deployment".into()),
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..Default::default()
    };
    // With worker groups, each group's Deployment; the top-level one stays empty (upstream:
    // it means the default group).
    let groups: Vec<twc_api::WorkerGroupStatus> = d
        .iter()
        .flat_map(|d| d.members.iter())
        .map(|m| twc_api::WorkerGroupStatus {
            name: m.group.clone(),
            deployment: Some(reference(&m.name)),
            healthy_since: m.available_since.and_then(time),
        })
        .collect();
    BaseWorkerDeploymentVersion {
        build_id: build.to_string(),
        status: observed
            .temporal
            .versions
            .get(build)
            .map(|v| v.status)
            .unwrap_or(VersionStatus::NotRegistered),
        healthy_since: d.and_then(|d| d.available_since).and_then(time),
        deployment: d
            .filter(|d| d.members.is_empty())
            .map(|d| reference(&d.name)),
        worker_groups: groups,
        task_queues: Vec::new(),
        managed_by: None,
    }
}

/// The Temporal- and Kubernetes-derived part of the status (no conditions).
fn versions(wd: &WorkerDeployment, target: &str, observed: &Observed) -> WorkerDeploymentStatus {
    let ns = wd.namespace().unwrap_or_default();
    let state = &observed.temporal;
    let mut target_version = TargetWorkerDeploymentVersion {
        base: base(observed, target, &ns),
        ..Default::default()
    };
    if state.current_build_id.as_deref() != Some(target) {
        target_version.base.task_queues = workflow_queues(observed);
        target_version.test_workflows = observed.target.gates.clone();
        if let Some(g) = &observed.target.step_gates {
            target_version.test_workflows.extend(g.runs.iter().cloned());
        }
    }
    if state.ramping_build_id.as_deref() == Some(target) {
        target_version.ramp_percentage = Some(state.ramp_percentage);
        target_version.ramping_since = state.ramping_since.and_then(time);
        target_version.ramp_last_modified_at = state.ramp_changed_at.and_then(time);
    }
    let current = state.current_build_id.as_deref();
    let current_version = current.map(|c| {
        let mut base = base(observed, c, &ns);
        if c == target {
            // The task queues it polls, for the poller-presence check after a restart.
            base.task_queues = workflow_queues(observed);
        }
        CurrentWorkerDeploymentVersion { base }
    });
    let deprecated_versions = observed
        .deployments
        .keys()
        .filter(|b| b.as_str() != target && Some(b.as_str()) != current)
        .map(|b| {
            let base = base(observed, b, &ns);
            let drained = base.status == VersionStatus::Drained;
            let replicas = observed.deployments.get(b).map(|d| d.replicas).unwrap_or(0);
            DeprecatedWorkerDeploymentVersion {
                drained_since: drained
                    .then(|| state.versions.get(b).and_then(|v| v.drainage_changed_at))
                    .flatten()
                    .and_then(time),
                eligible_for_deletion: drained && replicas == 0,
                base,
            }
        })
        .collect();
    WorkerDeploymentStatus {
        target_version: Some(target_version),
        current_version,
        deprecated_versions,
        version_conflict_token: (!state.conflict_token.is_empty())
            .then(|| ByteString(state.conflict_token.clone())),
        last_modifier_identity: Some(state.last_modifier_identity.clone())
            .filter(|s| !s.is_empty()),
        manager_identity: Some(state.manager_identity.clone()).filter(|s| !s.is_empty()),
        version_count: Some(i32::try_from(state.versions.len()).unwrap_or(i32::MAX)),
        ..Default::default()
    }
}

/// The target's workflow task queues, as read.
fn workflow_queues(observed: &Observed) -> Vec<TaskQueue> {
    observed
        .target
        .task_queues
        .iter()
        .filter(|q| q.workflow)
        .map(|q| TaskQueue {
            name: q.name.clone(),
        })
        .collect()
}

/// `(status, reason, message)` of RolledBack: True while the target is a failed build whose
/// new work was routed back, False once it is not (None while it never was True).
fn rolled_back(
    plan: &Plan,
    conditions: &[Condition],
) -> Option<(&'static str, &'static str, String)> {
    match &plan.failure {
        Some(f) if f.rolled_back => Some(("True", f.reason, f.message.clone())),
        _ => conditions.iter().any(|c| c.type_ == ROLLED_BACK).then(|| {
            (
                "False",
                reason::NOT_ROLLED_BACK,
                format!("buildID {} is not rolled back", plan.target_build_id),
            )
        }),
    }
}

/// `(status, reason, message)` of Ready and Progressing for a healthy reconcile.
fn rollout_conditions(
    target: &TargetWorkerDeploymentVersion,
    plan: &Plan,
    pollers: Option<&Pollers>,
) -> [(&'static str, &'static str, &'static str, String); 2] {
    let build = &target.base.build_id;
    let blocked = plan.blocked.as_deref();
    if let Some(f) = &plan.failure {
        // A failed build: no progress until the template changes or a retry.
        let message = format!(
            "{}; it gets no new workflows until the template changes or a retry (annotation {})",
            f.message,
            twc_api::controls::RETRY
        );
        return [
            (READY, "False", f.reason, message.clone()),
            (PROGRESSING, "False", f.reason, message),
        ];
    }
    if let Some(b) = blocked.filter(|_| plan.blocked_by_spec) {
        // Upstream's blocked spec: nothing but a change of the spec clears it.
        return [
            (READY, "False", reason::INVALID_SPEC, b.to_string()),
            (PROGRESSING, "False", reason::INVALID_SPEC, b.to_string()),
        ];
    }
    let (ready, progressing, why, message) = match target.base.status {
        VersionStatus::Current => {
            // Complete; Progressing says whether its workers poll (TWC #448's words).
            let ready = format!("Rollout complete for buildID {build}");
            let (progressing, why, message) = match pollers {
                Some(Pollers::Missing(queues)) => (
                    "True",
                    reason::WAITING_FOR_POLLERS,
                    format!(
                        "Version {build} has no active pollers on task queue(s): {}",
                        queues.join(", ")
                    ),
                ),
                Some(Pollers::SilentGroups(groups)) => (
                    "True",
                    reason::WAITING_FOR_POLLERS,
                    format!(
                        "Version {build} has no active pollers in worker group(s): {} (none of their ready pods is among the version's running workers in Temporal's worker list)",
                        groups.join(", ")
                    ),
                ),
                Some(Pollers::Active) => (
                    "False",
                    reason::ACTIVE_POLLERS,
                    format!("Version {build} has active pollers on all known task queues"),
                ),
                Some(Pollers::Unknown) | None => (
                    "False",
                    reason::POLLER_STATUS_UNKNOWN,
                    format!("Poller status for version {build} could not be determined"),
                ),
            };
            return [
                (READY, "True", reason::ROLLOUT_COMPLETE, ready),
                (PROGRESSING, progressing, why, message),
            ];
        }
        VersionStatus::Ramping => (
            "False",
            "True",
            reason::RAMPING,
            match &plan.step_gate {
                Some(g) => format!(
                    "buildID {build} is ramping at {}%; {g}",
                    target.ramp_percentage.unwrap_or_default()
                ),
                None => format!(
                    "buildID {build} is ramping at {}%",
                    target.ramp_percentage.unwrap_or_default()
                ),
            },
        ),
        VersionStatus::NotRegistered => (
            "False",
            "True",
            reason::WAITING_FOR_POLLERS,
            match (blocked, &plan.waiting) {
                (Some(b), _) => b.to_string(),
                (None, Some(w)) => {
                    format!("waiting for workers of buildID {build} to poll Temporal: {w}")
                }
                (None, None) => format!("waiting for workers of buildID {build} to poll Temporal"),
            },
        ),
        _ => {
            // Upstream's words for a grouped target some of whose groups are not up yet.
            let pending: Vec<&str> = target
                .base
                .worker_groups
                .iter()
                .filter(|g| g.healthy_since.is_none())
                .map(|g| g.name.as_str())
                .collect();
            if pending.is_empty() {
                (
                    "False",
                    "True",
                    reason::WAITING_FOR_PROMOTION,
                    match blocked {
                        Some(b) => format!("buildID {build} is registered; {b}"),
                        None => format!("buildID {build} is registered and waiting for promotion"),
                    },
                )
            } else {
                (
                    "False",
                    "True",
                    reason::WAITING_FOR_POLLERS,
                    format!(
                        "Target version {build} is registered but these groups are not available yet: {}",
                        pending.join(", ")
                    ),
                )
            }
        }
    };
    if plan.controls.paused && progressing == "True" {
        let message = format!(
            "paused by annotation {}: routing stays as it is ({message})",
            twc_api::controls::PAUSED
        );
        return [
            (READY, ready, why, message.clone()),
            (PROGRESSING, "False", reason::PAUSED, message),
        ];
    }
    [
        (READY, ready, why, message.clone()),
        (PROGRESSING, progressing, why, message),
    ]
}

/// `(status, reason, message)` of VersionsKnown: False while some versions are kept as they
/// are, True once they are not (None while it never was False).
fn versions_known(
    plan: &Plan,
    conditions: &[Condition],
) -> Option<(&'static str, &'static str, String)> {
    if plan.kept.is_empty() {
        return conditions
            .iter()
            .any(|c| c.type_ == VERSIONS_KNOWN)
            .then(|| {
                (
                    "True",
                    reason::ALL_VERSIONS_KNOWN,
                    "Temporal accounts for every version that has a Deployment".to_string(),
                )
            });
    }
    let kept: Vec<String> = plan.kept.iter().map(ToString::to_string).collect();
    Some((
        "False",
        reason::VERSIONS_KEPT,
        format!(
            "kept running as they are, neither scaled nor deleted, since their pinned workflows may still need them: {}; delete a version's Deployment once nothing runs on it",
            kept.join("; ")
        ),
    ))
}

/// The reference the controller acted on, in status form.
fn observed_ref(key: &ConnKey) -> ObservedConnectionRef {
    ObservedConnectionRef {
        kind: key.kind.to_string(),
        name: key.name.clone(),
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
