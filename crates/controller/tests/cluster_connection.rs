//! ClusterConnection and the connection lifecycle, against the real apiserver, the real
//! Temporal dev server (behind a TLS proxy demanding client certificates) and real workers.

#[path = "cluster_connection/clients.rs"]
mod clients;
mod common;
#[path = "cluster_connection/kstatus.rs"]
mod kstatus;
#[path = "cluster_connection/lifecycle.rs"]
mod lifecycle;
#[path = "cluster_connection/pace.rs"]
mod pace;
#[path = "cluster_connection/reporting.rs"]
mod reporting;
#[path = "cluster_connection/sharing.rs"]
mod sharing;
#[path = "cluster_connection/tenancy.rs"]
mod tenancy;

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use twc_api::WorkerDeployment;

const ROLLOUT: Duration = Duration::from_secs(90);
const QUICK: Duration = Duration::from_secs(30);

async fn patch_ref(client: &kube::Client, ns: &str, name: &str, r: serde_json::Value) {
    // Replace the whole reference: a merge patch would keep the other field.
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/workerOptions/connectionRef", "value": r}
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    Api::<WorkerDeployment>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
