//! A real node: pods run as containers under containerd (its CRI plugin) and runc, on a bridge
//! network that exists only on this machine, managed by a real kubelet that registers the Node
//! [`NAME`]; kube-proxy (iptables) leads pods to the `kubernetes` Service, kube-scheduler binds
//! them. Where [`crate::PodRunner`] plays the kubelet as we believe it behaves, this is the
//! kubelet: crash loops, readiness probes, SIGTERM and grace periods are its own.
//!
//! * One real node per machine at a time (its bridge, the pods' cgroups and iptables are the
//!   machine's): [`host::Host::claim`] takes a lock, waiting for another run's node.
//! * What the machine lacks (root, overlayfs, cgroups, containerd, runc, CNI plugins, iptables,
//!   the kubelet) is named by [`host::preflight`], and the start fails with that message.
//! * No registry serves images here: images are OCI archives built by `hack/image.sh`
//!   ([`crate::paths::image_archive`]), imported with `ctr` ([`Node::import_image`]); the pause
//!   image is one of them ([`PAUSE_IMAGE`]).
//! * Nothing outlives the run: the node's end, or a reaper after the process that started it
//!   has exited, kills its containers and removes its mounts, bridge and iptables rules
//!   (`cleanup.sh`).
//!
//! Pods reach the host at [`HOST_IP`]: kube-apiserver (through the `kubernetes` Service) and
//! Temporal listen there ([`NodeEnv`]).

pub mod config;
pub mod host;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node as KubeNode};
use kube::{Api, Client};

use crate::control_plane::{ControlPlane, ControlPlaneOptions};
use crate::process::{ChildProcess, Spec, free_ports, log_tail};
use crate::temporal::{TemporalOptions, TemporalServer};
use crate::{Error, paths};

pub use host::{Host, preflight};

/// The Node's name.
pub const NAME: &str = "twc-node";
/// The bridge the pods' veths hang on.
pub const BRIDGE: &str = "twc0";
/// The pods' addresses; nothing else on the machine uses this range.
pub const POD_SUBNET: &str = "10.223.0.0/16";
pub(crate) const POD_PREFIX: u8 = 16;
/// The host's address on the bridge: the pods' gateway, the node's InternalIP, and where
/// kube-apiserver and Temporal listen for pods.
pub const HOST_IP: &str = "10.223.0.1";
/// The pod sandbox image (`hack/image/pause.c`, built by `hack/image.sh`).
pub const PAUSE_IMAGE: &str = "localhost/twc/pause:3.10";

pub(crate) const STATE_DIR: &str = "/var/lib/twc-node";
pub(crate) const RUN_DIR: &str = "/run/twc-node";
const SOCKET: &str = "/run/twc-node/containerd.sock";

/// A running node. Dropping it stops the kubelet first, then kills every container and
/// removes the node's traces from the machine.
pub struct Node {
    processes: Mutex<Vec<ChildProcess>>,
    host: Host,
    client: Client,
    /// The kubelet's `/healthz` port on 127.0.0.1.
    kubelet_healthz: u16,
}

