//! The restart pace on the real apiserver: one client certificate Secret shared by several
//! WorkerDeployments, renewed; their workers restart a few versioned Deployments at a time.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::{QUICK, ROLLOUT};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use twc_api::labels::CREDENTIALS_RESTARTED_AT;
use twc_testenv::wait_for;

/// The controller's default `--restart-pace` (the tests' controller keeps it).
const PACE: usize = twc_controller::restarts::DEFAULT_LIMIT;

/// Whether `d` restarted onto the digest it records (the pod template carries it).
fn restarted(d: &Deployment) -> bool {
    let (recorded, on_template, _) = crate::clients::digests(d);
    on_template.is_some() && on_template == recorded
}

/// Five WorkerDeployments of one namespace share its client certificate Secret and a Temporal
/// namespace. Renewed, it
/// restarts every one of their versions, never more than the pace at once (as the apiserver
/// shows them, fresher than the controller's cache), and those that wait say so (status and
/// event). Without the pace all five restart at once (the peak printed is the figure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_secret_renewed_restarts_its_users_a_few_at_a_time() -> TestResult {
    let sc = SharedConnection::new("pace").await?;
    let ns = sc.tenant("pace").await;
    let names = ["p1", "p2", "p3", "p4", "p5"];
    let wds = Api::<twc_api::WorkerDeployment>::namespaced(sc.client.clone(), &ns);
    // One Temporal namespace for all (the pace counts per address and namespace).
    let temporal_ns = sc
        .user(&ns, names[0])
        .await
        .spec
        .worker_options
        .temporal_namespace;
    for n in &names[1..] {
        let cc = cluster_ref(&sc.cc);
        sc.w.worker_deployment_in(&ns, n, cc, "v1", &temporal_ns)
            .await;
    }
    for n in names {
        wait_wd(&sc.client, &ns, n, "v1 rolled out", ROLLOUT, rolled_out).await;
    }
    let deployments = Api::<Deployment>::namespaced(sc.client.clone(), &ns);
    let versions = ListParams::default().labels(twc_api::labels::BUILD_ID);
    let before = deployments.list(&versions).await?.items;
    assert_eq!(before.len(), names.len(), "one version each");
    assert!(
        before.iter().all(|d| !restarted(d)),
        "restarted before the renewal"
    );
    // A restart holds its place until its new pod has been ready for 5 s (the pod runner
    // starts workers in well under a second, quicker than the WorkerDeployments' reconciles).
    // Set on the Deployments themselves: no pod restarts for it.
    let slow = json!({"spec": {"minReadySeconds": 5}});
    for d in &before {
        deployments
            .patch(&d.name_any(), &PatchParams::default(), &Patch::Merge(&slow))
            .await?;
    }
    wait_for("the Deployments took minReadySeconds", QUICK, || {
        let (deployments, versions) = (deployments.clone(), versions.clone());
        async move {
            let now = deployments
                .list(&versions)
                .await
                .map_err(|e| e.to_string())?;
            now.items
                .iter()
                .all(|d| {
                    d.spec.as_ref().and_then(|s| s.min_ready_seconds) == Some(5)
                        && twc_testenv::deployments::rolled_out(d)
                })
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        }
    })
    .await?;

    let renewed = sc.w.mtls_secret(MTLS_SECRET, time::Duration::days(90));
    Api::<Secret>::namespaced(sc.client.clone(), &ns)
        .patch(
            MTLS_SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": renewed.string_data})),
        )
        .await?;

    let started = Instant::now();
    let (mut peak, mut waited_in_status) = (0, false);
    loop {
        let now = deployments.list(&versions).await?.items;
        let restarting = now
            .iter()
            .filter(|d| {
                d.annotations().contains_key(CREDENTIALS_RESTARTED_AT)
                    && !twc_testenv::deployments::rolled_out(d)
            })
            .count();
        peak = peak.max(restarting);
        waited_in_status |= wds.list(&Default::default()).await?.items.iter().any(|w| {
            w.status
                .as_ref()
                .is_some_and(|s| !s.restarts_waiting.is_empty())
        });
        if now.len() == names.len()
            && now
                .iter()
                .all(|d| restarted(d) && twc_testenv::deployments::rolled_out(d))
        {
            break;
        }
        if started.elapsed() > ROLLOUT * 2 {
            let state: Vec<_> = now
                .iter()
                .map(|d| {
                    (
                        d.name_any(),
                        restarted(d),
                        twc_testenv::deployments::rolled_out(d),
                    )
                })
                .collect();
            return Err(format!("not all restarted: {state:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{} versioned Deployments restarted in {:.1} s, at most {peak} at once (pace {PACE}); a wait listed in a status: {waited_in_status}",
        names.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(peak >= 1, "no restart seen under way");
    assert!(
        peak <= PACE,
        "{peak} restarting at once, the pace is {PACE}: {}",
        logs_about("restart onto renewed credentials")
    );
    // Five at once against a pace of three: some waited, and said so.
    wait_event(
        &sc.client,
        &ns,
        "CredentialsRestartWaiting",
        "waits for its turn",
        QUICK,
    )
    .await;
    assert!(
        waited_in_status,
        "no WorkerDeployment listed a restart waiting"
    );
    // Nothing waits any more.
    wait_for("no restart waiting", QUICK, || {
        let wds = wds.clone();
        async move {
            let list = wds
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .all(|w| {
                    w.status
                        .as_ref()
                        .is_none_or(|s| s.restarts_waiting.is_empty())
                })
                .then_some(())
                .ok_or_else(|| "a restart still listed as waiting".to_string())
        }
    })
    .await?;
    Ok(())
}
