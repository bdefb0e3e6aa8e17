//! What Temporal says, read by the checker itself: its own call of
//! `DescribeWorkerDeployment` and its own reading of the answer, so that a mistake in the
//! controller's `temporal::describe` (how it reads routing, version statuses or a `NotFound`)
//! cannot hide the controller's mistakes from the invariants.

use std::collections::BTreeMap;

use temporalio_client::Connection;
use temporalio_client::tonic::{self, Code};
use temporalio_common::protos::google::rpc::Status as RpcStatus;
use temporalio_common::protos::temporal::api::enums::v1::WorkerDeploymentVersionStatus as Pb;
use temporalio_common::protos::temporal::api::workflowservice::v1::DescribeWorkerDeploymentRequest;

/// A version's status, as the checker needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Current,
    Ramping,
    Draining,
    Drained,
    Inactive,
    Other,
}

/// A worker deployment as Temporal reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct View {
    /// The worker deployment exists (a `NotFound` whose details say so reads as absent).
    pub(crate) exists: bool,
    pub(crate) current: Option<String>,
    pub(crate) ramping: Option<String>,
    pub(crate) versions: BTreeMap<String, Status>,
}

/// Reads worker deployment `deployment` in Temporal namespace `namespace`. An error is an
/// error: the caller treats it as "not known", never as absent.
pub(crate) async fn read(
    conn: &Connection,
    namespace: &str,
    deployment: &str,
) -> Result<View, tonic::Status> {
    let mut svc = conn.workflow_service();
    let request = DescribeWorkerDeploymentRequest {
        namespace: namespace.to_string(),
        deployment_name: deployment.to_string(),
    };
    let info = match svc
        .describe_worker_deployment(tonic::Request::new(request))
        .await
    {
        Ok(r) => r.into_inner().worker_deployment_info.unwrap_or_default(),
        Err(s) if absent(&s) => return Ok(View::default()),
        Err(s) => return Err(s),
    };
    let routing = info.routing_config.unwrap_or_default();
    // The routing config names versions; an empty build ID is the unversioned "version".
    let build = |v: Option<
        &temporalio_common::protos::temporal::api::deployment::v1::WorkerDeploymentVersion,
    >| { v.map(|v| v.build_id.clone()).filter(|b| !b.is_empty()) };
    let versions = info
        .version_summaries
        .iter()
        .filter_map(|v| {
            let b = build(v.deployment_version.as_ref())?;
            let status = match Pb::try_from(v.status).unwrap_or(Pb::Unspecified) {
                Pb::Current => Status::Current,
                Pb::Ramping => Status::Ramping,
                Pb::Draining => Status::Draining,
                Pb::Drained => Status::Drained,
                Pb::Inactive => Status::Inactive,
                _ => Status::Other,
            };
            Some((b, status))
        })
        .collect();
    Ok(View {
        exists: true,
        current: build(routing.current_deployment_version.as_ref()),
        ramping: build(routing.ramping_deployment_version.as_ref()),
        versions,
    })
}

/// A `NotFound` about the worker deployment itself (its details say `NotFoundFailure`), not
/// about the namespace or anything else.
fn absent(s: &tonic::Status) -> bool {
    if s.code() != Code::NotFound {
        return false;
    }
    let details: Option<RpcStatus> = prost::Message::decode(s.details()).ok();
    let typed = details.is_some_and(|d| {
        d.details.iter().any(|a| {
            a.type_url
                .ends_with("temporal.api.errordetails.v1.NotFoundFailure")
        })
    });
    // A server that sends no details says it in these words.
    typed || s.message().starts_with("no Worker Deployment found")
}

/// Whether version `build` of worker deployment `deployment` says itself that it is drained
/// (its own drainage info). The worker deployment's summary can go on saying Draining for a
/// while after the version drained; the version's own status is the server's judgement, the
/// one the controller trusts before letting workers go. An unknown version is not drained.
pub(crate) async fn drained(
    conn: &Connection,
    namespace: &str,
    deployment: &str,
    build: &str,
) -> Result<bool, tonic::Status> {
    use temporalio_common::protos::temporal::api::deployment::v1::WorkerDeploymentVersion;
    use temporalio_common::protos::temporal::api::enums::v1::VersionDrainageStatus;
    use temporalio_common::protos::temporal::api::workflowservice::v1::DescribeWorkerDeploymentVersionRequest;
    let request = DescribeWorkerDeploymentVersionRequest {
        namespace: namespace.to_string(),
        deployment_version: Some(WorkerDeploymentVersion {
            deployment_name: deployment.to_string(),
            build_id: build.to_string(),
        }),
        ..Default::default()
    };
    let info = match conn
        .workflow_service()
        .describe_worker_deployment_version(tonic::Request::new(request))
        .await
    {
        Ok(r) => r.into_inner().worker_deployment_version_info,
        Err(s) if s.code() == Code::NotFound => None,
        Err(s) => return Err(s),
    };
    Ok(info
        .and_then(|i| i.drainage_info)
        .is_some_and(|d| d.status() == VersionDrainageStatus::Drained))
}

/// A workflow's status and the build ID its last workflow task completed on (its pinned
/// version, once it has one), read by the checker.
pub(crate) async fn workflow(
    conn: &Connection,
    namespace: &str,
    id: &str,
) -> Result<(String, Option<String>), tonic::Status> {
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
        .await?
        .into_inner()
        .workflow_execution_info
        .unwrap_or_default();
    let build = info
        .versioning_info
        .as_ref()
        .and_then(|v| v.deployment_version.as_ref())
        .map(|v| v.build_id.clone())
        .filter(|b| !b.is_empty());
    Ok((format!("{:?}", info.status()), build))
}
/// How many running workers each version has, by (worker deployment, build ID), from the
/// checker's own `ListWorkers` call: a worker counts while its status is Running and its
/// last heartbeat is under 3 minutes old (a killed worker is listed as running until then).
pub(crate) async fn running_workers(
    conn: &Connection,
    namespace: &str,
) -> Result<BTreeMap<(String, String), usize>, tonic::Status> {
    use temporalio_common::protos::temporal::api::enums::v1::WorkerStatus;
    use temporalio_common::protos::temporal::api::workflowservice::v1::ListWorkersRequest;
    let mut svc = conn.workflow_service();
    let mut out = BTreeMap::new();
    let mut token = Vec::new();
    let now = std::time::SystemTime::now();
    loop {
        let page = svc
            .list_workers(tonic::Request::new(ListWorkersRequest {
                namespace: namespace.to_string(),
                page_size: 1000,
                next_page_token: token,
                ..Default::default()
            }))
            .await?
            .into_inner();
        #[allow(deprecated)]
        for h in page
            .workers_info
            .iter()
            .filter_map(|i| i.worker_heartbeat.as_ref())
        {
            let fresh = h
                .heartbeat_time
                .as_ref()
                .and_then(|t| std::time::SystemTime::try_from(*t).ok())
                .is_some_and(|t| {
                    now.duration_since(t).unwrap_or_default() < std::time::Duration::from_secs(180)
                });
            if h.status() != WorkerStatus::Running || !fresh {
                continue;
            }
            if let Some(v) = &h.deployment_version {
                *out.entry((v.deployment_name.clone(), v.build_id.clone()))
                    .or_default() += 1;
            }
        }
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        token = page.next_page_token;
    }
}
