//! Wiring: watches, caches, triggers and the three reconcilers (WorkerDeployment, Connection
//! finalizer, ClusterConnection finalizer).
//!
//! Every kind is watched once per scope (all namespaces, or each `--watch-namespaces` entry).
//! Events of Connections, ClusterConnections and Secrets are mapped to the WorkerDeployments
//! that use them through the usage index (no list call per event); events of
//! WorkerDeployments are mapped to the connections whose finalizer may change.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;
use twc_api::{ClusterConnection, Connection, ConnectionKind, labels};

use crate::access::Access;
use crate::cached::CachedWorkerDeployment;
use crate::children::CachedDeployment;
use crate::config::{Intervals, Limits};
use crate::connections::{self, ConnKey, ConnectionStores, UsageIndex, finalizer};
use crate::scoped::{Names, Scoped, Synced, trim};
use crate::temporal::pool::ClientPool;
use crate::temporal::reads::{ReadConfig, Reads};
use crate::worker_pods::CachedPod;
use crate::workerdeployment;

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Identity on every Temporal write and as the manager identity it claims; stable across
    /// restarts and replicas of one installation, distinct between installations.
    pub identity: String,
    /// Manager identities whose worker deployments this controller takes over (beside TWC's
    /// deprecated default, always reclaimed); empty: none.
    pub take_over_identities: Vec<String>,
    /// Watch only these namespaces (empty: all).
    pub watch_namespaces: Vec<String>,
    pub intervals: Intervals,
    /// Reporter of Kubernetes Events.
    pub reporter: String,
    /// Reconciles of one kind that may run at once.
    pub concurrency: u16,
    /// Limits the planner respects.
    pub limits: Limits,
    /// Kinds a WorkerResourceTemplate may render (case-insensitive; empty: none).
    pub wrt_allowed_kinds: Vec<String>,
    /// The read budget per Temporal namespace (`list_every` follows `intervals.steady`).
    pub reads: ReadConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            identity: "temporal-worker-controller".into(),
            take_over_identities: Vec::new(),
            watch_namespaces: Vec::new(),
            intervals: Intervals::default(),
            reporter: "temporal-worker-controller".into(),
            concurrency: 32,
            limits: Default::default(),
            wrt_allowed_kinds: crate::wrt::DEFAULT_ALLOWED_KINDS
                .iter()
                .map(|k| k.to_string())
                .collect(),
            reads: ReadConfig::default(),
        }
    }
}

/// Shared pieces a caller may want to look at (tests, metrics).
#[derive(Clone)]
pub struct Handle {
    pub pool: ClientPool,
    pub index: UsageIndex,
    /// Whether ClusterConnections are watched (allowed by RBAC).
    pub cluster_connections: bool,
    /// Watches that meet Forbidden now (RBAC changed under the running controller).
    pub access: Access,
}

type Scope = Option<String>;

/// Objects per page of a watch's list (at a start, and after the watch falls too far
/// behind): a page's response is read whole before it is parsed, so a smaller page lowers the
/// peak memory of a start with thousands of objects (kube-runtime's default is 500).
const LIST_PAGE_SIZE: u32 = 100;

/// The configuration of every watch.
fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

/// How often permissions lost while running are asked about again.
const ACCESS_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

fn api<K>(client: &Client, scope: &Scope) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match scope {
        None => Api::all(client.clone()),
        Some(ns) => Api::namespaced(client.clone(), ns),
    }
}

fn scope_of(scopes: &[Scope], namespace: &str) -> Option<Scope> {
    scopes
        .iter()
        .find(|s| s.as_deref().is_none_or(|s| s == namespace))
        .cloned()
}

/// Asks the apiserver whether this identity may `verb` `resource` of `temporal.io`, in every
/// namespace.
pub async fn may(client: &Client, verb: &str, resource: &str) -> bool {
    crate::access::may(client, twc_api::GROUP, resource, None, None, verb)
        .await
        .unwrap_or(false)
}

