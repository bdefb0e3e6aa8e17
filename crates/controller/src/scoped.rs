//! Watch caches for one or more scopes: all namespaces, or one cache per watched namespace
//! (a reflector store can only follow one watch), each with an optional index of its objects'
//! names by namespace.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

/// A scope's store, and the index of its names if it has one.
type ScopeStore<K> = (Option<String>, Store<K>, Option<Names>);

/// Stores of `K`, each for a scope: `None` = all namespaces, `Some(ns)` = one namespace.
pub struct Scoped<K: Resource<DynamicType = ()> + Clone + 'static> {
    stores: Vec<ScopeStore<K>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Scoped<K> {
    fn clone(&self) -> Self {
        Self {
            stores: self.stores.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Scoped<K> {
    /// Stores with no index: [`Scoped::in_namespace`] goes through the whole store.
    pub fn new(stores: Vec<(Option<String>, Store<K>)>) -> Self {
        Self {
            stores: stores.into_iter().map(|(sc, s)| (sc, s, None)).collect(),
        }
    }

    /// Stores with the index of their names that their watch keeps ([`Names::apply`]).
    pub fn indexed(stores: Vec<(Option<String>, Store<K>, Names)>) -> Self {
        Self {
            stores: stores
                .into_iter()
                .map(|(sc, s, n)| (sc, s, Some(n)))
                .collect(),
        }
    }

    fn scope_for(&self, namespace: &str) -> Option<&ScopeStore<K>> {
        self.stores
            .iter()
            .find(|(scope, _, _)| scope.as_deref().is_none_or(|s| s == namespace))
    }

    fn store_for(&self, namespace: &str) -> Option<&Store<K>> {
        self.scope_for(namespace).map(|(_, s, _)| s)
    }

    /// The object `namespace/name`, if its namespace is watched and it exists.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store_for(namespace)?
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// Waits until every store has been filled by its first list (a store whose watch is gone
    /// counts as ready: nothing more will come). One waiter per store at a time: see [`Synced`].
    pub async fn wait_until_ready(&self) {
        for (_, store, _) in &self.stores {
            let _ = store.wait_until_ready().await;
        }
    }

    /// Every cached object of every scope.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.stores
            .iter()
            .flat_map(|(_, store, _)| store.state())
            .collect()
    }

    /// Every cached object in `namespace`: through the index if there is one (the cost is
    /// that of the namespace's objects), else by going through the whole store.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        match self.scope_for(namespace) {
            None => Vec::new(),
            Some((_, store, Some(names))) => names
                .in_namespace(namespace)
                .into_iter()
                .filter_map(|name| store.get(&ObjectRef::new(&name).within(namespace)))
                .collect(),
            Some((_, store, None)) => store
                .state()
                .into_iter()
                .filter(|o| o.namespace().as_deref() == Some(namespace))
                .collect(),
        }
    }
}

/// Drops what no cache reader looks at before an object is stored: `managedFields` (often
/// larger than the rest of the object) and kubectl's copy of the last applied manifest (the
/// whole spec again). With thousands of WorkerDeployments this is most of the memory.
pub fn trim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// The names of a watch cache's objects by namespace, kept by the same watch as the cache:
/// [`Names::apply`] sees each event just before the store does, so a name is indexed before
/// its object is stored, and a relist replaces the index when it replaces the store.
#[derive(Clone, Default)]
pub struct Names(Arc<RwLock<NamesInner>>);

#[derive(Default)]
struct NamesInner {
    live: HashMap<String, BTreeSet<String>>,
    /// A relist in progress: replaces `live` when it is done.
    filling: Option<HashMap<String, BTreeSet<String>>>,
}

fn insert(map: &mut HashMap<String, BTreeSet<String>>, namespace: String, name: String) {
    map.entry(namespace).or_default().insert(name);
}

