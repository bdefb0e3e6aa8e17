//! Prometheus metrics, one registry per process. Every metric here is listed in
//! `docs/metrics.md`; a test reads that file and scrapes `/metrics` so the two cannot drift.

use std::future::Future;
use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use kube::runtime::controller::Action;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use twc_api::VersionStatus;

mod conditions;
pub mod rest_client;
mod runtime;
mod work_queue;

pub use work_queue::WorkQueue;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc: &'static str,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcNameLabels {
    rpc: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PriorityLabels {
    priority: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
    rustc: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DialLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SecretLabels {
    namespace: String,
    secret: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlaceLabels {
    address: String,
    temporal_namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    admission: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerDeploymentLabels {
    namespace: String,
    worker_deployment: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    namespace: String,
    worker_deployment: String,
    status: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    // 1 ms .. ~33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every version status a WorkerDeployment reports, so that a status a WorkerDeployment no
/// longer has is set to 0 rather than left at its old value.
pub const VERSION_STATUSES: [&str; 6] = [
    "NotRegistered",
    "Inactive",
    "Ramping",
    "Current",
    "Draining",
    "Drained",
];

fn status_name(status: VersionStatus) -> &'static str {
    match status {
        VersionStatus::NotRegistered => "NotRegistered",
        VersionStatus::Inactive => "Inactive",
        VersionStatus::Ramping => "Ramping",
        VersionStatus::Current => "Current",
        VersionStatus::Draining => "Draining",
        VersionStatus::Drained => "Drained",
    }
}

const WORKER_DEPLOYMENT: &str = "WorkerDeployment";

/// The name prefixes of every family exported: ours, then controller-runtime's and client-go's
/// (docs/metrics.md lists each family; the tests read it by these).
pub const FAMILY_PREFIXES: &[&str] = &[
    "twc_",
    "controller_runtime_",
    "workqueue_",
    "rest_client_",
    "leader_election_",
];

/// The process's metrics.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
    in_flight: Family<ControllerLabels, Gauge>,
    rpcs: Family<RpcLabels, Counter>,
    rpc_duration: HistogramFamily<RpcNameLabels>,
    budget_wait: HistogramFamily<PriorityLabels>,
    state_reads: Family<SourceLabels, Counter>,
    dials: Family<DialLabels, Counter>,
    cert_expiry: Family<SecretLabels, Gauge>,
    versions: Family<VersionLabels, Gauge>,
    ramp: Family<WorkerDeploymentLabels, Gauge<f64, AtomicU64>>,
    leader: Gauge,
    remembered: Gauge,
    queue_depth: Family<ControllerLabels, Gauge>,
    build_info: Family<BuildLabels, Gauge>,
    restarts_in_progress: Family<PlaceLabels, Gauge>,
    restarts_waiting: Family<PlaceLabels, Gauge>,
    restarts: Family<AdmissionLabels, Counter>,
    conditions: conditions::Conditions,
    /// controller-runtime's names for TWC's dashboards and alerts.
    runtime: runtime::Runtime,
}

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The metrics of this process.
pub fn global() -> &'static Metrics {
    &GLOBAL
}

impl Metrics {
    fn new() -> Self {
        let mut root = Registry::default();
        let runtime = runtime::Runtime::new(&mut root);
        let registry = root.sub_registry_with_prefix("twc");
        let m = Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(seconds_histogram),
            in_flight: Family::default(),
            rpcs: Family::default(),
            rpc_duration: Family::new_with_constructor(seconds_histogram),
            budget_wait: Family::new_with_constructor(seconds_histogram),
            state_reads: Family::default(),
            dials: Family::default(),
            cert_expiry: Family::default(),
            versions: Family::default(),
            ramp: Family::default(),
            leader: Gauge::default(),
            remembered: Gauge::default(),
            queue_depth: Family::default(),
            build_info: Family::default(),
            restarts_in_progress: Family::default(),
            restarts_waiting: Family::default(),
            restarts: Family::default(),
            conditions: conditions::Conditions::default(),
            registry: Registry::default(),
            runtime,
        };
        registry.register(
            "reconcile",
            "Reconciles run, by controller",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that ended in an error, by controller and reason (the condition reason)",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile took, by controller",
            m.reconcile_duration.clone(),
        );
        registry.register(
            "reconciles_in_flight",
            "Reconciles running right now, by controller",
            m.in_flight.clone(),
        );
        registry.register(
            "temporal_rpc",
            "Temporal RPCs made, by RPC and gRPC status code",
            m.rpcs.clone(),
        );
        registry.register(
            "temporal_rpc_duration_seconds",
            "Latency of Temporal RPCs, by RPC",
            m.rpc_duration.clone(),
        );
        registry.register(
            "temporal_read_budget_wait_seconds",
            "Time a Worker Deployment read waited for the read budget of its Temporal namespace, by priority (moving or steady)",
            m.budget_wait.clone(),
        );
        registry.register(
            "temporal_state_reads",
            "How a reconcile got its worker deployment's state: described (read from Temporal) or reused (the last read, which the namespace's listing still agrees with)",
            m.state_reads.clone(),
        );
        registry.register(
            "temporal_client_dials",
            "Temporal clients dialled by the client pool, by result",
            m.dials.clone(),
        );
        registry.register(
            "client_certificate_expiry_timestamp_seconds",
            "When the mTLS client certificate of a credential Secret expires (Unix seconds), as last read to dial Temporal; alert on it minus time()",
            m.cert_expiry.clone(),
        );
        registry.register(
            "worker_deployment_versions",
            "Versions of each WorkerDeployment, by status",
            m.versions.clone(),
        );
        registry.register(
            "worker_deployment_ramp_percentage",
            "Share of new workflows routed to the ramping version (0 when none ramps)",
            m.ramp.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader-election Lease (or runs without election)",
            m.leader.clone(),
        );
        registry.register(
            "worker_deployments_remembered",
            "WorkerDeployments with something remembered between reconciles (failure streak, last state read, pods' troubles, certificate warning); falls as they are deleted",
            m.remembered.clone(),
        );
        registry.register(
            "work_queue_depth",
            "Objects triggered (by a watch event or a dependency) and waiting for their reconcile to start",
            m.queue_depth.clone(),
        );
        registry.register(
            "credential_restarts_in_progress",
            "Versioned Deployments restarting onto renewed credential Secrets, by Temporal address and namespace, as last counted by the restart pace",
            m.restarts_in_progress.clone(),
        );
        registry.register(
            "credential_restarts_waiting",
            "WorkerDeployments whose restarts onto renewed credential Secrets wait for the restart pace, by Temporal address and namespace",
            m.restarts_waiting.clone(),
        );
        registry.register(
            "credential_restarts",
            "Versioned Deployments restarted onto renewed credential Secrets, by admission: paced, or urgent (the old certificate was about to expire)",
            m.restarts.clone(),
        );
        registry.register(
            "build_info",
            "Always 1; the labels say what runs: crate version, git commit, compiler",
            m.build_info.clone(),
        );
        m.conditions.register(registry);
        Self {
            registry: root,
            ..m
        }
    }

    /// Records what the running binary was built from (`twc_build_info`), replacing any
    /// earlier record.
    pub fn set_build_info(&self, version: &str, commit: &str, rustc: &str) {
        self.build_info.clear();
        self.build_info
            .get_or_create(&BuildLabels {
                version: version.into(),
                commit: commit.into(),
                rustc: rustc.into(),
            })
            .set(1);
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Counts a reconcile of `controller` that took `took`.
    pub fn reconciled(&self, controller: &'static str, took: Duration) {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Counts a reconcile of `controller` that failed with `reason` (also one that records
    /// its failure in the status and returns normally: [`counted`] reports it as an error).
    pub fn reconcile_failed(&self, controller: &'static str, reason: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels { controller, reason })
            .inc();
        let _ = FAILED.try_with(|f| f.set(true));
    }

    /// Marks a reconcile of `controller` as running until the guard drops.
    pub fn in_flight(&self, controller: &'static str) -> InFlight {
        let gauges = [
            self.in_flight
                .get_or_create(&ControllerLabels { controller })
                .clone(),
            self.runtime.active_workers(controller),
        ];
        for g in &gauges {
            g.inc();
        }
        InFlight(gauges)
    }

    /// How many reconciles of `controller` may run at once
    /// (`controller_runtime_max_concurrent_reconciles`).
    pub fn set_max_concurrent(&self, controller: &'static str, concurrency: u16) {
        self.runtime
            .max_concurrent
            .get_or_create(&runtime::ControllerLabels {
                controller: runtime::controller_name(controller),
            })
            .set(i64::from(concurrency));
    }

    /// Whether this replica holds Lease `lease` (`leader_election_master_status`, only with
    /// leader election, as client-go reports it).
    pub fn set_lease_holder(&self, lease: &str, holding: bool) {
        self.runtime
            .leader
            .get_or_create(&runtime::LeaseLabels { name: lease.into() })
            .set(i64::from(holding));
    }

    /// One request to the apiserver answered with `code` (an HTTP status, or `<error>` when
    /// none came back), as client-go's `rest_client_requests_total` counts them.
    pub fn rest_request(&self, code: &str, method: &str, host: &str) {
        self.runtime
            .rest_requests
            .get_or_create(&runtime::RestLabels {
                code: code.into(),
                host: host.into(),
                method: method.into(),
            })
            .inc();
    }

    /// Counts one Temporal RPC.
    pub fn rpc(&self, rpc: &'static str, code: temporalio_client::tonic::Code, took: Duration) {
        self.rpcs
            .get_or_create(&RpcLabels {
                rpc,
                code: format!("{code:?}"),
            })
            .inc();
        self.rpc_duration
            .get_or_create(&RpcNameLabels { rpc })
            .observe(took.as_secs_f64());
    }

    /// Records how long a read waited for the budget.
    pub fn read_budget_waited(&self, priority: &'static str, waited: Duration) {
        self.budget_wait
            .get_or_create(&PriorityLabels { priority })
            .observe(waited.as_secs_f64());
    }

    /// Counts a state described (`reused == false`) or reused.
    pub fn state_read(&self, reused: bool) {
        let source = if reused { "reused" } else { "described" };
        self.state_reads
            .get_or_create(&SourceLabels { source })
            .inc();
    }

    /// Counts a client dial.
    pub fn dialed(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.dials.get_or_create(&DialLabels { result }).inc();
    }

    /// Records when the client certificate in Secret `namespace/secret` expires.
    pub fn client_certificate(&self, namespace: &str, secret: &str, not_after: SystemTime) {
        let secs = not_after
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or_default();
        let labels = SecretLabels {
            namespace: namespace.to_string(),
            secret: secret.to_string(),
        };
        self.cert_expiry.get_or_create(&labels).set(secs);
    }

    /// Records a WorkerDeployment's versions by status, its ramp and its conditions.
    pub fn worker_deployment(
        &self,
        namespace: &str,
        name: &str,
        statuses: &[VersionStatus],
        ramp: f32,
        conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    ) {
        self.conditions(WORKER_DEPLOYMENT, namespace, name, conditions);
        for status in VERSION_STATUSES {
            let n = statuses
                .iter()
                .filter(|s| status_name(**s) == status)
                .count();
            self.versions
                .get_or_create(&VersionLabels {
                    namespace: namespace.into(),
                    worker_deployment: name.into(),
                    status,
                })
                .set(n as i64);
        }
        self.ramp
            .get_or_create(&WorkerDeploymentLabels {
                namespace: namespace.into(),
                worker_deployment: name.into(),
            })
            .set(f64::from(ramp));
    }

    /// Drops a deleted WorkerDeployment's series.
    pub fn forget_worker_deployment(&self, namespace: &str, name: &str) {
        self.forget_conditions(WORKER_DEPLOYMENT, namespace, name);
        for status in VERSION_STATUSES {
            self.versions.remove(&VersionLabels {
                namespace: namespace.into(),
                worker_deployment: name.into(),
                status,
            });
        }
        self.ramp.remove(&WorkerDeploymentLabels {
            namespace: namespace.into(),
            worker_deployment: name.into(),
        });
    }

    /// How many WorkerDeployments something is remembered of between reconciles.
    pub fn remembered(&self, count: usize) {
        self.remembered
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// The restart pace at Temporal `address` and `namespace`: restarts under way,
    /// WorkerDeployments waiting.
    pub fn restarts(&self, address: &str, namespace: &str, in_progress: usize, waiting: usize) {
        let labels = PlaceLabels {
            address: address.into(),
            temporal_namespace: namespace.into(),
        };
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.restarts_in_progress
            .get_or_create(&labels)
            .set(n(in_progress));
        self.restarts_waiting.get_or_create(&labels).set(n(waiting));
    }

    /// Counts a restart onto renewed credentials, `urgent` when it went ahead of the pace.
    pub fn restarted(&self, urgent: bool) {
        let admission = if urgent { "urgent" } else { "paced" };
        self.restarts
            .get_or_create(&AdmissionLabels { admission })
            .inc();
    }

    /// Whether this replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }
}

/// Decrements the in-flight gauges when dropped (also when a reconcile is cancelled).
pub struct InFlight([Gauge; 2]);

impl Drop for InFlight {
    fn drop(&mut self) {
        for g in &self.0 {
            g.dec();
        }
    }
}

tokio::task_local! {
    /// Set when the reconcile running on this task recorded a failure.
    static FAILED: std::cell::Cell<bool>;
}

/// Runs one reconcile of `controller`, counting it, its time and its failure reason.
pub async fn counted<E>(
    controller: &'static str,
    reconcile: impl Future<Output = Result<Action, E>>,
    reason: impl Fn(&E) -> &'static str,
) -> Result<Action, E> {
    let m = global();
    let _running = m.in_flight(controller);
    let start = std::time::Instant::now();
    let (result, failed) = FAILED
        .scope(std::cell::Cell::new(false), async {
            let result = reconcile.await;
            (result, FAILED.with(std::cell::Cell::get))
        })
        .await;
    let took = start.elapsed();
    m.reconciled(controller, took);
    // controller-runtime's result label: a failure is `error` (whether returned, or recorded in
    // the status as the WorkerDeployment's reconcile does), a reconcile that asks to run again
    // later `requeue_after` (most do: the steady poll), one that waits for a change `success`.
    let outcome = match &result {
        Err(e) => {
            m.reconcile_failed(controller, reason(e));
            "error"
        }
        Ok(_) if failed => "error",
        Ok(a) if *a == Action::await_change() => "success",
        Ok(_) => "requeue_after",
    };
    m.runtime.reconciled(controller, outcome, took);
    result
}

/// Runs one Temporal RPC and counts it.
pub async fn rpc<T>(
    name: &'static str,
    call: impl Future<Output = Result<T, temporalio_client::tonic::Status>>,
) -> Result<T, temporalio_client::tonic::Status> {
    let start = std::time::Instant::now();
    let result = call.await;
    let code = match &result {
        Ok(_) => temporalio_client::tonic::Code::Ok,
        Err(s) => s.code(),
    };
    global().rpc(name, code, start.elapsed());
    result
}

#[cfg(test)]
mod dashboard_tests;

#[cfg(test)]
mod tests;
