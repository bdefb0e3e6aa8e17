//! The process around the controllers: health and metrics endpoints, the CRD check, and leader
//! election. Controllers run only while this replica leads (or always, without election) and
//! only once the CRDs are served; losing the Lease drops them at once, cancelling reconciles in
//! flight, and the replica goes back to standing by.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use kube::Client;

use crate::controller::{Config, prepare};
use crate::health::{self, Health};
use crate::leader::{Elector, LeaseConfig};

/// How the process runs.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub controller: Config,
    /// `None`: no election, this replica always leads.
    pub leader_election: Option<LeaseConfig>,
    pub metrics_addr: SocketAddr,
    pub health_addr: SocketAddr,
    /// `/metrics` only for callers the apiserver allows to get it (TokenReview +
    /// SubjectAccessReview), as TWC's authenticated metrics.
    pub metrics_auth: bool,
}

enum Outcome {
    Shutdown,
    Lost,
    Stopped,
}

/// Runs until `shutdown` resolves; fails only if an endpoint cannot listen.
pub async fn run(
    client: Client,
    config: RunConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let health = Health::new();
    let auth = config
        .metrics_auth
        .then(|| std::sync::Arc::new(crate::metrics_auth::MetricsAuth::new(client.clone())));
    let server = health::bind(
        config.metrics_addr,
        config.health_addr,
        health.clone(),
        auth,
    )
    .await?;
    let server = tokio::spawn(server);
    let crds = tokio::spawn(health::watch_crds(
        client.clone(),
        health.clone(),
        Duration::from_secs(5),
    ));
    let mut elector = config
        .leader_election
        .clone()
        .map(|c| Elector::new(client.clone(), c));
    let mut shutdown = std::pin::pin!(shutdown);
    let lease_name = config.leader_election.as_ref().map(|c| c.name.clone());
    let holding = |held: bool| {
        if let Some(name) = &lease_name {
            crate::metrics::global().set_lease_holder(name, held);
        }
    };
    loop {
        health.set_leading(false);
        holding(false);
        if let Some(e) = elector.as_mut() {
            tokio::select! {
                _ = e.acquire() => {}
                _ = &mut shutdown => break,
            }
        }
        health.set_leading(true);
        holding(true);
        let outcome = tokio::select! {
            _ = &mut shutdown => Outcome::Shutdown,
            _ = lead(&client, &config.controller, &health) => Outcome::Stopped,
            _ = async {
                match elector.as_mut() {
                    Some(e) => e.hold().await,
                    None => std::future::pending().await,
                }
            } => Outcome::Lost,
        };
        match outcome {
            Outcome::Shutdown => {
                // The controllers are dropped above; only now may another replica write.
                if let Some(e) = elector.as_mut() {
                    e.release().await;
                }
                break;
            }
            Outcome::Lost => {
                tracing::warn!("stopped reconciling: leadership lost; standing by");
            }
            Outcome::Stopped => {
                tracing::error!("the controllers stopped unexpectedly; restarting them");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    crds.abort();
    server.abort();
    Ok(())
}

/// Waits for the CRDs, then runs the controllers, marking readiness once caches are synced.
async fn lead(client: &Client, config: &Config, health: &Health) {
    while !health.crds_present() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (handle, controllers) = prepare(client.clone(), config.clone()).await;
    let synced = async {
        while !handle.index.is_ready() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tracing::info!("caches synced");
        health.set_synced();
        loop {
            health.set_access(handle.access.state());
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    tokio::select! {
        _ = controllers => {}
        _ = synced => {}
    }
}
