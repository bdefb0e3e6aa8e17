//! The clients behind a connection: a Draining version follows a connection change, and an idle
//! client is dropped.

use std::time::Duration;

use crate::common::*;
use crate::{QUICK, ROLLOUT};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use twc_api::WorkerDeployment;
use twc_testenv::wait_for;

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
        secrets_digest: None,
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
