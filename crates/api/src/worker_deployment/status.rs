//! `status`: the versions (target, current, deprecated) with their state in Temporal, gate runs
//! and step analyses; the failed build; the rollout controls acted on; and the conditions.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The verdict of a ramp step's analysis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AnalysisVerdict {
    /// The step goes on; it is counted again.
    #[default]
    Running,
    /// Enough workflows closed on the build, few enough of them failed.
    Passed,
    /// Too many of the workflows closed on the build failed.
    Failed,
    /// The step ended with too few workflows closed on the build to judge; the rollout goes on.
    Inconclusive,
}

impl AnalysisVerdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Running => "Running",
            Self::Passed => "Passed",
            Self::Failed => "Failed",
            Self::Inconclusive => "Inconclusive",
        }
    }
}

impl std::fmt::Display for AnalysisVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a version in Temporal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum VersionStatus {
    #[default]
    NotRegistered,
    Inactive,
    Ramping,
    Current,
    Draining,
    Drained,
}

/// The state of a gate (test) workflow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WorkflowExecutionStatus {
    #[default]
    Running,
    Completed,
    Failed,
    Canceled,
    Terminated,
    TimedOut,
}

/// A gate workflow run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowExecution {
    /// Workflow ID: `test-<deployment name>:<build ID>-<task queue>`.
    #[serde(rename = "workflowID")]
    pub workflow_id: String,
    /// Run ID.
    #[serde(rename = "runID")]
    pub run_id: String,
    /// Execution status.
    pub status: WorkflowExecutionStatus,
    /// Task queue it runs on.
    pub task_queue: String,
}

/// A task queue a version polls.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TaskQueue {
    /// Name of the task queue.
    pub name: String,
}

/// Fields every version entry in the status has.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BaseWorkerDeploymentVersion {
    /// The build ID of this version.
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// The version's state in Temporal: `NotRegistered` (no worker polled yet), `Inactive`,
    /// `Ramping`, `Current`, `Draining` (pinned workflows still open) or `Drained`.
    pub status: VersionStatus,
    /// Since when the version's Deployment is Available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since: Option<Time>,
    /// The version's Deployment (without worker groups; with them, each group's is in
    /// `workerGroups`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<ObjectReference>,
    /// A version with worker groups: each group's Deployment, sorted by group name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub worker_groups: Vec<WorkerGroupStatus>,
    /// Task queues the version's workers poll.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_queues: Vec<TaskQueue>,
    /// Identity managing this version's rollout (kept for compatibility; unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

/// One worker group's Deployment in a version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroupStatus {
    /// The group's name.
    pub name: String,
    /// The group's Deployment in this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<ObjectReference>,
    /// Since when the group's Deployment is Available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since: Option<Time>,
}

/// The version new workflows are meant to go to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetWorkerDeploymentVersion {
    #[serde(flatten)]
    pub base: BaseWorkerDeploymentVersion,
    /// Gate workflows run on this version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_workflows: Vec<WorkflowExecution>,
    /// Percentage of new workflows routed to this version while it ramps (0 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub ramp_percentage: Option<f32>,
    /// When the version started ramping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramping_since: Option<Time>,
    /// When the ramp percentage last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_last_modified_at: Option<Time>,
    /// What the analysis found at each ramp step of this build.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analysis: Vec<StepAnalysis>,
    /// When this build became the target; the progress deadline counts from here (a retry or
    /// a resume starts it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_since: Option<Time>,
}

/// What the analysis found at one ramp step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepAnalysis {
    /// The step's index in `spec.rollout.steps`, from 0; the number of steps for the window
    /// after promotion.
    pub step: i32,
    /// The step's ramp percentage (100 after promotion).
    pub ramp_percentage: i32,
    /// Workflows closed on the build since the step began.
    pub closed: i64,
    /// Of those, how many failed, timed out or were terminated.
    pub failed: i64,
    /// `failed` as a whole percentage of `closed` (0 when nothing closed).
    #[serde(default)]
    pub failed_percent: i64,
    /// `Running` (the step goes on), `Passed`, `Failed` or `Inconclusive` (too few closed).
    pub verdict: AnalysisVerdict,
    /// When it was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<Time>,
}

/// The version that currently receives new workflows.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct CurrentWorkerDeploymentVersion {
    #[serde(flatten)]
    pub base: BaseWorkerDeploymentVersion,
}

/// A version that is neither current nor target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeprecatedWorkerDeploymentVersion {
    #[serde(flatten)]
    pub base: BaseWorkerDeploymentVersion,
    /// When the version became drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained_since: Option<Time>,
    /// Drained and without running workers, so it can be deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eligible_for_deletion: bool,
}

/// The connection the controller last acted on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedConnectionRef {
    /// `Connection` or `ClusterConnection`.
    pub kind: String,
    /// Name of the connection object.
    pub name: String,
}

