//! A world for controller tests: the shared real environment, the CRDs, a TLS proxy that
//! demands client certificates from a test CA in front of the Temporal dev server, the example
//! worker registered as an image, and (optionally) a controller running in this process.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use twc_api::{ClusterConnection, Connection, WorkerDeployment};
use twc_controller::config::Intervals;
use twc_controller::controller::{Config, Handle, prepare};
use twc_testenv::pki::{Ca, Usage};
use twc_testenv::tls_proxy::TlsProxy;
use twc_testenv::{LocalImage, TestEnv, wait_for};

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The image name the example worker is registered under.
pub const WORKER_IMAGE: &str = "twc/example-worker";
/// The server name in the proxy's certificate.
pub const SERVER_NAME: &str = "temporal.test";
/// The Secret name tenants use for their client certificate.
pub const MTLS_SECRET: &str = "temporal-mtls";

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
        let wd: WorkerDeployment = from_json(json!({
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
        }));
        Api::<WorkerDeployment>::namespaced(self.client().await, ns)
            .create(&PostParams::default(), &wd)
            .await
            .unwrap_or_else(|e| panic!("create WorkerDeployment {ns}/{name}: {e}"))
    }
}

/// `prefix-<6 random characters>`: a cluster-wide name no other test of the run uses.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &twc_testenv::control_plane::random_token()[..6]
    )
}

/// One ClusterConnection (`prefix-<random>`, to the mTLS endpoint) in the world of this binary,
/// with a controller running, and the tenants whose WorkerDeployments use it.
pub struct SharedConnection {
    pub w: &'static World,
    pub client: Client,
    /// The ClusterConnection's name.
    pub cc: String,
}

impl SharedConnection {
    /// The world (with a controller) and a new ClusterConnection named after `prefix`.
    pub async fn new(prefix: &str) -> Result<Self, String> {
        let w = world(true).await?;
        let client = w.client().await;
        let cc = unique(prefix);
        w.cluster_connection(&cc).await;
        Ok(Self { w, client, cc })
    }

    /// A tenant namespace (`prefix-<random>`) with its own client certificate Secret.
    pub async fn tenant(&self, prefix: &str) -> String {
        self.w.tenant(prefix).await
    }

    /// A user: WorkerDeployment `name` in `ns`, running v1 through the ClusterConnection.
    pub async fn user(&self, ns: &str, name: &str) -> WorkerDeployment {
        self.w
            .worker_deployment(ns, name, cluster_ref(&self.cc), "v1")
            .await
    }

    /// A tenant per prefix (all created first), then a user `name` in each; returns the
    /// tenants' namespaces.
    pub async fn users<const N: usize>(&self, prefixes: [&str; N], name: &str) -> [String; N] {
        let mut tenants = Vec::with_capacity(N);
        for prefix in prefixes {
            tenants.push(self.tenant(prefix).await);
        }
        for ns in &tenants {
            self.user(ns, name).await;
        }
        tenants
            .try_into()
            .unwrap_or_else(|t: Vec<String>| panic!("{} tenants for {N} prefixes", t.len()))
    }

    /// Waits until the ClusterConnection is `want`: "protected", "unprotected" or "gone".
    pub async fn wait(&self, want: &str, timeout: Duration) {
        wait_cluster_connection(&self.client, &self.cc, want, timeout).await
    }

    /// The ClusterConnection as stored now.
    pub async fn get(&self) -> Result<ClusterConnection, kube::Error> {
        self.api().get(&self.cc).await
    }

    pub fn api(&self) -> Api<ClusterConnection> {
        Api::all(self.client.clone())
    }

    /// The server version each live Temporal client of the controller read when dialled.
    pub fn pool_server_versions(&self) -> Vec<Option<String>> {
        let Some(h) = self.w.controller.as_ref() else {
            return Vec::new();
        };
        h.pool
            .keys()
            .iter()
            .map(|k| h.pool.server_version(k))
            .collect()
    }

    /// The keys of the controller's live Temporal clients.
    pub fn pool_keys(&self) -> Vec<twc_controller::temporal::pool::PoolKey> {
        self.w
            .controller
            .as_ref()
            .map(|h| h.pool.keys())
            .unwrap_or_default()
    }
}

/// The reconciles of `controller` ("WorkerDeployment", ...) this test process has run, from the
/// controller's own metric.
pub fn reconciles(controller: &str) -> u64 {
    let prefix = format!("twc_reconcile_total{{controller=\"{controller}\"}}");
    twc_controller::metrics::global()
        .encode()
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture does not parse: {e}"))
}

