//! What the rollout reads about a target version beyond `DescribeWorkerDeployment`: the task
//! queues it polls, its gate workflows, and whether unversioned workers still poll its queues.

use prost_wkt_types::Duration as PbDuration;
use temporalio_client::tonic;
use temporalio_common::protos::temporal::api::common::v1::{
    Payload, Payloads, WorkflowExecution as PbExecution, WorkflowType,
};
use temporalio_common::protos::temporal::api::deployment::v1::WorkerDeploymentVersionInfo as VersionInfo;
use temporalio_common::protos::temporal::api::enums::v1::{
    TaskQueueKind, TaskQueueType, VersionDrainageStatus, WorkerVersioningMode,
    WorkflowExecutionStatus as PbStatus, WorkflowIdConflictPolicy, WorkflowIdReusePolicy,
};
use temporalio_common::protos::temporal::api::taskqueue::v1::{
    PollerInfo, TaskQueue as PbTaskQueue,
};
use temporalio_common::protos::temporal::api::workflow::v1::VersioningOverride;
use temporalio_common::protos::temporal::api::workflow::v1::versioning_override::{
    Override, PinnedOverride, PinnedOverrideBehavior,
};
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    CountWorkflowExecutionsRequest, CountWorkflowExecutionsResponse as CountResponse,
    DescribeTaskQueueRequest, DescribeWorkerDeploymentVersionRequest,
    DescribeWorkflowExecutionRequest, StartWorkflowExecutionRequest,
};
use twc_api::WorkflowExecutionStatus;

use super::{Code, Status, WorkerDeploymentRef};
use crate::metrics::rpc;
pub use crate::observed::TaskQueueRef;

/// How long a gate workflow may run.
const GATE_TIMEOUT_SECONDS: i64 = 3600;

/// The gate workflow ID for a version and task queue, as TWC names it.
pub fn gate_workflow_id(deployment_name: &str, build_id: &str, task_queue: &str) -> String {
    format!("test-{deployment_name}:{build_id}-{task_queue}")
}

/// The workflow ID of ramp step `step`'s gate (counted from 0, named from 1) for a version and
/// task queue. After a retry (`retry`, the `temporal.io/retry` value), a new ID, so the gate
/// runs again.
pub fn step_gate_workflow_id(
    deployment_name: &str,
    build_id: &str,
    task_queue: &str,
    step: usize,
    retry: Option<&str>,
) -> String {
    let base = format!(
        "{}-step{}",
        gate_workflow_id(deployment_name, build_id, task_queue),
        step + 1
    );
    match retry {
        None => base,
        Some(r) => {
            use sha2::{Digest, Sha256};
            let digest = Sha256::digest(r.as_bytes());
            let short: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
            format!("{base}-retry-{short}")
        }
    }
}

fn status_of(code: i32) -> WorkflowExecutionStatus {
    match PbStatus::try_from(code).unwrap_or(PbStatus::Unspecified) {
        PbStatus::Completed => WorkflowExecutionStatus::Completed,
        PbStatus::Failed => WorkflowExecutionStatus::Failed,
        PbStatus::Canceled => WorkflowExecutionStatus::Canceled,
        PbStatus::Terminated | PbStatus::ContinuedAsNew => WorkflowExecutionStatus::Terminated,
        PbStatus::TimedOut => WorkflowExecutionStatus::TimedOut,
        PbStatus::Running | PbStatus::Unspecified | PbStatus::Paused => {
            WorkflowExecutionStatus::Running
        }
    }
}

/// A gate workflow's argument: its bytes, labelled (never re-encoded) as the spec says.
#[derive(Clone, Copy, Debug)]
pub struct GatePayload<'a> {
    pub data: &'a [u8],
    /// The `encoding` metadata (`json/plain` when the spec names none).
    pub encoding: &'a str,
    /// The `messageType` metadata, absent (not empty) when not set.
    pub message_type: Option<&'a str>,
}

impl GatePayload<'_> {
    fn payload(&self) -> Payload {
        let mut metadata = std::collections::HashMap::from([(
            "encoding".to_string(),
            self.encoding.as_bytes().to_vec(),
        )]);
        if let Some(t) = self.message_type {
            metadata.insert("messageType".into(), t.as_bytes().to_vec());
        }
        Payload {
            metadata,
            data: self.data.to_vec(),
            ..Default::default()
        }
    }
}

