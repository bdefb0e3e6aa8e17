//! `twc-demo`: the whole thing working, as a user would install it.
//!
//! By default on a real node (needs root; `crates/testenv/src/node`): starts etcd,
//! kube-apiserver, kube-controller-manager, the Temporal dev server, containerd, a kubelet,
//! kube-proxy and kube-scheduler; imports the images built by `hack/image.sh`; installs the
//! CRDs chart and the controller chart with `helm install --wait` (the controller then runs as
//! a pod of the image built here). With `--pod-runner` (any machine): the same control plane and
//! Temporal, the controller run as a local process (`twc run`) and the workers as local
//! processes of the pod runner, the project's kubelet stand-in.
//!
//! Then, either way: creates a ClusterConnection and a WorkerDeployment running the example
//! worker (v1); starts a few pinned workflows; changes the image to v2 with a Progressive
//! strategy and shows, as it happens, v2 registering, the ramp steps, v1 draining while its
//! pinned workflows finish, then v1 scaled down and deleted in Kubernetes and Temporal. Every
//! state shown is read from the API and Temporal. Exits leaving nothing running. `--ci` also
//! checks the final state and fails if it is wrong.
//!
//! With `--groups`, the WorkerDeployment has two worker groups (upstream's unreleased design,
//! TWC #330): `workflows` runs the workflows, whose activity runs on `activities`, an
//! activity-only worker polling its own task queue. One version is both groups' Deployments;
//! the pinned workflows keep v1's activity workers busy while v2 ramps, and both of v1's
//! groups go together once they are done.

mod node;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use temporalio_client::{Connection, tonic};
use temporalio_common::protos::temporal::api::workflowservice::v1::CountWorkflowExecutionsRequest;
use twc_api::{ClusterConnection, VersionStatus, WorkerDeployment};
use twc_testenv::controller::Controller;
use twc_testenv::node::NodeEnv;
use twc_testenv::{LocalImage, Options, TemporalServer, TestEnv};

const NS: &str = "demo";
const NAME: &str = "hello";
/// The worker image in `--pod-runner` mode: any tag runs the example worker binary.
const LOCAL_IMAGE: &str = "example.com/hello-worker";
const PINNED_WORKFLOWS: usize = 3;
const WORKFLOW_SECONDS: u64 = 75;
/// With `--groups`: the activity group's task queue.
const ACTIVITY_QUEUE: &str = "hello-activities";

#[derive(Parser)]
#[command(
    name = "twc-demo",
    about = "A real rollout with the Temporal Worker Controller, live"
)]
struct Cli {
    /// Directory for data and logs (wiped at start).
    #[arg(long, default_value = "target/demo")]
    dir: PathBuf,
    /// Non-interactive: plain output, and fail unless the rollout ends as it should.
    #[arg(long)]
    ci: bool,
    /// Give up after this many seconds (of the rollout, after the start).
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Run the workers with the pod runner (local processes, the kubelet stand-in) and the
    /// controller as a local process, instead of a real node: for machines without root.
    #[arg(long)]
    pod_runner: bool,
    /// Only check that this machine can run the real node; name what it lacks.
    #[arg(long, conflicts_with = "pod_runner")]
    check_node: bool,
    /// Roll out a WorkerDeployment of two worker groups (a workflow worker and an
    /// activity-only worker, one version) instead of one template.
    #[arg(long)]
    groups: bool,
}

/// Where the demo runs: a real node, or the pod runner.
enum Env {
    Node(Box<NodeEnv>),
    PodRunner(Box<TestEnv>),
}

impl Env {
    fn temporal(&self) -> &TemporalServer {
        match self {
            Env::Node(e) => &e.temporal,
            Env::PodRunner(e) => &e.temporal,
        }
    }

    async fn client(&self) -> anyhow::Result<Client> {
        Ok(match self {
            Env::Node(e) => e.client().await?,
            Env::PodRunner(e) => e.client().await?,
        })
    }

