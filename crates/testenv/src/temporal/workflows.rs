//! Workflows on the test server: started (optionally pinned), their status and who ran
//! their activities.

use temporalio_client::{Connection, tonic};

use crate::Error;

/// Starts workflow `workflow_type` as `id` on `task_queue`, with an optional JSON argument
/// (the example worker's `Sleep` takes its seconds, the gates take none).
pub async fn start_workflow(
    conn: &Connection,
    namespace: &str,
    task_queue: &str,
    workflow_type: &str,
    id: &str,
    json_input: Option<&str>,
) -> Result<(), Error> {
    start_workflow_pinned(
        conn,
        namespace,
        task_queue,
        workflow_type,
        id,
        json_input,
        None,
    )
    .await
}

/// [`start_workflow`], pinned by a versioning override to `pinned` (deployment name, build
/// ID) when given: it runs there whatever the routing says.
pub async fn start_workflow_pinned(
    conn: &Connection,
    namespace: &str,
    task_queue: &str,
    workflow_type: &str,
    id: &str,
    json_input: Option<&str>,
    pinned: Option<(&str, &str)>,
) -> Result<(), Error> {
    use temporalio_common::protos::temporal::api::deployment::v1::WorkerDeploymentVersion;
    use temporalio_common::protos::temporal::api::workflow::v1::VersioningOverride;
    use temporalio_common::protos::temporal::api::workflow::v1::versioning_override::{
        Override, PinnedOverride, PinnedOverrideBehavior,
    };
    #[allow(deprecated)]
    let versioning_override = pinned.map(|(deployment, build)| VersioningOverride {
        r#override: Some(Override::Pinned(PinnedOverride {
            behavior: PinnedOverrideBehavior::Pinned as i32,
            version: Some(WorkerDeploymentVersion {
                deployment_name: deployment.into(),
                build_id: build.into(),
            }),
        })),
        ..Default::default()
    });
    use temporalio_common::protos::temporal::api::common::v1::{Payload, Payloads, WorkflowType};
    use temporalio_common::protos::temporal::api::taskqueue::v1::TaskQueue;
    use temporalio_common::protos::temporal::api::workflowservice::v1::StartWorkflowExecutionRequest;
    let input = json_input.map(|json| Payloads {
        payloads: vec![Payload {
            metadata: [("encoding".to_string(), b"json/plain".to_vec())].into(),
            data: json.as_bytes().to_vec(),
            ..Default::default()
        }],
    });
    conn.workflow_service()
        .start_workflow_execution(tonic::Request::new(StartWorkflowExecutionRequest {
            namespace: namespace.to_string(),
            workflow_id: id.to_string(),
            request_id: id.to_string(),
            workflow_type: Some(WorkflowType {
                name: workflow_type.into(),
            }),
            task_queue: Some(TaskQueue {
                name: task_queue.into(),
                ..Default::default()
            }),
            input,
            identity: "twc-testenv".into(),
            versioning_override,
            ..Default::default()
        }))
        .await
        .map(|_| ())
        .map_err(|e| Error::Temporal(format!("start workflow {id}: {}", e.message())))
}

/// The status of the latest run of workflow `id` (`Running`, `Completed`, `Failed`, ...).
pub async fn workflow_status(
    conn: &Connection,
    namespace: &str,
    id: &str,
) -> Result<String, Error> {
    use temporalio_common::protos::temporal::api::common::v1::WorkflowExecution;
    use temporalio_common::protos::temporal::api::workflowservice::v1::DescribeWorkflowExecutionRequest;
    let info = conn
        .workflow_service()
        .describe_workflow_execution(tonic::Request::new(DescribeWorkflowExecutionRequest {
            namespace: namespace.to_string(),
            execution: Some(WorkflowExecution {
                workflow_id: id.to_string(),
                ..Default::default()
            }),
        }))
        .await
        .map_err(|e| Error::Temporal(format!("describe workflow {id}: {}", e.message())))?
        .into_inner()
        .workflow_execution_info
        .unwrap_or_default();
    Ok(format!("{:?}", info.status()))
}

/// The identities of the workers that started the activities of workflow `id` (the example
/// worker's identity is its pod's name), in the order of its history.
pub async fn activity_identities(
    conn: &Connection,
    namespace: &str,
    id: &str,
) -> Result<Vec<String>, Error> {
    use temporalio_common::protos::temporal::api::common::v1::WorkflowExecution;
    use temporalio_common::protos::temporal::api::history::v1::history_event::Attributes;
    use temporalio_common::protos::temporal::api::workflowservice::v1::GetWorkflowExecutionHistoryRequest;
    let mut identities = Vec::new();
    let mut page = Vec::new();
    loop {
        let reply = conn
            .workflow_service()
            .get_workflow_execution_history(tonic::Request::new(
                GetWorkflowExecutionHistoryRequest {
                    namespace: namespace.to_string(),
                    execution: Some(WorkflowExecution {
                        workflow_id: id.to_string(),
                        ..Default::default()
                    }),
                    next_page_token: page,
                    ..Default::default()
                },
            ))
            .await
            .map_err(|e| Error::Temporal(format!("history of {id}: {}", e.message())))?
            .into_inner();
        for event in reply.history.map(|h| h.events).unwrap_or_default() {
            if let Some(Attributes::ActivityTaskStartedEventAttributes(a)) = event.attributes {
                identities.push(a.identity);
            }
        }
        if reply.next_page_token.is_empty() {
            return Ok(identities);
        }
        page = reply.next_page_token;
    }
}
