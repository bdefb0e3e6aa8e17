//! A world for controller tests: the shared real environment, the CRDs, a TLS proxy that
//! demands client certificates from a test CA in front of the Temporal dev server, the example
//! worker registered as an image, and (optionally) a controller running in this process.

#![allow(dead_code)]

mod http;
mod logs;
mod rbac;
mod shared_connection;
mod waits;
mod world;

use serde_json::{Value, json};

// Every test binary uses a different part of these (as `dead_code` above).
#[allow(unused_imports)]
pub use http::*;
#[allow(unused_imports)]
pub use logs::*;
#[allow(unused_imports)]
pub use rbac::*;
#[allow(unused_imports)]
pub use shared_connection::*;
#[allow(unused_imports)]
pub use waits::*;
#[allow(unused_imports)]
pub use world::*;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The image name the example worker is registered under.
pub const WORKER_IMAGE: &str = "twc/example-worker";
/// The server name in the proxy's certificate.
pub const SERVER_NAME: &str = "temporal.test";
/// The Secret name tenants use for their client certificate.
pub const MTLS_SECRET: &str = "temporal-mtls";

/// `prefix-<6 random characters>`: a cluster-wide name no other test of the run uses.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &twc_testenv::control_plane::random_token()[..6]
    )
}

pub fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture does not parse: {e}"))
}

pub fn by_name(name: &str) -> Value {
    json!({"name": name})
}

pub fn cluster_ref(name: &str) -> Value {
    json!({"objectRef": {"kind": "ClusterConnection", "name": name}})
}

pub fn connection_ref(name: &str) -> Value {
    json!({"objectRef": {"kind": "Connection", "name": name}})
}
