//! `spec.workerGroups` (TWC's worker groups, its issue #330): several differently shaped
//! Deployments per version (a workflow worker, an activity worker on GPUs), rolled out, ramped
//! and retired as one version with one build ID.

use k8s_openapi::api::apps::v1::DeploymentStrategy;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::VersionedDeploymentSpec;

/// The group of a WorkerDeployment without groups (and of a Deployment without the group
/// label), as upstream names it.
pub const DEFAULT_GROUP: &str = "default";

/// One group of workers: its name and the Deployment each version runs for it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroup {
    /// The group's name: a DNS label of at most 24 characters, unique in the list; `default`
    /// is reserved (it names the one group of a WorkerDeployment without groups). It is in the
    /// name of each version's Deployment for the group and in its `temporal.io/worker-group`
    /// label; renaming a group makes a new version.
    #[schemars(
        length(min = 1, max = 24),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    #[x_kube(validation = Rule::new("self != 'default'").message("group name default is reserved"))]
    pub name: String,

    /// The `apps/v1` DeploymentSpec of the group's Deployment in each version: its pod
    /// template, replicas (omitted: an autoscaler owns the group's count), strategy and the
    /// rest, as `spec.deployment`. The selector is the controller's.
    pub deployment: VersionedDeploymentSpec,
}

/// One group's Deployment as every version renders it, read from whichever form the spec uses:
/// a WorkerDeployment without groups has one, [`DEFAULT_GROUP`], made of `spec.deployment` or
/// the deprecated fields.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupView<'a> {
    /// The group's name ([`DEFAULT_GROUP`] without groups).
    pub name: &'a str,
    pub template: &'a PodTemplateSpec,
    /// None: an autoscaler owns the count.
    pub replicas: Option<i32>,
    pub min_ready_seconds: i32,
    /// The Deployment's own `progressDeadlineSeconds` (None: Kubernetes' default).
    pub progress_deadline_seconds: Option<i32>,
    pub revision_history_limit: Option<i32>,
    /// With `apps/v1`'s defaults filled; None: each Deployment keeps its own.
    pub strategy: Option<DeploymentStrategy>,
}

impl<'a> GroupView<'a> {
    /// Group `name` made of DeploymentSpec `d` (`spec.deployment` or a worker group's): every
    /// field reaches the Deployment, the strategy with `apps/v1`'s defaults.
    fn of(name: &'a str, d: &'a VersionedDeploymentSpec) -> Self {
        GroupView {
            name,
            template: &d.template,
            replicas: d.replicas,
            min_ready_seconds: d.min_ready_seconds.unwrap_or(0),
            progress_deadline_seconds: d.progress_deadline_seconds,
            revision_history_limit: d.revision_history_limit,
            strategy: Some(super::deployment_strategy::defaulted(
                &d.strategy.clone().unwrap_or_default(),
            )),
        }
    }
}

impl super::WorkerDeploymentSpec {
    /// Every group's Deployment settings, sorted by group name; one ([`DEFAULT_GROUP`]) for a
    /// WorkerDeployment without groups.
    pub fn group_views(&self) -> Vec<GroupView<'_>> {
        if self.has_worker_groups() {
            return self
                .sorted_worker_groups()
                .into_iter()
                .map(|g| GroupView::of(&g.name, &g.deployment))
                .collect();
        }
        vec![match &self.deployment {
            Some(d) => GroupView::of(DEFAULT_GROUP, d),
            // The deprecated fields, as before `spec.deployment`: the top-level deadline is
            // the rollout's alone, and without `deploymentStrategy` each Deployment keeps its
            // strategy.
            None => GroupView {
                name: DEFAULT_GROUP,
                template: &self.template,
                replicas: self.replicas,
                min_ready_seconds: self.min_ready_seconds,
                progress_deadline_seconds: None,
                revision_history_limit: None,
                strategy: self
                    .deployment_strategy
                    .as_ref()
                    .map(super::deployment_strategy::defaulted),
            },
        }]
    }

    /// Whether the WorkerDeployment runs worker groups.
    pub fn has_worker_groups(&self) -> bool {
        self.worker_groups.as_ref().is_some_and(|g| !g.is_empty())
    }

    /// The replicas the spec wants for group `group` (None: an autoscaler owns them, or the
    /// spec no longer has the group, which upstream counts as autoscaled).
    pub fn group_replicas(&self, group: &str) -> Option<i32> {
        self.group_views()
            .into_iter()
            .find(|g| g.name == group)
            .and_then(|g| g.replicas)
    }

    /// The worker groups sorted by name (the order every version handles them in).
    pub fn sorted_worker_groups(&self) -> Vec<&WorkerGroup> {
        let mut groups: Vec<&WorkerGroup> = self.worker_groups.iter().flatten().collect();
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        groups
    }
}
