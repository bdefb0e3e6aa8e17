//! A namespace-scoped install's rights in a watched namespace live in that namespace: a Role and
//! its RoleBinding (`twc rbac --mode namespaced`, the chart). Deleting the namespace deletes
//! them with everything else, in no set order, and a controller that lost them mid-cleanup gets
//! 403 on every call: the WorkerDeployments' finalizers stay and the namespace stays
//! Terminating for ever.
//!
//! So while a WorkerDeployment there carries the controller's finalizer, or a Connection does
//! (its finalizer goes after its last user, and taking it off needs the Role too), the Role and
//! the RoleBinding carry [`RIGHTS_FINALIZER`]; it goes once none does. Deleted while their
//! namespace stays (an uninstall, a change of scope: someone takes the rights away on purpose),
//! they are let go at once. The ClusterRole of a namespace-scoped install lets the controller
//! get and patch a Role and a RoleBinding of exactly that name, so the last one is let go even
//! once the other is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use twc_api::{Connection, FINALIZER, WorkerDeployment};

pub use crate::rbac::RIGHTS_FINALIZER;
use crate::writes::{Swap, swap_finalizers};

/// How long a namespace's Role and RoleBinding are taken as held before they are looked at
/// again (someone may have taken the finalizer off, or be deleting them).
const RECHECK: Duration = Duration::from_secs(300);

/// A Role or a RoleBinding, as read and patched here.
trait Rbac:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Rbac for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
{
}

/// The controller's own Role and RoleBinding in each watched namespace.
pub struct Rights {
    client: Client,
    /// Their name; None for a cluster-wide install (its rights are in ClusterRoles).
    name: Option<String>,
    /// Namespaces whose Role and RoleBinding were found held, and when.
    held: Mutex<BTreeMap<String, Instant>>,
    /// Namespaces whose Role and RoleBinding this process let go, until it holds them again:
    /// a later release (the last WorkerDeployment's and the Connection's both ask) is a no-op.
    released: Mutex<BTreeSet<String>>,
    /// One hold or release at a time, so each sees the last one's outcome (a release racing a
    /// hold could take the RoleBinding's finalizer off after the hold put it on and marked the
    /// namespace held).
    turn: tokio::sync::Mutex<()>,
}

impl Rights {
    /// The rights of a namespace-scoped install (`name`: its Role and RoleBinding's name) or
    /// of a cluster-wide one (`None`: nothing to hold).
    pub fn new(client: Client, name: Option<String>) -> Self {
        Self {
            client,
            name,
            held: Mutex::default(),
            released: Mutex::default(),
            turn: tokio::sync::Mutex::const_new(()),
        }
    }

    fn checked(&self, ns: &str) -> bool {
        self.held
            .lock()
            .map(|h| h.get(ns).is_some_and(|at| at.elapsed() < RECHECK))
            .unwrap_or(false)
    }

    fn mark(&self, ns: &str, held: bool) {
        if let Ok(mut h) = self.held.lock() {
            if held {
                h.insert(ns.to_string(), Instant::now());
            } else {
                h.remove(ns);
            }
        }
    }

    /// A WorkerDeployment of `ns` carries the controller's finalizer: the Role and RoleBinding
    /// there carry [`RIGHTS_FINALIZER`] (looked at once per [`RECHECK`]).
    pub async fn hold(&self, ns: &str) {
        let Some(name) = &self.name else { return };
        if self.checked(ns) {
            return;
        }
        let _turn = self.turn.lock().await;
        let role = self.keep::<Role>(ns, name).await;
        let binding = self.keep::<RoleBinding>(ns, name).await;
        self.mark(ns, role && binding);
        if let Ok(mut released) = self.released.lock() {
            released.remove(ns);
        }
    }

    /// A WorkerDeployment or a Connection of `ns` has let its finalizer go: once none there
    /// carries it (read from the API server, not a cache that may lag), the Role and
    /// RoleBinding are let go.
    pub async fn release_if_unused(&self, ns: &str) {
        let Some(name) = &self.name else { return };
        let _turn = self.turn.lock().await;
        if self.released.lock().is_ok_and(|r| r.contains(ns)) {
            return;
        }
        match self.finalizers_left(ns).await {
            Ok(false) => {}
            Ok(true) => return,
            Err(e) => {
                tracing::warn!(
                    namespace = ns,
                    "cannot tell whether WorkerDeployments or Connections still need the controller's Role and RoleBinding {name}: {e}"
                );
                return;
            }
        }
        self.mark(ns, false);
        // The Role first: the RoleBinding's own rights (through the ClusterRole) let it go next.
        let role = self.let_go::<Role>(ns, name).await;
        let binding = self.let_go::<RoleBinding>(ns, name).await;
        if role
            && binding
            && let Ok(mut released) = self.released.lock()
        {
            released.insert(ns.to_string());
        }
    }

