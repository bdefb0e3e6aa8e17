//! What re-queues a connection's users: changes of its spec, not the controller's own writes
//! to it (finalizer, `status.usedBy`) nor any other metadata change. Its own binary, so the
//! reconcile counter it reads counts only this test's controller.

mod common;

use std::time::Duration;

use common::*;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use twc_api::Connection;

const USERS: usize = 3;
const ROLLOUT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_spec_changes_of_a_connection_requeue_its_users() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.tenant("triggers").await;
    w.connection(&ns, "c").await;
    let names: Vec<String> = (0..USERS).map(|i| format!("w{i}")).collect();
    for name in &names {
        w.worker_deployment(&ns, name, by_name("c"), "v1").await;
    }
    for name in &names {
        wait_wd(&client, &ns, name, "rolled out", ROLLOUT, rolled_out).await;
    }
    wait_connection(&client, &ns, "c", "protected", Duration::from_secs(30)).await;
    // Rolled out: each user now reconciles at the steady poll (5 s in tests).
    tokio::time::sleep(Duration::from_secs(2)).await;

    let api: Api<Connection> = Api::namespaced(client.clone(), &ns);
    let before = reconciles("WorkerDeployment");
    for i in 0..10 {
        // Metadata only, like the controller's own finalizer writes.
        api.patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": i.to_string()}}})),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_touches = reconciles("WorkerDeployment") - before;
    // Three seconds at a 5 s steady poll: at most one resync per user, plus slack.
    assert!(
        after_touches <= 2 * USERS as u64,
        "{after_touches} reconciles of {USERS} users for 10 metadata-only changes of their connection"
    );

    // A spec change re-queues every user at once.
    let before = reconciles("WorkerDeployment");
    let mut c = api.get("c").await?;
    c.spec.host_port = c.spec.host_port.replace("127.0.0.1", "localhost");
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"hostPort": c.spec.host_port}})),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after_spec = reconciles("WorkerDeployment") - before;
    assert!(
        after_spec >= USERS as u64,
        "only {after_spec} reconciles of {USERS} users after a spec change of their connection"
    );
    Ok(())
}
