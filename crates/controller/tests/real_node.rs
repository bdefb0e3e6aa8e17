//! The controller as a user installs it, on a real node: the image built here
//! (`hack/image.sh`), the chart installed with `helm install --wait` into a namespace that
//! enforces the restricted Pod Security Standard, and worker pods that are containers of the
//! example worker image under containerd and a real kubelet. The kubelet's own crash-loop
//! back-off, readiness probes, SIGTERM and grace periods drive what is checked here; no part of
//! it is played by the project's pod runner.
//!
//! Needs root and the node's packages (`hack/provision.sh`), and the image archives
//! (`hack/image.sh --profile dev`; `hack/test.sh` builds them). When the machine lacks a piece,
//! every test here fails and names it.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use twc_api::{Connection, WorkerDeployment};
use twc_testenv::node::{self, NodeEnv};
use twc_testenv::paths;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The namespace and release of the controller, as a user would name them.
const SYSTEM: &str = "twc-system";
const RELEASE: &str = "twc";
/// The example worker image as `hack/image.sh` names it.
const WORKER_IMAGE: &str = "twc/example-worker:0.1.0";
/// The controller image the chart's default values name (repository `temporal-worker-controller`,
/// tag the chart's appVersion).
const CONTROLLER_IMAGE: &str = "temporal-worker-controller:0.1.0";
const ROLLOUT: Duration = Duration::from_secs(180);

struct Cluster {
    env: NodeEnv,
    _runtime: tokio::runtime::Runtime,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The node, the servers and the controller installed by its chart, shared by the tests of this
/// binary; started on first use.
async fn cluster() -> Result<&'static NodeEnv, String> {
    let c = tokio::task::spawn_blocking(|| {
        CLUSTER.get_or_init(|| {
            std::thread::spawn(start)
                .join()
                .unwrap_or_else(|_| Err("the cluster start panicked".into()))
        })
    })
    .await
    .map_err(|e| e.to_string())?;
    let c = c.as_ref().map_err(Clone::clone)?;
    c.env.check_running().map_err(|e| e.to_string())?;
    Ok(&c.env)
}

fn start() -> Result<Cluster, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let env = runtime.block_on(async {
        let dir = twc_testenv::fresh_dir(&paths::log_dir().join("real-node"))
            .map_err(|e| e.to_string())?;
        let images = [
            paths::image_archive("temporal-worker-controller"),
            paths::image_archive("example-worker"),
        ];
        let env = NodeEnv::start(&dir, &images)
            .await
            .map_err(|e| e.to_string())?;
        eprintln!(
            "real node: ready in {:.1}s; logs in {}",
            env.startup.as_secs_f64(),
            dir.display()
        );
        install(&env).await?;
        Ok::<_, String>(env)
    })?;
    Ok(Cluster {
        env,
        _runtime: runtime,
    })
}

/// `helm install` of both charts as a user runs it: the CRDs, then the controller with the
/// chart's default image into a namespace that enforces the restricted Pod Security Standard,
/// waiting (`--wait`) until its Deployment is available, which the kubelet decides through the
/// pod's `/readyz` probe. Temporal's test server drains in a second, so the controller polls
/// drainage every second (a value a user sets the same way).
async fn install(env: &NodeEnv) -> Result<(), String> {
    let kubeconfig = env.control_plane.kubeconfig_path.display().to_string();
    helm(&[
        "install",
        "twc-crds",
        "charts/temporal-worker-controller-crds",
        "--kubeconfig",
        &kubeconfig,
        "--wait",
    ])
    .await?;
    let client = env.client().await.map_err(|e| e.to_string())?;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": SYSTEM}})).map_err(|e| e.to_string())?;
    Api::all(client)
        .create(&PostParams::default(), &ns)
        .await
        .map_err(|e| e.to_string())?;
    env.enforce_pod_security(SYSTEM, "restricted")
        .await
        .map_err(|e| e.to_string())?;
    helm(&[
        "install",
        RELEASE,
        "charts/temporal-worker-controller",
        "-n",
        SYSTEM,
        "--kubeconfig",
        &kubeconfig,
        "--set",
        "fastPollSeconds=1",
        "--set",
        "drainagePollSeconds=1",
        "--set",
        "steadyPollSeconds=10",
        "--wait",
        "--timeout",
        "4m",
    ])
    .await
    .map(|_| ())
}

