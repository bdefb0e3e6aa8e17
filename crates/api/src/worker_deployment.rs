//! `WorkerDeployment`: a pod template that becomes one Temporal Worker Deployment Version (and
//! one versioned Deployment) per distinct template, with a rollout and a sunset strategy.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, ObjectReference, PodTemplateSpec, SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a WorkerDeployment.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "temporal.io",
    version = "v1alpha1",
    kind = "WorkerDeployment",
    namespaced,
    status = "WorkerDeploymentStatus",
    derive = "Default",
    derive = "PartialEq",
    shortname = "wd",
    shortname = "wdeployment",
    doc = "WorkerDeployment runs Temporal workers from a pod template. Each distinct template becomes a Temporal Worker Deployment Version (a build ID) with its own Deployment; new workflows move to the target version by the rollout strategy, and drained versions are scaled down and deleted by the sunset strategy.",
    printcolumn(name = "Current", type_ = "string", json_path = ".status.currentVersion.buildID", description = "Current build ID"),
    printcolumn(name = "Target", type_ = "string", json_path = ".status.targetVersion.buildID", description = "Target build ID"),
    printcolumn(name = "Ramp %", type_ = "number", json_path = ".status.targetVersion.rampPercentage", description = "Ramp percentage"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the target version is current"),
    printcolumn(name = "Connection", type_ = "string", json_path = ".spec.workerOptions.connectionRef..name", description = "The Connection or ClusterConnection it uses"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason", description = "Why it is (not) ready"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp", description = "Age"),
    validation = Rule::new("size(self.metadata.name) <= 63").message("name cannot be more than 63 characters")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkerDeploymentSpec {
    /// Number of desired pods for the active versions (current and target). When omitted, the
    /// controller creates versioned Deployments without replicas and never scales active
    /// versions, so an HPA or KEDA can own them; drained versions and inactive versions that are
    /// not the target are still scaled to zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// The pods each version runs. The controller adds the Temporal connection environment
    /// variables (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_DEPLOYMENT_NAME,
    /// TEMPORAL_WORKER_BUILD_ID, and TLS or API-key settings) to every container. Any change
    /// to the template makes a new version, unless `workerOptions.unsafeCustomBuildID` is set.
    pub template: PodTemplateSpec,

    /// Minimum number of seconds a new pod must be ready, without any container crashing, to
    /// count as available. Copied to each versioned Deployment.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: i32,

    /// How long, in seconds, the target version may take to have its workers ready and polling
    /// Temporal. Past it the rollout fails: `Progressing=False` with reason
    /// `ProgressDeadlineExceeded` and a Warning naming what is missing, and the build is not
    /// promoted until the template changes or a retry is asked for (annotation
    /// `temporal.io/retry`). During a ramp, how long the target's Deployment may stay
    /// unavailable before new workflows are routed back. Counted from when the build became
    /// the target (not while the rollout is paused). 0 or less: no deadline. Default 600. The
    /// versioned Deployments keep the Kubernetes default of their own.
    #[serde(
        default = "default_progress_deadline",
        skip_serializing_if = "Option::is_none"
    )]
    pub progress_deadline_seconds: Option<i32>,

    /// How new workflow executions move to the target version.
    pub rollout: RolloutStrategy,

    /// How versions are retired once drained.
    #[serde(default)]
    pub sunset: SunsetStrategy,

    /// How workers connect to Temporal.
    pub worker_options: WorkerOptions,
}

fn default_progress_deadline() -> Option<i32> {
    Some(600)
}

/// How the worker pods connect to Temporal.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerOptions {
    /// The connection to Temporal: either `name` (a Connection in this namespace, as in TWC)
    /// or `objectRef` (a Connection or a ClusterConnection).
    pub connection_ref: ConnectionReference,

    /// The Temporal namespace the workers poll.
    #[schemars(length(min = 1))]
    pub temporal_namespace: String,

    /// Overrides the build ID computed from the pod template. A template change under the same
    /// build ID rolls the existing Deployment in place instead of creating a new version.
    /// Unsafe: if workflow code changes while this stays the same, pinned workflows may run on
    /// incompatible code.
    #[serde(
        default,
        rename = "unsafeCustomBuildID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^[a-zA-Z0-9]([a-zA-Z0-9._-]*[a-zA-Z0-9])?$")
    )]
    pub unsafe_custom_build_id: Option<String>,
}

