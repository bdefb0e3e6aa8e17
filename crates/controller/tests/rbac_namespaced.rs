//! Namespace-scoped mode with only the generated Roles: Connections work in the watched
//! namespaces, a ClusterConnection reference gets a clear condition, and nothing is forbidden.

mod common;

use std::time::Duration;

use common::*;
use twc_controller::controller::prepare;

const ROLLOUT: Duration = Duration::from_secs(90);
const QUICK: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_scoped_mode_runs_on_roles_without_forbidden_loops() -> TestResult {
    let logs = capture_logs();
    let w = world(false).await?;
    let admin = w.client().await;
    let system = w.env.namespace("twc-system").await?;
    let a = w.tenant("scoped-a").await;
    let b = w.tenant("scoped-b").await;
    let sa_client = client_with_generated_rbac(
        w,
        "namespaced.yaml",
        &system,
        "controller",
        &[a.clone(), b.clone()],
    )
    .await;
    let mut config = test_config();
    config.watch_namespaces = vec![a.clone(), b.clone()];
    let (handle, fut) = prepare(sa_client, config).await;
    assert!(
        !handle.cluster_connections,
        "Roles grant no ClusterConnection rights"
    );
    let _controller = tokio::spawn(fut);

    w.connection(&a, "temporal").await;
    w.worker_deployment(&a, "w", by_name("temporal"), "v1")
        .await;
    let cc = format!("scoped-{system}");
    w.cluster_connection(&cc).await;
    w.worker_deployment(&b, "w", cluster_ref(&cc), "v1").await;

    wait_wd(&admin, &a, "w", "rolled out", ROLLOUT, rolled_out).await;
    wait_connection(&admin, &a, "temporal", "protected", QUICK).await;
    worker_resource_templates_apply(&admin, &a).await;
    let wd = wait_wd(
        &admin,
        &b,
        "w",
        "ClusterConnectionUnsupported",
        QUICK,
        |wd| condition(wd, "Ready").is_some_and(|(_, r, _)| r == "ClusterConnectionUnsupported"),
    )
    .await;
    let (_, _, message) = condition(&wd, "Ready").unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "ClusterConnection \"{cc}\" cannot be used because the controller is namespace-scoped"
        )) && message.contains("not allowed to list, watch and patch ClusterConnections"),
        "TWC's sentence, then the real cause: {message}"
    );
    // Waiting cannot help: Helm 4, Flux and the cli-utils poller fail at once.
    let verdict = kstatus_of(&wd);
    assert_eq!(verdict.status, "Failed", "{verdict:?}");
    let rolled = get_wd(&admin, &a, "w").await;
    assert_eq!(
        kstatus_of(&rolled).status,
        "Current",
        "{:?}",
        kstatus_of(&rolled)
    );
    // Not watched: the ClusterConnection is left alone.
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_cluster_connection(&admin, &cc, "unprotected", QUICK).await;

    delete_wd(&admin, &a, "w").await;
    wait_wd_gone(&admin, &a, "w", ROLLOUT).await;
    wait_connection(&admin, &a, "temporal", "unprotected", QUICK).await;
    delete_wd(&admin, &b, "w").await;
    wait_wd_gone(&admin, &b, "w", ROLLOUT).await;

    let text =
        String::from_utf8_lossy(&logs.lock().map(|l| l.clone()).unwrap_or_default()).to_lowercase();
    // A namespace being deleted refuses new Events (NamespaceLifecycle): not an RBAC denial.
    // The log is the process's: the lines of this test's controller name its ServiceAccount's
    // namespace or the namespaces it watches (another test's controller loses its rights in a
    // namespace deleted on purpose).
    let ours = |l: &str| [&system, &a, &b].iter().any(|n| l.contains(n.as_str()));
    let forbidden: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("forbidden") && !l.contains("because it is being terminated"))
        .filter(|l| ours(l))
        .collect();
    assert!(
        forbidden.is_empty(),
        "forbidden errors in the log:\n{}",
        forbidden.join("\n")
    );
    Ok(())
}