async fn helm(args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new(paths::helm())
        .args(args)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .await
        .map_err(|e| format!("helm: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "helm {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

/// A tenant namespace with a Connection to Temporal as pods reach it.
async fn tenant(env: &NodeEnv, prefix: &str) -> Result<(Client, String, String), String> {
    let client = env.client().await.map_err(|e| e.to_string())?;
    let ns = env.namespace(prefix).await.map_err(|e| e.to_string())?;
    let temporal_ns = env.temporal_namespace().await.map_err(|e| e.to_string())?;
    let conn: Connection = serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "Connection",
        "metadata": {"name": "temporal", "namespace": ns},
        "spec": {"hostPort": env.temporal_address_for_pods()},
    }))
    .map_err(|e| e.to_string())?;
    Api::<Connection>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok((client, ns, temporal_ns))
}

/// A WorkerDeployment of the example worker image: Progressive (one 50 % step of `pause`, 30 s
/// at least, as in TWC),
/// two replicas, quick sunset; `env` goes to the worker container (a change makes a version).
fn worker_deployment(ns: &str, temporal_ns: &str, pause: &str, env: Value) -> WorkerDeployment {
    serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": "w", "namespace": ns},
        "spec": {
            "replicas": 2,
            "workerOptions": {"connectionRef": {"name": "temporal"}, "temporalNamespace": temporal_ns},
            "rollout": {"strategy": "Progressive", "steps": [{"rampPercentage": 50, "pauseDuration": pause}]},
            "sunset": {"scaledownDelay": "2s", "deleteDelay": "1h"},
            "template": {"spec": {
                "terminationGracePeriodSeconds": 20,
                "containers": [{"name": "worker", "image": WORKER_IMAGE, "env": env}]
            }}
        }
    }))
    .unwrap_or_else(|e| panic!("a WorkerDeployment: {e}"))
}

async fn set_worker_env(client: &Client, ns: &str, env: Value) {
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "worker", "image": WORKER_IMAGE, "env": env}
    ]}}}});
    Api::<WorkerDeployment>::namespaced(client.clone(), ns)
        .patch("w", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patch {ns}/w: {e}"));
}

fn status(wd: &WorkerDeployment) -> Value {
    serde_json::to_value(&wd.status).unwrap_or_default()
}

fn build(s: &Value, which: &str) -> Option<String> {
    s[which]["buildID"].as_str().map(str::to_string)
}

