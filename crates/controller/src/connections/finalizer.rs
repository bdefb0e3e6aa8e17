//! The delete-protection finalizer on Connections and ClusterConnections: present exactly while
//! at least one WorkerDeployment uses the connection, computed from the usage index every time
//! (never remembered from events), so it converges after any sequence of changes and restarts.
//! The connection's status (its users and `Ready`, see [`super::status`]) comes from the same
//! index, and is written only when it changes.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use twc_api::{ClusterConnection, Connection, ConnectionStatus, FINALIZER};

use super::index::{ConnKey, Reach, UsageIndex, WdKey};
use super::status;
use crate::cached::AsWorkerDeployment;
use crate::writes::{self, Swap};
use twc_api::sharing::Verdict;

/// What the finalizer reconcilers need.
pub struct Context {
    pub client: kube::Client,
    pub index: UsageIndex,
    /// Where a Forbidden write is recorded (RBAC changed under the running controller).
    pub access: crate::access::Access,
    /// How a ClusterConnection's users are judged by its policy (None: all allowed).
    pub judge: Option<Judge>,
    /// A namespace-scoped install's Role and RoleBinding, held while a Connection there keeps
    /// its finalizer (the last write to take it off needs them).
    pub rights: Option<Arc<crate::rights::Rights>>,
}

/// A connection's users: (allowed, with how they fared; refused by its policy).
type Split = (Vec<(WdKey, Reach)>, Vec<WdKey>);

/// What judging a ClusterConnection's users takes: the caches `resolve` judges them from.
pub struct Judge {
    pub stores: super::ConnectionStores,
    pub worker_deployments: crate::scoped::Scoped<crate::cached::CachedWorkerDeployment>,
}

/// How long a ClusterConnection reconcile waits for the Namespace cache's first list.
const NAMESPACES_WAIT: Duration = Duration::from_secs(1);

impl Judge {
    /// `users` split by `sharing`: those allowed (or not judged yet: they keep the finalizer
    /// until known, counted as not reaching), and those refused. `None` while a user is not
    /// known well enough to judge: the Namespace cache before its first list, or a user the
    /// index has seen and the WorkerDeployment cache not yet (the index sees every event
    /// first; judged as allowed, a refused one would hold the finalizer for a moment).
    async fn split(&self, sharing: &twc_api::Sharing, users: Vec<(WdKey, Reach)>) -> Option<Split> {
        if sharing == &twc_api::Sharing::default() {
            return Some((users, Vec::new()));
        }
        if sharing.uses_labels()
            && let Some(namespaces) = &self.stores.namespaces
            && tokio::time::timeout(NAMESPACES_WAIT, namespaces.wait_until_ready())
                .await
                .is_err()
        {
            return None;
        }
        self.judge(sharing, users)
    }

    /// [`Judge::split`] once the caches are there.
    fn judge(&self, sharing: &twc_api::Sharing, users: Vec<(WdKey, Reach)>) -> Option<Split> {
        let (mut allowed, mut refused) = (Vec::new(), Vec::new());
        for (key, reach) in users {
            let wd = self.worker_deployments.get(&key.0, &key.1)?;
            match super::admission(&wd.worker_deployment(), sharing, &self.stores) {
                Verdict::Allowed => allowed.push((key, reach)),
                Verdict::Refused(_) => refused.push(key),
                // Held, and not reaching: its own reconcile says the same (ConnectionNotAllowed).
                Verdict::Unknown(why) => allowed.push((
                    key,
                    Reach::Failed {
                        reason: twc_api::conditions::CONNECTION_NOT_ALLOWED.into(),
                        message: why,
                    },
                )),
            }
        }
        Some((allowed, refused))
    }
}

/// Reconciles a namespaced Connection's finalizer.
pub async fn reconcile_connection(
    conn: Arc<Connection>,
    ctx: Arc<Context>,
) -> Result<Action, kube::Error> {
    let ns = conn.namespace().unwrap_or_default();
    let api: Api<Connection> = Api::namespaced(ctx.client.clone(), &ns);
    let key = ConnKey::connection(&ns, &conn.name_any());
    let users = users(&ctx.index, conn.as_ref(), &key).map(|u| (u, Vec::new()));
    let unused = users.as_ref().is_some_and(|(u, _)| u.is_empty());
    let letting_go = unused && conn.finalizers().iter().any(|f| f == FINALIZER);
    let sync = sync(&api, conn.as_ref(), &key, conn.status.as_ref(), users);
    let result = crate::metrics::counted("Connection", sync, |_| "KubernetesError").await;
    // Its finalizer taken off: the namespace's Role may be let go now, unless the cache still
    // holds a WorkerDeployment with the finalizer (the deletion the apiserver may already have
    // made is not seen yet: a reconcile of that copy needs the Role, and the WorkerDeployment's
    // Delete event lets the Role go once it comes).
    let cached_users = ctx.judge.as_ref().is_some_and(|j| {
        j.worker_deployments
            .in_namespace(&ns)
            .iter()
            .any(|w| w.finalizers().iter().any(|f| f == FINALIZER))
    });
    if result.is_ok()
        && letting_go
        && !cached_users
        && let Some(rights) = &ctx.rights
    {
        let (rights, ns) = (rights.clone(), ns.clone());
        tokio::spawn(async move { rights.release_if_unused(&ns).await });
    }
    if let Err(e) = &result
        && let Some(message) = crate::access::forbidden_message(e)
    {
        ctx.access
            .forbidden(twc_api::GROUP, "connections", Some(&ns), message);
    }
    result
}

