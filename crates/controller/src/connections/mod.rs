//! Connection / ClusterConnection: resolving a WorkerDeployment's reference, reading its
//! credential Secret (always from the WorkerDeployment's own namespace), getting a Temporal
//! client from the pool, and keeping the delete-protection finalizer right.

pub mod finalizer;
pub mod index;
pub mod status;

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use temporalio_client::Connection as TemporalConnection;
use twc_api::sharing::Verdict;
use twc_api::{
    ClusterConnection, Connection, ConnectionKind, ConnectionSpec, Sharing, WorkerDeployment,
};

use crate::error::{Error, Result};
use crate::scoped::Scoped;
pub use crate::temporal::credentials as auth;
use crate::temporal::pool::{ClientPool, PoolKey, SecretVersion};
pub use index::{ConnKey, UsageIndex};

/// The connection a WorkerDeployment resolved to.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub key: ConnKey,
    pub spec: ConnectionSpec,
    /// Who may use it for what: a ClusterConnection's policy (a Connection allows everything
    /// to the WorkerDeployments of its namespace).
    pub sharing: Sharing,
}

impl Resolved {
    /// Whether the controller may act in Temporal namespace `name` through this connection
    /// for the WorkerDeployment it resolved for (the spec's namespace was judged in
    /// [`resolve`]; versions left in other ones are judged here).
    pub fn allows_temporal_namespace(&self, name: &str) -> bool {
        self.sharing.allows_temporal_namespace(name)
    }

    /// Why the controller may not act in Temporal namespace `name`, said for people.
    pub fn refusal_in(&self, name: &str) -> String {
        format!(
            "{} does not allow Temporal namespace {name:?} (spec.allowedTemporalNamespaces [{}])",
            self.key,
            self.sharing.allowed_temporal_namespaces.join(", ")
        )
    }
}

/// The caches connections are resolved from.
#[derive(Clone)]
pub struct ConnectionStores {
    pub connections: Scoped<Connection>,
    /// `None` when the controller may not read ClusterConnections (namespace-scoped install).
    pub cluster_connections: Option<Store<ClusterConnection>>,
    /// The controller watches only some namespaces (`--watch-namespaces`).
    pub namespace_scoped: bool,
    /// Namespaces' labels (metadata only), for ClusterConnections' `allowedNamespaces`
    /// selectors; `None` when the controller may not watch Namespaces.
    pub namespaces: Option<Store<PartialObjectMeta<Namespace>>>,
    /// Watches that meet Forbidden now.
    pub access: crate::access::Access,
}

