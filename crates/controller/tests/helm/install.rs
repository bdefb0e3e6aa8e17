//! The controller chart installed and the controller run as its ServiceAccount, cluster-wide
//! and namespace-scoped; the CRDs chart.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use twc_controller::controller::prepare;

use crate::common::*;
use crate::end_user::END_USER;
use crate::render::{
    CHART, CRDS_CHART, FULLNAME_SUFFIX, RBAC, apply, delete_cluster_rbac, env, env_value,
    generated_rules, helm_template, of_kind, one, rules,
};

const ROLLOUT: Duration = Duration::from_secs(90);

/// The pod security defaults, the probes, the command and the environment every rendering has.
fn check_deployment(docs: &[Value], fullname: &str, namespace: &str) -> Value {
    let deployment = one(docs, "Deployment", fullname);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], fullname);
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{pod}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = pod["containers"][0].clone();
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true, "{sc}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{sc}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{sc}");
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{sc}");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{sc}");
    assert_eq!(c["command"], json!(["/usr/local/bin/twc"]));
    assert_eq!(c["args"][0], "run");
    let port = |name: &str| {
        c["ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .map(|p| p["containerPort"].clone())
            .unwrap_or_else(|| panic!("no port {name}: {c}"))
    };
    assert_eq!(port("metrics"), 8080);
    assert_eq!(port("health"), 8081);
    for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}: {c}");
        assert_eq!(c[probe]["httpGet"]["port"], "health", "{probe}: {c}");
    }
    let pod_namespace = env(&c)
        .into_iter()
        .find(|(n, _)| n == "POD_NAMESPACE")
        .map(|(_, e)| e["valueFrom"]["fieldRef"]["fieldPath"].clone());
    assert_eq!(pod_namespace, Some(json!("metadata.namespace")));
    assert_eq!(env_value(&c, "LEADER_ELECT").as_deref(), Some("true"));
    assert_eq!(
        env_value(&c, "LEADER_ELECTION_NAMESPACE").as_deref(),
        Some(namespace)
    );
    assert_eq!(
        env_value(&c, "METRICS_BIND_ADDRESS").as_deref(),
        Some("0.0.0.0:8080")
    );
    assert_eq!(
        env_value(&c, "HEALTH_PROBE_BIND_ADDRESS").as_deref(),
        Some("0.0.0.0:8081")
    );
    // The metrics Service selects the Deployment's pods.
    let service = one(docs, "Service", &format!("{fullname}-metrics"));
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"]
        .as_object()
        .into_iter()
        .flatten()
    {
        assert_eq!(&pod_labels[k], v, "Service selector {k}");
    }
    c
}

