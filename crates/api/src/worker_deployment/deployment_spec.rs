//! `spec.deployment`: the `apps/v1` DeploymentSpec every versioned Deployment is made from
//! (TWC's newer form, its PR #564). What renders or judges a version reads the spec through
//! [`WorkerDeploymentSpec::group_views`] (one view per group, whichever form the spec uses),
//! [`WorkerDeploymentSpec::pod_template`] and [`WorkerDeploymentSpec::rollout_deadline_seconds`],
//! never the deprecated fields.

use k8s_openapi::api::apps::v1::DeploymentStrategy;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::{WorkerDeploymentSpec, deployment_strategy};

/// The rollout deadline when neither form sets one (TWC's `progressDeadlineSeconds` default,
/// which is also `apps/v1`'s).
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;

/// The `apps/v1` DeploymentSpec of each versioned Deployment: the pod template and how its
/// Deployment runs it. The controller computes the selector and adds its labels, annotations
/// and the Temporal connection to the template.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.progressDeadlineSeconds) || self.progressDeadlineSeconds > (has(self.minReadySeconds) ? self.minReadySeconds : 0)")
        .message("deployment.progressDeadlineSeconds must be greater than deployment.minReadySeconds"),
    validation = Rule::new("!has(self.paused) || !self.paused")
        .message("deployment.paused is not supported: a paused Deployment never starts a version's pods; pause a rollout with the temporal.io/rollout-paused annotation")
)]
pub struct VersionedDeploymentSpec {
    /// Number of desired pods for the active versions (current and target). When omitted, the
    /// controller creates versioned Deployments without replicas and never scales active
    /// versions, so an HPA or KEDA can own them; drained versions and inactive versions that
    /// are not the target are still scaled to zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,

    /// Ignored: the controller computes each versioned Deployment's selector (its
    /// `temporal.io/deployment-name` and `temporal.io/build-id` labels). Accepted so that a
    /// DeploymentSpec copied whole still applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// The pods each version runs. The controller adds the Temporal connection environment
    /// variables (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_DEPLOYMENT_NAME,
    /// TEMPORAL_WORKER_BUILD_ID, and TLS or API-key settings) to every container. Any change
    /// to the template makes a new version, unless `workerOptions.unsafeCustomBuildID` is set;
    /// the same template as in `spec.template` makes the same build ID.
    pub template: PodTemplateSpec,

    /// How each versioned Deployment replaces its pods: `RollingUpdate` (the default, with
    /// `maxUnavailable` and `maxSurge` 25 % when not given) or `Recreate`. Applied to every
    /// versioned Deployment, old versions included; a change rolls no pod and makes no new
    /// version (it is not in the build ID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new(deployment_strategy::RULE_TYPE)
            .message("deployment.strategy.type must be RollingUpdate or Recreate"),
        validation = Rule::new(deployment_strategy::RULE_RECREATE)
            .message("deployment.strategy.rollingUpdate may not be set when type is Recreate"),
        validation = Rule::new(deployment_strategy::RULE_NOT_BOTH_ZERO)
            .message("deployment.strategy: maxUnavailable and maxSurge cannot both be 0"),
        validation = Rule::new(deployment_strategy::RULE_AMOUNTS)
            .message("deployment.strategy: maxUnavailable and maxSurge are a number of pods (0 or more) or a percentage such as 25%")
    )]
    pub strategy: Option<DeploymentStrategy>,

    /// Minimum number of seconds a new pod must be ready, without any container crashing, to
    /// count as available. Copied to each versioned Deployment. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: Option<i32>,

    /// How long, in seconds, a version may take to make progress: copied to each versioned
    /// Deployment (its `Progressing` condition), and the rollout's deadline: the target
    /// version's workers must be ready and polling Temporal within it, or the rollout fails
    /// (`Progressing=False`, reason `ProgressDeadlineExceeded`) and the build is not promoted
    /// until the template changes or a retry is asked for (annotation `temporal.io/retry`).
    /// During a ramp, how long the target's Deployment may stay unavailable before new
    /// workflows are routed back. Default 600. Must be greater than `minReadySeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i32>,

    /// How many old ReplicaSets each versioned Deployment keeps (Kubernetes' default, 10,
    /// when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub revision_history_limit: Option<i32>,

    /// Not supported: must be false or absent (a paused Deployment never starts the pods of a
    /// new version). Pause a rollout with the `temporal.io/rollout-paused` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

impl WorkerDeploymentSpec {
    /// The pod template every version runs: `deployment.template`, else the deprecated
    /// `template`.
    pub fn pod_template(&self) -> &PodTemplateSpec {
        match &self.deployment {
            Some(d) => &d.template,
            None => &self.template,
        }
    }

    /// The rollout's progress deadline in seconds (0 or less, only possible with the
    /// deprecated field: none). With `spec.deployment` or worker groups, the Deployments' own
    /// (the longest of the groups'; default 600).
    pub fn rollout_deadline_seconds(&self) -> Option<i32> {
        if self.deployment.is_none() && !self.has_worker_groups() {
            return self.progress_deadline_seconds;
        }
        self.group_views()
            .iter()
            .map(|g| {
                g.progress_deadline_seconds
                    .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS)
            })
            .max()
    }
}

/// Whether a template is the empty one (what an absent `spec.template` reads as).
pub(crate) fn is_empty_template(t: &PodTemplateSpec) -> bool {
    t == &PodTemplateSpec::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(serde_json::json!({"spec": {"containers": [
            {"name": "w", "image": image}]}}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_deprecated_fields_read_as_before() {
        let spec = WorkerDeploymentSpec {
            template: template("w:1"),
            replicas: Some(3),
            min_ready_seconds: 5,
            progress_deadline_seconds: Some(0),
            ..Default::default()
        };
        assert_eq!(spec.pod_template(), &template("w:1"));
        let only = &spec.group_views()[0];
        assert_eq!(only.name, super::super::DEFAULT_GROUP);
        assert_eq!((only.replicas, only.min_ready_seconds), (Some(3), 5));
        assert_eq!(spec.rollout_deadline_seconds(), Some(0));
        assert_eq!(
            only.progress_deadline_seconds, None,
            "the top-level deadline is the rollout's alone"
        );
        assert_eq!(only.strategy, None, "each Deployment keeps its own");
    }

    #[test]
    fn spec_deployment_is_used_whole_and_the_deprecated_fields_are_ignored() {
        let spec = WorkerDeploymentSpec {
            template: PodTemplateSpec::default(),
            replicas: Some(3),
            min_ready_seconds: 5,
            progress_deadline_seconds: Some(0),
            deployment: Some(VersionedDeploymentSpec {
                template: template("w:2"),
                replicas: None,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(spec.pod_template(), &template("w:2"));
        let only = &spec.group_views()[0];
        assert_eq!(only.replicas, None, "autoscaled");
        assert_eq!(only.min_ready_seconds, 0);
        assert_eq!(spec.rollout_deadline_seconds(), Some(600));
        assert_eq!(only.progress_deadline_seconds, None);
        // apps/v1's defaults, on every versioned Deployment.
        let strategy = only.strategy.clone().unwrap_or_default();
        assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    }

    #[test]
    fn an_absent_template_is_not_written_back() {
        let spec = WorkerDeploymentSpec {
            deployment: Some(VersionedDeploymentSpec {
                template: template("w:2"),
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = serde_json::to_value(&spec).unwrap_or_default();
        assert!(v.get("template").is_none(), "{v}");
        assert!(v["deployment"].get("template").is_some(), "{v}");
    }
}
