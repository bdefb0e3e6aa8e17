//! One TWC integration scenario against the real environment: a Kubernetes namespace and a
//! Temporal namespace of its own, a WorkerDeployment, its "preliminary status" (older versions'
//! Deployments running real workers, and the Temporal routing driven into Current / Ramping /
//! Drained through the gRPC API), then the controller let loose on it by creating the
//! Connection, and the status it reaches, checked against Temporal.
//!
//! The WorkerDeployment exists before its preliminary Deployments (they carry its UID as their
//! controller owner, and the real garbage collector deletes Deployments with a dangling owner),
//! but its Connection does not: until [`Scenario::connect`], the controller only reports
//! `ConnectionNotFound` and touches nothing, as TWC's controller had not started on the
//! WorkerDeployment yet while its tests built the preliminary state.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use temporalio_client::tonic;
use temporalio_common::protos::temporal::api::common::v1::{WorkflowExecution, WorkflowType};
use temporalio_common::protos::temporal::api::enums::v1::WorkflowExecutionStatus;
use temporalio_common::protos::temporal::api::taskqueue::v1::TaskQueue;
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    DescribeWorkflowExecutionRequest, SetWorkerDeploymentManagerRequest,
    StartWorkflowExecutionRequest, set_worker_deployment_manager_request::NewManagerIdentity,
};
use twc_api::conditions::PROGRESSING;
use twc_api::{Connection, ConnectionSpec, VersionStatus, WorkerDeployment};
use twc_controller::plan::{build_id, deployment};
use twc_controller::temporal::{self, DeploymentState, WorkerDeploymentRef};
use twc_controller::writes::MANAGER;
use twc_testenv::{TemporalOptions, TemporalServer, wait_for};

use crate::common::{self, WORKER_IMAGE, World, from_json};

/// The Connection every scenario's WorkerDeployment names.
pub const CONNECTION: &str = "temporal";
/// The identity the tests use for their own Temporal writes (not the controller's).
pub const SETUP_IDENTITY: &str = "twc-scenario-setup";
/// How long a state may take to be reached.
pub const WAIT: Duration = Duration::from_secs(60);
/// How long "nothing changes" is watched, as TWC's `WithWaitTime(5 * time.Second)`.
pub const SETTLE: Duration = Duration::from_secs(5);
/// The pause before each read of Temporal in a waiting loop (which adds its own 100 ms).
const TEMPORAL_POLL: Duration = Duration::from_millis(400);
/// The controller of this binary refuses a new version while this many cannot be deleted
/// (TWC's tests: `CONTROLLER_MAX_DEPLOYMENT_VERSIONS_INELIGIBLE_FOR_DELETION=5`).
pub const MAX_UNDELETABLE: usize = 5;

/// The image of the example worker at `tag`.
pub fn image(tag: &str) -> String {
    format!("{WORKER_IMAGE}:{tag}")
}

pub fn manual() -> Value {
    json!({"strategy": "Manual"})
}

pub fn all_at_once() -> Value {
    json!({"strategy": "AllAtOnce"})
}

/// Progressive with one step (TWC's `ProgressiveStep(ramp, pause)`).
pub fn progressive(ramp: i32, pause: &str) -> Value {
    json!({"strategy": "Progressive", "steps": [{"rampPercentage": ramp, "pauseDuration": pause}]})
}

pub struct Scenario {
    pub client: Client,
    /// The Kubernetes namespace.
    pub ns: String,
    /// The WorkerDeployment (and task queue) name.
    pub name: String,
    pub temporal_ns: String,
    /// A client of the Temporal dev server, for the preliminary state and the checks.
    pub temporal: temporalio_client::Connection,
    /// `<namespace>/<name>`, the Temporal worker deployment.
    pub deployment_name: String,
    /// The dev server's frontend, `host:port`.
    pub address: String,
    /// The WorkerDeployment as created (with its UID).
    pub wd: Option<WorkerDeployment>,
}

impl Scenario {
    /// A fresh Kubernetes namespace (`prefix-<random>`) and Temporal namespace of the shared
    /// dev server.
    pub async fn new(w: &'static World, prefix: &str) -> Self {
        Self::on(w, &w.env.temporal, prefix).await
    }

