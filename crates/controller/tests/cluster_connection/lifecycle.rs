//! Who holds a ClusterConnection or Connection: deletion waits for the last user, a
//! ClusterConnection being deleted takes no new users, and moving or renaming references
//! releases the old ones.

use std::time::Duration;

use crate::common::*;
use crate::{QUICK, ROLLOUT, patch_ref};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use twc_api::{Connection, WorkerDeployment};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_used_cluster_connection_waits_for_its_last_user() -> TestResult {
    let sc = SharedConnection::new("blocked").await?;
    // No worker image needed: protection does not depend on pods.
    let [a, b] = sc.users(["del-a", "del-b"], "w").await;
    sc.wait("protected", QUICK).await;

    sc.api().delete(&sc.cc, &DeleteParams::default()).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let terminating = sc.get().await?;
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert!(has_finalizer(&terminating), "deleted while in use");

    delete_wd(&sc.client, &a, "w").await;
    wait_wd_gone(&sc.client, &a, "w", ROLLOUT).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        sc.api().get_opt(&sc.cc).await?.is_some(),
        "gone while namespace {b} still uses it"
    );

    delete_wd(&sc.client, &b, "w").await;
    wait_wd_gone(&sc.client, &b, "w", ROLLOUT).await;
    sc.wait("gone", QUICK).await;
    Ok(())
}

