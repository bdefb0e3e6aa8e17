//! RBAC taken away from a running controller (#15 bug 2): the ClusterConnection rules stripped
//! from its ClusterRole while it runs. The Forbidden answers are recorded with the apiserver's
//! words, the users of a ClusterConnection say the real cause (not "not found", not
//! "namespace-scoped"), and once the rules are back, a re-check finds them and everything
//! recovers with no restart. Its own binary: its log has Forbidden lines on purpose.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, Patch, PatchParams};
use twc_api::ClusterConnection;
use twc_controller::controller::prepare;
use twc_testenv::wait_for;

const ROLLOUT: Duration = Duration::from_secs(90);
const QUICK: Duration = Duration::from_secs(30);

/// The ClusterRoles the generated RBAC made for the ServiceAccount of namespace `system`.
async fn roles_of(admin: &kube::Client, system: &str) -> Vec<ClusterRole> {
    Api::<ClusterRole>::all(admin.clone())
        .list(&Default::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .into_iter()
        .filter(|r| {
            r.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with(&format!("-{system}")))
        })
        .collect()
}

async fn replace_rules(admin: &kube::Client, role: &ClusterRole) {
    let name = role.metadata.name.clone().unwrap_or_default();
    let patch = serde_json::json!({"rules": role.rules});
    Api::<ClusterRole>::all(admin.clone())
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_cluster_connection_rules_says_so_and_recovers_when_they_are_back() -> TestResult
{
    let w = world(false).await?;
    let admin = w.client().await;
    let system = w.env.namespace("twc-revoked").await?;
    let sa_client = client_with_generated_rbac(w, "cluster.yaml", &system, "controller", &[]).await;
    let (handle, fut) = prepare(sa_client, test_config()).await;
    assert!(handle.cluster_connections);
    let _controller = tokio::spawn(fut);

    let cc = format!("revoked-{system}");
    w.cluster_connection(&cc).await;
    let ns = w.tenant("revoked").await;
    w.worker_deployment(&ns, "w", cluster_ref(&cc), "v1").await;
    wait_wd(&admin, &ns, "w", "rolled out", ROLLOUT, rolled_out).await;
    wait_cluster_connection(&admin, &cc, "protected", QUICK).await;
    assert_eq!(handle.access.state(), Ok(()));

    // Strip every ClusterConnection rule (what applying the namespaced mode's ClusterRole over
    // the cluster one used to do).
    let original = roles_of(&admin, &system).await;
    for role in &original {
        let mut stripped = role.clone();
        if let Some(rules) = stripped.rules.as_mut() {
            for rule in rules.iter_mut() {
                if let Some(resources) = rule.resources.as_mut() {
                    resources.retain(|r| !r.starts_with("clusterconnections"));
                }
            }
            rules.retain(|r| r.resources.as_ref().is_none_or(|res| !res.is_empty()));
        }
        replace_rules(&admin, &stripped).await;
    }
    // A second user makes the controller write the ClusterConnection's status: Forbidden.
    let other = w.tenant("revoked-b").await;
    w.worker_deployment(&other, "w", cluster_ref(&cc), "v1")
        .await;
    let lost = wait_for("the lost permission recorded", QUICK, || async {
        match handle.access.state() {
            Err(e) => Ok(e),
            Ok(()) => Err("nothing lost yet".to_string()),
        }
    })
    .await?;
    assert!(lost.contains("clusterconnections"), "{lost}");
    assert!(lost.contains("forbidden"), "{lost}");
    // Both users say the real cause.
    for tenant in [&ns, &other] {
        wait_wd(
            &admin,
            tenant,
            "w",
            "the lost permission named",
            QUICK,
            |wd| {
                condition(wd, "Ready").is_some_and(|(_, r, m)| {
                    r == "ConnectionNotFound"
                        && m.contains("lost its permission to watch ClusterConnections")
                        && m.contains("forbidden")
                })
            },
        )
        .await;
    }

    // The rules come back: a re-check finds them; both users roll out, with no restart.
    for role in &original {
        replace_rules(&admin, role).await;
    }
    wait_for("the permission back", QUICK, || async {
        handle.access.state().map_err(|e| e.to_string())
    })
    .await?;
    for tenant in [&ns, &other] {
        wait_wd(&admin, tenant, "w", "rolled out again", ROLLOUT, rolled_out).await;
    }
    wait_for("usedBy 2", QUICK, || async {
        let c = Api::<ClusterConnection>::all(admin.clone())
            .get(&cc)
            .await
            .map_err(|e| e.to_string())?;
        let used = c.status.and_then(|s| s.used_by);
        (used == Some(2))
            .then_some(())
            .ok_or(format!("usedBy {used:?}"))
    })
    .await?;
    for tenant in [&ns, &other] {
        delete_wd(&admin, tenant, "w").await;
    }
    for tenant in [&ns, &other] {
        wait_wd_gone(&admin, tenant, "w", ROLLOUT).await;
    }
    wait_cluster_connection(&admin, &cc, "unprotected", QUICK).await;
    Api::<ClusterConnection>::all(admin.clone())
        .delete(&cc, &Default::default())
        .await?;
    Ok(())
}