    /// The same, on dev server `server`.
    pub async fn on(w: &'static World, server: &'static TemporalServer, prefix: &str) -> Self {
        let ns = w
            .env
            .namespace(&prefix[..prefix.len().min(40)])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // A dev server that died says how (exit status, log tail), not just "refused".
        let died = || {
            server
                .check_running()
                .err()
                .map(|e| format!("; {e}"))
                .unwrap_or_default()
        };
        let temporal_ns = server
            .namespace()
            .await
            .unwrap_or_else(|e| panic!("{e}{}", died()));
        let temporal = server
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{e}{}", died()));
        let name = "worker".to_string();
        Self {
            client: w.client().await,
            deployment_name: build_id::temporal_deployment_name(&ns, &name),
            address: server.address.clone(),
            ns,
            name,
            temporal_ns,
            temporal,
            wd: None,
        }
    }

    /// The spec of the Connection [`Scenario::connect`] creates: the dev server, plaintext.
    pub fn connection_spec(&self) -> Value {
        json!({"hostPort": self.address})
    }

    /// A WorkerDeployment spec: one replica of `image`, TWC's default sunset delays.
    pub fn spec(&self, rollout: Value, image: &str) -> Value {
        json!({
            "replicas": 1,
            "workerOptions": {
                "connectionRef": {"name": CONNECTION},
                "temporalNamespace": self.temporal_ns,
            },
            "rollout": rollout,
            "sunset": {"scaledownDelay": "1h", "deleteDelay": "24h"},
            "template": {"spec": {
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "worker", "image": image}]
            }}
        })
    }

    /// Creates the WorkerDeployment (its Connection does not exist yet).
    pub async fn create(&mut self, spec: Value) -> WorkerDeployment {
        let wd: WorkerDeployment = from_json(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": self.name, "namespace": self.ns},
            "spec": spec,
        }));
        let wd = self
            .wds()
            .create(&PostParams::default(), &wd)
            .await
            .unwrap_or_else(|e| panic!("create WorkerDeployment {}/{}: {e}", self.ns, self.name));
        self.wd = Some(wd.clone());
        wd
    }

    fn created(&self) -> &WorkerDeployment {
        self.wd
            .as_ref()
            .unwrap_or_else(|| panic!("create the WorkerDeployment first"))
    }

    pub fn wds(&self) -> Api<WorkerDeployment> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The target build ID of the spec as created.
    pub fn target_build_id(&self) -> String {
        let wd = self.created();
        build_id::build_id(
            &wd.spec.template,
            wd.spec.worker_options.unsafe_custom_build_id.as_deref(),
        )
    }

    /// The WorkerDeployment as created, with `image` and `replicas`.
    pub fn variant(&self, image: &str, replicas: i32) -> WorkerDeployment {
        let mut wd = self.created().clone();
        wd.spec.replicas = Some(replicas);
        if let Some(c) = wd
            .spec
            .template
            .spec
            .as_mut()
            .and_then(|s| s.containers.first_mut())
        {
            c.image = Some(image.to_string());
        }
        wd
    }

    /// An older version's Deployment, exactly as the controller would have made it for the
    /// template with `image` (TWC's `WithExistingDeployments`), running real workers. Returns
    /// its build ID.
    pub async fn existing_version(&self, image: &str, replicas: i32) -> String {
        let wd = self.variant(image, replicas);
        let build = build_id::build_id(
            &wd.spec.template,
            wd.spec.worker_options.unsafe_custom_build_id.as_deref(),
        );
        let conn: ConnectionSpec = from_json(self.connection_spec());
        let d = deployment::versioned_deployment(&wd, &build, &conn);
        let mut body = serde_json::to_value(&d).unwrap_or_else(|e| panic!("{e}"));
        body["apiVersion"] = json!("apps/v1");
        body["kind"] = json!("Deployment");
        self.deployments()
            .patch(
                &d.name_any(),
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap_or_else(|e| panic!("create Deployment for {build}: {e}"));
        build
    }

    /// The versioned Deployment's name of `build`.
    pub fn deployment_of(&self, build: &str) -> String {
        build_id::deployment_name(&self.name, build)
    }

    /// Scales a version's Deployment (TWC's existing Deployments with 0 replicas) and waits
    /// until its pods are gone or running.
    pub async fn scale(&self, build: &str, replicas: i32) {
        let name = self.deployment_of(build);
        self.deployments()
            .patch_scale(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap_or_else(|e| panic!("scale {name}: {e}"));
        self.wait_replicas(build, replicas).await;
    }

    /// Waits until `build`'s Deployment wants and has `replicas` replicas.
    pub async fn wait_replicas(&self, build: &str, replicas: i32) {
        let name = self.deployment_of(build);
        let api = self.deployments();
        wait_for(
            &format!("{}/{name}: {replicas} replicas", self.ns),
            WAIT,
            || {
                let api = api.clone();
                let name = name.clone();
                async move {
                    let d = api.get(&name).await.map_err(|e| e.to_string())?;
                    let spec = d.spec.as_ref().and_then(|s| s.replicas);
                    let status = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
                    let ready = d
                        .status
                        .as_ref()
                        .and_then(|s| s.ready_replicas)
                        .unwrap_or(0);
                    if spec == Some(replicas) && status == replicas && ready == replicas {
                        Ok(())
                    } else {
                        Err(format!(
                            "spec.replicas {spec:?}, status.replicas {status}, ready {ready}"
                        ))
                    }
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Waits until `build`'s Deployment is gone.
    pub async fn wait_gone(&self, build: &str) {
        let name = self.deployment_of(build);
        let api = self.deployments();
        wait_for(&format!("{}/{name} deleted", self.ns), WAIT, || {
            let api = api.clone();
            let name = name.clone();
            async move {
                match api.get_opt(&name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(d) => Err(format!("still there: {:?}", d.metadata.deletion_timestamp)),
                }
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Creates the Connection: from now on the controller acts.
    pub async fn connect(&self) {
        self.connect_to(self.connection_spec()).await
    }

    /// Creates the Connection with `spec`.
    pub async fn connect_to(&self, spec: Value) {
        let c: Connection = from_json(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "Connection",
            "metadata": {"name": CONNECTION, "namespace": self.ns},
            "spec": spec,
        }));
        Api::<Connection>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &c)
            .await
            .unwrap_or_else(|e| panic!("create Connection {}/{CONNECTION}: {e}", self.ns));
    }

    /// Creates the WorkerDeployment from `spec`, then its Connection: the controller starts
    /// on it with nothing else prepared. Returns the target build ID.
    pub async fn start(&mut self, spec: Value) -> String {
        self.create(spec).await;
        let target = self.target_build_id();
        self.connect().await;
        target
    }

    // ---- Temporal ----

    /// Writes to the worker deployment as the test (not the controller).
    pub fn writer<'a>(&'a self, identity: &'a str) -> WorkerDeploymentRef<'a> {
        WorkerDeploymentRef {
            conn: &self.temporal,
            namespace: &self.temporal_ns,
            name: &self.deployment_name,
            identity,
        }
    }

    pub async fn describe(&self) -> DeploymentState {
        self.wait_temporal("described", |_| true).await
    }

    /// `DescribeWorkerDeployment`, at most about twice a second per waiting loop: each read is
    /// a query to the worker deployment's workflow, which refuses queries while busy ("too
    /// many requests issued to Worker Deployment", `ResourceExhausted`), and the controller
    /// must not be crowded out (it waits such a refusal out for half a minute).
    async fn paced_describe(&self) -> Result<DeploymentState, String> {
        tokio::time::sleep(TEMPORAL_POLL).await;
        temporal::describe(&self.temporal, &self.temporal_ns, &self.deployment_name)
            .await
            .map_err(|e| e.to_string())
    }

    /// Waits until Temporal's state of the worker deployment satisfies `pred`.
    pub async fn wait_temporal(
        &self,
        what: &str,
        pred: impl Fn(&DeploymentState) -> bool,
    ) -> DeploymentState {
        let pred = &pred;
        wait_for(
            &format!("{}: {what}", self.deployment_name.clone()),
            WAIT,
            || async move {
                let s = self.paced_describe().await?;
                if pred(&s) {
                    Ok(s)
                } else {
                    Err(format!("{s:?}"))
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits until the worker deployment answers three reads in a row. Right after some
    /// writes (a new manager identity) its workflow is busy for a moment and reads fail with
    /// "too many requests issued to Worker Deployment" (`ResourceExhausted`), which the
    /// controller waits out for half a minute; letting it settle first keeps the test short.
    pub async fn wait_quiet(&self) {
        let streak = std::sync::atomic::AtomicUsize::new(0);
        let streak = &streak;
        wait_for(
            &format!("{}: quiet", self.deployment_name),
            WAIT,
            || async move {
                use std::sync::atomic::Ordering::SeqCst;
                match self.paced_describe().await {
                    Ok(_) if streak.fetch_add(1, SeqCst) + 1 >= 3 => Ok(()),
                    Ok(_) => Err("answering".to_string()),
                    Err(e) => {
                        streak.store(0, SeqCst);
                        Err(e)
                    }
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Waits until the workers of every build poll, so the versions exist in Temporal.
    pub async fn wait_registered(&self, builds: &[&str]) {
        self.wait_temporal(&format!("{builds:?} registered"), |s| {
            builds.iter().all(|b| s.versions.contains_key(*b))
        })
        .await;
    }

    /// Makes `build` current ("" = unversioned), as the test, retrying while the server is not
    /// ready for it yet (a version that just registered).
    pub async fn set_current(&self, build: &str) {
        let writer = self.writer(SETUP_IDENTITY);
        wait_for(&format!("set current {build:?}"), WAIT, || async move {
            writer
                .set_current(build, Vec::new(), build.is_empty())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Ramps `build` to `pct`, as the test.
    pub async fn set_ramping(&self, build: &str, pct: f32) {
        let writer = self.writer(SETUP_IDENTITY);
        wait_for(&format!("ramp {build:?} to {pct}%"), WAIT, || async move {
            writer
                .set_ramping(build, pct, Vec::new())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Sets the manager identity to `manager` ("" clears it), writing as `as_identity`.
    pub async fn set_manager(&self, manager: &str, as_identity: &str) {
        let mut svc = self.temporal.workflow_service();
        svc.set_worker_deployment_manager(tonic::Request::new(SetWorkerDeploymentManagerRequest {
            namespace: self.temporal_ns.clone(),
            deployment_name: self.deployment_name.clone(),
            new_manager_identity: Some(NewManagerIdentity::ManagerIdentity(manager.to_string())),
            conflict_token: Vec::new(),
            identity: as_identity.to_string(),
        }))
        .await
        .unwrap_or_else(|e| panic!("SetWorkerDeploymentManager({manager:?}): {e}"));
    }

    /// Waits until every build has `status` in Temporal (e.g. the demoted versions Drained).
    pub async fn wait_versions(&self, builds: &[&str], status: VersionStatus) {
        self.wait_temporal(&format!("{builds:?} {status:?}"), |s| {
            builds
                .iter()
                .all(|b| s.versions.get(*b).is_some_and(|v| v.status == status))
        })
        .await;
    }

    /// Unversioned workers polling the WorkerDeployment's task queue (a plain Deployment of
    /// the example worker with versioning off, as workers from before the migration), and
    /// waits until they take work (TWC's `setupUnversionedPollers`).
    pub async fn unversioned_workers(&self) {
        let labels = json!({"app": "unversioned-worker"});
        let d: Deployment = from_json(json!({
            "metadata": {"name": "unversioned-worker", "namespace": self.ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 2,
                        "containers": [{
                            "name": "worker",
                            "image": image("unversioned"),
                            "env": [
                                {"name": "TEMPORAL_ADDRESS", "value": self.address},
                                {"name": "TEMPORAL_NAMESPACE", "value": self.temporal_ns},
                                {"name": "TEMPORAL_TASK_QUEUE", "value": self.name},
                                {"name": "TEMPORAL_WORKER_UNVERSIONED", "value": "true"},
                            ]
                        }]
                    }
                }
            }
        }));
        self.deployments()
            .create(&PostParams::default(), &d)
            .await
            .unwrap_or_else(|e| panic!("create the unversioned workers: {e}"));
        // No version is current: the task goes to the unversioned workers.
        self.workflow_completes("unversioned-probe")
            .await
            .unwrap_or_else(|e| {
                panic!("no unversioned worker took a workflow task ({e}); a stale twc-example-worker binary ignores TEMPORAL_WORKER_UNVERSIONED: rebuild it")
            });
    }

    /// Runs workflow `Succeed` on the WorkerDeployment's task queue and waits until it
    /// completed: proof that a worker polls it. (Listing the pollers with `DescribeTaskQueue`
    /// does not work here: the dev server forgets a poller 1 s after its long poll started,
    /// `matching.PollerHistoryTTL`.)
    pub async fn workflow_completes(&self, id: &str) -> Result<(), String> {
        let mut svc = self.temporal.workflow_service();
        svc.start_workflow_execution(tonic::Request::new(StartWorkflowExecutionRequest {
            namespace: self.temporal_ns.clone(),
            workflow_id: id.to_string(),
            request_id: id.to_string(),
            workflow_type: Some(WorkflowType {
                name: "Succeed".into(),
            }),
            task_queue: Some(TaskQueue {
                name: self.name.clone(),
                ..Default::default()
            }),
            identity: SETUP_IDENTITY.into(),
            ..Default::default()
        }))
        .await
        .map_err(|e| format!("start {id}: {e}"))?;
        self.wait_completed(id, WAIT).await
    }

    /// Waits until workflow `id` completed successfully.
    pub async fn wait_completed(&self, id: &str, timeout: Duration) -> Result<(), String> {
        let svc = &self.temporal.workflow_service();
        wait_for(&format!("workflow {id} to complete"), timeout, || {
            let mut svc = svc.clone();
            async move {
                tokio::time::sleep(TEMPORAL_POLL).await;
                let info = svc
                    .describe_workflow_execution(tonic::Request::new(
                        DescribeWorkflowExecutionRequest {
                            namespace: self.temporal_ns.clone(),
                            execution: Some(WorkflowExecution {
                                workflow_id: id.to_string(),
                                ..Default::default()
                            }),
                        },
                    ))
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner()
                    .workflow_execution_info
                    .unwrap_or_default();
                if info.status() == WorkflowExecutionStatus::Completed {
                    Ok(())
                } else {
                    Err(format!("{:?}", info.status()))
                }
            }
        })
        .await
        .map_err(|e| e.to_string())
    }

    // ---- the WorkerDeployment ----

    pub async fn get(&self) -> WorkerDeployment {
        self.wds()
            .get(&self.name)
            .await
            .unwrap_or_else(|e| panic!("get {}/{}: {e}", self.ns, self.name))
    }

    /// Waits until the status matches `expect` and Temporal agrees with it.
    pub async fn wait_status(&self, expect: &Expect) -> WorkerDeployment {
        let wd = common::wait_wd(
            &self.client,
            &self.ns,
            &self.name,
            &format!("status {expect:?}"),
            WAIT,
            |wd| expect.mismatch(wd).is_none(),
        )
        .await;
        self.check_temporal(expect).await;
        wd
    }

    /// Asserts the status matches `expect` now, and Temporal agrees.
    pub async fn assert_status(&self, expect: &Expect) -> WorkerDeployment {
        let wd = self.get().await;
        if let Some(m) = expect.mismatch(&wd) {
            panic!(
                "{}/{}: {m}\nstatus: {}",
                self.ns,
                self.name,
                serde_json::to_string(&wd.status).unwrap_or_default()
            );
        }
        self.check_temporal(expect).await;
        wd
    }

    /// For "expect no change" scenarios: waits for `expect`, lets the controller run for
    /// [`SETTLE`], and checks that nothing moved.
    pub async fn settle(&self, expect: &Expect) -> WorkerDeployment {
        self.wait_status(expect).await;
        tokio::time::sleep(SETTLE).await;
        self.assert_status(expect).await
    }

    /// Temporal's routing agrees with the expected status (TWC's
    /// `verifyTemporalStateMatchesStatusEventually`).
    async fn check_temporal(&self, expect: &Expect) {
        let pred = |s: &DeploymentState| -> Result<(), String> {
            if s.current_build_id != expect.current {
                return Err(format!(
                    "Temporal current {:?}, expected {:?}",
                    s.current_build_id, expect.current
                ));
            }
            let (target, status, ramp) = &expect.target;
            let want_ramping = std::iter::once((target, status))
                .chain(expect.deprecated.iter().map(|(b, s)| (b, s)))
                .find(|(_, s)| **s == VersionStatus::Ramping)
                .map(|(b, _)| b.clone());
            if s.ramping_build_id != want_ramping {
                return Err(format!(
                    "Temporal ramping {:?}, expected {want_ramping:?}",
                    s.ramping_build_id
                ));
            }
            if let Some(r) = ramp
                && (s.ramp_percentage - r).abs() > 0.01
            {
                return Err(format!(
                    "Temporal ramp {}%, expected {r}%",
                    s.ramp_percentage
                ));
            }
            let versions = std::iter::once((target, status))
                .chain(expect.deprecated.iter().map(|(b, s)| (b, s)));
            for (build, want) in versions {
                let got = s
                    .versions
                    .get(build)
                    .map(|v| v.status)
                    .unwrap_or(VersionStatus::NotRegistered);
                if got != *want {
                    return Err(format!(
                        "Temporal says {build} is {got:?}, expected {want:?}"
                    ));
                }
            }
            Ok(())
        };
        let pred = &pred;
        wait_for(
            &format!(
                "{}: Temporal agrees with the status",
                self.deployment_name.clone()
            ),
            Duration::from_secs(30),
            || async move {
                let s = self.paced_describe().await?;
                pred(&s).map_err(|e| format!("{e}; state {s:?}"))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Waits until the Progressing condition's message says all of `words`; returns its
    /// reason and message. (Waiting, not reading once: a transient Temporal error, such as
    /// `ResourceExhausted` for a deployment workflow busy with a concurrent query, replaces
    /// the message until the next good reconcile.)
    pub async fn wait_progressing_says(&self, words: &[&str]) -> (String, String) {
        let wd = common::wait_wd(
            &self.client,
            &self.ns,
            &self.name,
            &format!("Progressing says {words:?}"),
            WAIT,
            |wd| {
                common::condition(wd, PROGRESSING)
                    .is_some_and(|(_, _, m)| words.iter().all(|w| m.contains(w)))
            },
        )
        .await;
        common::condition(&wd, PROGRESSING)
            .map(|(_, r, m)| (r, m))
            .unwrap_or_default()
    }

    /// Waits until condition `type_` has `status` and `reason`.
    pub async fn wait_condition(&self, type_: &str, status: &str, reason: &str) -> String {
        let wd = common::wait_wd(
            &self.client,
            &self.ns,
            &self.name,
            &format!("{type_}={status} {reason}"),
            WAIT,
            |wd| common::condition(wd, type_).is_some_and(|(s, r, _)| s == status && r == reason),
        )
        .await;
        common::condition(&wd, type_)
            .map(|(_, _, m)| m)
            .unwrap_or_default()
    }

    /// Waits for a Warning event with `reason` about the WorkerDeployment.
    pub async fn wait_warning(&self, reason: &str) -> String {
        self.wait_warning_about("WorkerDeployment", &self.name, reason)
            .await
    }

    /// The reasons of the WorkerDeployment's events, in the order they happened.
    pub async fn event_reasons(&self) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let mut events: Vec<Event> = api
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(self.name.as_str())
            })
            .collect();
        events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        events.into_iter().filter_map(|e| e.reason).collect()
    }

    /// Waits for a Warning event with `reason` about the `kind` object `name` of the namespace.
    pub async fn wait_warning_about(&self, kind: &str, name: &str, reason: &str) -> String {
        self.wait_event_about("Warning", kind, name, reason).await
    }

    /// Waits for an event of `type_` (Normal, Warning) with `reason` about the `kind` object
    /// `name` of the namespace; returns its note.
    pub async fn wait_event_about(
        &self,
        type_: &str,
        kind: &str,
        name: &str,
        reason: &str,
    ) -> String {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        wait_for(
            &format!("{}/{name}: {type_} event {reason}", self.ns),
            WAIT,
            || {
                let api = api.clone();
                async move {
                    let events = api
                        .list(&ListParams::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    events
                        .items
                        .iter()
                        .find(|e| {
                            let regarding = e.regarding.as_ref();
                            e.type_.as_deref() == Some(type_)
                                && e.reason.as_deref() == Some(reason)
                                && regarding.and_then(|r| r.kind.as_deref()) == Some(kind)
                                && regarding.and_then(|r| r.name.as_deref()) == Some(name)
                        })
                        .map(|e| e.note.clone().unwrap_or_default())
                        .ok_or_else(|| {
                            let seen: Vec<_> = events
                                .items
                                .iter()
                                .map(|e| format!("{:?} {:?}", e.type_, e.reason))
                                .collect();
                            format!("events: {seen:?}")
                        })
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A second dev server, for this binary only, with TWC's `matching.maxVersionsInDeployment=6`
/// (its `ts`/`tsShortTTL` servers): at 6 versions it deletes the oldest deletable version to
/// register a new one. Started on first use.
pub async fn capped_server() -> &'static TemporalServer {
    static CAPPED: tokio::sync::OnceCell<TemporalServer> = tokio::sync::OnceCell::const_new();
    CAPPED
        .get_or_init(|| async {
            let mut opts = TemporalOptions::default();
            opts.dynamic_config
                .push(("matching.maxVersionsInDeployment".into(), "6".into()));
            opts.namespace_pool = 2;
            let dir = twc_testenv::paths::log_dir().join("temporal-capped");
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            TemporalServer::start(&opts, &dir)
                .await
                .unwrap_or_else(|e| panic!("the capped dev server: {e}"))
        })
        .await
}

/// An expected status (TWC's `StatusBuilder`): the target's build ID, status and ramp, the
/// current build ID, and the exact set of deprecated versions with their statuses. Drained
/// deprecated versions must have `drainedSince`; every deprecated version must name its
/// Deployment.
#[derive(Clone, Debug)]
pub struct Expect {
    pub target: (String, VersionStatus, Option<f32>),
    /// Other statuses the target may have instead (Temporal decides between them).
    pub target_or: Vec<VersionStatus>,
    pub current: Option<String>,
    pub deprecated: Vec<(String, VersionStatus)>,
}

impl Expect {
    pub fn target(build: &str, status: VersionStatus) -> Self {
        Self {
            target: (build.to_string(), status, None),
            target_or: Vec::new(),
            current: None,
            deprecated: Vec::new(),
        }
    }

    /// The target may have `status` instead.
    pub fn or_status(mut self, status: VersionStatus) -> Self {
        self.target_or.push(status);
        self
    }

    pub fn ramp(mut self, pct: f32) -> Self {
        self.target.2 = Some(pct);
        self
    }

    pub fn current(mut self, build: &str) -> Self {
        self.current = Some(build.to_string());
        self
    }

    pub fn deprecated(mut self, build: &str, status: VersionStatus) -> Self {
        self.deprecated.push((build.to_string(), status));
        self
    }

    /// What differs, if anything.
    pub fn mismatch(&self, wd: &WorkerDeployment) -> Option<String> {
        let s = wd.status.clone().unwrap_or_default();
        let Some(t) = s.target_version else {
            return Some("no targetVersion".into());
        };
        let (build, status, ramp) = &self.target;
        if t.base.build_id != *build
            || (t.base.status != *status && !self.target_or.contains(&t.base.status))
        {
            return Some(format!(
                "target {} {:?}, expected {build} {status:?} (or {:?})",
                t.base.build_id, t.base.status, self.target_or
            ));
        }
        if *status != VersionStatus::NotRegistered && t.base.deployment.is_none() {
            return Some("target has no Deployment".into());
        }
        let got_ramp = t.ramp_percentage;
        let ramp_ok = match (ramp, got_ramp) {
            (Some(want), Some(got)) => (want - got).abs() < 0.01,
            (None, _) => *status != VersionStatus::Ramping || got_ramp.is_some(),
            (Some(_), None) => false,
        };
        if !ramp_ok {
            return Some(format!("target ramp {got_ramp:?}, expected {ramp:?}"));
        }
        let current = s.current_version.as_ref().map(|c| c.base.build_id.clone());
        if current != self.current {
            return Some(format!("current {current:?}, expected {:?}", self.current));
        }
        if let Some(c) = &s.current_version
            && (c.base.status != VersionStatus::Current || c.base.deployment.is_none())
        {
            return Some(format!(
                "current {} is {:?}",
                c.base.build_id, c.base.status
            ));
        }
        let mut got: Vec<(String, VersionStatus)> = s
            .deprecated_versions
            .iter()
            .map(|d| (d.base.build_id.clone(), d.base.status))
            .collect();
        let mut want = self.deprecated.clone();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        want.sort_by(|a, b| a.0.cmp(&b.0));
        if got != want {
            return Some(format!("deprecated {got:?}, expected {want:?}"));
        }
        for d in &s.deprecated_versions {
            if d.base.deployment.is_none() {
                return Some(format!("deprecated {} has no Deployment", d.base.build_id));
            }
            let drained = d.base.status == VersionStatus::Drained;
            if drained != d.drained_since.is_some() {
                return Some(format!(
                    "deprecated {} is {:?} with drainedSince {:?}",
                    d.base.build_id, d.base.status, d.drained_since
                ));
            }
        }
        None
    }
}

/// The `eligibleForDeletion` flags of the deprecated versions, by build ID.
pub fn eligible_for_deletion(wd: &WorkerDeployment) -> Vec<(String, bool)> {
    let mut v: Vec<(String, bool)> = wd
        .status
        .iter()
        .flat_map(|s| s.deprecated_versions.iter())
        .map(|d| (d.base.build_id.clone(), d.eligible_for_deletion))
        .collect();
    v.sort();
    v
}