impl Names {
    /// Follows one watch event.
    pub fn apply<K: Resource>(&self, event: &Event<K>) {
        let Ok(mut names) = self.0.write() else {
            return;
        };
        let key = |o: &K| {
            let m = o.meta();
            (
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
            )
        };
        match event {
            Event::Apply(o) => {
                let (ns, name) = key(o);
                insert(&mut names.live, ns, name);
            }
            Event::Delete(o) => {
                let (ns, name) = key(o);
                if let Some(set) = names.live.get_mut(&ns) {
                    set.remove(&name);
                    if set.is_empty() {
                        names.live.remove(&ns);
                    }
                }
            }
            Event::Init => names.filling = Some(HashMap::new()),
            Event::InitApply(o) => {
                let (ns, name) = key(o);
                insert(names.filling.get_or_insert_default(), ns, name);
            }
            Event::InitDone => {
                let filled = names.filling.take().unwrap_or_default();
                names.live = filled;
            }
        }
    }

    /// The names indexed in `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<String> {
        self.0
            .read()
            .ok()
            .and_then(|n| n.live.get(namespace).map(|s| s.iter().cloned().collect()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.namespace = Some(ns.into());
        c.metadata.name = Some(name.into());
        c
    }

    /// A cache fed as the watch feeds it: the index first, then the store.
    struct Fed {
        scoped: Scoped<ConfigMap>,
        names: Names,
        writer: reflector::store::Writer<ConfigMap>,
    }

    impl Fed {
        fn new() -> Self {
            let (store, writer) = reflector::store();
            let names = Names::default();
            Self {
                scoped: Scoped::indexed(vec![(None, store, names.clone())]),
                names,
                writer,
            }
        }

        fn feed(&mut self, event: Event<ConfigMap>) {
            self.names.apply(&event);
            self.writer.apply_watcher_event(&event);
        }

        fn names_in(&self, ns: &str) -> Vec<String> {
            let mut n: Vec<String> = self
                .scoped
                .in_namespace(ns)
                .iter()
                .map(|o| o.name_any())
                .collect();
            n.sort();
            n
        }
    }

    #[test]
    fn a_namespace_holds_what_its_watch_applied_and_not_what_it_deleted() {
        let mut fed = Fed::new();
        fed.feed(Event::Init);
        fed.feed(Event::InitApply(cm("a", "one")));
        fed.feed(Event::InitApply(cm("b", "two")));
        fed.feed(Event::InitDone);
        fed.feed(Event::Apply(cm("a", "three")));
        assert_eq!(fed.names_in("a"), ["one", "three"]);
        assert_eq!(fed.names_in("b"), ["two"]);
        fed.feed(Event::Delete(cm("b", "two")));
        fed.feed(Event::Delete(cm("a", "one")));
        assert_eq!(fed.names_in("a"), ["three"]);
        assert!(fed.names_in("b").is_empty());
        assert!(fed.names.0.read().is_ok_and(|n| !n.live.contains_key("b")));
        assert!(fed.names_in("c").is_empty());
    }

    #[test]
    fn a_relist_replaces_the_index_once_it_is_done() {
        let mut fed = Fed::new();
        fed.feed(Event::Init);
        fed.feed(Event::InitApply(cm("a", "old")));
        fed.feed(Event::InitDone);
        // The watch desynced: a relist in which "old" is gone and "new" appeared.
        fed.feed(Event::Init);
        fed.feed(Event::InitApply(cm("a", "new")));
        // Until the relist is done, the cache shows what it had.
        assert_eq!(fed.names_in("a"), ["old"]);
        fed.feed(Event::InitDone);
        assert_eq!(fed.names_in("a"), ["new"]);
    }

    #[test]
    fn without_an_index_a_namespace_is_picked_from_the_whole_store() {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Apply(cm("a", "one")));
        writer.apply_watcher_event(&Event::Apply(cm("b", "two")));
        let scoped = Scoped::new(vec![(None, store)]);
        let names: Vec<String> = scoped
            .in_namespace("b")
            .iter()
            .map(|o| o.name_any())
            .collect();
        assert_eq!(names, ["two"]);
    }
}