/// A reference to the connection a WorkerDeployment uses, in the style of
/// `TypedObjectReference`. Set exactly one of `name` and `objectRef`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.name) || has(self.objectRef)")
        .message("connectionRef needs either name (a Connection in this namespace) or objectRef (a Connection or ClusterConnection)"),
    validation = Rule::new("!(has(self.name) && has(self.objectRef))")
        .message("connectionRef.name and connectionRef.objectRef are mutually exclusive: set only one")
)]
pub struct ConnectionReference {
    /// Name of a Connection in the WorkerDeployment's namespace (the TWC form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: Option<String>,

    /// A typed reference to a Connection in the WorkerDeployment's namespace or to a
    /// cluster-scoped ClusterConnection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ConnectionObjectReference>,
}

/// A typed reference to a Connection or ClusterConnection.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionObjectReference {
    /// API group of the referenced object; only `temporal.io` is supported.
    #[serde(default = "default_api_group")]
    #[x_kube(validation = Rule::new("self == 'temporal.io'").message("objectRef.apiGroup must be temporal.io"))]
    pub api_group: String,

    /// Kind of the referenced object: `Connection` (in the WorkerDeployment's namespace) or
    /// `ClusterConnection` (cluster-scoped).
    #[x_kube(validation = Rule::new("self == 'Connection' || self == 'ClusterConnection'").message("objectRef.kind must be Connection or ClusterConnection"))]
    pub kind: String,

    /// Name of the referenced object.
    #[schemars(length(max = 253), regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
}

fn default_api_group() -> String {
    crate::GROUP.to_string()
}

/// The two kinds a connection reference may name.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum ConnectionKind {
    Connection,
    ClusterConnection,
}

impl ConnectionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionKind::Connection => "Connection",
            ConnectionKind::ClusterConnection => "ClusterConnection",
        }
    }
}

impl std::fmt::Display for ConnectionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ConnectionReference {
    /// The referenced kind and name, normalising the legacy `name` form to a Connection.
    /// `None` if the reference is malformed (the CRD's validation prevents that).
    pub fn target(&self) -> Option<(ConnectionKind, &str)> {
        match (&self.name, &self.object_ref) {
            (Some(name), None) => Some((ConnectionKind::Connection, name.as_str())),
            (None, Some(r)) if r.api_group == crate::GROUP => match r.kind.as_str() {
                "Connection" => Some((ConnectionKind::Connection, r.name.as_str())),
                "ClusterConnection" => Some((ConnectionKind::ClusterConnection, r.name.as_str())),
                _ => None,
            },
            _ => None,
        }
    }
}

/// The strategies for routing new workflows to a new version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutStrategyKind {
    #[default]
    Manual,
    AllAtOnce,
    Progressive,
}

/// How to roll out new workflow executions to the target version.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.strategy != 'Progressive' || (has(self.steps) && size(self.steps) > 0)")
        .message("steps are required for Progressive rollout"),
    validation = Rule::new("!has(self.gate) || !has(self.gate.inputFrom) || (has(self.gate.inputFrom.configMapKeyRef) != has(self.gate.inputFrom.secretKeyRef))")
        .message("exactly one of configMapKeyRef or secretKeyRef must be set"),
    validation = Rule::new("!has(self.steps) || self.steps.map(s, s.rampPercentage).isSorted() && self.steps.all(s, self.steps.exists_one(t, t.rampPercentage == s.rampPercentage))")
        .message("steps[].rampPercentage must be strictly increasing from one step to the next")
)]
pub struct RolloutStrategy {
    /// `Manual` scales versions but never changes routing (promote by hand). `AllAtOnce`
    /// sends all new workflows to the new version once it is healthy. `Progressive` ramps the
    /// share of new workflows through `steps`, then promotes; with no current version, and not
    /// every task queue served by unversioned workers, it promotes at once instead.
    pub strategy: RolloutStrategyKind,

    /// A workflow that must run to completion on the new version, pinned to it, before the
    /// version gets any traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateWorkflowConfig>,

