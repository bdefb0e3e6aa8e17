//! What a reconcile observed, as plain values: the versioned Deployments (one view, built
//! straight from the watch cache), the worker deployment's state in Temporal, what was read
//! about the target version, the target's pods' troubles, and how long a read may be reused.
//!
//! A leaf: `plan`, `temporal` and `workerdeployment` import it; it imports none of them.

pub mod state;

use std::collections::BTreeMap;
use std::time::SystemTime;

use twc_api::WorkflowExecution;

pub use state::{DeploymentState, Listed, RoutingMark, VersionInfo};

/// A versioned Deployment as the watch cache keeps it (see `children::CachedDeployment`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedDeployment {
    pub name: String,
    pub build_id: String,
    /// Its worker group (`temporal.io/worker-group`; `default` without the label).
    pub group: String,
    /// `spec.replicas` (None when an autoscaler owns it and it was never set).
    pub spec_replicas: Option<i32>,
    /// `status.replicas`.
    pub replicas: i32,
    /// `status.readyReplicas`: pods whose workers are up.
    pub ready_replicas: i32,
    /// `status.availableReplicas`.
    pub available_replicas: i32,
    /// Since when `Available` is True; None when not available.
    pub available_since: Option<SystemTime>,
    /// Since when `Available` is False; None when it is True or not reported.
    pub unavailable_since: Option<SystemTime>,
    pub connection_hash: Option<String>,
    /// How its pods authenticate to Temporal, as rendered in its pod template
    /// (`plan::deployment::auth_fingerprint`); None when not read.
    pub auth: Option<String>,
    pub template_digest: Option<String>,
    /// The digest of the credential Secrets' content its pods started with, as recorded on
    /// the Deployment (None: not recorded, as on a Deployment TWC created).
    pub credentials_digest: Option<String>,
    /// The Temporal namespace its workers poll (`TEMPORAL_NAMESPACE` as rendered); None when
    /// not known.
    pub temporal_namespace: Option<String>,
    /// `TEMPORAL_ADDRESS` as rendered; None when not known.
    pub temporal_address: Option<String>,
    /// `TEMPORAL_TLS_SERVER_NAME` as rendered; None when not set.
    pub tls_server_name: Option<String>,
    /// `metadata.generation` and `status.observedGeneration`.
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// `status.updatedReplicas`: pods of its current pod template.
    pub updated_replicas: i32,
    /// When the controller last restarted its pods for changed credentials (recorded on the
    /// Deployment); None when it never did.
    pub restarted_at: Option<SystemTime>,
    /// When its oldest live pod was created (read only for a Deployment without a recorded
    /// credentials digest; None: not read, or no pod).
    pub oldest_pod: Option<SystemTime>,
    /// When the client certificate its pods started with expires, as recorded with
    /// `credentials_digest` (mutual TLS; None when not recorded).
    pub credentials_not_after: Option<SystemTime>,
    /// `spec.strategy` as stored (the apiserver fills `apps/v1`'s defaults).
    pub strategy: Option<k8s_openapi::api::apps::v1::DeploymentStrategy>,
    /// `spec.minReadySeconds`, `spec.progressDeadlineSeconds` and `spec.revisionHistoryLimit`
    /// as stored.
    pub min_ready_seconds: Option<i32>,
    pub progress_deadline_seconds: Option<i32>,
    pub revision_history_limit: Option<i32>,
    /// The object this view was taken from (`metadata.uid`, `metadata.resourceVersion`): a
    /// destructive write carries them as preconditions, so a plan made from an older view
    /// cannot delete or scale down a Deployment that changed since.
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// A version with worker groups: each group's Deployment, by group name; this value is
    /// then the version as a whole ([`ObservedDeployment::version`]). Empty for a version
    /// of one Deployment without the group label.
    pub members: Vec<ObservedDeployment>,
}

impl ObservedDeployment {
    /// Every Deployment of the version: each group's, or this one.
    pub fn each(&self) -> impl Iterator<Item = &ObservedDeployment> {
        let alone = self.members.is_empty().then_some(self);
        alone.into_iter().chain(self.members.iter())
    }

