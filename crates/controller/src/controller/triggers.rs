//! What triggers a reconcile: the senders of each reconciler's trigger channel per scope, and
//! the filters that tell which watch events are worth a reconcile.

use std::collections::HashMap;

use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;
use twc_api::{ClusterConnection, Connection, ConnectionKind};

use super::{Scope, scope_of};
use crate::cached::CachedWorkerDeployment;
use crate::children::CachedDeployment;
use crate::connections::ConnKey;

pub(super) struct Senders {
    pub(super) wd: HashMap<Scope, UnboundedSender<ObjectRef<CachedWorkerDeployment>>>,
    pub(super) connection: HashMap<Scope, UnboundedSender<ObjectRef<Connection>>>,
    pub(super) cluster: UnboundedSender<ObjectRef<ClusterConnection>>,
    pub(super) scopes: Vec<Scope>,
}

impl Senders {
    pub(super) fn workers(&self, users: impl IntoIterator<Item = (String, String)>) {
        for (ns, name) in users {
            if let Some(tx) = scope_of(&self.scopes, &ns).and_then(|s| self.wd.get(&s)) {
                let _ = tx.send(ObjectRef::new(&name).within(&ns));
            }
        }
    }

    pub(super) fn connection(&self, key: &ConnKey) {
        match (&key.kind, &key.namespace) {
            (ConnectionKind::ClusterConnection, _) => {
                let _ = self.cluster.send(ObjectRef::new(&key.name));
            }
            (ConnectionKind::Connection, Some(ns)) => {
                if let Some(tx) = scope_of(&self.scopes, ns).and_then(|s| self.connection.get(&s)) {
                    let _ = tx.send(ObjectRef::new(&key.name).within(ns));
                }
            }
            _ => {}
        }
    }
}

/// What makes a WorkerDeployment worth reconciling: its spec (generation), its rollout
/// controls (annotations), its finalizers and its deletion; never our own status writes.
pub(super) fn wd_predicate<K: Resource>(wd: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    use twc_api::controls;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    wd.meta().generation.hash(&mut h);
    let annotations = wd.annotations();
    for key in [
        controls::PAUSED,
        controls::PROMOTE,
        controls::ABORT,
        controls::RETRY,
    ] {
        annotations.get(key).hash(&mut h);
    }
    wd.finalizers().hash(&mut h);
    wd.meta().deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// What the WorkerDeployment reconciler reads from a versioned Deployment: its spec
/// generation, availability and replica counts (not every status heartbeat).
pub(super) fn deployment_predicate(d: &CachedDeployment) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    d.metadata.generation.hash(&mut h);
    d.metadata.deletion_timestamp.is_some().hash(&mut h);
    let v = &d.view;
    (v.replicas, v.ready_replicas, v.available_replicas).hash(&mut h);
    (v.available_since.is_some(), v.unavailable_since.is_some()).hash(&mut h);
    Some(h.finish())
}

/// Remembers the last spec generation seen per object, so that only spec changes (and
/// creations and deletions) of a connection re-queue its users, not its status or finalizer.
#[derive(Default)]
pub(super) struct SpecChanges(std::sync::Mutex<HashMap<String, Option<i64>>>);

impl SpecChanges {
    pub(super) fn changed<K: Resource + Clone>(&self, event: &Event<K>) -> Vec<K> {
        let Ok(mut seen) = self.0.lock() else {
            return objects(event);
        };
        match event {
            Event::Delete(o) => {
                seen.remove(&key_of(o));
                vec![o.clone()]
            }
            Event::Apply(o) | Event::InitApply(o) => {
                let generation = o.meta().generation;
                match seen.insert(key_of(o), generation) {
                    Some(previous) if previous == generation => Vec::new(),
                    _ => vec![o.clone()],
                }
            }
            _ => Vec::new(),
        }
    }
}

pub(super) fn key_of<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default()
    )
}

pub(super) fn objects<K: Clone>(event: &Event<K>) -> Vec<K> {
    match event {
        Event::Apply(o) | Event::Delete(o) | Event::InitApply(o) => vec![o.clone()],
        _ => Vec::new(),
    }
}
