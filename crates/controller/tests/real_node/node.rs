//! The node, the servers and the controller installed by its chart, shared by the tests of
//! this binary; tenants with a Connection.

use std::sync::OnceLock;

use crate::{RELEASE, SYSTEM};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use twc_api::Connection;
use twc_testenv::node::NodeEnv;
use twc_testenv::paths;

struct Cluster {
    env: NodeEnv,
    _runtime: tokio::runtime::Runtime,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The node, the servers and the controller installed by its chart, shared by the tests of this
/// binary; started on first use.
pub(crate) async fn cluster() -> Result<&'static NodeEnv, String> {
    let c = tokio::task::spawn_blocking(|| {
        CLUSTER.get_or_init(|| {
            std::thread::spawn(start)
                .join()
                .unwrap_or_else(|_| Err("the cluster start panicked".into()))
        })
    })
    .await
    .map_err(|e| e.to_string())?;
    let c = c.as_ref().map_err(Clone::clone)?;
    c.env.check_running().map_err(|e| e.to_string())?;
    Ok(&c.env)
}

fn start() -> Result<Cluster, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let env = runtime.block_on(async {
        let dir = twc_testenv::fresh_dir(&paths::log_dir().join("real-node"))
            .map_err(|e| e.to_string())?;
        let images = [
            paths::image_archive("temporal-worker-controller"),
            paths::image_archive("example-worker"),
        ];
        let env = NodeEnv::start(&dir, &images)
            .await
            .map_err(|e| e.to_string())?;
        eprintln!(
            "real node: ready in {:.1}s; logs in {}",
            env.startup.as_secs_f64(),
            dir.display()
        );
        install(&env).await?;
        Ok::<_, String>(env)
    })?;
    Ok(Cluster {
        env,
        _runtime: runtime,
    })
}

/// `helm install` of both charts as a user runs it: the CRDs, then the controller with the
/// chart's default image into a namespace that enforces the restricted Pod Security Standard,
/// waiting (`--wait`) until its Deployment is available, which the kubelet decides through the
/// pod's `/readyz` probe. Temporal's test server drains in a second, so the controller polls
/// drainage every second (a value a user sets the same way).
async fn install(env: &NodeEnv) -> Result<(), String> {
    env.install_charts(
        RELEASE,
        SYSTEM,
        &[
            "fastPollSeconds=1",
            "drainagePollSeconds=1",
            "steadyPollSeconds=10",
        ],
    )
    .await
    .map_err(|e| e.to_string())
}

/// A tenant namespace with a Connection to Temporal as pods reach it.
pub(crate) async fn tenant(
    env: &NodeEnv,
    prefix: &str,
) -> Result<(Client, String, String), String> {
    let client = env.client().await.map_err(|e| e.to_string())?;
    let ns = env.namespace(prefix).await.map_err(|e| e.to_string())?;
    let temporal_ns = env.temporal_namespace().await.map_err(|e| e.to_string())?;
    let conn: Connection = serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "Connection",
        "metadata": {"name": "temporal", "namespace": ns},
        "spec": {"hostPort": env.temporal_address_for_pods()},
    }))
    .map_err(|e| e.to_string())?;
    Api::<Connection>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok((client, ns, temporal_ns))
}
