//! `WorkerDeployment`: a pod template that becomes one Temporal Worker Deployment Version (and
//! one versioned Deployment) per distinct template, with a rollout and a sunset strategy.

mod connection_ref;
mod rollout;
mod status;
mod validate;

pub use connection_ref::*;
pub use rollout::*;
pub use status::*;
pub use validate::*;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::{CustomResource, KubeSchema};
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
