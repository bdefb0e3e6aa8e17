//! Mutual TLS in front of the dev server, for the `renew` scenario: a CA, a TLS proxy that
//! demands client certificates of it, and the client certificate Secret every namespace holds
//! (`kubernetes.io/tls` with `tls.crt`, `tls.key` and `ca.crt`, as cert-manager writes it).
//! The ClusterConnection goes through the proxy; the fleet's workers still poll the dev server
//! directly (they play pods, not TLS clients).

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use twc_testenv::pki::{Ca, Usage};
use twc_testenv::tls_proxy::TlsProxy;

/// The name the proxy's serving certificate is for (the connection's `tls.serverName`).
pub const SERVER_NAME: &str = "temporal.loadgen";
/// The client certificate Secret of every namespace.
pub const SECRET: &str = "temporal-mtls";
/// How long each client certificate is valid: far beyond the 15 minutes before expiry within
/// which the controller restarts at once, whatever its pace.
const CLIENT_VALID_DAYS: i64 = 90;

/// The CA and the proxy; the proxy stops when this is dropped.
pub struct Mtls {
    ca: Ca,
    proxy: TlsProxy,
}

impl Mtls {
    /// A CA and a proxy to `upstream` (the dev server's `host:port`) on a free loopback port.
    pub async fn start(upstream: &str) -> anyhow::Result<Self> {
        let ca = Ca::new("twc-loadgen-ca")?;
        let server = ca.issue(
            SERVER_NAME,
            &[SERVER_NAME, "127.0.0.1"],
            Usage::Server,
            time::Duration::days(1),
        )?;
        let proxy = TlsProxy::start(upstream, &server, Some(&ca.cert_pem)).await?;
        Ok(Self { ca, proxy })
    }

    /// `127.0.0.1:PORT` of the proxy.
    pub fn address(&self) -> &str {
        &self.proxy.address
    }

    /// The spec of a ClusterConnection through the proxy with the client certificate Secret.
    pub fn connection_spec(&self) -> Value {
        json!({
            "hostPort": self.proxy.address,
            "tls": {"serverName": SERVER_NAME},
            "mutualTLSSecretRef": {"name": SECRET}
        })
    }

    /// A newly issued client pair with the CA, as `stringData`.
    fn string_data(&self) -> anyhow::Result<Value> {
        let pair = self.ca.issue(
            "twc-loadgen-worker",
            &[],
            Usage::Client,
            time::Duration::days(CLIENT_VALID_DAYS),
        )?;
        Ok(json!({"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": self.ca.cert_pem}))
    }

    /// Creates the client certificate Secret in namespace `ns`.
    pub async fn create_secret(&self, client: &kube::Client, ns: &str) -> anyhow::Result<()> {
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": ns},
            "type": "kubernetes.io/tls",
            "stringData": self.string_data()?,
        }))?;
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await
            .with_context(|| format!("create Secret {ns}/{SECRET}"))?;
        Ok(())
    }

    /// Renews the Secret of namespace `ns` as cert-manager does: a new key pair from the same
    /// CA (the old one still valid), in one write.
    pub async fn renew_secret(&self, client: &kube::Client, ns: &str) -> anyhow::Result<()> {
        let patch = json!({"stringData": self.string_data()?});
        Api::<Secret>::namespaced(client.clone(), ns)
            .patch(SECRET, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("renew Secret {ns}/{SECRET}"))?;
        Ok(())
    }
}
