//! How the rendered copies are applied and kept: a failed apply, idempotent applies, a missing
//! WorkerDeployment, a copy deleted with its Deployment, and who owns the replicas.

use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use twc_controller::wrt::reason;
use twc_controller::wrt::render::resource_name;
use twc_testenv::wait_for;

use super::{
    create_wrt, entry, hpa_template, ready, rolled_out, wait_applied, wait_hpa, wait_wrt, wrts,
};
use crate::common::{World, logs_about};
use crate::harness::*;

/// Waits for a Warning event with `reason` about template `name`.
async fn wait_wrt_warning(s: &Scenario, name: &str, reason: &str) -> String {
    s.wait_warning_about("WorkerResourceTemplate", name, reason)
        .await
}

/// `wrt-apply-failure`: a kind the apiserver does not serve gives the build ID's entry an
/// `applyError` and `lastAppliedGeneration` 0, and `Ready=False ApplyFailed` with an event.
/// (TWC's webhook is not running in its harness either; this controller has no webhook, and
/// checks what the webhook would at reconcile time: a `minReplicas: 0` template is
/// `InvalidTemplate` and nothing is applied, and so is a kind named `HorizontalPodAutoscaler`
/// in another API group.) The scenario binary allows `FakeResource`, so the kind gets as far
/// as API discovery.
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

    // A kind named like a built-in one, in another API group, is not that kind.
    create_wrt(
        &s,
        "impostor-hpa",
        json!({"apiVersion": "evil.example.com/v1", "kind": "HorizontalPodAutoscaler",
               "spec": {"scaleTargetRef": {}}}),
    )
    .await;
    let wrt = wait_wrt(&s, "impostor-hpa", "InvalidTemplate", |t| {
        ready(t).is_some_and(|(st, why, _)| st == "False" && why == reason::INVALID_TEMPLATE)
    })
    .await;
    let (_, _, message) = ready(&wrt).unwrap_or_default();
    assert!(
        message.contains("kind evil.example.com/HorizontalPodAutoscaler is not allowed"),
        "{message}"
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

/// Upstream's worker-group targeting on a WorkerDeployment without groups: `workerGroup: gpu`
/// is `Ready=False WorkerGroupNotFound` naming both, with no copy and Reconciling (a change can
/// clear it); set to `default` (its one group), the copy is applied.
pub async fn wrt_worker_group_not_found(w: &'static World) {
    use crate::common::from_json;
    use kube::api::PostParams;
    use twc_api::WorkerResourceTemplate;
    let (s, build) = rolled_out(w, "wrt-group").await;
    let wrt: WorkerResourceTemplate = from_json(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
        "metadata": {"name": "gpu-hpa", "namespace": s.ns},
        "spec": {"workerDeploymentRef": {"name": s.name}, "workerGroup": "gpu",
                 "template": hpa_template()},
    }));
    wrts(&s)
        .create(&PostParams::default(), &wrt)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t = wait_wrt(&s, "gpu-hpa", "WorkerGroupNotFound", |t| {
        ready(t).is_some_and(|(st, why, _)| st == "False" && why == reason::WORKER_GROUP_NOT_FOUND)
    })
    .await;
    let (_, _, message) = ready(&t).unwrap_or_default();
    assert_eq!(
        message,
        format!("WorkerDeployment {:?} has no group \"gpu\"", s.name)
    );
    let conditions = t.status.clone().unwrap_or_default().conditions;
    let status_of = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    };
    assert_eq!(status_of("Stalled").as_deref(), Some("False"));
    assert_eq!(status_of("Reconciling").as_deref(), Some("True"));
    assert!(entry(&t, &build).is_none(), "no copy for another group");
    wrts(&s)
        .patch(
            "gpu-hpa",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerGroup": "default"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_applied(&s, "gpu-hpa", &[&build]).await;
}

