//! A watched namespace that is not there. A namespace-scoped install reads a watched namespace
//! through its Role there; once the namespace is deleted (and the Role with it, last, see
//! [`crate::rights`]) or before it is created, every list and watch in it answers Forbidden.
//! That is not a lost permission and not a cache that cannot fill: such a namespace holds
//! nothing. Its watches read it as empty (the cache is filled, empty, so no start-up waits for
//! it and `/readyz` stays ready), keep retrying, and fill the cache once the namespace and the
//! controller's rights there are back. A Forbidden while the namespace exists is what it says.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};

/// `watch`, a watch of `namespace` (`None`: of every namespace, passed through as it is), with
/// Forbidden answers while that namespace is absent (or being deleted) read as an empty list.
pub fn empty_while_absent<K, S>(
    watch: S,
    client: Client,
    namespace: Option<String>,
) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    let Some(namespace) = namespace else {
        return watch.boxed();
    };
    // Read as empty since the last answer of the real watch.
    let emptied = Arc::new(AtomicBool::new(false));
    watch
        .then(move |item| {
            let (client, namespace, emptied) = (client.clone(), namespace.clone(), emptied.clone());
            async move {
                let forbidden = match &item {
                    Ok(_) => {
                        emptied.store(false, Ordering::SeqCst);
                        false
                    }
                    Err(e) => crate::access::watch_forbidden(e).is_some(),
                };
                if !forbidden || !absent(&client, &namespace).await {
                    return vec![item];
                }
                if emptied.swap(true, Ordering::SeqCst) {
                    return Vec::new();
                }
                tracing::info!(
                    namespace,
                    "watched namespace {namespace} is not there (or is being deleted): nothing to watch in it until it is created again with the controller's rights"
                );
                vec![Ok(Event::Init), Ok(Event::InitDone)]
            }
        })
        .flat_map(stream::iter)
        .boxed()
}

/// Whether `namespace` does not exist or is being deleted (false when that cannot be read).
async fn absent(client: &Client, namespace: &str) -> bool {
    match Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await
    {
        Ok(None) => true,
        Ok(Some(ns)) => ns.metadata.deletion_timestamp.is_some(),
        Err(_) => false,
    }
}
