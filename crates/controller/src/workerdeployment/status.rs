//! The WorkerDeployment's status: a pure function of what was observed, the plan and what
//! execution did ([`Applied`]), or of the previous status and the error that stopped the
//! reconcile. Computed once per reconcile, on failure paths too, and written once.

use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use twc_api::conditions::{self as reason, PROGRESSING, READY};
use twc_api::{
    BaseWorkerDeploymentVersion, CurrentWorkerDeploymentVersion, DeprecatedWorkerDeploymentVersion,
    ObservedConnectionRef, TargetWorkerDeploymentVersion, TaskQueue, VersionStatus,
    WorkerDeployment, WorkerDeploymentStatus,
};

use super::execute::{Applied, Done};
use crate::conditions::{set_condition, time};
use crate::connections::ConnKey;
use crate::error::{Error, Verdict};
use crate::plan::{Observed, Plan};
use crate::temporal::DeploymentState;

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
    let mut status = match outcome {
        Outcome::Executed {
            observed,
            plan,
            applied,
        } => {
            let after = effective(observed, applied, identity);
            let mut s = versions(wd, &plan.target_build_id, &after);
            s.conditions = previous.conditions.clone();
            let target = s.target_version.clone().unwrap_or_default();
            for (type_, st, why, msg) in rollout_conditions(&target, plan.blocked.as_deref()) {
                set_condition(&mut s.conditions, type_, st, why, &msg, generation, now);
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
    status.observed_generation = generation;
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
    for done in &applied.done {
        let state = &mut o.temporal;
        match done {
            Done::DeletedDeployment { deployment } => {
                o.deployments.retain(|_, d| d.name != *deployment);
            }
            Done::GateStarted(run) => o.target.gates.push(run.clone()),
            Done::DeletedVersion { build } => {
                state.versions.remove(build);
            }
            Done::ClaimedManager => state.manager_identity = identity.to_string(),
            Done::Promoted { build } => {
                promote(state, build, now);
                state.last_modifier_identity = identity.to_string();
            }
            Done::Ramped { build, percentage } => {
                state.ramping_build_id = Some(build.clone());
                state.ramp_percentage = *percentage;
                state.ramp_changed_at = Some(now);
                if let Some(v) = state.versions.get_mut(build) {
                    v.status = VersionStatus::Ramping;
                }
                state.last_modifier_identity = identity.to_string();
            }
            Done::RampCleared => {
                state.ramping_build_id = None;
                state.ramp_percentage = 0.0;
                state.last_modifier_identity = identity.to_string();
            }
            Done::Created { .. }
            | Done::Applied { .. }
            | Done::Reconnected { .. }
            | Done::Scaled { .. }
            | Done::GateStartFailed { .. } => {}
        }
    }
    o
}

/// A successful SetCurrent of `build` at `now`: the old current version drains.
fn promote(state: &mut DeploymentState, build: &str, now: SystemTime) {
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
    BaseWorkerDeploymentVersion {
        build_id: build.to_string(),
        status: observed
            .temporal
            .versions
            .get(build)
            .map(|v| v.status)
            .unwrap_or(VersionStatus::NotRegistered),
        healthy_since: d.and_then(|d| d.available_since).and_then(time),
        deployment: d.map(|d| ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            name: Some(d.name.clone()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        }),
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
        target_version.base.task_queues = observed
            .target
            .task_queues
            .iter()
            .filter(|q| q.workflow)
            .map(|q| TaskQueue {
                name: q.name.clone(),
            })
            .collect();
        target_version.test_workflows = observed.target.gates.clone();
    }
    if state.ramping_build_id.as_deref() == Some(target) {
        target_version.ramp_percentage = Some(state.ramp_percentage);
        target_version.ramping_since = state.ramping_since.and_then(time);
        target_version.ramp_last_modified_at = state.ramp_changed_at.and_then(time);
    }
    let current = state.current_build_id.as_deref();
    let current_version = current.map(|c| CurrentWorkerDeploymentVersion {
        base: base(observed, c, &ns),
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

/// `(status, reason, message)` of Ready and Progressing for a healthy reconcile.
fn rollout_conditions(
    target: &TargetWorkerDeploymentVersion,
    blocked: Option<&str>,
) -> [(&'static str, &'static str, &'static str, String); 2] {
    let build = &target.base.build_id;
    let (ready, progressing, why, message) = match target.base.status {
        VersionStatus::Current => (
            "True",
            "False",
            reason::ROLLOUT_COMPLETE,
            format!("Rollout complete for buildID {build}"),
        ),
        VersionStatus::Ramping => (
            "False",
            "True",
            reason::RAMPING,
            format!(
                "buildID {build} is ramping at {}%",
                target.ramp_percentage.unwrap_or_default()
            ),
        ),
        VersionStatus::NotRegistered => (
            "False",
            "True",
            reason::WAITING_FOR_POLLERS,
            match blocked {
                Some(b) => b.to_string(),
                None => format!("waiting for workers of buildID {build} to poll Temporal"),
            },
        ),
        _ => (
            "False",
            "True",
            reason::WAITING_FOR_PROMOTION,
            match blocked {
                Some(b) => format!("buildID {build} is registered; {b}"),
                None => format!("buildID {build} is registered and waiting for promotion"),
            },
        ),
    };
    [
        (READY, ready, why, message.clone()),
        (PROGRESSING, progressing, why, message),
    ]
}

/// The reference the controller acted on, in status form.
fn observed_ref(key: &ConnKey) -> ObservedConnectionRef {
    ObservedConnectionRef {
        kind: key.kind.to_string(),
        name: key.name.clone(),
    }
}
