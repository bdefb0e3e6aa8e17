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
