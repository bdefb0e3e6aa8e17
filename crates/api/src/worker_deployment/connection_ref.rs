//! `spec.workerOptions.connectionRef`: which Connection or ClusterConnection a WorkerDeployment
//! uses, by name (as TWC) or by a typed `objectRef`.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A reference to the connection a WorkerDeployment uses, in the style of
/// `TypedObjectReference`. Set exactly one of `name` and `objectRef`. `name` may carry a `kind`
/// (the spelling of TWC's first ClusterConnection release): `{name: X, kind: ClusterConnection}`
/// is the same reference as `{objectRef: {kind: ClusterConnection, name: X}}`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.name) != has(self.objectRef)")
        .message("exactly one of name or objectRef must be set"),
    validation = Rule::new("!has(self.kind) || has(self.name)")
        .message("connectionRef.kind goes with connectionRef.name; objectRef carries its own kind")
)]
pub struct ConnectionReference {
    /// Name of a Connection in the WorkerDeployment's namespace (the TWC form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: Option<String>,

    /// Kind of the object `name` refers to: `Connection` (the default, in the
    /// WorkerDeployment's namespace) or `ClusterConnection` (cluster-scoped). Only with `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'Connection' || self == 'ClusterConnection'").message("connectionRef.kind must be Connection or ClusterConnection"))]
    pub kind: Option<String>,

    /// A typed reference to a Connection in the WorkerDeployment's namespace or to a
    /// cluster-scoped ClusterConnection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ConnectionObjectReference>,
}

/// A typed reference to a Connection or ClusterConnection.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.__namespace__)")
        .message("objectRef.namespace is not supported yet")
)]
pub struct ConnectionObjectReference {
    /// API group of the referenced object; only `temporal.io` is supported.
    #[serde(default = "default_api_group")]
    #[x_kube(validation = Rule::new("self == 'temporal.io'").message("objectRef.apiGroup must be temporal.io"))]
    pub api_group: String,

    /// Kind of the referenced object: `Connection` (in the WorkerDeployment's namespace) or
    /// `ClusterConnection` (cluster-scoped).
    #[x_kube(validation = Rule::new("self == 'Connection' || self == 'ClusterConnection'").message("objectRef.kind must be Connection or ClusterConnection"))]
    pub kind: String,

    /// Name of the referenced object.
    #[schemars(length(max = 253), regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,

    /// Not supported (as in TWC): a Connection is always the one in the WorkerDeployment's
    /// namespace, and a ClusterConnection has none. Kept in the schema so a manifest that sets
    /// it is refused with a message rather than having it dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

fn default_api_group() -> String {
    crate::GROUP.to_string()
}

/// The two kinds a connection reference may name.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum ConnectionKind {
    Connection,
    ClusterConnection,
}

impl ConnectionKind {
    /// The kind a reference spells, if it is one of the two.
    pub fn parse(kind: &str) -> Option<Self> {
        match kind {
            "Connection" => Some(ConnectionKind::Connection),
            "ClusterConnection" => Some(ConnectionKind::ClusterConnection),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionKind::Connection => "Connection",
            ConnectionKind::ClusterConnection => "ClusterConnection",
        }
    }
}

impl std::fmt::Display for ConnectionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ConnectionReference {
    /// The referenced kind and name, whichever spelling named it: `name` alone is a
    /// Connection, `name` + `kind` and `objectRef` say their kind. `None` if the reference is
    /// malformed (the CRD's validation prevents that).
    pub fn target(&self) -> Option<(ConnectionKind, &str)> {
        match (&self.name, &self.kind, &self.object_ref) {
            (Some(name), kind, None) => Some((
                ConnectionKind::parse(kind.as_deref().unwrap_or("Connection"))?,
                name,
            )),
            (None, None, Some(r)) if r.api_group == crate::GROUP => {
                Some((ConnectionKind::parse(&r.kind)?, r.name.as_str()))
            }
            _ => None,
        }
    }
}