    fn check_running(&self) -> anyhow::Result<()> {
        match self {
            Env::Node(e) => e.check_running()?,
            Env::PodRunner(e) => e.check_running()?,
        }
        Ok(())
    }

    /// Temporal's address as the controller and the workers reach it (the connection's
    /// `hostPort`).
    fn temporal_for_workers(&self) -> String {
        match self {
            Env::Node(e) => e.temporal_address_for_pods().to_string(),
            Env::PodRunner(e) => e.temporal.address.clone(),
        }
    }

    /// The worker image's repository: tags `v1` and `v2` run the example worker.
    fn worker_image(&self) -> &'static str {
        match self {
            Env::Node(_) => node::WORKER_IMAGE,
            Env::PodRunner(_) => LOCAL_IMAGE,
        }
    }
}

/// The controller: a pod of the chart, or a local process.
enum Running {
    Pod(node::ControllerPod),
    Process(Controller),
}

impl Running {
    /// Memory and CPU time so far.
    fn usage(&self, env: &Env) -> String {
        match (self, env) {
            (Running::Process(c), _) => c.usage(),
            (Running::Pod(p), Env::Node(e)) => p
                .usage(e)
                .map(|u| u.to_string())
                .unwrap_or_else(|err| format!("usage unknown ({err:#})")),
            (Running::Pod(_), Env::PodRunner(_)) => "usage unknown".into(),
        }
    }

