//! The rollout a user cares about most, end to end with real workers: Progressive v1 -> v2
//! while a workflow pinned to v1 runs. v1 keeps its workers while Draining, becomes Drained when
//! the workflow completes, is scaled to zero after `scaledownDelay` and deleted, from
//! Kubernetes and from Temporal, after `deleteDelay`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use twc_api::{VersionStatus, WorkerDeployment};

const WAIT: Duration = Duration::from_secs(120);
const PINNED_SECONDS: u64 = 60;

fn deprecated(wd: &WorkerDeployment, build: &str) -> Option<VersionStatus> {
    wd.status
        .iter()
        .flat_map(|s| &s.deprecated_versions)
        .find(|d| d.base.build_id == build)
        .map(|d| d.base.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progressive_rollout_keeps_a_pinned_version_until_its_workflow_ends() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.tenant("progressive").await;
    let cc = format!("progressive-{ns}");
    w.cluster_connection(&cc).await;
    let wd = w.worker_deployment(&ns, "w", cluster_ref(&cc), "v1").await;
    let temporal_ns = wd.spec.worker_options.temporal_namespace.clone();
    let wd = wait_wd(&client, &ns, "w", "v1 current", WAIT, rolled_out).await;
    let v1 = wd
        .status
        .and_then(|s| s.current_version)
        .map(|c| c.base.build_id)
        .unwrap_or_default();

    let temporal = w.env.temporal.connect().await?;
    let seconds = PINNED_SECONDS.to_string();
    twc_testenv::temporal::start_workflow(
        &temporal,
        &temporal_ns,
        "w",
        "Sleep",
        "pinned",
        Some(&seconds),
    )
    .await?;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let wds: Api<WorkerDeployment> = Api::namespaced(client.clone(), &ns);
    wds.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "rollout": {"strategy": "Progressive", "steps": [{"rampPercentage": 50, "pauseDuration": "30s"}]},
            "sunset": {"scaledownDelay": "1s", "deleteDelay": "1s"},
            "template": {"spec": {"containers": [{
                "name": "worker",
                "image": format!("{WORKER_IMAGE}:v2"),
                "env": [{"name": "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "value": "/etc/temporal/tls/ca.crt"}]
            }]}}
        }})),
    )
    .await?;
    let ramping = wait_wd(&client, &ns, "w", "v2 ramping at 50%", WAIT, |wd| {
        wd.status
            .as_ref()
            .and_then(|s| s.target_version.as_ref())
            .is_some_and(|t| {
                t.base.status == VersionStatus::Ramping && t.ramp_percentage == Some(50.0)
            })
    })
    .await;
    let v2 = ramping
        .status
        .and_then(|s| s.target_version)
        .map(|t| t.base.build_id)
        .unwrap_or_default();
    assert_ne!(v1, v2);

    // After the 30 s pause v2 is current; the pinned workflow still runs, so v1 drains with its
    // workers up.
    let promoted = wait_wd(&client, &ns, "w", "v2 current", WAIT, rolled_out).await;
    assert!(
        started.elapsed() < Duration::from_secs(PINNED_SECONDS),
        "the workflow ended before the promotion; the test proves nothing"
    );
    assert_eq!(
        deprecated(&promoted, &v1),
        Some(VersionStatus::Draining),
        "{:?}",
        promoted.status
    );
    let v1_deployment = twc_controller::plan::build_id::deployment_name("w", &v1);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let replicas = deployments
        .get(&v1_deployment)
        .await?
        .spec
        .and_then(|s| s.replicas);
    assert_eq!(replicas, Some(1), "a draining version keeps its workers");

    // The workflow ends; v1 is drained, scaled down and deleted, in Kubernetes and Temporal.
    wait_wd(&client, &ns, "w", "v1 gone from the status", WAIT, |wd| {
        rolled_out(wd) && deprecated(wd, &v1).is_none()
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(PINNED_SECONDS),
        "v1 went before its pinned workflow could finish"
    );
    assert!(deployments.get_opt(&v1_deployment).await?.is_none());
    let deployment_name = twc_controller::plan::build_id::temporal_deployment_name(&ns, "w");
    twc_testenv::wait_for("v1 deleted from Temporal", WAIT, || {
        let (temporal, temporal_ns, deployment_name, v1) =
            (&temporal, &temporal_ns, &deployment_name, &v1);
        async move {
            let state = twc_controller::temporal::describe(temporal, temporal_ns, deployment_name)
                .await
                .map_err(|e| e.to_string())?;
            if state.versions.contains_key(v1) {
                Err(format!("versions: {:?}", state.versions.keys()))
            } else {
                Ok(())
            }
        }
    })
    .await?;
    let status = twc_testenv::temporal::workflow_status(&temporal, &temporal_ns, "pinned").await?;
    assert_eq!(status, "Completed", "the pinned workflow finished on v1");
    Ok(())
}

