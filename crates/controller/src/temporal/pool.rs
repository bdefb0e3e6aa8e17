//! A pool of Temporal connections, keyed by everything that makes two clients different:
//! address, TLS server name, Temporal namespace, auth mode, the API key's Secret key, and the
//! namespace, name and
//! resourceVersion of every Secret the credentials came from. Two tenants behind one
//! ClusterConnection therefore never share a client, and a changed Secret gets a new one.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use temporalio_client::{
    ClientTlsOptions, Connection, ConnectionOptions, RetryOptions, TlsOptions, Url,
};
use twc_api::{AuthMode, ConnectionSpec};

use super::credentials::{Auth, Credentials};

/// A Secret version that went into a client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretVersion {
    pub namespace: String,
    pub name: String,
    pub resource_version: String,
}

/// What identifies a client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub host_port: String,
    pub tls_server_name: Option<String>,
    pub temporal_namespace: String,
    pub auth_mode: AuthMode,
    /// The key of the credential Secret the API key is read from (two connections may use
    /// different keys of one Secret).
    pub credential_key: Option<String>,
    /// The credential Secret and the CA Secret, if any.
    pub secrets: Vec<SecretVersion>,
}

impl PoolKey {
    /// The key of a client for `spec` in `temporal_namespace`, built from `secrets`.
    pub fn new(
        spec: &ConnectionSpec,
        temporal_namespace: &str,
        secrets: Vec<SecretVersion>,
    ) -> Self {
        Self {
            host_port: spec.host_port.clone(),
            tls_server_name: spec.tls_server_name().map(str::to_string),
            temporal_namespace: temporal_namespace.to_string(),
            auth_mode: spec.auth_mode(),
            credential_key: spec.api_key_secret_ref.as_ref().map(|r| r.key.clone()),
            secrets,
        }
    }
}

struct Entry {
    connection: Connection,
    /// The server's version, as `GetSystemInfo` reported it right after the dial.
    server_version: Option<String>,
    redial_at: Option<SystemTime>,
    /// When its client certificate expires (mTLS).
    not_after: Option<SystemTime>,
    /// The digest of the credential Secrets' content it was dialled with.
    secrets_digest: Option<String>,
    /// When that content was last written, as the apiserver records it.
    secrets_written_at: Option<SystemTime>,
    /// When a reconcile last asked for it.
    used_at: SystemTime,
}

/// A client nobody asked for this long is dropped (its WorkerDeployments are gone, or moved
/// to another connection); the next user dials again.
pub const IDLE: Duration = Duration::from_secs(15 * 60);

/// The pool. Cheap to clone.
#[derive(Clone)]
pub struct ClientPool {
    identity: String,
    entries: Arc<Mutex<HashMap<PoolKey, Entry>>>,
    /// One dial at a time per key: concurrent reconciles of many users of one connection
    /// wait for the first dial instead of each dialling.
    dialing: Arc<Mutex<HashMap<PoolKey, Arc<tokio::sync::Mutex<()>>>>>,
    /// When idle clients were last looked for (at most once a minute).
    swept_at: Arc<Mutex<SystemTime>>,
}