/// Resolves `wd`'s `connectionRef`. A ClusterConnection is looked up without a namespace; a
/// Connection only in the WorkerDeployment's namespace.
pub fn resolve(wd: &WorkerDeployment, stores: &ConnectionStores) -> Result<Resolved> {
    let ns = wd.namespace().unwrap_or_default();
    let key = ConnKey::of(wd).ok_or_else(|| {
        Error::InvalidSpec(
            "spec.workerOptions.connectionRef: set either name, or objectRef with kind Connection or ClusterConnection".into(),
        )
    })?;
    let (spec, sharing, deleted_at) = match key.kind {
        ConnectionKind::Connection => stores
            .connections
            .get(&ns, &key.name)
            .map(|c| {
                let deleted_at = c.metadata.deletion_timestamp.clone();
                (c.spec.clone(), Sharing::default(), deleted_at)
            })
            .ok_or_else(|| {
                Error::ConnectionNotFound(format!(
                    "Connection {ns}/{} not found (connectionRef of WorkerDeployment {ns}/{})",
                    key.name,
                    wd.name_any()
                ))
            })?,
        ConnectionKind::ClusterConnection => {
            // Allowed at start, forbidden since: the cache is stale, and nothing can be kept
            // right on the ClusterConnection (its finalizer, its status).
            if let Some(message) = stores.access.lost("clusterconnections") {
                return Err(Error::ConnectionNotFound(format!(
                    "ClusterConnection {} cannot be used: the controller lost its permission to watch ClusterConnections ({message}); re-apply its RBAC (the ClusterRole temporal-worker-controller-cluster-scoped of `twc rbac`, or the chart's rbac.scope=cluster)",
                    key.name
                )));
            }
            let store = stores.cluster_connections.as_ref().ok_or_else(|| {
                // TWC's sentence first, then what to do about it.
                let why = if stores.namespace_scoped {
                    "the controller is namespace-scoped"
                } else {
                    "the controller may not read ClusterConnections"
                };
                Error::ClusterConnectionUnsupported(format!(
                    "ClusterConnection {:?} cannot be used because {why}: it was not allowed to list, watch and patch ClusterConnections when it started (its RBAC: the ClusterRole temporal-worker-controller-cluster-scoped of `twc rbac`, or the chart's rbac.scope=cluster); grant them and restart the controller, or reference a Connection in namespace {ns}",
                    key.name
                ))
            })?;
            let cc = store.get(&ObjectRef::new(&key.name)).ok_or_else(|| {
                Error::ConnectionNotFound(format!(
                    "ClusterConnection {} not found (connectionRef of WorkerDeployment {ns}/{})",
                    key.name,
                    wd.name_any()
                ))
            })?;
            // Judged before anything of the tenant is read (its Secrets) or dialled.
            match admission(wd, &cc.spec.sharing, stores) {
                Verdict::Allowed => {}
                Verdict::Refused(rule) => {
                    return Err(Error::ConnectionNotAllowed(format!(
                        "ClusterConnection {} does not allow WorkerDeployment {ns}/{}: {rule}; its running versions are left as they are",
                        key.name,
                        wd.name_any()
                    )));
                }
                Verdict::Unknown(why) => {
                    return Err(Error::ConnectionNotAllowed(format!(
                        "not known yet whether ClusterConnection {} allows WorkerDeployment {ns}/{}: {why}",
                        key.name,
                        wd.name_any()
                    )));
                }
            }
            (
                cc.spec.connection.clone(),
                cc.spec.sharing.clone(),
                cc.metadata.deletion_timestamp.clone(),
            )
        }
    };
    // A connection being deleted serves the WorkerDeployments already using it until they
    // let go, and takes no new ones (or it would never go away).
    if let Some(deleted_at) = &deleted_at
        && !index::Standing::of(wd).kept_by(deleted_at)
    {
        return Err(Error::ConnectionNotFound(format!(
            "{key} is being deleted and takes no new users (it stays only while the WorkerDeployments already using it need it); reference another connection"
        )));
    }
    Ok(Resolved { key, spec, sharing })
}

/// How `sharing` (a ClusterConnection's policy) judges `wd`, with its namespace's labels from
/// the Namespace cache (looked up only when the policy has a selector).
pub fn admission(wd: &WorkerDeployment, sharing: &Sharing, stores: &ConnectionStores) -> Verdict {
    let ns = wd.namespace().unwrap_or_default();
    let temporal_ns = &wd.spec.worker_options.temporal_namespace;
    if !sharing.uses_labels() {
        return sharing.judge(&ns, None, temporal_ns);
    }
    // Allowed at start, forbidden since: the cache holds labels as they were, so a namespace
    // relabelled out of the selector would keep being admitted. Not known, and held.
    if let Some(message) = stores.access.lost("namespaces") {
        return Verdict::Unknown(format!(
            "the controller lost its permission to watch Namespaces ({message}), so the labels of namespace {ns} are not known (spec.allowedNamespaces uses a selector); re-apply its RBAC (the ClusterRole temporal-worker-controller-cluster-scoped of `twc rbac`, or the chart's rbac.scope=cluster)"
        ));
    }
    match &stores.namespaces {
        Some(namespaces) => {
            let labels = namespaces
                .get(&ObjectRef::new(&ns))
                .map(|n| n.labels().clone());
            sharing.judge(&ns, labels.as_ref(), temporal_ns)
        }
        None => Verdict::Unknown(
            "the controller may not watch Namespaces, so a spec.allowedNamespaces selector cannot be evaluated (grant get, list and watch on namespaces: the ClusterRole temporal-worker-controller-cluster-scoped of `twc rbac`, or the chart's rbac.scope=cluster)".into(),
        ),
    }
}

/// Names of the Secrets a connection spec needs: (credential Secret, CA Secret).
pub fn secret_names(spec: &ConnectionSpec) -> Vec<String> {
    let mut names: Vec<String> = spec.secret_name().map(str::to_string).into_iter().collect();
    if let Some(ca) = spec
        .tls
        .as_ref()
        .and_then(|t| t.ca_cert_secret_ref.as_ref())
    {
        names.push(ca.name.clone());
    }
    names
}

