//! The clients behind a connection: a Draining version follows a connection change, and an idle
//! client is dropped.

use std::time::Duration;

use crate::common::*;
use crate::{QUICK, ROLLOUT};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
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

/// With WorkerDeployment `w` of `ns` rolled out at v1: a pinned workflow of 600 s on v1, the
/// image changed to v2, and v1 seen Draining with v2 current. Returns v1's build ID.
async fn drain_v1(sc: &SharedConnection, ns: &str) -> Result<String, Box<dyn std::error::Error>> {
    let wd = wait_wd(&sc.client, ns, "w", "v1 rolled out", ROLLOUT, rolled_out).await;
    let temporal_ns = wd.spec.worker_options.temporal_namespace.clone();
    let v1 = wd
        .status
        .and_then(|s| s.current_version)
        .map(|c| c.base.build_id)
        .unwrap_or_default();
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
    let image = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image",
        "value": format!("{WORKER_IMAGE}:v2")}]);
    Api::<WorkerDeployment>::namespaced(sc.client.clone(), ns)
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(image)?),
        )
        .await?;
    wait_wd(
        &sc.client,
        ns,
        "w",
        "v2 current, v1 draining",
        ROLLOUT,
        |wd| {
            rolled_out(wd)
                && wd
                    .status
                    .iter()
                    .flat_map(|s| &s.deprecated_versions)
                    .any(|d| {
                        d.base.build_id == v1 && d.base.status == twc_api::VersionStatus::Draining
                    })
        },
    )
    .await;
    Ok(v1)
}

/// The client certificate of `ns` renewed, as cert-manager does: the same Secret, new content.
async fn renew_certificate(sc: &SharedConnection, ns: &str) -> Result<(), kube::Error> {
    let renewed = sc.w.mtls_secret(MTLS_SECRET, time::Duration::days(90));
    Api::<Secret>::namespaced(sc.client.clone(), ns)
        .patch(
            MTLS_SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": renewed.string_data})),
        )
        .await?;
    Ok(())
}

/// A user `w` in `ns` through the shared connection, rolled out: its build ID and versioned
/// Deployment's name.
async fn v1_rolled_out(sc: &SharedConnection, ns: &str) -> (String, String) {
    sc.user(ns, "w").await;
    let wd = wait_wd(&sc.client, ns, "w", "v1 rolled out", ROLLOUT, rolled_out).await;
    let build = wd
        .status
        .and_then(|s| s.current_version)
        .map(|c| c.base.build_id)
        .unwrap_or_default();
    let name = twc_controller::plan::build_id::deployment_name("w", &build);
    (build, name)
}

/// Waits until every pod of version `build` in `ns` is new (none of `before`) and ready: the
/// workers started again.
async fn wait_pods_replaced(
    sc: &SharedConnection,
    ns: &str,
    build: &str,
    before: &[(String, String, bool)],
) -> Result<(), twc_testenv::Error> {
    wait_for("the workers restarted", ROLLOUT, || async move {
        let now = pods_of(&sc.client, ns, build).await;
        let fresh = |p: &(String, String, bool)| !before.iter().any(|b| b.0 == p.0);
        if !now.is_empty() && now.iter().all(|p| fresh(p) && p.2) {
            Ok(())
        } else {
            Err(format!("before {before:?}, now {now:?}"))
        }
    })
    .await
}

