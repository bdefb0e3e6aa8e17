//! The controller running as a ServiceAccount bound only to the generated cluster-wide RBAC
//! does the ClusterConnection job end to end.

mod common;

use std::time::Duration;

use common::*;
use kube::api::{Api, DeleteParams};
use twc_api::ClusterConnection;
use twc_controller::controller::prepare;

const ROLLOUT: Duration = Duration::from_secs(90);
const QUICK: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_cluster_rbac_is_enough() -> TestResult {
    let logs = capture_logs();
    let w = world(false).await?;
    let admin = w.client().await;
    let system = w.env.namespace("twc-system").await?;
    let sa_client = client_with_generated_rbac(w, "cluster.yaml", &system, "controller", &[]).await;
    let (handle, fut) = prepare(sa_client, test_config()).await;
    assert!(
        handle.cluster_connections,
        "the generated ClusterRole allows ClusterConnections"
    );
    let _controller = tokio::spawn(fut);

    let cc = format!("rbac-{system}");
    w.cluster_connection(&cc).await;
    let a = w.tenant("rbac-a").await;
    let b = w.tenant("rbac-b").await;
    w.connection(&b, "local").await;
    w.worker_deployment(&a, "w", cluster_ref(&cc), "v1").await;
    w.worker_deployment(&b, "w", by_name("local"), "v1").await;
    for ns in [&a, &b] {
        wait_wd(&admin, ns, "w", "rolled out", ROLLOUT, rolled_out).await;
    }
    wait_cluster_connection(&admin, &cc, "protected", QUICK).await;
    wait_connection(&admin, &b, "local", "protected", QUICK).await;

    // Migrate b to the ClusterConnection; then delete it while used.
    Api::<twc_api::WorkerDeployment>::namespaced(admin.clone(), &b)
        .patch(
            "w",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"spec": {"workerOptions": {"connectionRef": {
                "name": null, "objectRef": {"kind": "ClusterConnection", "name": cc}}}}}),
            ),
        )
        .await?;
    wait_connection(&admin, &b, "local", "unprotected", QUICK).await;
    Api::<ClusterConnection>::all(admin.clone())
        .delete(&cc, &DeleteParams::default())
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_cluster_connection(&admin, &cc, "protected", QUICK).await;
    for ns in [&a, &b] {
        delete_wd(&admin, ns, "w").await;
    }
    for ns in [&a, &b] {
        wait_wd_gone(&admin, ns, "w", ROLLOUT).await;
    }
    wait_cluster_connection(&admin, &cc, "gone", QUICK).await;

    let text =
        String::from_utf8_lossy(&logs.lock().map(|l| l.clone()).unwrap_or_default()).to_lowercase();
    assert!(
        !text.contains("forbidden"),
        "the controller hit RBAC denials:\n{text}"
    );
    Ok(())
}