/// The client the pool still holds for `spec` in `temporal_namespace`, dialled with
/// `namespace`'s Secrets whatever their versions, and its key: for the cleanup of a namespace
/// being deleted, whose Secrets Kubernetes takes in no set order. Reads no Secret; a client
/// dialled with another namespace's Secrets never matches.
pub fn dialled_before(
    pool: &ClientPool,
    spec: &ConnectionSpec,
    namespace: &str,
    temporal_namespace: &str,
) -> Option<(TemporalConnection, PoolKey)> {
    let secrets = secret_names(spec)
        .into_iter()
        .map(|name| SecretVersion {
            namespace: namespace.to_string(),
            name,
            resource_version: String::new(),
        })
        .collect();
    let key = PoolKey::new(spec, temporal_namespace, secrets);
    pool.dialled_with_any_version(&key, SystemTime::now())
}

/// A Temporal client for `wd` through the connection `spec`, from the pool or freshly dialled. Secrets
/// are read from `namespace` (the WorkerDeployment's) and nowhere else. `secret_meta` (a
/// metadata-only watch cache of Secrets) supplies resourceVersions for the pool key, so a
/// reconcile with a pooled client reads no Secret at all.
pub async fn temporal_client(
    kube: &Client,
    pool: &ClientPool,
    secret_meta: &Scoped<PartialObjectMeta<Secret>>,
    spec: &ConnectionSpec,
    namespace: &str,
    temporal_namespace: &str,
) -> Result<(TemporalConnection, PoolKey)> {
    let cached_version = |name: &str| {
        secret_meta.get(namespace, name).map(|m| SecretVersion {
            namespace: namespace.to_string(),
            name: name.to_string(),
            resource_version: m.resource_version().unwrap_or_default(),
        })
    };
    let names = secret_names(spec);
    let mut key = PoolKey::new(
        spec,
        temporal_namespace,
        names.iter().filter_map(|n| cached_version(n)).collect(),
    );
    let now = SystemTime::now();
    if key.secrets.len() == names.len()
        && let Some(conn) = pool.get(&key, now)
    {
        return Ok((conn, key));
    }
    // Pool miss: read the Secrets themselves.
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), namespace);
    let credential = match spec.secret_name() {
        Some(name) => secrets.get_opt(name).await?,
        None => None,
    };
    let ca = match spec
        .tls
        .as_ref()
        .and_then(|t| t.ca_cert_secret_ref.as_ref())
    {
        Some(r) => secrets.get_opt(&r.name).await?,
        None => None,
    };
    let auth = auth::auth_from_secrets(spec, namespace, credential.as_ref(), ca.as_ref(), now)
        .map_err(Error::AuthSecretInvalid)?;
    if let (Some(not_after), Some(secret)) = (auth.not_after(), spec.secret_name()) {
        crate::metrics::global().client_certificate(namespace, secret, not_after);
    }
    key.secrets = [credential.as_ref(), ca.as_ref()]
        .into_iter()
        .flatten()
        .map(|s| SecretVersion {
            namespace: namespace.to_string(),
            name: s.name_any(),
            resource_version: s.resource_version().unwrap_or_default(),
        })
        .collect();
    if let Some(conn) = pool.get(&key, now) {
        return Ok((conn, key));
    }
    let conn = pool
        .dial(key.clone(), &auth)
        .await
        .map_err(Error::TemporalDial)?;
    Ok((conn, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};
    use serde_json::json;

    fn namespace(name: &str, team: &str) -> PartialObjectMeta<Namespace> {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"team": team}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The labels of the namespaces cache are trusted only while the controller may watch
    /// Namespaces: after a Forbidden the cache keeps labels that may have changed since.
    #[test]
    fn a_lost_namespace_watch_makes_the_selector_not_known() {
        let (namespaces, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Apply(namespace("tenant", "a")));
        let stores = ConnectionStores {
            connections: Scoped::new(vec![]),
            cluster_connections: None,
            namespace_scoped: false,
            namespaces: Some(namespaces),
            access: crate::access::Access::default(),
        };
        let sharing: Sharing = serde_json::from_value(json!({
            "allowedNamespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "a"}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let wd: WorkerDeployment = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": "w", "namespace": "tenant"},
            "spec": {
                "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "default"},
                "rollout": {"strategy": "AllAtOnce"},
                "template": {"spec": {"containers": []}}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(admission(&wd, &sharing, &stores), Verdict::Allowed);

        stores.access.forbidden(
            "",
            "namespaces",
            None,
            "namespaces is forbidden: User \"system:serviceaccount:s:c\" cannot watch resource \"namespaces\"".into(),
        );
        match admission(&wd, &sharing, &stores) {
            Verdict::Unknown(why) => {
                assert!(
                    why.contains("lost its permission to watch Namespaces"),
                    "{why}"
                );
                assert!(why.contains("namespace tenant"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
