//! `/livez`, `/readyz` and `/metrics`.
//!
//! * `/livez`: the process runs and its runtime answers. Never depends on the apiserver or
//!   Temporal, so an outage elsewhere does not restart the controller.
//! * `/readyz`: the CRDs are served, and either this replica leads and its caches are synced,
//!   or it stands by (a standby is ready: it is a healthy spare). A missing CRD is a readiness
//!   state, reported with what is missing, never a crash loop. A leader whose watches meet
//!   Forbidden (its RBAC changed while it ran) is not ready either, naming what it lost.
//! * `/metrics`: the Prometheus exposition of [`crate::metrics`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kube::Client;

use crate::metrics_auth::{MetricsAuth, Verdict};

/// What readiness depends on.
pub struct Health {
    crds: std::sync::Mutex<Result<(), String>>,
    leading: AtomicBool,
    synced: AtomicBool,
    /// The leader's watches: `Err` naming those that meet Forbidden.
    access: std::sync::Mutex<Result<(), String>>,
}

impl Health {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            crds: std::sync::Mutex::new(Err("not checked yet".into())),
            leading: AtomicBool::new(false),
            synced: AtomicBool::new(false),
            access: std::sync::Mutex::new(Ok(())),
        })
    }

    pub fn set_crds(&self, state: Result<(), String>) {
        if let Ok(mut c) = self.crds.lock() {
            *c = state;
        }
    }

    pub fn crds_present(&self) -> bool {
        self.crds.lock().map(|c| c.is_ok()).unwrap_or(false)
    }

    /// This replica leads (or runs without election); its caches are not synced yet.
    pub fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::SeqCst);
        self.synced.store(false, Ordering::SeqCst);
        self.set_access(Ok(()));
        crate::metrics::global().set_leader(leading);
    }

    /// What the leader's watches meet (see [`crate::access::Access::state`]).
    pub fn set_access(&self, state: Result<(), String>) {
        if let Ok(mut a) = self.access.lock() {
            *a = state;
        }
    }

    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// `Ok(what is fine)` or `Err(what is not)`.
    pub fn readiness(&self) -> Result<String, String> {
        if let Ok(Err(e)) = self.crds.lock().as_deref() {
            return Err(format!("CRDs: {e}"));
        }
        match (
            self.leading.load(Ordering::SeqCst),
            self.synced.load(Ordering::SeqCst),
        ) {
            (false, _) => Ok("CRDs served; standing by (not the leader)".into()),
            (true, false) => Err("leader; caches are syncing".into()),
            (true, true) => match self.access.lock().as_deref() {
                Ok(Err(e)) => Err(e.clone()),
                _ => Ok("CRDs served; leader; caches synced".into()),
            },
        }
    }
}

/// The resources of `temporal.io/v1alpha1` the controller needs.
const RESOURCES: [&str; 3] = ["workerdeployments", "connections", "clusterconnections"];

/// Asks API discovery (open to every authenticated user, no RBAC needed) whether the CRDs are
/// served.
pub async fn check_crds(client: &Client) -> Result<(), String> {
    let version = format!("{}/v1alpha1", twc_api::GROUP);
    let list = client
        .list_api_group_resources(&version)
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 404 => {
                format!("{version} is not served: install the CRDs (twc crd | kubectl apply -f -)")
            }
            e => format!("discovery of {version}: {e}"),
        })?;
    let missing: Vec<&str> = RESOURCES
        .into_iter()
        .filter(|r| !list.resources.iter().any(|s| s.name == *r))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("{version} does not serve {}", missing.join(", ")))
    }
}

/// Re-checks the CRDs every `every` until the process ends.
pub async fn watch_crds(client: Client, health: Arc<Health>, every: std::time::Duration) {
    let mut last: Option<Result<(), String>> = None;
    loop {
        let state = check_crds(&client).await;
        if last.as_ref() != Some(&state) {
            match &state {
                Ok(()) => tracing::info!("CRDs are served"),
                Err(e) => tracing::warn!("not ready: {e}"),
            }
            last = Some(state.clone());
        }
        health.set_crds(state);
        tokio::time::sleep(every).await;
    }
}

async fn livez() -> &'static str {
    "ok\n"
}

fn readyz(health: &Health) -> impl IntoResponse + use<> {
    match health.readiness() {
        Ok(what) => (StatusCode::OK, format!("ok: {what}\n")),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

async fn metrics() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        crate::metrics::global().encode(),
    )
}

fn health_routes(health: Arc<Health>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(move || async move { readyz(&health) }))
}

/// `/metrics`, open or (with `auth`) for callers the apiserver says may read it.
fn metrics_routes(auth: Option<Arc<MetricsAuth>>) -> Router {
    let Some(auth) = auth else {
        return Router::new().route("/metrics", get(metrics));
    };
    Router::new().route(
        "/metrics",
        get(move |headers: axum::http::HeaderMap| {
            let auth = auth.clone();
            async move {
                let header = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                match auth.check(header).await {
                    Ok(Verdict::Allowed) => metrics().await.into_response(),
                    Ok(Verdict::Unauthenticated) => (
                        StatusCode::UNAUTHORIZED,
                        "a bearer token the apiserver knows is required\n",
                    )
                        .into_response(),
                    Ok(Verdict::Forbidden(user)) => (
                        StatusCode::FORBIDDEN,
                        format!("{user} may not get the non-resource URL /metrics\n"),
                    )
                        .into_response(),
                    Err(e) => {
                        tracing::warn!("checking a /metrics caller with the apiserver: {e}");
                        (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "the caller could not be checked\n",
                        )
                            .into_response()
                    }
                }
            }
        }),
    )
}

/// Binds the listeners (one if both addresses are the same), so a taken port fails at start.
/// With `metrics_auth`, `/metrics` answers only callers the apiserver allows (see
/// [`MetricsAuth`]); `/livez` and `/readyz` stay open for the kubelet.
pub async fn bind(
    metrics_addr: SocketAddr,
    health_addr: SocketAddr,
    health: Arc<Health>,
    metrics_auth: Option<Arc<MetricsAuth>>,
) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let mut servers: Vec<futures::future::BoxFuture<'static, ()>> = Vec::new();
    let routes = if metrics_addr == health_addr {
        vec![(
            metrics_addr,
            metrics_routes(metrics_auth).merge(health_routes(health)),
        )]
    } else {
        vec![
            (metrics_addr, metrics_routes(metrics_auth)),
            (health_addr, health_routes(health)),
        ]
    };
    for (addr, router) in routes {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        tracing::info!("serving http on {addr}");
        servers.push(Box::pin(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!("http server on {addr}: {e}");
            }
        }));
    }
    Ok(async move {
        futures::future::join_all(servers).await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_that_lost_a_permission_is_not_ready_and_says_which() {
        let health = Health::new();
        health.set_crds(Ok(()));
        health.set_leading(true);
        health.set_synced();
        assert!(health.readiness().is_ok());
        health.set_access(Err("RBAC: forbidden on clusterconnections (...)".into()));
        assert_eq!(
            health.readiness(),
            Err("RBAC: forbidden on clusterconnections (...)".into())
        );
        // A standby watches nothing: its readiness does not depend on it.
        health.set_leading(false);
        assert!(health.readiness().is_ok());
    }
}