    /// A version made of several Deployments (its worker groups'), as one: its counts are the
    /// groups' sums; it is available only while every group is (since the latest of them
    /// became so) and unavailable since the first group was; it has rolled out only when
    /// every group has; everything else (its connection, credentials, name) is the first
    /// group's, and what is per Deployment is read through [`Self::each`]. One Deployment
    /// without the group label is the version itself.
    pub fn version(mut members: Vec<ObservedDeployment>) -> ObservedDeployment {
        members.sort_by(|a, b| a.group.cmp(&b.group));
        if members.len() == 1 && members[0].group == twc_api::DEFAULT_GROUP {
            return members.remove(0);
        }
        let Some(first) = members.first() else {
            return ObservedDeployment::default();
        };
        let sum = |f: fn(&ObservedDeployment) -> i32| members.iter().map(f).sum::<i32>();
        let all_rolled = members.iter().all(|m| {
            m.generation
                .is_some_and(|g| m.observed_generation.is_some_and(|o| o >= g))
        });
        let mut version = ObservedDeployment {
            spec_replicas: members.iter().map(|m| m.spec_replicas).sum::<Option<i32>>(),
            replicas: sum(|m| m.replicas),
            ready_replicas: sum(|m| m.ready_replicas),
            available_replicas: sum(|m| m.available_replicas),
            updated_replicas: sum(|m| m.updated_replicas),
            available_since: members
                .iter()
                .map(|m| m.available_since)
                .collect::<Option<Vec<_>>>()
                .and_then(|t| t.into_iter().max()),
            unavailable_since: members.iter().filter_map(|m| m.unavailable_since).min(),
            observed_generation: if all_rolled {
                first.observed_generation
            } else {
                None
            },
            oldest_pod: members.iter().filter_map(|m| m.oldest_pod).min(),
            members: Vec::new(),
            ..first.clone()
        };
        version.members = members;
        version
    }
}

/// Everything the planner looks at.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The time the plan is made for (every delay and pause is measured against it).
    pub now: SystemTime,
    /// Owned versioned Deployments by build ID.
    pub deployments: BTreeMap<String, ObservedDeployment>,
    pub temporal: DeploymentState,
    /// What was read about the target version while it is registered and not current.
    pub target: TargetObserved,
    /// The worker groups (`default` without groups) whose Deployments a
    /// WorkerResourceTemplate scales (an HPA): it owns their replicas.
    pub autoscaled: std::collections::BTreeSet<String>,
    /// The target's containers that are not ready and say why (listed only while its pods
    /// are not all ready).
    pub target_pods: Vec<PodTrouble>,
    /// When the target's pods are listed again, while they are being looked at.
    pub pods_due: Option<SystemTime>,
    /// Whether the target's task queues have active pollers, looked at once it is current
    /// (None: not looked at).
    pub pollers: Option<Pollers>,
    /// The digest of the credential Secrets' content as the connection reads them now (None:
    /// the connection names no Secret, or it was not read).
    pub secrets_digest: Option<String>,
    /// When the client certificate of that content expires (mutual TLS).
    pub secrets_not_after: Option<SystemTime>,
    /// When that content was last written, as the apiserver records it (None: not known).
    pub secrets_written_at: Option<SystemTime>,
}

/// Whether a current version's task queues have active pollers (TWC #448).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pollers {
    /// Every task queue it is known to poll has a running worker.
    Active,
    /// These task queues have none (sorted).
    Missing(Vec<String>),
    /// Its task queues have pollers, but these worker groups' ready pods are none of them
    /// among its running workers in Temporal's worker list (sorted).
    SilentGroups(Vec<String>),
    /// It could not be told (a failed read, or no task queue known yet): never "missing".
    Unknown,
}

/// A container of the target's pods that is not ready, with the kubelet's reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodTrouble {
    pub pod: String,
    pub container: String,
    /// `CrashLoopBackOff`, `ErrImagePull`, `CreateContainerConfigError`, `Error`, ...
    pub reason: String,
    pub message: String,
    pub restarts: i32,
}

