//! Turning a credential Secret into client credentials, with a precise error for everything
//! that can be wrong with it. Pure: the caller fetched the Secret.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use twc_api::{AuthMode, ConnectionSpec};

/// Re-dial (and treat as invalid) a client certificate this long before it expires.
pub const CERT_EXPIRY_MARGIN: Duration = Duration::from_secs(5 * 60);

/// What a Temporal client authenticates with. `Debug` never prints key material.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    None,
    MutualTls {
        cert_pem: Vec<u8>,
        key_pem: Vec<u8>,
        /// The client certificate's expiry.
        not_after: SystemTime,
    },
    ApiKey(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::MutualTls { not_after, .. } => f
                .debug_struct("MutualTls")
                .field("not_after", not_after)
                .finish_non_exhaustive(),
            Credentials::ApiKey(_) => f.write_str("ApiKey(<redacted>)"),
        }
    }
}

/// Client credentials plus an optional CA bundle to trust for the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Auth {
    pub credentials: Credentials,
    pub ca_pem: Option<Vec<u8>>,
    /// [`secrets_digest`] of the Secrets it was built from.
    pub secrets_digest: Option<String>,
    /// When those Secrets' content was last written ([`data_written_at`]; None: not known).
    pub secrets_written_at: Option<SystemTime>,
}

impl Auth {
    /// When the client certificate expires (mTLS only).
    pub fn not_after(&self) -> Option<SystemTime> {
        match &self.credentials {
            Credentials::MutualTls { not_after, .. } => Some(*not_after),
            _ => None,
        }
    }

    /// When the client using this auth must be re-dialled, if ever.
    pub fn redial_at(&self) -> Option<SystemTime> {
        match &self.credentials {
            Credentials::MutualTls { not_after, .. } => not_after.checked_sub(CERT_EXPIRY_MARGIN),
            _ => None,
        }
    }
}

/// Builds [`Auth`] for `spec` from the credential Secret and the CA Secret (both already read
/// from the WorkerDeployment's namespace `namespace`; `None` = not found). The error message
/// names the Secret and its namespace and says what is wrong.
pub fn auth_from_secrets(
    spec: &ConnectionSpec,
    namespace: &str,
    credential_secret: Option<&Secret>,
    ca_secret: Option<&Secret>,
    now: SystemTime,
) -> Result<Auth, String> {
    let mut ca_pem = None;
    if let Some(ca_ref) = spec
        .tls
        .as_ref()
        .and_then(|t| t.ca_cert_secret_ref.as_ref())
    {
        let where_ = format!("Secret {namespace}/{}", ca_ref.name);
        let secret = ca_secret.ok_or_else(|| format!("{where_} not found"))?;
        let ca = key(secret, "ca.crt").ok_or_else(|| format!("{where_} has no key ca.crt"))?;
        check_certs(&ca).map_err(|e| format!("{where_} key ca.crt: {e}"))?;
        ca_pem = Some(ca);
    }
    let credentials = match spec.auth_mode() {
        AuthMode::None => Credentials::None,
        AuthMode::MutualTls => {
            let name = spec.secret_name().unwrap_or_default();
            let where_ = format!("Secret {namespace}/{name}");
            let secret = credential_secret.ok_or_else(|| format!("{where_} not found"))?;
            let type_ = secret.type_.as_deref().unwrap_or("Opaque");
            if type_ != "kubernetes.io/tls" && type_ != "Opaque" {
                return Err(format!(
                    "{where_} has type {type_}; an mTLS Secret must be of type kubernetes.io/tls or Opaque"
                ));
            }
            let cert_pem =
                key(secret, "tls.crt").ok_or_else(|| format!("{where_} has no key tls.crt"))?;
            let key_pem =
                key(secret, "tls.key").ok_or_else(|| format!("{where_} has no key tls.key"))?;
            let not_after =
                check_certs(&cert_pem).map_err(|e| format!("{where_} key tls.crt: {e}"))?;
            PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|e| format!("{where_} key tls.key: not a PEM private key ({e})"))?;
            if not_after <= now {
                return Err(format!(
                    "{where_} key tls.crt: the certificate expired at {}",
                    rfc3339(not_after)
                ));
            }
            if not_after <= now + CERT_EXPIRY_MARGIN {
                return Err(format!(
                    "{where_} key tls.crt: the certificate expires at {}, in less than {} minutes; renew it",
                    rfc3339(not_after),
                    CERT_EXPIRY_MARGIN.as_secs() / 60
                ));
            }
            // TWC's: a ca.crt beside the client certificate is trusted too, unless
            // tls.caCertSecretRef names the CA (which the workers are told about).
            if ca_pem.is_none()
                && let Some(ca) = key(secret, "ca.crt")
            {
                check_certs(&ca).map_err(|e| format!("{where_} key ca.crt: {e}"))?;
                ca_pem = Some(ca);
            }
            Credentials::MutualTls {
                cert_pem,
                key_pem,
                not_after,
            }
        }
        AuthMode::ApiKey => {
            let selector = spec.api_key_secret_ref.clone().unwrap_or_default();
            let where_ = format!("Secret {namespace}/{}", selector.name);
            let secret = credential_secret.ok_or_else(|| format!("{where_} not found"))?;
            let type_ = secret.type_.as_deref().unwrap_or("Opaque");
            if type_ != "Opaque" {
                return Err(format!(
                    "{where_} has type {type_}; an API-key Secret must be of type Opaque"
                ));
            }
            let value = key(secret, &selector.key)
                .ok_or_else(|| format!("{where_} has no key {}", selector.key))?;
            let api_key = String::from_utf8(value)
                .map_err(|_| format!("{where_} key {}: the API key is not UTF-8", selector.key))?;
            if api_key.trim().is_empty() {
                return Err(format!(
                    "{where_} key {}: the API key is empty",
                    selector.key
                ));
            }
            // The workers get these bytes as they are (`TEMPORAL_API_KEY` from the Secret):
            // the controller checks exactly the key they will send, never a trimmed one.
            if api_key.trim() != api_key {
                return Err(format!(
                    "{where_} key {}: the API key has leading or trailing whitespace (a newline at the end of a file?); the workers would send it as it is: write the Secret without it, e.g. kubectl create secret generic {} --from-literal={}=KEY",
                    selector.key, selector.name, selector.key
                ));
            }
            Credentials::ApiKey(api_key)
        }
    };
    let read = [credential_secret, ca_secret];
    let written = read.iter().flatten().map(|s| data_written_at(s));
    Ok(Auth {
        credentials,
        ca_pem,
        secrets_digest: secrets_digest(spec, credential_secret, ca_secret),
        // Unknown for one of them: unknown.
        secrets_written_at: written
            .collect::<Option<Vec<_>>>()
            .and_then(|w| w.into_iter().max()),
    })
}