impl Node {
    /// Starts containerd, imports `images` (the pause image first), then the kubelet,
    /// kube-proxy and kube-scheduler, and waits until the Node is Ready and kube-proxy has
    /// written its rules (2 minutes at most). `cp` must have been started with
    /// [`ControlPlaneOptions::node`] = [`NAME`].
    pub async fn start(host: Host, cp: &ControlPlane, images: &[PathBuf]) -> Result<Self, Error> {
        let node_kubeconfig = cp.node_kubeconfig_path.clone().ok_or_else(|| {
            Error::Other("node: the control plane was started without a node".into())
        })?;
        let dir = host.dir.clone();
        let client = cp.client().await?;
        let cni_conf = format!("{RUN_DIR}/net.d");
        for d in [cni_conf.as_str(), &format!("{STATE_DIR}/pod-logs")] {
            std::fs::create_dir_all(d).map_err(|e| Error::io("node", Path::new(d), e))?;
        }
        let write = |path: PathBuf, content: String| {
            std::fs::write(&path, content).map_err(|e| Error::io("node", &path, e))?;
            Ok::<PathBuf, Error>(path)
        };
        write(
            Path::new(&cni_conf).join("10-twc-pods.conflist"),
            config::cni(&format!("{RUN_DIR}/ipam")).to_string(),
        )?;
        let containerd_toml = write(
            dir.join("containerd.toml"),
            config::containerd(
                &format!("{STATE_DIR}/containerd"),
                &format!("{RUN_DIR}/containerd"),
                SOCKET,
                host::CNI_BIN_DIR,
                &cni_conf,
            ),
        )?;
        let ports = free_ports(6)?;
        let containerd = host::which("containerd")
            .ok_or_else(|| Error::NodeUnavailable(vec!["containerd is not installed".into()]))?;
        let mut spec = Spec::new("containerd", containerd, dir.join("containerd.log"))
            .args(["--config", &containerd_toml.display().to_string()]);
        spec.env.push(("PATH".into(), system_path()));
        let node = Self {
            processes: Mutex::new(vec![ChildProcess::start(&spec)?]),
            host,
            client,
            kubelet_healthz: ports[1],
        };
        node.wait_for("containerd", Duration::from_secs(30), || async {
            host::run("ctr", &["--address", SOCKET, "version"]).map(|_| ())
        })
        .await?;
        for image in images {
            node.import_image(image)?;
        }

        let kubelet_yaml = write(
            dir.join("kubelet.yaml"),
            config::kubelet(&config::Kubelet {
                runtime_socket: SOCKET,
                pod_logs: &format!("{STATE_DIR}/pod-logs"),
                port: ports[0],
                healthz_port: ports[1],
            })
            .to_string(),
        )?;
        let kubelet = node.kubelet_spec(&kubelet_yaml, &node_kubeconfig);
        let admin = cp.kubeconfig_path.display().to_string();
        let proxy = Spec::new(
            "kube-proxy",
            paths::kube_proxy(),
            dir.join("kube-proxy.log"),
        )
        .args([
            format!("--kubeconfig={admin}"),
            format!("--hostname-override={NAME}"),
            "--proxy-mode=iptables".into(),
            format!("--cluster-cidr={POD_SUBNET}"),
            // Leave the machine's conntrack settings alone.
            "--conntrack-max-per-core=0".into(),
            "--conntrack-tcp-timeout-established=0".into(),
            "--conntrack-tcp-timeout-close-wait=0".into(),
            format!("--healthz-bind-address=127.0.0.1:{}", ports[2]),
            format!("--metrics-bind-address=127.0.0.1:{}", ports[3]),
        ]);
        let scheduler = Spec::new(
            "kube-scheduler",
            paths::kube_scheduler(),
            dir.join("kube-scheduler.log"),
        )
        .args([
            format!("--kubeconfig={admin}"),
            format!("--authentication-kubeconfig={admin}"),
            format!("--authorization-kubeconfig={admin}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", ports[4]),
        ]);
        {
            let mut processes = node.lock()?;
            for spec in [kubelet, proxy, scheduler] {
                processes.push(ChildProcess::start(&spec)?);
            }
        }
        node.wait_ready(Duration::from_secs(120)).await?;
        let proxy_healthz = ports[2];
        node.wait_for("kube-proxy", Duration::from_secs(60), || async move {
            http_status(proxy_healthz, "/healthz").await
        })
        .await?;
        Ok(node)
    }