/// Not a TWC subtest (its `TestGetDeleteWorkerResources` and execplan tests): when a build
/// ID's Deployment goes, its copy is deleted and its status entry pruned; the other build's
/// copy stays.
pub async fn wrt_gone_deployment_deletes_copy(w: &'static World) {
    let mut s = Scenario::new(w, "wrt-gone-deployment").await;
    s.create(s.spec(manual(), &image("v1.0"))).await;
    let v0 = s.existing_version(&image("v0"), 1).await;
    // Registered, or the controller deletes the Deployment of a version Temporal does not know;
    // and current, or, never having served, it is retired once scaled down (TWC #577).
    s.wait_registered(&[&v0]).await;
    s.set_current(&v0).await;
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

/// TWC #448: once the target is current, `Progressing` says whether its task queues have
/// active pollers, from Temporal (the worker list), not from the pods. An autoscaler scales the
/// current version to 0 (a WorkerResourceTemplate's HPA owns the replicas; no HPA controller
/// runs here, so the test scales as one would): `Progressing=True WaitingForPollers` naming the
/// task queue, with a Warning; scaled back up, `False ActivePollers`, with a Normal event.
pub async fn wrt_current_version_without_pollers_is_reported(w: &'static World) {
    use twc_api::conditions::WAITING_FOR_POLLERS;
    use twc_api::conditions::{ACTIVE_POLLERS, READY, ROLLOUT_COMPLETE};
    let (s, build) = rolled_out(w, "wrt-pollers").await;
    let message = wait_pollers(&s, "False", ACTIVE_POLLERS).await;
    assert!(message.contains(&build), "{message}");
    s.wait_event_about("Normal", "WorkerDeployment", &s.name, ACTIVE_POLLERS)
        .await;

    create_wrt(&s, "hpa", hpa_template()).await;
    wait_applied(&s, "hpa", &[&build]).await;
    s.scale(&build, 0).await;
    let message = wait_pollers(&s, "True", WAITING_FOR_POLLERS).await;
    assert!(
        message.contains(&build) && message.contains(&s.name),
        "names the version and its task queue: {message}"
    );
    let warning = s.wait_warning(WAITING_FOR_POLLERS).await;
    assert_eq!(warning, message);
    // Still the rollout's outcome: complete.
    s.wait_condition(READY, "True", ROLLOUT_COMPLETE).await;

    s.scale(&build, 1).await;
    wait_pollers(&s, "False", ACTIVE_POLLERS).await;
}

/// Waits for `Progressing` with `status` and `reason`; on a timeout, fails with what the
/// controller judged of the pollers.
async fn wait_pollers(s: &Scenario, status: &str, reason: &str) -> String {
    use twc_api::conditions::PROGRESSING;
    let wds = s.wds();
    // A worker's first heartbeat may come a full interval (60 s) after it started, and the
    // controller trusts the list's silence only 90 s after the workers came up.
    let reached = wait_for(&format!("Progressing={status} {reason}"), WAIT * 3, || {
        let wds = wds.clone();
        let name = s.name.clone();
        async move {
            let wd = wds.get(&name).await.map_err(|e| e.to_string())?;
            match crate::common::condition(&wd, PROGRESSING) {
                Some((st, r, m)) if st == status && r == reason => Ok(m),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    if reached.is_err() {
        use temporalio_common::protos::temporal::api::workflowservice::v1::ListWorkersRequest;
        let listed = s
            .temporal
            .workflow_service()
            .list_workers(temporalio_client::tonic::Request::new(ListWorkersRequest {
                namespace: s.temporal_ns.clone(),
                page_size: 100,
                ..Default::default()
            }))
            .await;
        eprintln!("ListWorkers now: {listed:?}");
    }
    reached.unwrap_or_else(|e| {
        let judged: Vec<String> = logs_about("pollers: ")
            .lines()
            .filter(|l| l.contains(&s.ns))
            .map(str::to_string)
            .collect();
        panic!("{e}; the controller's judgements:\n{}", judged.join("\n"))
    })
}
