//! The Temporal side: the client pool and the worker-deployment RPCs the controller uses,
//! mapped into plain values the planner reads.

pub mod credentials;
pub mod gates;
pub use gates::GatePayload;
pub mod missing;
pub mod pool;
pub mod reads;
pub mod server;
pub mod workers;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use temporalio_client::{Connection, tonic};
use temporalio_common::protos::temporal::api::deployment::v1::WorkerDeploymentVersion as PbVersion;
use temporalio_common::protos::temporal::api::deployment::v1::worker_deployment_info::WorkerDeploymentVersionSummary;
use temporalio_common::protos::temporal::api::enums::v1::{
    VersionDrainageStatus, WorkerDeploymentVersionStatus,
};
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    DeleteWorkerDeploymentRequest, DeleteWorkerDeploymentVersionRequest,
    DescribeWorkerDeploymentRequest, ListWorkerDeploymentsRequest,
    SetWorkerDeploymentCurrentVersionRequest, SetWorkerDeploymentManagerRequest,
    SetWorkerDeploymentRampingVersionRequest,
    set_worker_deployment_manager_request::NewManagerIdentity,
};
use twc_api::VersionStatus;

pub use crate::observed::{DeploymentState, Listed, RoutingMark, VersionInfo};
pub use tonic::{Code, Status};

/// Every worker deployment of a Temporal namespace by name, from one paged
/// `ListWorkerDeployments`, each page after a token of `budget` at `priority`.
pub async fn list(
    conn: &Connection,
    namespace: &str,
    budget: &reads::Budget,
    priority: reads::Priority,
) -> Result<std::collections::HashMap<String, Listed>, Status> {
    let mut svc = conn.workflow_service();
    let mut out = std::collections::HashMap::new();
    let mut token = Vec::new();
    loop {
        // Each page is a read the server counts against the namespace's limit.
        budget.take(priority).await;
        let resp = crate::metrics::rpc(
            "ListWorkerDeployments",
            svc.list_worker_deployments(tonic::Request::new(ListWorkerDeploymentsRequest {
                namespace: namespace.to_string(),
                page_size: LIST_PAGE_SIZE,
                next_page_token: token,
            })),
        )
        .await?
        .into_inner();
        for d in resp.worker_deployments {
            let routing = d.routing_config.unwrap_or_default();
            let build = |v: &Option<PbVersion>| v.as_ref().map(|v| v.build_id.clone());
            out.insert(
                d.name,
                Listed {
                    current_build_id: build(&routing.current_deployment_version),
                    ramping_build_id: build(&routing.ramping_deployment_version),
                    ramp_percentage: routing.ramping_version_percentage,
                    ramping_since: time(&routing.ramping_version_changed_time),
                    ramp_changed_at: time(&routing.ramping_version_percentage_changed_time),
                    routing: RoutingMark {
                        revision: routing.revision_number,
                        current_changed_at: time(&routing.current_version_changed_time),
                    },
                    latest_build_id: d
                        .latest_version_summary
                        .and_then(|v| v.deployment_version)
                        .map(|v| v.build_id),
                },
            );
        }
        if resp.next_page_token.is_empty() {
            return Ok(out);
        }
        token = resp.next_page_token;
    }
}

/// Worker deployments per `ListWorkerDeployments` page.
const LIST_PAGE_SIZE: i32 = 1000;

fn time(ts: &Option<prost_wkt_types::Timestamp>) -> Option<SystemTime> {
    let ts = ts.as_ref()?;
    if ts.seconds <= 0 {
        return None;
    }
    Some(SystemTime::UNIX_EPOCH + Duration::new(ts.seconds as u64, ts.nanos.max(0) as u32))
}