    async fn rpcs(&self) -> String {
        match self {
            Running::Process(c) => format!("{:.0}", c.rpcs().await),
            Running::Pod(p) => match p.rpcs().await {
                Ok(n) => format!("{n:.0}"),
                Err(e) => format!("? ({e:#})"),
            },
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.check_node {
        if let Err(e) = node::check() {
            eprintln!("twc-demo: {e:#}");
            std::process::exit(1);
        }
        return Ok(());
    }
    let dir = twc_testenv::fresh_dir(&cli.dir)?;
    let started = Instant::now();

    let (env, mut controller) = if cli.pod_runner {
        println!("== Starting a local control plane, the Temporal dev server and the pod runner");
        let env = TestEnv::start(&Options::default(), &dir).await?;
        println!(
            "   ready in {:.1}s (kubeconfig: {})",
            env.startup.as_secs_f64(),
            env.control_plane.kubeconfig_path.display()
        );
        let client = env.client().await?;
        twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;
        let worker =
            twc_testenv::paths::workspace_binary("twc-example-worker", "twc-example-worker")?;
        env.pod_runner
            .register_image(LOCAL_IMAGE, LocalImage::new(worker));
        println!("== Running the controller (twc run, leader election on)");
        let mut controller = Controller::start(&env.control_plane, &dir, "twc-demo")?;
        controller.wait_ready().await?;
        println!("   ready: leader, caches synced");
        (Env::PodRunner(Box::new(env)), Running::Process(controller))
    } else {
        println!(
            "== Starting a real node: a local control plane, the Temporal dev server, containerd, \
             a kubelet, kube-proxy and kube-scheduler"
        );
        let env = node::start(&dir).await?;
        println!(
            "   ready in {:.1}s, images imported (kubeconfig: {})",
            env.startup.as_secs_f64(),
            env.control_plane.kubeconfig_path.display()
        );
        println!(
            "== helm install of the CRDs chart, then of the controller chart into namespace '{}' \
             (restricted Pod Security Standard), --wait",
            node::SYSTEM
        );
        let t = Instant::now();
        node::install(&env).await?;
        let client = env.client().await?;
        let pod = node::ControllerPod::find(&env, &client).await?;
        println!(
            "   installed in {:.1}s: pod {} ({}) Ready through its /readyz probe",
            t.elapsed().as_secs_f64(),
            pod.name,
            pod.image,
        );
        (Env::Node(Box::new(env)), Running::Pod(pod))
    };
    let idle = controller.usage(&env);
    println!("   the controller at rest: {idle}");

    let result = demo(&env, &cli).await;
    let end = controller.usage(&env);
    let rpcs = controller.rpcs().await;
    if let Running::Process(c) = &mut controller {
        c.process.stop(Duration::from_secs(5));
    }
    match &result {
        Ok(()) => {
            println!("\n== Controller: idle {idle}; after the rollout {end}; {rpcs} Temporal RPCs");
            println!(
                "== Done in {:.0}s; stopping everything.",
                started.elapsed().as_secs_f64()
            );
        }
        Err(e) => {
            let logs = match &controller {
                Running::Process(c) => format!("controller: {}", c.process.log_path().display()),
                Running::Pod(p) => format!(
                    "controller: kubectl logs -n {} {} while it runs; node: {}",
                    node::SYSTEM,
                    p.name,
                    dir.join("real-node").display()
                ),
            };
            println!(
                "\n== Demo failed: {e:#}\n   logs: {} ({logs})",
                dir.display()
            );
        }
    }
    drop(env);
    result
}

async fn demo(env: &Env, cli: &Cli) -> anyhow::Result<()> {
    let client = env.client().await?;
    let client = &client;
    let temporal_ns = env.temporal().namespace().await?;
    let hostport = env.temporal_for_workers();
    let image = env.worker_image();
    println!("== Creating ClusterConnection 'temporal' -> {hostport}");
    let cc: ClusterConnection = serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
        "metadata": {"name": "temporal"},
        "spec": {"hostPort": hostport}
    }))?;
    Api::<ClusterConnection>::all(client.clone())
        .create(&PostParams::default(), &cc)
        .await?;
    let ns = twc_testenv::control_plane::create_namespace(client, NS).await?;
    let mut spec = json!({
        "replicas": 2,
        "workerOptions": {
            "connectionRef": {"objectRef": {"kind": "ClusterConnection", "name": "temporal"}},
            "temporalNamespace": temporal_ns
        },
        "rollout": {"strategy": "Progressive", "steps": [
            {"rampPercentage": 25, "pauseDuration": "30s"},
            {"rampPercentage": 75, "pauseDuration": "30s"}
        ]},
        "sunset": {"scaledownDelay": "5s", "deleteDelay": "5s"},
        "template": template(&format!("{image}:v1"), json!([]))
    });
    if cli.groups {
        println!(
            "== Creating WorkerDeployment {ns}/{NAME} with image {image}:v1 in two worker groups: \
             'workflows' (its activities on task queue {ACTIVITY_QUEUE}) and 'activities' (an \
             activity-only worker polling {ACTIVITY_QUEUE})"
        );
        if let Some(o) = spec.as_object_mut() {
            o.remove("replicas");
            o.remove("template");
        }
        spec["workerGroups"] = groups(&format!("{image}:v1"));
    } else {
        println!("== Creating WorkerDeployment {ns}/{NAME} with image {image}:v1");
    }
    let wd: WorkerDeployment = serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": NAME},
        "spec": spec
    }))?;
    let wds: Api<WorkerDeployment> = Api::namespaced(client.clone(), &ns);
    wds.create(&PostParams::default(), &wd).await?;

    let deadline = Instant::now() + Duration::from_secs(cli.timeout);
    let started = Instant::now();
    let v1 = watch(client, &ns, &temporal_ns, env, started, deadline, |s| {
        s.current.is_some() && s.current == s.target
    })
    .await?
    .current
    .unwrap_or_default();
    // With groups, `Work` runs its activity on the activity group; else `Sleep` waits.
    let (workflow, input, what) = if cli.groups {
        ("Work", "0".to_string(), "each running an activity")
    } else {
        ("Sleep", WORKFLOW_SECONDS.to_string(), "each sleeping")
    };
    println!(
        "== v1 ({v1}) is current. Starting {PINNED_WORKFLOWS} workflows {what} for {WORKFLOW_SECONDS}s, pinned to v1"
    );
    let temporal = env.temporal().connect().await?;
    for i in 0..PINNED_WORKFLOWS {
        twc_testenv::temporal::start_workflow(
            &temporal,
            &temporal_ns,
            NAME,
            workflow,
            &format!("pinned-{i}"),
            Some(&input),
        )
        .await?;
    }

    println!("== Changing the image to v2 (Progressive: 25% for 30s, 75% for 30s, then current)");
    let paths: &[&str] = if cli.groups {
        &[
            "/spec/workerGroups/0/deployment/template/spec/containers/0/image",
            "/spec/workerGroups/1/deployment/template/spec/containers/0/image",
        ]
    } else {
        &["/spec/template/spec/containers/0/image"]
    };
    let ops: Vec<serde_json::Value> = paths
        .iter()
        .map(|p| json!({"op": "replace", "path": p, "value": format!("{image}:v2")}))
        .collect();
    wds.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!(ops))?),
    )
    .await?;
    let end = watch(client, &ns, &temporal_ns, env, started, deadline, |s| {
        s.current.as_deref().is_some_and(|c| c != v1)
            && s.current == s.target
            && !s.versions.contains_key(&v1)
            && !s.temporal_versions.contains(&v1)
    })
    .await?;
    let v2 = end.current.clone().unwrap_or_default();
    println!(
        "== v2 ({v2}) is current; v1 drained, was scaled down, and is deleted from Kubernetes and Temporal"
    );
    if cli.ci {
        let groups = end.versions.get(&v2).map(|(_, pods)| pods.len());
        let want = if cli.groups { 2 } else { 1 };
        if v2 == v1 || groups != Some(want) {
            bail!("unexpected final state: {end:?}");
        }
        println!("final state checked: current={v2}, v1 gone");
    }
    Ok(())
}