impl ClientPool {
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            identity: identity.into(),
            entries: Default::default(),
            dialing: Default::default(),
            swept_at: Arc::new(Mutex::new(SystemTime::UNIX_EPOCH)),
        }
    }

    /// The identity every client (and every write) uses.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The keys of live clients (for tests and diagnostics).
    pub fn keys(&self) -> Vec<PoolKey> {
        self.entries
            .lock()
            .map(|e| e.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The cached connection for `key`, if any and not due for a re-dial.
    pub fn get(&self, key: &PoolKey, now: SystemTime) -> Option<Connection> {
        self.sweep(now);
        let mut entries = self.entries.lock().ok()?;
        match entries.get_mut(key) {
            Some(e) if e.redial_at.is_none_or(|t| now < t) => {
                e.used_at = now;
                Some(e.connection.clone())
            }
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// The pooled client for `key`'s address, server name, Temporal namespace, auth and
    /// Secrets (by namespace and name) whatever versions of the Secrets it was dialled with,
    /// and its key; None when there is none, or its client certificate expired at `now`.
    pub fn dialled_with_any_version(
        &self,
        key: &PoolKey,
        now: SystemTime,
    ) -> Option<(Connection, PoolKey)> {
        let entries = self.entries.lock().ok()?;
        let same_secrets = |k: &PoolKey| {
            k.secrets.len() == key.secrets.len()
                && k.secrets
                    .iter()
                    .zip(&key.secrets)
                    .all(|(a, b)| a.namespace == b.namespace && a.name == b.name)
        };
        entries
            .iter()
            .filter(|(k, _)| {
                k.host_port == key.host_port
                    && k.tls_server_name == key.tls_server_name
                    && k.temporal_namespace == key.temporal_namespace
                    && k.auth_mode == key.auth_mode
                    && k.credential_key == key.credential_key
                    && same_secrets(k)
            })
            .filter(|(_, e)| e.not_after.is_none_or(|t| now < t))
            .max_by_key(|(_, e)| e.used_at)
            .map(|(k, e)| (e.connection.clone(), k.clone()))
    }

    /// When the client certificate of the pooled client for `key` expires (mTLS only).
    pub fn not_after(&self, key: &PoolKey) -> Option<SystemTime> {
        self.entries.lock().ok()?.get(key)?.not_after
    }

    /// Dials a new connection for `key` with `auth` and caches it, unless a concurrent caller
    /// just did. Older clients for the same address, namespace and Secret names (a previous
    /// Secret version) are dropped.
    pub async fn dial(&self, key: PoolKey, auth: &Auth) -> Result<Connection, String> {
        let gate = self
            .dialing
            .lock()
            .map(|mut d| d.entry(key.clone()).or_default().clone())
            .unwrap_or_default();
        let turn = gate.lock().await;
        let result = self.dial_now(&key, auth).await;
        drop(turn);
        drop(gate);
        // Forget the turns nobody waits for, this one included, whether the dial worked or not.
        if let Ok(mut dialing) = self.dialing.lock() {
            dialing.retain(|_, gate| Arc::strong_count(gate) > 1);
        }
        result
    }

    async fn dial_now(&self, key: &PoolKey, auth: &Auth) -> Result<Connection, String> {
        if let Some(conn) = self.get(key, SystemTime::now()) {
            return Ok(conn);
        }
        let dialed = dial(key, auth, &self.identity).await;
        crate::metrics::global().dialed(dialed.is_ok());
        let connection = dialed?;
        let server_version = server_version(&connection).await;
        if let Some(v) = server_version
            .as_deref()
            .filter(|v| super::server::too_old(v))
        {
            tracing::warn!(
                address = %key.host_port,
                "the Temporal server reports version {v}, older than the oldest this controller was tested with ({}); if its Worker Deployment calls answer Unimplemented, WorkerDeployments say TemporalServerUnsupported",
                super::server::MINIMUM_SERVER_VERSION
            );
        }
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|k, _| !same_client_older_secret(k, key));
            entries.insert(
                key.clone(),
                Entry {
                    connection: connection.clone(),
                    server_version,
                    redial_at: auth.redial_at(),
                    not_after: auth.not_after(),
                    secrets_digest: auth.secrets_digest.clone(),
                    secrets_written_at: auth.secrets_written_at,
                    used_at: SystemTime::now(),
                },
            );
        }
        Ok(connection)
    }

    /// The digest of the credential Secrets' content the pooled client for `key` was dialled
    /// with (what its key's Secret versions hold; None: not pooled, or no Secret).
    pub fn secrets_digest(&self, key: &PoolKey) -> Option<String> {
        self.entries.lock().ok()?.get(key)?.secrets_digest.clone()
    }

    /// When the content of the credential Secrets the pooled client for `key` was dialled
    /// with was last written (None: not pooled, no Secret, or not recorded).
    pub fn secrets_written_at(&self, key: &PoolKey) -> Option<SystemTime> {
        self.entries.lock().ok()?.get(key)?.secrets_written_at
    }

    /// The version of the server behind the pooled client for `key`, as it reported it when
    /// dialled (None: not pooled, or it did not say).
    pub fn server_version(&self, key: &PoolKey) -> Option<String> {
        let entries = self.entries.lock().ok()?;
        entries.get(key)?.server_version.clone()
    }

    /// Drops the clients idle for [`IDLE`] at `now` (looked for at most once a minute).
    fn sweep(&self, now: SystemTime) {
        {
            let Ok(mut swept) = self.swept_at.lock() else {
                return;
            };
            if now.duration_since(*swept).unwrap_or_default() < Duration::from_secs(60) {
                return;
            }
            *swept = now;
        }
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|_, e| now.duration_since(e.used_at).unwrap_or_default() < IDLE);
        }
    }

    /// Drops the client for `key` (after an authentication or transport error).
    pub fn evict(&self, key: &PoolKey) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(key);
        }
    }
}