/// `DescribeWorkerDeployment`; `NotFound` becomes an empty state.
pub async fn describe(
    conn: &Connection,
    namespace: &str,
    deployment: &str,
) -> Result<DeploymentState, Status> {
    let mut svc = conn.workflow_service();
    let resp = match crate::metrics::rpc(
        "DescribeWorkerDeployment",
        svc.describe_worker_deployment(tonic::Request::new(DescribeWorkerDeploymentRequest {
            namespace: namespace.to_string(),
            deployment_name: deployment.to_string(),
        })),
    )
    .await
    {
        Ok(r) => r.into_inner(),
        // Only "no such worker deployment" is an empty state; a missing Temporal namespace,
        // or a NotFound of no known shape, is not known (see `missing`).
        Err(s) if missing::is_absent(&s) => return Ok(DeploymentState::default()),
        Err(s) => return Err(s),
    };
    let info = resp.worker_deployment_info.unwrap_or_default();
    let routing = info.routing_config.unwrap_or_default();
    let current = routing
        .current_deployment_version
        .as_ref()
        .map(|v| v.build_id.clone());
    let ramping = routing
        .ramping_deployment_version
        .as_ref()
        .map(|v| v.build_id.clone());
    let mut versions = BTreeMap::new();
    for v in &info.version_summaries {
        let Some(build_id) = v.deployment_version.as_ref().map(|d| d.build_id.clone()) else {
            continue;
        };
        let status = version_status(v, current.as_deref(), ramping.as_deref(), &build_id);
        versions.insert(
            build_id,
            VersionInfo {
                status,
                drainage_changed_at: v
                    .drainage_info
                    .as_ref()
                    .and_then(|d| time(&d.last_changed_time)),
                last_current_at: time(&v.last_current_time),
                created_at: time(&v.create_time),
            },
        );
    }
    Ok(DeploymentState {
        exists: true,
        conflict_token: resp.conflict_token,
        current_build_id: current,
        ramping_build_id: ramping,
        ramp_percentage: routing.ramping_version_percentage,
        ramping_since: time(&routing.ramping_version_changed_time),
        ramp_changed_at: time(&routing.ramping_version_percentage_changed_time),
        manager_identity: info.manager_identity,
        last_modifier_identity: info.last_modifier_identity,
        versions,
        routing: RoutingMark {
            revision: routing.revision_number,
            current_changed_at: time(&routing.current_version_changed_time),
        },
    })
}

/// Where one version stands, from the routing config (current, ramping) and its summary.
fn version_status(
    v: &WorkerDeploymentVersionSummary,
    current: Option<&str>,
    ramping: Option<&str>,
    build_id: &str,
) -> VersionStatus {
    if current == Some(build_id) {
        return VersionStatus::Current;
    }
    if ramping == Some(build_id) {
        return VersionStatus::Ramping;
    }
    let drainage = v
        .drainage_info
        .as_ref()
        .map(|d| d.status())
        .unwrap_or(VersionDrainageStatus::Unspecified);
    match (v.status(), drainage) {
        (WorkerDeploymentVersionStatus::Drained, _) | (_, VersionDrainageStatus::Drained) => {
            VersionStatus::Drained
        }
        (WorkerDeploymentVersionStatus::Draining, _) | (_, VersionDrainageStatus::Draining) => {
            VersionStatus::Draining
        }
        // Demoted moments ago (from current or from a ramp), drainage not computed yet: it may
        // have pinned workflows, so treat it as Draining, never as an idle Inactive version
        // (TWC #573). The summary's `ramping_since_time` is empty once the ramp ended, so the
        // sign of "was routed to" is the deactivation time (1.5.1 and 1.9.1 both set it).
        _ if v.last_current_time.is_some() || v.last_deactivation_time.is_some() => {
            VersionStatus::Draining
        }
        _ => VersionStatus::Inactive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use temporalio_common::protos::temporal::api::deployment::v1::VersionDrainageInfo;

    fn summary() -> WorkerDeploymentVersionSummary {
        WorkerDeploymentVersionSummary::default()
    }

    #[test]
    fn a_version_demoted_from_a_ramp_before_drainage_is_computed_is_draining() {
        let mut v = summary();
        v.last_deactivation_time = Some(Default::default());
        assert_eq!(
            version_status(&v, Some("a"), None, "b"),
            VersionStatus::Draining
        );
    }

    #[test]
    fn a_version_demoted_from_current_before_drainage_is_computed_is_draining() {
        let mut v = summary();
        v.last_current_time = Some(Default::default());
        assert_eq!(version_status(&v, None, None, "b"), VersionStatus::Draining);
    }

    #[test]
    fn a_version_never_routed_to_is_inactive_and_routing_wins_over_the_summary() {
        let v = summary();
        assert_eq!(version_status(&v, None, None, "b"), VersionStatus::Inactive);
        let mut drained = summary();
        drained.drainage_info = Some(VersionDrainageInfo {
            status: VersionDrainageStatus::Drained as i32,
            ..Default::default()
        });
        assert_eq!(
            version_status(&drained, None, None, "b"),
            VersionStatus::Drained
        );
        assert_eq!(
            version_status(&drained, Some("b"), None, "b"),
            VersionStatus::Current
        );
        assert_eq!(
            version_status(&drained, None, Some("b"), "b"),
            VersionStatus::Ramping
        );
    }
}

/// One worker deployment in one Temporal namespace, written to as `identity`.
#[derive(Clone, Copy)]
pub struct WorkerDeploymentRef<'a> {
    pub conn: &'a Connection,
    pub namespace: &'a str,
    pub name: &'a str,
    pub identity: &'a str,
}

