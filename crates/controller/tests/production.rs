//! The controller as a process, the way it runs in a cluster: `twc run` with leader election,
//! health and metrics endpoints.
//!
//! * Two replicas against one apiserver: exactly one reconciles; SIGKILL it in the middle of a
//!   Progressive rollout and the other takes over and finishes it.
//! * `/readyz` is false while the CRDs are missing and turns true once they are installed,
//!   without a restart; `/livez` stays true throughout.
//! * `/metrics` exposes every metric `docs/metrics.md` lists.
//! * With `--metrics-auth`, `/metrics` answers only a token the apiserver allows to read it.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use twc_api::WorkerDeployment;
use twc_testenv::process::{ChildProcess, Spec, free_port};
use twc_testenv::wait_for;

const ROLLOUT: Duration = Duration::from_secs(120);

/// A `twc run` process serving health and metrics on one port.
struct Replica {
    name: String,
    addr: String,
    process: ChildProcess,
}

fn start_replica(name: &str, kubeconfig: &Path, extra: &[&str]) -> Replica {
    let bin = twc_testenv::paths::workspace_binary("temporal-worker-controller", "twc")
        .unwrap_or_else(|e| panic!("{e}"));
    let port = free_port().unwrap_or_else(|e| panic!("{e}"));
    let addr = format!("127.0.0.1:{port}");
    let log = twc_testenv::paths::log_dir().join(format!("{name}.log"));
    let mut spec = Spec::new(name, bin, log).args([
        "run",
        "--metrics-bind-address",
        &addr,
        "--health-probe-bind-address",
        &addr,
        "--fast-poll-seconds",
        "1",
        "--steady-poll-seconds",
        "5",
        "--log-level",
        "info,twc_controller=debug",
    ]);
    spec = spec.args(extra.iter().copied());
    spec.env
        .push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    spec.env.push(("HOSTNAME".into(), name.into()));
    let process = ChildProcess::start(&spec).unwrap_or_else(|e| panic!("{e}"));
    Replica {
        name: name.into(),
        addr,
        process,
    }
}

impl Replica {
    async fn get(&self, path: &str) -> Result<(u16, String), String> {
        http_get(&self.addr, path).await
    }

    async fn metrics(&self) -> String {
        match self.get("/metrics").await {
            Ok((200, body)) => body,
            other => panic!("{}: /metrics: {other:?}", self.name),
        }
    }

    fn log(&self) -> String {
        twc_testenv::process::log_tail(self.process.log_path(), 40)
    }
}

/// Value of the sample `name{labels}` (labels as printed), if present.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The metric names `docs/metrics.md` documents, each with whether it has samples only in
/// some setups ("Only present ..."; then its `# TYPE` line is what must be exposed).
fn documented_metrics() -> Vec<(String, bool)> {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md");
    let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let names: Vec<(String, bool)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter(|l| {
            twc_controller::metrics::FAMILY_PREFIXES
                .iter()
                .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            let name = l.split('`').next()?;
            Some((name.to_string(), l.contains("Only present")))
        })
        .collect();
    assert!(names.len() >= 8, "docs/metrics.md lists {names:?}");
    names
}

async fn lease_holder(api: &Api<Lease>, name: &str) -> String {
    api.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default()
}

