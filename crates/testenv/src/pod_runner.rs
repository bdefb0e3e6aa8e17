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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Binding, ConfigMap, Container, Node, ObjectReference, Pod, Secret, Volume,
};
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

    async fn start_pod(&self, pod: &Pod) -> Result<(), Waiting> {
        let key = key_of(pod);
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let spec = pod.spec.clone().unwrap_or_default();
        let pod_dir = self.inner.dir.join("pods").join(&key);
        let mounts_dir = pod_dir.join("volumes");
        let volumes = self
            .materialise_volumes(&ns, &spec.volumes.clone().unwrap_or_default(), &mounts_dir)
            .await?;
        let mut containers = Vec::new();
        for c in &spec.containers {
            let image = c.image.clone().unwrap_or_default();
            let local = self.lookup_image(&image).ok_or_else(|| Waiting {
                reason: "ErrImagePull",
                message: format!(
                    "no local program is registered for image {image:?} (PodRunner::register_image)"
                ),
            })?;
            let env = self.resolve_env(pod, c, &local, &volumes).await?;
            let args = container_args(c, &local);
            let cwd = pod_dir.join("containers").join(&c.name);
            std::fs::create_dir_all(&cwd).map_err(|e| Waiting {
                reason: "CreateContainerError",
                message: e.to_string(),
            })?;
            let mut proc_spec = Spec::new(
                format!("{key}/{}", c.name),
                local.program.clone(),
                self.container_log(&ns, &name, &c.name),
            )
            .args(args);
            proc_spec.env = env;
            proc_spec.inherit_env = false;
            proc_spec.cwd = Some(cwd);
            containers.push(RunningContainer {
                name: c.name.clone(),
                image,
                spec: proc_spec,
                process: None,
                restart_count: 0,
                started_at: now(),
                exited: None,
                restart_after: None,
            });
        }
        for c in containers.iter_mut() {
            match ChildProcess::start(&c.spec) {
                Ok(p) => c.process = Some(p),
                Err(e) => {
                    return Err(Waiting {
                        reason: "CreateContainerError",
                        message: e.to_string(),
                    });
                }
            }
        }
        let running = RunningPod {
            uid: pod.uid().unwrap_or_default(),
            namespace: ns,
            name,
            restart_policy: spec.restart_policy.unwrap_or_else(|| "Always".into()),
            started_at: now(),
            containers,
            last_status: None,
            ready_since: None,
        };
        if let Ok(mut pods) = self.inner.pods.lock() {
            pods.insert(key, running);
        }
        Ok(())
    }

    fn lookup_image(&self, image: &str) -> Option<LocalImage> {
        let images = self.inner.images.lock().ok()?;
        images
            .get(image)
            .or_else(|| images.get(strip_tag(image)))
            .cloned()
    }

    /// Writes Secret, ConfigMap and emptyDir volumes; returns volume name -> directory.
    async fn materialise_volumes(
        &self,
        ns: &str,
        volumes: &[Volume],
        dir: &Path,
    ) -> Result<HashMap<String, PathBuf>, Waiting> {
        let mut out = HashMap::new();
        for v in volumes {
            let vdir = dir.join(&v.name);
            std::fs::create_dir_all(&vdir).map_err(|e| Waiting {
                reason: "CreateContainerConfigError",
                message: e.to_string(),
            })?;
            let mut files: Vec<(String, Vec<u8>)> = Vec::new();
            if let Some(s) = &v.secret {
                let name = s.secret_name.clone().unwrap_or_default();
                let optional = s.optional.unwrap_or(false);
                match self.secret(ns, &name).await {
                    Some(secret) => {
                        let data = secret.data.unwrap_or_default();
                        files.extend(select_items(&data, s.items.as_deref(), |b| b.0.clone()));
                    }
                    None if optional => {}
                    None => {
                        return Err(Waiting {
                            reason: "CreateContainerConfigError",
                            message: format!("secret \"{name}\" not found"),
                        });
                    }
                }
            } else if let Some(c) = &v.config_map {
                let name = c.name.clone();
                let optional = c.optional.unwrap_or(false);
                match self.config_map(ns, &name).await {
                    Some(cm) => {
                        let data = cm.data.unwrap_or_default();
                        files.extend(select_items(&data, c.items.as_deref(), |s| {
                            s.clone().into_bytes()
                        }));
                    }
                    None if optional => {}
                    None => {
                        return Err(Waiting {
                            reason: "CreateContainerConfigError",
                            message: format!("configmap \"{name}\" not found"),
                        });
                    }
                }
            } else if let Some(h) = &v.host_path {
                out.insert(v.name.clone(), PathBuf::from(&h.path));
                continue;
            }
            for (path, bytes) in files {
                let p = vdir.join(path);
                if let Some(parent) = p.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                std::fs::write(&p, bytes).map_err(|e| Waiting {
                    reason: "CreateContainerConfigError",
                    message: format!("{}: {e}", p.display()),
                })?;
            }
            out.insert(v.name.clone(), vdir);
        }
        Ok(out)
    }

    async fn resolve_env(
        &self,
        pod: &Pod,
        c: &Container,
        local: &LocalImage,
        volumes: &HashMap<String, PathBuf>,
    ) -> Result<Vec<(String, String)>, Waiting> {
        let ns = pod.namespace().unwrap_or_default();
        let mut env: Vec<(String, String)> = local.env.clone();
        let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
            env.retain(|(ek, _)| *ek != k);
            env.push((k, v));
        };
        let missing = |what: String| Waiting {
            reason: "CreateContainerConfigError",
            message: what,
        };
        for from in c.env_from.clone().unwrap_or_default() {
            let prefix = from.prefix.clone().unwrap_or_default();
            if let Some(r) = &from.secret_ref {
                match self.secret(&ns, &r.name).await {
                    Some(s) => {
                        for (k, v) in s.data.unwrap_or_default() {
                            set(&mut env, format!("{prefix}{k}"), bytes_to_string(&v));
                        }
                    }
                    None if r.optional.unwrap_or(false) => {}
                    None => return Err(missing(format!("secret \"{}\" not found", r.name))),
                }
            }
            if let Some(r) = &from.config_map_ref {
                match self.config_map(&ns, &r.name).await {
                    Some(cm) => {
                        for (k, v) in cm.data.unwrap_or_default() {
                            set(&mut env, format!("{prefix}{k}"), v);
                        }
                    }
                    None if r.optional.unwrap_or(false) => {}
                    None => return Err(missing(format!("configmap \"{}\" not found", r.name))),
                }
            }
        }
        for e in c.env.clone().unwrap_or_default() {
            let value = if let Some(v) = &e.value {
                expand(v, &env)
            } else if let Some(from) = &e.value_from {
                if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    let value = self
                        .secret(&ns, &r.name)
                        .await
                        .and_then(|s| s.data.unwrap_or_default().get(&r.key).cloned());
                    match value {
                        Some(v) => bytes_to_string(&v),
                        None if optional => continue,
                        None => {
                            return Err(missing(format!(
                                "couldn't find key {} in Secret {ns}/{}",
                                r.key, r.name
                            )));
                        }
                    }
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    let value = self
                        .config_map(&ns, &r.name)
                        .await
                        .and_then(|cm| cm.data.unwrap_or_default().get(&r.key).cloned());
                    match value {
                        Some(v) => v,
                        None if optional => continue,
                        None => {
                            return Err(missing(format!(
                                "couldn't find key {} in ConfigMap {ns}/{}",
                                r.key, r.name
                            )));
                        }
                    }
                } else if let Some(f) = &from.field_ref {
                    field_value(pod, &f.field_path)
                } else {
                    continue;
                }
            } else {
                String::new()
            };
            set(&mut env, e.name.clone(), value);
        }
        // Paths inside mounted volumes point into the pod directory instead.
        let mut mounts: Vec<(String, PathBuf)> = c
            .volume_mounts
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                let base = volumes.get(&m.name)?.clone();
                let dir = match m.sub_path.as_deref() {
                    Some(sub) if !sub.is_empty() => base.join(sub),
                    _ => base,
                };
                Some((m.mount_path.trim_end_matches('/').to_string(), dir))
            })
            .collect();
        mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        for (_, value) in env.iter_mut() {
            for (mount, dir) in &mounts {
                if let Some(rest) = value.strip_prefix(mount.as_str())
                    && (rest.is_empty() || rest.starts_with('/'))
                {
                    *value = format!("{}{rest}", dir.display());
                    break;
                }
            }
        }
        set(&mut env, "HOSTNAME".into(), pod.name_any());
        Ok(env)
    }

    async fn secret(&self, ns: &str, name: &str) -> Option<Secret> {
        Api::<Secret>::namespaced(self.inner.client.clone(), ns)
            .get_opt(name)
            .await
            .ok()
            .flatten()
    }

    async fn config_map(&self, ns: &str, name: &str) -> Option<ConfigMap> {
        Api::<ConfigMap>::namespaced(self.inner.client.clone(), ns)
            .get_opt(name)
            .await
            .ok()
            .flatten()
    }

    /// Looks at every running container: reports exits and restarts per `restartPolicy`.
    async fn check_processes(&self) {
        let keys: Vec<String> = match self.inner.pods.lock() {
            Ok(mut pods) => {
                let mut changed = Vec::new();
                for (key, pod) in pods.iter_mut() {
                    let policy = pod.restart_policy.clone();
                    for c in pod.containers.iter_mut() {
                        if c.exited.is_none() {
                            if let Some(status) = c.process.as_mut().and_then(|p| p.try_wait()) {
                                let code = status.code().unwrap_or(137);
                                c.exited = Some((code, now()));
                                let restart =
                                    policy == "Always" || (policy == "OnFailure" && code != 0);
                                if restart {
                                    c.restart_after = Some(std::time::Instant::now() + c.backoff());
                                }
                                changed.push(key.clone());
                            }
                        } else if c
                            .restart_after
                            .is_some_and(|t| std::time::Instant::now() >= t)
                        {
                            c.restart_after = None;
                            if let Ok(p) = ChildProcess::start(&c.spec) {
                                c.process = Some(p);
                                c.exited = None;
                                c.restart_count += 1;
                                c.started_at = now();
                            }
                            changed.push(key.clone());
                        }
                    }
                }
                changed
            }
            Err(_) => return,
        };
        for key in keys {
            self.write_status(&key).await;
        }
    }

    /// Computes the pod's status from its processes and writes it if it changed.
    async fn write_status(&self, key: &str) {
        let (ns, name, uid, status) = {
            let Ok(mut pods) = self.inner.pods.lock() else {
                return;
            };
            let Some(pod) = pods.get_mut(key) else {
                return;
            };
            let all_ready = pod.containers.iter().all(|c| c.exited.is_none());
            if all_ready && pod.ready_since.is_none() {
                pod.ready_since = Some(now());
            } else if !all_ready {
                pod.ready_since = None;
            }
            let ready_time = pod.ready_since.clone().unwrap_or_else(now);
            let done = pod
                .containers
                .iter()
                .all(|c| c.exited.is_some() && c.restart_after.is_none());
            let phase = if !done {
                "Running"
            } else if pod
                .containers
                .iter()
                .all(|c| c.exited.as_ref().is_some_and(|(code, _)| *code == 0))
            {
                "Succeeded"
            } else {
                "Failed"
            };
            let ready = if all_ready { "True" } else { "False" };
            let container_statuses: Vec<serde_json::Value> = pod
                .containers
                .iter()
                .map(|c| {
                    let terminated = |code: &i32, finished: &Time| {
                        json!({"terminated": {
                            "exitCode": code,
                            "reason": if *code == 0 { "Completed" } else { "Error" },
                            "startedAt": c.started_at,
                            "finishedAt": finished,
                        }})
                    };
                    let (state, last) = match &c.exited {
                        None => (json!({"running": {"startedAt": c.started_at}}), None),
                        // Waiting to be restarted: the kubelet's CrashLoopBackOff.
                        Some((code, finished)) if c.restart_after.is_some() => (
                            json!({"waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": format!(
                                    "back-off restarting failed container {} in pod {}",
                                    c.name, pod.name
                                ),
                            }}),
                            Some(terminated(code, finished)),
                        ),
                        Some((code, finished)) => (terminated(code, finished), None),
                    };
                    json!({
                        "name": c.name,
                        "image": c.image,
                        "imageID": format!("local://{}", c.spec.program.display()),
                        "containerID": format!("local://{}", c.process.as_ref().map(|p| p.pid()).unwrap_or_default()),
                        "ready": c.exited.is_none(),
                        "started": c.exited.is_none(),
                        "restartCount": c.restart_count,
                        "state": state,
                        "lastState": last.unwrap_or_else(|| json!({})),
                    })
                })
                .collect();
            let status = json!({
                "phase": phase,
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": pod.started_at,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": pod.started_at},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": pod.started_at},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": ready_time},
                    {"type": "Ready", "status": ready, "lastTransitionTime": ready_time},
                ],
                "containerStatuses": container_statuses,
            });
            if pod.last_status.as_ref() == Some(&status) {
                return;
            }
            pod.last_status = Some(status.clone());
            (
                pod.namespace.clone(),
                pod.name.clone(),
                pod.uid.clone(),
                status,
            )
        };
        let pods: Api<Pod> = Api::namespaced(self.inner.client.clone(), &ns);
        let patch = json!({"metadata": {"uid": uid}, "status": status});
        if let Err(e) = pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!("pod status {ns}/{name}: {e}");
        }
    }

    async fn report_waiting(&self, pod: &Pod, waiting: &Waiting) {
        let ns = pod.namespace().unwrap_or_default();
        let statuses: Vec<serde_json::Value> = pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "image": c.image.clone().unwrap_or_default(),
                    "imageID": "",
                    "ready": false,
                    "started": false,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": waiting.reason, "message": waiting.message}},
                })
            })
            .collect();
        let unchanged = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .is_some_and(|w| w.message.as_deref() == Some(waiting.message.as_str()));
        if unchanged {
            return;
        }
        let patch = json!({"status": {
            "phase": "Pending",
            "hostIP": "127.0.0.1",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            ],
            "containerStatuses": statuses,
        }});
        let pods: Api<Pod> = Api::namespaced(self.inner.client.clone(), &ns);
        let _ = pods
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
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

