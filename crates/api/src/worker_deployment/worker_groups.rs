//! `spec.workerGroups` (TWC's worker groups, its issue #330): several differently shaped
//! Deployments per version (a workflow worker, an activity worker on GPUs), rolled out, ramped
//! and retired as one version with one build ID.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::VersionedDeploymentSpec;

/// The most groups a WorkerDeployment may have (upstream's `MaxItems`).
pub const MAX_WORKER_GROUPS: usize = 10;

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

impl super::WorkerDeploymentSpec {
    /// Whether the WorkerDeployment runs worker groups.
    pub fn has_worker_groups(&self) -> bool {
        self.worker_groups.as_ref().is_some_and(|g| !g.is_empty())
    }

    /// The worker groups sorted by name (the order every version handles them in).
    pub fn sorted_worker_groups(&self) -> Vec<&WorkerGroup> {
        let mut groups: Vec<&WorkerGroup> = self.worker_groups.iter().flatten().collect();
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        groups
    }
}
