//! The control plane's clients: the admin's, a bearer token's and a ServiceAccount's (tokens from
//! the TokenRequest API), and the namespaces tests make.

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use super::ControlPlane;
use crate::Error;

impl ControlPlane {
    /// The admin kubeconfig (cluster-admin through the `system:masters` group).
    pub fn kubeconfig(&self) -> serde_json::Value {
        kubeconfig_json(&self.server_url, &self.ca_pem, &self.admin_token)
    }

    /// A new admin client. Cheap; make one per test (a client is tied to the tokio runtime that
    /// first uses it).
    pub async fn client(&self) -> Result<Client, Error> {
        client_from_kubeconfig(self.kubeconfig()).await
    }

    /// A client that authenticates with a bearer `token`.
    pub async fn client_with_token(&self, token: &str) -> Result<Client, Error> {
        client_from_kubeconfig(kubeconfig_json(&self.server_url, &self.ca_pem, token)).await
    }

    /// A client that authenticates as ServiceAccount `namespace/name` (created if missing),
    /// with a one-hour token from the TokenRequest API. It has exactly the rights RBAC gives
    /// that ServiceAccount.
    pub async fn client_as_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Client, Error> {
        let token = self.service_account_token(namespace, name).await?;
        self.client_with_token(&token).await
    }

    /// A one-hour token (TokenRequest API) of ServiceAccount `namespace/name`, created if
    /// missing.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, Error> {
        self.service_account_token_for(namespace, name, Duration::from_secs(3600))
            .await
    }

    /// The kubeconfig of ServiceAccount `namespace/name` (created if missing), as
    /// [`ControlPlane::kubeconfig`] is the admin's, with a token valid for `valid_for`: for a
    /// process that runs longer than an hour as that ServiceAccount.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        valid_for: Duration,
    ) -> Result<serde_json::Value, Error> {
        let token = self
            .service_account_token_for(namespace, name, valid_for)
            .await?;
        Ok(kubeconfig_json(&self.server_url, &self.ca_pem, &token))
    }

    async fn service_account_token_for(
        &self,
        namespace: &str,
        name: &str,
        valid_for: Duration,
    ) -> Result<String, Error> {
        let admin = self.client().await?;
        let sas: Api<ServiceAccount> = Api::namespaced(admin, namespace);
        if sas.get_opt(name).await?.is_none() {
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match sas.create(&PostParams::default(), &sa).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec!["https://kubernetes.default.svc.cluster.local".into()],
                expiration_seconds: Some(valid_for.as_secs() as i64),
                ..Default::default()
            },
            ..Default::default()
        };
        let token = sas
            .create_token_request(name, &PostParams::default(), &request)
            .await?
            .status
            .map(|s| s.token)
            .ok_or_else(|| Error::Other("TokenRequest returned no token".into()))?;
        Ok(token)
    }

    /// Creates a Kubernetes namespace `<prefix>-<random>` and returns its name.
    pub async fn namespace(&self, prefix: &str) -> Result<String, Error> {
        let client = self.client().await?;
        create_namespace(&client, prefix).await
    }
}

/// Creates a namespace `<prefix>-<random suffix>` and returns its name.
pub async fn create_namespace(client: &Client, prefix: &str) -> Result<String, Error> {
    let name = format!("{prefix}-{}", &random_token()[..8]);
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}

pub(super) fn kubeconfig_json(server: &str, ca_pem: &str, token: &str) -> serde_json::Value {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "twc-local", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "twc-local", "context": {"cluster": "twc-local", "user": "user"}}],
        "current-context": "twc-local",
    })
}

pub(super) async fn client_from_kubeconfig(kubeconfig: serde_json::Value) -> Result<Client, Error> {
    let kc: Kubeconfig = serde_json::from_value(kubeconfig)
        .map_err(|e| Error::Other(format!("bad kubeconfig: {e}")))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Other(format!("bad kubeconfig: {e}")))?;
    Ok(Client::try_from(config)?)
}

/// A random hex string of 32 characters.
pub fn random_token() -> String {
    use std::fmt::Write;
    let bytes: [u8; 16] = rand_bytes();
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn rand_bytes() -> [u8; 16] {
    // Good enough for test tokens and names: keys from rcgen's RNG would be overkill.
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut out = [0u8; 16];
    for chunk in out.chunks_mut(8) {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
    }
    out
}
