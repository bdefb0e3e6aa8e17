//! Worker groups: a version is one Deployment per group, rolled out, scaled, retired and
//! promoted as one (upstream's worker-groups proposal).

use super::*;
use crate::plan::group_ids;

/// Two groups: `activities` (3 replicas, image `a:<tag>`) and `workflows` (2, `w:<tag>`).
fn grouped(strategy: &str, tag: &str) -> WorkerDeployment {
    let mut wd = wd(strategy, "unused:0");
    wd.spec.template = Default::default();
    wd.spec.worker_groups = Some(
        serde_json::from_value(json!([
            {"name": "workflows", "deployment": {"replicas": 2, "template": {"spec":
                {"containers": [{"name": "worker", "image": format!("w:{tag}")}]}}}},
            {"name": "activities", "deployment": {"replicas": 3, "template": {"spec":
                {"containers": [{"name": "worker", "image": format!("a:{tag}")}]}}}},
        ]))
        .unwrap_or_else(|e| panic!("{e}")),
    );
    wd
}

fn name(group: &str, build: &str) -> String {
    group_ids::deployment_name("w", group, build)
}

/// The Deployments a plan applies, with their replicas, sorted by name.
fn applied(p: &Plan) -> Vec<(String, Option<i32>)> {
    let mut made: Vec<(String, Option<i32>)> = p
        .apply
        .iter()
        .map(|d| {
            (
                d.metadata.name.clone().unwrap_or_default(),
                d.spec.as_ref().and_then(|s| s.replicas),
            )
        })
        .collect();
    made.sort();
    made
}

impl World {
    /// `build`'s version runs one Deployment per group (name, spec.replicas), each as
    /// [`World::deployment`] makes one, with the template `wd` gives the group (if it has it).
    fn groups(
        mut self,
        wd: &WorkerDeployment,
        build: &str,
        groups: &[(&str, Option<i32>)],
    ) -> Self {
        self = self.deployment(build, Some(1));
        let base = self.observed.deployments.remove(build).unwrap_or_default();
        let members = groups
            .iter()
            .map(|(group, replicas)| ObservedDeployment {
                template_digest: wd
                    .spec
                    .group_views()
                    .iter()
                    .find(|g| g.name == *group)
                    .map(|g| build_id::template_digest(g.template)),
                name: name(group, build),
                group: group.to_string(),
                spec_replicas: *replicas,
                replicas: replicas.unwrap_or(1),
                ready_replicas: replicas.unwrap_or(1),
                available_replicas: replicas.unwrap_or(1),
                ..base.clone()
            })
            .collect();
        self.observed
            .deployments
            .insert(build.into(), ObservedDeployment::version(members));
        self
    }

    fn edit_group(
        self,
        build: &str,
        group: &str,
        edit: impl FnOnce(&mut ObservedDeployment),
    ) -> Self {
        let group = group.to_string();
        self.edit_deployment(build, move |v| {
            if let Some(m) = v.members.iter_mut().find(|m| m.group == group) {
                edit(m);
            }
            let members = std::mem::take(&mut v.members);
            *v = ObservedDeployment::version(members);
        })
    }
}

#[test]
fn a_new_grouped_version_gets_one_deployment_per_group() {
    let wd = grouped("AllAtOnce", "v1");
    let p = plan(&wd, &conn(), &me(), &world(&wd).build());
    let target = p.target_build_id.clone();
    let made = applied(&p);
    let mut expected = vec![
        (name("activities", &target), Some(3)),
        (name("workflows", &target), Some(2)),
    ];
    expected.sort();
    assert_eq!(made, expected);
    assert!(
        target.starts_with("v1-"),
        "the first group's image tag: {target}"
    );
}

