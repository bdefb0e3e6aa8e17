//! The Helm charts, rendered by the provisioned `helm` (`hack/provision.sh`): the controller
//! chart's ServiceAccount and RBAC applied to the real apiserver, then the controller run in
//! this process as that ServiceAccount (there is no container runtime for the Deployment
//! itself, which is checked by a server-side dry run instead), cluster-wide and
//! namespace-scoped. The CRDs chart renders exactly the CRDs the harness installs.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use twc_controller::controller::prepare;

const ROLLOUT: Duration = Duration::from_secs(90);
const CHART: &str = "charts/temporal-worker-controller";
const CRDS_CHART: &str = "charts/temporal-worker-controller-crds";
const FULLNAME_SUFFIX: &str = "-temporal-worker-controller";

/// `helm template <release> <chart> --namespace <namespace> <args>`, as JSON documents.
async fn helm_template(release: &str, chart: &str, namespace: &str, args: &[&str]) -> Vec<Value> {
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

fn of_kind<'a>(docs: &'a [Value], kind: &'static str) -> impl Iterator<Item = &'a Value> {
    docs.iter().filter(move |d| d["kind"] == kind)
}

fn one<'a>(docs: &'a [Value], kind: &'static str, name: &str) -> &'a Value {
    of_kind(docs, kind)
        .find(|d| d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// Server-side applies the rendered objects of the given kinds (or only validates them, with
/// `dry_run`).
async fn apply(client: &Client, docs: &[Value], kinds: &[&str], dry_run: bool) {
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

const RBAC: &[&str] = &[
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// Deletes the rendered cluster-scoped RBAC (the namespaced objects go with the namespaces).
async fn delete_cluster_rbac(client: &Client, docs: &[Value]) {
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

fn rules(v: &Value) -> Value {
    v["rules"].clone()
}

fn generated_rules<K: serde::Serialize>(k: &K) -> Value {
    rules(&serde_json::to_value(k).unwrap_or_else(|e| panic!("{e}")))
}

fn env(container: &Value) -> Vec<(String, Value)> {
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

fn env_value(container: &Value, name: &str) -> Option<String> {
    env(container)
        .into_iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, e)| e["value"].as_str().map(str::to_string))
}

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
    ];
    let args: Vec<&str> = all.iter().flat_map(|v| ["--set", v]).collect();
    let docs = helm_template(release, CHART, release, &args).await;
    let deployment = one(&docs, "Deployment", &format!("{release}{FULLNAME_SUFFIX}"));
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let names: Vec<String> = env(container).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 18, "{names:?}");
    assert_eq!(
        env_value(container, "TAKE_OVER_IDENTITIES").as_deref(),
        Some("old/twc/1,other")
    );
    assert_eq!(
        env_value(container, "WATCH_NAMESPACES").as_deref(),
        Some("a,b")
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
    assert_eq!(
        rules(one(
            &docs,
            "ClusterRole",
            &format!("{fullname}-cluster-scoped")
        )),
        generated_rules(&generated_cluster)
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
    delete_wd(&admin, &a, "w").await;
    wait_wd_gone(&admin, &a, "w", ROLLOUT).await;
    controller.abort();
    delete_cluster_rbac(&admin, &docs).await;
    assert_no_forbidden(&logs);
    Ok(())
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

// ---- Coming from TWC's chart (docs/helm.md) ----

/// TWC's chart's default values file, verbatim (helm/temporal-worker-controller/values.yaml of
/// temporalio/temporal-worker-controller, the newest version with `workerResourceTemplate`,
/// `kubeRBACProxy` and `rbac.createEndUserRoles`).
const TWC_VALUES: &str = "crates/controller/tests/fixtures/twc-values.yaml";

/// `helm <args>` in the workspace root: (success, stdout, stderr).
async fn helm(args: &[&str]) -> (bool, String, String) {
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

/// The install notes (`templates/NOTES.txt`) of a client-side dry-run install (Helm 3.22
/// checks that the cluster is reachable even then, hence the test apiserver's kubeconfig).
async fn notes(w: &World, args: &[&str]) -> String {
    let kubeconfig = w.env.control_plane.kubeconfig_path.display().to_string();
    let mut all = vec!["install", "notes", CHART, "--dry-run=client", "-n", "notes"];
    all.extend_from_slice(&["--kubeconfig", &kubeconfig]);
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = helm(&all).await;
    assert!(ok, "helm install --dry-run {args:?} failed:\n{stderr}");
    stdout
        .split_once("NOTES:")
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| panic!("no NOTES in:\n{stdout}"))
}

fn pod_spec(docs: &[Value], fullname: &str) -> Value {
    one(docs, "Deployment", fullname)["spec"]["template"]["spec"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twcs_values_file_renders_and_lints() -> TestResult {
    let w = world(false).await?;
    let (ok, stdout, stderr) = helm(&["lint", "--strict", CHART, "-f", TWC_VALUES]).await;
    assert!(ok, "helm lint with TWC's values:\n{stdout}\n{stderr}");

    let docs = helm_template("twc", CHART, "twc-system", &["-f", TWC_VALUES]).await;
    let fullname = format!("twc{FULLNAME_SUFFIX}");
    let deployment = one(&docs, "Deployment", &fullname);
    assert_eq!(deployment["spec"]["replicas"], 2, "TWC's replicas");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"].as_array().map(Vec::len),
        Some(1),
        "no sidecar"
    );
    assert_eq!(pod["terminationGracePeriodSeconds"], 10);
    let c = &pod["containers"][0];
    assert_eq!(
        c["resources"]["requests"]["memory"], "64Mi",
        "TWC's resources"
    );
    // TWC's securityContext.seccompProfile.enabled toggle is dropped, our defaults stay.
    assert_eq!(
        c["securityContext"]["seccompProfile"],
        json!({"type": "RuntimeDefault"})
    );
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        pod["securityContext"]["runAsUser"], 65532,
        "podSecurityContext: {{}} keeps ours"
    );
    assert_eq!(
        env_value(c, "WRT_ALLOWED_KINDS").as_deref(),
        Some("HorizontalPodAutoscaler")
    );
    assert_eq!(env_value(c, "WATCH_NAMESPACES"), None);
    assert_eq!(
        rules(one(&docs, "ClusterRole", &format!("{fullname}-wrt-kinds"))),
        json!([{"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"],
                "verbs": ["create", "patch", "delete"]}])
    );
    for role in ["view", "edit"] {
        one(&docs, "ClusterRole", &format!("{fullname}-{role}"));
    }
    one(&docs, "Service", &format!("{fullname}-metrics"));

    let notes = notes(w, &["-f", TWC_VALUES]).await;
    assert!(notes.contains("TWC's Go image"), "{notes}");
    assert!(
        notes.contains("-metrics-reader"),
        "authenticated as in TWC: {notes}"
    );
    assert_eq!(env_value(c, "METRICS_AUTH").as_deref(), Some("true"));
    assert!(
        notes.contains("securityContext.seccompProfile.enabled"),
        "{notes}"
    );
    assert!(
        !notes.contains("Ignored values"),
        "TWC's defaults are not reported as ignored:\n{notes}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_twc_values_are_named_in_the_notes() -> TestResult {
    let w = world(false).await?;
    let plain = notes(w, &[]).await;
    assert!(!plain.contains("Ignored values"), "{plain}");
    for (set, key) in [
        ("webhook.enabled=true", "webhook:"),
        ("webhook.port=9000", "webhook:"),
        ("certmanager.enabled=false", "certmanager:"),
        ("certmanager.caInjectorJob.enabled=true", "certmanager:"),
        ("kubeRBACProxy.image.tag=v0.18.0", "kubeRBACProxy:"),
        ("authProxy.enabled=false", "authProxy:"),
        ("namespace.create=true", "namespace:"),
        ("prometheus.enabled=true", "prometheus:"),
        ("crds.create=true", "crds:"),
    ] {
        let n = notes(w, &["--set", set]).await;
        assert!(
            n.contains("Ignored values") && n.contains(key),
            "{set}: {n}"
        );
    }
    let same = notes(
        w,
        &[
            "--set",
            "webhook.enabled=false",
            "--set",
            "certmanager.enabled=true",
        ],
    )
    .await;
    assert!(!same.contains("Ignored values"), "TWC's defaults: {same}");
    let open = notes(w, &["--set", "metrics.disableAuth=true"]).await;
    assert!(open.contains("served to anyone"), "{open}");
    let authenticated = notes(w, &[]).await;
    assert!(authenticated.contains("-metrics-reader"), "{authenticated}");
    let off = notes(w, &["--set", "metrics.enabled=false"]).await;
    assert!(off.contains("127.0.0.1:8080"), "{off}");
    Ok(())
}

#[tokio::test]
async fn misspelt_keys_are_rejected() {
    for (set, key) in [
        ("replica=2", "replica"),
        ("rbac.crate=true", "crate"),
        ("metrics.enable=false", "enable"),
        ("webhook.enabeld=true", "enabeld"),
        ("image.pullSecret[0].name=x", "pullSecret"),
    ] {
        for cmd in ["template", "lint"] {
            let args = match cmd {
                "template" => vec!["template", "t", CHART, "--set", set],
                _ => vec!["lint", CHART, "--set", set],
            };
            let (ok, stdout, stderr) = helm(&args).await;
            let out = format!("{stdout}{stderr}");
            assert!(!ok, "helm {cmd} accepted {set}:\n{out}");
            assert!(
                out.contains("additional properties") && out.contains(&format!("'{key}'")),
                "helm {cmd} --set {set} does not name {key}:\n{out}"
            );
        }
    }
    // Wrong types too.
    let (ok, _, stderr) = helm(&["template", "t", CHART, "--set", "rbac.scope=everywhere"]).await;
    assert!(!ok && stderr.contains("scope"), "{stderr}");
}

/// A check of one rendering (release `t` in namespace `t-system`).
type Check = fn(&[Value]);

const T: &str = "t-temporal-worker-controller";

#[tokio::test]
async fn twc_keys_render_what_ours_do() {
    let cases: &[(&str, &[&str], Check)] = &[
        (
            "image.pullSecrets joins imagePullSecrets",
            &[
                "--set",
                "image.pullSecrets[0].name=twc",
                "--set",
                "imagePullSecrets[0].name=ours",
                "--set",
                "image.pullSecrets[1].name=ours",
            ],
            |d| {
                assert_eq!(
                    pod_spec(d, T)["imagePullSecrets"],
                    json!([{"name": "ours"}, {"name": "twc"}])
                )
            },
        ),
        (
            "containerSecurityContext replaces securityContext",
            &[
                "--set",
                "containerSecurityContext.runAsUser=1000",
                "--set",
                "containerSecurityContext.allowPrivilegeEscalation=false",
            ],
            |d| {
                assert_eq!(
                    pod_spec(d, T)["containers"][0]["securityContext"],
                    json!({"runAsUser": 1000, "allowPrivilegeEscalation": false})
                )
            },
        ),
        (
            "securityContext.seccompProfile.enabled is dropped",
            &["--set", "securityContext.seccompProfile.enabled=true"],
            |d| {
                assert_eq!(
                    pod_spec(d, T)["containers"][0]["securityContext"]["seccompProfile"],
                    json!({"type": "RuntimeDefault"})
                )
            },
        ),
        (
            "rbac.restrictWatchNamespaces is namespaced scope",
            &["--set", "rbac.restrictWatchNamespaces={a,b,a}"],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(env_value(c, "WATCH_NAMESPACES").as_deref(), Some("a,b"));
                let roles: Vec<&Value> = of_kind(d, "Role")
                    .filter(|r| r["metadata"]["name"] == T)
                    .collect();
                assert_eq!(
                    roles
                        .iter()
                        .map(|r| r["metadata"]["namespace"].clone())
                        .collect::<Vec<_>>(),
                    [json!("a"), json!("b")]
                );
                assert!(
                    of_kind(d, "ClusterRole").all(|r| r["metadata"]["name"] != T),
                    "no cluster-wide role"
                );
                one(d, "ClusterRole", &format!("{T}-cluster-scoped"));
            },
        ),
        (
            "rbac.restrictWatchNamespaces equal to watchNamespaces",
            &[
                "--set",
                "rbac.restrictWatchNamespaces={b,a}",
                "--set",
                "watchNamespaces={a,b}",
            ],
            |d| {
                assert_eq!(
                    env_value(&pod_spec(d, T)["containers"][0], "WATCH_NAMESPACES").as_deref(),
                    Some("b,a")
                )
            },
        ),
        (
            "workerResourceTemplate.allowedResources: kinds and a ClusterRole",
            &[
                "--set-json",
                r#"workerResourceTemplate.allowedResources=[{"kinds":["ScaledObject"],"apiGroups":["keda.sh"],"resources":["scaledobjects"]},{"kinds":["HorizontalPodAutoscaler","ScaledObject"],"apiGroups":["autoscaling"],"resources":["horizontalpodautoscalers"]}]"#,
            ],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(
                    env_value(c, "WRT_ALLOWED_KINDS").as_deref(),
                    Some("ScaledObject,HorizontalPodAutoscaler")
                );
                let name = format!("{T}-wrt-kinds");
                assert_eq!(
                    rules(one(d, "ClusterRole", &name)),
                    json!([
                        {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["create", "patch", "delete"]},
                        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["create", "patch", "delete"]},
                    ])
                );
                let binding = one(d, "ClusterRoleBinding", &name);
                assert_eq!(binding["subjects"][0]["name"], T);
                assert_eq!(binding["roleRef"]["name"], name.as_str());
            },
        ),
        (
            "workerResourceTemplate.allowedResources, namespaced: a Role per namespace",
            &[
                "--set-json",
                r#"workerResourceTemplate.allowedResources=[{"kinds":["ScaledObject"],"apiGroups":["keda.sh"],"resources":["scaledobjects"]}]"#,
                "--set",
                "rbac.restrictWatchNamespaces={a,b}",
            ],
            |d| {
                let name = format!("{T}-wrt-kinds");
                assert!(of_kind(d, "ClusterRole").all(|r| r["metadata"]["name"] != name.as_str()));
                for kind in ["Role", "RoleBinding"] {
                    let ns: Vec<Value> = of_kind(d, kind)
                        .filter(|r| r["metadata"]["name"] == name.as_str())
                        .map(|r| r["metadata"]["namespace"].clone())
                        .collect();
                    assert_eq!(ns, [json!("a"), json!("b")], "{kind}");
                }
            },
        ),
        (
            "no allowedResources: the binary's default kinds, no extra role",
            &[],
            |d| {
                assert_eq!(
                    env_value(&pod_spec(d, T)["containers"][0], "WRT_ALLOWED_KINDS"),
                    None
                );
                assert!(d.iter().all(|o| {
                    !o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .ends_with("-wrt-kinds")
                }));
            },
        ),
        (
            "metrics.enabled=false: no port, Service or ServiceMonitor; loopback only",
            &[
                "--set",
                "metrics.enabled=false",
                "--set",
                "metrics.serviceMonitor.enabled=true",
            ],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(
                    env_value(c, "METRICS_BIND_ADDRESS").as_deref(),
                    Some("127.0.0.1:8080")
                );
                assert_eq!(
                    c["ports"],
                    json!([{"name": "health", "containerPort": 8081, "protocol": "TCP"}])
                );
                assert_eq!(of_kind(d, "Service").count(), 0);
                assert_eq!(of_kind(d, "ServiceMonitor").count(), 0);
            },
        ),
        (
            "metrics.enabled (TWC's default) with a ServiceMonitor",
            &[
                "--set",
                "metrics.enabled=true",
                "--set",
                "metrics.disableAuth=true",
                "--set",
                "metrics.serviceMonitor.enabled=true",
            ],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(
                    env_value(c, "METRICS_BIND_ADDRESS").as_deref(),
                    Some("0.0.0.0:8080")
                );
                assert_eq!(env_value(c, "METRICS_AUTH"), None, "disableAuth=true");
                one(d, "Service", &format!("{T}-metrics"));
                let monitor = one(d, "ServiceMonitor", T);
                assert!(
                    monitor["spec"]["endpoints"][0]
                        .get("bearerTokenFile")
                        .is_none()
                );
                assert_eq!(
                    of_kind(d, "ClusterRole")
                        .filter(|r| r["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.ends_with("-metrics-reader")))
                        .count(),
                    0
                );
            },
        ),
        (
            "metrics.disableAuth=false (TWC's default): authenticated, a metrics-reader role",
            &["--set", "metrics.serviceMonitor.enabled=true"],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(env_value(c, "METRICS_AUTH").as_deref(), Some("true"));
                let monitor = one(d, "ServiceMonitor", T);
                assert_eq!(
                    monitor["spec"]["endpoints"][0]["bearerTokenFile"],
                    json!("/var/run/secrets/kubernetes.io/serviceaccount/token")
                );
                let reader = one(d, "ClusterRole", &format!("{T}-metrics-reader"));
                assert_eq!(
                    reader["rules"],
                    json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
                );
            },
        ),
        ("priority", &["--set", "priority=1000"], |d| {
            assert_eq!(pod_spec(d, T)["priority"], 1000)
        }),
        (
            "extraVolumes and extraVolumeMounts",
            &[
                "--set",
                "extraVolumes[0].name=ca",
                "--set",
                "extraVolumes[0].secret.secretName=ca",
                "--set",
                "extraVolumeMounts[0].name=ca",
                "--set",
                "extraVolumeMounts[0].mountPath=/etc/ca",
            ],
            |d| {
                let pod = pod_spec(d, T);
                assert_eq!(
                    pod["volumes"],
                    json!([{"name": "ca", "secret": {"secretName": "ca"}}])
                );
                assert_eq!(
                    pod["containers"][0]["volumeMounts"],
                    json!([{"name": "ca", "mountPath": "/etc/ca"}])
                );
            },
        ),
        (
            "rbac.createEndUserRoles=false",
            &["--set", "rbac.createEndUserRoles=false"],
            |d| {
                assert!(of_kind(d, "ClusterRole").all(|r| {
                    let n = r["metadata"]["name"].as_str().unwrap_or_default();
                    !n.ends_with("-view") && !n.ends_with("-edit")
                }))
            },
        ),
        (
            "serviceAccount.name: null (TWC's default) is the full name",
            &[
                "--set",
                "serviceAccount.name=null",
                "--set",
                "rbac.create=true",
            ],
            |d| assert_eq!(pod_spec(d, T)["serviceAccountName"], T),
        ),
    ];
    let twc = twc_testenv::paths::workspace_binary("temporal-worker-controller", "twc")
        .unwrap_or_else(|e| panic!("{e}"));
    let out = tokio::process::Command::new(&twc)
        .args(["run", "--help"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", twc.display()));
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    for (name, args, check) in cases {
        let docs = helm_template("t", CHART, "t-system", args).await;
        check(&docs);
        for (env, _) in env(&pod_spec(&docs, T)["containers"][0]) {
            assert!(
                env == "POD_NAMESPACE" || help.contains(&format!("[env: {env}=")),
                "{name}: the chart sets {env}, which `twc run` does not read"
            );
        }
        let mut lint = vec!["lint", "--strict", CHART];
        lint.extend_from_slice(args);
        let (ok, stdout, stderr) = helm(&lint).await;
        assert!(ok, "{name}: helm lint:\n{stdout}\n{stderr}");
    }

    for (args, message) in [
        (
            &[
                "--set",
                "rbac.restrictWatchNamespaces={a}",
                "--set",
                "watchNamespaces={b}",
            ][..],
            "rbac.restrictWatchNamespaces (a) and watchNamespaces (b) differ",
        ),
        (
            &["--set-json", "workerResourceTemplate.allowedResources=[]"][..],
            "workerResourceTemplate.allowedResources is empty",
        ),
    ] {
        let mut all = vec!["template", "t", CHART];
        all.extend_from_slice(args);
        let (ok, _, stderr) = helm(&all).await;
        assert!(!ok && stderr.contains(message), "{args:?}: {stderr}");
    }
}

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
const END_USER: &str = "end-user-";

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_is_a_labelled_config_map_when_asked() {
    let off = helm_template("g", CHART, "twc", &[]).await;
    assert_eq!(of_kind(&off, "ConfigMap").count(), 0, "off by default");

    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(CHART)
        .join("files/grafana/dashboard.json");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let rendered = |cm: &Value| -> Value {
        let text = cm["data"]["temporal-worker-controller.json"]
            .as_str()
            .unwrap_or_else(|| panic!("no dashboard in {cm}"));
        serde_json::from_str(text).unwrap_or_else(|e| panic!("the rendered dashboard: {e}"))
    };

    let on = helm_template(
        "g",
        CHART,
        "twc",
        &["--set", "grafanaDashboard.enabled=true"],
    )
    .await;
    let cm = one(&on, "ConfigMap", &format!("g{FULLNAME_SUFFIX}-dashboard"));
    assert_eq!(cm["metadata"]["namespace"], "twc");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(rendered(cm), dashboard, "the file, verbatim");

    let custom = helm_template(
        "g",
        CHART,
        "twc",
        &[
            "--set",
            "grafanaDashboard.enabled=true",
            "--set",
            "grafanaDashboard.label=dashboards",
            "--set",
            "grafanaDashboard.labelValue=temporal",
            "--set",
            "grafanaDashboard.namespace=grafana",
            "--set",
            "grafanaDashboard.annotations.grafana_folder=Temporal",
        ],
    )
    .await;
    let cm = one(
        &custom,
        "ConfigMap",
        &format!("g{FULLNAME_SUFFIX}-dashboard"),
    );
    assert_eq!(cm["metadata"]["namespace"], "grafana");
    assert_eq!(cm["metadata"]["labels"]["dashboards"], "temporal");
    assert!(cm["metadata"]["labels"]["grafana_dashboard"].is_null());
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "Temporal");
    assert_eq!(rendered(cm), dashboard);
}
