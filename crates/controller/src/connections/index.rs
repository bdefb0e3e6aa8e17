//! Which WorkerDeployments use which connection, kept from the WorkerDeployment watch stream
//! (no list call per event). A WorkerDeployment uses the connection its spec references while
//! it is alive, and while it is being deleted but still holds our finalizer (its Temporal
//! cleanup still needs the connection).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::watcher::Event;
use twc_api::{ConnectionKind, FINALIZER, WorkerDeployment, conditions};

use crate::cached::AsWorkerDeployment;

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

/// How a user stands towards its connection, and how it last fared through it.
type User = (Standing, Reach);

#[derive(Default)]
struct Inner {
    users: HashMap<ConnKey, BTreeSet<WdKey>>,
    uses: HashMap<WdKey, ConnKey>,
    /// How each user stands towards the connection it references (see [`Standing`]), and how
    /// it last fared through it (see [`Reach`]).
    standing: HashMap<WdKey, User>,
    /// Per watch scope, entries collected during a (re)list, swapped in when it completes.
    relist: HashMap<Option<String>, HashMap<WdKey, (ConnKey, User)>>,
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

/// How a WorkerDeployment stands towards the connection it references, which decides whether a
/// connection being deleted still serves it (it takes no new users, or it would never go).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Its status records this very reference: it works through the connection.
    Established,
    /// It was never reconciled through any connection; created then.
    Unreconciled(Option<Time>),
    /// Its status records another reference: the reference moved here since.
    Moved,
}

impl Standing {
    pub fn of(wd: &WorkerDeployment) -> Self {
        let observed = wd
            .status
            .as_ref()
            .and_then(|s| s.observed_connection_ref.as_ref());
        match (ConnKey::of(wd), observed) {
            (Some(key), Some(o)) if o.kind == key.kind.to_string() && o.name == key.name => {
                Standing::Established
            }
            (_, Some(_)) => Standing::Moved,
            (_, None) => Standing::Unreconciled(wd.metadata.creation_timestamp.clone()),
        }
    }

    /// Whether a connection whose deletion began at `deleted_at` still serves this user: it
    /// works through it, or it was created before the deletion began (it was a user waiting
    /// for its first reconcile). A WorkerDeployment created since, or one whose reference
    /// moved here, is a new user and is refused.
    pub fn kept_by(&self, deleted_at: &Time) -> bool {
        match self {
            Standing::Established => true,
            // Both times are whole seconds: one of the same second is kept (never lose a user).
            Standing::Unreconciled(created) => created.as_ref().is_some_and(|c| c <= deleted_at),
            Standing::Moved => false,
        }
    }
}

/// How a user last fared through the connection it references, read from its `Ready`
/// condition: what its reconcile met is what the controller's credentials met for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Not reconciled through this reference yet.
    Pending,
    /// Its reconcile reached Temporal through the connection (whatever the rollout's state).
    Reached,
    /// Its reconcile could not use the connection: the condition's reason and message.
    Failed { reason: String, message: String },
    /// It stopped before it used the connection, for a reason of its own (an invalid spec):
    /// the condition's reason. It says nothing of the connection, and nothing waits on it.
    Idle { reason: String },
}

/// `Ready` reasons that say a WorkerDeployment could not use its connection.
const CONNECTION_FAILURES: &[&str] = &[
    conditions::CONNECTION_NOT_FOUND,
    conditions::AUTH_SECRET_INVALID,
    conditions::TEMPORAL_CLIENT_CREATION_FAILED,
    conditions::TEMPORAL_STATE_FETCH_FAILED,
    conditions::CONNECTION_NOT_ALLOWED,
];

impl Reach {
    pub fn of(wd: &WorkerDeployment, standing: &Standing) -> Self {
        let ready = wd
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY));
        if *standing != Standing::Established {
            // Never reconciled through any connection, and stopped on its own spec.
            return match (standing, ready) {
                (Standing::Unreconciled(_), Some(c))
                    if c.status == "False" && !CONNECTION_FAILURES.contains(&c.reason.as_str()) =>
                {
                    Reach::Idle {
                        reason: c.reason.clone(),
                    }
                }
                _ => Reach::Pending,
            };
        }
        match ready {
            None => Reach::Pending,
            Some(c) if CONNECTION_FAILURES.contains(&c.reason.as_str()) => Reach::Failed {
                reason: c.reason.clone(),
                message: c.message.clone(),
            },
            Some(_) => Reach::Reached,
        }
    }
}

fn user(wd: &WorkerDeployment) -> User {
    let standing = Standing::of(wd);
    let reach = Reach::of(wd, &standing);
    (standing, reach)
}

fn key(wd: &WorkerDeployment) -> WdKey {
    (wd.namespace().unwrap_or_default(), wd.name_any())
}

