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

use super::index::{ConnKey, UsageIndex};
use super::status;
use crate::writes::{self, Swap};

/// What the finalizer reconcilers need.
pub struct Context {
    pub client: kube::Client,
    pub index: UsageIndex,
    /// Where a Forbidden write is recorded (RBAC changed under the running controller).
    pub access: crate::access::Access,
}

/// Reconciles a namespaced Connection's finalizer.
pub async fn reconcile_connection(
    conn: Arc<Connection>,
    ctx: Arc<Context>,
) -> Result<Action, kube::Error> {
    let ns = conn.namespace().unwrap_or_default();
    let api: Api<Connection> = Api::namespaced(ctx.client.clone(), &ns);
    let key = ConnKey::connection(&ns, &conn.name_any());
    let sync = sync(&api, conn.as_ref(), &key, conn.status.as_ref(), &ctx.index);
    let result = crate::metrics::counted("Connection", sync, |_| "KubernetesError").await;
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
    let sync = sync(&api, conn.as_ref(), &key, conn.status.as_ref(), &ctx.index);
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

async fn sync<K>(
    api: &Api<K>,
    obj: &K,
    key: &ConnKey,
    current: Option<&ConnectionStatus>,
    index: &UsageIndex,
) -> Result<Action, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    if !index.is_ready() {
        // Until every WorkerDeployment has been seen, "no users" is not known.
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let name = obj.name_any();
    let deleted_at = obj.meta().deletion_timestamp.as_ref();
    let deleting = deleted_at.is_some();
    // A connection being deleted takes no new users: only those it had hold it (a new
    // reference gets ConnectionNotFound instead, see `resolve`).
    let users = index.reach(key, deleted_at);
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
    // A connection on its way out with nobody left is not worth a status write.
    if deleting && users.is_empty() {
        return Ok(Action::await_change());
    }
    let desired = status::desired(current, &users, obj.meta().generation, SystemTime::now());
    if current != Some(&desired) {
        writes::apply_status(api, &name, &desired).await?;
    }
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
}
