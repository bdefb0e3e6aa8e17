//! Finalizers converge after the controller was down while references changed or
//! WorkerDeployments were deleted: they are computed from the current objects, not from
//! remembered events.

mod common;

use std::time::Duration;

use common::*;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use twc_api::WorkerDeployment;
use twc_controller::controller::prepare;

const QUICK: Duration = Duration::from_secs(30);

/// Each test here runs whole controllers (watching every namespace) and stops them to act
/// while they are down: one test at a time, or one's controller would act on the other's
/// objects.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Running(tokio::task::JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn start(w: &World) -> Running {
    let (_, fut) = prepare(w.client().await, test_config()).await;
    Running(tokio::spawn(fut))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_leak_when_the_controller_misses_a_reference_change_or_a_deletion() -> TestResult {
    let _serial = SERIAL.lock().await;
    let w = world(false).await?;
    let client = w.client().await;
    let ns = w.tenant("restart").await;
    let cc = format!("restart-{ns}");
    w.cluster_connection(&cc).await;
    for name in ["a", "b"] {
        w.connection(&ns, name).await;
    }
    w.worker_deployment(&ns, "moves", by_name("a"), "v1").await;
    w.worker_deployment(&ns, "deleted", by_name("b"), "v1")
        .await;

    let controller = start(w).await;
    wait_connection(&client, &ns, "a", "protected", QUICK).await;
    wait_connection(&client, &ns, "b", "protected", QUICK).await;
    wait_wd(
        &client,
        &ns,
        "deleted",
        "finalizer added",
        QUICK,
        has_finalizer,
    )
    .await;
    drop(controller);
    // Let the aborted controller's in-flight work finish.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // While it is down: one reference moves to the ClusterConnection, one user is deleted.
    Api::<WorkerDeployment>::namespaced(client.clone(), &ns)
        .patch(
            "moves",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerOptions": {"connectionRef": {
                "name": null, "objectRef": {"kind": "ClusterConnection", "name": cc}}}}})),
        )
        .await?;
    delete_wd(&client, &ns, "deleted").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_connection(&client, &ns, "a", "protected", QUICK).await;
    wait_wd(
        &client,
        &ns,
        "deleted",
        "held by its finalizer",
        QUICK,
        |wd| wd.metadata.deletion_timestamp.is_some(),
    )
    .await;

    let _controller = start(w).await;
    wait_connection(&client, &ns, "a", "unprotected", QUICK).await;
    wait_cluster_connection(&client, &cc, "protected", QUICK).await;
    wait_wd_gone(&client, &ns, "deleted", QUICK).await;
    wait_connection(&client, &ns, "b", "unprotected", QUICK).await;
    wait_wd(
        &client,
        &ns,
        "moves",
        "observed the new reference",
        QUICK,
        |wd| {
            wd.status
                .as_ref()
                .and_then(|s| s.observed_connection_ref.as_ref())
                .is_some_and(|r| r.kind == "ClusterConnection")
                && wd.status.as_ref().and_then(|s| s.observed_generation) == wd.metadata.generation
        },
    )
    .await;
    delete_wd(&client, &ns, "moves").await;
    wait_cluster_connection(&client, &cc, "unprotected", QUICK).await;
    Ok(())
}

/// Deletions pending while the controller was down are cleaned up when it starts, not skipped:
/// the first reconciles wait until every cache (Connections and ClusterConnections among them)
/// is filled, so none reads a connection still loading as "not found". Repeated, as the race it
/// guards against depends on which watch lists first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions_pending_at_start_are_cleaned_up_not_skipped() -> TestResult {
    const USERS: usize = 10;
    let _serial = SERIAL.lock().await;
    let w = world(false).await?;
    let client = w.client().await;
    for round in 0..3 {
        let ns = w.tenant(&format!("pending{round}")).await;
        let cc = format!("pending-{ns}");
        w.cluster_connection(&cc).await;
        w.connection(&ns, "local").await;
        let names: Vec<String> = (0..USERS).map(|i| format!("w{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            let reference = if i % 2 == 0 {
                cluster_ref(&cc)
            } else {
                by_name("local")
            };
            w.worker_deployment(&ns, name, reference, "v1").await;
        }
        let controller = start(w).await;
        for name in &names {
            wait_wd(&client, &ns, name, "reached Temporal", QUICK, |wd| {
                wd.status
                    .as_ref()
                    .is_some_and(|s| s.version_count.is_some())
            })
            .await;
        }
        drop(controller);
        tokio::time::sleep(Duration::from_secs(1)).await;
        for name in &names {
            delete_wd(&client, &ns, name).await;
        }

        let controller = start(w).await;
        for name in &names {
            wait_wd_gone(&client, &ns, name, QUICK).await;
        }
        drop(controller);
        let warnings: Vec<String> =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .map(|e| format!("{:?}: {:?}", e.reason, e.note))
                .collect();
        assert!(
            warnings.is_empty(),
            "round {round}: warnings while cleaning up deletions pending at start:\n{}",
            warnings.join("\n")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}