pub fn by_name(name: &str) -> Value {
    json!({"name": name})
}

pub fn cluster_ref(name: &str) -> Value {
    json!({"objectRef": {"kind": "ClusterConnection", "name": name}})
}

pub fn connection_ref(name: &str) -> Value {
    json!({"objectRef": {"kind": "Connection", "name": name}})
}

/// Waits until the WorkerDeployment satisfies `pred`, showing its status on timeout.
pub async fn wait_wd(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&WorkerDeployment) -> bool,
) -> WorkerDeployment {
    let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("{ns}/{name}: {what}"), timeout, || {
        let api = api.clone();
        let pred = &pred;
        async move {
            let wd = api.get(name).await.map_err(|e| e.to_string())?;
            if pred(&wd) {
                Ok(wd)
            } else {
                Err(format!(
                    "status: {}",
                    serde_json::to_string(&wd.status).unwrap_or_default()
                ))
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

pub fn condition(wd: &WorkerDeployment, type_: &str) -> Option<(String, String, String)> {
    wd.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The rollout finished: the target is current and Ready is True.
pub fn rolled_out(wd: &WorkerDeployment) -> bool {
    let s = wd.status.clone().unwrap_or_default();
    let target = s.target_version.map(|t| t.base.build_id);
    let current = s.current_version.map(|c| c.base.build_id);
    target.is_some()
        && target == current
        && condition(wd, "Ready").is_some_and(|(st, _, _)| st == "True")
}

pub fn has_finalizer<K: ResourceExt>(o: &K) -> bool {
    o.finalizers().iter().any(|f| f == twc_api::FINALIZER)
}

/// Waits until a connection is `want`: "protected" (has our finalizer), "unprotected" or "gone".
async fn wait_protection<K>(api: Api<K>, what: String, name: &str, want: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{what}: {want}"), timeout, || {
        let api = api.clone();
        async move {
            let c = api.get_opt(name).await.map_err(|e| e.to_string())?;
            let state = match &c {
                None => "gone",
                Some(c) if has_finalizer(c) => "protected",
                Some(_) => "unprotected",
            };
            if state == want {
                Ok(())
            } else {
                Err(format!("{state}: {:?}", c.map(|c| c.meta().clone())))
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontroller log about {name}:\n{}", logs_about(name)))
}

/// The captured log lines mentioning `needle` (the last 60).
pub fn logs_about(needle: &str) -> String {
    let logs = capture_logs();
    let text =
        String::from_utf8_lossy(&logs.lock().map(|l| l.clone()).unwrap_or_default()).into_owned();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../../target/controller-test-{}.log",
        std::process::id()
    ));
    if std::fs::write(&path, &text).is_ok() {
        eprintln!("full controller log: {}", path.display());
    }
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

pub async fn wait_cluster_connection(client: &Client, name: &str, want: &str, timeout: Duration) {
    let api: Api<ClusterConnection> = Api::all(client.clone());
    wait_protection(
        api,
        format!("ClusterConnection {name}"),
        name,
        want,
        timeout,
    )
    .await
}

pub async fn wait_connection(client: &Client, ns: &str, name: &str, want: &str, timeout: Duration) {
    let api: Api<Connection> = Api::namespaced(client.clone(), ns);
    wait_protection(api, format!("Connection {ns}/{name}"), name, want, timeout).await
}

pub async fn delete_wd(client: &Client, ns: &str, name: &str) {
    Api::<WorkerDeployment>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete {ns}/{name}: {e}"));
}

/// Waits until the WorkerDeployment is gone; on timeout shows its events and pods.
pub async fn wait_wd_gone(client: &Client, ns: &str, name: &str, timeout: Duration) {
    let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
    let result = wait_for(&format!("{ns}/{name} to be deleted"), timeout, || {
        let api = api.clone();
        async move {
            match api.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(wd) => Err(format!("still there: {:?}", wd.metadata.finalizers)),
            }
        }
    })
    .await;
    if let Err(e) = result {
        let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .map(|e| format!("{:?} {:?}: {:?}", e.type_, e.reason, e.note))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .map(|l| l.items.iter().map(|p| p.name_any()).collect::<Vec<_>>())
            .unwrap_or_default();
        panic!(
            "{e}\nevents:\n{events}\npods: {pods:?}\ncontroller log about {ns}:\n{}",
            logs_about(ns)
        );
    }
}

/// Applies the generated RBAC file `config/rbac/<file>` and binds it to ServiceAccount
/// `sa_ns/sa`: ClusterRoles with a ClusterRoleBinding, the Role with a RoleBinding in each of
/// `role_namespaces`. Returns a client authenticated as that ServiceAccount.
pub async fn client_with_generated_rbac(
    w: &World,
    file: &str,
    sa_ns: &str,
    sa: &str,
    role_namespaces: &[String],
) -> Client {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let admin = w.client().await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../config/rbac")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let pp = kube::api::PatchParams::apply("rbac-test").force();
    let subject = json!([{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]);
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{e}"));
        if v.is_null() {
            continue;
        }
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match v["kind"].as_str() {
            Some("ClusterRole") => {
                let unique = format!("{name}-{sa_ns}");
                let mut role = v.clone();
                role["metadata"]["name"] = json!(unique);
                Api::<ClusterRole>::all(admin.clone())
                    .patch(&unique, &pp, &kube::api::Patch::Apply(&role))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                let binding = json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": unique},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": unique},
                    "subjects": subject,
                });
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .patch(&unique, &pp, &kube::api::Patch::Apply(&binding))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            Some("Role") => {
                for ns in role_namespaces {
                    let mut role = v.clone();
                    role["metadata"]["namespace"] = json!(ns);
                    Api::<Role>::namespaced(admin.clone(), ns)
                        .patch(&name, &pp, &kube::api::Patch::Apply(&role))
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                    let binding = json!({
                        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                        "metadata": {"name": name, "namespace": ns},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                        "subjects": subject,
                    });
                    Api::<RoleBinding>::namespaced(admin.clone(), ns)
                        .patch(&name, &pp, &kube::api::Patch::Apply(&binding))
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                }
            }
            other => panic!("unexpected kind {other:?} in {file}"),
        }
    }
    w.env
        .control_plane
        .client_as_service_account(sa_ns, sa)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Captures this test binary's logs (debug and up) to check for error loops.
pub fn capture_logs() -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    use std::sync::{Arc, Mutex};
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug,hyper=info,h2=info,tower=info,rustls=info")
            .with_ansi(false)
            .with_writer(move || LogWriter(writer.clone()))
            .try_init();
        buf
    })
    .clone()
}

struct LogWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(data);
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Waits for an event with `reason` in `ns` whose note contains `needle`; returns it.
pub async fn wait_event(
    client: &Client,
    ns: &str,
    reason: &str,
    needle: &str,
    timeout: Duration,
) -> k8s_openapi::api::events::v1::Event {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    twc_testenv::wait_for(&format!("{ns}: a {reason} event"), timeout, || {
        let api = api.clone();
        async move {
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.note.as_deref().unwrap_or_default().contains(needle)
                })
                .ok_or_else(|| format!("no {reason} event yet"))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// What `kubectl get` shows for `path` (a list URL): the apiserver's Table, as (column names,
/// rows of cells as text; an absent cell is "").
pub async fn table(client: &Client, path: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let req = http::Request::get(path)
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let t: Value = client
        .request(req)
        .await
        .unwrap_or_else(|e| panic!("Table of {path}: {e}"));
    let columns = t["columnDefinitions"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| c["name"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let rows = t["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    r["cells"]
                        .as_array()
                        .map(|c| c.iter().map(text).collect())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default();
    (columns, rows)
}

/// The row of `name` (first cell) in a [`table`], as column name → cell.
pub fn row_of(
    (columns, rows): &(Vec<String>, Vec<Vec<String>>),
    name: &str,
) -> std::collections::BTreeMap<String, String> {
    rows.iter()
        .find(|r| r.first().map(String::as_str) == Some(name))
        .map(|r| columns.iter().cloned().zip(r.iter().cloned()).collect())
        .unwrap_or_default()
}

/// A connection's `Ready` condition as (status, reason, message).
pub fn connection_ready(
    status: Option<&twc_api::ConnectionStatus>,
) -> Option<(String, String, String)> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// A plain HTTP/1.0 GET: (status, body).
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    http_get_as(addr, path, None).await
}

/// [`http_get`] with a bearer token.
pub async fn http_get_as(
    addr: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = String::new();
    stream
        .read_to_string(&mut raw)
        .await
        .map_err(|e| e.to_string())?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line in {raw:?}"))?;
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((status, body.to_string()))
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
