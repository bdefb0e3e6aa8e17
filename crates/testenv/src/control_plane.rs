//! A real Kubernetes control plane on loopback: etcd, kube-apiserver (token authentication,
//! RBAC authorization, the default admission chain, serving certificate made on the fly) and,
//! optionally, kube-controller-manager with the controllers tests need.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod clients;

use clients::{client_from_kubeconfig, kubeconfig_json};
pub use clients::{create_namespace, random_token};

use crate::pki::{Ca, Usage};
use crate::process::{
    ChildProcess, START_ATTEMPTS, Spec, free_port, free_ports, log_len, log_tail, lost_a_port_race,
};
use crate::{Error, paths};

/// The controllers kube-controller-manager runs here: enough for owner-reference garbage
/// collection, Deployments -> ReplicaSets -> Pods, namespace deletion and ServiceAccounts.
pub const CONTROLLERS: &str = "garbagecollector,deployment,replicaset,namespace,serviceaccount,serviceaccount-token,root-ca-cert-publisher";

/// With a real node, also: the Node lifecycle (it lifts the `not-ready` taint a kubelet
/// registers with, and marks an unresponsive node), taint-based eviction, EndpointSlices, and
/// HorizontalPodAutoscalers (no metrics server runs: an HPA holds its target within its
/// minimum and maximum, which is what a worker group's HPA is tested for).
pub const NODE_CONTROLLERS: &str =
    "nodelifecycle,taint-eviction-controller,endpointslice,horizontalpodautoscaling";

const ADMIN_TOKEN_USER: &str = "twc-admin";

/// The `kubernetes` Service's ClusterIP: the first address of `--service-cluster-ip-range`.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The apiserver's audit log, in the control plane's directory.
const AUDIT_LOG: &str = "kube-apiserver-audit.log";

/// What the apiserver audits: reads of Secrets (their metadata, never their data), nothing else.
const SECRET_READS_AUDIT: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets"]
  verbs: ["get", "list", "watch"]
- level: None
"#;

/// Options for [`ControlPlane::start`].
#[derive(Clone, Debug)]
pub struct ControlPlaneOptions {
    /// Also run kube-controller-manager (garbage collection, Deployments, ReplicaSets, ...).
    pub controller_manager: bool,
    /// Extra `--flag=value` arguments for kube-apiserver.
    pub apiserver_args: Vec<String>,
    /// Serve a real node ([`crate::node`]) too: kube-apiserver also listens on the node's
    /// bridge address and advertises it (so the `kubernetes` Service leads pods to it through
    /// kube-proxy), authorizes kubelets with the Node authorizer, and issues a token for the
    /// node named here (`system:node:<name>`, group `system:nodes`).
    pub node: Option<String>,
}

impl Default for ControlPlaneOptions {
    fn default() -> Self {
        Self {
            controller_manager: true,
            apiserver_args: Vec::new(),
            node: None,
        }
    }
}

