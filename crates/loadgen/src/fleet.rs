//! The fleet: what kube-controller-manager, the kubelet and the workers would do for every
//! versioned Deployment, done cheaply in this process.
//!
//! One watch on the controller's Deployments. For each one with `spec.replicas > 0` the fleet
//! writes the `/status` a Deployment gets once its pods are ready, and long-polls Temporal's
//! `PollWorkflowTaskQueue` for its version as a worker would (a poll is what registers the
//! version). Scaled to 0 or deleted: the status goes back to 0 and the poller stops. Without
//! pods (`enabled == false`) it only records when each Deployment was first seen.
//!
//! A new spec of a Deployment that is up (a restart onto renewed credentials, any template
//! change) takes `pod_ready` when that is not zero: the status shows a rolling update under way
//! at once (the new pod surged, not ready; the old one still available), and the up-to-date
//! status only after `pod_ready`, as new pods that take that long to start. A Deployment seen
//! for the first time (or scaled up from 0) is up at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::EnvVar;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::json;
use temporalio_client::{Connection, tonic};
use temporalio_common::protos::temporal::api::deployment::v1::{
    WorkerDeploymentOptions, WorkerDeploymentVersion,
};
use temporalio_common::protos::temporal::api::enums::v1::{
    TaskQueueKind, WorkerStatus, WorkerVersioningMode,
};
use temporalio_common::protos::temporal::api::taskqueue::v1::TaskQueue;
use temporalio_common::protos::temporal::api::worker::v1::WorkerHeartbeat;
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    PollWorkflowTaskQueueRequest, RecordWorkerHeartbeatRequest,
};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinHandle;

/// Long polls share a gRPC connection this many at a time.
const POLLS_PER_CONNECTION: usize = 500;
/// Longer than the server's long poll (about a minute).
const POLL_TIMEOUT: Duration = Duration::from_secs(75);
/// How often each poller heartbeats (the SDKs' default).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(60);
/// Status writes in flight at once.
const STATUS_WRITES: usize = 32;

/// When the watch first saw each versioned Deployment.
#[derive(Default)]
pub struct FirstSeen {
    /// `namespace/deployment` of every Deployment seen.
    pub deployments: std::collections::HashSet<String>,
    /// `namespace/workerdeployment` -> (`namespace/deployment`, first seen), in order.
    pub by_wd: HashMap<String, Vec<(String, Instant)>>,
}

/// Counters of what the fleet did.
#[derive(Default)]
pub struct Counts {
    pub status_writes: AtomicU64,
    pub status_errors: AtomicU64,
    pub polls: AtomicU64,
    pub poll_errors: AtomicU64,
    pub pollers_started: AtomicU64,
}

/// What the fleet knows; shared with the scenarios.
pub struct Fleet {
    client: Client,
    temporal_address: String,
    enabled: bool,
    /// When the watch first saw each Deployment, by WorkerDeployment.
    pub first_seen: std::sync::Mutex<FirstSeen>,
    pub counts: Counts,
    pollers: Mutex<HashMap<String, JoinHandle<()>>>,
    /// The status last written, `namespace/deployment` -> (generation, replicas).
    written: Mutex<HashMap<String, (i64, i32)>>,
    connections: Mutex<Vec<Connection>>,
    writes: Semaphore,
    /// How long the new pods of a Deployment that was up take to be ready.
    pod_ready: Duration,
}