/// `registry/repo:tag` -> `registry/repo`; `repo@sha256:..` -> `repo`.
fn strip_tag(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    }
}

fn container_args(c: &Container, local: &LocalImage) -> Vec<String> {
    let command = c.command.clone().unwrap_or_default();
    let args = c.args.clone();
    if command.is_empty() && args.is_none() {
        return local.args.clone();
    }
    let mut out: Vec<String> = command.into_iter().skip(1).collect();
    out.extend(args.unwrap_or_default());
    out
}

fn select_items<V>(
    data: &BTreeMap<String, V>,
    items: Option<&[k8s_openapi::api::core::v1::KeyToPath]>,
    bytes: impl Fn(&V) -> Vec<u8>,
) -> Vec<(String, Vec<u8>)> {
    match items {
        Some(items) if !items.is_empty() => items
            .iter()
            .filter_map(|i| data.get(&i.key).map(|v| (i.path.clone(), bytes(v))))
            .collect(),
        _ => data.iter().map(|(k, v)| (k.clone(), bytes(v))).collect(),
    }
}

fn bytes_to_string(b: &ByteString) -> String {
    String::from_utf8_lossy(&b.0).into_owned()
}

/// Kubernetes `$(VAR)` expansion against the variables defined so far; `$$` escapes.
fn expand(value: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let var = &inner[..end];
            match env.iter().rev().find(|(k, _)| k == var) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(var);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn field_value(pod: &Pod, path: &str) -> String {
    let meta = &pod.metadata;
    match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.hostIP" => "127.0.0.1".into(),
        _ => {
            let label = |p: &str, map: &Option<BTreeMap<String, String>>| {
                p.strip_suffix("']")
                    .and_then(|k| map.as_ref()?.get(k).cloned())
                    .unwrap_or_default()
            };
            if let Some(k) = path.strip_prefix("metadata.labels['") {
                label(k, &meta.labels)
            } else if let Some(k) = path.strip_prefix("metadata.annotations['") {
                label(k, &meta.annotations)
            } else {
                String::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_tags_and_digests_but_not_registry_ports() {
        assert_eq!(strip_tag("worker:v1"), "worker");
        assert_eq!(strip_tag("my.reg:5000/worker:v1"), "my.reg:5000/worker");
        assert_eq!(strip_tag("my.reg:5000/worker"), "my.reg:5000/worker");
        assert_eq!(strip_tag("worker@sha256:abc"), "worker");
    }

    #[test]
    fn expands_like_kubernetes() {
        let env = vec![("A".to_string(), "x".to_string())];
        assert_eq!(expand("$(A)-$(B)-$$(A)", &env), "x-$(B)-$(A)");
        assert_eq!(expand("cost $5", &env), "cost $5");
    }
}
