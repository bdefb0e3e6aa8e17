//! Mutual TLS in the run: the TLS proxies in front of the dev servers, the CA of the client
//! certificates, the client certificate Secret, and the fault that rotates that CA.
//!
//! The servers' CA signs the proxies' serving certificate and is the Secret's `ca.crt` (the
//! workers verify the server with it, through `tls.caCertSecretRef`). Client certificates come
//! from a separate CA, which the new-CA rotation replaces as a careful operator would: the
//! servers trust the old and the new CA, the Secret gets a certificate of the new one, the
//! controller restarts the workers (they read their certificate only at start), and then the
//! servers trust only the new CA and close every connection: a worker still on the old
//! certificate loses Temporal, which I1 (Temporal's worker list) reports.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use twc_testenv::node;
use twc_testenv::pki::{Ca, CertPair, Usage};
use twc_testenv::tls_proxy::TlsProxy;

use crate::{MTLS_SECRET, Run, SERVER_NAME};

/// How long the rotation waits for the workers to restart before it distrusts the old CA: as
/// long as I5 gives them (the restarts are paced).
const RESTART_WAIT: Duration = crate::restarts::RENEWAL_DEADLINE;

/// How long the run's client certificates live.
const CLIENT_CERT_DAYS: i64 = 90;

pub(crate) struct Tls {
    /// Signs the proxies' serving certificate; the Secret's `ca.crt`.
    server_ca: Ca,
    server: CertPair,
    /// The CA of the client certificates now.
    client_ca: Mutex<Arc<Ca>>,
    rotations: AtomicUsize,
    /// When the client certificate last issued (the one in the Secret) expires.
    valid_until: Mutex<SystemTime>,
    /// The proxies, in front of each server.
    proxies: Mutex<Vec<TlsProxy>>,
}

impl Tls {
    pub(crate) fn new() -> anyhow::Result<Self> {
        let server_ca = Ca::new("chaos-ca")?;
        let server = server_ca.issue(
            SERVER_NAME,
            &[SERVER_NAME, "127.0.0.1"],
            Usage::Server,
            time::Duration::days(7),
        )?;
        Ok(Self {
            server_ca,
            server,
            client_ca: Mutex::new(Arc::new(Ca::new("chaos-client-ca-0")?)),
            rotations: AtomicUsize::new(0),
            valid_until: Mutex::new(SystemTime::now()),
            proxies: Mutex::new(Vec::new()),
        })
    }

    fn client_ca(&self) -> Arc<Ca> {
        self.client_ca
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A TLS proxy (mutual TLS, clients of the client CA) in front of the dev server at
    /// `upstream`; returns the address workers reach it at: on a real node, the node's bridge.
    pub(crate) async fn proxy(&self, real_node: bool, upstream: &str) -> anyhow::Result<String> {
        let ip = if real_node { "0.0.0.0" } else { "127.0.0.1" };
        let ca = self.client_ca().cert_pem.clone();
        let proxy = TlsProxy::start_on(ip, upstream, &self.server, Some(&ca)).await?;
        let port = proxy.address.rsplit(':').next().unwrap_or_default();
        let address = if real_node {
            format!("{}:{port}", node::HOST_IP)
        } else {
            proxy.address.clone()
        };
        self.proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(proxy);
        Ok(address)
    }

    /// Every server lets in clients without a certificate (`yes`: workers on an API key), or
    /// no longer. Only while some are: a worker whose certificate is of a CA the server does
    /// not name leaves it out and would come in too, so a stale certificate goes unseen then.
    pub(crate) fn let_in_without_certificate(&self, yes: bool) -> anyhow::Result<()> {
        for p in self
            .proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            p.let_in_clients_without_certificate(yes)?;
        }
        Ok(())
    }

    /// Every server trusts client certificates of the CAs in `bundle` only.
    fn trust(&self, bundle: &str) -> anyhow::Result<()> {
        for p in self
            .proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            p.trust_clients_of(bundle)?;
        }
        Ok(())
    }

    /// The client certificate Secret: a fresh key pair of the client CA (as cert-manager
    /// renews), and the servers' CA.
    pub(crate) fn client_secret(&self) -> anyhow::Result<Secret> {
        let pair = self.client_ca().issue(
            "chaos-tenant",
            &[],
            Usage::Client,
            time::Duration::days(CLIENT_CERT_DAYS),
        )?;
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) =
            SystemTime::now() + Duration::from_secs(CLIENT_CERT_DAYS as u64 * 86_400);
        Ok(serde_json::from_value(json!({
            "metadata": {"name": MTLS_SECRET},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem,
                "ca.crt": self.server_ca.cert_pem}
        }))?)
    }
}

/// Replaces the client certificate Secret's content (same name); I5 judges the restarts it
/// brings.
pub(crate) async fn renew(run: &Run<'_>) -> anyhow::Result<()> {
    let expires = *run
        .tls
        .valid_until
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Err(e) = run.renewals.renewing(run, expires).await {
        println!("   note: the Deployments before a renewal could not be read (not judged): {e}");
    }
    let renewed = run.tls.client_secret()?;
    Api::<Secret>::namespaced(run.client.clone(), &run.ns)
        .patch(
            MTLS_SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": renewed.string_data})),
        )
        .await?;
    Ok(())
}

/// The credentials digest of each running versioned Deployment whose workers read the client
/// certificate (not those on an API key: a renewal changes nothing they read), by name.
async fn digests(run: &Run<'_>) -> anyhow::Result<Vec<(String, Option<String>, bool)>> {
    let list = run
        .deployments()
        .list(&ListParams::default().labels(twc_api::labels::BUILD_ID))
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .filter(|d| d.spec.as_ref().and_then(|s| s.replicas) != Some(0))
        .filter(|d| crate::restarts::reads_client_certificate(d))
        .map(|d| {
            let digest = d
                .annotations()
                .get(twc_api::labels::CREDENTIALS_DIGEST)
                .cloned();
            (
                d.name_any(),
                digest,
                twc_testenv::deployments::rolled_out(d),
            )
        })
        .collect())
}

/// The fault: the client certificates move to a new CA, and the old one stops being trusted.
pub(crate) async fn rotate_ca(run: &Run<'_>) -> anyhow::Result<()> {
    let old = run.tls.client_ca();
    let n = run.tls.rotations.fetch_add(1, Ordering::SeqCst) + 1;
    let new = Arc::new(Ca::new(&format!("chaos-client-ca-{n}"))?);
    run.tls
        .trust(&format!("{}{}", old.cert_pem, new.cert_pem))?;
    let before: Vec<Option<String>> = digests(run).await?.into_iter().map(|d| d.1).collect();
    *run.tls.client_ca.lock().unwrap_or_else(|e| e.into_inner()) = new.clone();
    renew(run).await?;
    // Every running version restarted with the new Secret: a digest none had before, and
    // all its pods of the new template and ready.
    let started = Instant::now();
    let mut waiting = Vec::new();
    while started.elapsed() < RESTART_WAIT {
        waiting = digests(run)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, digest, done)| !done || before.contains(digest))
            .map(|(name, ..)| name)
            .collect();
        if waiting.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if !waiting.is_empty() {
        println!(
            "   note: the old client CA is distrusted with workers not restarted after {} s: {}",
            RESTART_WAIT.as_secs(),
            waiting.join(", ")
        );
    }
    run.tls.trust(&new.cert_pem)?;
    Ok(())
}