impl WorkerDeploymentRef<'_> {
    /// `DescribeWorkerDeploymentVersion` of `build_id`; None when the server does not know it.
    async fn describe_version(&self, build_id: &str) -> Result<Option<VersionInfo>, Status> {
        let mut svc = self.conn.workflow_service();
        let request = DescribeWorkerDeploymentVersionRequest {
            namespace: self.namespace.to_string(),
            deployment_version: self.version(build_id),
            ..Default::default()
        };
        match rpc(
            "DescribeWorkerDeploymentVersion",
            svc.describe_worker_deployment_version(tonic::Request::new(request)),
        )
        .await
        {
            Ok(r) => Ok(r.into_inner().worker_deployment_version_info),
            Err(s) if super::missing::is_absent(&s) => Ok(None),
            Err(s) => Err(s),
        }
    }

    /// Whether the version itself says it is drained. The worker deployment's summary of a
    /// version can stay at Draining after the version drained (seen after server restarts);
    /// the version's own drainage info is the one to trust before letting its workers go.
    /// Unknown versions are not drained.
    pub async fn drained(&self, build_id: &str) -> Result<bool, Status> {
        Ok(self
            .describe_version(build_id)
            .await?
            .and_then(|i| i.drainage_info)
            .is_some_and(|d| d.status() == VersionDrainageStatus::Drained))
    }

    /// The task queues `build_id` polls (empty while the server has not recorded any, or if
    /// the version is unknown).
    pub async fn task_queues(&self, build_id: &str) -> Result<Vec<TaskQueueRef>, Status> {
        let info = self.describe_version(build_id).await?;
        let mut queues: Vec<TaskQueueRef> = info
            .map(|i| i.task_queue_infos)
            .unwrap_or_default()
            .into_iter()
            .map(|q| TaskQueueRef {
                workflow: q.r#type == TaskQueueType::Workflow as i32,
                name: q.name,
            })
            .collect();
        queues.sort();
        queues.dedup();
        Ok(queues)
    }

    /// `CountWorkflowExecutions` of the workflows on `build_id` (visibility's
    /// `TemporalWorkerDeploymentVersion`) that also match `rest` (`AND ...`, `GROUP BY ...`).
    async fn count_on(&self, build_id: &str, rest: &str) -> Result<CountResponse, Status> {
        let mut svc = self.conn.workflow_service();
        let query = format!(
            "TemporalWorkerDeploymentVersion = '{}:{}' {rest}",
            self.name.replace('\'', ""),
            build_id.replace('\'', "")
        );
        let request = CountWorkflowExecutionsRequest {
            namespace: self.namespace.to_string(),
            query,
        };
        Ok(rpc(
            "CountWorkflowExecutions",
            svc.count_workflow_executions(tonic::Request::new(request)),
        )
        .await?
        .into_inner())
    }

    /// The workflows that closed on `build_id` since `since` (RFC 3339), counted by
    /// visibility: (closed, of which failed, timed out or terminated).
    pub async fn closed_since(&self, build_id: &str, since: &str) -> Result<(i64, i64), Status> {
        let r = self
            .count_on(
                build_id,
                &format!("AND CloseTime >= '{since}' GROUP BY ExecutionStatus"),
            )
            .await?;
        let mut failed = 0;
        for g in &r.groups {
            let value = g
                .group_values
                .first()
                .and_then(|p| serde_json::from_slice::<String>(&p.data).ok())
                .unwrap_or_default();
            if matches!(value.as_str(), "Failed" | "TimedOut" | "Terminated") {
                failed += g.count;
            }
        }
        Ok((r.count, failed))
    }

    /// The workflows still running on `build_id`, counted by visibility: pinned ones wait for
    /// its workers.
    pub async fn open_on(&self, build_id: &str) -> Result<i64, Status> {
        Ok(self
            .count_on(build_id, "AND ExecutionStatus = 'Running'")
            .await?
            .count)
    }

    /// `DescribeWorkflowExecution` of the latest run of `workflow_id`: (run ID, status), or
    /// None if there is none.
    pub async fn workflow_status(
        &self,
        workflow_id: &str,
    ) -> Result<Option<(String, WorkflowExecutionStatus)>, Status> {
        let mut svc = self.conn.workflow_service();
        let request = DescribeWorkflowExecutionRequest {
            namespace: self.namespace.to_string(),
            execution: Some(PbExecution {
                workflow_id: workflow_id.to_string(),
                run_id: String::new(),
            }),
        };
        match rpc(
            "DescribeWorkflowExecution",
            svc.describe_workflow_execution(tonic::Request::new(request)),
        )
        .await
        {
            Ok(r) => Ok(r.into_inner().workflow_execution_info.map(|i| {
                (
                    i.execution.map(|e| e.run_id).unwrap_or_default(),
                    status_of(i.status),
                )
            })),
            Err(s) if super::missing::is_absent(&s) => Ok(None),
            Err(s) => Err(s),
        }
    }

    /// `StartWorkflowExecution` of a gate workflow pinned to `build_id`, with an optional JSON
    /// argument. Returns the run ID ("" if a run with that ID already exists: a gate runs once
    /// per build and is never retried).
    pub async fn start_gate(
        &self,
        workflow_type: &str,
        workflow_id: &str,
        task_queue: &str,
        build_id: &str,
        input: Option<GatePayload<'_>>,
    ) -> Result<String, Status> {
        let mut svc = self.conn.workflow_service();
        let request = StartWorkflowExecutionRequest {
            namespace: self.namespace.to_string(),
            workflow_id: workflow_id.to_string(),
            workflow_type: Some(WorkflowType {
                name: workflow_type.to_string(),
            }),
            task_queue: Some(PbTaskQueue {
                name: task_queue.to_string(),
                kind: TaskQueueKind::Normal as i32,
                normal_name: String::new(),
            }),
            input: input.map(|p| Payloads {
                payloads: vec![p.payload()],
            }),
            workflow_execution_timeout: Some(PbDuration {
                seconds: GATE_TIMEOUT_SECONDS,
                nanos: 0,
            }),
            identity: self.identity.to_string(),
            request_id: format!("{workflow_id}/{}", std::process::id()),
            workflow_id_reuse_policy: WorkflowIdReusePolicy::RejectDuplicate as i32,
            workflow_id_conflict_policy: WorkflowIdConflictPolicy::Fail as i32,
            versioning_override: Some(VersioningOverride {
                r#override: Some(Override::Pinned(PinnedOverride {
                    behavior: PinnedOverrideBehavior::Pinned as i32,
                    version: self.version(build_id),
                })),
                ..Default::default()
            }),
            ..Default::default()
        };
        match rpc(
            "StartWorkflowExecution",
            svc.start_workflow_execution(tonic::Request::new(request)),
        )
        .await
        {
            Ok(r) => Ok(r.into_inner().run_id),
            Err(s) if s.code() == Code::AlreadyExists => Ok(String::new()),
            Err(s) => Err(s),
        }
    }

    /// `DescribeTaskQueue`: the pollers the server saw lately on `queue` (for
    /// `matching.PollerHistoryTTL`).
    pub async fn pollers(&self, queue: &TaskQueueRef) -> Result<Vec<PollerInfo>, Status> {
        let mut svc = self.conn.workflow_service();
        let kind = if queue.workflow {
            TaskQueueType::Workflow
        } else {
            TaskQueueType::Activity
        };
        let request = DescribeTaskQueueRequest {
            namespace: self.namespace.to_string(),
            task_queue: Some(PbTaskQueue {
                name: queue.name.clone(),
                kind: TaskQueueKind::Normal as i32,
                normal_name: String::new(),
            }),
            task_queue_type: kind as i32,
            ..Default::default()
        };
        let response = rpc(
            "DescribeTaskQueue",
            svc.describe_task_queue(tonic::Request::new(request)),
        )
        .await?;
        Ok(response.into_inner().pollers)
    }

    /// `DescribeTaskQueue`: whether a worker without versioning polls `queue`.
    pub async fn has_unversioned_poller(&self, queue: &TaskQueueRef) -> Result<bool, Status> {
        let pollers = self.pollers(queue).await?;
        Ok(pollers.iter().any(|p| {
            p.deployment_options.as_ref().is_none_or(|o| {
                matches!(
                    WorkerVersioningMode::try_from(o.worker_versioning_mode),
                    Ok(WorkerVersioningMode::Unversioned | WorkerVersioningMode::Unspecified)
                        | Err(_)
                )
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::GatePayload;

    /// The bytes go as given under every encoding (labelled, never re-encoded), with
    /// `messageType` only when set, as TWC sends them.
    #[test]
    fn a_gate_payload_labels_its_bytes_as_the_spec_says() {
        for encoding in [
            "json/plain",
            "json/protobuf",
            "binary/plain",
            "binary/protobuf",
        ] {
            let p = GatePayload {
                data: b"\x08\x01raw",
                encoding,
                message_type: None,
            }
            .payload();
            assert_eq!(p.data, b"\x08\x01raw");
            assert_eq!(
                p.metadata.get("encoding"),
                Some(&encoding.as_bytes().to_vec())
            );
            assert!(!p.metadata.contains_key("messageType"), "{encoding}");
        }
        let p = GatePayload {
            data: b"{}",
            encoding: "json/protobuf",
            message_type: Some("acme.v1.Check"),
        }
        .payload();
        assert_eq!(
            p.metadata.get("messageType"),
            Some(&b"acme.v1.Check".to_vec())
        );
    }
}
