//! WorkerResourceTemplates: one namespaced object (an HPA, a PDB, ...) stamped out per build
//! ID of a WorkerDeployment that has a live versioned Deployment, as TWC does.
//!
//! * `render`: names, injected fields, hash and the template checks (pure).
//! * `plan`: what to apply and delete, and the status (pure).
//! * `reconcile`: the reconciler of WorkerResourceTemplates: observe (watch caches, API
//!   discovery), plan, execute (server-side apply, delete), status written once.
//!
//! The reconciler is separate from the WorkerDeployment's: it runs on changes of the
//! template, of its WorkerDeployment (UID, spec, deletion) and of the WorkerDeployment's
//! versioned Deployments (created, deleting, deleted), mapped to the templates through the
//! templates' watch cache ([`Triggers`]), and on a slow resync.

pub mod plan;
pub mod reconcile;
pub mod render;
pub mod sunset;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use tokio::sync::mpsc::UnboundedSender;
use twc_api::WorkerResourceTemplate;

use crate::cached::AsWorkerDeployment;
use crate::scoped::Scoped;

pub use reconcile::{Context, Discovery, error_policy, reconcile};

/// The kinds a template may render unless configured otherwise (`--wrt-allowed-kinds`), each
/// with its API group; the controller's generated RBAC grants exactly these.
pub const DEFAULT_ALLOWED_KINDS: &[&str] = &[
    "autoscaling/HorizontalPodAutoscaler",
    "policy/PodDisruptionBudget",
];

/// Condition reasons of a WorkerResourceTemplate (`Ready`), also its Warning event reasons.
pub mod reason {
    /// Every live build ID's copy is applied.
    pub const ALL_VERSIONS_APPLIED: &str = "AllVersionsApplied";
    /// An apply failed (the apiserver refused it, or the kind is not served).
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// The referenced WorkerDeployment does not exist.
    pub const WORKER_DEPLOYMENT_NOT_FOUND: &str = "WorkerDeploymentNotFound";
    /// `spec.workerGroup` names a group the WorkerDeployment does not have (or is empty for
    /// one with groups), as upstream's worker groups say.
    pub const WORKER_GROUP_NOT_FOUND: &str = "WorkerGroupNotFound";
    /// The template fails a check TWC's validating webhook makes (this controller runs no
    /// webhook): nothing is applied until it is fixed.
    pub const INVALID_TEMPLATE: &str = "InvalidTemplate";
}

/// What makes a template worth reconciling: its spec, owners and deletion, not our status
/// writes.
pub fn predicate(wrt: &WorkerResourceTemplate) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    wrt.metadata.generation.hash(&mut h);
    wrt.metadata.deletion_timestamp.is_some().hash(&mut h);
    for o in wrt.owner_references() {
        (&o.uid, o.controller).hash(&mut h);
    }
    Some(h.finish())
}

/// Re-queues the templates of a WorkerDeployment when it or one of its versioned Deployments
/// appears, changes in a way that matters, or goes; found in the templates' watch cache.
#[derive(Clone)]
pub struct Triggers {
    templates: Scoped<WorkerResourceTemplate>,
    tx: UnboundedSender<ObjectRef<WorkerResourceTemplate>>,
    seen: Arc<Mutex<HashMap<String, u64>>>,
}

impl Triggers {
    pub fn new(
        templates: Scoped<WorkerResourceTemplate>,
        tx: UnboundedSender<ObjectRef<WorkerResourceTemplate>>,
    ) -> Self {
        Self {
            templates,
            tx,
            seen: Default::default(),
        }
    }

    fn notify(&self, namespace: &str, worker_deployment: &str) {
        for t in self.templates.in_namespace(namespace) {
            if t.spec.worker_deployment_name() == Some(worker_deployment) {
                let _ = self.tx.send(ObjectRef::from_obj(t.as_ref()));
            }
        }
    }

    /// Whether `key`'s fingerprint changed (or it went away).
    fn changed(&self, kind: &str, key: String, fingerprint: Option<u64>) -> bool {
        let Ok(mut seen) = self.seen.lock() else {
            return true;
        };
        let key = format!("{kind}/{key}");
        match fingerprint {
            None => seen.remove(&key).is_some(),
            Some(f) => seen.insert(key, f) != Some(f),
        }
    }

    fn each<K: Resource + Clone>(event: &Event<K>, mut f: impl FnMut(&K, bool /* deleted */)) {
        match event {
            Event::Apply(o) | Event::InitApply(o) => f(o, false),
            Event::Delete(o) => f(o, true),
            Event::Init | Event::InitDone => {}
        }
    }

    /// A WorkerDeployment event: its UID, spec (Temporal namespace), deletion, or which of its
    /// versions are routed to or drained changed.
    pub fn worker_deployment<W: AsWorkerDeployment + Resource + Clone>(&self, event: &Event<W>) {
        Self::each(event, |wd, deleted| {
            let routing = wd.routing();
            let wd = wd.worker_deployment();
            let wd = wd.as_ref();
            let ns = wd.namespace().unwrap_or_default();
            let fingerprint = (!deleted).then(|| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (&wd.metadata.uid, wd.metadata.generation).hash(&mut h);
                wd.metadata.deletion_timestamp.is_some().hash(&mut h);
                // Which versions are routed to and which drained, for autoscalers at sunset.
                routing.hash(&mut h);
                h.finish()
            });
            if self.changed("wd", format!("{ns}/{}", wd.name_any()), fingerprint) {
                self.notify(&ns, &wd.name_any());
            }
        });
    }

    /// A versioned Deployment event: created, deleting or deleted.
    pub fn deployment(&self, event: &Event<crate::children::CachedDeployment>) {
        Self::each(event, |d, deleted| {
            let Some(owner) = d
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true) && o.kind == "WorkerDeployment")
            else {
                return;
            };
            let ns = d.namespace().unwrap_or_default();
            let fingerprint = (!deleted).then(|| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (&d.metadata.uid, d.metadata.deletion_timestamp.is_some()).hash(&mut h);
                h.finish()
            });
            if self.changed("deployment", format!("{ns}/{}", d.name_any()), fingerprint) {
                self.notify(&ns, &owner.name);
            }
        });
    }
}
