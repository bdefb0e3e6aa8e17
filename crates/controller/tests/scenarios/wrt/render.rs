//! What a template renders into, per build ID: the HPA and its owner, the injected
//! `scaleTargetRef`, `matchLabels` and metric selectors, several templates and versions.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use serde_json::json;
use twc_api::VersionStatus::Ramping;
use twc_controller::plan::deployment::selector_labels;
use twc_controller::wrt::render::resource_name;

use super::{
    assert_controlled_by, create_wrt, create_wrt_with, entry, hpa_template, pdb_template,
    rolled_out, wait_applied, wait_hpa, wait_object, wait_wrt, wrts,
};
use crate::common::World;
use crate::harness::*;

/// `wrt-creates-hpa-per-build-id`: the HPA of the build ID, under its computed name, owned by
/// the template and pointing at the versioned Deployment; the template's status says
/// applied, and the template itself is now owned by the WorkerDeployment.
pub async fn wrt_creates_hpa_per_build_id(w: &'static World) {
    let (s, build) = rolled_out(w, "wrt-hpa-per-build").await;
    let wrt = create_wrt(&s, "my-hpa", hpa_template()).await;
    let name = resource_name(&s.name, "my-hpa", &build);
    assert!(
        name.len() <= 47
            && name.starts_with(&format!("worker-my-hpa-{}-", build.replace('.', "-"))),
        "{name}"
    );
    let hpa = wait_hpa(&s, &name, &s.deployment_of(&build)).await;
    assert_controlled_by(&hpa.metadata, &wrt);
    let labels = hpa.labels().clone();
    for (k, v) in selector_labels(&s.name, &build) {
        assert_eq!(labels.get(&k), Some(&v), "labels {labels:?}");
    }
    let spec = hpa.spec.clone().unwrap_or_default();
    assert_eq!((spec.min_replicas, spec.max_replicas), (Some(2), 5));
    let wrt = wait_applied(&s, "my-hpa", &[&build]).await;
    assert_eq!(
        entry(&wrt, &build).and_then(|e| e.resource_name),
        Some(name.clone())
    );
    // The template is owned by its WorkerDeployment (garbage-collected with it).
    let wd = s.get().await;
    let wrt = wait_wrt(&s, "my-hpa", "owned by the WorkerDeployment", |t| {
        t.owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == wd.metadata.uid.as_ref())
    })
    .await;
    let owner = &wrt.owner_references()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.block_owner_deletion
        ),
        ("WorkerDeployment", s.name.as_str(), Some(true))
    );
}

/// `wrt-owner-ref`: the HPA's controller is the template (not the Deployment or the
/// WorkerDeployment); here through the deprecated `temporalWorkerDeploymentRef`, as TWC's
/// tests create it.
pub async fn wrt_owner_ref(w: &'static World) {
    let (s, build) = rolled_out(w, "wrt-owner-ref").await;
    let wrt = create_wrt_with(
        &s,
        "ownerref-hpa",
        "temporalWorkerDeploymentRef",
        hpa_template(),
    )
    .await;
    let name = resource_name(&s.name, "ownerref-hpa", &build);
    let hpa = wait_hpa(&s, &name, &s.deployment_of(&build)).await;
    assert_controlled_by(&hpa.metadata, &wrt);
    assert_eq!(hpa.owner_references().len(), 1);
}

/// `wrt-matchlabels-injection`: a PDB's `selector.matchLabels: {}` gets the version's
/// selector labels.
pub async fn wrt_matchlabels_injection(w: &'static World) {
    let (s, build) = rolled_out(w, "wrt-matchlabels").await;
    create_wrt(&s, "matchlabels-pdb", pdb_template()).await;
    let name = resource_name(&s.name, "matchlabels-pdb", &build);
    let want = selector_labels(&s.name, &build);
    wait_object(
        &s,
        &name,
        "PDB selecting the version's pods",
        |p: &PodDisruptionBudget| {
            let got = p
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| s.match_labels.clone())
                .unwrap_or_default();
            if got == want {
                Ok(())
            } else {
                Err(format!("matchLabels {got:?}"))
            }
        },
    )
    .await;
    wait_applied(&s, "matchlabels-pdb", &[&build]).await;
}