fn build_id(wd: &WorkerDeployment, which: &str) -> Option<String> {
    let s = wd.status.clone()?;
    match which {
        "target" => s.target_version.map(|t| t.base.build_id),
        _ => s.current_version.map(|c| c.base.build_id),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_reconciles_and_a_standby_finishes_its_rollout() -> TestResult {
    let w = world(false).await?;
    let admin = w.client().await;
    let ns = w.tenant("failover").await;
    let cc = format!("failover-{ns}");
    w.cluster_connection(&cc).await;
    let kubeconfig = &w.env.control_plane.kubeconfig_path;
    let lease_id = format!("twc-{ns}");
    let election = [
        "--leader-elect",
        "--leader-election-namespace",
        &ns,
        "--leader-election-id",
        &lease_id,
    ];
    let mut replicas = vec![
        start_replica(&format!("replica-a-{ns}"), kubeconfig, &election),
        start_replica(&format!("replica-b-{ns}"), kubeconfig, &election),
    ];
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let holder = wait_for("a leader", Duration::from_secs(30), || async {
        let h = lease_holder(&leases, &lease_id).await;
        if h.is_empty() {
            Err("no holder".to_string())
        } else {
            Ok(h)
        }
    })
    .await?;
    let leader = replicas
        .iter()
        .position(|r| holder.starts_with(&format!("{}_", r.name)))
        .ok_or_else(|| format!("holder {holder} is neither replica"))?;
    let standby = 1 - leader;

    w.worker_deployment(&ns, "w", cluster_ref(&cc), "v1").await;
    let wd = wait_wd(&admin, &ns, "w", "v1 rolled out", ROLLOUT, rolled_out).await;
    let v1 = build_id(&wd, "current").unwrap_or_default();
    // And one that cannot work, so the error counter has a sample.
    w.worker_deployment(&ns, "broken", by_name("missing"), "v1")
        .await;
    wait_wd(&admin, &ns, "broken", "ConnectionNotFound", ROLLOUT, |wd| {
        condition(wd, "Ready").is_some_and(|(_, reason, _)| reason == "ConnectionNotFound")
    })
    .await;

    // Exactly one reconciles; both are ready (the standby as a spare).
    let lead_metrics = replicas[leader].metrics().await;
    let spare_metrics = replicas[standby].metrics().await;
    assert_eq!(sample(&lead_metrics, "twc_leader"), Some(1.0));
    assert_eq!(sample(&spare_metrics, "twc_leader"), Some(0.0));
    // client-go's and controller-runtime's names, as TWC's dashboards query them.
    let master = format!("leader_election_master_status{{name=\"{lease_id}\"}}");
    assert_eq!(sample(&lead_metrics, &master), Some(1.0), "{lead_metrics}");
    assert_eq!(
        sample(&spare_metrics, &master),
        Some(0.0),
        "{spare_metrics}"
    );
    let runtime_reconciles = "controller_runtime_reconcile_total{controller=\"workerdeployment\",result=\"requeue_after\"}";
    assert!(sample(&lead_metrics, runtime_reconciles).is_some_and(|n| n > 0.0));
    assert!(
        lead_metrics
            .lines()
            .any(|l| l.starts_with("rest_client_requests_total{code=\"200\",host=\"127.0.0.1:")),
        "{lead_metrics}"
    );
    let reconciles = "twc_reconcile_total{controller=\"WorkerDeployment\"}";
    assert!(sample(&lead_metrics, reconciles).is_some_and(|n| n > 0.0));
    assert_eq!(
        sample(&spare_metrics, reconciles),
        None,
        "the standby reconciled"
    );
    for r in &replicas {
        let (code, body) = r.get("/readyz").await?;
        assert_eq!(code, 200, "{}: {body}", r.name);
    }
    // Every documented metric is exposed by the leader, but those only present once something
    // happened (a family without samples is not exposed; metrics.rs's unit test checks that
    // every documented family is registered).
    for (name, conditional) in documented_metrics() {
        assert!(
            conditional || lead_metrics.lines().any(|l| l.starts_with(&name)),
            "{name} is documented but not exposed:\n{lead_metrics}"
        );
    }
    let not_found =
        "twc_reconcile_errors_total{controller=\"WorkerDeployment\",reason=\"ConnectionNotFound\"}";
    assert!(sample(&lead_metrics, not_found).is_some_and(|n| n > 0.0));
    let current = format!(
        "twc_worker_deployment_versions{{namespace=\"{ns}\",worker_deployment=\"w\",status=\"Current\"}}"
    );
    assert_eq!(sample(&lead_metrics, &current), Some(1.0), "{lead_metrics}");
    assert!(
        sample(
            &lead_metrics,
            "twc_temporal_rpc_total{rpc=\"DescribeWorkerDeployment\",code=\"Ok\"}"
        )
        .is_some_and(|n| n > 0.0)
    );

    // Nothing waits for a reconcile once things settle (the queue gauge does not leak).
    wait_for("an empty work queue", Duration::from_secs(30), || async {
        let m = replicas[leader].metrics().await;
        match sample(&m, "twc_work_queue_depth{controller=\"WorkerDeployment\"}") {
            Some(0.0) => Ok(()),
            other => Err(format!("depth {other:?}")),
        }
    })
    .await?;

    // A Progressive rollout to v2; kill the leader while v2 ramps.
    Api::<WorkerDeployment>::namespaced(admin.clone(), &ns)
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "rollout": {"strategy": "Progressive", "steps": [
                    {"rampPercentage": 50, "pauseDuration": "30s"}
                ]},
                "template": {"spec": {"containers": [{
                    "name": "worker",
                    "image": format!("{WORKER_IMAGE}:v2"),
                    "env": [{"name": "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "value": "/etc/temporal/tls/ca.crt"}]
                }]}}
            }})),
        )
        .await?;
    let wd = wait_wd(&admin, &ns, "w", "v2 ramping", ROLLOUT, |wd| {
        wd.status
            .as_ref()
            .and_then(|s| s.target_version.as_ref())
            .is_some_and(|t| t.base.status == twc_api::VersionStatus::Ramping)
    })
    .await;
    let v2 = build_id(&wd, "target").unwrap_or_default();
    assert_ne!(v1, v2);
    let killed_at = Instant::now();
    replicas[leader].process.kill();
    let new_holder = wait_for("the standby leads", Duration::from_secs(40), || async {
        let h = lease_holder(&leases, &lease_id).await;
        if h.starts_with(&format!("{}_", replicas[standby].name)) {
            Ok(h)
        } else {
            Err(format!("holder {h}"))
        }
    })
    .await?;
    let failover = killed_at.elapsed();
    println!(
        "failover after SIGKILL of the leader: {:.1} s (new holder {new_holder})",
        failover.as_secs_f64()
    );
    let wd = wait_wd(&admin, &ns, "w", "v2 current", ROLLOUT, |wd| {
        rolled_out(wd) && build_id(wd, "current").as_deref() == Some(v2.as_str())
    })
    .await;
    assert!(
        wd.status
            .iter()
            .flat_map(|s| &s.deprecated_versions)
            .any(|d| d.base.build_id == v1),
        "v1 is kept as a deprecated version"
    );
    let metrics = replicas[standby].metrics().await;
    assert_eq!(
        sample(&metrics, "twc_leader"),
        Some(1.0),
        "{}",
        replicas[standby].log()
    );
    // The lease changed hands within the lease duration plus a few retries, by the clock of a
    // test that does not measure performance (that figure is printed above).
    assert!(
        failover < Duration::from_secs(30),
        "failover took {failover:?}"
    );
    drop(replicas.remove(0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_crds_without_a_restart() -> TestResult {
    // A control plane of its own: the shared one has the CRDs installed.
    let (cp, _dir) = own_control_plane("no-crds").await?;
    let mut replica = start_replica(
        "readyz",
        &cp.kubeconfig_path,
        &["--identity", "readyz-test"],
    );
    let (live, body) = wait_for("/livez answers", Duration::from_secs(30), || async {
        replica.get("/livez").await
    })
    .await?;
    assert_eq!(live, 200, "{body}");
    let (code, body) = replica.get("/readyz").await?;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("CRDs"), "{body}");

    let client = cp.client().await?;
    twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;
    let ready = wait_for("/readyz turns 200", Duration::from_secs(30), || async {
        match replica.get("/readyz").await? {
            (200, body) => Ok(body),
            (code, body) => Err(format!("{code} {body}")),
        }
    })
    .await
    .map_err(|e| format!("{e}\n{}", replica.log()))?;
    assert!(ready.contains("caches synced"), "{ready}");
    assert!(
        replica.process.try_wait().is_none(),
        "the controller exited:\n{}",
        replica.log()
    );
    let (live, _) = replica.get("/livez").await?;
    assert_eq!(live, 200);
    Ok(())
}

/// `--metrics-auth` (the chart's default, TWC's authenticated metrics): `/metrics` answers 401
/// without a token or with one the apiserver does not know, 403 naming the user for a token
/// without the right, and the metrics for a ServiceAccount bound to a ClusterRole that may get
/// the non-resource URL `/metrics` (as the chart's metrics-reader). `/livez` stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_only_a_token_allowed_to_read_them() -> TestResult {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let w = world(false).await?;
    let admin = w.client().await;
    let ns = w.tenant("metrics-auth").await;
    let mut replica = start_replica(
        &format!("metrics-auth-{ns}"),
        &w.env.control_plane.kubeconfig_path,
        &[
            "--metrics-auth",
            "--watch-namespaces",
            &ns,
            "--identity",
            "metrics-auth-test",
        ],
    );
    let reader = format!("metrics-reader-{ns}");
    let pp = PatchParams::apply("metrics-auth-test").force();
    let role: ClusterRole = from_json(json!({
        "metadata": {"name": reader},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }));
    Api::<ClusterRole>::all(admin.clone())
        .patch(&reader, &pp, &Patch::Apply(&role))
        .await?;
    let binding: ClusterRoleBinding = from_json(json!({
        "metadata": {"name": reader},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": ns}],
    }));
    Api::<ClusterRoleBinding>::all(admin.clone())
        .patch(&reader, &pp, &Patch::Apply(&binding))
        .await?;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
    let mut tokens = Vec::new();
    for sa in ["prometheus", "nosy"] {
        sas.create(
            &Default::default(),
            &from_json(json!({"metadata": {"name": sa}})),
        )
        .await?;
        let request: TokenRequest =
            from_json(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}));
        let token = sas
            .create_token_request(sa, &Default::default(), &request)
            .await?
            .status
            .map(|s| s.token)
            .unwrap_or_default();
        tokens.push(token);
    }
    let addr = replica.addr.clone();
    let (live, _) = wait_for("/livez answers", Duration::from_secs(30), || async {
        replica.get("/livez").await
    })
    .await?;
    assert_eq!(live, 200, "/livez needs no token");
    let (code, body) = http_get_as(&addr, "/metrics", None).await?;
    assert_eq!(code, 401, "{body}");
    let (code, body) = http_get_as(&addr, "/metrics", Some("not-a-token")).await?;
    assert_eq!(code, 401, "{body}");
    let (code, body) = http_get_as(&addr, "/metrics", Some(&tokens[1])).await?;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:nosy")),
        "{body}"
    );
    // RBAC changes reach the authorizer within moments.
    let body = wait_for(
        "the reader gets /metrics",
        Duration::from_secs(30),
        || async {
            match http_get_as(&addr, "/metrics", Some(&tokens[0])).await? {
                (200, body) => Ok(body),
                (code, body) => Err(format!("{code} {body}")),
            }
        },
    )
    .await
    .map_err(|e| format!("{e}\n{}", replica.log()))?;
    assert!(body.contains("twc_leader"), "{body}");
    assert!(
        !replica.log().contains(&tokens[0]),
        "a token reached the log"
    );
    assert!(replica.process.try_wait().is_none(), "{}", replica.log());
    Ok(())
}