    /// Whether a WorkerDeployment or a Connection of `ns` carries the controller's finalizer.
    async fn finalizers_left(&self, ns: &str) -> kube::Result<bool> {
        let ours = |finalizers: &[String]| finalizers.iter().any(|f| f == FINALIZER);
        let wds: Api<WorkerDeployment> = Api::namespaced(self.client.clone(), ns);
        let wds = wds.list_metadata(&ListParams::default()).await?;
        if wds.items.iter().any(|w| ours(w.finalizers())) {
            return Ok(true);
        }
        let connections: Api<Connection> = Api::namespaced(self.client.clone(), ns);
        let connections = connections.list_metadata(&ListParams::default()).await?;
        Ok(connections.items.iter().any(|c| ours(c.finalizers())))
    }

    /// Puts [`RIGHTS_FINALIZER`] on `K` `ns/name`; whether that is settled until the next
    /// [`RECHECK`] (false: look again at the next reconcile). One deleted while its namespace
    /// stays is let go instead. Without the right to read it (an older release's RBAC, or a
    /// cluster-wide one), it is said once per [`RECHECK`].
    async fn keep<K: Rbac>(&self, ns: &str, name: &str) -> bool {
        let kind = K::kind(&());
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let obj = match api.get_opt(name).await {
            Ok(Some(obj)) => obj,
            // Another install's names (bound by hand): nothing of ours to hold.
            Ok(None) => {
                tracing::debug!(namespace = ns, "no {kind} {name}: nothing to hold");
                return true;
            }
            Err(e) => {
                tracing::warn!(
                    namespace = ns,
                    "cannot hold the controller's {kind} {name} (the RBAC of an older release?): deleting namespace {ns} may then wait for ever on WorkerDeployments the controller can no longer clean up: {e}"
                );
                return crate::access::forbidden_message(&e).is_some();
            }
        };
        let ours = obj.finalizers().iter().any(|f| f == RIGHTS_FINALIZER);
        if obj.meta().deletion_timestamp.is_some() && !terminating(&self.client, ns).await {
            tracing::warn!(
                namespace = ns,
                "the controller's {kind} {name} is being deleted while namespace {ns} stays: its rights there go with it"
            );
            if ours {
                self.let_go::<K>(ns, name).await;
            }
            return true;
        }
        if ours {
            return true;
        }
        let mut finalizers = obj.finalizers().to_vec();
        finalizers.push(RIGHTS_FINALIZER.to_string());
        match swap_finalizers(&api, &obj, finalizers).await {
            Ok(Swap::Written(_)) => {
                tracing::info!(
                    namespace = ns,
                    "holding the controller's {kind} {name} while WorkerDeployments there need it"
                );
                true
            }
            Ok(Swap::Gone | Swap::Stale) => false,
            Err(e) => {
                tracing::warn!(
                    namespace = ns,
                    "cannot hold the controller's {kind} {name}: {e}"
                );
                crate::access::forbidden_message(&e).is_some()
            }
        }
    }

    /// Takes [`RIGHTS_FINALIZER`] off `K` `ns/name`; whether it is off (or `K` gone).
    async fn let_go<K: Rbac>(&self, ns: &str, name: &str) -> bool {
        let kind = K::kind(&());
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        // A changed object (Stale) is read again: a few tries, then the next release.
        for _ in 0..3 {
            let obj = match api.get_opt(name).await {
                Ok(Some(obj)) => obj,
                Ok(None) => return true,
                Err(e) => {
                    tracing::warn!(
                        namespace = ns,
                        "cannot let the controller's {kind} {name} go: {e}"
                    );
                    return false;
                }
            };
            if !obj.finalizers().iter().any(|f| f == RIGHTS_FINALIZER) {
                return true;
            }
            let finalizers = obj
                .finalizers()
                .iter()
                .filter(|f| *f != RIGHTS_FINALIZER)
                .cloned()
                .collect();
            match swap_finalizers(&api, &obj, finalizers).await {
                Ok(Swap::Written(_) | Swap::Gone) => {
                    tracing::info!(
                        namespace = ns,
                        "the controller's {kind} {name} is let go: no WorkerDeployment or Connection there needs it"
                    );
                    return true;
                }
                Ok(Swap::Stale) => continue,
                Err(e) => {
                    tracing::warn!(
                        namespace = ns,
                        "cannot let the controller's {kind} {name} go: {e}"
                    );
                    return false;
                }
            }
        }
        false
    }
}

/// Whether namespace `ns` is being deleted (a read of its metadata; not known is no).
pub async fn terminating(client: &Client, ns: &str) -> bool {
    let api: Api<Namespace> = Api::all(client.clone());
    api.get_metadata_opt(ns)
        .await
        .ok()
        .flatten()
        .is_some_and(|n| n.metadata.deletion_timestamp.is_some())
}