/// Deleting a watched namespace with a WorkerDeployment in it: the namespace controller deletes
/// the controller's Role and RoleBinding there with everything else, in no set order. The
/// controller keeps them (a finalizer of its own) until its WorkerDeployments there are cleaned
/// up, so the namespace goes away. Before: every call got 403 once they were gone, the
/// WorkerDeployment's finalizer stayed and the namespace stayed Terminating.
///
/// The credential Secret goes with the namespace too, usually before the cleanup is done: the
/// controller cleans Temporal up with the client it dialled before (before: the worker
/// deployment was left in Temporal on every namespace deletion, as the chaos run found). A
/// controller that has no such client (restarted once the Secret was gone) names what it leaves
/// in its log. And a watched namespace that is not there is read as empty: the restarted
/// controller syncs its caches (before: its watches there met Forbidden for ever and it never
/// started), and the running one stays ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_watched_namespace_is_never_held_by_rights_deleted_with_it() -> TestResult {
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kube::api::{Api, DeleteParams};
    let w = world(false).await?;
    let admin = w.client().await;
    let system = w.env.namespace("twc-system").await?;
    let a = w.tenant("scoped-gone").await;
    let b = w.tenant("scoped-restarted").await;
    let sa_client = client_with_generated_rbac(
        w,
        "namespaced.yaml",
        &system,
        "controller",
        &[a.clone(), b.clone()],
    )
    .await;
    let mut config = test_config();
    config.watch_namespaces = vec![a.clone(), b.clone()];
    let (handle, fut) = prepare(sa_client.clone(), config.clone()).await;
    let controller = tokio::spawn(fut);
    let mut temporal_ns = Vec::new();
    for ns in [&a, &b] {
        w.connection(ns, "temporal").await;
        let wd = w
            .worker_deployment(ns, "w", by_name("temporal"), "v1")
            .await;
        temporal_ns.push(wd.spec.worker_options.temporal_namespace);
        wait_wd(&admin, ns, "w", "rolled out", ROLLOUT, rolled_out).await;
    }
    let name = twc_controller::rbac::NAME;
    let held = |finalizers: Option<Vec<String>>| {
        finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == twc_controller::rbac::RIGHTS_FINALIZER)
    };
    twc_testenv::wait_for("the Role and RoleBinding held", QUICK, || async {
        let role = Api::<Role>::namespaced(admin.clone(), &a).get(name).await;
        let binding = Api::<RoleBinding>::namespaced(admin.clone(), &a)
            .get(name)
            .await;
        match (role, binding) {
            (Ok(r), Ok(b))
                if held(r.metadata.finalizers.clone()) && held(b.metadata.finalizers.clone()) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await?;

    let namespaces = Api::<Namespace>::all(admin.clone());
    namespaces.delete(&a, &DeleteParams::default()).await?;
    wait_namespace_gone(&admin, &a, ROLLOUT).await?;
    let temporal = w.env.temporal.connect().await?;
    let describe = |ns: String, temporal_ns: String| {
        let temporal = temporal.clone();
        async move {
            let deployment = twc_controller::plan::build_id::temporal_deployment_name(&ns, "w");
            twc_controller::temporal::describe(&temporal, &temporal_ns, &deployment).await
        }
    };
    // A watched namespace that is not there holds nothing: not a lost permission (`/readyz`
    // stays ready) once its watches meet Forbidden (the Role went with it).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(handle.access.state(), Ok(()));
    let left = describe(a.clone(), temporal_ns[0].clone()).await?;
    assert!(
        !left.exists,
        "namespace {a} is gone, but Temporal keeps its worker deployment: {:?}",
        left.versions.keys()
    );

    // A controller without the client: stopped, the namespace deleted, started again once the
    // Secret is gone.
    controller.abort();
    let _ = controller.await;
    namespaces.delete(&b, &DeleteParams::default()).await?;
    let secrets = Api::<Secret>::namespaced(admin.clone(), &b);
    twc_testenv::wait_for("the Secret gone with the namespace", QUICK, || async {
        match secrets.get_opt(MTLS_SECRET).await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    let (_, fut) = prepare(sa_client, config).await;
    let _controller = tokio::spawn(fut);
    wait_namespace_gone(&admin, &b, ROLLOUT).await?;
    // The namespace refuses new Events once it is being deleted: what the cleanup left in
    // Temporal is named in the controller's log instead.
    let logs = capture_logs();
    let text =
        String::from_utf8_lossy(&logs.lock().map(|l| l.clone()).unwrap_or_default()).to_string();
    assert!(
        text.lines().any(|l| l.contains("CleanupSkipped")
            && l.contains(&format!("Temporal worker deployment {b}/w"))
            && l.contains("is left as it is")),
        "what was left in Temporal is not named in the log"
    );
    assert!(describe(b.clone(), temporal_ns[1].clone()).await?.exists);
    Ok(())
}

/// An HPA and a PDB WorkerResourceTemplate are applied with the Role's rights alone.
async fn worker_resource_templates_apply(admin: &kube::Client, ns: &str) {
    use kube::api::{Api, PostParams};
    use serde_json::json;
    use twc_api::WorkerResourceTemplate;
    let api: Api<WorkerResourceTemplate> = Api::namespaced(admin.clone(), ns);
    let templates = [
        (
            "hpa",
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "spec": {"scaleTargetRef": {}, "minReplicas": 1, "maxReplicas": 2}}),
        ),
        (
            "pdb",
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {}}}}),
        ),
    ];
    for (name, template) in templates {
        let wrt: WorkerResourceTemplate = from_json(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"workerDeploymentRef": {"name": "w"}, "template": template},
        }));
        api.create(&PostParams::default(), &wrt)
            .await
            .unwrap_or_else(|e| panic!("create WorkerResourceTemplate {ns}/{name}: {e}"));
        twc_testenv::wait_for(&format!("{ns}/{name} applied"), QUICK, || {
            let api = api.clone();
            async move {
                let wrt = api.get(name).await.map_err(|e| e.to_string())?;
                let status = wrt.status.clone().unwrap_or_default();
                let ready = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if ready && !status.versions.is_empty() {
                    Ok(())
                } else {
                    Err(serde_json::to_string(&status).unwrap_or_default())
                }
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A namespace's Role and RoleBinding stay held while a Connection there keeps the
/// controller's finalizer, not only while a WorkerDeployment does: the Connection loses it
/// after its last user, and that write needs the Role. Before, they were let go with the last
/// WorkerDeployment; a namespace deleted then could delete the Role first, the Connection's
/// finalizer stayed, and the namespace stayed Terminating (the namespace-scoped chaos run
/// found it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rights_stay_while_a_connection_keeps_its_finalizer() -> TestResult {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use twc_controller::rbac::{NAME, RIGHTS_FINALIZER};
    let w = world(false).await?;
    let admin = w.client().await;
    let ns = w.tenant("rights-conn").await;
    let role: Role = from_json(serde_json::json!({
        "metadata": {"name": NAME, "finalizers": [RIGHTS_FINALIZER]}, "rules": [],
    }));
    let roles = Api::<Role>::namespaced(admin.clone(), &ns);
    roles.create(&PostParams::default(), &role).await?;
    let binding: RoleBinding = from_json(serde_json::json!({
        "metadata": {"name": NAME, "finalizers": [RIGHTS_FINALIZER]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
    }));
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), &ns);
    bindings.create(&PostParams::default(), &binding).await?;
    w.connection(&ns, "last").await;
    let connections = Api::<twc_api::Connection>::namespaced(admin.clone(), &ns);
    let finalizers = |f: &[&str]| serde_json::json!({"metadata": {"finalizers": f}});
    connections
        .patch(
            "last",
            &PatchParams::default(),
            &Patch::Merge(&finalizers(&[twc_api::FINALIZER])),
        )
        .await?;
    let held = || async {
        let role = roles.get(NAME).await?;
        let binding = bindings.get(NAME).await?;
        Ok::<_, kube::Error>(
            [role.metadata.finalizers, binding.metadata.finalizers]
                .map(|f| f.unwrap_or_default().iter().any(|f| f == RIGHTS_FINALIZER)),
        )
    };

    // No WorkerDeployment in the namespace, the Connection still finalized: held.
    let rights = twc_controller::rights::Rights::new(admin.clone(), Some(NAME.into()));
    rights.release_if_unused(&ns).await;
    assert_eq!(held().await?, [true, true], "let go before the Connection");

    connections
        .patch(
            "last",
            &PatchParams::default(),
            &Patch::Merge(&finalizers(&[])),
        )
        .await?;
    rights.release_if_unused(&ns).await;
    assert_eq!(
        held().await?,
        [false, false],
        "held after everything let go"
    );
    Ok(())
}
