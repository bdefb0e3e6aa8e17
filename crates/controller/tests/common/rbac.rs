//! The generated RBAC applied and bound to a ServiceAccount.

use super::World;
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};

/// Applies the generated RBAC file `config/rbac/<file>` and binds it to ServiceAccount
/// `sa_ns/sa`: ClusterRoles with a ClusterRoleBinding, the Role with a RoleBinding in each of
/// `role_namespaces`. Returns a client authenticated as that ServiceAccount.
pub async fn client_with_generated_rbac(
    w: &World,
    file: &str,
    sa_ns: &str,
    sa: &str,
    role_namespaces: &[String],
) -> Client {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let admin = w.client().await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../config/rbac")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let pp = kube::api::PatchParams::apply("rbac-test").force();
    let subject = json!([{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]);
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{e}"));
        if v.is_null() {
            continue;
        }
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match v["kind"].as_str() {
            Some("ClusterRole") => {
                let unique = format!("{name}-{sa_ns}");
                let mut role = v.clone();
                role["metadata"]["name"] = json!(unique);
                Api::<ClusterRole>::all(admin.clone())
                    .patch(&unique, &pp, &kube::api::Patch::Apply(&role))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                let binding = json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": unique},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": unique},
                    "subjects": subject,
                });
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .patch(&unique, &pp, &kube::api::Patch::Apply(&binding))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            Some("Role") => {
                for ns in role_namespaces {
                    let mut role = v.clone();
                    role["metadata"]["namespace"] = json!(ns);
                    Api::<Role>::namespaced(admin.clone(), ns)
                        .patch(&name, &pp, &kube::api::Patch::Apply(&role))
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                    let binding = json!({
                        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                        "metadata": {"name": name, "namespace": ns},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                        "subjects": subject,
                    });
                    Api::<RoleBinding>::namespaced(admin.clone(), ns)
                        .patch(&name, &pp, &kube::api::Patch::Apply(&binding))
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                }
            }
            other => panic!("unexpected kind {other:?} in {file}"),
        }
    }
    w.env
        .control_plane
        .client_as_service_account(sa_ns, sa)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
