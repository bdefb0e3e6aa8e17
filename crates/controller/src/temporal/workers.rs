//! Who polls: the namespace's worker list (`ListWorkers`, fed by the workers' own
//! `RecordWorkerHeartbeat`), one paged call per namespace per interval however many
//! WorkerDeployments read it, and `DescribeTaskQueue` for a version's queues where the list
//! cannot tell (a server without it, or workers that do not heartbeat).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use temporalio_client::{Connection, tonic};
use temporalio_common::protos::temporal::api::enums::v1::WorkerStatus;
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    ListWorkersRequest, ListWorkersResponse,
};

use super::reads::{Budget, Priority};
use super::{Status, WorkerDeploymentRef};
use crate::metrics::rpc;

/// A worker whose last heartbeat is older than this is not counted as polling (the SDKs
/// heartbeat every 60 s by default; a worker killed without a word stays listed as running).
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(180);

const PAGE_SIZE: i32 = 1000;

/// One running worker as the list shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenWorker {
    /// The Temporal worker deployment's name (`<namespace>/<name>` for ours).
    pub deployment: String,
    pub build_id: String,
    pub task_queue: String,
    /// The host it runs on, as its SDK reports it (a pod's hostname: its name, cut at 63
    /// characters); empty when not reported.
    pub host: String,
}

/// What the running workers of one version show: the task queues they poll and the hosts
/// they run on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionWorkers {
    pub queues: BTreeSet<String>,
    pub hosts: BTreeSet<String>,
}

/// Each version's running workers, by worker deployment and build ID.
pub type Polling = HashMap<String, HashMap<String, VersionWorkers>>;

/// Every running, recently heartbeating, versioned worker of `namespace`, one budget token a
/// page, as of `now`.
pub async fn list(
    conn: &Connection,
    namespace: &str,
    budget: &Budget,
    now: SystemTime,
) -> Result<Polling, Status> {
    let mut svc = conn.workflow_service();
    let mut out = Polling::new();
    let mut token = Vec::new();
    loop {
        budget.take(Priority::Steady).await;
        let page = rpc(
            "ListWorkers",
            svc.list_workers(tonic::Request::new(ListWorkersRequest {
                namespace: namespace.to_string(),
                page_size: PAGE_SIZE,
                next_page_token: token,
                ..Default::default()
            })),
        )
        .await?
        .into_inner();
        for w in running(&page, now) {
            let version = out
                .entry(w.deployment)
                .or_default()
                .entry(w.build_id)
                .or_default();
            version.queues.insert(w.task_queue);
            if !w.host.is_empty() {
                version.hosts.insert(w.host);
            }
        }
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        token = page.next_page_token;
    }
}

/// The versioned workers of one page that run and heartbeat. The full records (with the last
/// heartbeat's time) when the server sends them, else the short ones (status only: the
/// server's own expiry is trusted then).
#[allow(deprecated)]
fn running(page: &ListWorkersResponse, now: SystemTime) -> Vec<SeenWorker> {
    let seen = |deployment: Option<
        &temporalio_common::protos::temporal::api::deployment::v1::WorkerDeploymentVersion,
    >,
                task_queue: &str,
                host: &str| {
        deployment
            .filter(|v| !v.build_id.is_empty() && !v.deployment_name.is_empty())
            .filter(|_| !task_queue.is_empty())
            .map(|v| SeenWorker {
                deployment: v.deployment_name.clone(),
                build_id: v.build_id.clone(),
                task_queue: task_queue.to_string(),
                host: host.to_string(),
            })
    };
    if !page.workers_info.is_empty() {
        return page
            .workers_info
            .iter()
            .filter_map(|i| i.worker_heartbeat.as_ref())
            .filter(|h| h.status() == WorkerStatus::Running)
            .filter(|h| {
                let at = h
                    .heartbeat_time
                    .as_ref()
                    .and_then(|t| SystemTime::try_from(*t).ok());
                at.is_none_or(|at| now.duration_since(at).unwrap_or_default() < HEARTBEAT_STALE)
            })
            .filter_map(|h| {
                let host = h.host_info.as_ref().map(|i| i.host_name.as_str());
                seen(
                    h.deployment_version.as_ref(),
                    &h.task_queue,
                    host.unwrap_or_default(),
                )
            })
            .collect();
    }
    page.workers
        .iter()
        .filter(|w| w.status() == WorkerStatus::Running)
        .filter_map(|w| seen(w.deployment_version.as_ref(), &w.task_queue, &w.host_name))
        .collect()
}