    /// Judge the new version by its own workflows: at every step of a Progressive rollout,
    /// and after promotion for `afterPromotion`, the workflows that closed on the new build
    /// since the step began (or since it became current), counted by Temporal's visibility.
    /// Too many failed, timed out or terminated ones take new work away from it at once
    /// (reason `AnalysisFailed`) and mark it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisConfig>,

    /// The ramp steps of a Progressive rollout, at most 20, with strictly increasing
    /// percentages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub steps: Vec<RolloutStep>,
}

/// How a ramping version is judged.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisConfig {
    /// The highest share, in percent, of the workflows closed on the new version in a step
    /// that may have failed, timed out or been terminated. Default 10.
    #[serde(default = "default_max_failure_percent")]
    #[schemars(range(min = 0, max = 100))]
    pub max_failure_percent: i32,

    /// How many workflows must have closed on the new version in a step for a verdict; with
    /// fewer, the step is inconclusive and the rollout goes on. Default 10.
    #[serde(default = "default_min_samples")]
    #[schemars(range(min = 1))]
    pub min_samples: i32,

    /// How long to keep judging the build once it is current, as a duration such as `10m`,
    /// with any strategy but Manual (an AllAtOnce promotion, or a Progressive rollout's last
    /// step): too many failures in that window give new work back to the version current
    /// before it. Unset: not judged after promotion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_promotion: Option<String>,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            max_failure_percent: default_max_failure_percent(),
            min_samples: default_min_samples(),
            after_promotion: None,
        }
    }
}

fn default_max_failure_percent() -> i32 {
    10
}

fn default_min_samples() -> i32 {
    10
}

/// One step of a Progressive rollout.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("duration(self.pauseDuration) >= duration('30s')")
        .message("pause duration must be at least 30s"),
    validation = Rule::new("!has(self.gate) || !has(self.gate.inputFrom) || (has(self.gate.inputFrom.configMapKeyRef) != has(self.gate.inputFrom.secretKeyRef))")
        .message("exactly one of configMapKeyRef or secretKeyRef must be set")
)]
pub struct RolloutStep {
    /// Percentage of new workflow executions routed to the new version during this step,
    /// from 1 to 99.
    #[schemars(range(min = 1, max = 99))]
    pub ramp_percentage: i32,

    /// How long to stay at this step before the next one, as a duration such as `30s`, `5m`
    /// or `1h`; at least 30s.
    pub pause_duration: String,

    /// Not in TWC: a workflow that must complete on the new version, pinned to it, before
    /// the rollout moves on from this step. It starts when the step begins, once on each of
    /// the version's workflow task queues, so it sees the traffic of the step; the step lasts
    /// until both its pause is over and the gate completed. A gate that fails, times out or
    /// is terminated takes new work away from the version at once (reason `StepGateFailed`)
    /// and marks it failed; after a retry, it runs again under a new workflow ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateWorkflowConfig>,
}

/// A gate workflow.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GateWorkflowConfig {
    /// The workflow type to start on the new version.
    #[schemars(length(min = 1))]
    pub workflow_type: String,

    /// Any JSON value, passed as the gate workflow's first argument. Use `inputFrom` with a
    /// Secret for input that must not be logged. Mutually exclusive with `inputFrom`; since a
    /// free-form value is invisible to CRD validation rules, the controller checks this and
    /// reports `InvalidSpec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_json")]
    pub input: Option<serde_json::Value>,

    /// A ConfigMap or Secret key in the WorkerDeployment's namespace whose value (a JSON
    /// document) is passed as the gate workflow's first argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_from: Option<GateInputSource>,
}

/// Where a gate workflow's input comes from; exactly one of the two.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GateInputSource {
    /// A key of a ConfigMap in the WorkerDeployment's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeySelector>,

    /// A key of a Secret in the WorkerDeployment's namespace; its value is never logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeySelector>,
}

/// How versions are retired once drained.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.scaledownDelay) || duration(self.scaledownDelay) >= duration('0s')")
        .message("scaledownDelay must be a non-negative duration such as 30m or 1h"),
    validation = Rule::new("!has(self.deleteDelay) || duration(self.deleteDelay) >= duration('0s')")
        .message("deleteDelay must be a non-negative duration such as 1h or 24h")
)]
pub struct SunsetStrategy {
    /// How long after a version is drained to scale its Deployment to zero. Default `1h`.
    #[serde(default = "default_scaledown", skip_serializing_if = "Option::is_none")]
    pub scaledown_delay: Option<String>,