/// The dev server's own NotFound answers, classified by their failure type: a worker
/// deployment that does not exist (in a namespace that does) is absent, so its state is empty;
/// a Temporal namespace that does not exist is not known, so describing fails and nothing
/// reads as "no versions" (which would let a deletion go on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_temporal_namespace_is_never_an_empty_worker_deployment() -> TestResult {
    use twc_controller::temporal::missing::{Missing, missing};
    let w = world(true).await?;
    let temporal = w.env.temporal.connect().await?;
    let temporal_ns = w.env.temporal_namespace().await?;
    let state = twc_controller::temporal::describe(&temporal, &temporal_ns, "ns/nobody").await?;
    assert!(state.versions.is_empty() && state.current_build_id.is_none());
    let error = twc_controller::temporal::describe(&temporal, "no-such-namespace", "ns/nobody")
        .await
        .err()
        .ok_or("a missing Temporal namespace described as an empty worker deployment")?;
    assert_eq!(missing(&error), Some(Missing::Namespace), "{error:?}");
    Ok(())
}

/// The destructive writes of an execution carry the view the plan was made from: against the
/// real apiserver, a scale-down and a delete planned on a Deployment that changed since are
/// refused (409) and change nothing; on the current view they go through; a scale-up, which
/// stops nothing, needs no precondition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_plan_cannot_scale_down_or_delete_a_deployment_that_changed() -> TestResult {
    use twc_controller::plan::ObservedDeployment;
    use twc_controller::workerdeployment::execute::{delete_params, scale_body};
    // The world of this binary runs a controller (whichever test starts it first); it leaves
    // this unowned Deployment alone.
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.env.namespace("preconditions").await?;
    let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let created = api
        .create(
            &Default::default(),
            &from_json(json!({
                "metadata": {"name": "d"},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
                    "template": {"metadata": {"labels": {"app": "d"}},
                        "spec": {"containers": [{"name": "c", "image": "none"}]}}}
            })),
        )
        .await?;
    let view = |d: &Deployment| ObservedDeployment {
        name: "d".into(),
        spec_replicas: d.spec.as_ref().and_then(|s| s.replicas),
        uid: d.metadata.uid.clone(),
        resource_version: d.metadata.resource_version.clone(),
        ..Default::default()
    };
    let stale = view(&created);
    // Changed since the plan looked.
    let changed = api
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await?;
    let conflict =
        |r: Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 409);
    let scaled = api
        .patch_scale(
            "d",
            &PatchParams::default(),
            &Patch::Merge(scale_body(Some(&stale), 0)),
        )
        .await;
    assert!(
        conflict(scaled.map(|_| ())),
        "a stale scale-down went through"
    );
    let deleted = api.delete("d", &delete_params(Some(&stale))).await;
    assert!(conflict(deleted.map(|_| ())), "a stale delete went through");
    let still = api.get("d").await?;
    assert_eq!(still.spec.as_ref().and_then(|s| s.replicas), Some(2));
    assert!(still.metadata.deletion_timestamp.is_none());
    // A scale-up on the stale view: nothing is stopped, no precondition.
    api.patch_scale(
        "d",
        &PatchParams::default(),
        &Patch::Merge(scale_body(Some(&stale), 3)),
    )
    .await?;
    // On the current view both go through (kube-controller-manager writes the Deployment's
    // status meanwhile: a view it outdated is refused too, and taken again).
    assert_ne!(
        view(&api.get("d").await?).resource_version,
        view(&changed).resource_version
    );
    let again = Duration::from_secs(20);
    twc_testenv::wait_for("a scale-down on the current view", again, || async {
        let now = view(&api.get("d").await.map_err(|e| e.to_string())?);
        let body = Patch::Merge(scale_body(Some(&now), 0));
        api.patch_scale("d", &PatchParams::default(), &body)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await?;
    twc_testenv::wait_for("a delete on the current view", again, || async {
        let now = view(&api.get("d").await.map_err(|e| e.to_string())?);
        api.delete("d", &delete_params(Some(&now)))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await?;
    Ok(())
}