impl WorkerDeploymentRef<'_> {
    fn version(&self, build_id: &str) -> Option<PbVersion> {
        Some(PbVersion {
            deployment_name: self.name.to_string(),
            build_id: build_id.to_string(),
        })
    }

    /// `DescribeWorkerDeployment`; `NotFound` becomes an empty state.
    pub async fn describe(&self) -> Result<DeploymentState, Status> {
        describe(self.conn, self.namespace, self.name).await
    }

    /// `SetWorkerDeploymentManager(self)`; returns the new conflict token.
    pub async fn claim_manager(&self, token: Vec<u8>) -> Result<Vec<u8>, Status> {
        let mut svc = self.conn.workflow_service();
        let request = SetWorkerDeploymentManagerRequest {
            namespace: self.namespace.to_string(),
            deployment_name: self.name.to_string(),
            new_manager_identity: Some(NewManagerIdentity::Self_(true)),
            conflict_token: token,
            identity: self.identity.to_string(),
        };
        Ok(crate::metrics::rpc(
            "SetWorkerDeploymentManager",
            svc.set_worker_deployment_manager(tonic::Request::new(request)),
        )
        .await?
        .into_inner()
        .conflict_token)
    }

    /// `SetWorkerDeploymentCurrentVersion`; `build_id` "" means unversioned.
    pub async fn set_current(
        &self,
        build_id: &str,
        token: Vec<u8>,
        ignore_missing_task_queues: bool,
    ) -> Result<Vec<u8>, Status> {
        let mut svc = self.conn.workflow_service();
        let request = SetWorkerDeploymentCurrentVersionRequest {
            namespace: self.namespace.to_string(),
            deployment_name: self.name.to_string(),
            build_id: build_id.to_string(),
            conflict_token: token,
            identity: self.identity.to_string(),
            ignore_missing_task_queues,
            ..Default::default()
        };
        Ok(crate::metrics::rpc(
            "SetWorkerDeploymentCurrentVersion",
            svc.set_worker_deployment_current_version(tonic::Request::new(request)),
        )
        .await?
        .into_inner()
        .conflict_token)
    }

    /// `SetWorkerDeploymentRampingVersion`; `build_id` "" with 0 clears the ramp.
    pub async fn set_ramping(
        &self,
        build_id: &str,
        percentage: f32,
        token: Vec<u8>,
    ) -> Result<Vec<u8>, Status> {
        let mut svc = self.conn.workflow_service();
        let request = SetWorkerDeploymentRampingVersionRequest {
            namespace: self.namespace.to_string(),
            deployment_name: self.name.to_string(),
            build_id: build_id.to_string(),
            percentage,
            conflict_token: token,
            identity: self.identity.to_string(),
            ..Default::default()
        };
        Ok(crate::metrics::rpc(
            "SetWorkerDeploymentRampingVersion",
            svc.set_worker_deployment_ramping_version(tonic::Request::new(request)),
        )
        .await?
        .into_inner()
        .conflict_token)
    }

    /// `DeleteWorkerDeploymentVersion`; deleting a missing version succeeds.
    pub async fn delete_version(&self, build_id: &str, skip_drainage: bool) -> Result<(), Status> {
        let mut svc = self.conn.workflow_service();
        let request = DeleteWorkerDeploymentVersionRequest {
            namespace: self.namespace.to_string(),
            deployment_version: self.version(build_id),
            skip_drainage,
            identity: self.identity.to_string(),
            ..Default::default()
        };
        match crate::metrics::rpc(
            "DeleteWorkerDeploymentVersion",
            svc.delete_worker_deployment_version(tonic::Request::new(request)),
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(s) if missing::is_absent(&s) => Ok(()),
            Err(s) => Err(s),
        }
    }

    /// `DeleteWorkerDeployment`; deleting a missing deployment succeeds.
    pub async fn delete(&self) -> Result<(), Status> {
        let mut svc = self.conn.workflow_service();
        let request = DeleteWorkerDeploymentRequest {
            namespace: self.namespace.to_string(),
            deployment_name: self.name.to_string(),
            identity: self.identity.to_string(),
        };
        match crate::metrics::rpc(
            "DeleteWorkerDeployment",
            svc.delete_worker_deployment(tonic::Request::new(request)),
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(s) if missing::is_absent(&s) => Ok(()),
            Err(s) => Err(s),
        }
    }
}

/// Errors after which a pooled client must be dropped and re-dialled.
pub fn is_connection_error(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unauthenticated | Code::PermissionDenied | Code::Unavailable
    )
}