/// `GetSystemInfo`'s `server_version` (None if the call fails or the answer is empty: the
/// version is only used to say more precisely what is wrong).
async fn server_version(conn: &Connection) -> Option<String> {
    use temporalio_client::tonic;
    use temporalio_common::protos::temporal::api::workflowservice::v1::GetSystemInfoRequest;
    let mut svc = conn.workflow_service();
    let call = crate::metrics::rpc(
        "GetSystemInfo",
        svc.get_system_info(tonic::Request::new(GetSystemInfoRequest::default())),
    );
    let answer = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .ok()?
        .ok()?;
    Some(answer.into_inner().server_version).filter(|v| !v.is_empty())
}

fn same_client_older_secret(old: &PoolKey, new: &PoolKey) -> bool {
    old != new
        && old.host_port == new.host_port
        && old.temporal_namespace == new.temporal_namespace
        && old.credential_key == new.credential_key
        && old.secrets.len() == new.secrets.len()
        && old
            .secrets
            .iter()
            .zip(&new.secrets)
            .all(|(a, b)| a.namespace == b.namespace && a.name == b.name)
}

async fn dial(key: &PoolKey, auth: &Auth, identity: &str) -> Result<Connection, String> {
    let client_tls = match &auth.credentials {
        Credentials::MutualTls {
            cert_pem, key_pem, ..
        } => Some(
            ClientTlsOptions::builder()
                .client_cert(cert_pem.clone())
                .client_private_key(key_pem.clone())
                .build(),
        ),
        _ => None,
    };
    let api_key = match &auth.credentials {
        Credentials::ApiKey(k) => Some(k.clone()),
        _ => None,
    };
    let use_tls = client_tls.is_some()
        || api_key.is_some()
        || key.tls_server_name.is_some()
        || auth.ca_pem.is_some();
    let tls = use_tls.then(|| {
        TlsOptions::builder()
            .maybe_domain(key.tls_server_name.clone())
            .maybe_server_root_ca_cert(auth.ca_pem.clone())
            .maybe_client_tls_options(client_tls)
            .build()
    });
    let scheme = if use_tls { "https" } else { "http" };
    let url = Url::from_str(&format!("{scheme}://{}", key.host_port))
        .map_err(|e| format!("invalid hostPort {:?}: {e}", key.host_port))?;
    // Fail fast: a reconcile must not hang on an unreachable server; it retries later.
    let retry = RetryOptions::builder()
        .max_retries(2)
        .max_elapsed_time(Some(Duration::from_secs(5)))
        .build();
    Connection::connect(
        ConnectionOptions::new(url)
            .identity(identity.to_string())
            .maybe_tls_options(tls)
            .maybe_api_key(api_key)
            .connect_timeout(Duration::from_secs(5))
            .retry_options(retry)
            .build(),
    )
    .await
    .map_err(|e| {
        let e = format!("{e:#}");
        match mismatch_hint(use_tls, &e) {
            Some(hint) => format!(
                "cannot connect to Temporal at {}: {hint} ({e})",
                key.host_port
            ),
            None => format!("cannot connect to Temporal at {}: {e}", key.host_port),
        }
    })
}

