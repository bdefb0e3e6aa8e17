//! controller-runtime's metric names, beside ours: a TWC user's dashboards and alerts query
//! them (`controller_runtime_reconcile_total`, `workqueue_depth`, `rest_client_requests_total`,
//! `leader_election_master_status`), and after a switch they would go blank and never fire,
//! silently. Same names, labels and buckets as controller-runtime's (v0.2x) and client-go's
//! families, counted from what this controller does; docs/metrics.md says which are exact and
//! which approximate.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::HistogramFamily;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub controller: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct QueueLabels {
    pub controller: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RestLabels {
    pub code: String,
    pub host: String,
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LeaseLabels {
    pub name: String,
}

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

/// The work queue's duration buckets (client-go: 10 ns .. 1000 s, times 10).
fn queue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// A controller's name as controller-runtime gives it: the kind it reconciles, lower case
/// (TWC's are `workerdeployment` and `workerresourcetemplate`).
pub fn controller_name(kind: &str) -> String {
    kind.to_ascii_lowercase()
}

/// The families, registered at the top level (no `twc_` prefix).
pub(super) struct Runtime {
    pub reconciles: Family<ResultLabels, Counter>,
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    pub reconcile_time: HistogramFamily<ControllerLabels>,
    pub active_workers: Family<ControllerLabels, Gauge>,
    pub max_concurrent: Family<ControllerLabels, Gauge>,
    pub queue_depth: Family<QueueLabels, Gauge>,
    pub queue_adds: Family<QueueLabels, Counter>,
    pub queue_duration: HistogramFamily<QueueLabels>,
    pub work_duration: HistogramFamily<QueueLabels>,
    pub queue_retries: Family<QueueLabels, Counter>,
    pub rest_requests: Family<RestLabels, Counter>,
    pub leader: Family<LeaseLabels, Gauge>,
}

impl Runtime {
    pub fn new(registry: &mut Registry) -> Self {
        let r = Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_histogram),
            active_workers: Family::default(),
            max_concurrent: Family::default(),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            queue_duration: Family::new_with_constructor(queue_histogram),
            work_duration: Family::new_with_constructor(queue_histogram),
            queue_retries: Family::default(),
            rest_requests: Family::default(),
            leader: Family::default(),
        };
        let cr = registry.sub_registry_with_prefix("controller_runtime");
        cr.register(
            "reconcile",
            "Total number of reconciliations per controller",
            r.reconciles.clone(),
        );
        cr.register(
            "reconcile_errors",
            "Total number of reconciliation errors per controller",
            r.reconcile_errors.clone(),
        );
        cr.register(
            "reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            r.reconcile_time.clone(),
        );
        cr.register(
            "active_workers",
            "Number of currently used workers per controller",
            r.active_workers.clone(),
        );
        cr.register(
            "max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            r.max_concurrent.clone(),
        );
        let wq = registry.sub_registry_with_prefix("workqueue");
        wq.register("depth", "Current depth of workqueue", r.queue_depth.clone());
        wq.register(
            "adds",
            "Total number of adds handled by workqueue",
            r.queue_adds.clone(),
        );
        wq.register(
            "queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            r.queue_duration.clone(),
        );
        wq.register(
            "work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            r.work_duration.clone(),
        );
        wq.register(
            "retries",
            "Total number of retries handled by workqueue",
            r.queue_retries.clone(),
        );
        registry.sub_registry_with_prefix("rest_client").register(
            "requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            r.rest_requests.clone(),
        );
        registry.sub_registry_with_prefix("leader_election").register(
            "master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease",
            r.leader.clone(),
        );
        r
    }

    fn queue(controller: &str) -> QueueLabels {
        let name = controller_name(controller);
        QueueLabels {
            controller: name.clone(),
            name,
        }
    }

    /// A reconcile of `kind` ended: `result` is `success`, `error`, `requeue` or
    /// `requeue_after`, as controller-runtime counts them.
    pub fn reconciled(&self, kind: &str, result: &'static str, took: std::time::Duration) {
        let controller = controller_name(kind);
        self.reconciles
            .get_or_create(&ResultLabels {
                controller: controller.clone(),
                result,
            })
            .inc();
        let labels = ControllerLabels { controller };
        self.reconcile_time
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.work_duration
            .get_or_create(&Self::queue(kind))
            .observe(took.as_secs_f64());
        if result == "error" {
            self.reconcile_errors.get_or_create(&labels).inc();
            // An error is retried with a back-off, as controller-runtime's AddRateLimited.
            self.queue_retries.get_or_create(&Self::queue(kind)).inc();
        }
    }

    pub fn active_workers(&self, kind: &str) -> Gauge {
        self.active_workers
            .get_or_create(&ControllerLabels {
                controller: controller_name(kind),
            })
            .clone()
    }

    pub fn queue_depth(&self, kind: &str, depth: usize) {
        self.queue_depth
            .get_or_create(&Self::queue(kind))
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    pub fn queue_added(&self, kind: &str) {
        self.queue_adds.get_or_create(&Self::queue(kind)).inc();
    }

    pub fn queue_waited(&self, kind: &str, waited: std::time::Duration) {
        self.queue_duration
            .get_or_create(&Self::queue(kind))
            .observe(waited.as_secs_f64());
    }
}