/// Prepares the controller; `run` it to start. Returns the handle for inspection.
pub async fn prepare(
    client: Client,
    config: Config,
) -> (Handle, impl Future<Output = ()> + Send + 'static) {
    let scopes: Vec<Scope> = if config.watch_namespaces.is_empty() {
        vec![None]
    } else {
        config.watch_namespaces.iter().cloned().map(Some).collect()
    };
    let mut cluster_allowed = true;
    for verb in ["list", "watch", "patch"] {
        cluster_allowed &= may(&client, verb, "clusterconnections").await;
    }
    if !cluster_allowed {
        tracing::warn!(
            "not allowed to list, watch and patch ClusterConnections: they are not watched, and WorkerDeployments referencing one report ConnectionNotFound"
        );
    }
    let index = UsageIndex::new(scopes.len());
    let pool = ClientPool::new(config.identity.clone());
    let access = Access::default();
    let handle = Handle {
        pool: pool.clone(),
        index: index.clone(),
        cluster_connections: cluster_allowed,
        access: access.clone(),
    };
    let fut = run_controllers(client, config, scopes, index, pool, cluster_allowed, access);
    (handle, fut)
}

struct Senders {
    wd: HashMap<Scope, UnboundedSender<ObjectRef<CachedWorkerDeployment>>>,
    connection: HashMap<Scope, UnboundedSender<ObjectRef<Connection>>>,
    cluster: UnboundedSender<ObjectRef<ClusterConnection>>,
    scopes: Vec<Scope>,
}

impl Senders {
    fn workers(&self, users: impl IntoIterator<Item = (String, String)>) {
        for (ns, name) in users {
            if let Some(tx) = scope_of(&self.scopes, &ns).and_then(|s| self.wd.get(&s)) {
                let _ = tx.send(ObjectRef::new(&name).within(&ns));
            }
        }
    }