impl Inner {
    fn stand(&mut self, wd: WdKey, standing: Option<User>) {
        match standing {
            Some(s) => self.standing.insert(wd, s),
            None => self.standing.remove(&wd),
        };
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
    pub fn apply_scoped<W: AsWorkerDeployment>(
        &self,
        scope: Option<&str>,
        event: &Event<W>,
    ) -> Vec<ConnKey> {
        let scope = scope.map(str::to_string);
        let Ok(mut inner) = self.inner.write() else {
            return Vec::new();
        };
        let mut touched = Vec::new();
        match event {
            Event::Apply(wd) => {
                let wd = wd.worker_deployment();
                let wd = wd.as_ref();
                let new = held(wd);
                let old = inner.set(key(wd), new.clone());
                inner.stand(key(wd), Some(user(wd)));
                touched.extend(old);
                touched.extend(new);
            }
            Event::Delete(wd) => {
                let wd = wd.worker_deployment();
                let wd = wd.as_ref();
                touched.extend(inner.set(key(wd), None));
                inner.stand(key(wd), None);
                touched.extend(ConnKey::of(wd));
            }
            Event::Init => {
                inner.relist.insert(scope, HashMap::new());
            }
            Event::InitApply(wd) => {
                let wd = wd.worker_deployment();
                let wd = wd.as_ref();
                if let Some(relist) = inner.relist.get_mut(&scope)
                    && let Some(conn) = held(wd)
                {
                    relist.insert(key(wd), (conn, user(wd)));
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
                    inner.stand(wd, None);
                }
                for (wd, (conn, standing)) in fresh {
                    touched.push(conn.clone());
                    inner.set(wd.clone(), Some(conn));
                    inner.stand(wd, Some(standing));
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

    /// The users of `conn`, being deleted since `deleted_at`, that it still serves (see
    /// [`Standing::kept_by`]).
    pub fn users_kept(&self, conn: &ConnKey, deleted_at: &Time) -> Vec<WdKey> {
        self.inner
            .read()
            .map(|i| {
                i.users
                    .get(conn)
                    .map(|s| {
                        s.iter()
                            .filter(|wd| {
                                i.standing
                                    .get(*wd)
                                    .is_some_and(|(st, _)| st.kept_by(deleted_at))
                            })
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// How each user of `conn` last fared through it, in name order; with `deleted_at`, only
    /// the users a connection being deleted still serves.
    pub fn reach(&self, conn: &ConnKey, deleted_at: Option<&Time>) -> Vec<(WdKey, Reach)> {
        self.inner
            .read()
            .map(|i| {
                let Some(users) = i.users.get(conn) else {
                    return Vec::new();
                };
                users
                    .iter()
                    .filter_map(|wd| {
                        let (standing, reach) = i.standing.get(wd)?;
                        let kept = deleted_at.is_none_or(|t| standing.kept_by(t));
                        kept.then(|| (wd.clone(), reach.clone()))
                    })
                    .collect()
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
            kind: None,
            object_ref: None,
        }
    }

    fn cluster(n: &str) -> ConnectionReference {
        ConnectionReference {
            name: None,
            kind: None,
            object_ref: Some(ConnectionObjectReference {
                api_group: "temporal.io".into(),
                kind: "ClusterConnection".into(),
                name: n.into(),
                namespace: None,
            }),
        }
    }

    fn at(rfc3339: &str) -> Time {
        serde_json::from_value(serde_json::json!(rfc3339)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A connection being deleted keeps the users that work through it and those created
    /// before its deletion began (waiting for their first reconcile); not one created since,
    /// nor one whose reference moved to it.
    #[test]
    fn a_connection_being_deleted_keeps_only_the_users_it_had() {
        let index = UsageIndex::default();
        index.apply(&Event::Init);
        let observed = |kind: &str, name: &str| {
            Some(twc_api::WorkerDeploymentStatus {
                observed_connection_ref: Some(twc_api::ObservedConnectionRef {
                    kind: kind.into(),
                    name: name.into(),
                }),
                ..Default::default()
            })
        };
        let mut working = wd("a", "working", cluster("shared"));
        working.status = observed("ClusterConnection", "shared");
        let mut waiting = wd("b", "waiting", cluster("shared"));
        waiting.metadata.creation_timestamp = Some(at("2026-12-01T08:00:00Z"));
        let mut late = wd("c", "late", cluster("shared"));
        late.metadata.creation_timestamp = Some(at("2026-12-01T10:00:00Z"));
        let mut moved = wd("d", "moved", cluster("shared"));
        moved.metadata.creation_timestamp = Some(at("2026-12-01T08:00:00Z"));
        moved.status = observed("Connection", "local");
        for w in [working, waiting, late, moved] {
            index.apply(&Event::InitApply(w));
        }
        index.apply(&Event::InitDone);
        let shared = ConnKey::cluster("shared");
        assert_eq!(index.users(&shared).len(), 4);
        let kept: Vec<String> = index
            .users_kept(&shared, &at("2026-12-01T09:00:00Z"))
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        assert_eq!(kept, ["working", "waiting"]);
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

    /// `{name, kind: ClusterConnection}` (TWC's first spelling) and `objectRef` are one
    /// reference: switching spelling touches no other connection and keeps the user established, so
    /// no finalizer moves.
    #[test]
    fn switching_the_spelling_of_a_reference_moves_nothing() {
        let index = UsageIndex::default();
        index.apply(&Event::Init);
        let mut before = wd("a", "w", cluster("shared"));
        before.status = Some(twc_api::WorkerDeploymentStatus {
            observed_connection_ref: Some(twc_api::ObservedConnectionRef {
                kind: "ClusterConnection".into(),
                name: "shared".into(),
            }),
            ..Default::default()
        });
        index.apply(&Event::InitApply(before.clone()));
        index.apply(&Event::InitDone);
        let mut after = before;
        after.spec.worker_options.connection_ref = ConnectionReference {
            name: Some("shared".into()),
            kind: Some("ClusterConnection".into()),
            object_ref: None,
        };
        assert_eq!(Standing::of(&after), Standing::Established);
        let touched = index.apply(&Event::Apply(after));
        assert!(
            touched.iter().all(|k| *k == ConnKey::cluster("shared")),
            "{touched:?}"
        );
        assert_eq!(index.users(&ConnKey::cluster("shared")).len(), 1);
        assert!(index.users(&ConnKey::connection("a", "shared")).is_empty());
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
