//! The watch caches of each scope and their name indexes, and one kind's stores across every
//! scope.

use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use twc_api::Connection;

use super::Scope;
use crate::cached::CachedWorkerDeployment;
use crate::children::CachedDeployment;
use crate::scoped::{Names, Scoped};
use crate::worker_pods::CachedPod;

/// The watch caches of one scope (all namespaces, or one), and the channels that trigger its
/// reconcilers. The writers are taken once, by the watches that feed the caches.
pub(super) struct ScopeCaches {
    pub(super) scope: Scope,
    pub(super) connections: Store<Connection>,
    pub(super) deployments: Store<CachedDeployment>,
    /// The names of the versioned Deployments by namespace, kept by their watch.
    pub(super) deployment_names: Names,
    pub(super) secrets: Store<PartialObjectMeta<Secret>>,
    pub(super) templates: Store<twc_api::WorkerResourceTemplate>,
    pub(super) template_names: Names,
    /// The pods of versioned Deployments, and their names by namespace.
    pub(super) pods: Store<CachedPod>,
    pub(super) worker_deployments: Store<CachedWorkerDeployment>,
    pub(super) pod_names: Names,
    pub(super) wd_tx: UnboundedSender<ObjectRef<CachedWorkerDeployment>>,
    pub(super) conn_tx: UnboundedSender<ObjectRef<Connection>>,
    pub(super) writers: Option<ScopeWriters>,
}

/// What the watches of a scope take: the cache writers and the trigger receivers.
pub(super) struct ScopeWriters {
    pub(super) connections: Writer<Connection>,
    pub(super) deployments: Writer<CachedDeployment>,
    pub(super) secrets: Writer<PartialObjectMeta<Secret>>,
    pub(super) templates: Writer<twc_api::WorkerResourceTemplate>,
    pub(super) pods: Writer<CachedPod>,
    pub(super) worker_deployments: Writer<CachedWorkerDeployment>,
    pub(super) wd_rx: UnboundedReceiver<ObjectRef<CachedWorkerDeployment>>,
    pub(super) conn_rx: UnboundedReceiver<ObjectRef<Connection>>,
}

impl ScopeCaches {
    pub(super) fn new(scope: Scope) -> Self {
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
pub(super) fn scoped<K>(
    caches: &[ScopeCaches],
    store: impl Fn(&ScopeCaches) -> &Store<K>,
) -> Scoped<K>
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
pub(super) fn indexed<K>(
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
