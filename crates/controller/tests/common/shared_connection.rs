//! One ClusterConnection shared by the tenants of a test.

use std::time::Duration;

use super::{World, cluster_ref, unique, wait_cluster_connection, world};
use kube::Client;
use kube::api::Api;
use twc_api::{ClusterConnection, WorkerDeployment};

/// One ClusterConnection (`prefix-<random>`, to the mTLS endpoint) in the world of this binary,
/// with a controller running, and the tenants whose WorkerDeployments use it.
pub struct SharedConnection {
    pub w: &'static World,
    pub client: Client,
    /// The ClusterConnection's name.
    pub cc: String,
}

impl SharedConnection {
    /// The world (with a controller) and a new ClusterConnection named after `prefix`.
    pub async fn new(prefix: &str) -> Result<Self, String> {
        let w = world(true).await?;
        let client = w.client().await;
        let cc = unique(prefix);
        w.cluster_connection(&cc).await;
        Ok(Self { w, client, cc })
    }

    /// A tenant namespace (`prefix-<random>`) with its own client certificate Secret.
    pub async fn tenant(&self, prefix: &str) -> String {
        self.w.tenant(prefix).await
    }

    /// A user: WorkerDeployment `name` in `ns`, running v1 through the ClusterConnection.
    pub async fn user(&self, ns: &str, name: &str) -> WorkerDeployment {
        self.w
            .worker_deployment(ns, name, cluster_ref(&self.cc), "v1")
            .await
    }

    /// A tenant per prefix (all created first), then a user `name` in each; returns the
    /// tenants' namespaces.
    pub async fn users<const N: usize>(&self, prefixes: [&str; N], name: &str) -> [String; N] {
        let mut tenants = Vec::with_capacity(N);
        for prefix in prefixes {
            tenants.push(self.tenant(prefix).await);
        }
        for ns in &tenants {
            self.user(ns, name).await;
        }
        tenants
            .try_into()
            .unwrap_or_else(|t: Vec<String>| panic!("{} tenants for {N} prefixes", t.len()))
    }

    /// Waits until the ClusterConnection is `want`: "protected", "unprotected" or "gone".
    pub async fn wait(&self, want: &str, timeout: Duration) {
        wait_cluster_connection(&self.client, &self.cc, want, timeout).await
    }

    /// The ClusterConnection as stored now.
    pub async fn get(&self) -> Result<ClusterConnection, kube::Error> {
        self.api().get(&self.cc).await
    }

    pub fn api(&self) -> Api<ClusterConnection> {
        Api::all(self.client.clone())
    }

    /// The server version each live Temporal client of the controller read when dialled.
    pub fn pool_server_versions(&self) -> Vec<Option<String>> {
        let Some(h) = self.w.controller.as_ref() else {
            return Vec::new();
        };
        h.pool
            .keys()
            .iter()
            .map(|k| h.pool.server_version(k))
            .collect()
    }

    /// The keys of the controller's live Temporal clients.
    pub fn pool_keys(&self) -> Vec<twc_controller::temporal::pool::PoolKey> {
        self.w
            .controller
            .as_ref()
            .map(|h| h.pool.keys())
            .unwrap_or_default()
    }
}
