//! TWC #544 on the real apiserver: an HPA's copy leaves a version scaled down at sunset while
//! its Deployment is still there, and a PodDisruptionBudget's copy stays until the Deployment
//! goes.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use serde_json::json;
use twc_api::VersionStatus::{Current, Drained};
use twc_controller::wrt::render::resource_name;
use twc_testenv::wait_for;

use super::{create_wrt, entry, hpa_template, pdb_template, ready, wait_applied, wait_wrt};
use crate::common::{World, logs_about};
use crate::harness::*;

/// v0 Drained (no workflow pinned to it), v1 the new target; `scaledownDelay` 20 s,
/// `deleteDelay` 60 s. Both templates get a copy for v0 while it keeps its workers; once v0 is
/// scaled to zero, the HPA's copy is deleted and pruned from the status, the PDB's stays, and
/// v0's Deployment is still there.
pub async fn wrt_autoscaler_deleted_at_sunset(w: &'static World) {
    let mut s = Scenario::new(w, "wrt-sunset").await;
    let mut spec = s.spec(all_at_once(), &image("v1.0"));
    spec["sunset"] = json!({"scaledownDelay": "20s", "deleteDelay": "60s"});
    s.create(spec).await;
    let v0 = s.existing_version(&image("v0"), 1).await;
    s.wait_registered(&[&v0]).await;
    s.set_current(&v0).await;
    s.set_current("").await;
    s.wait_versions(&[&v0], Drained).await;
    s.connect().await;
    let v1 = s.target_build_id();
    create_wrt(&s, "autoscaler", hpa_template()).await;
    create_wrt(&s, "budget", pdb_template()).await;
    s.wait_status(
        &Expect::target(&v1, Current)
            .current(&v1)
            .deprecated(&v0, Drained),
    )
    .await;
    wait_applied(&s, "autoscaler", &[&v0, &v1]).await;
    wait_applied(&s, "budget", &[&v0, &v1]).await;

    // Sunset: v0 goes to zero replicas and its autoscaler with it.
    s.wait_replicas(&v0, 0).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(s.client.clone(), &s.ns);
    let hpa0 = resource_name(&s.name, "autoscaler", &v0);
    wait_for(&format!("{}/{hpa0} deleted", s.ns), WAIT, || {
        let (hpas, hpa0) = (hpas.clone(), hpa0.clone());
        async move {
            match hpas.get_opt(&hpa0).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontroller log:\n{}", logs_about("autoscaler")));
    // Its Deployment is still there (deleteDelay), and so is the budget's copy.
    assert!(
        s.deployments()
            .get_opt(&s.deployment_of(&v0))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_some(),
        "v0's Deployment went before the delete delay"
    );
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.ns);
    let pdb0 = resource_name(&s.name, "budget", &v0);
    assert!(
        pdbs.get_opt(&pdb0)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_some(),
        "the PodDisruptionBudget's copy of v0 went with the autoscaler's"
    );
    let hpa1 = resource_name(&s.name, "autoscaler", &v1);
    assert!(
        hpas.get_opt(&hpa1)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_some()
    );
    let t = wait_wrt(&s, "autoscaler", "v0 pruned", |t| {
        entry(t, &v0).is_none() && entry(t, &v1).is_some()
    })
    .await;
    let (st, _, message) = ready(&t).unwrap_or_default();
    assert_eq!(st, "True");
    assert!(message.contains("scaled down at sunset"), "{message}");
}