/// Every variable the chart sets (all values given) is one `twc run` reads, as `--help` says.
async fn check_env_names_are_the_binarys(release: &str) {
    let all = [
        "identity=helm-test",
        "takeOverIdentities={old/twc/1,other}",
        "fastPollSeconds=1",
        "steadyPollSeconds=5",
        "maxUndeletableVersions=10",
        "leaderElection.leaseSeconds=10",
        "leaderElection.renewDeadlineSeconds=7",
        "leaderElection.retrySeconds=2",
        "watchNamespaces={a,b}",
        "rbac.scope=namespaced",
    ];
    let args: Vec<&str> = all.iter().flat_map(|v| ["--set", v]).collect();
    let docs = helm_template(release, CHART, release, &args).await;
    let deployment = one(&docs, "Deployment", &format!("{release}{FULLNAME_SUFFIX}"));
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let names: Vec<String> = env(container).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 19, "{names:?}");
    assert_eq!(
        env_value(container, "TAKE_OVER_IDENTITIES").as_deref(),
        Some("old/twc/1,other")
    );
    assert_eq!(
        env_value(container, "WATCH_NAMESPACES").as_deref(),
        Some("a,b")
    );
    // The controller holds its Role and RoleBinding by the release's name, and may.
    let role_name = format!("{release}{FULLNAME_SUFFIX}");
    assert_eq!(
        env_value(container, "TWC_RBAC_NAME").as_deref(),
        Some(role_name.as_str())
    );
    one(&docs, "Role", &role_name);
    let cluster_role = one(&docs, "ClusterRole", &format!("{role_name}-cluster-scoped"));
    assert!(
        cluster_role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["resourceNames"] == serde_json::json!([role_name])),
        "{cluster_role}"
    );
    let twc = twc_testenv::paths::workspace_binary("temporal-worker-controller", "twc")
        .unwrap_or_else(|e| panic!("{e}"));
    let out = tokio::process::Command::new(&twc)
        .args(["run", "--help"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", twc.display()));
    let help = String::from_utf8_lossy(&out.stdout);
    for name in names.iter().filter(|n| *n != "POD_NAMESPACE") {
        assert!(
            help.contains(&format!("[env: {name}=")),
            "the chart sets {name}, which `twc run` does not read:\n{help}"
        );
    }
}

/// The rendered pod is admitted in a namespace enforcing the `restricted` Pod Security
/// Standard (server-side dry run), and the same pod without the container's securityContext is
/// not, so the check is live.
async fn check_pod_security(admin: &Client, docs: &[Value], fullname: &str, namespace: &str) {
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    let label =
        json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
    Api::<Namespace>::all(admin.clone())
        .patch(namespace, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap_or_else(|e| panic!("label {namespace}: {e}"));
    let template = &one(docs, "Deployment", fullname)["spec"]["template"];
    let pod = |spec: Value| -> Pod {
        from_json(json!({
            "metadata": {"name": "pod-security", "labels": template["metadata"]["labels"]},
            "spec": spec,
        }))
    };
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    pods.create(&dry_run, &pod(template["spec"].clone()))
        .await
        .unwrap_or_else(|e| panic!("the chart's pod is not admitted as restricted: {e}"));
    let mut loose = template["spec"].clone();
    loose["containers"][0]["securityContext"] = json!({});
    let rejected = pods.create(&dry_run, &pod(loose)).await;
    assert!(
        matches!(&rejected, Err(kube::Error::Api(s)) if s.message.contains("PodSecurity")),
        "the restricted check is not enforced: {rejected:?}"
    );
}

/// The leader-election Role in the release namespace lets the ServiceAccount hold its Lease.
async fn check_leader_election(sa_client: &Client, namespace: &str, id: &str) {
    let leases: Api<Lease> = Api::namespaced(sa_client.clone(), namespace);
    let lease: Lease =
        from_json(json!({"metadata": {"name": id}, "spec": {"holderIdentity": "helm-test"}}));
    let mut lease = leases
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_or_else(|e| {
            panic!("the leader-election Role does not allow creating the Lease: {e}")
        });
    lease.spec.get_or_insert_default().lease_duration_seconds = Some(15);
    leases
        .replace(id, &PostParams::default(), &lease)
        .await
        .unwrap_or_else(|e| {
            panic!("the leader-election Role does not allow updating the Lease: {e}")
        });
}

/// Numbers as f64, so `0.0` (as generated) equals `0` (after Helm's YAML round trip).
fn normalize(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), normalize(v))).collect())
        }
        other => other.clone(),
    }
}