/// The worker's pod template at `image`, with `env`.
fn template(image: &str, env: serde_json::Value) -> serde_json::Value {
    json!({"spec": {"terminationGracePeriodSeconds": 2,
        "containers": [{"name": "worker", "image": image, "env": env}]}})
}

/// The two worker groups at `image`: `workflows`, whose `Work` runs a
/// [`WORKFLOW_SECONDS`] activity on [`ACTIVITY_QUEUE`], and `activities`, the activity-only
/// worker that polls it; two replicas each.
fn groups(image: &str) -> serde_json::Value {
    let workflows = template(
        image,
        json!([
            {"name": "WORKER_ACTIVITY_SECONDS", "value": WORKFLOW_SECONDS.to_string()},
            {"name": "WORKER_ACTIVITY_TASK_QUEUE", "value": ACTIVITY_QUEUE},
        ]),
    );
    let activities = template(
        image,
        json!([
            {"name": "WORKER_ROLE", "value": "activities"},
            {"name": "TEMPORAL_TASK_QUEUE", "value": ACTIVITY_QUEUE},
        ]),
    );
    json!([
        {"name": "workflows", "deployment": {"replicas": 2, "template": workflows}},
        {"name": "activities", "deployment": {"replicas": 2, "template": activities}},
    ])
}

/// A version's Deployments: (worker group, "" without groups; ready pods; desired pods).
type Pods = Vec<(String, i32, i32)>;

/// What the demo shows, read from the API and Temporal.
#[derive(Clone, Debug, Default, PartialEq)]
struct Snapshot {
    target: Option<String>,
    target_status: Option<VersionStatus>,
    ramp: Option<f32>,
    current: Option<String>,
    /// build ID -> (status, its Deployments' pods)
    versions: BTreeMap<String, (String, Pods)>,
    temporal_versions: Vec<String>,
    running_workflows: i64,
}