/// When the content of `secret` was last written, as the apiserver records it: the latest
/// time of the managedFields entries that own `data` (a write of `stringData` is recorded as
/// `data`). A manager's time moves with any of its writes, so this is never earlier than the
/// content's last change. None when no entry says.
pub fn data_written_at(secret: &Secret) -> Option<SystemTime> {
    secret
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:data").is_some() || f.0.get("f:stringData").is_some())
        })
        .filter_map(|m| m.time.as_ref().map(|t| SystemTime::from(t.0)))
        .max()
}

/// A digest of the credential Secrets as the worker pods see them: the whole mTLS Secret and
/// the whole CA Secret (each mounted as a volume), only the API key's own key (an environment
/// variable). Two parts, `<names>.<content>`: which Secrets (roles and names) and what they
/// hold, so that a Deployment of an older connection that mounts the same Secrets can be told
/// from one that mounts others. None when the connection names no Secret. It tells whether
/// something changed, nothing of what it is (SHA-256, 16 bytes of each part).
pub fn secrets_digest(
    spec: &ConnectionSpec,
    credential_secret: Option<&Secret>,
    ca_secret: Option<&Secret>,
) -> Option<String> {
    let (mut names, mut content) = (Sha256::new(), Sha256::new());
    let mut any = false;
    let mut add = |role: &str, name: &str, secret: Option<&Secret>, only: Option<&str>| {
        any = true;
        for h in [&mut names, &mut content] {
            h.update(role.as_bytes());
            h.update([0]);
            h.update(name.as_bytes());
            h.update([0]);
            h.update(only.unwrap_or_default().as_bytes());
            h.update([0]);
        }
        let data = secret.and_then(|s| s.data.as_ref());
        for (k, v) in data.into_iter().flatten() {
            if only.is_some_and(|o| o != k) {
                continue;
            }
            // Lengths first: no two different contents hash the same bytes.
            content.update((k.len() as u64).to_be_bytes());
            content.update(k.as_bytes());
            content.update((v.0.len() as u64).to_be_bytes());
            content.update(&v.0);
        }
    };
    match spec.auth_mode() {
        AuthMode::MutualTls => add(
            "mtls",
            spec.secret_name().unwrap_or_default(),
            credential_secret,
            None,
        ),
        AuthMode::ApiKey => {
            let selector = spec.api_key_secret_ref.clone().unwrap_or_default();
            let key = Some(selector.key.as_str());
            add("api-key", &selector.name, credential_secret, key);
        }
        AuthMode::None => {}
    }
    if let Some(ca) = spec
        .tls
        .as_ref()
        .and_then(|t| t.ca_cert_secret_ref.as_ref())
    {
        add("ca", &ca.name, ca_secret, None);
    }
    let hex = |h: Sha256| -> String {
        h.finalize()
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    any.then(|| format!("{}.{}", hex(names), hex(content)))
}

fn key(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })
        .filter(|v| !v.is_empty())
}

