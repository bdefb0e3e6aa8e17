//! WorkerResourceTemplates (TWC's `wrt-*` subtests, its `wrtTestCases`): a rolled-out
//! WorkerDeployment, then templates rendered per build ID into real HPAs and PDBs on the real
//! apiserver (which validates them; no HPA controller runs here, so only the objects are
//! checked), plus what TWC covers only in unit tests: a missing WorkerDeployment and the copy
//! of a build ID whose Deployment went away.

#[path = "wrt/apply.rs"]
mod apply;
#[path = "wrt/render.rs"]
mod render;
#[path = "wrt/sunset.rs"]
mod sunset;

pub use apply::*;
pub use render::*;
pub use sunset::*;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use twc_api::VersionStatus::Current;
use twc_api::{WorkerResourceTemplate, WorkerResourceTemplateVersionStatus};
use twc_controller::wrt::reason;
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
