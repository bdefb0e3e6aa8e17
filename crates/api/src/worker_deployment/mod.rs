//! `WorkerDeployment`: a pod template that becomes one Temporal Worker Deployment Version (and
//! one versioned Deployment) per distinct template, with a rollout and a sunset strategy.

mod connection_ref;
mod deployment_spec;
pub mod deployment_strategy;
mod rollout;
mod status;
mod validate;
mod worker_groups;

pub use connection_ref::*;
pub use deployment_spec::*;
pub use rollout::*;
pub use status::*;
pub use validate::*;
pub use worker_groups::*;

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
#[x_kube(
    validation = Rule::new("has(self.deployment) || has(self.template) || has(self.workerGroups)")
        .message("one of deployment, template or workerGroups must be set"),
    validation = Rule::new("!(has(self.deployment) && has(self.template))")
        .message("exactly one of deployment or template must be set"),
    validation = Rule::new("!has(self.workerGroups) || !(has(self.deployment) || has(self.template))")
        .message("workerGroups cannot be combined with deployment or template"),
    validation = Rule::new("!(has(self.deployment) && has(self.deploymentStrategy))")
        .message("deploymentStrategy cannot be combined with deployment: set deployment.strategy")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkerDeploymentSpec {
    /// Deprecated (TWC's older form): use `deployment.replicas`; ignored when `deployment` is
    /// set. Number of desired pods for the active versions (current and target). When
    /// omitted, the controller creates versioned Deployments without replicas and never
    /// scales active versions, so an HPA or KEDA can own them; drained versions and inactive
    /// versions that are not the target are still scaled to zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Deprecated (TWC's older form): use `deployment.template`; exactly one of the two is
    /// set. The pods each version runs. The controller adds the Temporal connection
    /// environment variables (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_DEPLOYMENT_NAME,
    /// TEMPORAL_WORKER_BUILD_ID, and TLS or API-key settings) to every container. Any change
    /// to the template makes a new version, unless `workerOptions.unsafeCustomBuildID` is set.
    #[serde(default, skip_serializing_if = "deployment_spec::is_empty_template")]
    pub template: PodTemplateSpec,

    /// Deprecated (TWC's older form): use `deployment.minReadySeconds`; ignored when
    /// `deployment` is set. Minimum number of seconds a new pod must be ready, without any
    /// container crashing, to count as available. Copied to each versioned Deployment.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: i32,

    /// Deprecated (TWC's older form): use `deployment.progressDeadlineSeconds`; ignored when
    /// `deployment` is set. How long, in seconds, the target version may take to have its
    /// workers ready and polling Temporal. Past it the rollout fails: `Progressing=False` with reason
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

    /// With the deprecated `template` only (use `deployment.strategy` with `deployment`).
    /// How each versioned Deployment replaces its pods (the `apps/v1` Deployment's
    /// `spec.strategy`): `RollingUpdate` (the default, with `maxUnavailable` and `maxSurge` 25 %
    /// when not given) or `Recreate`. Not the rollout strategy (`spec.rollout`, which moves
    /// workflows between versions): a new template is a new version with a Deployment of its
    /// own, so this matters when an existing version's pods are replaced (`kubectl rollout
    /// restart`, a connection change, a template change under `unsafeCustomBuildID`). Applied to
    /// every versioned Deployment, old versions included; a change rolls no pod and makes no
    /// new version (it is not in the build ID). When omitted, the controller leaves each
    /// Deployment's strategy as it is (Kubernetes' default on the ones it creates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new(deployment_strategy::RULE_TYPE)
            .message("deploymentStrategy.type must be RollingUpdate or Recreate"),
        validation = Rule::new(deployment_strategy::RULE_RECREATE)
            .message("deploymentStrategy.rollingUpdate may not be set when type is Recreate"),
        validation = Rule::new(deployment_strategy::RULE_NOT_BOTH_ZERO)
            .message("maxUnavailable and maxSurge cannot both be 0"),
        validation = Rule::new(deployment_strategy::RULE_AMOUNTS)
            .message("maxUnavailable and maxSurge are a number of pods (0 or more) or a percentage such as 25%")
    )]
    pub deployment_strategy: Option<k8s_openapi::api::apps::v1::DeploymentStrategy>,

    /// The `apps/v1` DeploymentSpec each version's Deployment is made from: its pod template,
    /// replicas, strategy, minReadySeconds, progressDeadlineSeconds and
    /// revisionHistoryLimit (the selector is the controller's). Replaces `template`,
    /// `replicas`, `minReadySeconds`, `progressDeadlineSeconds` and `deploymentStrategy`;
    /// exactly one of `deployment` and `template` is set. The same pod template in either form
    /// makes the same build ID, so moving a manifest to this form starts no new version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<VersionedDeploymentSpec>,

    /// Several groups of workers per version (TWC's worker groups): each version runs one
    /// Deployment per group (a workflow worker, an activity worker with GPUs, ...), all under
    /// one build ID computed over every group's template, rolled out, ramped, promoted, drained
    /// and retired together. A version is healthy only when every group's Deployment is
    /// available. 1 to 10 groups, names unique; not with `deployment` or `template`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub worker_groups: Option<Vec<WorkerGroup>>,

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