/// Reconciles a ClusterConnection's finalizer (users in every namespace count).
pub async fn reconcile_cluster_connection(
    conn: Arc<ClusterConnection>,
    ctx: Arc<Context>,
) -> Result<Action, kube::Error> {
    let api: Api<ClusterConnection> = Api::all(ctx.client.clone());
    let key = ConnKey::cluster(&conn.name_any());
    let users = users(&ctx.index, conn.as_ref(), &key);
    let users = match (users, &ctx.judge) {
        (Some(users), Some(judge)) => match judge.split(&conn.spec.sharing, users).await {
            Some(split) => Some(split),
            None => return Ok(Action::requeue(Duration::from_millis(500))),
        },
        (users, _) => users.map(|u| (u, Vec::new())),
    };
    let sync = sync(&api, conn.as_ref(), &key, conn.status.as_ref(), users);
    let result = crate::metrics::counted("ClusterConnection", sync, |_| "KubernetesError").await;
    if let Err(e) = &result
        && let Some(message) = crate::access::forbidden_message(e)
    {
        ctx.access
            .forbidden(twc_api::GROUP, "clusterconnections", None, message);
    }
    result
}

/// What to change on a connection, given its users: (finalizers to write, if any).
pub fn desired_finalizers(current: &[String], users: usize, deleting: bool) -> Option<Vec<String>> {
    let has = current.iter().any(|f| f == FINALIZER);
    if users > 0 && !has && !deleting {
        let mut f = current.to_vec();
        f.push(FINALIZER.to_string());
        Some(f)
    } else if users == 0 && has {
        Some(
            current
                .iter()
                .filter(|f| *f != FINALIZER)
                .cloned()
                .collect(),
        )
    } else {
        None
    }
}

/// The users of connection `obj` from the index, with how they fared; None until every
/// WorkerDeployment has been seen ("no users" is not known before). A connection being deleted
/// takes no new users: only those it had hold it (a new reference gets ConnectionNotFound
/// instead, see `resolve`).
fn users<K: Resource>(index: &UsageIndex, obj: &K, key: &ConnKey) -> Option<Vec<(WdKey, Reach)>> {
    index
        .is_ready()
        .then(|| index.reach(key, obj.meta().deletion_timestamp.as_ref()))
}

