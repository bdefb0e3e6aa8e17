//! An install without Helm, exactly as docs/install.md tells it, on a control plane of its own
//! (the names are the documented ones, cluster-wide): `twc crd | kubectl apply -f -`, `twc rbac
//! --service-account ... --namespace ... | kubectl apply -f -`, `kubectl apply -f
//! config/deploy/`. SelfSubjectAccessReviews with the ServiceAccount's own token show it may do
//! what the controller does and no more; then `twc run`, with the Deployment's arguments and
//! environment and that token, becomes ready, takes the Lease and is denied nothing. (There is
//! no container runtime for the Deployment itself; its pod passes the restricted Pod Security
//! Standard in a server-side dry run.) The namespace-scoped variant grants exactly the watched
//! namespaces.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use twc_testenv::process::{ChildProcess, Spec, free_port};
use twc_testenv::wait_for;

const NS: &str = "temporal-worker-controller";
const SA: &str = "temporal-worker-controller";
/// A namespace the controller watches (it need not exist for an access review).
const TENANT: &str = "team-a";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn twc() -> PathBuf {
    twc_testenv::paths::workspace_binary("temporal-worker-controller", "twc")
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `script` in bash from the repository root, with `twc` and `kubectl` on the PATH and
/// the admin kubeconfig, as a user's shell; returns stdout.
async fn shell(kubeconfig: &Path, script: &str) -> String {
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    for bin in [twc(), twc_testenv::paths::kubectl()] {
        let dir = bin.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut p = dir.into_os_string();
        p.push(":");
        p.push(&path);
        path = p;
    }
    let out = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .current_dir(root())
        .output()
        .await
        .unwrap_or_else(|e| panic!("bash: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{script}\nfailed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Whether the caller of `client` may `verb` `group/resource[/subresource]` (in `namespace`).
async fn may(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (resource, None),
    };
    twc_controller::access::may(client, group, resource, subresource, namespace, verb)
        .await
        .unwrap_or_else(|e| panic!("SelfSubjectAccessReview {verb} {group}/{resource}: {e}"))
}

/// The controller container of `config/deploy/deployment.yaml`.
fn deployment() -> Value {
    let path = root().join("config/deploy/deployment.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_scoped_rbac_grants_the_watched_namespaces_only() -> TestResult {
    let (cp, _dir) = own_control_plane("install-namespaced").await?;
    let kubeconfig = &cp.kubeconfig_path;
    shell(
        kubeconfig,
        &format!(
            "kubectl create namespace {NS}
             kubectl create namespace team-a
             kubectl create namespace team-b
             twc rbac --mode namespaced --watch-namespaces team-a,team-b \
               --service-account {SA} --namespace {NS} | kubectl apply -f -"
        ),
    )
    .await;
    let sa = cp
        .client_with_token(&cp.service_account_token(NS, SA).await?)
        .await?;
    for ns in ["team-a", "team-b"] {
        for (verb, group, resource) in [
            ("list", "temporal.io", "workerdeployments"),
            ("watch", "apps", "deployments"),
            ("patch", "apps", "deployments/scale"),
            ("get", "", "secrets"),
            ("create", "events.k8s.io", "events"),
        ] {
            assert!(
                may(&sa, verb, group, resource, Some(ns)).await,
                "may not {verb} {group}/{resource} in {ns}"
            );
        }
    }
    for (verb, group, resource, ns) in [
        ("create", "coordination.k8s.io", "leases", Some(NS)),
        ("get", "", "namespaces", None),
        (
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            None,
        ),
    ] {
        assert!(
            may(&sa, verb, group, resource, ns).await,
            "may not {verb} {resource}"
        );
    }
    for (verb, group, resource, ns) in [
        ("get", "", "secrets", Some("team-c")),
        ("list", "temporal.io", "workerdeployments", None),
        ("list", "temporal.io", "clusterconnections", None),
        ("create", "coordination.k8s.io", "leases", Some("team-a")),
    ] {
        assert!(
            !may(&sa, verb, group, resource, ns).await,
            "may {verb} {group}/{resource} in {ns:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_install_without_helm_runs_a_controller() -> TestResult {
    let (cp, dir) = own_control_plane("install").await?;
    let admin = cp.client().await?;
    let kubeconfig = &cp.kubeconfig_path;

    // The commands of docs/install.md.
    shell(kubeconfig, "twc crd | kubectl apply --server-side -f -").await;
    shell(kubeconfig, &format!("kubectl create namespace {NS}")).await;
    shell(
        kubeconfig,
        &format!("twc rbac --service-account {SA} --namespace {NS} | kubectl apply -f -"),
    )
    .await;
    shell(kubeconfig, "kubectl apply -f config/deploy/").await;
    let deployments = Api::<Deployment>::namespaced(admin.clone(), NS);
    let applied = deployments.get(SA).await?;
    let pod_spec = applied
        .spec
        .and_then(|s| s.template.spec)
        .ok_or("the Deployment has no pod spec")?;
    assert_eq!(pod_spec.service_account_name.as_deref(), Some(SA));

    // The pod passes the restricted Pod Security Standard.
    Api::<Namespace>::all(admin.clone())
        .patch(
            NS,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}})),
        )
        .await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "controller-dry-run"},
        "spec": serde_json::to_value(&pod_spec)?,
    }))?;
    Api::<Pod>::namespaced(admin.clone(), NS)
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pod,
        )
        .await
        .map_err(|e| format!("the controller's pod is refused: {e}"))?;

    // What the controller does, asked with the ServiceAccount's own token.
    let token = cp.service_account_token(NS, SA).await?;
    let sa = cp.client_with_token(&token).await?;
    let tenant = Some(TENANT);
    let ns = Some(NS);
    let mut needed: Vec<(&str, &str, String, Option<&str>)> = vec![
        ("list", "temporal.io", "workerdeployments".into(), None),
        ("watch", "temporal.io", "workerdeployments".into(), None),
        ("patch", "temporal.io", "workerdeployments".into(), tenant),
        (
            "patch",
            "temporal.io",
            "workerdeployments/status".into(),
            tenant,
        ),
        ("list", "temporal.io", "clusterconnections".into(), None),
        ("watch", "temporal.io", "clusterconnections".into(), None),
        ("patch", "temporal.io", "clusterconnections".into(), None),
        ("list", "temporal.io", "connections".into(), None),
        ("watch", "apps", "deployments".into(), None),
        ("create", "apps", "deployments".into(), tenant),
        ("patch", "apps", "deployments".into(), tenant),
        ("delete", "apps", "deployments".into(), tenant),
        ("patch", "apps", "deployments/scale".into(), tenant),
        ("get", "", "secrets".into(), tenant),
        ("watch", "", "secrets".into(), None),
        ("create", "events.k8s.io", "events".into(), tenant),
        ("get", "coordination.k8s.io", "leases".into(), ns),
        ("create", "coordination.k8s.io", "leases".into(), ns),
        ("update", "coordination.k8s.io", "leases".into(), ns),
        ("get", "", "namespaces".into(), None),
        (
            "create",
            "authentication.k8s.io",
            "tokenreviews".into(),
            None,
        ),
        (
            "create",
            "authorization.k8s.io",
            "subjectaccessreviews".into(),
            None,
        ),
    ];
    // And every rule `twc rbac` generates, so a rule is never left unbound.
    let (namespaced, cluster) = twc_controller::rbac::cluster_wide();
    let rules = [
        (namespaced.rules.unwrap_or_default(), tenant),
        (cluster.rules.unwrap_or_default(), None),
        (
            twc_controller::rbac::leader_election(None)
                .rules
                .unwrap_or_default(),
            ns,
        ),
    ];
    for (rules, namespace) in &rules {
        for rule in rules {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        needed.push((verb, group, resource.clone(), *namespace));
                    }
                }
            }
        }
    }
    let mut denied = Vec::new();
    for (verb, group, resource, namespace) in &needed {
        if !may(&sa, verb, group, resource, *namespace).await {
            denied.push(format!("{verb} {group}/{resource} in {namespace:?}"));
        }
    }
    assert!(denied.is_empty(), "the ServiceAccount may not: {denied:?}");
    let excess = [
        ("delete", "", "secrets", tenant),
        ("update", "", "secrets", tenant),
        ("get", "coordination.k8s.io", "leases", tenant),
        ("delete", "temporal.io", "workerdeployments", tenant),
        ("create", "rbac.authorization.k8s.io", "clusterroles", None),
    ];
    for (verb, group, resource, namespace) in excess {
        assert!(
            !may(&sa, verb, group, resource, namespace).await,
            "the ServiceAccount may {verb} {group}/{resource} in {namespace:?}"
        );
    }

    // `twc run` as the Deployment runs it: its arguments, its environment (POD_NAMESPACE from
    // the downward API; the ports on the loopback), the ServiceAccount's token.
    let container = deployment()["spec"]["template"]["spec"]["containers"][0].clone();
    let args: Vec<String> = serde_json::from_value(container["args"].clone())?;
    let sa_kubeconfig = dir.join("sa-kubeconfig");
    let mut config = cp.kubeconfig();
    let admin_token = config["users"][0]["user"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    config["users"][0]["user"]["token"] = json!(token);
    std::fs::write(&sa_kubeconfig, serde_json::to_vec(&config)?)?;
    let (metrics, health) = (
        format!("127.0.0.1:{}", free_port()?),
        format!("127.0.0.1:{}", free_port()?),
    );
    let log = dir.join("controller.log");
    let mut spec = Spec::new("installed-controller", twc(), &log).args(args);
    spec.inherit_env = false;
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().unwrap_or_default().to_string();
        let value = match name.as_str() {
            "POD_NAMESPACE" => NS.to_string(),
            "METRICS_BIND_ADDRESS" => metrics.clone(),
            "HEALTH_PROBE_BIND_ADDRESS" => health.clone(),
            _ => var["value"]
                .as_str()
                .unwrap_or_else(|| panic!("env {name} has no value"))
                .to_string(),
        };
        spec.env.push((name, value));
    }
    spec.env
        .push(("KUBECONFIG".into(), sa_kubeconfig.display().to_string()));
    spec.env.push(("HOSTNAME".into(), "controller-0".into()));
    let mut controller = ChildProcess::start(&spec)?;
    let controller_log = || twc_testenv::process::log_tail(&log, 40);
    // A standby is ready too ("standing by"): wait for the leader with synced caches.
    let ready = wait_for(
        "/readyz: leader, caches synced",
        Duration::from_secs(60),
        || async {
            match http_get(&health, "/readyz").await? {
                (200, body) if body.contains("caches synced") => Ok(body),
                (code, body) => Err(format!("{code} {body}")),
            }
        },
    )
    .await
    .map_err(|e| format!("{e}\n{}", controller_log()))?;
    assert!(ready.contains("caches synced"), "{ready}");
    let lease = deployment()["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "LEADER_ELECTION_ID")
        .and_then(|v| v["value"].as_str())
        .unwrap_or_default()
        .to_string();
    let holder = Api::<Lease>::namespaced(admin.clone(), NS)
        .get(&lease)
        .await?
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.starts_with("controller-0"),
        "Lease {NS}/{lease} held by {holder:?}"
    );
    let (code, body) = http_get_as(&metrics, "/metrics", Some(&admin_token)).await?;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(&format!(
            "twc_build_info{{version=\"{}\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{body}"
    );
    assert!(
        controller.try_wait().is_none(),
        "exited:\n{}",
        controller_log()
    );
    let text = std::fs::read_to_string(&log)?.to_lowercase();
    assert!(!text.contains("forbidden"), "RBAC denials:\n{text}");
    Ok(())
}
