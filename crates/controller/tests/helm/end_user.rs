//! The end-user ClusterRoles (`rbac.createEndUserRoles`), aggregated into the built-in `view`
//! and `edit` roles by the real aggregation controller.

use std::time::Duration;

use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::*;
use crate::render::{CHART, FULLNAME_SUFFIX, apply, delete_cluster_rbac, helm_template, one};

/// kube-controller-manager with only the ClusterRole aggregation controller, against the test
/// apiserver (the environment's own runs without it). Stopped when dropped.
async fn aggregation_controller(env: &twc_testenv::TestEnv) -> tokio::process::Child {
    let dir = env
        .dir()
        .join(format!("aggregation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("a free port: {e}"));
    let kubeconfig = env.control_plane.kubeconfig_path.display().to_string();
    let log = std::fs::File::create(dir.join("kube-controller-manager.log"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    tokio::process::Command::new(twc_testenv::paths::kube_controller_manager())
        .args([
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", dir.display()),
            "--leader-elect=false".into(),
            "--controllers=clusterrole-aggregation".into(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("kube-controller-manager: {e}"))
}

/// The prefix of the end-user test's ServiceAccounts, whose denials are expected.
pub(crate) const END_USER: &str = "end-user-";

/// A ServiceAccount `name` in `ns` bound there (RoleBinding) to the built-in ClusterRole
/// `role`, and a client authenticated as it.
async fn bound_to(w: &World, admin: &Client, ns: &str, name: &str, role: &str) -> Client {
    let binding: RoleBinding = from_json(json!({
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    }));
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap_or_else(|e| panic!("RoleBinding {name}: {e}"));
    w.env
        .control_plane
        .client_as_service_account(ns, name)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn a_worker_deployment(ns: &str, name: &str) -> twc_api::WorkerDeployment {
    from_json(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "workerOptions": {"connectionRef": {"name": "temporal"}, "temporalNamespace": "default"},
            "rollout": {"strategy": "AllAtOnce"},
            "sunset": {"scaledownDelay": "10s", "deleteDelay": "10s"},
            "template": {"spec": {"containers": [{"name": "worker", "image": "worker:v1"}]}},
        },
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_user_roles_let_namespace_editors_manage_worker_deployments() -> TestResult {
    let w = world(false).await?;
    let admin = w.client().await;
    let system = w.env.namespace("helm-u").await?;
    let team = w.env.namespace("helm-u-team").await?;
    let docs = helm_template(
        &system,
        CHART,
        &system,
        &["--set", "rbac.createEndUserRoles=true"],
    )
    .await;
    let fullname = format!("{system}{FULLNAME_SUFFIX}");
    let end_user: Vec<Value> = [format!("{fullname}-view"), format!("{fullname}-edit")]
        .iter()
        .map(|n| one(&docs, "ClusterRole", n).clone())
        .collect();
    let labels = |i: usize| end_user[i]["metadata"]["labels"].clone();
    assert_eq!(
        labels(0)["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    assert_eq!(
        labels(1)["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    assert_eq!(
        labels(1)["rbac.authorization.k8s.io/aggregate-to-admin"],
        "true"
    );
    for role in &end_user {
        assert!(
            !role["rules"].to_string().contains("clusterconnections"),
            "ClusterConnections are for cluster admins: {role}"
        );
    }
    apply(&admin, &end_user, &["ClusterRole"], false).await;
    let _aggregation = aggregation_controller(w.env).await;

    let editor = bound_to(w, &admin, &team, &format!("{END_USER}editor"), "edit").await;
    let viewer = bound_to(w, &admin, &team, &format!("{END_USER}viewer"), "view").await;
    let as_editor: Api<twc_api::WorkerDeployment> = Api::namespaced(editor.clone(), &team);
    let as_viewer: Api<twc_api::WorkerDeployment> = Api::namespaced(viewer.clone(), &team);
    // The aggregation controller copies the rules into edit and view within moments.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match as_editor
            .create(&PostParams::default(), &a_worker_deployment(&team, "w"))
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 403 && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("an editor of {team} cannot create a WorkerDeployment: {e}"),
        }
    }
    as_editor
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap_or_else(|e| panic!("an editor cannot patch: {e}"));
    Api::<twc_api::Connection>::namespaced(editor.clone(), &team)
        .list(&Default::default())
        .await
        .unwrap_or_else(|e| panic!("an editor cannot list Connections: {e}"));
    loop {
        match as_viewer.list(&Default::default()).await {
            Ok(list) => {
                assert_eq!(list.items.len(), 1);
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 403 && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("a viewer of {team} cannot list WorkerDeployments: {e}"),
        }
    }
    as_viewer
        .get("w")
        .await
        .unwrap_or_else(|e| panic!("a viewer cannot get: {e}"));
    let denied = as_viewer
        .create(&PostParams::default(), &a_worker_deployment(&team, "w2"))
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
        "a viewer created a WorkerDeployment: {denied:?}"
    );
    let elsewhere = Api::<twc_api::WorkerDeployment>::namespaced(editor.clone(), &system)
        .list(&Default::default())
        .await;
    assert!(
        matches!(&elsewhere, Err(kube::Error::Api(s)) if s.code == 403),
        "the editor of {team} reads {system}: {elsewhere:?}"
    );
    let cluster_wide = Api::<twc_api::ClusterConnection>::all(editor.clone())
        .list(&Default::default())
        .await;
    assert!(
        matches!(&cluster_wide, Err(kube::Error::Api(s)) if s.code == 403),
        "the editor lists ClusterConnections: {cluster_wide:?}"
    );
    as_editor
        .delete("w", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("an editor cannot delete: {e}"));
    delete_cluster_rbac(&admin, &end_user).await;
    Ok(())
}
