//! The watches that only feed a cache and trigger others' reconciles: Secrets (metadata only),
//! the pods of versioned Deployments, and Namespaces (metadata only).

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, store::Writer};
use kube::runtime::watcher;
use twc_api::{ConnectionKind, labels};

use super::caches::ScopeCaches;
use super::triggers::objects;
use super::{Shared, watch, watch_config};
use crate::connections::{self, ConnectionStores};
use crate::scoped::trim;
use crate::worker_pods::CachedPod;

/// Secrets (metadata only): a change re-queues the WorkerDeployments whose connection names
/// that Secret in that namespace.
pub(super) fn secrets(
    shared: &Shared,
    stores: &ConnectionStores,
    cache: &ScopeCaches,
    writer: Writer<PartialObjectMeta<Secret>>,
) -> BoxFuture<'static, ()> {
    let (client, access, scope) = (&shared.client, &shared.access, &cache.scope);
    let (s, idx, st) = (shared.senders.clone(), shared.index.clone(), stores.clone());
    let secrets = watch::<PartialObjectMeta<Secret>>(client, scope, watch_config())
        .modify(trim)
        .inspect({
            let (access, sc) = (access.clone(), scope.clone());
            move |item| access.saw("", "secrets", sc.as_deref(), item)
        })
        .reflect(writer)
        .inspect_ok(move |ev| {
            for secret in objects(ev) {
                let ns = secret.namespace().unwrap_or_default();
                let name = secret.name_any();
                let users = idx.users_in_namespace(&ns).into_iter().filter(|(_, conn)| {
                    let spec = match conn.kind {
                        ConnectionKind::Connection => {
                            st.connections.get(&ns, &conn.name).map(|c| c.spec.clone())
                        }
                        ConnectionKind::ClusterConnection => st
                            .cluster_connections
                            .as_ref()
                            .and_then(|c| c.get(&ObjectRef::new(&conn.name)))
                            .map(|c| c.spec.connection.clone()),
                    };
                    spec.is_some_and(|spec| connections::secret_names(&spec).contains(&name))
                });
                s.workers(users.map(|(wd, _)| wd));
            }
        });
    Box::pin(secrets.for_each(|_| async {}))
}

/// The pods of versioned Deployments (only ours, by label), reduced to their troubles: a target
/// that is not ready reads them here, with no request. Optional: without the permission (or
/// before the cache fills) no trouble is seen, and a rollout waits the same, only its progress
/// deadline says less; so no reconcile waits for this cache.
pub(super) fn worker_pods(
    shared: &Shared,
    cache: &ScopeCaches,
    writer: Writer<CachedPod>,
) -> BoxFuture<'static, ()> {
    let pods = watch::<CachedPod>(
        &shared.client,
        &cache.scope,
        watch_config().labels(labels::DEPLOYMENT_NAME),
    )
    .inspect_err(|e| tracing::debug!("the worker pods' watch: {e}"))
    .inspect_ok({
        let names = cache.pod_names.clone();
        move |ev| names.apply(ev)
    })
    .reflect(writer);
    Box::pin(pods.for_each(|_| async {}))
}

/// Namespaces (metadata only, when allowed with ClusterConnections): their labels decide what
/// a ClusterConnection's `allowedNamespaces` selector allows. A change of a namespace's labels
/// re-queues its WorkerDeployments that reference a ClusterConnection, and those
/// ClusterConnections (their finalizer and refused count), in both directions.
pub(super) fn namespaces(
    shared: &Shared,
    writer: Writer<PartialObjectMeta<Namespace>>,
) -> BoxFuture<'static, ()> {
    let (s, idx) = (shared.senders.clone(), shared.index.clone());
    let mut seen: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    let namespaces = watcher::watcher(
        Api::<PartialObjectMeta<Namespace>>::all(shared.client.clone()),
        watch_config(),
    )
    .default_backoff()
    .modify(trim)
    .inspect({
        let access = shared.access.clone();
        move |item| access.saw("", "namespaces", None, item)
    })
    .reflect(writer)
    .inspect_ok(move |ev| {
        let changed: Vec<String> = match ev {
            watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                let name = n.name_any();
                let labels = n.labels().clone();
                let before = seen.insert(name.clone(), labels.clone());
                // A relist re-applies every namespace: only a real change is worth a reconcile.
                let first_list = matches!(ev, watcher::Event::InitApply(_)) && before.is_none();
                (before.as_ref() != Some(&labels) && !first_list)
                    .then_some(name)
                    .into_iter()
                    .collect()
            }
            watcher::Event::Delete(n) => {
                seen.remove(&n.name_any());
                Vec::new()
            }
            watcher::Event::Init | watcher::Event::InitDone => Vec::new(),
        };
        for ns in changed {
            let users: Vec<_> = idx
                .users_in_namespace(&ns)
                .into_iter()
                .filter(|(_, conn)| conn.kind == ConnectionKind::ClusterConnection)
                .collect();
            for (_, conn) in &users {
                s.connection(conn);
            }
            s.workers(users.into_iter().map(|(wd, _)| wd));
        }
    });
    Box::pin(namespaces.for_each(|_| async {}))
}