/// Waits until `pred` holds for `ns/w`'s status; says the status on timeout.
async fn wait_status(
    client: &Client,
    ns: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
    twc_testenv::wait_for(&format!("{ns}/w: {what}"), timeout, || {
        let api = api.clone();
        let pred = &pred;
        async move {
            let wd = api.get("w").await.map_err(|e| e.to_string())?;
            let s = status(&wd);
            if pred(&s) { Ok(s) } else { Err(s.to_string()) }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

fn rolled_out_to(s: &Value, build_id: Option<&str>) -> bool {
    let current = build(s, "currentVersion");
    current.is_some()
        && build(s, "targetVersion") == current
        && build_id.is_none_or(|b| current.as_deref() == Some(b))
        && s["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// A tenant whose WorkerDeployment `w` has rolled out its first version: (client, namespace,
/// Temporal namespace, v1's build ID).
async fn rolled_out_v1(
    env: &NodeEnv,
    prefix: &str,
) -> Result<(Client, String, String, String), Box<dyn std::error::Error>> {
    let (client, ns, temporal_ns) = tenant(env, prefix).await?;
    let wd = worker_deployment(
        &ns,
        &temporal_ns,
        "30s",
        json!([{"name": "V", "value": "1"}]),
    );
    Api::<WorkerDeployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &wd)
        .await?;
    let s = wait_status(&client, &ns, "v1 rolled out", ROLLOUT, |s| {
        rolled_out_to(s, None)
    })
    .await;
    let v1 = build(&s, "currentVersion").ok_or("no current version")?;
    Ok((client, ns, temporal_ns, v1))
}

/// The pods of `ns` with build ID `build_id` (TWC's label).
async fn pods_of(client: &Client, ns: &str, build_id: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("temporal.io/build-id={build_id}")))
        .await
        .unwrap_or_else(|e| panic!("list pods: {e}"))
        .items
}

/// The containerd id of a pod's first container, as the kubelet reports it.
fn container_id(pod: &Pod) -> Option<String> {
    let s = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    s.container_id
        .as_deref()?
        .strip_prefix("containerd://")
        .map(str::to_string)
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The process containerd runs for container `id`: its pid, from `ctr tasks ls`.
fn task_pid(env: &NodeEnv, id: &str) -> Option<u32> {
    env.node
        .tasks()
        .ok()?
        .into_iter()
        .find(|(task, _, status)| task == id && status == "RUNNING")
        .map(|(_, pid, _)| pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_the_image_built_here_under_the_restricted_standard() -> TestResult {
    let env = cluster().await?;
    let client = env.client().await?;
    let pods = Api::<Pod>::namespaced(client.clone(), SYSTEM)
        .list(&ListParams::default().labels("app.kubernetes.io/name=temporal-worker-controller"))
        .await?
        .items;
    assert_eq!(pods.len(), 1, "one controller pod: {pods:?}");
    let pod = &pods[0];
    assert!(ready(pod), "Ready through its /readyz probe");
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(spec.containers[0].image.as_deref(), Some(CONTROLLER_IMAGE));
    assert_eq!(spec.node_name.as_deref(), Some(node::NAME));
    let id = container_id(pod).ok_or("the controller's container has no containerd id")?;
    let pid = task_pid(env, &id).ok_or("containerd runs no task for the controller")?;
    // The image's user, and the read-only root the chart asks for.
    let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let uid = proc_status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap_or_default();
    assert!(
        uid.split_whitespace().skip(1).all(|u| u == "65532"),
        "runs as 65532: {uid}"
    );
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap_or_default();
    assert!(
        root.split_whitespace()
            .nth(5)
            .is_some_and(|o| o.split(',').any(|o| o == "ro")),
        "read-only root: {root}"
    );
    // No shell in the image: the container's file system has none.
    let rootfs = format!("/proc/{pid}/root");
    for shell in ["bin/sh", "bin/bash", "bin/dash", "usr/bin/sh"] {
        assert!(
            !std::path::Path::new(&rootfs).join(shell).exists(),
            "the image has {shell}"
        );
    }
    let restarts = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(-1, |c| c.restart_count);
    assert_eq!(restarts, 0, "the controller never restarted");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progressive_rollout_of_worker_containers_drains_and_stops_the_old_with_sigterm()
-> TestResult {
    let env = cluster().await?;
    let (client, ns, _, v1) = rolled_out_v1(env, "node-roll").await?;
    let v1_pods = pods_of(&client, &ns, &v1).await;
    assert_eq!(v1_pods.len(), 2, "two workers of v1");
    for pod in &v1_pods {
        let id = container_id(pod).ok_or("a v1 worker has no containerd id")?;
        assert!(
            task_pid(env, &id).is_some(),
            "v1 worker {id} runs in containerd"
        );
    }

    // Watch v1's pods from now on: when the drained version is scaled down, each container
    // must end by its own SIGTERM handling (exit 0), not by SIGKILL (137) after the grace.
    let exits = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, i32)>::new()));
    let watch = {
        let api = Api::<Pod>::namespaced(client.clone(), &ns);
        let exits = exits.clone();
        let cfg = watcher::Config::default().labels(&format!("temporal.io/build-id={v1}"));
        tokio::spawn(async move {
            let mut stream = watcher::watcher(api, cfg).boxed();
            while let Some(Ok(event)) = stream.next().await {
                let (Event::Apply(pod) | Event::Delete(pod)) = event else {
                    continue;
                };
                let statuses = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.clone())
                    .unwrap_or_default();
                for c in statuses {
                    if let Some(t) = c.state.and_then(|s| s.terminated)
                        && let Ok(mut e) = exits.lock()
                        && !e.iter().any(|(p, _)| *p == pod.name_any())
                    {
                        e.push((pod.name_any(), t.exit_code));
                    }
                }
            }
        })
    };

    set_worker_env(&client, &ns, json!([{"name": "V", "value": "2"}])).await;
    let ramping = wait_status(&client, &ns, "v2 ramping at 50 %", ROLLOUT, |s| {
        build(s, "targetVersion").is_some_and(|t| t != v1)
            && s["targetVersion"]["rampPercentage"].as_f64() == Some(50.0)
    })
    .await;
    let v2 = build(&ramping, "targetVersion").ok_or("no target")?;
    assert_eq!(
        build(&ramping, "currentVersion").as_deref(),
        Some(v1.as_str())
    );
    wait_status(&client, &ns, "v2 current", ROLLOUT, |s| {
        rolled_out_to(s, Some(&v2))
    })
    .await;
    for pod in pods_of(&client, &ns, &v2).await {
        let id = container_id(&pod).ok_or("a v2 worker has no containerd id")?;
        assert!(
            task_pid(env, &id).is_some(),
            "v2 worker {id} runs in containerd"
        );
    }
    // v1 drains (no pinned workflow here), is scaled down after 2 s, and its containers get
    // SIGTERM.
    twc_testenv::wait_for("v1's pods gone", ROLLOUT, || {
        let client = client.clone();
        let ns = ns.clone();
        let v1 = v1.clone();
        async move {
            let left = pods_of(&client, &ns, &v1).await;
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{} pods left", left.len()))
            }
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let exits = exits.lock().map(|e| e.clone()).unwrap_or_default();
    assert!(!exits.is_empty(), "the watch saw v1's containers terminate");
    for (pod, code) in &exits {
        assert_eq!(*code, 0, "{pod} ended by its SIGTERM handling, not SIGKILL");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_exits_at_once_crash_loops_under_the_kubelet_and_v1_stays() -> TestResult {
    let env = cluster().await?;
    let (client, ns, _, v1) = rolled_out_v1(env, "node-crash").await?;
    let before: Vec<String> = pods_of(&client, &ns, &v1)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();

    set_worker_env(
        &client,
        &ns,
        json!([{"name": "V", "value": "2"}, {"name": "WORKER_MODE", "value": "crash"}]),
    )
    .await;
    // The kubelet backs off 10 s, 20 s, 40 s: the third restart comes about 70 s in. Between
    // restarts, kubelet 1.35 reports the container as `terminated` (reason Error), not as
    // `waiting: CrashLoopBackOff` as the pod runner did: the controller must see both.
    let s = wait_status(&client, &ns, "v2 failed as crash-looping", ROLLOUT, |s| {
        s["failedVersion"]["reason"] == "WorkersCrashLooping"
    })
    .await;
    let v2 = build(&s, "failedVersion").ok_or("no failed build")?;
    assert_ne!(v2, v1);
    assert_eq!(build(&s, "currentVersion").as_deref(), Some(v1.as_str()));
    // The kubelet restarted each v2 container after its back-off, and none came up.
    let crashing = pods_of(&client, &ns, &v2).await;
    assert!(!crashing.is_empty(), "v2's pods are kept");
    for pod in &crashing {
        let c = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .ok_or("a v2 pod without container status")?;
        assert!(
            c.restart_count >= 3 && !c.ready,
            "{}: restarted {} times, ready {}",
            pod.name_any(),
            c.restart_count,
            c.ready
        );
    }
    // v1 kept its workers: the same pods, never restarted.
    let after = pods_of(&client, &ns, &v1).await;
    let mut names: Vec<String> = after.iter().map(|p| p.name_any()).collect();
    names.sort();
    let mut before = before;
    before.sort();
    assert_eq!(names, before, "v1's pods are the same");
    // Ready, once the kubelet says so: another test of this binary restarts the kubelet, which
    // reports its containers unready until its first sync.
    twc_testenv::wait_for("v1's pods Ready", Duration::from_secs(60), || {
        let (client, ns, v1) = (client.clone(), ns.clone(), v1.clone());
        async move {
            let pods = pods_of(&client, &ns, &v1).await;
            let unready: Vec<String> = pods
                .iter()
                .filter(|p| !ready(p))
                .map(|p| p.name_any())
                .collect();
            if unready.is_empty() {
                Ok(())
            } else {
                Err(format!("not Ready: {unready:?}"))
            }
        }
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_pod_deleted_and_the_kubelet_restarted_mid_rollout() -> TestResult {
    let env = cluster().await?;
    let (client, ns, _, v1) = rolled_out_v1(env, "node-restart").await?;
    set_worker_env(&client, &ns, json!([{"name": "V", "value": "2"}])).await;
    let s = wait_status(&client, &ns, "v2 ramping", ROLLOUT, |s| {
        build(s, "targetVersion").is_some_and(|t| t != v1)
            && s["targetVersion"]["rampPercentage"].as_f64() == Some(50.0)
    })
    .await;
    let v2 = build(&s, "targetVersion").ok_or("no target")?;

    // The controller's pod goes (its ReplicaSet makes another), and the kubelet restarts.
    let controller_pods = Api::<Pod>::namespaced(client.clone(), SYSTEM);
    let lp = ListParams::default().labels("app.kubernetes.io/name=temporal-worker-controller");
    let old: Vec<String> = controller_pods
        .list(&lp)
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    for name in &old {
        controller_pods.delete(name, &Default::default()).await?;
    }
    env.node.restart_kubelet(Duration::from_secs(5)).await?;
    twc_testenv::wait_for("a new controller pod Ready", ROLLOUT, || {
        let api = controller_pods.clone();
        let lp = lp.clone();
        let old = old.clone();
        async move {
            let pods = api.list(&lp).await.map_err(|e| e.to_string())?.items;
            let fresh: Vec<&Pod> = pods
                .iter()
                .filter(|p| !old.contains(&p.name_any()))
                .collect();
            if fresh.iter().any(|p| ready(p)) {
                Ok(())
            } else {
                Err(format!("{} pods, none new and Ready", pods.len()))
            }
        }
    })
    .await?;

    let s = wait_status(
        &client,
        &ns,
        "v2 current after the restarts",
        ROLLOUT,
        |s| rolled_out_to(s, Some(&v2)),
    )
    .await;
    // No version lost: v1 is still known (draining or drained), with its Deployment.
    let deprecated = s["deprecatedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        deprecated.iter().any(|d| d["buildID"] == v1.as_str()),
        "v1 is still a known version: {deprecated:?}"
    );
    Ok(())
}

/// The worker image's container has what the controller injects (a read of its environment
/// from the node's side: `/proc/<pid>/environ` of the real container process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_containers_get_the_injected_environment() -> TestResult {
    let env = cluster().await?;
    let (client, ns, temporal_ns, v1) = rolled_out_v1(env, "node-env").await?;
    let pod = pods_of(&client, &ns, &v1)
        .await
        .into_iter()
        .next()
        .ok_or("no v1 pod")?;
    let id = container_id(&pod).ok_or("no containerd id")?;
    let pid = task_pid(env, &id).ok_or("no task")?;
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    let vars: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    let get = |k: &str| {
        vars.iter()
            .find_map(|v| v.strip_prefix(&format!("{k}=")).map(str::to_string))
    };
    assert_eq!(
        get("TEMPORAL_WORKER_BUILD_ID").as_deref(),
        Some(v1.as_str())
    );
    assert_eq!(
        get("TEMPORAL_NAMESPACE").as_deref(),
        Some(temporal_ns.as_str())
    );
    assert_eq!(
        get("TEMPORAL_ADDRESS").as_deref(),
        Some(env.temporal_address_for_pods())
    );
    Ok(())
}
