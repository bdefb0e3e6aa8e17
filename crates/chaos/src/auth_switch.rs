//! The fault "auth mode switched": the namespaced Connection moves from mutual TLS to an API
//! key (the same TLS proxy, which then lets in a client without a certificate; the dev server
//! takes any key), or back (the proxy requires certificates again once every worker is back
//! on mutual TLS: while it does not, a worker on a distrusted certificate leaves it out and
//! comes in, which the new-CA rotation must see). Everything the pods see of a connection rolls them, the auth mode
//! included: within [`RENEWAL_DEADLINE`] every running worker of a WorkerDeployment on that
//! Connection must run on the new mode (its Deployment rolled out with the new env), or I5
//! reports it. A version kept on another Temporal namespace (its WorkerDeployment moved away
//! while it drained) is left as it is, auth mode included, as every connection change leaves
//! it (docs/connections.md): it keeps the mode it polls with. Its pinned workflows and routing
//! are watched by I1 and I2 as always.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use twc_api::{Connection, ConnectionKind};
use twc_testenv::deployments::{rolled_out, worker_env, worker_env_value};

use crate::restarts::RENEWAL_DEADLINE;
use crate::{CONNECTION, MTLS_SECRET, Run};

/// The API key Secret, and its key.
pub(crate) const API_KEY_SECRET: &str = "chaos-api-key";
const API_KEY_KEY: &str = "key";

/// The API key Secret the switch points the Connection at.
pub(crate) async fn create_secret(run: &Run<'_>) -> anyhow::Result<()> {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": API_KEY_SECRET},
        "type": "Opaque",
        "stringData": {API_KEY_KEY: "chaos-api-key-1"}
    }))?;
    Api::<Secret>::namespaced(run.client.clone(), &run.ns)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

/// Whether the workers of `d` authenticate with an API key.
fn api_key_mode(d: &Deployment) -> bool {
    worker_env(d).iter().any(|e| e.name == "TEMPORAL_API_KEY")
}

/// The fault: the Connection's auth mode switched; waits until every running worker of the
/// WorkerDeployments on it runs the new mode (I5 reports those that do not in time).
pub(crate) async fn switch(run: &Run<'_>) -> anyhow::Result<()> {
    let api = Api::<Connection>::namespaced(run.client.clone(), &run.ns);
    let to_api_key = api.get(CONNECTION).await?.spec.api_key_secret_ref.is_none();
    if to_api_key {
        run.tls.let_in_without_certificate(true)?;
    }
    let patch = if to_api_key {
        json!({"spec": {"mutualTLSSecretRef": null,
            "apiKeySecretRef": {"name": API_KEY_SECRET, "key": API_KEY_KEY}}})
    } else {
        json!({"spec": {"apiKeySecretRef": null, "mutualTLSSecretRef": {"name": MTLS_SECRET}}})
    };
    api.patch(CONNECTION, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let mode = if to_api_key {
        "an API key"
    } else {
        "mutual TLS"
    };
    println!("   the Connection now authenticates with {mode}");
    let started = Instant::now();
    let mut behind = Behind::default();
    while started.elapsed() < RENEWAL_DEADLINE {
        match behind_on(run, to_api_key).await {
            Ok(b) if b.must_roll.is_empty() && b.leaving.is_empty() => {
                // Back on mutual TLS: certificates are required again once no worker on an
                // API key is left, those of a WorkerDeployment being deleted included.
                if !to_api_key {
                    run.tls.let_in_without_certificate(false)?;
                }
                return Ok(());
            }
            Ok(b) => behind = b,
            // The apiserver restarting: not known, asked again.
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if !behind.must_roll.is_empty() {
        run.report().violate(
            "I5",
            format!(
                "{} s after the Connection moved to {mode}, workers still on the other mode (or not rolled out): {}",
                RENEWAL_DEADLINE.as_secs(),
                behind.must_roll.join(", ")
            ),
        );
    }
    if !behind.leaving.is_empty() {
        println!(
            "   note: the other mode stays allowed: a WorkerDeployment being deleted still runs on it: {}",
            behind.leaving.join(", ")
        );
    }
    Ok(())
}

/// Workers not on the Connection's auth mode.
#[derive(Default)]
struct Behind {
    /// Of WorkerDeployments on the Connection: they must roll.
    must_roll: Vec<String>,
    /// Of WorkerDeployments being deleted: their versions finish on what they have (the
    /// controller rolls nothing of a deletion but for renewed credentials), so the old mode
    /// must stay allowed until they are gone, as a careful operator would keep it.
    leaving: Vec<String>,
}

/// The running versioned Deployments of WorkerDeployments on the Connection whose workers are
/// not (all) on the API key (`api_key`) or mutual TLS (but for versions kept on another
/// Temporal namespace), and those of WorkerDeployments being deleted still on the other mode.
async fn behind_on(run: &Run<'_>, api_key: bool) -> anyhow::Result<Behind> {
    // (name, the Temporal namespace its spec names) of the WorkerDeployments on the Connection.
    let (mut on_connection, mut leaving) = (Vec::new(), Vec::new());
    for wd in run.wds().list(&ListParams::default()).await?.items {
        let on = matches!(
            wd.spec.worker_options.connection_ref.target(),
            Some((ConnectionKind::Connection, n)) if n == CONNECTION
        );
        let namespace = wd.spec.worker_options.temporal_namespace.clone();
        match (on, wd.metadata.deletion_timestamp.is_some()) {
            (true, false) => on_connection.push((wd.name_any(), namespace)),
            (_, true) => leaving.push((wd.name_any(), namespace)),
            (false, false) => {}
        }
    }
    let deployments = run
        .deployments()
        .list(&ListParams::default().labels(twc_api::labels::BUILD_ID))
        .await?;
    let running = deployments.items.iter().filter(|d| {
        d.metadata.deletion_timestamp.is_none()
            && d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1) > 0
    });
    // The WorkerDeployment of `d` among `wds`, and the Temporal namespace its spec names.
    let of = |wds: &'_ [(String, String)], d: &Deployment| {
        let build = d.labels().get(twc_api::labels::BUILD_ID).cloned();
        wds.iter()
            .find(|(wd, _)| {
                build
                    .as_ref()
                    .is_some_and(|b| run.members(wd, b).iter().any(|m| m.name == d.name_any()))
            })
            .map(|(_, namespace)| namespace.clone())
    };
    let mut behind = Behind::default();
    for d in running {
        let polls = worker_env_value(d, "TEMPORAL_NAMESPACE");
        if let Some(namespace) = of(&on_connection, d) {
            let kept_elsewhere = polls.is_some_and(|p| p != namespace);
            if !kept_elsewhere && (api_key_mode(d) != api_key || !rolled_out(d)) {
                behind.must_roll.push(d.name_any());
            }
        } else if of(&leaving, d).is_some() && api_key_mode(d) != api_key {
            behind.leaving.push(d.name_any());
        }
    }
    Ok(behind)
}
