//! Which WorkerDeployments use which connection, kept from the WorkerDeployment watch stream
//! (no list call per event). A WorkerDeployment uses the connection its spec references while
//! it is alive, and while it is being deleted but still holds our finalizer (its Temporal
//! cleanup still needs the connection).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use kube::runtime::watcher::Event;
use twc_api::{ConnectionKind, FINALIZER, WorkerDeployment};

/// A connection: a Connection in a namespace, or a ClusterConnection.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnKey {
    pub kind: ConnectionKind,
    /// The Connection's namespace; `None` for a ClusterConnection.
    pub namespace: Option<String>,
    pub name: String,
}

impl ConnKey {
    pub fn connection(namespace: &str, name: &str) -> Self {
        Self {
            kind: ConnectionKind::Connection,
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    pub fn cluster(name: &str) -> Self {
        Self {
            kind: ConnectionKind::ClusterConnection,
            namespace: None,
            name: name.into(),
        }
    }

    /// The connection `wd` references now, if its reference is well formed.
    pub fn of(wd: &WorkerDeployment) -> Option<Self> {
        let ns = wd.namespace().unwrap_or_default();
        match wd.spec.worker_options.connection_ref.target()? {
            (ConnectionKind::Connection, name) => Some(Self::connection(&ns, name)),
            (ConnectionKind::ClusterConnection, name) => Some(Self::cluster(name)),
        }
    }
}

impl std::fmt::Display for ConnKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A WorkerDeployment: (namespace, name).
pub type WdKey = (String, String);

#[derive(Default)]
struct Inner {
    users: HashMap<ConnKey, BTreeSet<WdKey>>,
    uses: HashMap<WdKey, ConnKey>,
    /// WorkerDeployments that already worked through the connection they reference (their
    /// status says so): the only users a connection being deleted keeps.
    established: BTreeSet<WdKey>,
    /// Per watch scope, entries collected during a (re)list, swapped in when it completes.
    relist: HashMap<Option<String>, HashMap<WdKey, (ConnKey, bool)>>,
    /// Scopes whose first list has completed.
    listed: BTreeSet<Option<String>>,
    /// How many scopes must have listed before the index is ready.
    scopes: usize,
}

/// The usage index. Cheap to clone; all clones share one index.
///
/// It is fed by one or more watches ("scopes"): all namespaces (`None`), or one namespace each
/// in namespace-scoped mode.
#[derive(Clone)]
pub struct UsageIndex {
    inner: Arc<RwLock<Inner>>,
}

impl Default for UsageIndex {
    fn default() -> Self {
        Self::new(1)
    }
}

/// The connection `wd` holds, if any.
fn held(wd: &WorkerDeployment) -> Option<ConnKey> {
    let deleting = wd.metadata.deletion_timestamp.is_some();
    if deleting && !wd.finalizers().iter().any(|f| f == FINALIZER) {
        return None;
    }
    ConnKey::of(wd)
}

/// Whether `wd` already worked through the connection it references: its status records the
/// same reference (a new WorkerDeployment, or one whose reference just changed, has not).
pub fn established(wd: &WorkerDeployment) -> bool {
    let observed = wd
        .status
        .as_ref()
        .and_then(|s| s.observed_connection_ref.as_ref());
    match (ConnKey::of(wd), observed) {
        (Some(key), Some(o)) => o.kind == key.kind.to_string() && o.name == key.name,
        _ => false,
    }
}

fn key(wd: &WorkerDeployment) -> WdKey {
    (wd.namespace().unwrap_or_default(), wd.name_any())
}

impl Inner {
    fn establish(&mut self, wd: WdKey, established: bool) {
        if established {
            self.established.insert(wd);
        } else {
            self.established.remove(&wd);
        }
    }

    fn set(&mut self, wd: WdKey, conn: Option<ConnKey>) -> Option<ConnKey> {
        let old = self.uses.remove(&wd);
        if let Some(old) = &old
            && let Some(set) = self.users.get_mut(old)
        {
            set.remove(&wd);
            if set.is_empty() {
                self.users.remove(old);
            }
        }
        if let Some(conn) = conn {
            self.users
                .entry(conn.clone())
                .or_default()
                .insert(wd.clone());
            self.uses.insert(wd, conn);
        }
        old
    }
}

impl UsageIndex {
    /// An index fed by `scopes` watches.
    pub fn new(scopes: usize) -> Self {
        Self {
            inner: Arc::new(RwLock::new(Inner {
                scopes: scopes.max(1),
                ..Default::default()
            })),
        }
    }

    /// Applies a watch event of the all-namespaces watch.
    pub fn apply(&self, event: &Event<WorkerDeployment>) -> Vec<ConnKey> {
        self.apply_scoped(None, event)
    }

    /// Applies a watch event. Returns the connections whose usage may have changed (old and new
    /// reference), so their finalizers can be recomputed.
    pub fn apply_scoped(
        &self,
        scope: Option<&str>,
        event: &Event<WorkerDeployment>,
    ) -> Vec<ConnKey> {
        let scope = scope.map(str::to_string);
        let Ok(mut inner) = self.inner.write() else {
            return Vec::new();
        };
        let mut touched = Vec::new();
        match event {
            Event::Apply(wd) => {
                let new = held(wd);
                let old = inner.set(key(wd), new.clone());
                inner.establish(key(wd), established(wd));
                touched.extend(old);
                touched.extend(new);
            }
            Event::Delete(wd) => {
                touched.extend(inner.set(key(wd), None));
                inner.establish(key(wd), false);
                touched.extend(ConnKey::of(wd));
            }
            Event::Init => {
                inner.relist.insert(scope, HashMap::new());
            }
            Event::InitApply(wd) => {
                if let Some(relist) = inner.relist.get_mut(&scope)
                    && let Some(conn) = held(wd)
                {
                    relist.insert(key(wd), (conn, established(wd)));
                }
            }
            Event::InitDone => {
                let fresh = inner.relist.remove(&scope).unwrap_or_default();
                let in_scope = |(ns, _): &WdKey| scope.as_ref().is_none_or(|s| s == ns);
                let stale: Vec<WdKey> =
                    inner.uses.keys().filter(|k| in_scope(k)).cloned().collect();
                // Everything known in this scope before or after the relist may have changed.
                for wd in stale {
                    touched.extend(inner.set(wd.clone(), None));
                    inner.establish(wd, false);
                }
                for (wd, (conn, established)) in fresh {
                    touched.push(conn.clone());
                    inner.set(wd.clone(), Some(conn));
                    inner.establish(wd, established);
                }
                inner.listed.insert(scope);
            }
        }
        touched.sort();
        touched.dedup();
        touched
    }

    /// True once the first full list of WorkerDeployments has been seen. Before that, "no
    /// users" means "not known yet", so no finalizer may be removed.
    pub fn is_ready(&self) -> bool {
        self.inner
            .read()
            .map(|i| i.listed.len() >= i.scopes)
            .unwrap_or(false)
    }

    /// The WorkerDeployments using `conn`.
    pub fn users(&self, conn: &ConnKey) -> Vec<WdKey> {
        self.inner
            .read()
            .map(|i| {
                i.users
                    .get(conn)
                    .map(|s| s.iter().cloned().collect())
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// The WorkerDeployments using `conn` that already worked through it: the users a
    /// connection being deleted keeps (it takes no new ones).
    pub fn established_users(&self, conn: &ConnKey) -> Vec<WdKey> {
        self.inner
            .read()
            .map(|i| {
                i.users
                    .get(conn)
                    .map(|s| {
                        s.iter()
                            .filter(|wd| i.established.contains(*wd))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// The WorkerDeployments in `namespace` and the connections they use.
    pub fn users_in_namespace(&self, namespace: &str) -> Vec<(WdKey, ConnKey)> {
        self.inner
            .read()
            .map(|i| {
                i.uses
                    .iter()
                    .filter(|((ns, _), _)| ns == namespace)
                    .map(|(wd, c)| (wd.clone(), c.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use twc_api::{ConnectionObjectReference, ConnectionReference};

    fn wd(ns: &str, name: &str, conn: ConnectionReference) -> WorkerDeployment {
        let mut wd = WorkerDeployment::new(name, Default::default());
        wd.metadata.namespace = Some(ns.into());
        wd.spec.worker_options.connection_ref = conn;
        wd
    }

    fn by_name(n: &str) -> ConnectionReference {
        ConnectionReference {
            name: Some(n.into()),
            object_ref: None,
        }
    }

    fn cluster(n: &str) -> ConnectionReference {
        ConnectionReference {
            name: None,
            object_ref: Some(ConnectionObjectReference {
                api_group: "temporal.io".into(),
                kind: "ClusterConnection".into(),
                name: n.into(),
            }),
        }
    }

    /// Only a WorkerDeployment whose status records the reference it has now is an
    /// established user (what a connection being deleted keeps).
    #[test]
    fn established_users_are_those_that_worked_through_the_connection() {
        let index = UsageIndex::default();
        index.apply(&Event::Init);
        let mut old = wd("a", "old", cluster("shared"));
        old.status = Some(twc_api::WorkerDeploymentStatus {
            observed_connection_ref: Some(twc_api::ObservedConnectionRef {
                kind: "ClusterConnection".into(),
                name: "shared".into(),
            }),
            ..Default::default()
        });
        index.apply(&Event::InitApply(old.clone()));
        index.apply(&Event::InitApply(wd("b", "new", cluster("shared"))));
        index.apply(&Event::InitDone);
        let shared = ConnKey::cluster("shared");
        assert_eq!(index.users(&shared).len(), 2);
        assert_eq!(
            index.established_users(&shared),
            vec![("a".to_string(), "old".to_string())]
        );
        // Its reference moves elsewhere: not established there until its status says so.
        let mut moved = old;
        moved.spec.worker_options.connection_ref = by_name("local");
        index.apply(&Event::Apply(moved));
        assert!(index.established_users(&shared).is_empty());
        assert!(
            index
                .established_users(&ConnKey::connection("a", "local"))
                .is_empty()
        );
    }

    #[test]
    fn a_reference_change_touches_old_and_new_connection() {
        let index = UsageIndex::default();
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(wd("a", "w", by_name("old"))));
        index.apply(&Event::InitDone);
        let touched = index.apply(&Event::Apply(wd("a", "w", cluster("shared"))));
        assert_eq!(
            touched,
            vec![ConnKey::connection("a", "old"), ConnKey::cluster("shared")]
        );
        assert!(index.users(&ConnKey::connection("a", "old")).is_empty());
        assert_eq!(
            index.users(&ConnKey::cluster("shared")),
            vec![("a".to_string(), "w".to_string())]
        );
    }

    #[test]
    fn a_cluster_connection_is_used_across_namespaces_until_the_last_user_goes() {
        let index = UsageIndex::default();
        index.apply(&Event::Init);
        index.apply(&Event::InitDone);
        assert!(index.is_ready());
        for ns in ["a", "b"] {
            index.apply(&Event::Apply(wd(ns, "w", cluster("shared"))));
        }
        index.apply(&Event::Delete(wd("a", "w", cluster("shared"))));
        assert_eq!(index.users(&ConnKey::cluster("shared")).len(), 1);
        index.apply(&Event::Delete(wd("b", "w", cluster("shared"))));
        assert!(index.users(&ConnKey::cluster("shared")).is_empty());
    }

    #[test]
    fn a_deleting_worker_deployment_holds_its_connection_until_its_finalizer_is_gone() {
        let index = UsageIndex::default();
        index.apply(&Event::Init);
        index.apply(&Event::InitDone);
        let mut w = wd("a", "w", by_name("c"));
        w.metadata.finalizers = Some(vec![FINALIZER.into()]);
        w.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        index.apply(&Event::Apply(w.clone()));
        assert_eq!(index.users(&ConnKey::connection("a", "c")).len(), 1);
        w.metadata.finalizers = None;
        index.apply(&Event::Apply(w));
        assert!(index.users(&ConnKey::connection("a", "c")).is_empty());
    }

    #[test]
    fn not_ready_until_the_first_list_completes_and_a_relist_replaces_everything() {
        let index = UsageIndex::default();
        index.apply(&Event::Apply(wd("a", "w", by_name("c"))));
        assert!(!index.is_ready());
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(wd("a", "x", by_name("d"))));
        // During the relist the old view still answers.
        assert_eq!(index.users(&ConnKey::connection("a", "c")).len(), 1);
        let touched = index.apply(&Event::InitDone);
        assert!(touched.contains(&ConnKey::connection("a", "c")));
        assert!(index.users(&ConnKey::connection("a", "c")).is_empty());
        assert_eq!(index.users(&ConnKey::connection("a", "d")).len(), 1);
    }
}