    fn connection(&self, key: &ConnKey) {
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
fn wd_predicate<K: Resource>(wd: &K) -> Option<u64> {
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
fn deployment_predicate(d: &CachedDeployment) -> Option<u64> {
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
struct SpecChanges(std::sync::Mutex<HashMap<String, Option<i64>>>);

impl SpecChanges {
    fn changed<K: Resource + Clone>(&self, event: &Event<K>) -> Vec<K> {
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

fn key_of<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default()
    )
}

fn objects<K: Clone>(event: &Event<K>) -> Vec<K> {
    match event {
        Event::Apply(o) | Event::Delete(o) | Event::InitApply(o) => vec![o.clone()],
        _ => Vec::new(),
    }
}

/// The watch caches of one scope (all namespaces, or one), and the channels that trigger its
/// reconcilers. The writers are taken once, by the watches that feed the caches.
struct ScopeCaches {
    scope: Scope,
    connections: Store<Connection>,
    deployments: Store<CachedDeployment>,
    /// The names of the versioned Deployments by namespace, kept by their watch.
    deployment_names: Names,
    secrets: Store<PartialObjectMeta<Secret>>,
    templates: Store<twc_api::WorkerResourceTemplate>,
    template_names: Names,
    /// The pods of versioned Deployments, and their names by namespace.
    pods: Store<CachedPod>,
    worker_deployments: Store<CachedWorkerDeployment>,
    pod_names: Names,
    wd_tx: UnboundedSender<ObjectRef<CachedWorkerDeployment>>,
    conn_tx: UnboundedSender<ObjectRef<Connection>>,
    writers: Option<ScopeWriters>,
}

/// What the watches of a scope take: the cache writers and the trigger receivers.
struct ScopeWriters {
    connections: Writer<Connection>,
    deployments: Writer<CachedDeployment>,
    secrets: Writer<PartialObjectMeta<Secret>>,
    templates: Writer<twc_api::WorkerResourceTemplate>,
    pods: Writer<CachedPod>,
    worker_deployments: Writer<CachedWorkerDeployment>,
    wd_rx: UnboundedReceiver<ObjectRef<CachedWorkerDeployment>>,
    conn_rx: UnboundedReceiver<ObjectRef<Connection>>,
}

impl ScopeCaches {
    fn new(scope: Scope) -> Self {
        let (connections, connections_w) = reflector::store();
        let (deployments, deployments_w) = reflector::store();
        let (secrets, secrets_w) = reflector::store();
        let (templates, templates_w) = reflector::store();
        let (pods, pods_w) = reflector::store();
        let (worker_deployments, worker_deployments_w) = reflector::store();
        let (wd_tx, wd_rx) = unbounded_channel();
        let (conn_tx, conn_rx) = unbounded_channel();
        Self {
            scope,
            connections,
            deployments,
            deployment_names: Names::default(),
            secrets,
            templates,
            template_names: Names::default(),
            pods,
            pod_names: Names::default(),
            worker_deployments,
            wd_tx,
            conn_tx,
            writers: Some(ScopeWriters {
                connections: connections_w,
                deployments: deployments_w,
                secrets: secrets_w,
                templates: templates_w,
                pods: pods_w,
                worker_deployments: worker_deployments_w,
                wd_rx,
                conn_rx,
            }),
        }
    }
}

/// One kind's stores across every scope.
fn scoped<K>(caches: &[ScopeCaches], store: impl Fn(&ScopeCaches) -> &Store<K>) -> Scoped<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    Scoped::new(
        caches
            .iter()
            .map(|c| (c.scope.clone(), store(c).clone()))
            .collect(),
    )
}

/// One kind's stores across every scope, with their name indexes.
fn indexed<K>(
    caches: &[ScopeCaches],
    store: impl Fn(&ScopeCaches) -> (&Store<K>, &Names),
) -> Scoped<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    Scoped::indexed(
        caches
            .iter()
            .map(|c| {
                let (s, n) = store(c);
                (c.scope.clone(), s.clone(), n.clone())
            })
            .collect(),
    )
}

async fn run_controllers(
    client: Client,
    config: Config,
    scopes: Vec<Scope>,
    index: UsageIndex,
    pool: ClientPool,
    cluster_allowed: bool,
    access: Access,
) {
    // Caches and trigger channels first: the trigger mappers read and feed them.
    let mut caches: Vec<ScopeCaches> = scopes.iter().cloned().map(ScopeCaches::new).collect();
    let (cc_tx, cc_rx) = unbounded_channel();
    let senders = Arc::new(Senders {
        wd: caches
            .iter()
            .map(|c| (c.scope.clone(), c.wd_tx.clone()))
            .collect(),
        connection: caches
            .iter()
            .map(|c| (c.scope.clone(), c.conn_tx.clone()))
            .collect(),
        cluster: cc_tx,
        scopes: scopes.clone(),
    });
    let (cc_reader, cc_writer) = reflector::store::<ClusterConnection>();
    let stores = ConnectionStores {
        connections: scoped(&caches, |c| &c.connections),
        cluster_connections: cluster_allowed.then(|| cc_reader.clone()),
        access: access.clone(),
    };
    let recorder = crate::events::Recorder::new(client.clone(), config.reporter.clone(), None);
    let deployments = indexed(&caches, |c| (&c.deployments, &c.deployment_names));
    let secret_meta = scoped(&caches, |c| &c.secrets);
    let templates = indexed(&caches, |c| (&c.templates, &c.template_names));
    let worker_pods = indexed(&caches, |c| (&c.pods, &c.pod_names));
    let worker_deployments = scoped(&caches, |c| &c.worker_deployments);
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
            deployments.wait_until_ready().await;
            secret_meta.wait_until_ready().await;
            templates.wait_until_ready().await;
            tracing::debug!("watch caches filled");
        })
    };
    let ctx = Arc::new(workerdeployment::Context {
        client: client.clone(),
        pool,
        stores: stores.clone(),
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
    let fin_ctx = Arc::new(finalizer::Context {
        client: client.clone(),
        index: index.clone(),
        access: access.clone(),
    });
    let ctrl_config = controller::Config::default().concurrency(config.concurrency);
    let discovery = crate::wrt::Discovery::default();
    let mut tasks: Vec<futures::future::BoxFuture<'static, ()>> = vec![
        Box::pin(open),
        // Permissions met Forbidden are asked about again until they are back.
        Box::pin(access.clone().keep_checking(client.clone(), ACCESS_RECHECK)),
    ];

    for cache in &mut caches {
        let scope = &cache.scope;
        let Some(writers) = cache.writers.take() else {
            continue;
        };
        // Secrets (metadata only): a change re-queues the WorkerDeployments whose connection
        // names that Secret in that namespace.
        let (s, idx, st) = (senders.clone(), index.clone(), stores.clone());
        let secrets = watcher::watcher(
            api::<PartialObjectMeta<Secret>>(&client, scope),
            watch_config(),
        )
        .default_backoff()
        .modify(trim)
        .inspect({
            let (access, sc) = (access.clone(), scope.clone());
            move |item| access.saw("", "secrets", sc.as_deref(), item)
        })
        .reflect(writers.secrets)
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
                            .map(|c| c.spec.clone()),
                    };
                    spec.is_some_and(|spec| connections::secret_names(&spec).contains(&name))
                });
                s.workers(users.map(|(wd, _)| wd));
            }
        });
        tasks.push(Box::pin(secrets.for_each(|_| async {})));

        // The pods of versioned Deployments (only ours, by label), reduced to their troubles:
        // a target that is not ready reads them here, with no request. Optional: without the
        // permission (or before the cache fills) no trouble is seen, and a rollout waits the
        // same, only its progress deadline says less; so no reconcile waits for this cache.
        let pods = watcher::watcher(
            api::<CachedPod>(&client, scope),
            watch_config().labels(labels::DEPLOYMENT_NAME),
        )
        .default_backoff()
        .inspect_err(|e| tracing::debug!("the worker pods' watch: {e}"))
        .inspect_ok({
            let names = cache.pod_names.clone();
            move |ev| names.apply(ev)
        })
        .reflect(writers.pods);
        tasks.push(Box::pin(pods.for_each(|_| async {})));

        // Connections: feed the cache, re-queue their users on spec changes (not on the
        // finalizer's own writes or status), and drive their finalizer.
        let (s, idx, spec_changes) = (senders.clone(), index.clone(), SpecChanges::default());
        let connections = watcher::watcher(api::<Connection>(&client, scope), watch_config())
            .default_backoff()
            .modify(trim)
            .inspect({
                let (access, sc) = (access.clone(), scope.clone());
                move |item| access.saw(twc_api::GROUP, "connections", sc.as_deref(), item)
            })
            .reflect(writers.connections)
            .inspect_ok(move |ev| {
                for c in spec_changes.changed(ev) {
                    let key =
                        ConnKey::connection(&c.namespace().unwrap_or_default(), &c.name_any());
                    s.workers(idx.users(&key));
                }
            })
            .touched_objects();
        tasks.push(Box::pin(
            Controller::for_stream(connections, cache.connections.clone())
                .with_config(ctrl_config.clone())
                .reconcile_on(UnboundedReceiverStream::new(writers.conn_rx))
                .run(
                    finalizer::reconcile_connection,
                    |_, e, _| {
                        tracing::warn!("connection finalizer: {e}");
                        controller::Action::requeue(std::time::Duration::from_secs(2))
                    },
                    fin_ctx.clone(),
                )
                .for_each(|_| async {}),
        ));

        // WorkerResourceTemplates, re-queued by their WorkerDeployment's events and those of
        // its versioned Deployments.
        let (wrt_reader, wrt_writer) = (cache.templates.clone(), writers.templates);
        let (wrt_tx, wrt_rx) = unbounded_channel();
        // This scope's caches, found by namespace through their indexes.
        let scope_templates = Scoped::indexed(vec![(
            scope.clone(),
            wrt_reader.clone(),
            cache.template_names.clone(),
        )]);
        let scope_deployments = Scoped::indexed(vec![(
            scope.clone(),
            cache.deployments.clone(),
            cache.deployment_names.clone(),
        )]);
        let wrt_triggers = crate::wrt::Triggers::new(scope_templates, wrt_tx);

        // WorkerDeployments triggered count in the queue-depth metric while they exist.
        let (wd_reader, wd_writer) = (cache.worker_deployments.clone(), writers.worker_deployments);
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
        let deployments = watcher::watcher(
            api::<CachedDeployment>(&client, scope),
            watch_config().labels(labels::DEPLOYMENT_NAME),
        )
        .default_backoff()
        .modify(trim)
        .inspect({
            let (access, sc) = (access.clone(), scope.clone());
            move |item| access.saw("apps", "deployments", sc.as_deref(), item)
        })
        .inspect_ok({
            let names = cache.deployment_names.clone();
            move |ev| names.apply(ev)
        })
        .reflect(writers.deployments)
        .inspect_ok(move |ev| t.deployment(ev))
        .touched_objects()
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
        let (s, idx, sc) = (senders.clone(), index.clone(), scope.clone());
        // Cached with the pod template as JSON (`cached`).
        let wds = watcher::watcher(
            api::<CachedWorkerDeployment>(&client, scope),
            watch_config(),
        )
        .default_backoff()
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
            let (queue, ctx) = (ctx.queue.clone(), ctx.clone());
            move |ev| {
                ctx.own.seen(ev);
                wrt_triggers.worker_deployment(ev);
                if let Event::Delete(wd) = ev {
                    // Gone before its reconcile: no longer waiting, nothing to remember.
                    queue.started(&key_of(wd));
                    ctx.forget(&key_of(wd));
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
        let (wrt_synced, open) = {
            let (wds, deployments) = (wd_reader.clone(), cache.deployments.clone());
            Synced::after(async move {
                let _ = wds.wait_until_ready().await;
                let _ = deployments.wait_until_ready().await;
            })
        };
        tasks.push(Box::pin(open));
        let wrt_ctx = Arc::new(crate::wrt::Context {
            client: client.clone(),
            synced: wrt_synced,
            worker_deployments: wd_reader.clone(),
            deployments: scope_deployments,
            recorder: ctx.recorder.clone(),
            discovery: discovery.clone(),
            allowed_kinds: config.wrt_allowed_kinds.clone(),
            resync: config.intervals.steady,
            own: Default::default(),
        });
        let triggered = UnboundedReceiverStream::new(writers.wd_rx).inspect(
            move |r: &ObjectRef<CachedWorkerDeployment>| {
                queue(r.namespace.as_deref().unwrap_or_default(), &r.name)
            },
        );
        tasks.push(Box::pin(
            Controller::for_stream(wds, wd_reader)
                .owns_stream(deployments)
                .with_config(ctrl_config.clone())
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
        ));
        let wrts = watcher::watcher(
            api::<twc_api::WorkerResourceTemplate>(&client, scope),
            watch_config(),
        )
        .default_backoff()
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
        .reflect(wrt_writer)
        .inspect_ok({
            let wrt_ctx = wrt_ctx.clone();
            move |ev| wrt_ctx.own.seen(ev)
        })
        .inspect_ok({
            // A template that scales the versions takes `replicas` over: its WorkerDeployment
            // re-plans on the template's creation, spec changes and deletion.
            let (s, spec_changes) = (senders.clone(), SpecChanges::default());
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
        tasks.push(Box::pin(
            Controller::for_stream(wrts, wrt_reader)
                .with_config(ctrl_config.clone())
                .reconcile_on(UnboundedReceiverStream::new(wrt_rx))
                .run(crate::wrt::reconcile, crate::wrt::error_policy, wrt_ctx)
                .for_each(|_| async {}),
        ));
    }

    if cluster_allowed {
        let (s, idx) = (senders.clone(), index.clone());
        let spec_changes = SpecChanges::default();
        let ccs = watcher::watcher(
            Api::<ClusterConnection>::all(client.clone()),
            watch_config(),
        )
        .default_backoff()
        .modify(trim)
        .inspect({
            let access = access.clone();
            move |item| access.saw(twc_api::GROUP, "clusterconnections", None, item)
        })
        .reflect(cc_writer)
        .inspect_ok(move |ev| {
            for c in spec_changes.changed(ev) {
                s.workers(idx.users(&ConnKey::cluster(&c.name_any())));
            }
        })
        .touched_objects();
        tasks.push(Box::pin(
            Controller::for_stream(ccs, cc_reader)
                .with_config(ctrl_config)
                .reconcile_on(UnboundedReceiverStream::new(cc_rx))
                .run(
                    finalizer::reconcile_cluster_connection,
                    |_, e, _| {
                        tracing::warn!("cluster connection finalizer: {e}");
                        controller::Action::requeue(std::time::Duration::from_secs(2))
                    },
                    fin_ctx,
                )
                .for_each(|_| async {}),
        ));
    }
    futures::future::join_all(tasks).await;
}