    /// How long after a version is drained to delete its Deployment (counted after the
    /// scale-down delay, as TWC does). Default `24h`.
    #[serde(default = "default_delete", skip_serializing_if = "Option::is_none")]
    pub delete_delay: Option<String>,
}

impl Default for SunsetStrategy {
    fn default() -> Self {
        Self {
            scaledown_delay: default_scaledown(),
            delete_delay: default_delete(),
        }
    }
}

fn default_scaledown() -> Option<String> {
    Some("1h".into())
}

fn default_delete() -> Option<String> {
    Some("24h".into())
}

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
    /// The version's Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<ObjectReference>,
    /// Task queues the version's workers poll.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_queues: Vec<TaskQueue>,
    /// Identity managing this version's rollout (kept for compatibility; unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
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
    /// Latest observations (`Ready`, `Progressing`, `RolledBack`, `VersionsKnown`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
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

/// A spec problem the CRD schema cannot catch; reported as the `InvalidSpec` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The offending field, e.g. `spec.rollout.gate`.
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl WorkerDeploymentSpec {
    /// Checks what the CRD validation cannot (or what an apiserver without our CRD rules, or an
    /// object stored before them, may have let through). Empty when the spec is valid.
    pub fn validate(&self) -> Vec<SpecError> {
        let mut errors = Vec::new();
        let mut err = |field: &str, message: String| {
            errors.push(SpecError {
                field: field.into(),
                message,
            })
        };
        // The template must be one Go decodes: its Go JSON is what the build ID hashes.
        match serde_json::to_value(&self.template) {
            Ok(v) => {
                if let Err(e) = twc_gocompat::pod_template_spec(&v) {
                    err(&format!("spec.template.{}", e.path), e.message);
                }
            }
            Err(e) => err("spec.template", e.to_string()),
        }
        let step_gates = self.rollout.steps.iter().enumerate().filter_map(|(i, s)| {
            s.gate
                .as_ref()
                .map(|g| (format!("spec.rollout.steps[{i}].gate"), g))
        });
        let gates = self
            .rollout
            .gate
            .as_ref()
            .map(|g| ("spec.rollout.gate".to_string(), g))
            .into_iter()
            .chain(step_gates);
        for (field, gate) in gates {
            if gate.input.is_some() && gate.input_from.is_some() {
                err(&field, "only one of input or inputFrom may be set".into());
            }
            if let Some(from) = &gate.input_from
                && from.config_map_key_ref.is_some() == from.secret_key_ref.is_some()
            {
                err(
                    &format!("{field}.inputFrom"),
                    "exactly one of configMapKeyRef or secretKeyRef must be set".into(),
                );
            }
        }
        if self.rollout.strategy == RolloutStrategyKind::Progressive
            && self.rollout.steps.is_empty()
        {
            err(
                "spec.rollout.steps",
                "steps are required for Progressive rollout".into(),
            );
        }
        let mut previous = 0;
        for (i, step) in self.rollout.steps.iter().enumerate() {
            if !(1..=99).contains(&step.ramp_percentage) {
                err(
                    &format!("spec.rollout.steps[{i}].rampPercentage"),
                    format!("must be from 1 to 99, got {}", step.ramp_percentage),
                );
            } else if step.ramp_percentage <= previous {
                err(
                    &format!("spec.rollout.steps[{i}].rampPercentage"),
                    format!(
                        "must be greater than the previous step's {previous}, got {}",
                        step.ramp_percentage
                    ),
                );
            }
            previous = previous.max(step.ramp_percentage);
            match crate::duration::parse(&step.pause_duration) {
                Ok(d) if d >= std::time::Duration::from_secs(30) => {}
                Ok(_) => err(
                    &format!("spec.rollout.steps[{i}].pauseDuration"),
                    "pause duration must be at least 30s".into(),
                ),
                Err(e) => err(&format!("spec.rollout.steps[{i}].pauseDuration"), e),
            }
        }
        if self.rollout.steps.len() > 20 {
            err("spec.rollout.steps", "at most 20 steps are allowed".into());
        }
        let after_promotion = self
            .rollout
            .analysis
            .as_ref()
            .and_then(|a| a.after_promotion.clone());
        for (field, value) in [
            ("spec.sunset.scaledownDelay", &self.sunset.scaledown_delay),
            ("spec.sunset.deleteDelay", &self.sunset.delete_delay),
            ("spec.rollout.analysis.afterPromotion", &after_promotion),
        ] {
            if let Some(Err(e)) = value.as_deref().map(crate::duration::parse) {
                err(field, e);
            }
        }
        if self.worker_options.connection_ref.target().is_none() {
            err(
                "spec.workerOptions.connectionRef",
                "set either name, or objectRef with kind Connection or ClusterConnection".into(),
            );
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> WorkerDeploymentSpec {
        WorkerDeploymentSpec {
            rollout: RolloutStrategy {
                strategy: RolloutStrategyKind::AllAtOnce,
                ..Default::default()
            },
            worker_options: WorkerOptions {
                connection_ref: ConnectionReference {
                    name: Some("c".into()),
                    object_ref: None,
                },
                temporal_namespace: "default".into(),
                unsafe_custom_build_id: None,
            },
            ..Default::default()
        }
    }

    fn step(ramp: i32, pause: &str) -> RolloutStep {
        RolloutStep {
            ramp_percentage: ramp,
            pause_duration: pause.into(),
            gate: None,
        }
    }

    #[test]
    fn a_valid_spec_has_no_errors() {
        let mut s = spec();
        s.rollout.strategy = RolloutStrategyKind::Progressive;
        s.rollout.steps = vec![step(10, "30s"), step(50, "1h")];
        assert_eq!(s.validate(), vec![]);
    }

    #[test]
    fn a_template_go_cannot_decode_is_refused_naming_the_field() {
        let mut s = spec();
        s.template = serde_json::from_value(serde_json::json!({"spec": {"containers": [
            {"name": "w", "image": "w:1", "resources": {"requests": {"memory": "1 GB"}}}]}}))
        .unwrap_or_else(|e| panic!("{e}"));
        let errors = s.validate();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            errors[0].field,
            "spec.template.spec.containers[0].resources.requests.memory"
        );
    }

    #[test]
    fn gate_input_and_input_from_are_exclusive() {
        let mut s = spec();
        s.rollout.gate = Some(GateWorkflowConfig {
            workflow_type: "G".into(),
            input: Some(serde_json::json!({"a": 1})),
            input_from: Some(GateInputSource {
                secret_key_ref: Some(Default::default()),
                config_map_key_ref: None,
            }),
        });
        let errors = s.validate();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "spec.rollout.gate");
        assert_eq!(
            errors[0].message,
            "only one of input or inputFrom may be set"
        );
        // A ramp step's gate is checked the same way, and named by its step.
        let gate = s.rollout.gate.take();
        s.rollout.strategy = RolloutStrategyKind::Progressive;
        s.rollout.steps = vec![step(10, "1m"), step(50, "1m")];
        s.rollout.steps[1].gate = gate;
        let errors = s.validate();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "spec.rollout.steps[1].gate");
    }

    #[test]
    fn ramps_must_increase_and_pauses_must_parse() {
        let mut s = spec();
        s.rollout.strategy = RolloutStrategyKind::Progressive;
        s.rollout.steps = vec![
            step(50, "1m"),
            step(20, "1m"),
            step(60, "5 minutes"),
            step(70, "10s"),
        ];
        let fields: Vec<String> = s.validate().into_iter().map(|e| e.to_string()).collect();
        assert_eq!(fields.len(), 3, "{fields:?}");
        assert!(fields[0].starts_with(
            "spec.rollout.steps[1].rampPercentage: must be greater than the previous step's 50"
        ));
        assert!(
            fields[1].starts_with(
                "spec.rollout.steps[2].pauseDuration: \"5 minutes\" is not a duration"
            )
        );
        assert!(fields[2].starts_with(
            "spec.rollout.steps[3].pauseDuration: pause duration must be at least 30s"
        ));
    }

    #[test]
    fn a_sunset_delay_that_is_not_a_duration_is_reported() {
        let mut s = spec();
        s.sunset.delete_delay = Some("tomorrow".into());
        let errors = s.validate();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.sunset.deleteDelay");
    }
}