impl std::fmt::Display for PodTrouble {
    /// "pod p container c: CrashLoopBackOff (3 restarts): back-off ...".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pod {} container {}: {}",
            self.pod, self.container, self.reason
        )?;
        if self.restarts > 0 {
            write!(f, " ({} restarts)", self.restarts)?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl Observed {
    /// Nothing observed yet, at `now`.
    pub fn at(now: SystemTime) -> Self {
        Self {
            now,
            deployments: BTreeMap::new(),
            temporal: DeploymentState::default(),
            target: TargetObserved::default(),
            autoscaled: Default::default(),
            target_pods: Vec::new(),
            pods_due: None,
            pollers: None,
            secrets_digest: None,
            secrets_not_after: None,
            secrets_written_at: None,
        }
    }
}

/// The target version beyond `DescribeWorkerDeployment` (the planner's `needs` says when each
/// is read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TargetObserved {
    /// The task queues the target polls.
    pub task_queues: Vec<TaskQueueRef>,
    /// Its gate workflow runs, one per workflow task queue once started.
    pub gates: Vec<WorkflowExecution>,
    /// Whether every task queue still has an unversioned poller (a first rollout from
    /// unversioned workers); None when not known (yet).
    pub unversioned_pollers: Option<bool>,
    /// The workflows closed on the target since its ramp step began, when it ramps with an
    /// analysis configured.
    pub analysis: Option<Counted>,
    /// The gate runs of the ramp step the target is at, when that step has a gate.
    pub step_gates: Option<StepGates>,
    /// Superseded versions that never served (Inactive, not the target, scaled to 0) on
    /// which visibility counted no running workflow: they may be retired. One whose count
    /// failed or found workflows is not here.
    pub idle_inactive: Vec<String>,
}

/// The gate runs of one ramp step, one per workflow task queue once started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepGates {
    /// The step, counted from 0.
    pub step: usize,
    pub runs: Vec<WorkflowExecution>,
}

/// Workflows closed on a build since a time, as visibility counts them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    pub since: Option<SystemTime>,
    pub closed: i64,
    pub failed: i64,
}

/// A task queue a version polls, and whether it is a workflow (else activity) queue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaskQueueRef {
    pub name: String,
    pub workflow: bool,
}

/// Whether a state read may be reused at the next reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// Read again.
    Never,
    /// Reused while the namespace's listing agrees, until the time if there is one.
    Until(Option<SystemTime>),
}

#[cfg(test)]
mod version_tests {
    use super::*;
    use std::time::Duration;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    fn group(name: &str, replicas: Option<i32>, since: Option<SystemTime>) -> ObservedDeployment {
        ObservedDeployment {
            name: format!("w-{name}-b1-abcd1234"),
            build_id: "b1".into(),
            group: name.into(),
            spec_replicas: replicas,
            replicas: replicas.unwrap_or(1),
            ready_replicas: replicas.unwrap_or(1),
            available_replicas: replicas.unwrap_or(1),
            available_since: since,
            unavailable_since: since.is_none().then(|| at(5)),
            generation: Some(2),
            observed_generation: Some(2),
            ..Default::default()
        }
    }

    /// A version with groups is available only while every group is, since the last became
    /// so; its counts are the sums; it rolled out only when each group did; each group's
    /// Deployment stays reachable, sorted by group.
    #[test]
    fn a_grouped_version_is_as_healthy_as_its_least_healthy_group() {
        let v = ObservedDeployment::version(vec![
            group("workflows", Some(2), Some(at(10))),
            group("activities", Some(3), Some(at(20))),
        ]);
        assert_eq!(v.available_since, Some(at(20)));
        assert_eq!((v.spec_replicas, v.ready_replicas), (Some(5), 5));
        assert_eq!(
            v.name, "w-activities-b1-abcd1234",
            "the first group by name"
        );
        let names: Vec<&str> = v.each().map(|m| m.group.as_str()).collect();
        assert_eq!(names, ["activities", "workflows"]);
        assert_eq!(v.observed_generation, Some(2));

        let mut rolling = group("workflows", None, None);
        rolling.observed_generation = Some(1);
        let v =
            ObservedDeployment::version(vec![group("activities", Some(3), Some(at(20))), rolling]);
        assert_eq!(v.available_since, None, "one group is not available");
        assert_eq!(v.unavailable_since, Some(at(5)));
        assert_eq!(
            v.spec_replicas, None,
            "an autoscaled group: no count for the version"
        );
        assert_eq!(v.observed_generation, None, "not every group rolled out");
    }

    #[test]
    fn one_deployment_without_a_group_is_the_version() {
        let alone = group(twc_api::DEFAULT_GROUP, Some(2), Some(at(1)));
        let v = ObservedDeployment::version(vec![alone.clone()]);
        assert_eq!(v, alone);
        assert_eq!(v.each().count(), 1);
    }
}