/// A ClusterConnection being deleted keeps serving the WorkerDeployment already using it, and
/// takes no new one: a new reference gets `ConnectionNotFound` saying so and a Warning, and
/// does not hold the ClusterConnection, which goes once its last real user is gone. Before,
/// the new user was quietly Ready and kept the ClusterConnection forever (#15 bug 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_connection_being_deleted_takes_no_new_users() -> TestResult {
    let sc = SharedConnection::new("closing").await?;
    let [old] = sc.users(["closing-old"], "w").await;
    sc.wait("protected", QUICK).await;
    wait_wd(
        &sc.client,
        &old,
        "w",
        "its connection observed",
        QUICK,
        |wd| {
            wd.status
                .as_ref()
                .is_some_and(|s| s.observed_connection_ref.is_some())
        },
    )
    .await;
    sc.api().delete(&sc.cc, &DeleteParams::default()).await?;
    // Timestamps are whole seconds: a WorkerDeployment of the deletion's second still counts.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let new = sc.tenant("closing-new").await;
    sc.user(&new, "w").await;
    let wd = wait_wd(&sc.client, &new, "w", "ConnectionNotFound", QUICK, |wd| {
        condition(wd, "Ready").is_some_and(|(s, r, _)| s == "False" && r == "ConnectionNotFound")
    })
    .await;
    let (_, _, message) = condition(&wd, "Ready").unwrap_or_default();
    assert!(message.contains("is being deleted"), "{message}");
    let warned = wait_event(
        &sc.client,
        &new,
        "ConnectionNotFound",
        "is being deleted",
        QUICK,
    )
    .await;
    assert_eq!(warned.type_.as_deref(), Some("Warning"));
    // The old user still holds it; once it is gone, so is the ClusterConnection.
    assert!(has_finalizer(&sc.get().await?), "released while in use");
    delete_wd(&sc.client, &old, "w").await;
    wait_wd_gone(&sc.client, &old, "w", ROLLOUT).await;
    sc.wait("gone", QUICK).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrating_from_connections_to_a_cluster_connection_releases_the_old_ones() -> TestResult {
    let sc = SharedConnection::new("migrate").await?;
    let mut tenants = Vec::new();
    for i in 0..2 {
        let ns = sc.tenant(&format!("migrate{i}")).await;
        sc.w.connection(&ns, "temporal").await;
        sc.w.worker_deployment(&ns, "w", by_name("temporal"), "v1")
            .await;
        tenants.push(ns);
    }
    for ns in &tenants {
        wait_connection(&sc.client, ns, "temporal", "protected", QUICK).await;
    }
    sc.wait("unprotected", QUICK).await;

    for ns in &tenants {
        patch_ref(&sc.client, ns, "w", cluster_ref(&sc.cc)).await;
    }
    sc.wait("protected", QUICK).await;
    for ns in &tenants {
        wait_connection(&sc.client, ns, "temporal", "unprotected", QUICK).await;
        Api::<Connection>::namespaced(sc.client.clone(), ns)
            .delete("temporal", &DeleteParams::default())
            .await?;
        wait_connection(&sc.client, ns, "temporal", "gone", QUICK).await;
        let wd = wait_wd(
            &sc.client,
            ns,
            "w",
            "to observe the new reference",
            QUICK,
            |wd| {
                wd.status
                    .as_ref()
                    .and_then(|s| s.observed_connection_ref.as_ref())
                    .is_some_and(|r| r.kind == "ClusterConnection" && r.name == sc.cc)
            },
        )
        .await;
        assert_eq!(
            wd.status.and_then(|s| s.observed_generation),
            wd.metadata.generation
        );
    }
    for ns in &tenants {
        delete_wd(&sc.client, ns, "w").await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_one_user_away_keeps_a_cluster_connection_others_still_use() -> TestResult {
    let sc = SharedConnection::new("kept").await?;
    let [a, b] = sc.users(["keep-a", "keep-b"], "w").await;
    sc.wait("protected", QUICK).await;

    sc.w.connection(&a, "local").await;
    patch_ref(&sc.client, &a, "w", by_name("local")).await;
    wait_connection(&sc.client, &a, "local", "protected", QUICK).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    sc.wait("protected", QUICK).await;

    // The typed reference to a namespaced Connection counts as the same Connection.
    patch_ref(&sc.client, &b, "w", connection_ref("local")).await;
    let wd = wait_wd(
        &sc.client,
        &b,
        "w",
        "ConnectionNotFound for its own namespace",
        QUICK,
        |wd| condition(wd, "Ready").is_some_and(|(_, r, _)| r == "ConnectionNotFound"),
    )
    .await;
    let (_, _, message) = condition(&wd, "Ready").unwrap_or_default();
    assert!(
        message.contains(&format!("Connection {b}/local not found")),
        "the message names kind, namespace and name: {message}"
    );
    sc.wait("unprotected", QUICK).await;
    delete_wd(&sc.client, &a, "w").await;
    delete_wd(&sc.client, &b, "w").await;
    wait_connection(&sc.client, &a, "local", "unprotected", ROLLOUT).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_a_legacy_reference_releases_the_old_connection() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.tenant("rename").await;
    w.connection(&ns, "old").await;
    w.connection(&ns, "new").await;
    w.worker_deployment(&ns, "w", by_name("old"), "v1").await;
    wait_connection(&client, &ns, "old", "protected", QUICK).await;
    wait_connection(&client, &ns, "new", "unprotected", QUICK).await;

    Api::<WorkerDeployment>::namespaced(client.clone(), &ns)
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerOptions": {"connectionRef": {"name": "new"}}}})),
        )
        .await?;
    wait_connection(&client, &ns, "new", "protected", QUICK).await;
    wait_connection(&client, &ns, "old", "unprotected", QUICK).await;
    Api::<Connection>::namespaced(client.clone(), &ns)
        .delete("old", &DeleteParams::default())
        .await?;
    wait_connection(&client, &ns, "old", "gone", QUICK).await;
    delete_wd(&client, &ns, "w").await;
    wait_connection(&client, &ns, "new", "unprotected", ROLLOUT).await;
    Ok(())
}

/// A WorkerDeployment whose connection is gone (a person removed the Connection's finalizer
/// and deleted it) is deleted: the cleanup cannot reach Temporal, so the deletion waits with
/// `Ready=False CleanupBlocked` naming why, its versioned Deployment keeps running, and only
/// the annotation `temporal.io/skip-temporal-cleanup=true` lets it go. Before, the missing
/// connection skipped Temporal, deleted the workers and dropped the finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_that_cannot_reach_temporal_waits_until_a_person_skips_the_cleanup() -> TestResult
{
    use k8s_openapi::api::apps::v1::Deployment;
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.tenant("blocked-cleanup").await;
    w.connection(&ns, "c").await;
    w.worker_deployment(&ns, "w", by_name("c"), "v1").await;
    wait_wd(&client, &ns, "w", "rolled out", ROLLOUT, rolled_out).await;
    // The Connection goes, by hand.
    let connections = Api::<Connection>::namespaced(client.clone(), &ns);
    connections.delete("c", &DeleteParams::default()).await?;
    connections
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    wait_connection(&client, &ns, "c", "gone", QUICK).await;

    delete_wd(&client, &ns, "w").await;
    let wd = wait_wd(&client, &ns, "w", "CleanupBlocked", QUICK, |wd| {
        condition(wd, "Ready").is_some_and(|(st, why, _)| st == "False" && why == "CleanupBlocked")
    })
    .await;
    let (_, _, message) = condition(&wd, "Ready").unwrap_or_default();
    assert!(
        message.contains("ConnectionNotFound")
            && message.contains("temporal.io/skip-temporal-cleanup=true"),
        "{message}"
    );
    assert!(has_finalizer(&wd));
    // Still blocked a while later, the workers still up.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await?;
    assert_eq!(deployments.items.len(), 1, "{:?}", deployments.items.len());
    let d = &deployments.items[0];
    assert!(d.metadata.deletion_timestamp.is_none());
    assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(1));
    assert!(
        Api::<WorkerDeployment>::namespaced(client.clone(), &ns)
            .get_opt("w")
            .await?
            .is_some()
    );

    // A person's choice: the Temporal side is left as it is, the rest goes.
    Api::<WorkerDeployment>::namespaced(client.clone(), &ns)
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"temporal.io/skip-temporal-cleanup": "true"}}}),
            ),
        )
        .await?;
    wait_wd_gone(&client, &ns, "w", ROLLOUT).await;
    Ok(())
}

/// Deleting a whole namespace: Kubernetes deletes its Secrets and Deployments whatever the
/// controller does, so a cleanup that needs the credential Secret cannot run; the controller
/// says what it leaves in Temporal (`CleanupSkipped`) instead of holding the namespace
/// Terminating for ever. Before: `CleanupBlocked` (the Secret was gone) kept the namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_namespace_is_never_held_by_a_cleanup_that_cannot_run() -> TestResult {
    use k8s_openapi::api::core::v1::Namespace;
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.tenant("ns-delete").await;
    w.connection(&ns, "c").await;
    w.worker_deployment(&ns, "w", by_name("c"), "v1").await;
    wait_wd(&client, &ns, "w", "rolled out", ROLLOUT, rolled_out).await;
    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await?;
    wait_namespace_gone(&client, &ns, ROLLOUT).await?;
    Ok(())
}