#[test]
fn each_group_scales_to_its_own_replicas_and_only_a_drifted_one_is_reapplied() {
    use VersionStatus::Current;
    let wd = grouped("AllAtOnce", "v1");
    let target = target_build_id(&wd);
    let running = world(&wd)
        .groups(
            &wd,
            &target,
            &[("activities", Some(1)), ("workflows", Some(2))],
        )
        .version(&target, Current)
        .current(&target);
    let p = plan(&wd, &conn(), &me(), &running.clone().build());
    assert!(p.apply.is_empty(), "{:?}", p.apply);
    assert_eq!(p.scale, vec![(name("activities", &target), 3)]);
    let stale = running.edit_group(&target, "workflows", |m| {
        m.connection_hash = Some("stale".into())
    });
    let p = plan(&wd, &conn(), &me(), &stale.build());
    let applied: Vec<_> = p
        .apply
        .iter()
        .filter_map(|d| d.metadata.name.clone())
        .collect();
    assert_eq!(applied, vec![name("workflows", &target)]);
}

#[test]
fn an_old_grouped_version_is_scaled_down_and_deleted_as_one() {
    use VersionStatus::{Current, Draining};
    let wd = grouped("AllAtOnce", "v2");
    let target = target_build_id(&wd);
    let old = "v1-0123456789";
    let base = world(&wd)
        .groups(
            &wd,
            &target,
            &[("activities", Some(3)), ("workflows", Some(2))],
        )
        .version(&target, Current)
        .current(&target)
        .groups(&wd, old, &[("activities", Some(3)), ("workflows", Some(2))]);
    let both = |b: &str| {
        let mut n = vec![name("activities", b), name("workflows", b)];
        n.sort();
        n
    };
    // Drained past the scale-down delay: both groups to 0, together.
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &base.clone().drained_since(old, t(0)).at(t(3601)).build(),
    );
    let mut scaled: Vec<String> = p
        .scale
        .iter()
        .filter(|(_, r)| *r == 0)
        .map(|(n, _)| n.clone())
        .collect();
    scaled.sort();
    assert_eq!(scaled, both(old));
    // Past the delete delay: both Deployments and the one Temporal version.
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &base
            .clone()
            .drained_since(old, t(0))
            .at(t(3600 + 86400 + 1))
            .build(),
    );
    let mut deleted = p.delete_deployments.clone();
    deleted.sort();
    assert_eq!(deleted, both(old));
    assert_eq!(p.delete_versions, vec![old.to_string()]);
    // Draining at 0 (a pinned workflow came back): each group back to its own replicas.
    let back = base
        .edit_group(old, "activities", |m| m.spec_replicas = Some(0))
        .edit_group(old, "workflows", |m| m.spec_replicas = Some(0))
        .version(old, Draining);
    let mut up = plan(&wd, &conn(), &me(), &back.build()).scale;
    up.sort();
    let mut expected = vec![(name("activities", old), 3), (name("workflows", old), 2)];
    expected.sort();
    assert_eq!(up, expected);
}

/// `wd`'s grouped `target` registered (Inactive) with both groups up, `old` current.
fn registered(wd: &WorkerDeployment, target: &str) -> World {
    use VersionStatus::{Current, Inactive};
    world(wd)
        .groups(
            wd,
            target,
            &[("activities", Some(3)), ("workflows", Some(2))],
        )
        .version("old", Current)
        .version(target, Inactive)
        .current("old")
}

#[test]
fn a_grouped_target_is_promoted_only_when_every_group_is_available() {
    let wd = grouped("AllAtOnce", "v2");
    let target = target_build_id(&wd);
    let registered = registered(&wd, &target);
    let p = plan(&wd, &conn(), &me(), &registered.clone().build());
    assert_eq!(p.routing, Some(Routing::SetCurrent(target.clone())));
    let one_down = registered.edit_group(&target, "workflows", |m| m.available_since = None);
    assert_eq!(plan(&wd, &conn(), &me(), &one_down.build()).routing, None);
}