/// The CRDs chart renders the CRDs the harness installs, with the keep policy, and the
/// apiserver accepts them (server-side dry run).
async fn check_crds_chart(admin: &Client, release: &str) {
    let docs = helm_template(release, CRDS_CHART, "default", &[]).await;
    let expected = twc_api::crd::all();
    assert_eq!(
        of_kind(&docs, "CustomResourceDefinition").count(),
        expected.len()
    );
    for crd in &expected {
        let name = crd.name_any();
        let rendered = one(&docs, "CustomResourceDefinition", &name);
        assert_eq!(
            rendered["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{name}"
        );
        let want = serde_json::to_value(&crd.spec).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            normalize(&rendered["spec"]) == normalize(&want),
            "the CRDs chart's {name} differs from `twc crd`: run hack/generate.sh"
        );
    }
    apply(admin, &docs, &["CustomResourceDefinition"], true).await;
    let kept = helm_template(release, CRDS_CHART, "default", &["--set", "keep=false"]).await;
    assert!(
        of_kind(&kept, "CustomResourceDefinition")
            .all(|d| d["metadata"]["annotations"]["helm.sh/resource-policy"].is_null()),
        "keep=false drops the keep policy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_the_controller_cluster_wide() -> TestResult {
    let logs = capture_logs();
    let w = world(false).await?;
    let admin = w.client().await;
    let system = w.env.namespace("helm-c").await?;
    check_crds_chart(&admin, &system).await;
    check_env_names_are_the_binarys(&system).await;

    // The release is named after its namespace, so its cluster-wide names are unique too.
    let docs = helm_template(&system, CHART, &system, &[]).await;
    let fullname = format!("{system}{FULLNAME_SUFFIX}");
    let c = check_deployment(&docs, &fullname, &system);
    assert_eq!(env_value(&c, "WATCH_NAMESPACES"), None, "all namespaces");
    let (namespaced, cluster_scoped) = twc_controller::rbac::cluster_wide();
    assert_eq!(
        rules(one(&docs, "ClusterRole", &fullname)),
        generated_rules(&namespaced)
    );
    assert_eq!(
        rules(one(
            &docs,
            "ClusterRole",
            &format!("{fullname}-cluster-scoped")
        )),
        generated_rules(&cluster_scoped)
    );
    assert_eq!(
        rules(one(&docs, "Role", &format!("{fullname}-leader-election"))),
        generated_rules(&twc_controller::rbac::leader_election(None))
    );
    assert_eq!(of_kind(&docs, "ClusterRoleBinding").count(), 2);

    apply(&admin, &docs, RBAC, false).await;
    apply(&admin, &docs, &["Deployment", "Service"], true).await;
    check_pod_security(&admin, &docs, &fullname, &system).await;
    let sa_client = w
        .env
        .control_plane
        .client_as_service_account(&system, &fullname)
        .await?;
    let lease = env_value(&c, "LEADER_ELECTION_ID").unwrap_or_default();
    assert_eq!(lease, fullname);
    check_leader_election(&sa_client, &system, &lease).await;

    let (handle, fut) = prepare(sa_client, test_config()).await;
    assert!(
        handle.cluster_connections,
        "the chart's ClusterRoles allow ClusterConnections"
    );
    let controller = tokio::spawn(fut);
    let cc = format!("helm-{system}");
    w.cluster_connection(&cc).await;
    let a = w.tenant("helm-c-a").await;
    w.worker_deployment(&a, "w", cluster_ref(&cc), "v1").await;
    wait_wd(&admin, &a, "w", "rolled out", ROLLOUT, rolled_out).await;
    delete_wd(&admin, &a, "w").await;
    wait_wd_gone(&admin, &a, "w", ROLLOUT).await;
    Api::<twc_api::ClusterConnection>::all(admin.clone())
        .delete(&cc, &DeleteParams::default())
        .await?;
    controller.abort();
    delete_cluster_rbac(&admin, &docs).await;
    assert_no_forbidden(&logs);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_the_controller_namespace_scoped() -> TestResult {
    let logs = capture_logs();
    let w = world(false).await?;
    let admin = w.client().await;
    let system = w.env.namespace("helm-n").await?;
    let a = w.tenant("helm-n-a").await;

    let watch = format!("watchNamespaces={{{a}}}");
    let docs = helm_template(
        &system,
        CHART,
        &system,
        &["--set", "rbac.scope=namespaced", "--set", &watch],
    )
    .await;
    let fullname = format!("{system}{FULLNAME_SUFFIX}");
    let c = check_deployment(&docs, &fullname, &system);
    assert_eq!(
        env_value(&c, "WATCH_NAMESPACES").as_deref(),
        Some(a.as_str())
    );
    for d in of_kind(&docs, "Role").chain(of_kind(&docs, "ClusterRole")) {
        assert!(
            !d["rules"].to_string().contains("clusterconnections"),
            "namespace-scoped rendering grants ClusterConnection rights: {d}"
        );
    }
    assert!(
        of_kind(&docs, "ClusterRole").all(|d| d["metadata"]["name"] != fullname.as_str()),
        "no ClusterRole for namespaced kinds"
    );
    let role = of_kind(&docs, "Role")
        .find(|d| d["metadata"]["name"] == fullname.as_str())
        .unwrap_or_else(|| panic!("no Role {fullname}"));
    assert_eq!(role["metadata"]["namespace"], a.as_str());
    let (generated_role, generated_cluster) = twc_controller::rbac::namespace_scoped(None);
    assert_eq!(rules(role), generated_rules(&generated_role));
    // The generated rules, the controller's own Role and RoleBinding named as the release's.
    let mut expected = generated_rules(&generated_cluster);
    for r in expected.as_array_mut().into_iter().flatten() {
        if r.get("resourceNames").is_some() {
            r["resourceNames"] = serde_json::json!([fullname]);
        }
    }
    assert_eq!(
        rules(one(
            &docs,
            "ClusterRole",
            &format!("{fullname}-cluster-scoped")
        )),
        expected
    );

    apply(&admin, &docs, RBAC, false).await;
    apply(&admin, &docs, &["Deployment", "Service"], true).await;
    let sa_client = w
        .env
        .control_plane
        .client_as_service_account(&system, &fullname)
        .await?;
    let mut config = test_config();
    config.watch_namespaces = vec![a.clone()];
    config.rbac_name = env_value(&c, "TWC_RBAC_NAME").unwrap_or_default();
    let (handle, fut) = prepare(sa_client, config).await;
    assert!(
        !handle.cluster_connections,
        "namespace-scoped: no ClusterConnection rights"
    );
    let controller = tokio::spawn(fut);
    w.connection(&a, "temporal").await;
    w.worker_deployment(&a, "w", by_name("temporal"), "v1")
        .await;
    wait_wd(&admin, &a, "w", "rolled out", ROLLOUT, rolled_out).await;
    // The chart's rules let the controller hold its Role and RoleBinding while it needs them.
    wait_rights_held(&admin, &a, &fullname, true).await;
    delete_wd(&admin, &a, "w").await;
    wait_wd_gone(&admin, &a, "w", ROLLOUT).await;
    wait_rights_held(&admin, &a, &fullname, false).await;
    controller.abort();
    delete_cluster_rbac(&admin, &docs).await;
    assert_no_forbidden(&logs);
    Ok(())
}

/// Waits until the Role and RoleBinding `ns/name` both carry the controller's rights finalizer
/// (`held`), or neither does.
async fn wait_rights_held(admin: &Client, ns: &str, name: &str, held: bool) {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let has = |f: Option<Vec<String>>| {
        f.unwrap_or_default()
            .iter()
            .any(|f| f == twc_controller::rbac::RIGHTS_FINALIZER)
    };
    twc_testenv::wait_for(
        &format!("Role and RoleBinding {ns}/{name} held: {held}"),
        Duration::from_secs(30),
        || async {
            let role = Api::<Role>::namespaced(admin.clone(), ns).get(name).await;
            let binding = Api::<RoleBinding>::namespaced(admin.clone(), ns)
                .get(name)
                .await;
            let (role, binding) = (
                role.map_err(|e| e.to_string())?,
                binding.map_err(|e| e.to_string())?,
            );
            let now = (
                has(role.metadata.finalizers),
                has(binding.metadata.finalizers),
            );
            if now == (held, held) {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

fn assert_no_forbidden(logs: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    let text =
        String::from_utf8_lossy(&logs.lock().map(|l| l.clone()).unwrap_or_default()).to_lowercase();
    // The deliberate Pod Security rejection of `check_pod_security` is not an RBAC denial, and
    // the end-user ServiceAccounts' denials are the end-user test's (the logs are shared).
    let forbidden: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("forbidden") && !l.contains("violates podsecurity"))
        .filter(|l| !l.contains(END_USER))
        .collect();
    assert!(
        forbidden.is_empty(),
        "the controller hit RBAC denials:\n{}",
        forbidden.join("\n")
    );
}
