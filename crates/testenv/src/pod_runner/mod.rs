//! The pod runner plays the kubelet for one Node: it binds Pending pods to its Node, runs each
//! container as a local process, and reports pod status back through the API, so the real
//! Deployment and ReplicaSet controllers see Running, Ready pods and mark Deployments Available.
//!
//! * An image maps to a local program ([`PodRunner::register_image`]); the lookup tries the
//!   full image reference, then the reference without its tag or digest. An image with no
//!   program is reported as `ErrImagePull`, as a kubelet reports an image it cannot fetch.
//! * The container's `command[1..]` and `args` become the program's arguments (`command[0]`
//!   names a path inside the image, which the program stands for); with neither, the program
//!   gets the arguments it was registered with.
//! * `env` (`value` with `$(VAR)` expansion, `valueFrom.secretKeyRef`, `configMapKeyRef`,
//!   `fieldRef`) and `envFrom` are resolved through the API. Secret, ConfigMap and emptyDir
//!   volumes are written under a per-pod directory; since a process cannot see mounts, any
//!   environment value that starts with a `volumeMount.mountPath` is rewritten to that directory.
//!   A missing Secret or key is reported as `CreateContainerConfigError` and retried.
//! * Deleting a pod (or scaling its Deployment down) sends SIGTERM to the process group, SIGKILL
//!   after the grace period (at most 10 s here), then removes the pod from the API.
//! * `restartPolicy` is honoured (restarts back off from 1 s to 8 s, shown as CrashLoopBackOff);
//!   readiness is "the process is up".

mod env;
mod start;
mod status;
mod volumes;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::Error;
use crate::process::{ChildProcess, Spec};

/// A local program standing in for a container image.
#[derive(Clone, Debug)]
pub struct LocalImage {
    pub program: PathBuf,
    /// Arguments used when the container sets neither `command` nor `args`.
    pub args: Vec<String>,
    /// Extra environment variables (the container's own env wins).
    pub env: Vec<(String, String)>,
}

impl LocalImage {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
}

/// Handle to a running pod runner. Cloning is cheap; all clones share one runner.
#[derive(Clone)]
pub struct PodRunner {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    node: String,
    dir: PathBuf,
    images: Mutex<HashMap<String, LocalImage>>,
    pods: Mutex<HashMap<String, RunningPod>>,
}

struct RunningPod {
    uid: String,
    namespace: String,
    name: String,
    restart_policy: String,
    started_at: Time,
    containers: Vec<RunningContainer>,
    /// The last status we wrote, to skip identical writes.
    last_status: Option<serde_json::Value>,
    /// The pod status says Ready since this time.
    ready_since: Option<Time>,
}

struct RunningContainer {
    name: String,
    image: String,
    spec: Spec,
    process: Option<ChildProcess>,
    restart_count: i32,
    started_at: Time,
    /// Set once the process exited: (exit code, finished at).
    exited: Option<(i32, Time)>,
    restart_after: Option<std::time::Instant>,
}

impl RunningContainer {
    /// How long before the next restart, as the kubelet's back-off (10 s doubling to 5 min)
    /// scaled down: 1 s doubling to 8 s; back to 1 s for a container that ran 10 s or more.
    fn backoff(&self) -> Duration {
        let ran = self.exited.as_ref().map_or(0, |(_, finished)| {
            (finished.0.as_second() - self.started_at.0.as_second()).max(0)
        });
        if ran >= 10 {
            return Duration::from_secs(1);
        }
        Duration::from_secs(1 << self.restart_count.clamp(0, 3))
    }
}

/// Why a pod cannot start yet; reported as a container `waiting` state.
struct Waiting {
    reason: &'static str,
    message: String,
}

