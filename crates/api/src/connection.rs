//! `Connection` (namespaced) and `ClusterConnection` (cluster-scoped): how to reach Temporal.
//! Both share one spec type, so a ClusterConnection is exactly a Connection defined once.

// Several `printcolumn(type_ = "string", ..)` entries look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::SecretKeySelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use std::borrow::Cow;

use kube::core::{ClusterResourceScope, ObjectMeta, Resource};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::sharing::Sharing;

/// Pattern of a Kubernetes object name we accept in references (a DNS-1123 label).
pub const NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// How to reach a Temporal server: its address, TLS settings and the credential Secret.
///
/// Secret names are always resolved in the namespace of the WorkerDeployment that uses the
/// connection. For a namespaced Connection that is the Connection's own namespace; for a
/// ClusterConnection each WorkerDeployment brings its own Secret of that name, so tenants never
/// share credentials and a tenant can never use another namespace's Secret.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "temporal.io",
    version = "v1alpha1",
    kind = "Connection",
    namespaced,
    status = "ConnectionStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Connection says how WorkerDeployments in its namespace reach a Temporal server.",
    printcolumn(
        name = "Host",
        type_ = "string",
        json_path = ".spec.hostPort",
        description = "Temporal server endpoint"
    ),
    printcolumn(
        name = "Users",
        type_ = "integer",
        json_path = ".status.usedBy",
        description = "WorkerDeployments using this connection"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether its users reach Temporal through it"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Age"
    )
)]
#[x_kube(
    validation = Rule::new("!(has(self.mutualTLSSecretRef) && has(self.apiKeySecretRef))")
        .message("Only one of mutualTLSSecretRef or apiKeySecretRef may be set")
)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSpec {
    /// The host and port of the Temporal frontend, for example `temporal.example.com:7233`
    /// or `my-ns.a1b2c.tmprl.cloud:7233`.
    #[schemars(regex(pattern = r"^[a-zA-Z0-9.-]+:[0-9]+$"))]
    pub host_port: String,

    /// TLS settings for the connection to the Temporal server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ConnectionTls>,

    /// The Secret holding the client certificate (`tls.crt`) and its key (`tls.key`), for
    /// mutual TLS. The Secret must be of type `kubernetes.io/tls` or `Opaque`, in the namespace
    /// of the WorkerDeployment (for a ClusterConnection: each WorkerDeployment's own
    /// namespace). Worker pods mount it at `/etc/temporal/tls`. A `ca.crt` key in it is trusted
    /// by the controller's own client (as TWC does) but not passed to the workers: for a
    /// server signed by a private CA, set `tls.caCertSecretRef` (it may name this same Secret),
    /// and the controller and the workers both trust it.
    #[serde(
        default,
        rename = "mutualTLSSecretRef",
        skip_serializing_if = "Option::is_none"
    )]
    pub mutual_tls_secret_ref: Option<SecretReference>,

    /// The Secret key holding a Temporal API key, in the namespace of the WorkerDeployment (for
    /// a ClusterConnection: each WorkerDeployment's own namespace). The Secret must be of type
    /// `Opaque`. Worker pods get it as `TEMPORAL_API_KEY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret_ref: Option<SecretKeySelector>,
}

/// TLS settings of a connection.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTls {
    /// Overrides the server name used to verify the Temporal server's certificate (SNI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-zA-Z0-9.-]+$"))]
    pub server_name: Option<String>,

    /// A Secret whose `ca.crt` key holds CA certificates to trust for the Temporal server, in
    /// addition to the system roots, with any authentication mode (with mutual TLS it may be
    /// the `mutualTLSSecretRef` Secret itself). Resolved in the namespace of the
    /// WorkerDeployment, like the credential Secrets. Worker pods mount it at
    /// `/etc/temporal/ca` and are told with `TEMPORAL_TLS_SERVER_CA_CERT_PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert_secret_ref: Option<SecretReference>,
}

/// A reference to a Secret in the WorkerDeployment's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SecretReference {
    /// Name of the Secret.
    #[schemars(regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
}