    fn kubelet_spec(&self, config: &Path, kubeconfig: &Path) -> Spec {
        let mut spec = Spec::new(
            "kubelet",
            paths::kubelet(),
            self.host.dir.join("kubelet.log"),
        )
        .args([
            format!("--config={}", config.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--root-dir={STATE_DIR}/kubelet"),
            format!("--cert-dir={STATE_DIR}/kubelet/pki"),
            format!("--hostname-override={NAME}"),
            format!("--node-ip={HOST_IP}"),
        ]);
        spec.env.push(("PATH".into(), system_path()));
        spec
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Vec<ChildProcess>>, Error> {
        self.processes
            .lock()
            .map_err(|_| Error::Other("node process lock poisoned".into()))
    }

    /// Imports an OCI image archive into containerd's `k8s.io` namespace (the kubelet's), named
    /// by the archive's own annotation.
    pub fn import_image(&self, archive: &Path) -> Result<(), Error> {
        if !archive.exists() {
            return Err(Error::MissingImage(archive.to_path_buf()));
        }
        let archive = archive.display().to_string();
        host::run(
            "ctr",
            &[
                "--address",
                SOCKET,
                "-n",
                "k8s.io",
                "images",
                "import",
                &archive,
            ],
        )
        .map(|_| ())
    }

    /// Runs `ctr` against this node's containerd (namespace `k8s.io`), returning its output.
    pub fn ctr(&self, args: &[&str]) -> Result<String, Error> {
        let mut all = vec!["--address", SOCKET, "-n", "k8s.io"];
        all.extend_from_slice(args);
        host::run("ctr", &all)
    }

    /// The container processes containerd runs for pods (sandboxes included), as `ctr tasks
    /// ls` lists them: (container id, pid, status).
    pub fn tasks(&self) -> Result<Vec<(String, u32, String)>, Error> {
        let out = self.ctr(&["tasks", "ls"])?;
        Ok(out
            .lines()
            .skip(1)
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let id = f.next()?.to_string();
                let pid = f.next()?.parse().ok()?;
                let status = f.next()?.to_string();
                Some((id, pid, status))
            })
            .collect())
    }

    /// Stops the kubelet (SIGTERM, SIGKILL after `grace`) and starts it again with the same
    /// configuration; its containers keep running meanwhile, as on a real node. Waits until
    /// the Node is Ready again.
    pub async fn restart_kubelet(&self, grace: Duration) -> Result<(), Error> {
        {
            let mut processes = self.lock()?;
            let kubelet = processes
                .iter_mut()
                .find(|p| p.name() == "kubelet")
                .ok_or_else(|| Error::Other("node: no kubelet".into()))?;
            kubelet.restart(grace)?;
        }
        // The Node's Ready condition is stale until the new kubelet reports; wait for its
        // own health first.
        let port = self.kubelet_healthz;
        self.wait_for("kubelet", Duration::from_secs(60), || async move {
            http_status(port, "/healthz").await
        })
        .await?;
        self.wait_ready(Duration::from_secs(60)).await
    }

    /// Fails, naming the component and its log, if a node process has exited.
    pub fn check_running(&self) -> Result<(), Error> {
        for p in self.lock()?.iter_mut() {
            p.check_running()?;
        }
        Ok(())
    }

