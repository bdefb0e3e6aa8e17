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

#[path = "harness/expect.rs"]
mod expect;
#[path = "harness/in_temporal.rs"]
mod in_temporal;
#[path = "harness/status.rs"]
mod status;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use twc_api::{Connection, ConnectionSpec, WorkerDeployment};
use twc_controller::plan::{build_id, deployment};
use twc_controller::writes::MANAGER;
use twc_testenv::{TemporalOptions, TemporalServer, wait_for};

use crate::common::{WORKER_IMAGE, World, from_json};

pub use expect::{Expect, eligible_for_deletion};

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
            wd.spec.pod_template(),
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

    /// A Manual WorkerDeployment whose v1.0 is current and v2.0 ramping at 50%, set by
    /// someone else (both running, one replica each); returns their build IDs.
    pub async fn v1_current_v2_ramping(&mut self) -> (String, String) {
        self.create(self.spec(manual(), &image("v1.0"))).await;
        let v1 = self.existing_version(&image("v1.0"), 1).await;
        let v2 = self.existing_version(&image("v2.0"), 1).await;
        self.wait_registered(&[&v1, &v2]).await;
        self.set_current(&v1).await;
        self.set_ramping(&v2, 50.0).await;
        (v1, v2)
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
