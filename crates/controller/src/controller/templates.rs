//! The WorkerResourceTemplate controller of one scope: its triggers (fed by the
//! WorkerDeployment controller's watches), its context and its own watch.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, store::Writer};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;
use twc_api::WorkerResourceTemplate;

use super::caches::ScopeCaches;
use super::triggers::SpecChanges;
use super::{Shared, watch, watch_config};
use crate::scoped::{Scoped, Synced, trim};
use crate::workerdeployment;

/// WorkerResourceTemplates are re-queued by their WorkerDeployment's events and those of its
/// versioned Deployments: the triggers those watches call, and the channel they feed.
pub(super) fn triggers(
    cache: &ScopeCaches,
) -> (
    crate::wrt::Triggers,
    UnboundedReceiver<ObjectRef<WorkerResourceTemplate>>,
) {
    let (wrt_tx, wrt_rx) = unbounded_channel();
    // This scope's caches, found by namespace through their indexes.
    let scope_templates = Scoped::indexed(vec![(
        cache.scope.clone(),
        cache.templates.clone(),
        cache.template_names.clone(),
    )]);
    (crate::wrt::Triggers::new(scope_templates, wrt_tx), wrt_rx)
}

/// The WorkerResourceTemplate reconcilers' context of one scope, and the task that opens their
/// gate once the WorkerDeployments and versioned Deployments are cached.
pub(super) fn context(
    shared: &Shared,
    ctx: &workerdeployment::Context,
    cache: &ScopeCaches,
    discovery: &crate::wrt::Discovery,
) -> (BoxFuture<'static, ()>, Arc<crate::wrt::Context>) {
    let wd_reader = cache.worker_deployments.clone();
    let scope_deployments = Scoped::indexed(vec![(
        cache.scope.clone(),
        cache.deployments.clone(),
        cache.deployment_names.clone(),
    )]);
    let (wrt_synced, open) = {
        let (wds, deployments) = (wd_reader.clone(), cache.deployments.clone());
        Synced::after(async move {
            let _ = wds.wait_until_ready().await;
            let _ = deployments.wait_until_ready().await;
        })
    };
    let wrt_ctx = Arc::new(crate::wrt::Context {
        client: shared.client.clone(),
        synced: wrt_synced,
        worker_deployments: wd_reader,
        deployments: scope_deployments,
        recorder: ctx.recorder.clone(),
        discovery: discovery.clone(),
        allowed_kinds: shared.config.wrt_allowed_kinds.clone(),
        resync: shared.config.intervals.steady,
        own: Default::default(),
    });
    (Box::pin(open), wrt_ctx)
}

/// The WorkerResourceTemplate controller of one scope.
pub(super) fn controller(
    shared: &Shared,
    cache: &ScopeCaches,
    writer: Writer<WorkerResourceTemplate>,
    wrt_rx: UnboundedReceiver<ObjectRef<WorkerResourceTemplate>>,
    wrt_ctx: Arc<crate::wrt::Context>,
) -> BoxFuture<'static, ()> {
    let (access, scope) = (&shared.access, &cache.scope);
    let wrts = watch::<WorkerResourceTemplate>(&shared.client, scope, watch_config())
        .modify(trim)
        .inspect({
            let (access, sc) = (access.clone(), scope.clone());
            move |item| {
                access.saw(
                    twc_api::GROUP,
                    "workerresourcetemplates",
                    sc.as_deref(),
                    item,
                )
            }
        })
        .inspect_ok({
            let names = cache.template_names.clone();
            move |ev| names.apply(ev)
        })
        .reflect(writer)
        .inspect_ok({
            let wrt_ctx = wrt_ctx.clone();
            move |ev| wrt_ctx.own.seen(ev)
        })
        .inspect_ok(|ev| {
            if let kube::runtime::watcher::Event::Delete(t) = ev {
                let ns = t.namespace().unwrap_or_default();
                crate::metrics::global().forget_conditions(
                    crate::wrt::reconcile::CONTROLLER,
                    &ns,
                    &t.name_any(),
                );
            }
        })
        .inspect_ok({
            // A template that scales the versions takes `replicas` over: its WorkerDeployment
            // re-plans on the template's creation, spec changes and deletion.
            let (s, spec_changes) = (shared.senders.clone(), SpecChanges::default());
            move |ev| {
                for t in spec_changes.changed(ev) {
                    if let Some(wd) = t.spec.worker_deployment_name() {
                        s.workers([(t.namespace().unwrap_or_default(), wd.to_string())]);
                    }
                }
            }
        })
        .touched_objects()
        .predicate_filter(crate::wrt::predicate, Default::default());
    Box::pin(
        Controller::for_stream(wrts, cache.templates.clone())
            .with_config(shared.ctrl_config.clone())
            .reconcile_on(UnboundedReceiverStream::new(wrt_rx))
            .run(crate::wrt::reconcile, crate::wrt::error_policy, wrt_ctx)
            .for_each(|_| async {}),
    )
}
