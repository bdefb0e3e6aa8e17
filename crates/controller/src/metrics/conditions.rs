//! Every object's conditions as a gauge, in kube-state-metrics' shape: one series per object
//! and condition type, its status and reason as labels, value 1. A condition that changes
//! replaces its series (the old one is removed, not left at 0), so `== 1` selects what holds
//! now. The shipped alert rules (`charts/temporal-worker-controller/files/prometheus/alerts.yaml`)
//! read it: a crash-looping target, a stalled WorkerDeployment, a Connection not Ready. Kinds:
//! WorkerDeployment, WorkerResourceTemplate, Connection, ClusterConnection.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The labels of one object's condition.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    kind: &'static str,
    namespace: String,
    name: String,
    condition: String,
    status: String,
    reason: String,
}

/// One object: its kind, namespace ("" when cluster-scoped) and name.
type ObjectKey = (&'static str, String, String);

/// `twc_status_condition`, and the series each object has now (to remove them when they
/// change or the object goes).
#[derive(Default)]
pub(super) struct Conditions {
    family: Family<ConditionLabels, Gauge>,
    series: Mutex<HashMap<ObjectKey, Vec<ConditionLabels>>>,
}

impl Conditions {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "status_condition",
            "1 for each condition an object's status has now, by kind, namespace, name, condition type, status and reason",
            self.family.clone(),
        );
    }

    /// Sets the series of `kind` `namespace/name` to its `conditions`.
    fn set(&self, kind: &'static str, namespace: &str, name: &str, conditions: &[Condition]) {
        let now: Vec<ConditionLabels> = conditions
            .iter()
            .map(|c| ConditionLabels {
                kind,
                namespace: namespace.into(),
                name: name.into(),
                condition: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
            })
            .collect();
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let key = (kind, namespace.to_string(), name.to_string());
        for old in series.get(&key).into_iter().flatten() {
            if !now.contains(old) {
                self.family.remove(old);
            }
        }
        for labels in &now {
            self.family.get_or_create(labels).set(1);
        }
        if now.is_empty() {
            series.remove(&key);
        } else {
            series.insert(key, now);
        }
    }
}

impl super::Metrics {
    /// Records the conditions of `kind` `namespace/name` as its status has them now
    /// (`twc_status_condition`; `namespace` is empty for a ClusterConnection).
    pub fn conditions(
        &self,
        kind: &'static str,
        namespace: &str,
        name: &str,
        conditions: &[Condition],
    ) {
        self.conditions.set(kind, namespace, name, conditions);
    }

    /// Drops the condition series of `kind` `namespace/name` (deleted).
    pub fn forget_conditions(&self, kind: &'static str, namespace: &str, name: &str) {
        self.conditions.set(kind, namespace, name, &[]);
    }
}
