//! Wiring: watches, caches, triggers and the three reconcilers (WorkerDeployment, Connection
//! finalizer, ClusterConnection finalizer).
//!
//! Every kind is watched once per scope (all namespaces, or each `--watch-namespaces` entry).
//! Events of Connections, ClusterConnections and Secrets are mapped to the WorkerDeployments
//! that use them through the usage index (no list call per event); events of
//! WorkerDeployments are mapped to the connections whose finalizer may change.

mod absent;
mod caches;
mod finalizers;
mod templates;
mod triggers;
mod watches;
mod worker_deployments;

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller;
use kube::runtime::reflector;
use kube::runtime::watcher;
use kube::{Client, Resource};
use tokio::sync::mpsc::unbounded_channel;
use twc_api::ClusterConnection;

use crate::access::Access;
use crate::config::{Intervals, Limits};
use crate::connections::{ConnectionStores, UsageIndex, finalizer};
use crate::temporal::pool::ClientPool;
use crate::temporal::reads::ReadConfig;
use caches::{ScopeCaches, scoped};
use triggers::Senders;

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
    /// At most this many versioned Deployments restart at once per Temporal address and
    /// namespace for renewed credential Secrets (0: no pace).
    pub restart_pace: usize,
    /// Name of the controller's Role and RoleBinding in each of `watch_namespaces`, held while
    /// WorkerDeployments there need them (`rights`).
    pub rbac_name: String,
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
            restart_pace: crate::restarts::DEFAULT_LIMIT,
            rbac_name: crate::rbac::NAME.into(),
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

/// The watch of `K` in `scope`, retried with kube's backoff; in a watched namespace that is not
/// there, read as empty ([`absent`]).
fn watch<K>(
    client: &Client,
    scope: &Scope,
    config: watcher::Config,
) -> futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    use kube::runtime::WatchStreamExt as _;
    let stream = watcher::watcher(api::<K>(client, scope), config).default_backoff();
    absent::empty_while_absent(stream, client.clone(), scope.clone())
}

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
/// namespace ([`crate::access::may_answered`]: asked again until it answers).
pub async fn may(client: &Client, verb: &str, resource: &str) -> bool {
    crate::access::may_answered(client, twc_api::GROUP, resource, verb).await
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
            "not allowed to list, watch and patch ClusterConnections: they are not watched, and WorkerDeployments referencing one report ClusterConnectionUnsupported"
        );
    }
    // Namespaces' labels are read only for ClusterConnections' `allowedNamespaces` selectors.
    let mut namespaces_allowed = cluster_allowed;
    for verb in ["list", "watch"] {
        namespaces_allowed &= crate::access::may_answered(&client, "", "namespaces", verb).await;
    }
    if cluster_allowed && !namespaces_allowed {
        tracing::warn!(
            "not allowed to list and watch Namespaces: a ClusterConnection whose spec.allowedNamespaces uses a selector refuses every WorkerDeployment until this is granted"
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
    let allowed = Allowed {
        cluster_connections: cluster_allowed,
        namespaces: namespaces_allowed,
    };
    let fut = run_controllers(client, config, scopes, index, pool, allowed, access);
    (handle, fut)
}

/// The cluster-wide watches RBAC allowed at start.
#[derive(Clone, Copy)]
struct Allowed {
    cluster_connections: bool,
    namespaces: bool,
}

/// What the watches and reconcilers of every scope share.
struct Shared {
    client: Client,
    config: Config,
    index: UsageIndex,
    access: Access,
    senders: Arc<Senders>,
    ctrl_config: controller::Config,
}

/// Sets up every cache, watch and reconciler, each by its own function, and runs them.
async fn run_controllers(
    client: Client,
    config: Config,
    scopes: Vec<Scope>,
    index: UsageIndex,
    pool: ClientPool,
    allowed: Allowed,
    access: Access,
) {
    let cluster_allowed = allowed.cluster_connections;
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
    let (ns_reader, ns_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let stores = ConnectionStores {
        connections: scoped(&caches, |c| &c.connections),
        cluster_connections: cluster_allowed.then(|| cc_reader.clone()),
        namespace_scoped: !config.watch_namespaces.is_empty(),
        namespaces: allowed.namespaces.then(|| ns_reader.clone()),
        access: access.clone(),
    };
    let (ctx, open) =
        worker_deployments::context(&client, &config, &caches, stores.clone(), pool, &senders);
    let fin_ctx = Arc::new(finalizer::Context {
        client: client.clone(),
        index: index.clone(),
        access: access.clone(),
        judge: Some(finalizer::Judge {
            stores: stores.clone(),
            worker_deployments: ctx.worker_deployments.clone(),
        }),
        rights: Some(ctx.rights.clone()),
    });
    let ctrl_config = controller::Config::default().concurrency(config.concurrency);
    for kind in [
        "WorkerDeployment",
        "WorkerResourceTemplate",
        "Connection",
        "ClusterConnection",
    ] {
        crate::metrics::global().set_max_concurrent(kind, config.concurrency);
    }
    let discovery = crate::wrt::Discovery::default();
    let mut tasks: Vec<futures::future::BoxFuture<'static, ()>> = vec![
        Box::pin(open),
        // Permissions met Forbidden are asked about again until they are back.
        Box::pin(access.clone().keep_checking(client.clone(), ACCESS_RECHECK)),
    ];
    let shared = Shared {
        client,
        config,
        index,
        access,
        senders,
        ctrl_config,
    };

    for cache in &mut caches {
        let Some(writers) = cache.writers.take() else {
            continue;
        };
        tasks.push(watches::secrets(&shared, &stores, cache, writers.secrets));
        tasks.push(watches::worker_pods(&shared, cache, writers.pods));
        tasks.push(finalizers::connections(
            &shared,
            cache,
            writers.connections,
            writers.conn_rx,
            &fin_ctx,
        ));
        let (wrt_triggers, wrt_rx) = templates::triggers(cache);
        let (wrt_open, wrt_ctx) = templates::context(&shared, &ctx, cache, &discovery);
        tasks.push(wrt_open);
        tasks.push(worker_deployments::controller(
            &shared,
            &ctx,
            cache,
            writers.deployments,
            writers.worker_deployments,
            writers.wd_rx,
            wrt_triggers,
        ));
        tasks.push(templates::controller(
            &shared,
            cache,
            writers.templates,
            wrt_rx,
            wrt_ctx,
        ));
    }

    if allowed.namespaces {
        tasks.push(watches::namespaces(&shared, ns_writer));
    }
    if cluster_allowed {
        tasks.push(finalizers::cluster_connections(
            &shared, cc_reader, cc_writer, cc_rx, fin_ctx,
        ));
    }
    futures::future::join_all(tasks).await;
}
