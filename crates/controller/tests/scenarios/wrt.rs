//! WorkerResourceTemplates (TWC's `wrt-*` subtests, its `wrtTestCases`): a rolled-out
//! WorkerDeployment, then templates rendered per build ID into real HPAs and PDBs on the real
//! apiserver (which validates them; no HPA controller runs here, so only the objects are
//! checked), plus what TWC covers only in unit tests: a missing WorkerDeployment and the copy
//! of a build ID whose Deployment went away.

use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use twc_api::VersionStatus::{Current, Ramping};
use twc_api::{WorkerResourceTemplate, WorkerResourceTemplateVersionStatus};
use twc_controller::plan::deployment::selector_labels;
use twc_controller::wrt::reason;
use twc_controller::wrt::render::resource_name;
use twc_testenv::wait_for;

use crate::common::{World, from_json, logs_about};
use crate::harness::*;

/// TWC's `makeHPAWRT`: an HPA with the `scaleTargetRef: {}` sentinel.
fn hpa_template() -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "spec": {"scaleTargetRef": {}, "minReplicas": 2, "maxReplicas": 5, "metrics": []}
    })
}

fn pdb_template() -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {}}}
    })
}

/// A WorkerDeployment rolled out to v1.0 with AllAtOnce (the setup of every TWC WRT case
/// but one). Returns the scenario and the build ID.
async fn rolled_out(w: &'static World, prefix: &str) -> (Scenario, String) {
    let mut s = Scenario::new(w, prefix).await;
    s.create(s.spec(all_at_once(), &image("v1.0"))).await;
    let build = s.target_build_id();
    s.connect().await;
    s.wait_status(&Expect::target(&build, Current).current(&build))
        .await;
    (s, build)
}

fn wrts(s: &Scenario) -> Api<WorkerResourceTemplate> {
    Api::namespaced(s.client.clone(), &s.ns)
}

/// Creates template `name` for the scenario's WorkerDeployment (`ref_field`:
/// `workerDeploymentRef` or the deprecated `temporalWorkerDeploymentRef`).
async fn create_wrt_with(
    s: &Scenario,
    name: &str,
    ref_field: &str,
    template: Value,
) -> WorkerResourceTemplate {
    let wrt: WorkerResourceTemplate = from_json(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
        "metadata": {"name": name, "namespace": s.ns},
        "spec": {ref_field: {"name": s.name}, "template": template},
    }));
    wrts(s)
        .create(&PostParams::default(), &wrt)
        .await
        .unwrap_or_else(|e| panic!("create WorkerResourceTemplate {}/{name}: {e}", s.ns))
}

async fn create_wrt(s: &Scenario, name: &str, template: Value) -> WorkerResourceTemplate {
    create_wrt_with(s, name, "workerDeploymentRef", template).await
}

