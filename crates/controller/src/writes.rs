//! The writes every reconciler shares: Events, status by server-side apply, and
//! compare-and-swap patches of metadata (finalizers, owner references). One field manager.

use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// The field manager of every write.
pub const MANAGER: &str = "temporal-worker-controller";

/// Publishes an event about `obj`. A failure to publish is only logged: events are for
/// people, never a reason to fail a reconcile.
pub async fn publish<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &obj.object_ref(&())).await {
        tracing::debug!("cannot publish event: {e}");
    }
}

/// Writes the whole `status` of `name` with server-side apply (our field manager owns what it
/// sends); an object deleted meanwhile is fine.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl Serialize,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    match api
        .patch_status(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// How a compare-and-swap write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swap {
    /// Written: the change comes back as a watch event.
    Written,
    /// The object is gone.
    Gone,
    /// The object changed since it was read (a stale cached copy): recompute from the new one.
    Stale,
}

/// Sets `metadata.<field>` of `obj` to `value` with its resourceVersion as a precondition, so
/// a concurrent change wins and the caller recomputes. Never loses another writer's update.
pub async fn swap_metadata<K>(
    api: &Api<K>,
    obj: &K,
    field: &str,
    value: serde_json::Value,
) -> Result<Swap, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut metadata = serde_json::Map::new();
    metadata.insert("resourceVersion".into(), json!(obj.resource_version()));
    metadata.insert(field.into(), value);
    let patch = json!({ "metadata": metadata });
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(Swap::Written),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Swap::Gone),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Swap::Stale),
        Err(e) => Err(e),
    }
}

/// [`swap_metadata`] of the finalizers.
pub async fn swap_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    finalizers: Vec<String>,
) -> Result<Swap, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    swap_metadata(api, obj, "finalizers", json!(finalizers)).await
}

/// The API of `obj`'s kind in `obj`'s namespace.
pub fn namespaced_api<K>(client: &kube::Client, obj: &K) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default())
}
