//! The world of a test binary: the shared environment, the CRDs, the TLS proxy and its CA, the
//! example worker's image, and (optionally) a controller; and a control plane of one's own.

use std::sync::OnceLock;
use std::time::Duration;

use super::{MTLS_SECRET, SERVER_NAME, WORKER_IMAGE, capture_logs, from_json};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use twc_api::{ClusterConnection, Connection, WorkerDeployment};
use twc_controller::config::Intervals;
use twc_controller::controller::{Config, Handle, prepare};
use twc_testenv::pki::{Ca, Usage};
use twc_testenv::tls_proxy::TlsProxy;
use twc_testenv::{LocalImage, TestEnv};

pub struct World {
    pub env: &'static TestEnv,
    pub ca: Ca,
    /// The mTLS endpoint (TLS proxy) in front of the Temporal dev server.
    pub mtls_address: String,
    pub controller: Option<Handle>,
    _proxy: TlsProxy,
    _runtime: tokio::runtime::Runtime,
}

static WORLD: OnceLock<Result<World, String>> = OnceLock::new();

/// The world of this test binary; with `controller`, a cluster-wide controller runs in it.
pub async fn world(controller: bool) -> Result<&'static World, String> {
    world_with(controller.then(test_config)).await
}

/// The world of this test binary, with a cluster-wide controller configured by `config` (if
/// any). The first call decides: every test of a binary must ask for the same.
pub async fn world_with(config: Option<Config>) -> Result<&'static World, String> {
    capture_logs();
    let w = tokio::task::spawn_blocking(move || {
        WORLD.get_or_init(|| {
            std::thread::spawn(move || init(config))
                .join()
                .unwrap_or_else(|_| Err("world init panicked".into()))
        })
    })
    .await
    .map_err(|e| e.to_string())?;
    w.as_ref().map_err(Clone::clone)
}

/// A TWC release's manager identity that the tests' controllers are told to take over.
pub const TAKE_OVER_IDENTITY: &str = "twc-release/twc-system/7e57e57e-0000-0000-0000-000000000001";

pub fn test_config() -> Config {
    Config {
        identity: format!("twc-test/{}", std::process::id()),
        take_over_identities: vec![TAKE_OVER_IDENTITY.into()],
        intervals: Intervals {
            moving: Duration::from_millis(500),
            steady: Duration::from_secs(5),
            // The test servers refresh drainage every second.
            drainage: Duration::from_secs(1),
        },
        ..Default::default()
    }
}

fn init(controller: Option<Config>) -> Result<World, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (env, ca, proxy, handle) = runtime.block_on(async {
        let env = twc_testenv::shared().await.map_err(|e| e.to_string())?;
        let client = env.client().await.map_err(|e| e.to_string())?;
        twc_testenv::crds::install(&client, &twc_api::crd::all())
            .await
            .map_err(|e| e.to_string())?;
        let ca = Ca::new("temporal-test-ca").map_err(|e| e.to_string())?;
        let server = ca
            .issue(
                SERVER_NAME,
                &[SERVER_NAME, "127.0.0.1"],
                Usage::Server,
                time::Duration::days(1),
            )
            .map_err(|e| e.to_string())?;
        let proxy = TlsProxy::start(&env.temporal.address, &server, Some(&ca.cert_pem))
            .await
            .map_err(|e| e.to_string())?;
        let worker =
            twc_testenv::paths::workspace_binary("twc-example-worker", "twc-example-worker")
                .map_err(|e| e.to_string())?;
        env.pod_runner
            .register_image(WORKER_IMAGE, LocalImage::new(worker));
        let handle = if let Some(config) = controller {
            let (handle, fut) = prepare(client, config).await;
            tokio::spawn(fut);
            Some(handle)
        } else {
            None
        };
        Ok::<_, String>((env, ca, proxy, handle))
    })?;
    Ok(World {
        env,
        ca,
        mtls_address: proxy.address.clone(),
        controller: handle,
        _proxy: proxy,
        _runtime: runtime,
    })
}

impl World {
    pub async fn client(&self) -> Client {
        self.env
            .client()
            .await
            .unwrap_or_else(|e| panic!("kubernetes client: {e}"))
    }

    /// A client certificate Secret valid for `valid_for` (expired, with a negative one).
    pub fn mtls_secret(&self, name: &str, valid_for: time::Duration) -> Secret {
        let pair = self
            .ca
            .issue("tenant", &[], Usage::Client, valid_for)
            .unwrap_or_else(|e| panic!("{e}"));
        from_json(json!({
            "metadata": {"name": name},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": self.ca.cert_pem}
        }))
    }