/// The observed state of a WorkerDeployment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerDeploymentStatus {
    /// The version new workflows should move to (from the current pod template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_version: Option<TargetWorkerDeploymentVersion>,
    /// The version Temporal currently routes new workflows to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<CurrentWorkerDeploymentVersion>,
    /// Versions with a Deployment that are neither current nor target, sorted by build ID.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deprecated_versions: Vec<DeprecatedWorkerDeploymentVersion>,
    /// Temporal's conflict token for the worker deployment's routing config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::bytes")]
    pub version_conflict_token: Option<ByteString>,
    /// Identity of the last client that changed the worker deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modifier_identity: Option<String>,
    /// Identity with exclusive rights to change routing; when another client holds it, the
    /// controller does not change routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager_identity: Option<String>,
    /// Number of versions Temporal knows for this worker deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub version_count: Option<i32>,
    /// How many times a changed pod template got the build ID of a different template already
    /// running (the hash has 10,000 values per image). When set, it is mixed into the hash of
    /// every template from then on, as a Deployment's `collisionCount` is into its
    /// pod-template-hash, so a changed template always gets a build ID of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub collision_count: Option<i32>,
    /// The `metadata.generation` the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The connection the controller last acted on; when `connectionRef` changes, the old
    /// connection is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_connection_ref: Option<ObservedConnectionRef>,
    /// The target build that failed, if it did: it gets no new workflows until the template
    /// changes (a new build) or a retry is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_version: Option<FailedVersion>,
    /// The rollout controls (annotations) as the controller last acted on them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controls: Option<RolloutControls>,
    /// Versions whose workers wait to restart with renewed credential Secrets, and why: the
    /// controller restarts at most `--restart-pace` versioned Deployments at once per Temporal
    /// address and namespace, and the current and target versions after the others. Empty
    /// when none waits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarts_waiting: Vec<WaitingRestart>,
    /// The phases of the last rollout (of the target version) with the time each was
    /// reached, for seeing where a rollout's seconds go. `twc status` prints them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rollout: Option<RolloutTimeline>,
    /// Latest observations (`Ready`, `Progressing`, `RolledBack`, `VersionsKnown`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// When each phase of a rollout was reached (microseconds). A phase not reached yet, or
/// not seen by this controller (reached before it took over), is absent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutTimeline {
    /// The build ID rolled out.
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// The version that was current when the rollout began, if any.
    #[serde(
        default,
        rename = "previousBuildID",
        skip_serializing_if = "Option::is_none"
    )]
    pub previous_build_id: Option<String>,
    /// When the controller first planned this build as the target (the changed template seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_seen: Option<MicroTime>,
    /// When the controller saw the build's versioned Deployment written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_written: Option<MicroTime>,
    /// When the controller first saw a replica of the build available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_ready: Option<MicroTime>,
    /// When the first worker of the build polled: the version's creation time in Temporal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_poller: Option<MicroTime>,
    /// When the controller first read the version registered in Temporal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered: Option<MicroTime>,
    /// When the version began to ramp (Progressive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramping: Option<MicroTime>,
    /// When the version became current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted: Option<MicroTime>,
    /// When the previous version was drained (its pinned workflows done), as Temporal says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_drained: Option<MicroTime>,
}

impl RolloutTimeline {
    /// The phases in their order, with their names as `twc status` shows them.
    pub fn phases(&self) -> [(&'static str, Option<&MicroTime>); 8] {
        [
            ("spec seen", self.spec_seen.as_ref()),
            ("Deployment written", self.deployment_written.as_ref()),
            ("pods ready", self.pods_ready.as_ref()),
            ("first poller", self.first_poller.as_ref()),
            ("registered", self.registered.as_ref()),
            ("ramping", self.ramping.as_ref()),
            ("promoted", self.promoted.as_ref()),
            ("previous drained", self.previous_drained.as_ref()),
        ]
    }
}

/// A version whose workers wait to restart with renewed credential Secrets.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitingRestart {
    /// The versioned Deployment.
    pub deployment: String,
    /// Its build ID.
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// Why it waits.
    pub message: String,
}

/// A target build that failed its rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedVersion {
    /// The build ID that failed.
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// Why: `ProgressDeadlineExceeded`, `WorkersCrashLooping`, `AnalysisFailed` or `Aborted`.
    pub reason: String,
    /// What was seen, for people.
    pub message: String,
    /// When it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<Time>,
    /// Whether new workflows had been routed to it and were routed back (its ramp cleared, or
    /// the previous current version restored).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rolled_back: bool,
}

/// The rollout controls as last acted on; see the `temporal.io/rollout-paused`,
/// `temporal.io/promote`, `temporal.io/abort` and `temporal.io/retry` annotations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutControls {
    /// Whether routing changes are paused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// The build last promoted on request (the `temporal.io/promote` annotation).
    #[serde(
        default,
        rename = "promotedBuildID",
        skip_serializing_if = "Option::is_none"
    )]
    pub promoted_build_id: Option<String>,
    /// The last `temporal.io/abort` value acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<String>,
    /// The last `temporal.io/retry` value acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
}