/// What a dial error probably means, when it is the classic mistake of speaking TLS to a
/// plaintext endpoint or plaintext to a TLS one, or of not trusting the server's CA.
fn mismatch_hint(use_tls: bool, error: &str) -> Option<&'static str> {
    let e = error.to_ascii_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| e.contains(n));
    if use_tls
        && any(&[
            "unknownissuer",
            "unknown issuer",
            "invalid peer certificate",
        ])
    {
        return Some(
            "the server's certificate is not signed by a CA the controller trusts; name a Secret with its CA (key ca.crt) in tls.caCertSecretRef",
        );
    }
    if use_tls
        && any(&[
            "invalidcontenttype",
            "corrupt message",
            "wrong version number",
            "invalid message",
        ])
    {
        return Some(
            "the server did not answer the TLS handshake, so it is probably a plaintext endpoint: remove tls and the credentials from the connection, or point hostPort at the server's TLS port",
        );
    }
    if !use_tls
        && any(&[
            "connection reset",
            "broken pipe",
            "unexpected eof",
            "connection closed",
            "frame with invalid size",
            "http2 error",
            "h2 protocol error",
            // hyper, when the server closed the connection before the first request went out
            // (seen with the TLS proxy on a busy machine).
            "connection was not ready",
        ])
    {
        return Some(
            "the server closed a plaintext connection, so it probably expects TLS: set tls (for example tls: {serverName: ...}) or the credentials it requires",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::credentials::{Auth, Credentials};

    fn api_key_spec(key: &str) -> ConnectionSpec {
        serde_json::from_value(serde_json::json!({
            "hostPort": "127.0.0.1:1",
            "apiKeySecretRef": {"name": "keys", "key": key}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn version(rv: &str) -> Vec<SecretVersion> {
        vec![SecretVersion {
            namespace: "team-a".into(),
            name: "keys".into(),
            resource_version: rv.into(),
        }]
    }

    #[test]
    fn two_keys_of_one_secret_are_two_clients() {
        let a = PoolKey::new(&api_key_spec("team-a"), "default", version("1"));
        let b = PoolKey::new(&api_key_spec("team-b"), "default", version("1"));
        assert_ne!(
            a, b,
            "a client dialled with one key must not serve the other"
        );
        // Neither is "the same client with an older Secret" of the other: both stay pooled.
        assert!(!same_client_older_secret(&a, &b));
        let newer = PoolKey::new(&api_key_spec("team-a"), "default", version("2"));
        assert!(same_client_older_secret(&a, &newer));
    }

    /// The errors seen on the real servers (TLS to the plaintext dev server, plaintext to the
    /// TLS proxy) get their hint; other errors none.
    #[test]
    fn tls_mismatches_are_named() {
        let tls_to_plain = "Server connection error: tonic::transport::Error(Transport, ConnectError(Custom { kind: InvalidData, error: InvalidMessage(InvalidContentType) }))";
        let plain_to_tls = r#"get_system_info call error after connection: Status { code: Internal, message: "h2 protocol error: http2 error" }"#;
        let plain_to_tls_closed = r#"get_system_info call error after connection: Status { code: Cancelled, message: "operation was canceled", source: Some(tonic::transport::Error(Transport, hyper::Error(Canceled, "connection was not ready"))) }"#;
        let refused = "tcp connect error: Connection refused (os error 111)";
        assert!(mismatch_hint(true, tls_to_plain).is_some_and(|h| h.contains("plaintext")));
        assert!(mismatch_hint(false, plain_to_tls).is_some_and(|h| h.contains("expects TLS")));
        assert!(
            mismatch_hint(false, plain_to_tls_closed).is_some_and(|h| h.contains("expects TLS"))
        );
        assert_eq!(mismatch_hint(true, refused), None);
        assert_eq!(mismatch_hint(false, refused), None);
        assert_eq!(mismatch_hint(false, tls_to_plain), None);
    }

    #[tokio::test]
    async fn a_failed_dial_leaves_nothing_behind() {
        let pool = ClientPool::new("twc/test");
        let key = PoolKey::new(&api_key_spec("k"), "default", version("1"));
        let auth = Auth {
            credentials: Credentials::None,
            ca_pem: None,
            secrets_digest: None,
            secrets_written_at: None,
        };
        // Nothing listens on port 1.
        assert!(pool.dial(key.clone(), &auth).await.is_err());
        assert!(pool.keys().is_empty());
        let turns = pool.dialing.lock().map(|d| d.len()).unwrap_or(usize::MAX);
        assert_eq!(turns, 0, "the dial's turn is forgotten");
    }
}