/// What the controller remembers of each WorkerDeployment between reconciles lives in one
/// store whose entries go with their WorkerDeployment: a thousand whose Temporal cannot be
/// dialled (their failure streak is remembered), then deleted without a cleanup (their
/// finalizer removed by hand, so only the watch's deletion says they are gone), leave nothing
/// behind. On a control plane of its own: a thousand objects must not slow the other tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_deleted_worker_deployments_leave_nothing_remembered() -> TestResult {
    use futures::{StreamExt, stream};
    use kube::api::{DeleteParams, PostParams};
    const N: usize = 1000;
    let (cp, _dir) = own_control_plane("remembered").await?;
    let client = cp.client().await?;
    twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;
    let ns = "remembered";
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": ns}})),
        )
        .await?;
    // Nothing listens there: every reconcile fails to dial, and backs off.
    Api::<twc_api::ClusterConnection>::all(client.clone())
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
                "metadata": {"name": "unreachable"},
                "spec": {"hostPort": "127.0.0.1:1"}
            })),
        )
        .await?;
    let mut replica = start_replica(
        "remembered",
        &cp.kubeconfig_path,
        &["--identity", "remembered-test"],
    );
    let series = "twc_worker_deployments_remembered";
    let remembered = |metrics: &str| sample(metrics, series).unwrap_or(-1.0);
    let names: Vec<String> = (0..N).map(|i| format!("w{i}")).collect();
    let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
    stream::iter(&names)
        .for_each_concurrent(16, |name| {
            let wd: WorkerDeployment = from_json(json!({
                "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "workerOptions": {"connectionRef": cluster_ref("unreachable"), "temporalNamespace": "default"},
                    "rollout": {"strategy": "AllAtOnce"},
                    "sunset": {},
                    "template": {"spec": {"containers": [{"name": "worker", "image": "never:v1"}]}}
                }
            }));
            let api = api.clone();
            async move {
                if let Err(e) = api.create(&PostParams::default(), &wd).await {
                    panic!("create {name}: {e}");
                }
            }
        })
        .await;
    let all = N as f64;
    let filled = wait_for("every one remembered", Duration::from_secs(300), || async {
        let n = remembered(&replica.metrics().await);
        if n >= all {
            Ok(())
        } else {
            Err(format!("{n} of {N}"))
        }
    })
    .await;
    if let Err(e) = filled {
        panic!("{e}\n{}", replica.log());
    }
    let unfinalize = json!({"metadata": {"finalizers": null}});
    stream::iter(&names)
        .for_each_concurrent(16, |name| {
            let (api, patch) = (api.clone(), unfinalize.clone());
            async move {
                let _ = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                let _ = api.delete(name, &DeleteParams::default()).await;
            }
        })
        .await;
    let gone = wait_for("nothing remembered", Duration::from_secs(120), || async {
        let n = remembered(&replica.metrics().await);
        if n == 0.0 {
            Ok(())
        } else {
            Err(format!("{n} remembered"))
        }
    })
    .await;
    if let Err(e) = gone {
        panic!("{e}\n{}", replica.log());
    }
    replica.process.kill();
    Ok(())
}