impl Snapshot {
    fn line(&self) -> String {
        let mut parts = vec![format!(
            "target {} {}{}",
            self.target.as_deref().unwrap_or("-"),
            self.target_status
                .map(|s| format!("{s:?}"))
                .unwrap_or_default(),
            self.ramp.map(|r| format!(" {r}%")).unwrap_or_default()
        )];
        parts.push(format!(
            "current {}",
            self.current.as_deref().unwrap_or("-")
        ));
        let versions: Vec<String> = self
            .versions
            .iter()
            .map(|(b, (s, groups))| {
                let pods: Vec<String> = groups
                    .iter()
                    .map(|(g, ready, want)| match g.as_str() {
                        "" => format!("{ready}/{want}"),
                        g => format!("{g} {ready}/{want}"),
                    })
                    .collect();
                format!("{b} {s} {} pods", pods.join(", "))
            })
            .collect();
        parts.push(format!("deployments: {}", versions.join(", ")));
        parts.push(format!("open workflows: {}", self.running_workflows));
        parts.join(" | ")
    }
}

async fn snapshot(
    client: &Client,
    ns: &str,
    temporal_ns: &str,
    temporal: &Connection,
) -> anyhow::Result<Snapshot> {
    let wd = Api::<WorkerDeployment>::namespaced(client.clone(), ns)
        .get(NAME)
        .await?;
    let status = wd.status.unwrap_or_default();
    let mut s = Snapshot {
        target: status
            .target_version
            .as_ref()
            .map(|t| t.base.build_id.clone()),
        target_status: status.target_version.as_ref().map(|t| t.base.status),
        ramp: status
            .target_version
            .as_ref()
            .and_then(|t| t.ramp_percentage),
        current: status
            .current_version
            .as_ref()
            .map(|c| c.base.build_id.clone()),
        ..Default::default()
    };
    let mut statuses: BTreeMap<String, String> = BTreeMap::new();
    for v in status.deprecated_versions.iter().map(|d| &d.base).chain(
        status
            .target_version
            .iter()
            .map(|t| &t.base)
            .chain(status.current_version.iter().map(|c| &c.base)),
    ) {
        statuses.insert(v.build_id.clone(), format!("{:?}", v.status));
    }
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("temporal.io/deployment-name={NAME}")))
        .await?;
    for d in deployments.items {
        let build = d
            .labels()
            .get("temporal.io/build-id")
            .cloned()
            .unwrap_or_default();
        let ready = d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let group = d
            .labels()
            .get(twc_api::labels::WORKER_GROUP)
            .cloned()
            .unwrap_or_default();
        let st = statuses.get(&build).cloned().unwrap_or_else(|| "?".into());
        let entry = s.versions.entry(build).or_insert_with(|| (st, Vec::new()));
        entry.1.push((group, ready, want));
        entry.1.sort();
    }
    let deployment_name = format!("{ns}/{NAME}");
    if let Ok(state) =
        twc_controller::temporal::describe(temporal, temporal_ns, &deployment_name).await
    {
        s.temporal_versions = state.versions.keys().cloned().collect();
    }
    let mut svc = temporal.workflow_service();
    s.running_workflows = svc
        .count_workflow_executions(tonic::Request::new(CountWorkflowExecutionsRequest {
            namespace: temporal_ns.to_string(),
            query: "ExecutionStatus='Running'".into(),
        }))
        .await
        .map(|r| r.into_inner().count)
        .unwrap_or(-1);
    Ok(s)
}

/// Prints each new state until `done` holds.
async fn watch(
    client: &Client,
    ns: &str,
    temporal_ns: &str,
    env: &Env,
    started: Instant,
    deadline: Instant,
    done: impl Fn(&Snapshot) -> bool,
) -> anyhow::Result<Snapshot> {
    let temporal = env.temporal().connect().await?;
    let mut last = String::new();
    loop {
        env.check_running()?;
        let s = snapshot(client, ns, temporal_ns, &temporal).await?;
        let line = s.line();
        if line != last {
            println!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
            last = line;
        }
        if done(&s) {
            return Ok(s);
        }
        if Instant::now() > deadline {
            bail!("timed out; last state: {last}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
