//! The delete-protection finalizer controllers of Connections (per scope) and
//! ClusterConnections.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;
use twc_api::{ClusterConnection, Connection};

use super::caches::ScopeCaches;
use super::triggers::SpecChanges;
use super::{Shared, watch, watch_config};
use crate::connections::{ConnKey, finalizer};
use crate::scoped::trim;

/// Connections: feed the cache, re-queue their users on spec changes (not on the finalizer's
/// own writes or status), and drive their finalizer.
pub(super) fn connections(
    shared: &Shared,
    cache: &ScopeCaches,
    writer: Writer<Connection>,
    triggered: UnboundedReceiver<ObjectRef<Connection>>,
    fin_ctx: &Arc<finalizer::Context>,
) -> BoxFuture<'static, ()> {
    let (access, scope) = (&shared.access, &cache.scope);
    let (s, idx, spec_changes) = (
        shared.senders.clone(),
        shared.index.clone(),
        SpecChanges::default(),
    );
    let connections = watch::<Connection>(&shared.client, scope, watch_config())
        .modify(trim)
        .inspect({
            let (access, sc) = (access.clone(), scope.clone());
            move |item| access.saw(twc_api::GROUP, "connections", sc.as_deref(), item)
        })
        .reflect(writer)
        .inspect_ok(move |ev| {
            for c in spec_changes.changed(ev) {
                let key = ConnKey::connection(&c.namespace().unwrap_or_default(), &c.name_any());
                s.workers(idx.users(&key));
            }
            if let watcher::Event::Delete(c) = ev {
                let ns = c.namespace().unwrap_or_default();
                crate::metrics::global().forget_conditions("Connection", &ns, &c.name_any());
            }
        })
        .touched_objects();
    Box::pin(
        Controller::for_stream(connections, cache.connections.clone())
            .with_config(shared.ctrl_config.clone())
            .reconcile_on(UnboundedReceiverStream::new(triggered))
            .run(
                finalizer::reconcile_connection,
                |_, e, _| {
                    tracing::warn!("connection finalizer: {e}");
                    controller::Action::requeue(std::time::Duration::from_secs(2))
                },
                fin_ctx.clone(),
            )
            .for_each(|_| async {}),
    )
}

/// ClusterConnections (when allowed): feed the cache, re-queue their users on spec changes, and
/// drive their finalizer.
pub(super) fn cluster_connections(
    shared: &Shared,
    reader: Store<ClusterConnection>,
    writer: Writer<ClusterConnection>,
    triggered: UnboundedReceiver<ObjectRef<ClusterConnection>>,
    fin_ctx: Arc<finalizer::Context>,
) -> BoxFuture<'static, ()> {
    let (s, idx) = (shared.senders.clone(), shared.index.clone());
    let spec_changes = SpecChanges::default();
    let ccs = watcher::watcher(
        Api::<ClusterConnection>::all(shared.client.clone()),
        watch_config(),
    )
    .default_backoff()
    .modify(trim)
    .inspect({
        let access = shared.access.clone();
        move |item| access.saw(twc_api::GROUP, "clusterconnections", None, item)
    })
    .reflect(writer)
    .inspect_ok(move |ev| {
        for c in spec_changes.changed(ev) {
            s.workers(idx.users(&ConnKey::cluster(&c.name_any())));
        }
        if let watcher::Event::Delete(c) = ev {
            crate::metrics::global().forget_conditions("ClusterConnection", "", &c.name_any());
        }
    })
    .touched_objects();
    Box::pin(
        Controller::for_stream(ccs, reader)
            .with_config(shared.ctrl_config.clone())
            .reconcile_on(UnboundedReceiverStream::new(triggered))
            .run(
                finalizer::reconcile_cluster_connection,
                |_, e, _| {
                    tracing::warn!("cluster connection finalizer: {e}");
                    controller::Action::requeue(std::time::Duration::from_secs(2))
                },
                fin_ctx,
            )
            .for_each(|_| async {}),
    )
}
