//! Worker groups on the real apiserver and Temporal, with the example worker under the pod
//! runner: one version made of two Deployments (a workflow group and an activity group of the
//! same build), rolled out, promoted and retired as one.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use twc_api::VersionStatus::{Current, Drained};
use twc_controller::plan::{group_ids, target_build_id};

use crate::common::{World, from_json};
use crate::harness::*;

/// A grouped spec: `workflows` (1 replica) and `activities` (2), both the example worker at
/// `tag` (the activity group with its own environment, so its template differs).
fn grouped(s: &Scenario, tag: &str) -> Value {
    let mut spec = s.spec(all_at_once(), &image(tag));
    let template = spec["template"].clone();
    let mut activities = template.clone();
    activities["spec"]["containers"][0]["env"] =
        json!([{"name": "WORKER_ROLE", "value": "activities"}]);
    if let Some(o) = spec.as_object_mut() {
        o.remove("template");
        o.remove("replicas");
    }
    spec["workerGroups"] = json!([
        {"name": "workflows", "deployment": {"replicas": 1, "template": template}},
        {"name": "activities", "deployment": {"replicas": 2, "template": activities}},
    ]);
    spec
}

/// Waits until every group's Deployment of `build` runs at least its replicas, ready.
async fn wait_groups(s: &Scenario, build: &str, groups: &[(&str, i32)]) {
    let api = s.deployments();
    for (group, replicas) in groups {
        let name = group_ids::deployment_name(&s.name, group, build);
        twc_testenv::wait_for(&format!("{name}: {replicas} ready"), WAIT, || {
            let (api, name) = (api.clone(), name.clone());
            async move {
                let d: Deployment = api.get(&name).await.map_err(|e| e.to_string())?;
                let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
                let labels = d.metadata.labels.unwrap_or_default();
                if labels.get(group_ids::WORKER_GROUP).map(String::as_str) != Some(*group) {
                    return Err(format!("labels {labels:?}"));
                }
                (ready >= *replicas)
                    .then_some(())
                    .ok_or(format!("{ready} ready"))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A WorkerResourceTemplate with `workerGroup: activities` makes one HPA per version, scaling
/// that group's Deployment; one without a group is `WorkerGroupNotFound` (a grouped
/// WorkerDeployment needs it named).
async fn hpa_for_one_group(s: &Scenario, build: &str) {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    use kube::api::{Api, PostParams};
    use twc_api::WorkerResourceTemplate;
    let wrts: Api<WorkerResourceTemplate> = Api::namespaced(s.client.clone(), &s.ns);
    let hpa = |name: &str, group: Option<&str>| -> WorkerResourceTemplate {
        let mut spec = json!({"workerDeploymentRef": {"name": s.name}, "template": {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "spec": {"scaleTargetRef": {}, "minReplicas": 2, "maxReplicas": 4}}});
        if let Some(g) = group {
            spec["workerGroup"] = json!(g);
        }
        from_json(
            json!({"apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
            "metadata": {"name": name, "namespace": s.ns}, "spec": spec}),
        )
    };
    for t in [
        hpa("activities-hpa", Some("activities")),
        hpa("no-group", None),
    ] {
        wrts.create(&PostParams::default(), &t)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let name = twc_controller::wrt::render::resource_name(&s.name, "activities-hpa", build);
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(s.client.clone(), &s.ns);
    let target = twc_testenv::wait_for(&format!("HPA {name}"), WAIT, || {
        let (hpas, name) = (hpas.clone(), name.clone());
        async move {
            let h = hpas.get(&name).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(h.spec.map(|s| s.scale_target_ref.name).unwrap_or_default())
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        target,
        group_ids::deployment_name(&s.name, "activities", build)
    );
    let message = twc_testenv::wait_for("no-group: WorkerGroupNotFound", WAIT, || {
        let wrts = wrts.clone();
        async move {
            let t = wrts.get("no-group").await.map_err(|e| e.to_string())?;
            t.status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| c.type_ == "Ready" && c.reason == "WorkerGroupNotFound")
                .map(|c| c.message.clone())
                .ok_or_else(|| format!("{:?}", t.status))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        message,
        format!(
            "WorkerDeployment {:?} uses worker groups; set spec.workerGroup",
            s.name
        )
    );
}

/// A two-group WorkerDeployment becomes current with both groups' Deployments up, and the
/// status names each; a change of one group's template is a new version for both, promoted
/// as one, and the old version (both groups) drains.
pub async fn worker_groups_roll_out_as_one_version(w: &'static World) {
    let mut s = Scenario::new(w, "worker-groups").await;
    let wd = s.create(grouped(&s, "v1.0")).await;
    let v1 = target_build_id(&wd);
    s.connect().await;
    s.wait_status(&Expect::target(&v1, Current).current(&v1))
        .await;
    wait_groups(&s, &v1, &[("workflows", 1), ("activities", 2)]).await;
    let status = s.get().await.status.unwrap_or_default();
    let current = status.current_version.unwrap_or_default();
    let names: Vec<(String, Option<String>)> = current
        .base
        .worker_groups
        .iter()
        .map(|g| {
            (
                g.name.clone(),
                g.deployment.as_ref().and_then(|d| d.name.clone()),
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![
            (
                "activities".to_string(),
                Some(group_ids::deployment_name(&s.name, "activities", &v1))
            ),
            (
                "workflows".to_string(),
                Some(group_ids::deployment_name(&s.name, "workflows", &v1))
            ),
        ]
    );
    assert!(
        current.base.deployment.is_none(),
        "a grouped version has no single Deployment"
    );
    hpa_for_one_group(&s, &v1).await;

    // One group's template changes: a new version of both groups.
    let mut next = grouped(&s, "v1.0");
    next["workerGroups"][1]["deployment"]["template"]["spec"]["containers"][0]["image"] =
        json!(image("v2.0"));
    s.wds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerGroups": next["workerGroups"]}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let changed: twc_api::WorkerDeployment = from_json(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": s.name, "namespace": s.ns},
        "spec": next,
    }));
    let v2 = target_build_id(&changed);
    assert_ne!(v2, v1);
    s.wait_status(
        &Expect::target(&v2, Current)
            .current(&v2)
            .deprecated(&v1, Drained),
    )
    .await;
    // The activity group's replicas are its HPA's now (the spec's 2 no longer applied).
    wait_groups(&s, &v2, &[("workflows", 1), ("activities", 1)]).await;
}
