//! The WorkerDeployment controller: its context (shared by every scope), and per scope the
//! watches of WorkerDeployments and their versioned Deployments that drive it.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, store::Writer};
use kube::runtime::watcher::Event;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;
use twc_api::labels;

use super::caches::{ScopeCaches, indexed, scoped};
use super::triggers::{Senders, deployment_predicate, key_of, wd_predicate};
use super::{Config, Shared, watch, watch_config};
use crate::cached::CachedWorkerDeployment;
use crate::children::CachedDeployment;
use crate::connections::ConnectionStores;
use crate::scoped::{Synced, trim};
use crate::temporal::pool::ClientPool;
use crate::temporal::reads::{ReadConfig, Reads};
use crate::workerdeployment;

/// The WorkerDeployment reconcilers' context, and the task that opens their gate: one task
/// waits for every cache the WorkerDeployment reconciles read, then opens it.
pub(super) fn context(
    client: &Client,
    config: &Config,
    caches: &[ScopeCaches],
    stores: ConnectionStores,
    pool: ClientPool,
    senders: &Arc<Senders>,
) -> (
    Arc<workerdeployment::Context>,
    impl Future<Output = ()> + Send + 'static,
) {
    let recorder = crate::events::Recorder::new(client.clone(), config.reporter.clone(), None);
    let deployments = indexed(caches, |c| (&c.deployments, &c.deployment_names));
    let secret_meta = scoped(caches, |c| &c.secrets);
    let templates = indexed(caches, |c| (&c.templates, &c.template_names));
    let worker_pods = indexed(caches, |c| (&c.pods, &c.pod_names));
    let worker_deployments = scoped(caches, |c| &c.worker_deployments);
    // One task waits for every cache the WorkerDeployment reconciles read, then opens their gate.
    let (synced, open) = {
        let (stores, deployments, secret_meta, templates) = (
            stores.clone(),
            deployments.clone(),
            secret_meta.clone(),
            templates.clone(),
        );
        Synced::after(async move {
            stores.connections.wait_until_ready().await;
            if let Some(cluster) = &stores.cluster_connections {
                let _ = cluster.wait_until_ready().await;
            }
            // A selector judged before the first list would refuse everyone for a moment.
            if let Some(namespaces) = &stores.namespaces {
                let _ = namespaces.wait_until_ready().await;
            }
            deployments.wait_until_ready().await;
            secret_meta.wait_until_ready().await;
            templates.wait_until_ready().await;
            tracing::debug!("watch caches filled");
        })
    };
    let ctx = Arc::new(workerdeployment::Context {
        client: client.clone(),
        pool,
        stores,
        deployments,
        secret_meta,
        worker_pods,
        worker_deployments,
        templates,
        recorder,
        intervals: config.intervals,
        limits: config.limits,
        identity: crate::config::Identity {
            own: config.identity.clone(),
            take_over: config.take_over_identities.clone(),
        },
        queue: crate::metrics::WorkQueue::new("WorkerDeployment"),
        synced,
        memories: Default::default(),
        own: Default::default(),
        restarts: {
            // A WorkerDeployment waiting for the restart pace is reconciled when a restart of
            // its place ends.
            let s = senders.clone();
            let wake: crate::restarts::Wake = Arc::new(move |key: &str| {
                if let Some((ns, wd)) = key.split_once('/') {
                    s.workers([(ns.to_string(), wd.to_string())]);
                }
            });
            crate::restarts::Restarts::new(config.restart_pace, Some(wake))
        },
        rights: Arc::new(crate::rights::Rights::new(
            client.clone(),
            (!config.watch_namespaces.is_empty()).then(|| config.rbac_name.clone()),
        )),
        reads: {
            // A worker deployment whose listing changed is reconciled at once.
            let s = senders.clone();
            let wake: crate::temporal::reads::Wake = Arc::new(move |name: &str| {
                if let Some((ns, wd)) = name.split_once('/') {
                    s.workers([(ns.to_string(), wd.to_string())]);
                }
            });
            Reads::new(
                ReadConfig {
                    list_every: config.intervals.steady,
                    ..config.reads
                },
                Some(wake),
            )
        },
    });
    (ctx, open)
}

