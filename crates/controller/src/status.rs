//! The WorkerDeployment status, computed once per reconcile from what was observed (and the
//! routing change just made), on success and failure paths alike. Pure.

use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use twc_api::conditions::{self as reason, PROGRESSING, READY};
use twc_api::{
    BaseWorkerDeploymentVersion, CurrentWorkerDeploymentVersion, DeprecatedWorkerDeploymentVersion,
    ObservedConnectionRef, TargetWorkerDeploymentVersion, TaskQueue, VersionStatus,
    WorkerDeployment, WorkerDeploymentStatus,
};

use crate::connections::ConnKey;
use crate::plan::Observed;

fn time(t: SystemTime) -> Option<Time> {
    Timestamp::try_from(t).ok().map(Time)
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
pub fn versions(
    wd: &WorkerDeployment,
    target: &str,
    observed: &Observed,
) -> WorkerDeploymentStatus {
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
pub fn rollout_conditions(
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

/// Sets a condition, keeping `lastTransitionTime` when the status did not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: SystemTime,
) {
    let now = time(now).unwrap_or(Time(Timestamp::UNIX_EPOCH));
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
}

/// The reference the controller acted on, in status form.
pub fn observed_ref(key: &ConnKey) -> ObservedConnectionRef {
    ObservedConnectionRef {
        kind: key.kind.to_string(),
        name: key.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn last_transition_time_moves_only_when_the_status_changes() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let t1 = t0 + Duration::from_secs(60);
        let mut cs = Vec::new();
        set_condition(
            &mut cs,
            READY,
            "False",
            "WaitingForPollers",
            "m",
            Some(1),
            t0,
        );
        set_condition(
            &mut cs,
            READY,
            "False",
            "WaitingForPromotion",
            "m2",
            Some(2),
            t1,
        );
        assert_eq!(
            cs[0].last_transition_time,
            Time(Timestamp::try_from(t0).unwrap_or(Timestamp::UNIX_EPOCH))
        );
        assert_eq!(cs[0].reason, "WaitingForPromotion");
        assert_eq!(cs[0].observed_generation, Some(2));
        set_condition(&mut cs, READY, "True", "RolloutComplete", "m3", Some(2), t1);
        assert_eq!(
            cs[0].last_transition_time,
            Time(Timestamp::try_from(t1).unwrap_or(Timestamp::UNIX_EPOCH))
        );
    }
}