/// A running control plane. Dropping it stops every process.
pub struct ControlPlane {
    processes: Mutex<Vec<ChildProcess>>,
    /// `https://127.0.0.1:PORT`
    pub server_url: String,
    /// The CA that signed the apiserver's serving certificate (PEM).
    pub ca_pem: String,
    admin_token: String,
    /// An admin kubeconfig file (usable by kubectl too).
    pub kubeconfig_path: PathBuf,
    /// The kubeconfig of the node's kubelet ([`ControlPlaneOptions::node`]).
    pub node_kubeconfig_path: Option<PathBuf>,
    log_dir: PathBuf,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver (and kube-controller-manager if asked) and waits until
    /// they are ready. `dir` holds data, certificates and logs.
    pub async fn start(opts: &ControlPlaneOptions, dir: &Path) -> Result<Self, Error> {
        let data = dir.join("data");
        let pki = dir.join("pki");
        for d in [&data, &pki] {
            std::fs::create_dir_all(d).map_err(|e| Error::io("testenv", d, e))?;
        }
        let ports = free_ports(4)?;
        let (etcd_client, etcd_peer, kcm_port) = (ports[0], ports[1], ports[3]);

        // Certificates and keys.
        let ca = Ca::new("twc-testenv-ca")?;
        let serving = ca.issue(
            "kube-apiserver",
            &[
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                // The `kubernetes` Service's ClusterIP (the first of the service range) and the
                // real node's bridge address, which pods reach it by.
                KUBERNETES_SERVICE_IP,
                crate::node::HOST_IP,
            ],
            Usage::Server,
            time::Duration::days(30),
        )?;
        let (sa_key, sa_pub) = crate::pki::signing_key_pair()?;
        let admin_token = random_token();
        let node_token = random_token();
        let mut tokens =
            format!("{admin_token},{ADMIN_TOKEN_USER},{ADMIN_TOKEN_USER},system:masters\n");
        if let Some(node) = &opts.node {
            tokens.push_str(&format!(
                "{node_token},system:node:{node},system:node:{node},system:nodes\n"
            ));
        }
        let files = [
            ("ca.crt", ca.cert_pem.clone()),
            ("apiserver.crt", serving.cert_pem.clone()),
            ("apiserver.key", serving.key_pem.clone()),
            ("sa.key", sa_key),
            ("sa.pub", sa_pub),
            ("tokens.csv", tokens),
            ("audit-policy.yaml", SECRET_READS_AUDIT.to_string()),
        ];
        for (name, content) in &files {
            let p = pki.join(name);
            std::fs::write(&p, content).map_err(|e| Error::io("testenv", &p, e))?;
        }

        let mut processes = Vec::new();

        // etcd
        let etcd_spec = Spec::new("etcd", paths::etcd(), dir.join("etcd.log")).args([
            "--name=testenv".to_string(),
            format!("--data-dir={}", data.join("etcd").display()),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-cluster=testenv=http://127.0.0.1:{etcd_peer}"),
            "--initial-cluster-state=new".into(),
            "--unsafe-no-fsync".into(),
            "--heartbeat-interval=10".into(),
            "--election-timeout=100".into(),
            "--log-level=warn".into(),
        ]);
        let mut etcd = ChildProcess::start(&etcd_spec)?;
        let started = Instant::now();
        let timeout = Duration::from_secs(20);
        loop {
            etcd.check_running()?;
            match http_get(etcd_client, "/health").await {
                Ok(body) if body.contains("\"health\":\"true\"") => break,
                Ok(body) if started.elapsed() > timeout => {
                    return Err(not_ready(&etcd, timeout, body));
                }
                Err(e) if started.elapsed() > timeout => return Err(not_ready(&etcd, timeout, e)),
                _ => tokio::time::sleep(Duration::from_millis(30)).await,
            }
        }
        processes.push(etcd);

        // kube-apiserver: on a fresh port if another process took the one picked before the
        // server bound it (it exits at once with "address already in use").
        let api_log = dir.join("kube-apiserver.log");
        let mut api_port = ports[2];
        let mut attempt = 1;
        let (apiserver, server_url, kubeconfig_path, node_kubeconfig_path, client) = 'start: loop {
            let since = log_len(&api_log);
            let mut api_args = vec![
                format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
                format!("--secure-port={api_port}"),
                format!("--tls-cert-file={}", pki.join("apiserver.crt").display()),
                format!(
                    "--tls-private-key-file={}",
                    pki.join("apiserver.key").display()
                ),
                format!("--client-ca-file={}", pki.join("ca.crt").display()),
                format!("--token-auth-file={}", pki.join("tokens.csv").display()),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!(
                    "--service-account-key-file={}",
                    pki.join("sa.pub").display()
                ),
                format!(
                    "--service-account-signing-key-file={}",
                    pki.join("sa.key").display()
                ),
                "--service-cluster-ip-range=10.96.0.0/24".into(),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                format!("--cert-dir={}", pki.join("generated").display()),
                // Who read which Secret: tests prove what the controller never reads.
                format!(
                    "--audit-policy-file={}",
                    pki.join("audit-policy.yaml").display()
                ),
                format!("--audit-log-path={}", dir.join(AUDIT_LOG).display()),
                "--audit-log-format=json".into(),
            ];
            if opts.node.is_some() {
                // Loopback for the host's clients, the bridge for pods (through kube-proxy); the
                // lease reconciler keeps the `kubernetes` Service's endpoint at the bridge address.
                api_args.extend([
                    "--bind-address=0.0.0.0".to_string(),
                    format!("--advertise-address={}", crate::node::HOST_IP),
                    "--endpoint-reconciler-type=lease".into(),
                    "--authorization-mode=Node,RBAC".into(),
                    // `kubectl logs` reaches the kubelet by the node's address; its name is in no DNS.
                    "--kubelet-preferred-address-types=InternalIP".into(),
                ]);
            } else {
                api_args.extend([
                    "--bind-address=127.0.0.1".to_string(),
                    "--advertise-address=127.0.0.1".into(),
                    "--endpoint-reconciler-type=none".into(),
                    "--authorization-mode=RBAC".into(),
                ]);
            }
            api_args.extend(opts.apiserver_args.iter().cloned());
            let api_spec = Spec::new("kube-apiserver", paths::kube_apiserver(), api_log.clone())
                .args(api_args);
            let mut apiserver = ChildProcess::start(&api_spec)?;

            let server_url = format!("https://127.0.0.1:{api_port}");
            let kubeconfig_path = dir.join("admin.kubeconfig");
            let kubeconfig = kubeconfig_json(&server_url, &ca.cert_pem, &admin_token);
            std::fs::write(&kubeconfig_path, kubeconfig.to_string())
                .map_err(|e| Error::io("testenv", &kubeconfig_path, e))?;
            let node_kubeconfig_path = match &opts.node {
                Some(_) => {
                    let path = dir.join("node.kubeconfig");
                    let config = kubeconfig_json(&server_url, &ca.cert_pem, &node_token);
                    std::fs::write(&path, config.to_string())
                        .map_err(|e| Error::io("testenv", &path, e))?;
                    Some(path)
                }
                None => None,
            };

            let client = client_from_kubeconfig(kubeconfig).await?;
            let started = Instant::now();
            let timeout = Duration::from_secs(90);
            loop {
                if let Err(e) = apiserver.check_running() {
                    if attempt < START_ATTEMPTS && lost_a_port_race(&e, since) {
                        attempt += 1;
                        api_port = free_port()?;
                        continue 'start;
                    }
                    return Err(e);
                }
                let req = http::Request::get("/readyz").body(Vec::new());
                let result = match req {
                    Ok(req) => client.request_text(req).await.map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match result {
                    Ok(body) if body.trim() == "ok" => {
                        break 'start (
                            apiserver,
                            server_url,
                            kubeconfig_path,
                            node_kubeconfig_path,
                            client,
                        );
                    }
                    Ok(body) | Err(body) => {
                        if started.elapsed() > timeout {
                            return Err(not_ready(&apiserver, timeout, body));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        processes.push(apiserver);

        let cp = Self {
            processes: Mutex::new(processes),
            server_url,
            ca_pem: ca.cert_pem.clone(),
            admin_token,
            kubeconfig_path,
            node_kubeconfig_path,
            log_dir: dir.to_path_buf(),
        };

        if opts.controller_manager {
            let kcm_spec = Spec::new(
                "kube-controller-manager",
                paths::kube_controller_manager(),
                dir.join("kube-controller-manager.log"),
            )
            .args([
                format!("--kubeconfig={}", cp.kubeconfig_path.display()),
                format!(
                    "--authentication-kubeconfig={}",
                    cp.kubeconfig_path.display()
                ),
                format!(
                    "--authorization-kubeconfig={}",
                    cp.kubeconfig_path.display()
                ),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={kcm_port}"),
                format!("--cert-dir={}", pki.join("kcm").display()),
                "--leader-elect=false".into(),
                if opts.node.is_some() {
                    format!("--controllers={CONTROLLERS},{NODE_CONTROLLERS}")
                } else {
                    format!("--controllers={CONTROLLERS}")
                },
                format!(
                    "--service-account-private-key-file={}",
                    pki.join("sa.key").display()
                ),
                format!("--root-ca-file={}", pki.join("ca.crt").display()),
                "--use-service-account-credentials=false".into(),
                "--kube-api-qps=200".into(),
                "--kube-api-burst=400".into(),
                "--concurrent-gc-syncs=5".into(),
                "--horizontal-pod-autoscaler-sync-period=5s".into(),
            ]);
            let kcm = ChildProcess::start(&kcm_spec)?;
            let kcm_log = kcm.log_path().to_path_buf();
            cp.lock_processes()?.push(kcm);
            // Ready when the ServiceAccount controller has made `default/default`.
            let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
            let started = Instant::now();
            let timeout = Duration::from_secs(60);
            loop {
                cp.check_running()?;
                match sa.get_opt("default").await {
                    Ok(Some(_)) => break,
                    Ok(None) | Err(_) if started.elapsed() > timeout => {
                        return Err(Error::NotReady {
                            component: "kube-controller-manager".into(),
                            waited: timeout,
                            last: "ServiceAccount default/default never appeared".into(),
                            tail: log_tail(&kcm_log, 20),
                            log: kcm_log,
                        });
                    }
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
        Ok(cp)
    }

    fn lock_processes(&self) -> Result<std::sync::MutexGuard<'_, Vec<ChildProcess>>, Error> {
        self.processes
            .lock()
            .map_err(|_| Error::Other("control plane lock poisoned".into()))
    }

    /// Fails, naming the component and its log, if any process has exited.
    pub fn check_running(&self) -> Result<(), Error> {
        for p in self.lock_processes()?.iter_mut() {
            p.check_running()?;
        }
        Ok(())
    }

    /// Stops kube-apiserver (SIGTERM, SIGKILL after `grace`), starts it again with the same
    /// flags and waits until `/readyz` says ok (90 s at most). etcd keeps every object.
    pub async fn restart_apiserver(&self, grace: Duration) -> Result<(), Error> {
        {
            let mut processes = self.lock_processes()?;
            let apiserver = processes
                .iter_mut()
                .find(|p| p.name() == "kube-apiserver")
                .ok_or_else(|| Error::Other("no kube-apiserver in this control plane".into()))?;
            apiserver.restart(grace)?;
        }
        let client = self.client().await?;
        let started = Instant::now();
        let timeout = Duration::from_secs(90);
        loop {
            self.check_running()?;
            let ready = match http::Request::get("/readyz").body(Vec::new()) {
                Ok(req) => client.request_text(req).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match ready {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) | Err(body) if started.elapsed() > timeout => {
                    return Err(Error::Other(format!(
                        "kube-apiserver not ready {timeout:?} after a restart: {body}"
                    )));
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The reads of Secrets in `namespace` the apiserver served (get, list, watch of one
    /// namespace; a list or watch across all namespaces is not one), from its audit log, as
    /// (verb, Secret name or "" for a list, user name).
    pub fn secret_reads(&self, namespace: &str) -> Vec<(String, String, String)> {
        let log = std::fs::read_to_string(self.log_dir.join(AUDIT_LOG)).unwrap_or_default();
        // A watch is logged when its response starts and again when it completes: once each.
        let mut seen = std::collections::HashSet::new();
        log.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|e| seen.insert(e["auditID"].as_str().unwrap_or_default().to_string()))
            .filter(|e| {
                e["objectRef"]["resource"] == "secrets" && e["objectRef"]["namespace"] == namespace
            })
            .map(|e| {
                let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                (
                    text(&e["verb"]),
                    text(&e["objectRef"]["name"]),
                    text(&e["user"]["username"]),
                )
            })
            .collect()
    }

    /// Where the logs of etcd, kube-apiserver and kube-controller-manager are.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// (component, RSS bytes) of each server process.
    pub fn rss(&self) -> Vec<(String, u64)> {
        self.lock_processes()
            .map(|ps| {
                ps.iter()
                    .filter_map(|p| crate::rss_bytes(p.pid()).map(|r| (p.name().to_string(), r)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn not_ready(p: &ChildProcess, waited: Duration, last: String) -> Error {
    Error::NotReady {
        component: p.name().to_string(),
        waited,
        last,
        log: p.log_path().to_path_buf(),
        tail: log_tail(p.log_path(), 20),
    }
}

/// A plain-HTTP GET on 127.0.0.1:`port`; returns the whole response.
pub(crate) async fn http_get(port: u16, path: &str) -> Result<String, String> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut buf))
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