/// `wrt-multiple-wrts-same-twd`: an HPA and a PDB template on one WorkerDeployment are both
/// applied, under one field manager, without conflict.
pub async fn wrt_multiple_wrts_same_twd(w: &'static World) {
    let (s, build) = rolled_out(w, "wrt-multiple-wrts").await;
    let hpa_wrt = create_wrt(&s, "multi-hpa", hpa_template()).await;
    let pdb_wrt = create_wrt(&s, "multi-pdb", pdb_template()).await;
    let hpa = wait_hpa(
        &s,
        &resource_name(&s.name, "multi-hpa", &build),
        &s.deployment_of(&build),
    )
    .await;
    assert_controlled_by(&hpa.metadata, &hpa_wrt);
    let pdb: PodDisruptionBudget = wait_object(
        &s,
        &resource_name(&s.name, "multi-pdb", &build),
        "PDB",
        |_: &PodDisruptionBudget| Ok(()),
    )
    .await;
    assert_controlled_by(&pdb.metadata, &pdb_wrt);
    wait_applied(&s, "multi-hpa", &[&build]).await;
    wait_applied(&s, "multi-pdb", &[&build]).await;
}

/// `wrt-metric-selector-injection`: an External metric's `matchLabels` gets the three
/// Temporal labels of the version, and keeps the user's.
pub async fn wrt_metric_selector_injection(w: &'static World) {
    let (s, build) = rolled_out(w, "wrt-metric-selector").await;
    let mut template = hpa_template();
    template["spec"]["metrics"] = json!([{
        "type": "External",
        "external": {
            "metric": {"name": "temporal_backlog_count_by_version",
                       "selector": {"matchLabels": {"task_type": "Activity"}}},
            "target": {"type": "AverageValue", "averageValue": "1"}
        }
    }]);
    create_wrt(&s, "metric-hpa", template).await;
    let name = resource_name(&s.name, "metric-hpa", &build);
    let want: std::collections::BTreeMap<String, String> = [
        ("task_type", "Activity".to_string()),
        (
            "temporal_worker_deployment_name",
            format!("{}_{}", s.ns, s.name),
        ),
        ("temporal_worker_build_id", build.clone()),
        ("temporal_namespace", s.temporal_ns.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    wait_object(
        &s,
        &name,
        "metric selector labels",
        |h: &HorizontalPodAutoscaler| {
            let got = h
                .spec
                .as_ref()
                .and_then(|s| s.metrics.as_ref())
                .and_then(|m| m.first())
                .and_then(|m| m.external.as_ref())
                .and_then(|e| e.metric.selector.as_ref())
                .and_then(|s| s.match_labels.clone())
                .unwrap_or_default();
            if got == want {
                Ok(())
            } else {
                Err(format!("matchLabels {got:?}"))
            }
        },
    )
    .await;
    wait_applied(&s, "metric-hpa", &[&build]).await;
}

/// `wrt-multiple-active-versions`: v0 current and v1.0 ramping each get their own HPA.
pub async fn wrt_multiple_active_versions(w: &'static World) {
    let mut s = Scenario::new(w, "wrt-multi-versions").await;
    s.create(s.spec(progressive(5, "1h"), &image("v1.0"))).await;
    let v0 = s.existing_version(&image("v0"), 1).await;
    s.wait_registered(&[&v0]).await;
    s.set_current(&v0).await;
    s.connect().await;
    let v1 = s.target_build_id();
    s.wait_status(&Expect::target(&v1, Ramping).ramp(5.0).current(&v0))
        .await;
    create_wrt(&s, "multi-ver-hpa", hpa_template()).await;
    for build in [&v0, &v1] {
        wait_hpa(
            &s,
            &resource_name(&s.name, "multi-ver-hpa", build),
            &s.deployment_of(build),
        )
        .await;
    }
    let wrt = wait_applied(&s, "multi-ver-hpa", &[&v0, &v1]).await;
    let mut builds: Vec<_> = wrt
        .status
        .iter()
        .flat_map(|s| s.versions.iter())
        .map(|v| v.build_id.clone())
        .collect();
    let sorted = {
        let mut b = builds.clone();
        b.sort();
        b
    };
    assert_eq!(builds, sorted, "status entries are sorted by build ID");
    builds.dedup();
    assert_eq!(builds.len(), 2);
}

/// `wrt-scaletargetref-empty-object-sentinel`: `scaleTargetRef: {}` survives the apiserver
/// (a `null` would be dropped) and is filled in.
pub async fn wrt_scaletargetref_empty_object_sentinel(w: &'static World) {
    let (s, build) = rolled_out(w, "wrt-sentinel").await;
    let mut template = hpa_template();
    template["spec"]["minReplicas"] = json!(1);
    template["spec"]["maxReplicas"] = json!(3);
    create_wrt(&s, "empty-obj-sentinel-hpa", template).await;
    let stored = wrts(&s)
        .get("empty-obj-sentinel-hpa")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        stored.spec.template.pointer("/spec/scaleTargetRef"),
        Some(&json!({})),
        "stored template {}",
        stored.spec.template
    );
    wait_hpa(
        &s,
        &resource_name(&s.name, "empty-obj-sentinel-hpa", &build),
        &s.deployment_of(&build),
    )
    .await;
    wait_applied(&s, "empty-obj-sentinel-hpa", &[&build]).await;
}
