//! The generated CRDs on a real kube-apiserver: every CEL rule rejects what it should with its
//! message and accepts valid input, TWC manifests apply unchanged and round-trip, defaults are
//! applied, unknown fields are pruned, and `kubectl explain` shows our descriptions.

#[path = "crds_on_apiserver/admission.rs"]
mod admission;
#[path = "crds_on_apiserver/cel.rs"]
mod cel;
#[path = "crds_on_apiserver/deployment.rs"]
mod deployment;
#[path = "crds_on_apiserver/manifests.rs"]
mod manifests;

use kube::api::{DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use serde_json::{Value, json};
use twc_testenv::TestEnv;

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn setup() -> Result<(&'static TestEnv, Client), twc_testenv::Error> {
    let env = twc_testenv::shared().await?;
    let client = env.client().await?;
    twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;
    Ok((env, client))
}

fn api(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("temporal.io", "v1alpha1", kind);
    let plural = match kind {
        "WorkerDeployment" => "workerdeployments",
        "Connection" => "connections",
        "ClusterConnection" => "clusterconnections",
        _ => "workerresourcetemplates",
    };
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    if kind == "ClusterConnection" {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), ns, &ar)
    }
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture does not parse: {e}"))
}

fn minimal_wd(name: &str) -> Value {
    json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"containers": [{"name": "worker", "image": "worker:v1"}]}},
            "rollout": {"strategy": "AllAtOnce"},
            "workerOptions": {"connectionRef": {"name": "conn"}, "temporalNamespace": "default"}
        }
    })
}

fn minimal_connection(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": kind,
        "metadata": {"name": name},
        "spec": {"hostPort": "temporal.example.com:7233"}
    })
}

/// Sets `value` at the `/`-separated `path` (numeric segments index arrays).
fn set(mut v: Value, path: &str, value: Value) -> Value {
    let mut cur = &mut v;
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i == parts.len() - 1;
        if let Ok(idx) = part.parse::<usize>() {
            let arr = cur
                .as_array_mut()
                .unwrap_or_else(|| panic!("{path}: not an array"));
            if last {
                arr[idx] = value;
                return v;
            }
            cur = &mut arr[idx];
        } else {
            let obj = cur
                .as_object_mut()
                .unwrap_or_else(|| panic!("{path}: not an object"));
            if last {
                obj.insert(part.to_string(), value);
                return v;
            }
            cur = obj.entry(part.to_string()).or_insert_with(|| json!({}));
        }
    }
    v
}

async fn create(api: &Api<DynamicObject>, v: Value) -> Result<DynamicObject, kube::Error> {
    api.create(&PostParams::default(), &object(v)).await
}

/// Creates `v` and asserts the apiserver rejects it with a message containing `expected`.
async fn assert_rejected(api: &Api<DynamicObject>, case: &str, v: Value, expected: &str) {
    match create(api, v).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{case}: {s:?}");
            assert!(
                s.message.contains(expected),
                "{case}: expected a message containing {expected:?}, got {:?}",
                s.message
            );
        }
        Ok(_) => panic!("{case}: the apiserver accepted an invalid object"),
        Err(e) => panic!("{case}: unexpected error {e}"),
    }
}
