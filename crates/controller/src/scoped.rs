//! Watch caches for one or more scopes: all namespaces, or one cache per watched namespace
//! (a reflector store can only follow one watch).

use std::sync::Arc;

use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

/// Stores of `K`, each for a scope: `None` = all namespaces, `Some(ns)` = one namespace.
pub struct Scoped<K: Resource<DynamicType = ()> + Clone + 'static> {
    stores: Vec<(Option<String>, Store<K>)>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Scoped<K> {
    fn clone(&self) -> Self {
        Self {
            stores: self.stores.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Scoped<K> {
    pub fn new(stores: Vec<(Option<String>, Store<K>)>) -> Self {
        Self { stores }
    }

    fn store_for(&self, namespace: &str) -> Option<&Store<K>> {
        self.stores
            .iter()
            .find(|(scope, _)| scope.as_deref().is_none_or(|s| s == namespace))
            .map(|(_, s)| s)
    }

    /// The object `namespace/name`, if its namespace is watched and it exists.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store_for(namespace)?
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// Waits until every store has been filled by its first list (a store whose watch is gone
    /// counts as ready: nothing more will come). One waiter per store at a time: see [`Synced`].
    pub async fn wait_until_ready(&self) {
        for (_, store) in &self.stores {
            let _ = store.wait_until_ready().await;
        }
    }

    /// Every cached object in `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.store_for(namespace)
            .map(|s| {
                s.state()
                    .into_iter()
                    .filter(|o| o.namespace().as_deref() == Some(namespace))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A gate that opens once every watch cache behind it has been filled by its first list, for
/// any number of waiters. (A store's own `wait_until_ready` wakes only the last of several
/// tasks waiting on it, so reconciles must not wait on the stores themselves.)
#[derive(Clone)]
pub struct Synced(tokio::sync::watch::Receiver<bool>);

impl Synced {
    /// The gate, and the future that opens it once `filled` completes (run it as a task).
    pub fn after(
        filled: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let open = async move {
            filled.await;
            // Waiters read the value before the sender's end: dropping it after is fine.
            let _ = tx.send(true);
        };
        (Self(rx), open)
    }

    /// Waits until the gate is open.
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|open| *open).await;
    }
}