/// Parses every certificate in a PEM bundle; returns the earliest expiry.
fn check_certs(pem: &[u8]) -> Result<SystemTime, String> {
    let mut earliest: Option<SystemTime> = None;
    let mut count = 0;
    for der in CertificateDer::pem_slice_iter(pem) {
        let der = der.map_err(|e| format!("not valid PEM ({e})"))?;
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
            .map_err(|e| format!("not a valid X.509 certificate ({e})"))?;
        let secs = cert.validity().not_after.timestamp();
        let t = if secs >= 0 {
            SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
        } else {
            SystemTime::UNIX_EPOCH
        };
        earliest = Some(earliest.map_or(t, |e| e.min(t)));
        count += 1;
    }
    match (count, earliest) {
        (0, _) | (_, None) => Err("no PEM certificate found".into()),
        (_, Some(t)) => Ok(t),
    }
}

pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|ts| ts.to_string())
        .unwrap_or_else(|_| format!("{secs}s after the epoch"))
}

/// A time written by [`rfc3339`]; None when it is not one.
pub(crate) fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    s.trim()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use twc_testenv::pki::{Ca, Usage};

    fn secret(data: &[(&str, &str)]) -> Secret {
        let data: serde_json::Map<String, serde_json::Value> = data
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s"}, "type": "kubernetes.io/tls", "stringData": data
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn with_data(data: &[(&str, &str)]) -> Secret {
        use k8s_openapi::ByteString;
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn spec(v: serde_json::Value) -> ConnectionSpec {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The digest changes with what a worker reads, and only with that.
    #[test]
    fn the_secrets_digest_follows_what_the_workers_read() {
        let mtls = spec(serde_json::json!({"hostPort": "t:7233",
            "mutualTLSSecretRef": {"name": "cert"}}));
        let old = with_data(&[("tls.crt", "a"), ("tls.key", "k")]);
        let renewed = with_data(&[("tls.crt", "b"), ("tls.key", "k")]);
        let mut labelled = old.clone();
        labelled.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        let digest = |spec: &ConnectionSpec, s: &Secret, ca: Option<&Secret>| {
            secrets_digest(spec, Some(s), ca).unwrap_or_else(|| panic!("no digest"))
        };
        assert_ne!(digest(&mtls, &old, None), digest(&mtls, &renewed, None));
        assert_eq!(digest(&mtls, &old, None), digest(&mtls, &labelled, None));
        // Keys and values cannot trade bytes.
        let shifted = with_data(&[("tls.crt", "ak"), ("tls.key", "")]);
        assert_ne!(digest(&mtls, &old, None), digest(&mtls, &shifted, None));

        // An API key: only its own key is read (an environment variable).
        let api = spec(serde_json::json!({"hostPort": "t:7233",
            "apiKeySecretRef": {"name": "keys", "key": "a"}}));
        let keys = with_data(&[("a", "1"), ("b", "2")]);
        let other_changed = with_data(&[("a", "1"), ("b", "3")]);
        let own_changed = with_data(&[("a", "9"), ("b", "2")]);
        assert_eq!(
            digest(&api, &keys, None),
            digest(&api, &other_changed, None)
        );
        assert_ne!(digest(&api, &keys, None), digest(&api, &own_changed, None));

        // A CA Secret is mounted whole.
        let mut with_ca = mtls.clone();
        with_ca.tls =
            serde_json::from_value(serde_json::json!({"caCertSecretRef": {"name": "ca"}}))
                .unwrap_or_else(|e| panic!("{e}"));
        let ca = with_data(&[("ca.crt", "c1")]);
        let new_ca = with_data(&[("ca.crt", "c2")]);
        assert_ne!(
            digest(&with_ca, &old, Some(&ca)),
            digest(&with_ca, &old, Some(&new_ca))
        );

        // Another Secret with the same content is other Secrets.
        let renamed = spec(serde_json::json!({"hostPort": "t:7233",
            "mutualTLSSecretRef": {"name": "cert-2"}}));
        let (a, b) = (digest(&mtls, &old, None), digest(&renamed, &old, None));
        assert_ne!(
            crate::plan::credentials::secrets_of(&a),
            crate::plan::credentials::secrets_of(&b)
        );
        let c = digest(&mtls, &renewed, None);
        assert_eq!(
            crate::plan::credentials::secrets_of(&a),
            crate::plan::credentials::secrets_of(&c)
        );

        // No Secret, nothing to restart for.
        let plain = spec(serde_json::json!({"hostPort": "t:7233"}));
        assert_eq!(secrets_digest(&plain, None, None), None);
    }

    /// The controller trusts what the workers are told: `tls.caCertSecretRef` when set (also
    /// with mutual TLS), else, as TWC, the client certificate Secret's own `ca.crt`.
    #[test]
    fn the_ca_secret_wins_over_the_client_secrets_ca() {
        let (client_ca, server_ca) = (
            Ca::new("client-ca").unwrap_or_else(|e| panic!("{e}")),
            Ca::new("server-ca").unwrap_or_else(|e| panic!("{e}")),
        );
        let pair = client_ca
            .issue("tenant", &[], Usage::Client, time::Duration::days(1))
            .unwrap_or_else(|e| panic!("{e}"));
        let credential = secret(&[
            ("tls.crt", &pair.cert_pem),
            ("tls.key", &pair.key_pem),
            ("ca.crt", &client_ca.cert_pem),
        ]);
        let ca = secret(&[("ca.crt", &server_ca.cert_pem)]);
        let mut spec: ConnectionSpec = serde_json::from_value(serde_json::json!({
            "hostPort": "t:7233", "mutualTLSSecretRef": {"name": "cert"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let now = SystemTime::now();
        let auth = auth_from_secrets(&spec, "ns", Some(&credential), None, now)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(auth.ca_pem, Some(client_ca.cert_pem.clone().into_bytes()));
        spec.tls = serde_json::from_value(serde_json::json!({"caCertSecretRef": {"name": "ca"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let auth = auth_from_secrets(&spec, "ns", Some(&credential), Some(&ca), now)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(auth.ca_pem, Some(server_ca.cert_pem.into_bytes()));
    }
    /// The API key the workers get is the Secret's bytes as they are: one with whitespace
    /// around it is refused with the reason, never checked trimmed and handed on raw.
    #[test]
    fn an_api_key_with_whitespace_around_it_is_refused() {
        let api = spec(serde_json::json!({"hostPort": "t:7233",
            "apiKeySecretRef": {"name": "keys", "key": "a"}}));
        let opaque = |v: &str| {
            let mut s = with_data(&[("a", v)]);
            s.type_ = Some("Opaque".into());
            s
        };
        let now = SystemTime::now();
        let auth = auth_from_secrets(&api, "ns", Some(&opaque("key-1")), None, now)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(&auth.credentials, Credentials::ApiKey(k) if k == "key-1"));
        for bad in ["key-1\n", " key-1", "key-1\r\n"] {
            let e = auth_from_secrets(&api, "ns", Some(&opaque(bad)), None, now)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(
                e.starts_with(
                    "Secret ns/keys key a: the API key has leading or trailing whitespace"
                ),
                "{e}"
            );
            assert!(!e.contains("key-1"), "the key itself is never told: {e}");
        }
        let e = auth_from_secrets(&api, "ns", Some(&opaque("\n")), None, now).err();
        assert_eq!(
            e.as_deref(),
            Some("Secret ns/keys key a: the API key is empty")
        );
    }
    /// The time of the content's last write is the apiserver's record of the writers of
    /// `data`, the latest of them; a writer of labels only does not count; no record, no time.
    #[test]
    fn the_content_was_written_when_the_apiserver_says() {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "managedFields": [
                {"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:data": {".": {}, "f:tls.crt": {}}, "f:type": {}}},
                {"manager": "cert-manager", "operation": "Apply", "apiVersion": "v1",
                 "time": "2026-02-01T00:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:data": {"f:tls.crt": {}, "f:tls.key": {}}}},
                {"manager": "labeller", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-03-01T00:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}}}
            ]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            data_written_at(&secret).map(rfc3339).as_deref(),
            Some("2026-02-01T00:00:00Z")
        );
        assert_eq!(data_written_at(&Secret::default()), None);
    }
}
