//! Rollouts that protect themselves (not in TWC): a ramp whose workers crash-loop is rolled
//! back, a build that never polls fails at its progress deadline, and the controls a person
//! uses mid-rollout (pause, promote, abort, retry) work and are acknowledged, and a ramp
//! step whose gate workflow fails is rolled back.

#[path = "guard/controls.rs"]
mod controls;
#[path = "guard/rollback.rs"]
mod rollback;
#[path = "guard/steps.rs"]
mod steps;

pub use controls::*;
pub use rollback::*;
pub use steps::*;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::common::World;
use crate::harness::{Scenario, image};

impl Scenario {
    /// Makes the WorkerDeployment's worker container run with `env` (after the older versions
    /// were made from the spec as created, so they behave).
    async fn misbehave(&mut self, env: Value) {
        let patched = self
            .wds()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Json::<()>(
                    serde_json::from_value(json!([
                        {"op": "add", "path": "/spec/template/spec/containers/0/env", "value": env}
                    ]))
                    .unwrap_or_else(|e| panic!("{e}")),
                ),
            )
            .await
            .unwrap_or_else(|e| panic!("patch the template: {e}"));
        self.wd = Some(patched);
    }

    /// Sets (or, with None, removes) annotation `key` on the WorkerDeployment.
    async fn annotate(&self, key: &str, value: Option<&str>) {
        self.wds()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("annotate {key}: {e}"));
    }

    /// Runs `twc <args>` against the test cluster as a person would; returns its stdout.
    /// With `via_kubectl`, as the kubectl plugin: `kubectl twc <args>`, with the binary on
    /// PATH as `kubectl-twc`.
    async fn twc(&self, w: &'static World, args: &[&str], via_kubectl: bool) -> String {
        let twc = twc_testenv::paths::workspace_binary("temporal-worker-controller", "twc")
            .unwrap_or_else(|e| panic!("{e}"));
        let kubeconfig = w.env.control_plane.kubeconfig_path.clone();
        let mut command = if via_kubectl {
            let dir = std::env::temp_dir().join(format!("kubectl-plugin-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
            let plugin = dir.join("kubectl-twc");
            if !plugin.exists() {
                std::os::unix::fs::symlink(&twc, &plugin).unwrap_or_else(|e| panic!("{e}"));
            }
            let path = format!(
                "{}:{}",
                dir.display(),
                std::env::var("PATH").unwrap_or_default()
            );
            let mut c = tokio::process::Command::new(twc_testenv::paths::kubectl());
            c.arg("twc").env("PATH", path);
            c
        } else {
            tokio::process::Command::new(twc)
        };
        let out = command
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .await
            .unwrap_or_else(|e| panic!("twc {args:?}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "twc {args:?} failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Starts workflow `Work(n)` on the task queue (Temporal routes it by the ramp).
    async fn start_work(&self, id: &str, n: u64) {
        use temporalio_common::protos::temporal::api::common::v1::{
            Payload, Payloads, WorkflowType,
        };
        use temporalio_common::protos::temporal::api::taskqueue::v1::TaskQueue;
        use temporalio_common::protos::temporal::api::workflowservice::v1::StartWorkflowExecutionRequest;
        let payload = Payload {
            metadata: [("encoding".to_string(), b"json/plain".to_vec())].into(),
            data: n.to_string().into_bytes(),
            ..Default::default()
        };
        let mut svc = self.temporal.workflow_service();
        svc.start_workflow_execution(temporalio_client::tonic::Request::new(
            StartWorkflowExecutionRequest {
                namespace: self.temporal_ns.clone(),
                workflow_id: id.to_string(),
                request_id: id.to_string(),
                workflow_type: Some(WorkflowType {
                    name: "Work".into(),
                }),
                task_queue: Some(TaskQueue {
                    name: self.name.clone(),
                    ..Default::default()
                }),
                input: Some(Payloads {
                    payloads: vec![payload],
                }),
                identity: crate::harness::SETUP_IDENTITY.into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_or_else(|e| panic!("start {id}: {e}"));
    }

    /// Waits for a Normal event with `reason` about the WorkerDeployment.
    async fn wait_normal(&self, reason: &str) -> String {
        self.wait_event_about("Normal", "WorkerDeployment", &self.name, reason)
            .await
    }

    /// Creates the WorkerDeployment from `spec` (image v2; its worker container run with
    /// `env`), and an older v1 made current by the test; then connects. Returns (v1, v2).
    async fn v1_current_then(&mut self, spec: Value, env: Option<Value>) -> (String, String) {
        self.create(spec).await;
        let v1 = self.existing_version(&image("v1"), 1).await;
        if let Some(env) = env {
            self.misbehave(env).await;
        }
        self.wait_registered(&[&v1]).await;
        self.set_current(&v1).await;
        self.connect().await;
        (v1, self.target_build_id())
    }

    /// After [`SETTLE`](crate::harness::SETTLE), Temporal still routes every new workflow to
    /// `build` (not ramped or promoted again).
    async fn stays_on(&self, build: &str) {
        tokio::time::sleep(crate::harness::SETTLE).await;
        let st = self.describe().await;
        assert_eq!(
            (
                st.current_build_id.as_deref(),
                st.ramping_build_id.as_deref()
            ),
            (Some(build), None)
        );
    }

    /// The failed version the status records: (build ID, reason, rolled back).
    async fn failed_version(&self) -> Option<(String, String, bool)> {
        self.get()
            .await
            .status
            .and_then(|s| s.failed_version)
            .map(|f| (f.build_id, f.reason, f.rolled_back))
    }
}