impl PodRunner {
    /// Registers Node `node` and starts the runner on the current tokio runtime. `dir` holds
    /// per-pod directories and container logs (`<dir>/<namespace>_<pod>_<container>.log`).
    pub async fn start(client: Client, node: &str, dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("pod-runner", dir, e))?;
        register_node(&client, node).await?;
        let runner = Self {
            inner: Arc::new(Inner {
                client,
                node: node.to_string(),
                dir: dir.to_path_buf(),
                images: Mutex::new(HashMap::new()),
                pods: Mutex::new(HashMap::new()),
            }),
        };
        let r = runner.clone();
        tokio::spawn(async move { r.run().await });
        Ok(runner)
    }

    /// Maps container image `image` (with or without a tag) to a local program.
    pub fn register_image(&self, image: &str, local: LocalImage) {
        if let Ok(mut images) = self.inner.images.lock() {
            images.insert(image.to_string(), local);
        }
    }

    /// The node name pods are bound to.
    pub fn node_name(&self) -> &str {
        &self.inner.node
    }

    /// PIDs of the processes running for pods in `namespace`.
    pub fn running_pids(&self, namespace: &str) -> Vec<u32> {
        let Ok(pods) = self.inner.pods.lock() else {
            return Vec::new();
        };
        pods.values()
            .filter(|p| p.namespace == namespace)
            .flat_map(|p| p.containers.iter())
            .filter(|c| c.exited.is_none())
            .filter_map(|c| c.process.as_ref().map(|p| p.pid()))
            .collect()
    }

    /// The log file of a container.
    pub fn container_log(&self, namespace: &str, pod: &str, container: &str) -> PathBuf {
        self.inner
            .dir
            .join(format!("{namespace}_{pod}_{container}.log"))
    }

    async fn run(self) {
        let pods: Api<Pod> = Api::all(self.inner.client.clone());
        let mut stream = watcher::watcher(pods, watcher::Config::default()).boxed();
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        // Pods that could not start yet (missing Secret, unknown image), retried on each tick.
        let mut pending: BTreeMap<String, Pod> = BTreeMap::new();
        loop {
            tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => {
                        self.on_pod(pod, &mut pending).await;
                    }
                    Some(Ok(Event::Delete(pod))) => {
                        let key = key_of(&pod);
                        pending.remove(&key);
                        self.forget(&key).await;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::debug!("pod runner watch error: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    None => return,
                },
                _ = tick.tick() => {
                    let retry: Vec<Pod> = std::mem::take(&mut pending).into_values().collect();
                    for pod in retry {
                        self.on_pod(pod, &mut pending).await;
                    }
                    self.check_processes().await;
                }
            }
        }
    }

    async fn on_pod(&self, pod: Pod, pending: &mut BTreeMap<String, Pod>) {
        let key = key_of(&pod);
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let node = spec.node_name.clone().unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            pending.remove(&key);
            if node == self.inner.node {
                let grace = spec.termination_grace_period_seconds.unwrap_or(30);
                self.stop_and_delete(&pod, grace).await;
            }
            return;
        }
        if node.is_empty() {
            if let Err(e) = self.bind(&pod).await {
                tracing::debug!("binding {key}: {e}");
                pending.insert(key, pod);
            }
            return;
        }
        if node != self.inner.node {
            return;
        }
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            return;
        }
        let uid = pod.uid().unwrap_or_default();
        let known_uid = self
            .inner
            .pods
            .lock()
            .ok()
            .and_then(|p| p.get(&key).map(|r| r.uid.clone()));
        match known_uid {
            Some(u) if u == uid => return,
            Some(_) => self.forget(&key).await, // same name, new pod
            None => {}
        }
        match self.start_pod(&pod).await {
            Ok(()) => {
                self.write_status(&key).await;
            }
            Err(waiting) => {
                self.report_waiting(&pod, &waiting).await;
                pending.insert(key, pod);
            }
        }
    }

    async fn bind(&self, pod: &Pod) -> Result<(), Error> {
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let binding = Binding {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(self.inner.node.clone()),
                ..Default::default()
            },
        };
        let pods: Api<Pod> = Api::namespaced(self.inner.client.clone(), &ns);
        match pods
            .create_subresource::<Binding, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => Ok(()),
            // Already bound (a stale event) or already gone: nothing to do.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Stops the pod's processes (SIGTERM, SIGKILL after the grace period) and removes the pod
    /// from the API, as the kubelet does once containers are gone.
    async fn stop_and_delete(&self, pod: &Pod, grace_seconds: i64) {
        let key = key_of(pod);
        let grace = Duration::from_secs(grace_seconds.clamp(0, 10) as u64);
        let running = self.inner.pods.lock().ok().and_then(|mut p| p.remove(&key));
        let client = self.inner.client.clone();
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let uid = pod.uid();
        tokio::spawn(async move {
            if let Some(mut running) = running {
                let _ = tokio::task::spawn_blocking(move || {
                    for c in running.containers.iter_mut() {
                        if let Some(p) = c.process.as_mut() {
                            p.stop(grace);
                        }
                    }
                })
                .await;
            }
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: uid.map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let _ = Api::<Pod>::namespaced(client, &ns).delete(&name, &dp).await;
        });
    }

    async fn forget(&self, key: &str) {
        let running = self.inner.pods.lock().ok().and_then(|mut p| p.remove(key));
        if let Some(mut running) = running {
            let _ = tokio::task::spawn_blocking(move || {
                for c in running.containers.iter_mut() {
                    if let Some(p) = c.process.as_mut() {
                        p.kill();
                    }
                }
            })
            .await;
        }
    }
}

async fn register_node(client: &Client, node: &str) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let obj: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux"}},
    }))
    .map_err(|e| Error::Other(e.to_string()))?;
    match nodes.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "twc-testenv pod runner", "lastHeartbeatTime": now(),
                        "lastTransitionTime": now()}],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                      {"type": "Hostname", "address": node}],
        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
        "nodeInfo": {"kubeletVersion": "twc-testenv", "kubeProxyVersion": "", "machineID": "",
                     "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                     "containerRuntimeVersion": "local://", "operatingSystem": "linux",
                     "architecture": "amd64"},
    }});
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

fn key_of(pod: &Pod) -> String {
    format!("{}_{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

fn now() -> Time {
    Time(Timestamp::now())
}
