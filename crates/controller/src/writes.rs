//! The writes every reconciler shares: Events, status by server-side apply, and
//! compare-and-swap patches of metadata (finalizers, owner references). One field manager.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::events::{Event, EventType, Recorder};

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
    };
    match recorder.publish(&ev, &obj.object_ref(&())).await {
        Ok(()) => {}
        // A namespace being deleted takes no new object, an Event included: what it would
        // have said goes to the log instead of being lost.
        Err(kube::Error::Api(s))
            if s.details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")) =>
        {
            let ns = obj.meta().namespace.as_deref().unwrap_or_default();
            let name = obj.meta().name.as_deref().unwrap_or_default();
            tracing::warn!(
                namespace = ns,
                name,
                reason,
                "{} {name}: {} (no Event: namespace {ns} is being deleted)",
                K::kind(&()),
                ev.note.as_deref().unwrap_or_default()
            );
        }
        Err(e) => tracing::debug!("cannot publish event: {e}"),
    }
}

/// Writes the whole `status` of `name` with server-side apply (our field manager owns what it
/// sends) and returns the object as written; an object deleted meanwhile is fine (`None`).
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl Serialize,
) -> Result<Option<K>, kube::Error>
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
        Ok(written) => Ok(Some(written)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The objects this controller wrote whose write the watch cache has not shown yet.
///
/// A reconcile that follows its own status write closely (a trigger that arrived meanwhile, a
/// short requeue) can be handed the cached copy from before that write. Computed from it, the
/// status would lose what was just written: transition times restart, events derived from
/// the status change are published twice. So each write is remembered with the
/// resourceVersions it replaced, and [`OwnWrites::freshest`] hands out the written copy while
/// the cache still holds one of those. Only this process's own writes are remembered, trimmed
/// as the cache trims its copies, and only until the watch shows the write or anything newer
/// ([`OwnWrites::seen`]): with thousands of objects, a copy of each kept until its next
/// reconcile was more memory than the caches.
pub struct OwnWrites<K> {
    memos: Mutex<HashMap<String, Memo<K>>>,
}

struct Memo<K> {
    /// The resourceVersions the write replaced (the cached copy it was computed from, and any
    /// earlier write of ours still unseen).
    older: Vec<String>,
    written: Arc<K>,
}

impl<K> Default for OwnWrites<K> {
    fn default() -> Self {
        Self {
            memos: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Resource> OwnWrites<K> {
    /// `cached`, or the copy this process wrote after it when the cache has not caught up.
    pub fn freshest(&self, cached: Arc<K>) -> Arc<K> {
        let (Some(uid), Ok(mut memos)) = (cached.meta().uid.clone(), self.memos.lock()) else {
            return cached;
        };
        let Some(memo) = memos.get(&uid) else {
            return cached;
        };
        if cached
            .meta()
            .resource_version
            .as_ref()
            .is_some_and(|rv| memo.older.contains(rv))
        {
            return memo.written.clone();
        }
        memos.remove(&uid);
        cached
    }

    /// Remembers that `from` (the copy a reconcile read) was replaced by `written`.
    pub fn wrote(&self, from: &K, mut written: K) {
        let (Some(uid), Ok(mut memos)) = (from.meta().uid.clone(), self.memos.lock()) else {
            return;
        };
        crate::scoped::trim(&mut written);
        let mut older = memos.remove(&uid).map_or_else(Vec::new, |m| {
            let mut older = m.older;
            older.extend(m.written.meta().resource_version.clone());
            older
        });
        older.extend(from.meta().resource_version.clone());
        older.sort();
        older.dedup();
        older.retain(|rv| Some(rv) != written.meta().resource_version.as_ref());
        memos.insert(
            uid,
            Memo {
                older,
                written: Arc::new(written),
            },
        );
    }

    /// Follows the watch that feeds the cache, after the cache applied `event`: a memo whose
    /// object the cache now holds at a resourceVersion it did not replace is dropped.
    /// The watch may carry another type of the same objects (a cached form).
    pub fn seen<E: Resource>(&self, event: &kube::runtime::watcher::Event<E>) {
        use kube::runtime::watcher::Event;
        let (obj, gone) = match event {
            Event::Apply(o) | Event::InitApply(o) => (o, false),
            Event::Delete(o) => (o, true),
            Event::Init | Event::InitDone => return,
        };
        let (Some(uid), Ok(mut memos)) = (obj.meta().uid.as_ref(), self.memos.lock()) else {
            return;
        };
        let older = |m: &Memo<K>| {
            obj.meta()
                .resource_version
                .as_ref()
                .is_some_and(|rv| m.older.contains(rv))
        };
        if memos.get(uid).is_some_and(|m| gone || !older(m)) {
            memos.remove(uid);
        }
    }

    /// Forgets `obj` (it is gone, or its last reconcile ended).
    pub fn forget(&self, obj: &K) {
        if let (Some(uid), Ok(mut memos)) = (obj.meta().uid.as_ref(), self.memos.lock()) {
            memos.remove(uid);
        }
    }

    /// How many objects are remembered (a bound the tests check).
    pub fn len(&self) -> usize {
        self.memos.lock().map_or(0, |m| m.len())
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How a compare-and-swap write ended.
#[derive(Clone, Debug)]
pub enum Swap<K> {
    /// Written (the object as written): the change comes back as a watch event.
    Written(Box<K>),
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
) -> Result<Swap<K>, kube::Error>
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
        Ok(written) => Ok(Swap::Written(Box::new(written))),
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
) -> Result<Swap<K>, kube::Error>
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

#[cfg(test)]
mod tests {
    use super::*;
    use twc_api::WorkerDeployment;

    fn copy(rv: &str, note: &str) -> WorkerDeployment {
        let mut wd = WorkerDeployment::new("w", Default::default());
        wd.metadata.uid = Some("uid-1".into());
        wd.metadata.resource_version = Some(rv.into());
        wd.metadata.annotations = Some([("note".to_string(), note.to_string())].into());
        wd
    }

    fn note(wd: &WorkerDeployment) -> &str {
        wd.annotations().get("note").map_or("", String::as_str)
    }

    #[test]
    fn a_cache_behind_our_write_yields_the_written_copy() {
        let own = OwnWrites::default();
        let read = copy("10", "read");
        own.wrote(&read, copy("11", "written"));
        assert_eq!(note(&own.freshest(Arc::new(read))), "written");
        // The cache caught up: its copy, and the memo is gone.
        assert_eq!(
            note(&own.freshest(Arc::new(copy("11", "cached")))),
            "cached"
        );
        assert!(own.is_empty());
    }

    #[test]
    fn a_memo_goes_as_soon_as_the_watch_shows_the_write_and_is_kept_trimmed() {
        use kube::runtime::watcher::Event;
        let own = OwnWrites::default();
        let mut written = copy("11", "written");
        written.metadata.managed_fields = Some(vec![Default::default()]);
        own.wrote(&copy("10", "read"), written);
        // An event of the copy the write replaced: kept, and handed out without managedFields.
        own.seen(&Event::Apply(copy("10", "late")));
        let freshest = own.freshest(Arc::new(copy("10", "read")));
        assert_eq!(note(&freshest), "written");
        assert!(freshest.metadata.managed_fields.is_none());
        // The watch shows the write: gone before any reconcile looks.
        own.seen(&Event::Apply(copy("11", "cached")));
        assert!(own.is_empty());
        // A deletion drops it too.
        own.wrote(&copy("11", "read"), copy("12", "written"));
        own.seen(&Event::Delete(copy("11", "read")));
        assert!(own.is_empty());
    }

    #[test]
    fn a_cache_past_our_write_wins() {
        let own = OwnWrites::default();
        own.wrote(&copy("10", "read"), copy("11", "written"));
        // Someone else wrote after us.
        assert_eq!(
            note(&own.freshest(Arc::new(copy("12", "theirs")))),
            "theirs"
        );
        assert!(own.is_empty());
    }

    #[test]
    fn writes_in_a_row_remember_every_copy_they_replaced() {
        let own = OwnWrites::default();
        let read = copy("10", "read");
        // Owner references, then the status, both computed from the copy at 10.
        own.wrote(&read, copy("11", "owners"));
        own.wrote(&read, copy("12", "status"));
        for rv in ["10", "11"] {
            assert_eq!(note(&own.freshest(Arc::new(copy(rv, "stale")))), "status");
        }
        // A later reconcile computed from the written copy writes again.
        own.wrote(&copy("12", "status"), copy("13", "again"));
        for rv in ["10", "11", "12"] {
            assert_eq!(note(&own.freshest(Arc::new(copy(rv, "stale")))), "again");
        }
        own.forget(&read);
        assert!(own.is_empty());
    }
}