/// The WorkerDeployment controller of one scope: its WorkerDeployments (the usage index sees
/// every event first) and their versioned Deployments, which also trigger the scope's
/// WorkerResourceTemplates through `wrt_triggers`.
pub(super) fn controller(
    shared: &Shared,
    ctx: &Arc<workerdeployment::Context>,
    cache: &ScopeCaches,
    deployments_writer: Writer<CachedDeployment>,
    wd_writer: Writer<CachedWorkerDeployment>,
    wd_rx: UnboundedReceiver<ObjectRef<CachedWorkerDeployment>>,
    wrt_triggers: crate::wrt::Triggers,
) -> BoxFuture<'static, ()> {
    let (client, access, scope) = (&shared.client, &shared.access, &cache.scope);
    // WorkerDeployments triggered count in the queue-depth metric while they exist.
    let wd_reader = cache.worker_deployments.clone();
    let queue = {
        let (queue, wds) = (ctx.queue.clone(), wd_reader.clone());
        move |ns: &str, name: &str| {
            if wds.get(&ObjectRef::new(name).within(ns)).is_some() {
                queue.queued(format!("{ns}/{name}"));
            }
        }
    };

    // Versioned Deployments (only ours, by label).
    let t = wrt_triggers.clone();
    let deployments = watch::<CachedDeployment>(
        client,
        scope,
        watch_config().labels(labels::DEPLOYMENT_NAME),
    )
    .modify(trim)
    .inspect({
        let (access, sc) = (access.clone(), scope.clone());
        move |item| access.saw("apps", "deployments", sc.as_deref(), item)
    })
    .inspect_ok({
        let names = cache.deployment_names.clone();
        move |ev| names.apply(ev)
    })
    .reflect(deployments_writer)
    .inspect_ok(move |ev| t.deployment(ev))
    .touched_objects()
    .inspect_ok({
        let ctx = ctx.clone();
        move |d: &CachedDeployment| ctx.restarts.saw(&d.view)
    })
    .predicate_filter(deployment_predicate, Default::default())
    .inspect_ok({
        let queue = ctx.queue.clone();
        move |d: &CachedDeployment| {
            let owner = d
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true) && o.kind == "WorkerDeployment");
            if let Some(o) = owner {
                queue.queued(format!("{}/{}", d.namespace().unwrap_or_default(), o.name));
            }
        }
    });

    // WorkerDeployments: the index sees every event first.
    let (s, idx, sc) = (shared.senders.clone(), shared.index.clone(), scope.clone());
    // Cached with the pod template as JSON (`cached`).
    let wds = watch::<CachedWorkerDeployment>(client, scope, watch_config())
        .modify(trim)
        .inspect({
            let (access, sc) = (access.clone(), scope.clone());
            move |item| access.saw(twc_api::GROUP, "workerdeployments", sc.as_deref(), item)
        })
        .inspect_ok(move |ev| {
            for key in idx.apply_scoped(sc.as_deref(), ev) {
                s.connection(&key);
            }
        })
        .reflect(wd_writer)
        .inspect_ok({
            let (queue, ctx, sc) = (ctx.queue.clone(), ctx.clone(), scope.clone());
            move |ev| {
                ctx.own.seen(ev);
                wrt_triggers.worker_deployment(ev);
                if let Event::Delete(wd) = ev {
                    // Gone before its reconcile: no longer waiting, nothing to remember.
                    queue.started(&key_of(wd));
                    ctx.forget(&key_of(wd));
                }
                // The last WorkerDeployment of a watched namespace gone (or none there at a
                // start): the controller's Role and RoleBinding there are let go. While the
                // cache still shows one holding its finalizer, its own deletion comes later
                // (no list of the namespace per deletion of a bulk delete).
                if let (Event::Delete(_) | Event::InitDone, Some(ns)) = (ev, sc.as_deref())
                    && !ctx.worker_deployments.in_namespace(ns).iter().any(|w| {
                        w.metadata
                            .finalizers
                            .iter()
                            .flatten()
                            .any(|f| f == twc_api::FINALIZER)
                    })
                {
                    let (rights, ns) = (ctx.rights.clone(), ns.to_string());
                    tokio::spawn(async move { rights.release_if_unused(&ns).await });
                }
            }
        })
        .touched_objects()
        .predicate_filter(wd_predicate, Default::default())
        .inspect_ok({
            let queue = queue.clone();
            move |wd: &CachedWorkerDeployment| {
                queue(&wd.namespace().unwrap_or_default(), &wd.name_any())
            }
        });
    let triggered = UnboundedReceiverStream::new(wd_rx).inspect(
        move |r: &ObjectRef<CachedWorkerDeployment>| {
            queue(r.namespace.as_deref().unwrap_or_default(), &r.name)
        },
    );
    Box::pin(
        Controller::for_stream(wds, wd_reader)
            .owns_stream(deployments)
            .with_config(shared.ctrl_config.clone())
            .reconcile_on(triggered)
            .run(
                workerdeployment::reconcile,
                workerdeployment::error_policy,
                ctx.clone(),
            )
            .for_each(|r| async move {
                if let Err(e) = r {
                    tracing::debug!("WorkerDeployment controller: {e}");
                }
            }),
    )
}