/// Observed state of a Connection or ClusterConnection.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionStatus {
    /// How many WorkerDeployments use this connection (across all namespaces, for a
    /// ClusterConnection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by: Option<i32>,

    /// The first 20 of those WorkerDeployments, as `namespace/name` in name order (`usedBy`
    /// counts them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,

    /// ClusterConnection only: how many WorkerDeployments reference it but are refused by
    /// `spec.allowedNamespaces` or `spec.allowedTemporalNamespaces` (reason
    /// `ConnectionNotAllowed`). They are not counted in `usedBy` and do not keep it from being
    /// deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<i32>,

    /// The first 20 refused WorkerDeployments, as `namespace/name` in name order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_users: Vec<String>,

    /// The `metadata.generation` the controller last wrote this status for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,

    /// Latest observations of the connection's state. `Ready` is True when at least one user
    /// reaches Temporal through it with its credentials (reason `Reachable`) or nobody uses it
    /// (`NotUsed`: nothing waits for it), False when none of its users does (the reason and
    /// message of the first failing user, such as `TemporalClientCreationFailed` or
    /// `AuthSecretInvalid`), and Unknown while no user has been reconciled through it yet
    /// (`Pending`). kstatus' `Reconciling` is True whenever `Ready` is not; `Stalled` is always
    /// False.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// ClusterConnection is the cluster-scoped twin of Connection: defined once, referenced from
/// WorkerDeployments in any namespace through `connectionRef.objectRef`. Its Secret names are
/// resolved in the namespace of each WorkerDeployment that uses it.
///
/// Written by hand rather than derived so that it shares [`ConnectionSpec`] and
/// [`ConnectionStatus`] with Connection; its CRD is Connection's with another name and scope
/// (see [`crate::crd`]), so the two schemas can never drift apart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConnection {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: ClusterConnectionSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ConnectionStatus>,
}

/// A ClusterConnection's spec: a Connection's, and who may use it ([`Sharing`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterConnectionSpec {
    #[serde(flatten)]
    pub connection: ConnectionSpec,
    #[serde(flatten)]
    pub sharing: Sharing,
}

impl ClusterConnection {
    pub const KIND: &'static str = "ClusterConnection";
    pub const PLURAL: &'static str = "clusterconnections";

    /// A ClusterConnection named `name`, open to every namespace.
    pub fn new(name: &str, spec: ConnectionSpec) -> Self {
        Self::shared(name, spec, Sharing::default())
    }

    /// A ClusterConnection named `name`, for those `sharing` allows.
    pub fn shared(name: &str, connection: ConnectionSpec, sharing: Sharing) -> Self {
        Self {
            api_version: crate::API_VERSION.into(),
            kind: Self::KIND.into(),
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: ClusterConnectionSpec {
                connection,
                sharing,
            },
            status: None,
        }
    }
}

impl Resource for ClusterConnection {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Self::KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        crate::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        crate::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Self::PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// How a client authenticates to Temporal, derived from a [`ConnectionSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthMode {
    /// Mutual TLS with a client certificate from `mutualTLSSecretRef`.
    MutualTls,
    /// An API key from `apiKeySecretRef` (over TLS).
    ApiKey,
    /// No credentials.
    None,
}

impl ConnectionSpec {
    /// The authentication mode this spec asks for (mTLS wins if both were somehow set).
    pub fn auth_mode(&self) -> AuthMode {
        if self.mutual_tls_secret_ref.is_some() {
            AuthMode::MutualTls
        } else if self.api_key_secret_ref.is_some() {
            AuthMode::ApiKey
        } else {
            AuthMode::None
        }
    }

    /// The name of the credential Secret, if the auth mode uses one.
    pub fn secret_name(&self) -> Option<&str> {
        match self.auth_mode() {
            AuthMode::MutualTls => self.mutual_tls_secret_ref.as_ref().map(|s| s.name.as_str()),
            AuthMode::ApiKey => self.api_key_secret_ref.as_ref().map(|s| s.name.as_str()),
            AuthMode::None => None,
        }
    }

    /// The TLS server name override, if any.
    pub fn tls_server_name(&self) -> Option<&str> {
        self.tls.as_ref().and_then(|t| t.server_name.as_deref())
    }
}
