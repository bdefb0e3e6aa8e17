//! Rendering the charts with the provisioned `helm`, and reading and applying what it renders.

use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::common::from_json;

pub(crate) const CHART: &str = "charts/temporal-worker-controller";
pub(crate) const CRDS_CHART: &str = "charts/temporal-worker-controller-crds";
pub(crate) const FULLNAME_SUFFIX: &str = "-temporal-worker-controller";

/// `helm template <release> <chart> --namespace <namespace> <args>`, as JSON documents.
pub(crate) async fn helm_template(
    release: &str,
    chart: &str,
    namespace: &str,
    args: &[&str],
) -> Vec<Value> {
    let helm = twc_testenv::paths::helm();
    assert!(
        helm.exists(),
        "helm is not at {}: run hack/provision.sh",
        helm.display()
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tokio::process::Command::new(&helm)
        .args(["template", release, chart, "--namespace", namespace])
        .args(args)
        .current_dir(&root)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", helm.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helm template {chart} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_str(&stdout)
        .map(|doc| {
            serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("helm rendered bad YAML: {e}"))
        })
        .filter(|v: &Value| !v.is_null())
        .collect()
}

pub(crate) fn of_kind<'a>(
    docs: &'a [Value],
    kind: &'static str,
) -> impl Iterator<Item = &'a Value> {
    docs.iter().filter(move |d| d["kind"] == kind)
}

pub(crate) fn one<'a>(docs: &'a [Value], kind: &'static str, name: &str) -> &'a Value {
    of_kind(docs, kind)
        .find(|d| d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// Server-side applies the rendered objects of the given kinds (or only validates them, with
/// `dry_run`).
pub(crate) async fn apply(client: &Client, docs: &[Value], kinds: &[&str], dry_run: bool) {
    let mut pp = PatchParams::apply("helm-test").force();
    pp.dry_run = dry_run;
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if !kinds.contains(&kind) {
            continue;
        }
        let ar = match kind {
            "ServiceAccount" => ApiResource::erase::<ServiceAccount>(&()),
            "ClusterRole" => ApiResource::erase::<ClusterRole>(&()),
            "ClusterRoleBinding" => ApiResource::erase::<ClusterRoleBinding>(&()),
            "Role" => ApiResource::erase::<Role>(&()),
            "RoleBinding" => ApiResource::erase::<RoleBinding>(&()),
            "Deployment" => ApiResource::erase::<Deployment>(&()),
            "Service" => ApiResource::erase::<Service>(&()),
            "CustomResourceDefinition" => ApiResource::erase::<CustomResourceDefinition>(&()),
            other => panic!("the test does not apply {other}"),
        };
        let obj: DynamicObject = from_json(doc.clone());
        let api: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), &ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        api.patch(&obj.name_any(), &pp, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("apply {kind} {} (dry run {dry_run}): {e}", obj.name_any()));
    }
}

pub(crate) const RBAC: &[&str] = &[
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// Deletes the rendered cluster-scoped RBAC (the namespaced objects go with the namespaces).
pub(crate) async fn delete_cluster_rbac(client: &Client, docs: &[Value]) {
    for d in of_kind(docs, "ClusterRoleBinding") {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let _ = Api::<ClusterRoleBinding>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await;
    }
    for d in of_kind(docs, "ClusterRole") {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let _ = Api::<ClusterRole>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await;
    }
}

pub(crate) fn rules(v: &Value) -> Value {
    v["rules"].clone()
}

pub(crate) fn generated_rules<K: serde::Serialize>(k: &K) -> Value {
    rules(&serde_json::to_value(k).unwrap_or_else(|e| panic!("{e}")))
}

pub(crate) fn env(container: &Value) -> Vec<(String, Value)> {
    container["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap_or_default().to_string(),
                        e.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn env_value(container: &Value, name: &str) -> Option<String> {
    env(container)
        .into_iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, e)| e["value"].as_str().map(str::to_string))
}

/// `helm <args>` in the workspace root: (success, stdout, stderr).
pub(crate) async fn helm(args: &[&str]) -> (bool, String, String) {
    let helm = twc_testenv::paths::helm();
    assert!(
        helm.exists(),
        "helm is not at {}: run hack/provision.sh",
        helm.display()
    );
    let out = tokio::process::Command::new(&helm)
        .args(args)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", helm.display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(crate) fn pod_spec(docs: &[Value], fullname: &str) -> Value {
    one(docs, "Deployment", fullname)["spec"]["template"]["spec"].clone()
}