    /// A namespace with its own client certificate Secret.
    pub async fn tenant(&self, prefix: &str) -> String {
        let client = self.client().await;
        let ns = self
            .env
            .namespace(prefix)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Api::<Secret>::namespaced(client, &ns)
            .create(
                &PostParams::default(),
                &self.mtls_secret(MTLS_SECRET, time::Duration::days(90)),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        ns
    }

    /// The spec of a connection to the mTLS endpoint.
    pub fn mtls_connection_spec(&self) -> Value {
        json!({
            "hostPort": self.mtls_address,
            "tls": {"serverName": SERVER_NAME},
            "mutualTLSSecretRef": {"name": MTLS_SECRET}
        })
    }

    pub async fn cluster_connection(&self, name: &str) -> ClusterConnection {
        let cc: ClusterConnection = from_json(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
            "metadata": {"name": name},
            "spec": self.mtls_connection_spec(),
        }));
        Api::<ClusterConnection>::all(self.client().await)
            .create(&PostParams::default(), &cc)
            .await
            .unwrap_or_else(|e| panic!("create ClusterConnection {name}: {e}"))
    }

    pub async fn connection(&self, ns: &str, name: &str) -> Connection {
        let c: Connection = from_json(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "Connection",
            "metadata": {"name": name, "namespace": ns},
            "spec": self.mtls_connection_spec(),
        }));
        Api::<Connection>::namespaced(self.client().await, ns)
            .create(&PostParams::default(), &c)
            .await
            .unwrap_or_else(|e| panic!("create Connection {ns}/{name}: {e}"))
    }

    /// A WorkerDeployment running the example worker (AllAtOnce, one replica).
    pub async fn worker_deployment(
        &self,
        ns: &str,
        name: &str,
        connection_ref: Value,
        version: &str,
    ) -> WorkerDeployment {
        let temporal_ns = self
            .env
            .temporal_namespace()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        self.worker_deployment_in(ns, name, connection_ref, version, &temporal_ns)
            .await
    }

    /// [`World::worker_deployment`] targeting Temporal namespace `temporal_ns`.
    pub async fn worker_deployment_in(
        &self,
        ns: &str,
        name: &str,
        connection_ref: Value,
        version: &str,
        temporal_ns: &str,
    ) -> WorkerDeployment {
        let wd: WorkerDeployment = from_json(example_worker_deployment(
            ns,
            name,
            connection_ref,
            version,
            temporal_ns,
        ));
        Api::<WorkerDeployment>::namespaced(self.client().await, ns)
            .create(&PostParams::default(), &wd)
            .await
            .unwrap_or_else(|e| panic!("create WorkerDeployment {ns}/{name}: {e}"))
    }
}

/// The JSON of [`World::worker_deployment_in`]'s WorkerDeployment: the example worker image at
/// `version`, AllAtOnce, one replica, a quick sunset (edit it before creating for a variant).
pub fn example_worker_deployment(
    ns: &str,
    name: &str,
    connection_ref: Value,
    version: &str,
    temporal_ns: &str,
) -> Value {
    json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "workerOptions": {"connectionRef": connection_ref, "temporalNamespace": temporal_ns},
            "rollout": {"strategy": "AllAtOnce"},
            "sunset": {"scaledownDelay": "10s", "deleteDelay": "10s"},
            "template": {"spec": {
                "terminationGracePeriodSeconds": 2,
                "containers": [{
                    "name": "worker",
                    "image": format!("{WORKER_IMAGE}:{version}"),
                    "env": [{"name": "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "value": "/etc/temporal/tls/ca.crt"}]
                }]
            }}
        }
    })
}

/// A control plane of its own (no kube-controller-manager), logs in `<log dir>/<name>`: for
/// tests whose objects are cluster-wide or that need an apiserver without the CRDs.
pub async fn own_control_plane(
    name: &str,
) -> Result<
    (twc_testenv::control_plane::ControlPlane, std::path::PathBuf),
    Box<dyn std::error::Error>,
> {
    use twc_testenv::control_plane::{ControlPlane, ControlPlaneOptions};
    let dir = twc_testenv::fresh_dir(&twc_testenv::paths::log_dir().join(name))?;
    let cp = ControlPlane::start(
        &ControlPlaneOptions {
            controller_manager: false,
            ..Default::default()
        },
        &dir,
    )
    .await?;
    Ok((cp, dir))
}