    /// Waits until the Node reports Ready.
    async fn wait_ready(&self, timeout: Duration) -> Result<(), Error> {
        let nodes: Api<KubeNode> = Api::all(self.client.clone());
        let started = Instant::now();
        let mut last = String::from("no Node yet");
        loop {
            self.check_running()?;
            if let Ok(Some(node)) = nodes.get_opt(NAME).await {
                let ready = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
                match ready {
                    Some(c) if c.status == "True" => return Ok(()),
                    Some(c) => {
                        last = format!(
                            "Ready={} ({}: {})",
                            c.status,
                            c.reason.as_deref().unwrap_or(""),
                            c.message.as_deref().unwrap_or("")
                        )
                    }
                    None => last = "the Node has no Ready condition yet".into(),
                }
            }
            if started.elapsed() > timeout {
                let log = self.host.dir.join("kubelet.log");
                return Err(Error::NotReady {
                    component: format!("node {NAME}"),
                    waited: timeout,
                    last,
                    tail: log_tail(&log, 30),
                    log,
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn wait_for<F, Fut>(&self, component: &str, timeout: Duration, f: F) -> Result<(), Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), Error>>,
    {
        let started = Instant::now();
        loop {
            self.check_running()?;
            match f().await {
                Ok(()) => return Ok(()),
                Err(e) if started.elapsed() > timeout => {
                    let log = self.host.dir.join(format!("{component}.log"));
                    return Err(Error::NotReady {
                        component: component.into(),
                        waited: timeout,
                        last: e.to_string(),
                        tail: log_tail(&log, 30),
                        log,
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Ok(mut processes) = self.processes.lock() {
            // The kubelet first, so it restarts nothing while the containers go.
            for name in ["kubelet", "kube-scheduler", "kube-proxy"] {
                if let Some(p) = processes.iter_mut().find(|p| p.name() == name) {
                    p.kill();
                }
            }
        }
        if let Err(e) = self.host.clean() {
            eprintln!("testenv: the node's cleanup failed: {e}");
        }
    }
}

/// The environment's PATH with the sbin directories, where Debian puts runc's and CNI's
/// helpers (iptables, ip, mount).
fn system_path() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    let mut parts: Vec<&str> = path.split(':').filter(|p| !p.is_empty()).collect();
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        if !parts.contains(&d) {
            parts.push(d);
        }
    }
    parts.join(":")
}

/// `Ok` when a plain-HTTP GET of `path` on 127.0.0.1:`port` answers 200.
async fn http_status(port: u16, path: &str) -> Result<(), Error> {
    let response = crate::control_plane::http_get(port, path)
        .await
        .map_err(|e| Error::Other(format!("127.0.0.1:{port}{path}: {e}")))?;
    let status = response.lines().next().unwrap_or("no answer");
    if status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.0 200") {
        Ok(())
    } else {
        Err(Error::Other(format!("GET {path}: {status}")))
    }
}

/// The control plane, Temporal and a real node, wired so that pods reach both servers at
/// [`HOST_IP`] (the bridge): kube-apiserver through the `kubernetes` Service, Temporal at
/// [`NodeEnv::temporal_address_for_pods`], what a Connection's `hostPort` says. Both listen on
/// every interface of the machine while it runs (its network is closed).
pub struct NodeEnv {
    pub control_plane: ControlPlane,
    pub temporal: TemporalServer,
    pub node: Node,
    temporal_for_pods: String,
    dir: PathBuf,
    /// How long [`NodeEnv::start`] took.
    pub startup: Duration,
}

impl NodeEnv {
    /// Claims the machine's node (see [`Host::claim`]), starts the control plane and Temporal
    /// on the bridge, then the node with the pause image and `images` imported.
    pub async fn start(dir: &Path, images: &[PathBuf]) -> Result<Self, Error> {
        Self::start_with(dir, images, TemporalOptions::default()).await
    }

    /// [`NodeEnv::start`] with Temporal's options (it listens on every interface whatever
    /// they say).
    pub async fn start_with(
        dir: &Path,
        images: &[PathBuf],
        temporal: TemporalOptions,
    ) -> Result<Self, Error> {
        let started = Instant::now();
        let pause = paths::image_archive("pause");
        if !pause.exists() {
            return Err(Error::MissingImage(pause));
        }
        for image in images {
            if !image.exists() {
                return Err(Error::MissingImage(image.clone()));
            }
        }
        let host_dir = dir.to_path_buf();
        let host = tokio::task::spawn_blocking(move || Host::claim(&host_dir))
            .await
            .map_err(|e| Error::Other(format!("node: claim task failed: {e}")))??;
        let cp_opts = ControlPlaneOptions {
            node: Some(NAME.into()),
            ..Default::default()
        };
        let temporal_opts = TemporalOptions {
            all_interfaces: true,
            ..temporal
        };
        let (control_plane, temporal) = tokio::try_join!(
            ControlPlane::start(&cp_opts, dir),
            TemporalServer::start(&temporal_opts, dir),
        )?;
        let port = temporal.address.rsplit(':').next().unwrap_or_default();
        let temporal_for_pods = format!("{HOST_IP}:{port}");
        let mut all = vec![pause];
        all.extend(images.iter().cloned());
        let node = Node::start(host, &control_plane, &all).await?;
        Ok(Self {
            control_plane,
            temporal,
            node,
            temporal_for_pods,
            dir: dir.to_path_buf(),
            startup: started.elapsed(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new admin Kubernetes client for the calling runtime.
    pub async fn client(&self) -> Result<Client, Error> {
        self.control_plane.client().await
    }

    /// A fresh Kubernetes namespace `<prefix>-<random>`.
    pub async fn namespace(&self, prefix: &str) -> Result<String, Error> {
        self.control_plane.namespace(prefix).await
    }

    /// A Temporal namespace no other test uses.
    pub async fn temporal_namespace(&self) -> Result<String, Error> {
        self.temporal.namespace().await
    }

    /// Temporal's frontend as pods reach it (a Connection's `hostPort`).
    pub fn temporal_address_for_pods(&self) -> &str {
        &self.temporal_for_pods
    }

    /// Fails, naming the component and its log, if any server or node process has exited.
    pub fn check_running(&self) -> Result<(), Error> {
        self.control_plane.check_running()?;
        self.temporal.check_running()?;
        self.node.check_running()
    }

    /// `helm install` of both charts as a user runs them: the CRDs chart, then the controller
    /// chart as `release` with its default image into `namespace`, created here enforcing the
    /// restricted Pod Security Standard, with `values` (`key=value`, each a `--set`), waiting
    /// (`--wait`) until its Deployment is available: the kubelet decides that through the
    /// pod's `/readyz` probe.
    pub async fn install_charts(
        &self,
        release: &str,
        namespace: &str,
        values: &[&str],
    ) -> Result<(), Error> {
        let kubeconfig = self.control_plane.kubeconfig_path.display().to_string();
        helm(&[
            "install",
            &format!("{release}-crds"),
            "charts/temporal-worker-controller-crds",
            "--kubeconfig",
            &kubeconfig,
            "--wait",
        ])
        .await?;
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))
                .map_err(|e| Error::Other(e.to_string()))?;
        Api::<Namespace>::all(self.client().await?)
            .create(&Default::default(), &ns)
            .await?;
        self.enforce_pod_security(namespace, "restricted").await?;
        let mut args = vec![
            "install",
            release,
            "charts/temporal-worker-controller",
            "--namespace",
            namespace,
            "--kubeconfig",
            &kubeconfig,
            "--wait",
            "--timeout",
            "4m",
        ];
        for v in values {
            args.extend(["--set", v]);
        }
        helm(&args).await.map(|_| ())
    }

    /// Labels `namespace` to enforce a Pod Security Standard level (`restricted`, ...).
    pub async fn enforce_pod_security(&self, namespace: &str, level: &str) -> Result<(), Error> {
        use kube::api::{Patch, PatchParams};
        let client = self.client().await?;
        let namespaces: Api<Namespace> = Api::all(client);
        let patch = serde_json::json!({ "metadata": { "labels": {
            "pod-security.kubernetes.io/enforce": level,
            "pod-security.kubernetes.io/enforce-version": "latest",
        }}});
        namespaces
            .patch(namespace, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }
}

/// Runs the provisioned `helm` in the workspace with `args`; its standard output.
pub async fn helm(args: &[&str]) -> Result<String, Error> {
    let out = tokio::process::Command::new(paths::helm())
        .args(args)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .await
        .map_err(|e| Error::Other(format!("running {}: {e}", paths::helm().display())))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "helm {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