/// A gate waits for a healthy grouped target (every group available) and then runs on every
/// workflow task queue the version polls, whichever group polls it.
#[test]
fn a_gate_waits_for_every_group_then_runs_on_every_workflow_queue() {
    let mut wd = grouped("AllAtOnce", "v2");
    wd.spec.rollout.gate = Some(
        serde_json::from_value(json!({"workflowType": "Check"})).unwrap_or_else(|e| panic!("{e}")),
    );
    let target = target_build_id(&wd);
    let registered = registered(&wd, &target)
        .task_queues(vec![workflow_queue("orders"), workflow_queue("billing")]);
    let one_down = registered
        .clone()
        .edit_group(&target, "activities", |m| m.available_since = None);
    let p = plan(&wd, &conn(), &me(), &one_down.build());
    assert!(p.start_gates.is_empty() && p.routing.is_none());
    let p = plan(&wd, &conn(), &me(), &registered.build());
    let mut queues: Vec<&str> = p
        .start_gates
        .iter()
        .map(|g| g.task_queue.as_str())
        .collect();
    queues.sort();
    assert_eq!(queues, ["billing", "orders"]);
}

/// The rollout's deadline is the longest of the groups' progress deadlines (a slow group is
/// given its own time), the Deployment default for a group that sets none.
#[test]
fn the_progress_deadline_of_a_grouped_version_is_its_longest_groups() {
    let mut wd = grouped("AllAtOnce", "v1");
    let groups = wd.spec.worker_groups.as_deref_mut();
    if let Some([workflows, activities]) = groups {
        workflows.deployment.progress_deadline_seconds = Some(900);
        activities.deployment.progress_deadline_seconds = Some(120);
    }
    assert_eq!(
        crate::plan::guard::deadline(&wd),
        Some(std::time::Duration::from_secs(900))
    );
    if let Some(g) = wd.spec.worker_groups.as_mut().and_then(|g| g.first_mut()) {
        g.deployment.progress_deadline_seconds = None;
    }
    assert_eq!(
        crate::plan::guard::deadline(&wd),
        Some(std::time::Duration::from_secs(600)),
        "apps/v1's default for the group that sets none"
    );
}

/// Under one custom build ID (upstream's in-place rules): an added group gets its Deployment in
/// the same version, a removed one's Deployment goes while the version stays, and switching
/// between grouped and ungrouped is refused (selectors are immutable) with upstream's message.
#[test]
fn a_custom_build_id_changes_groups_in_place_but_never_switches_form() {
    use VersionStatus::Current;
    let mut spec = grouped("AllAtOnce", "v1");
    spec.spec.worker_options.unsafe_custom_build_id = Some("release-7".into());
    let running = world(&spec)
        .groups(
            &spec,
            "release-7",
            &[("activities", Some(3)), ("gpu", Some(1))],
        )
        .version("release-7", Current)
        .current("release-7");
    let p = plan(&spec, &conn(), &me(), &running.clone().build());
    assert_eq!(p.target_build_id, "release-7");
    let applied: Vec<_> = p
        .apply
        .iter()
        .filter_map(|d| d.metadata.name.clone())
        .collect();
    assert_eq!(
        applied,
        vec![name("workflows", "release-7")],
        "the added group"
    );
    assert_eq!(
        p.delete_deployments,
        vec![name("gpu", "release-7")],
        "the removed group"
    );
    assert!(p.delete_versions.is_empty());

    let mut ungrouped = wd("AllAtOnce", "w:v1");
    ungrouped.spec.worker_options.unsafe_custom_build_id = Some("release-7".into());
    let p = plan(&ungrouped, &conn(), &me(), &running.build());
    assert!(p.apply.is_empty() && p.delete_deployments.is_empty());
    assert_eq!(
        p.blocked.as_deref(),
        Some(
            "adding or removing spec.workerGroups requires a new unsafeCustomBuildID: build ID \"release-7\" already has Deployments"
        )
    );
}

/// A scaler (an HPA from a WorkerResourceTemplate) for one group owns that group's replicas
/// only: the other group keeps the spec's.
#[test]
fn a_scaler_of_one_group_owns_only_that_groups_replicas() {
    let wd = grouped("AllAtOnce", "v1");
    let mut w = world(&wd);
    w.observed.autoscaled.insert("activities".into());
    let p = plan(&wd, &conn(), &me(), &w.build());
    let target = p.target_build_id.clone();
    let made = applied(&p);
    let mut expected = vec![
        (name("activities", &target), None),
        (name("workflows", &target), Some(2)),
    ];
    expected.sort();
    assert_eq!(made, expected);
}