/// Waits until template `name` satisfies `pred`, showing its status and the controller's
/// log about it on timeout.
async fn wait_wrt(
    s: &Scenario,
    name: &str,
    what: &str,
    pred: impl Fn(&WorkerResourceTemplate) -> bool,
) -> WorkerResourceTemplate {
    let api = wrts(s);
    let pred = &pred;
    wait_for(&format!("{}/{name}: {what}", s.ns), WAIT, || {
        let api = api.clone();
        async move {
            let wrt = api.get(name).await.map_err(|e| e.to_string())?;
            if pred(&wrt) {
                Ok(wrt)
            } else {
                Err(format!(
                    "status: {}",
                    serde_json::to_string(&wrt.status).unwrap_or_default()
                ))
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontroller log:\n{}", logs_about(name)))
}

fn entry(wrt: &WorkerResourceTemplate, build: &str) -> Option<WorkerResourceTemplateVersionStatus> {
    wrt.status
        .as_ref()?
        .versions
        .iter()
        .find(|v| v.build_id == build)
        .cloned()
}

fn ready(wrt: &WorkerResourceTemplate) -> Option<(String, String, String)> {
    wrt.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// TWC's `waitForWRTStatusApplied`: the build's copy is applied at the template's current
/// generation, and Ready is True.
async fn wait_applied(s: &Scenario, name: &str, builds: &[&str]) -> WorkerResourceTemplate {
    wait_wrt(s, name, &format!("applied for {builds:?}"), |wrt| {
        builds.iter().all(|b| {
            entry(wrt, b).is_some_and(|e| {
                e.apply_error.is_none()
                    && e.last_applied_hash.as_ref().is_some_and(|h| h.len() == 16)
                    && Some(e.last_applied_generation) == wrt.metadata.generation
                    && e.last_transition_time.is_some()
            })
        }) && ready(wrt)
            .is_some_and(|(st, why, _)| st == "True" && why == reason::ALL_VERSIONS_APPLIED)
    })
    .await
}

/// Waits until an object exists and satisfies `pred`.
async fn wait_object<K>(
    s: &Scenario,
    name: &str,
    what: &str,
    pred: impl Fn(&K) -> Result<(), String>,
) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(s.client.clone(), &s.ns);
    let pred = &pred;
    wait_for(&format!("{}/{name}: {what}", s.ns), WAIT, || {
        let api = api.clone();
        async move {
            let o = api
                .get_opt(name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not there")?;
            pred(&o).map(|()| o)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontroller log:\n{}", logs_about(name)))
}

/// TWC's `waitForOwnedHPAWithInjectedScaleTargetRef`: the HPA exists, points at the versioned
/// Deployment, and is controlled by the template.
async fn wait_hpa(s: &Scenario, name: &str, deployment: &str) -> HorizontalPodAutoscaler {
    wait_object(
        s,
        name,
        &format!("HPA scaling {deployment}"),
        |h: &HorizontalPodAutoscaler| {
            let target = h.spec.as_ref().map(|s| s.scale_target_ref.clone());
            match target {
                Some(t)
                    if t.kind == "Deployment"
                        && t.name == deployment
                        && t.api_version.as_deref() == Some("apps/v1") =>
                {
                    Ok(())
                }
                other => Err(format!("scaleTargetRef {other:?}")),
            }
        },
    )
    .await
}

/// The object's controller owner is template `wrt` (TWC's `assertHPAOwnerRefToWRT`).
fn assert_controlled_by(meta: &ObjectMeta, wrt: &WorkerResourceTemplate) {
    let owners = meta.owner_references.clone().unwrap_or_default();
    let controller: Vec<_> = owners
        .iter()
        .filter(|o| o.controller == Some(true))
        .collect();
    assert_eq!(controller.len(), 1, "owners {owners:?}");
    let o = controller[0];
    assert_eq!(
        (o.kind.as_str(), o.name.as_str(), Some(&o.uid)),
        (
            "WorkerResourceTemplate",
            wrt.name_any().as_str(),
            wrt.metadata.uid.as_ref()
        ),
        "owners {owners:?}"
    );
    assert_eq!(o.block_owner_deletion, Some(true));
}

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

/// Waits for a Warning event with `reason` about template `name`.
async fn wait_wrt_warning(s: &Scenario, name: &str, reason: &str) -> String {
    s.wait_warning_about("WorkerResourceTemplate", name, reason)
        .await
}

/// `wrt-apply-failure`: a kind the apiserver does not serve gives the build ID's entry an
/// `applyError` and `lastAppliedGeneration` 0, and `Ready=False ApplyFailed` with an event.
/// (TWC's webhook is not running in its harness either; this controller has no webhook, and
/// checks what the webhook would at reconcile time: a `minReplicas: 0` template is
/// `InvalidTemplate` and nothing is applied.) The scenario binary allows `FakeResource`, so
/// the kind gets as far as API discovery.
pub async fn wrt_apply_failure(w: &'static World) {
    let (s, build) = rolled_out(w, "wrt-apply-failure").await;
    create_wrt(
        &s,
        "fail-resource",
        json!({"apiVersion": "nonexistent.example.com/v1", "kind": "FakeResource",
               "spec": {"someField": "someValue"}}),
    )
    .await;
    let wrt = wait_wrt(&s, "fail-resource", "apply failed", |t| {
        entry(t, &build).is_some_and(|e| {
            e.apply_error.as_ref().is_some_and(|m| !m.is_empty())
                && e.last_applied_generation == 0
                && e.last_applied_hash.is_none()
        })
    })
    .await;
    let (st, why, message) = ready(&wrt).unwrap_or_default();
    assert_eq!((st.as_str(), why.as_str()), ("False", reason::APPLY_FAILED));
    assert!(message.contains("FakeResource"), "{message}");
    let note = wait_wrt_warning(&s, "fail-resource", reason::APPLY_FAILED).await;
    assert!(note.contains("not served"), "{note}");

    let mut zero = hpa_template();
    zero["spec"]["minReplicas"] = json!(0);
    create_wrt(&s, "zero-hpa", zero).await;
    let wrt = wait_wrt(&s, "zero-hpa", "InvalidTemplate", |t| {
        ready(t).is_some_and(|(st, why, _)| st == "False" && why == reason::INVALID_TEMPLATE)
    })
    .await;
    let e = entry(&wrt, &build).unwrap_or_default();
    assert!(
        e.apply_error
            .as_deref()
            .unwrap_or_default()
            .contains("minReplicas must not be 0"),
        "{e:?}"
    );
    wait_wrt_warning(&s, "zero-hpa", reason::INVALID_TEMPLATE).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(s.client.clone(), &s.ns);
    let name = resource_name(&s.name, "zero-hpa", &build);
    assert!(
        hpas.get_opt(&name)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none()
    );

    // Fixed: applied, Ready again.
    wrts(&s)
        .patch(
            "zero-hpa",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"minReplicas": 1}}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_hpa(&s, &name, &s.deployment_of(&build)).await;
    wait_applied(&s, "zero-hpa", &[&build]).await;
}

/// `wrt-ssa-idempotency`: more reconciles leave the HPA untouched (same resourceVersion, one
/// owner reference), and there is one HPA per build ID.
pub async fn wrt_ssa_idempotency(w: &'static World) {
    let (s, build) = rolled_out(w, "wrt-ssa-idempotency").await;
    create_wrt(&s, "idempotent-hpa", hpa_template()).await;
    let name = resource_name(&s.name, "idempotent-hpa", &build);
    wait_hpa(&s, &name, &s.deployment_of(&build)).await;
    let wrt_before = wait_applied(&s, "idempotent-hpa", &[&build]).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(s.client.clone(), &s.ns);
    let before = hpas.get(&name).await.unwrap_or_else(|e| panic!("{e}"));
    let reconciles = crate::common::reconciles("WorkerResourceTemplate");
    // TWC pokes the WorkerDeployment; here the template is also resynced every
    // `intervals.steady` (5 s in tests).
    s.wds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test-reconcile-trigger": "1"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(
        crate::common::reconciles("WorkerResourceTemplate") > reconciles,
        "no reconcile ran"
    );
    let after = hpas.get(&name).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(after.resource_version(), before.resource_version());
    assert_eq!(
        after.owner_references().len(),
        before.owner_references().len()
    );
    let listed = hpas
        .list(&ListParams::default().labels(&format!("temporal.io/build-id={build}")))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.items.len(), 1);
    let wrt_after = wrts(&s)
        .get("idempotent-hpa")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        wrt_after.status, wrt_before.status,
        "the status was rewritten"
    );
}

/// Not a TWC subtest (its `markWRTsWDNotFound`): a template naming a WorkerDeployment that
/// does not exist is `Ready=False WorkerDeploymentNotFound`.
pub async fn wrt_worker_deployment_not_found(w: &'static World) {
    let s = Scenario::new(w, "wrt-wd-not-found").await;
    create_wrt(&s, "orphan-hpa", hpa_template()).await;
    let wrt = wait_wrt(&s, "orphan-hpa", "WorkerDeploymentNotFound", |t| {
        ready(t)
            .is_some_and(|(st, why, _)| st == "False" && why == reason::WORKER_DEPLOYMENT_NOT_FOUND)
    })
    .await;
    assert!(wrt.status.unwrap_or_default().versions.is_empty());
}

/// Not a TWC subtest (its `TestGetDeleteWorkerResources` and execplan tests): when a build
/// ID's Deployment goes, its copy is deleted and its status entry pruned; the other build's
/// copy stays.
pub async fn wrt_gone_deployment_deletes_copy(w: &'static World) {
    let mut s = Scenario::new(w, "wrt-gone-deployment").await;
    s.create(s.spec(manual(), &image("v1.0"))).await;
    let v0 = s.existing_version(&image("v0"), 1).await;
    // Registered, or the controller deletes the Deployment of a version Temporal does not know.
    s.wait_registered(&[&v0]).await;
    s.connect().await;
    let v1 = s.target_build_id();
    s.wait_registered(&[&v1]).await;
    create_wrt(&s, "sunset-hpa", hpa_template()).await;
    let (name0, name1) = (
        resource_name(&s.name, "sunset-hpa", &v0),
        resource_name(&s.name, "sunset-hpa", &v1),
    );
    wait_hpa(&s, &name0, &s.deployment_of(&v0)).await;
    wait_hpa(&s, &name1, &s.deployment_of(&v1)).await;
    wait_applied(&s, "sunset-hpa", &[&v0, &v1]).await;
    // The sunset's delete, done by hand.
    s.deployments()
        .delete(&s.deployment_of(&v0), &DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    s.wait_gone(&v0).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(s.client.clone(), &s.ns);
    wait_for(&format!("{}/{name0} deleted", s.ns), WAIT, || {
        let hpas = hpas.clone();
        let name0 = name0.clone();
        async move {
            match hpas.get_opt(&name0).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontroller log:\n{}", logs_about("sunset-hpa")));
    wait_wrt(&s, "sunset-hpa", "v0 pruned", |t| {
        entry(t, &v0).is_none() && entry(t, &v1).is_some()
    })
    .await;
    assert!(
        hpas.get_opt(&name1)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_some()
    );
}

/// Ours (TWC's `HasScaleTarget`): a template that scales the versions (an HPA) owns their
/// replicas; the WorkerDeployment stops setting them. Without one, the spec's replicas win.
pub async fn wrt_scaler_owns_replicas(w: &'static World) {
    use k8s_openapi::api::apps::v1::Deployment;
    let (s, build) = rolled_out(w, "wrt-scaler").await;
    let name = twc_controller::plan::build_id::deployment_name(&s.name, &build);
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &s.ns);
    let scale_to = |n: i32| {
        let deployments = deployments.clone();
        let name = name.clone();
        async move {
            deployments
                .patch_scale(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": n}})),
                )
                .await
                .unwrap_or_else(|e| panic!("scale {name}: {e}"));
        }
    };
    let replicas_become = |n: i32, why: &'static str| {
        let deployments = deployments.clone();
        let name = name.clone();
        async move {
            wait_for(why, Duration::from_secs(60), || {
                let deployments = deployments.clone();
                let name = name.clone();
                async move {
                    let r = deployments
                        .get(&name)
                        .await
                        .map_err(|e| e.to_string())?
                        .spec
                        .and_then(|s| s.replicas);
                    if r == Some(n) {
                        Ok(())
                    } else {
                        Err(format!("replicas {r:?}"))
                    }
                }
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        }
    };
    // No scaler: someone scaling the version is undone by the spec (replicas: 1).
    scale_to(3).await;
    replicas_become(1, "the spec's replicas restored").await;

    create_wrt(&s, "hpa", hpa_template()).await;
    wait_applied(&s, "hpa", &[&build]).await;
    scale_to(3).await;
    // The scale change re-triggers the WorkerDeployment (its Deployment's replicas changed);
    // give it time to (wrongly) act, then check the scaler's value stands.
    tokio::time::sleep(Duration::from_secs(5)).await;
    replicas_become(3, "the scaler's replicas kept").await;
}