impl WorkerDeploymentRef<'_> {
    /// `DescribeTaskQueue` of `queue`'s workflow pollers: whether a worker of `build_id`
    /// polled it lately (the server keeps pollers for `matching.PollerHistoryTTL`, 5 minutes
    /// by default).
    pub async fn polled_by(&self, queue: &str, build_id: &str) -> Result<bool, Status> {
        let queue = super::gates::TaskQueueRef {
            name: queue.to_string(),
            workflow: true,
        };
        Ok(self.pollers(&queue).await?.iter().any(|p| {
            p.deployment_options
                .as_ref()
                .is_some_and(|o| o.build_id == build_id && o.deployment_name == self.name)
        }))
    }
}

#[cfg(test)]
mod tests {
    use temporalio_common::protos::temporal::api::deployment::v1::WorkerDeploymentVersion;
    use temporalio_common::protos::temporal::api::worker::v1::{
        WorkerHeartbeat, WorkerHostInfo, WorkerInfo, WorkerListInfo,
    };

    use super::*;

    fn version(d: &str, b: &str) -> Option<WorkerDeploymentVersion> {
        Some(WorkerDeploymentVersion {
            deployment_name: d.into(),
            build_id: b.into(),
        })
    }

    #[test]
    #[allow(deprecated)]
    fn only_running_versioned_workers_with_a_recent_heartbeat_poll() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        let beat = |queue: &str, build: &str, status: WorkerStatus, ago_s: u64| WorkerInfo {
            worker_heartbeat: Some(WorkerHeartbeat {
                task_queue: queue.into(),
                deployment_version: version("ns/w", build),
                status: status as i32,
                heartbeat_time: Some((now - Duration::from_secs(ago_s)).into()),
                host_info: Some(WorkerHostInfo {
                    host_name: "w-activities-b1-pod".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        };
        let page = ListWorkersResponse {
            workers_info: vec![
                beat("q", "b1", WorkerStatus::Running, 30),
                // Killed without a word: still "running", its heartbeats stopped long ago.
                beat("q2", "b1", WorkerStatus::Running, 600),
                beat("q3", "b1", WorkerStatus::ShuttingDown, 1),
                // Unversioned: no deployment version.
                WorkerInfo {
                    worker_heartbeat: Some(WorkerHeartbeat {
                        task_queue: "q".into(),
                        status: WorkerStatus::Running as i32,
                        ..Default::default()
                    }),
                },
            ],
            ..Default::default()
        };
        let seen = running(&page, now);
        assert_eq!(
            seen,
            vec![SeenWorker {
                deployment: "ns/w".into(),
                build_id: "b1".into(),
                task_queue: "q".into(),
                host: "w-activities-b1-pod".into(),
            }]
        );
        // A server that sends the short records only: their status is what there is.
        let short = ListWorkersResponse {
            workers: vec![
                WorkerListInfo {
                    task_queue: "q".into(),
                    deployment_version: version("ns/w", "b2"),
                    status: WorkerStatus::Running as i32,
                    ..Default::default()
                },
                WorkerListInfo {
                    task_queue: "q".into(),
                    deployment_version: version("ns/w", "b3"),
                    status: WorkerStatus::Shutdown as i32,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let seen: Vec<String> = running(&short, now)
            .into_iter()
            .map(|w| w.build_id)
            .collect();
        assert_eq!(seen, vec!["b2".to_string()]);
    }
}
