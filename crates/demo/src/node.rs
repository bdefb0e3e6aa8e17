//! The demo on a real node, as a user installs the controller: the images built here
//! (`hack/image.sh`) imported into the node's containerd, the CRDs chart and the controller
//! chart installed with `helm install --wait` (the chart's default image, into a namespace that
//! enforces the restricted Pod Security Standard), worker pods that are containers of the
//! example worker image under a real kubelet. What the demo reads of the controller (memory,
//! CPU time, Temporal RPCs) it reads from outside the pod: its container's process in /proc and
//! its authenticated `/metrics` with a ServiceAccount token that the chart's metrics-reader
//! ClusterRole allows.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use twc_testenv::controller::{Usage, temporal_rpcs};
use twc_testenv::node::NodeEnv;
use twc_testenv::{Error, TemporalOptions, paths};

/// The controller's namespace, release and the objects' names the chart gives that release.
pub const SYSTEM: &str = "temporal-worker-controller";
const RELEASE: &str = "twc";
const FULLNAME: &str = "twc-temporal-worker-controller";
/// The example worker image as `hack/image.sh` names it (the crate's version as tag).
const WORKER_BUILT: &str = "docker.io/twc/example-worker:0.1.0";
/// The demo's worker image: the one built here, tagged `v1` and `v2` on the node, as two
/// pushes of a CI would be. A new tag is a new pod template, so a new version.
pub const WORKER_IMAGE: &str = "twc/example-worker";
/// The ServiceAccount the demo reads `/metrics` as, bound to the chart's metrics-reader role.
const METRICS_READER: &str = "demo-metrics-reader";

/// Fails naming every piece the real node needs and this machine lacks, and how to run the
/// demo without one.
pub fn check() -> anyhow::Result<()> {
    match twc_testenv::node::preflight() {
        Ok(()) => Ok(()),
        Err(e) => bail!("{}", unavailable(&e)),
    }
}

fn unavailable(e: &Error) -> String {
    let pieces = match e {
        Error::NodeUnavailable(missing) => missing
            .iter()
            .map(|m| format!("  - {m}"))
            .collect::<Vec<_>>()
            .join("\n"),
        other => format!("  - {other}"),
    };
    format!(
        "the real node cannot start on this machine:\n{pieces}\n\
         `hack/provision.sh` (as root) installs and builds its pieces. Without root, run the \
         demo with the kubelet stand-in instead: hack/demo.sh --pod-runner"
    )
}

/// Starts the control plane, Temporal and the node with the controller and worker images
/// imported, and tags the worker image `v1` and `v2`.
pub async fn start(dir: &Path) -> anyhow::Result<NodeEnv> {
    let images = [
        paths::image_archive("temporal-worker-controller"),
        paths::image_archive("example-worker"),
    ];
    let env = match NodeEnv::start_with(dir, &images, TemporalOptions::default()).await {
        Ok(env) => env,
        Err(e @ Error::NodeUnavailable(_)) => bail!("{}", unavailable(&e)),
        Err(e @ Error::MissingImage(_)) => {
            bail!("{e}\n(hack/demo.sh builds them; `hack/demo.sh --pod-runner` needs none)")
        }
        Err(e) => return Err(e.into()),
    };
    for tag in ["v1", "v2"] {
        env.node
            .ctr(&[
                "images",
                "tag",
                "--force",
                WORKER_BUILT,
                &format!("docker.io/{WORKER_IMAGE}:{tag}"),
            ])
            .context("tagging the example worker image")?;
    }
    Ok(env)
}

/// `helm install` of the CRDs chart, then of the controller chart with its default values
/// (the image built here) into a namespace that enforces the restricted Pod Security
/// Standard, waiting until the kubelet finds the controller's pod Ready (its `/readyz` probe).
/// One value is set: `drainagePollSeconds`, which the chart asks to be set to the server's
/// drainage refresh interval (the dev server's is 1 s here; the default, 180 s, is Temporal's
/// production default).
pub async fn install(env: &NodeEnv) -> anyhow::Result<()> {
    Ok(env
        .install_charts(RELEASE, SYSTEM, &["drainagePollSeconds=1"])
        .await?)
}

/// The controller as the chart runs it: its pod, read from outside.
pub struct ControllerPod {
    pub name: String,
    pub image: String,
    ip: String,
    container_id: String,
    token: String,
}

impl ControllerPod {
    /// The Ready controller pod of the release, and a token of a ServiceAccount bound to the
    /// chart's `<fullname>-metrics-reader` ClusterRole, as a user grants a scraper.
    pub async fn find(env: &NodeEnv, client: &Client) -> anyhow::Result<Self> {
        let pods = Api::<Pod>::namespaced(client.clone(), SYSTEM)
            .list(&ListParams::default().labels(&format!(
                "app.kubernetes.io/name=temporal-worker-controller,app.kubernetes.io/instance={RELEASE}"
            )))
            .await?
            .items;
        let pod = pods
            .into_iter()
            .find(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .context("no Ready controller pod")?;
        let status = pod.status.clone().unwrap_or_default();
        let container_id = status
            .container_statuses
            .as_ref()
            .and_then(|c| c.first())
            .and_then(|c| c.container_id.as_deref())
            .and_then(|id| id.strip_prefix("containerd://"))
            .context("the controller's container has no containerd id")?
            .to_string();
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": METRICS_READER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": format!("{FULLNAME}-metrics-reader")},
            "subjects": [{"kind": "ServiceAccount", "name": METRICS_READER, "namespace": SYSTEM}]
        }))?;
        match Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let token = env
            .control_plane
            .service_account_token(SYSTEM, METRICS_READER)
            .await?;
        Ok(Self {
            name: pod.metadata.name.clone().unwrap_or_default(),
            image: pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default(),
            ip: status.pod_ip.unwrap_or_default(),
            container_id,
            token,
        })
    }

    /// The controller process's memory and CPU time: its container's task, in /proc.
    pub fn usage(&self, env: &NodeEnv) -> anyhow::Result<Usage> {
        let pid = env
            .node
            .tasks()?
            .into_iter()
            .find(|(id, _, status)| *id == self.container_id && status == "RUNNING")
            .map(|(_, pid, _)| pid)
            .context("containerd runs no task for the controller's container")?;
        Ok(Usage::of_pid(pid))
    }

    /// Temporal RPCs the controller made: its `/metrics` on the pod's address (port 8080, the
    /// chart's default), with the metrics reader's token.
    pub async fn rpcs(&self) -> anyhow::Result<f64> {
        let body = self.metrics().await?;
        Ok(temporal_rpcs(&body))
    }

    async fn metrics(&self) -> anyhow::Result<String> {
        let addr = format!("{}:8080", self.ip);
        let mut stream = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect(&addr),
        )
        .await
        .with_context(|| format!("connecting to {addr}"))??;
        stream
            .write_all(
                format!(
                    "GET /metrics HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\r\n",
                    self.token
                )
                .as_bytes(),
            )
            .await?;
        let mut raw = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut raw))
            .await
            .with_context(|| format!("reading http://{addr}/metrics"))??;
        let status = raw.lines().next().unwrap_or_default().to_string();
        if !status.contains(" 200") {
            bail!("GET http://{addr}/metrics: {status}");
        }
        Ok(raw
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default())
    }
}