impl Fleet {
    pub fn new(
        client: Client,
        temporal_address: String,
        enabled: bool,
        pod_ready: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            temporal_address,
            enabled,
            first_seen: Default::default(),
            counts: Default::default(),
            pollers: Default::default(),
            written: Default::default(),
            connections: Default::default(),
            writes: Semaphore::new(STATUS_WRITES),
            pod_ready,
        })
    }

    /// Pollers running now.
    pub async fn pollers(&self) -> usize {
        self.pollers.lock().await.len()
    }

    /// Stops every poller.
    pub async fn stop(&self) {
        for (_, p) in self.pollers.lock().await.drain() {
            p.abort();
        }
    }

    /// Watches the controller's Deployments until the process ends; restarts the watch on
    /// errors.
    pub async fn run(self: Arc<Self>) {
        let api: Api<Deployment> = Api::all(self.client.clone());
        let config = watcher::Config::default().labels(twc_api::labels::BUILD_ID);
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(d) | Event::InitApply(d)) => self.clone().seen(d).await,
                Ok(Event::Delete(d)) => {
                    let key = key(&d);
                    if let Some(p) = self.pollers.lock().await.remove(&key) {
                        p.abort();
                    }
                    self.written.lock().await.remove(&key);
                }
                Ok(Event::Init | Event::InitDone) => {}
                Err(e) => {
                    eprintln!("fleet: Deployment watch: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn seen(self: Arc<Self>, d: Deployment) {
        let key = key(&d);
        let wd = d
            .labels()
            .get(twc_api::labels::DEPLOYMENT_NAME)
            .cloned()
            .unwrap_or_default();
        if let Ok(mut seen) = self.first_seen.lock()
            && seen.deployments.insert(key.clone())
        {
            let ns = d.namespace().unwrap_or_default();
            seen.by_wd
                .entry(format!("{ns}/{wd}"))
                .or_default()
                .push((key.clone(), Instant::now()));
        }
        if !self.enabled {
            return;
        }
        let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let generation = d.metadata.generation.unwrap_or(0);
        // The status, as the Deployment controller writes it once pods are ready.
        let status = d.status.clone().unwrap_or_default();
        let up_to_date = status.observed_generation == Some(generation)
            && status.replicas.unwrap_or(0) == replicas
            && status.ready_replicas.unwrap_or(0) == replicas
            && status.available_replicas.unwrap_or(0) == replicas;
        // Pods running: a new spec restarts them (a rolling update), unless nothing is to run.
        let was_up = status.available_replicas.unwrap_or(0) > 0 && replicas > 0;
        let mut written = self.written.lock().await;
        if !up_to_date && written.get(&key) != Some(&(generation, replicas)) {
            written.insert(key.clone(), (generation, replicas));
            let this = self.clone();
            let (ns, name) = (d.namespace().unwrap_or_default(), d.name_any());
            tokio::spawn(async move {
                if was_up && !this.pod_ready.is_zero() {
                    this.write_status(&ns, &name, rolling_status(generation, replicas))
                        .await;
                    tokio::time::sleep(this.pod_ready).await;
                    // A newer spec (or a deletion) came meanwhile: its own write follows.
                    let key = format!("{ns}/{name}");
                    if this.written.lock().await.get(&key) != Some(&(generation, replicas)) {
                        return;
                    }
                }
                this.write_status(&ns, &name, ready_status(generation, replicas))
                    .await
            });
        }
        drop(written);
        let mut pollers = self.pollers.lock().await;
        if replicas == 0 {
            if let Some(p) = pollers.remove(&key) {
                p.abort();
            }
        } else if let std::collections::hash_map::Entry::Vacant(slot) = pollers.entry(key) {
            if let Some(request) = poll_request(&d) {
                let n = self.counts.pollers_started.fetch_add(1, Ordering::Relaxed) as usize;
                let this = self.clone();
                slot.insert(tokio::spawn(async move { this.poll(n, request).await }));
            } else {
                eprintln!(
                    "fleet: Deployment {} has no TASK_QUEUE or Temporal env; not polled",
                    slot.key()
                );
            }
        }
    }

    /// Writes `status` (a merge patch of `/status`), retrying a few times.
    async fn write_status(&self, ns: &str, name: &str, patch: serde_json::Value) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
        for attempt in 0..5 {
            match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.counts.status_writes.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return,
                Err(e) => {
                    self.counts.status_errors.fetch_add(1, Ordering::Relaxed);
                    if attempt == 4 {
                        eprintln!("fleet: status of {ns}/{name}: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// The `n`th poller's connection: one per [`POLLS_PER_CONNECTION`] pollers.
    async fn connection(&self, n: usize) -> Option<Connection> {
        let mut conns = self.connections.lock().await;
        let i = n / POLLS_PER_CONNECTION;
        while conns.len() <= i {
            match twc_testenv::temporal::connect(&self.temporal_address).await {
                Ok(c) => conns.push(c),
                Err(e) => {
                    eprintln!("fleet: connect to Temporal: {e}");
                    return None;
                }
            }
        }
        conns.get(i).cloned()
    }

    /// Long-polls for one version until aborted, heartbeating as an SDK worker does.
    async fn poll(&self, n: usize, request: PollWorkflowTaskQueueRequest) {
        tokio::join!(self.long_polls(n, &request), self.heartbeats(n, &request));
    }

    /// `RecordWorkerHeartbeat` every [`HEARTBEAT_EVERY`], as the SDKs' workers do (what the
    /// controller's poller-presence check reads with `ListWorkers`).
    async fn heartbeats(&self, n: usize, request: &PollWorkflowTaskQueueRequest) {
        let instance = format!("twc-loadgen-{n}");
        let started = std::time::SystemTime::now();
        loop {
            if let Some(conn) = self.connection(n).await {
                let heartbeat = WorkerHeartbeat {
                    worker_instance_key: instance.clone(),
                    worker_identity: request.identity.clone(),
                    task_queue: request
                        .task_queue
                        .as_ref()
                        .map(|q| q.name.clone())
                        .unwrap_or_default(),
                    deployment_version: request.deployment_options.as_ref().map(|o| {
                        WorkerDeploymentVersion {
                            deployment_name: o.deployment_name.clone(),
                            build_id: o.build_id.clone(),
                        }
                    }),
                    sdk_name: "twc-loadgen".into(),
                    status: WorkerStatus::Running as i32,
                    start_time: Some(started.into()),
                    heartbeat_time: Some(std::time::SystemTime::now().into()),
                    ..Default::default()
                };
                let req = RecordWorkerHeartbeatRequest {
                    namespace: request.namespace.clone(),
                    identity: request.identity.clone(),
                    worker_heartbeat: vec![heartbeat],
                    ..Default::default()
                };
                if let Err(s) = conn
                    .workflow_service()
                    .record_worker_heartbeat(tonic::Request::new(req))
                    .await
                {
                    self.counts.poll_errors.fetch_add(1, Ordering::Relaxed);
                    if self.counts.poll_errors.load(Ordering::Relaxed) <= 5 {
                        eprintln!("fleet: heartbeat: {}", s.message());
                    }
                }
            }
            tokio::time::sleep(HEARTBEAT_EVERY).await;
        }
    }

    async fn long_polls(&self, n: usize, request: &PollWorkflowTaskQueueRequest) {
        loop {
            let Some(conn) = self.connection(n).await else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            let mut svc = conn.workflow_service();
            let mut req = tonic::Request::new(request.clone());
            req.set_timeout(POLL_TIMEOUT);
            let result = tokio::time::timeout(
                POLL_TIMEOUT + Duration::from_secs(5),
                svc.poll_workflow_task_queue(req),
            )
            .await;
            self.counts.polls.fetch_add(1, Ordering::Relaxed);
            match result {
                Ok(Ok(_)) => {}
                Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => {}
                Ok(Err(status)) => {
                    self.counts.poll_errors.fetch_add(1, Ordering::Relaxed);
                    if self.counts.poll_errors.load(Ordering::Relaxed) <= 5 {
                        eprintln!("fleet: poll: {}", status.message());
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(_) => {}
            }
        }
    }
}

/// `/status` as the Deployment controller writes it once `replicas` pods of `generation` are
/// ready.
fn ready_status(generation: i64, replicas: i32) -> serde_json::Value {
    let now = now();
    let conditions = if replicas > 0 {
        json!([
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "twc-loadgen", "lastTransitionTime": now, "lastUpdateTime": now},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
             "message": "twc-loadgen", "lastTransitionTime": now, "lastUpdateTime": now},
        ])
    } else {
        json!([
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "twc-loadgen", "lastTransitionTime": now, "lastUpdateTime": now},
        ])
    };
    json!({"status": {
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "unavailableReplicas": null,
        "conditions": conditions,
    }})
}

/// `/status` while a rolling update of `replicas` pods to `generation` is under way (the
/// default strategy: 25 % surge, rounded up): the new pods created, not ready yet; the old
/// ones still ready and available.
fn rolling_status(generation: i64, replicas: i32) -> serde_json::Value {
    let now = now();
    let surge = ((replicas + 3) / 4).clamp(1, replicas.max(1));
    json!({"status": {
        "observedGeneration": generation,
        "replicas": replicas + surge,
        "updatedReplicas": surge,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "unavailableReplicas": surge,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "twc-loadgen", "lastTransitionTime": now, "lastUpdateTime": now},
            {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
             "message": "twc-loadgen", "lastTransitionTime": now, "lastUpdateTime": now},
        ],
    }})
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn key(d: &Deployment) -> String {
    format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any())
}

/// The poll a worker of `d` makes, from the env its pod template carries.
fn poll_request(d: &Deployment) -> Option<PollWorkflowTaskQueueRequest> {
    let containers = &d.spec.as_ref()?.template.spec.as_ref()?.containers;
    let env: Vec<&EnvVar> = containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .collect();
    let var = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    Some(PollWorkflowTaskQueueRequest {
        namespace: var("TEMPORAL_NAMESPACE")?,
        task_queue: Some(TaskQueue {
            name: var("TASK_QUEUE")?,
            kind: TaskQueueKind::Normal as i32,
            ..Default::default()
        }),
        identity: format!("twc-loadgen@{}", key(d)),
        deployment_options: Some(WorkerDeploymentOptions {
            deployment_name: var("TEMPORAL_DEPLOYMENT_NAME")?,
            build_id: var("TEMPORAL_WORKER_BUILD_ID")?,
            worker_versioning_mode: WorkerVersioningMode::Versioned as i32,
        }),
        ..Default::default()
    })
}