/// Waits until Deployment `name` records a digest other than `recorded` and carries it on its
/// pod template too (its pods restart with the new Secret).
async fn wait_restarted(
    deployments: &Api<Deployment>,
    name: &str,
    recorded: Option<String>,
) -> Result<Deployment, twc_testenv::Error> {
    wait_for(
        &format!("{name}'s pod template carries the new digest"),
        QUICK,
        || {
            let (deployments, recorded) = (deployments.clone(), recorded.clone());
            async move {
                let d = deployments.get(name).await.map_err(|e| e.to_string())?;
                match digests(&d) {
                    (Some(now), Some(t), _) if now == t && Some(&now) != recorded.as_ref() => Ok(d),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_version_follows_a_connection_change() -> TestResult {
    let sc = SharedConnection::new("reconnect").await?;
    let ns = sc.tenant("reconnect").await;
    sc.user(&ns, "w").await;
    drain_v1(&sc, &ns).await?;
    let draining = |wd: &WorkerDeployment| {
        rolled_out(wd)
            && wd
                .status
                .iter()
                .flat_map(|s| &s.deprecated_versions)
                .any(|d| d.base.status == twc_api::VersionStatus::Draining)
    };

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
        secrets_written_at: None,
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

/// The digest recorded on the Deployment, the one on its pod template, and its build ID.
pub(crate) fn digests(d: &Deployment) -> (Option<String>, Option<String>, Option<String>) {
    let key = twc_api::labels::CREDENTIALS_DIGEST;
    let on_template = d
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(key).cloned());
    let build = d.labels().get(twc_api::labels::BUILD_ID).cloned();
    (d.annotations().get(key).cloned(), on_template, build)
}

/// The pods of the versioned Deployment of `build`: (name, created at, ready).
async fn pods_of(client: &kube::Client, ns: &str, build: &str) -> Vec<(String, String, bool)> {
    use k8s_openapi::api::core::v1::Pod;
    let selector = format!("{}={build}", twc_api::labels::BUILD_ID);
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let created = p
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            (p.name_any(), created, ready)
        })
        .collect()
}

/// A renewed client certificate (new content, same Secret): the workers read it only at start,
/// so the version's pods restart with it, same build ID, no new version, the rollout stays
/// done. A change of the Secret's labels alone restarts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_client_certificate_restarts_the_workers_on_the_same_version() -> TestResult {
    let sc = SharedConnection::new("renew").await?;
    let ns = sc.tenant("renew").await;
    let (build, name) = v1_rolled_out(&sc, &ns).await;
    let deployments = Api::<Deployment>::namespaced(sc.client.clone(), &ns);
    let (recorded, on_template, _) = digests(&deployments.get(&name).await?);
    let recorded = recorded.ok_or("the new Deployment records no credentials digest")?;
    assert_eq!(
        on_template, None,
        "a new Deployment's pods restart for nothing"
    );
    let before = pods_of(&sc.client, &ns, &build).await;

    // Labels only: the content the workers read is the same.
    let secrets = Api::<Secret>::namespaced(sc.client.clone(), &ns);
    secrets
        .patch(
            MTLS_SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"renewed": "no"}}})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        digests(&deployments.get(&name).await?).1,
        None,
        "a label change restarted the workers"
    );

    // The certificate renewed, as cert-manager does: the same Secret, new content.
    renew_certificate(&sc, &ns).await?;
    let d = wait_restarted(&deployments, &name, Some(recorded)).await?;
    assert_eq!(
        digests(&d).2.as_deref(),
        Some(build.as_str()),
        "the build ID changed"
    );
    // Every pod is new and ready: the workers started with the new certificate.
    wait_pods_replaced(&sc, &ns, &build, &before).await?;
    wait_event(&sc.client, &ns, "CredentialsChanged", &name, QUICK).await;
    // Still one version, still current, the rollout still done.
    let wd = wait_wd(&sc.client, &ns, "w", "still rolled out", QUICK, rolled_out).await;
    let status = wd.status.unwrap_or_default();
    assert_eq!(
        status.current_version.map(|c| c.base.build_id),
        Some(build.clone())
    );
    let versions = deployments
        .list(&ListParams::default().labels(twc_api::labels::BUILD_ID))
        .await?;
    assert_eq!(versions.items.len(), 1, "a new version was made");
    Ok(())
}

/// A versioned Deployment with no credentials digest recorded (as TWC leaves it) is adopted
/// as it is only when its pods provably started after the Secret's content was last written
/// (a minute after, as the apiserver records the write). These pods started seconds after
/// the Secret was written: they might hold an older certificate, so they restart onto the
/// content the controller checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_deployment_whose_pods_may_predate_the_certificate_restarts() -> TestResult {
    let sc = SharedConnection::new("adopt-stale").await?;
    let ns = sc.tenant("adopt-stale").await;
    let (build, name) = v1_rolled_out(&sc, &ns).await;
    let deployments = Api::<Deployment>::namespaced(sc.client.clone(), &ns);
    let before = pods_of(&sc.client, &ns, &build).await;
    // The Deployment's record of what its pods read, gone (as on a Deployment TWC made).
    let forget = json!([{"op": "remove", "path": format!(
        "/metadata/annotations/{}",
        twc_api::labels::CREDENTIALS_DIGEST.replace('/', "~1")
    )}]);
    deployments
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(forget)?),
        )
        .await?;
    // Restarted onto the Secret as it is: the digest on the pod template, every pod new.
    wait_restarted(&deployments, &name, None).await?;
    wait_pods_replaced(&sc, &ns, &build, &before).await?;
    Ok(())
}

/// A WorkerDeployment being deleted waits for a Draining version's pinned workflow; its
/// certificate renewed meanwhile, that version's workers restart too (they must reach Temporal
/// to finish it), and the deletion still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_restarts_the_draining_workers_it_waits_for_on_a_renewed_certificate()
-> TestResult {
    let sc = SharedConnection::new("renew-del").await?;
    let ns = sc.tenant("renew-del").await;
    sc.user(&ns, "w").await;
    let v1 = drain_v1(&sc, &ns).await?;
    let wds = Api::<WorkerDeployment>::namespaced(sc.client.clone(), &ns);
    wds.delete("w", &Default::default()).await?;
    let deployments = Api::<Deployment>::namespaced(sc.client.clone(), &ns);
    let name = twc_controller::plan::build_id::deployment_name("w", &v1);
    wait_for("v1 kept while the deletion waits", QUICK, || {
        let deployments = deployments.clone();
        let name = name.clone();
        async move {
            let d = deployments.get(&name).await.map_err(|e| e.to_string())?;
            let others = deployments
                .list(&ListParams::default().labels(twc_api::labels::BUILD_ID))
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|o| o.metadata.deletion_timestamp.is_none())
                .count();
            (others == 1 && d.metadata.deletion_timestamp.is_none())
                .then_some(())
                .ok_or(format!("{others} Deployments not being deleted"))
        }
    })
    .await?;
    let recorded = digests(&deployments.get(&name).await?).0;

    renew_certificate(&sc, &ns).await?;
    wait_restarted(&deployments, &name, recorded).await?;
    wait_event(&sc.client, &ns, "CredentialsChanged", &name, QUICK).await;
    // Still waiting for the pinned workflow.
    assert!(
        wds.get_opt("w").await?.is_some(),
        "the deletion did not wait"
    );
    Ok(())
}