/// Writes the finalizer and status of `obj` for its `users`: (allowed, refused), None when not
/// known yet.
async fn sync<K>(
    api: &Api<K>,
    obj: &K,
    key: &ConnKey,
    current: Option<&ConnectionStatus>,
    users: Option<Split>,
) -> Result<Action, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let Some((users, refused)) = users else {
        return Ok(Action::requeue(Duration::from_millis(500)));
    };
    let name = obj.name_any();
    let deleting = obj.meta().deletion_timestamp.is_some();
    if let Some(finalizers) = desired_finalizers(obj.finalizers(), users.len(), deleting) {
        let adding = finalizers.len() > obj.finalizers().len();
        match writes::swap_finalizers(api, obj, finalizers).await? {
            Swap::Written(_) => tracing::info!(
                connection = %key,
                users = users.len(),
                "{} finalizer {FINALIZER}",
                if adding { "added" } else { "removed" }
            ),
            Swap::Stale => return Ok(Action::requeue(Duration::from_millis(100))),
            Swap::Gone => return Ok(Action::await_change()),
        }
    }
    let namespace = obj.meta().namespace.clone().unwrap_or_default();
    let kind = if namespace.is_empty() {
        "ClusterConnection"
    } else {
        "Connection"
    };
    // A connection on its way out with nobody left is not worth a status write.
    if deleting && users.is_empty() {
        crate::metrics::global().forget_conditions(kind, &namespace, &name);
        return Ok(Action::await_change());
    }
    let mut desired = status::desired(current, &users, obj.meta().generation, SystemTime::now());
    status::refused(&mut desired, &refused);
    if current != Some(&desired) {
        writes::apply_status(api, &name, &desired).await?;
    }
    crate::metrics::global().conditions(kind, &namespace, &name, &desired.conditions);
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizer_follows_usage() {
        let none: Vec<String> = vec![];
        let ours = vec![FINALIZER.to_string()];
        let other = vec!["example.com/keep".to_string()];
        assert_eq!(desired_finalizers(&none, 1, false), Some(ours.clone()));
        assert_eq!(desired_finalizers(&ours, 1, false), None);
        assert_eq!(desired_finalizers(&ours, 0, false), Some(vec![]));
        assert_eq!(desired_finalizers(&none, 0, false), None);
        // Another controller's finalizer is kept.
        let both = vec!["example.com/keep".to_string(), FINALIZER.to_string()];
        assert_eq!(desired_finalizers(&both, 0, true), Some(other.clone()));
        assert_eq!(desired_finalizers(&other, 2, false), Some(both));
        // No finalizer can be added to an object already being deleted.
        assert_eq!(desired_finalizers(&none, 1, true), None);
    }

    fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Users in namespaces labelled `team: a` (allowed) and `team: b` (refused); the
    /// WorkerDeployment cache has `cached` of them.
    fn judge(cached: &[&str]) -> Judge {
        use kube::runtime::{reflector, watcher};
        let (namespaces, mut ns_writer) = reflector::store();
        for (ns, team) in [("a", "a"), ("b", "b")] {
            ns_writer.apply_watcher_event(&watcher::Event::Apply(from_json(serde_json::json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"team": team}}
            }))));
        }
        let (wds, mut wd_writer) = reflector::store();
        for ns in cached {
            let wd: twc_api::WorkerDeployment = from_json(serde_json::json!({
                "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
                "metadata": {"name": "w", "namespace": ns},
                "spec": {
                    "workerOptions": {"connectionRef": {"objectRef": {"kind": "ClusterConnection", "name": "shared"}}, "temporalNamespace": "default"},
                    "rollout": {"strategy": "AllAtOnce"},
                    "template": {"spec": {"containers": []}}
                }
            }));
            wd_writer.apply_watcher_event(&watcher::Event::Apply(
                crate::cached::CachedWorkerDeployment::new(wd),
            ));
        }
        Judge {
            stores: super::super::ConnectionStores {
                connections: crate::scoped::Scoped::new(vec![]),
                cluster_connections: None,
                namespace_scoped: false,
                namespaces: Some(namespaces),
                access: crate::access::Access::default(),
            },
            worker_deployments: crate::scoped::Scoped::new(vec![(None, wds)]),
        }
    }

    fn team_a() -> twc_api::Sharing {
        from_json(serde_json::json!({
            "allowedNamespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "a"}}}
        }))
    }

    fn users() -> Vec<(WdKey, Reach)> {
        ["a", "b"]
            .map(|ns| ((ns.to_string(), "w".to_string()), Reach::Reached))
            .into()
    }

    #[test]
    fn a_user_not_cached_yet_is_not_judged() {
        // Before: judged allowed, so a refused one held the finalizer until its cache event.
        assert_eq!(judge(&["a"]).judge(&team_a(), users()), None);
        let (allowed, refused) = judge(&["a", "b"])
            .judge(&team_a(), users())
            .unwrap_or_default();
        assert_eq!(allowed, [(("a".into(), "w".into()), Reach::Reached)]);
        assert_eq!(refused, [("b".to_string(), "w".to_string())]);
    }

    #[test]
    fn users_not_known_hold_it_and_do_not_make_it_ready() {
        let judge = judge(&["a", "b"]);
        judge
            .stores
            .access
            .forbidden("", "namespaces", None, "namespaces is forbidden".into());
        let (allowed, refused) = judge.judge(&team_a(), users()).unwrap_or_default();
        assert!(refused.is_empty());
        assert_eq!(allowed.len(), 2);
        assert_eq!(
            desired_finalizers(&[], allowed.len(), false),
            Some(vec![FINALIZER.to_string()])
        );
        // Before: "2 of 2 WorkerDeployments reach Temporal through it", Ready=True.
        let status = status::desired(None, &allowed, Some(1), SystemTime::UNIX_EPOCH);
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap_or_else(|| panic!("no Ready in {status:?}"));
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ConnectionNotAllowed"),
            "{}",
            ready.message
        );
        assert!(
            ready
                .message
                .starts_with("none of its 2 WorkerDeployments reaches Temporal"),
            "{}",
            ready.message
        );
    }
}
