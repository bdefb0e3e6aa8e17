//! The scenario's view of Temporal: reading the worker deployment, the test's own writes to
//! it, and workers and workflows on its task queue.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::PostParams;
use serde_json::json;
use temporalio_client::tonic;
use temporalio_common::protos::temporal::api::common::v1::{WorkflowExecution, WorkflowType};
use temporalio_common::protos::temporal::api::enums::v1::WorkflowExecutionStatus;
use temporalio_common::protos::temporal::api::taskqueue::v1::TaskQueue;
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    DescribeWorkflowExecutionRequest, SetWorkerDeploymentManagerRequest,
    StartWorkflowExecutionRequest, set_worker_deployment_manager_request::NewManagerIdentity,
};
use twc_api::VersionStatus;
use twc_controller::temporal::{self, DeploymentState, WorkerDeploymentRef};
use twc_testenv::wait_for;

use super::{SETUP_IDENTITY, Scenario, TEMPORAL_POLL, WAIT, image};
use crate::common::from_json;

impl Scenario {
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
    pub(super) async fn paced_describe(&self) -> Result<DeploymentState, String> {
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
}
