//! The run's grouped WorkerDeployment (worker groups, TWC #330): the second of the run, when
//! it has two or more, runs each version as two Deployments, `workflows` and `activities` (an
//! activity-only worker polling the same task queue). Whatever the run reads or changes of a
//! version's Deployment, it reads or changes for each of its groups; the invariants hold for
//! each group (a version routed to or draining needs every group's workers).

use serde_json::{Value, json};
use twc_api::WorkerDeployment;
use twc_controller::plan::{build_id, group_ids};

use crate::Run;

/// Its groups, sorted as the controller handles them.
pub(crate) const GROUPS: [&str; 2] = ["activities", "workflows"];
/// The group a scaler takes over (its WorkerResourceTemplate names it).
pub(crate) const SCALED_GROUP: &str = "activities";

/// One Deployment of a version: its worker group (None without groups) and its name.
pub(crate) struct Member {
    pub(crate) group: Option<&'static str>,
    pub(crate) name: String,
}

impl Run<'_> {
    /// Whether WorkerDeployment `name` runs its versions as worker groups.
    pub(crate) fn grouped(&self, name: &str) -> bool {
        self.names.get(1).is_some_and(|n| n == name)
    }

    /// The Deployments of `name`'s version `build`.
    pub(crate) fn members(&self, name: &str, build: &str) -> Vec<Member> {
        if !self.grouped(name) {
            return vec![Member {
                group: None,
                name: build_id::deployment_name(name, build),
            }];
        }
        GROUPS
            .iter()
            .map(|g| Member {
                group: Some(g),
                name: group_ids::deployment_name(name, g, build),
            })
            .collect()
    }

    /// The Deployment of `name`'s version `build` a scaler takes over.
    pub(crate) fn scaled_member(&self, name: &str, build: &str) -> Option<Member> {
        self.members(name, build)
            .into_iter()
            .find(|m| m.group.is_none_or(|g| g == SCALED_GROUP))
    }

    /// The WorkerDeployment of the run whose version `build` has the Deployment named
    /// `deployment`.
    pub(crate) fn owner_of(&self, build: &str, deployment: &str) -> Option<&String> {
        self.names
            .iter()
            .find(|n| self.members(n, build).iter().any(|m| m.name == deployment))
    }

    /// The JSON pointers to the images a new build sets (one per group).
    pub(crate) fn image_paths(&self, name: &str) -> Vec<String> {
        if !self.grouped(name) {
            return vec!["/spec/template/spec/containers/0/image".into()];
        }
        (0..GROUPS.len())
            .map(|i| format!("/spec/workerGroups/{i}/deployment/template/spec/containers/0/image"))
            .collect()
    }

    /// The part of WorkerDeployment `name`'s spec that says what runs: `replicas` and
    /// `template`, or `workerGroups` (each group `replicas` workers of `image`).
    pub(crate) fn workers_spec(&self, name: &str, image: &str) -> Value {
        let template = |role: Option<&str>| {
            let mut container = json!({"name": "worker", "image": image});
            if let Some(role) = role {
                container["env"] = json!([{"name": "WORKER_ROLE", "value": role}]);
            }
            json!({"spec": {"terminationGracePeriodSeconds": 2, "containers": [container]}})
        };
        if !self.grouped(name) {
            return json!({"replicas": self.replicas, "template": template(None)});
        }
        let groups: Vec<Value> = GROUPS
            .iter()
            .map(|g| {
                let role = (*g == "activities").then_some("activities");
                json!({"name": g, "deployment": {"replicas": self.replicas, "template": template(role)}})
            })
            .collect();
        json!({"workerGroups": groups})
    }
}

/// The image WorkerDeployment `wd` runs (its first group's, with groups).
pub(crate) fn image_of(wd: &WorkerDeployment) -> Option<String> {
    let spec = serde_json::to_value(&wd.spec).ok()?;
    let template = match spec["workerGroups"].as_array().and_then(|g| g.first()) {
        Some(group) => group["deployment"]["template"].clone(),
        None => spec["template"].clone(),
    };
    template["spec"]["containers"][0]["image"]
        .as_str()
        .map(str::to_string)
}
