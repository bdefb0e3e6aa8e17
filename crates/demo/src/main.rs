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
    println!("== Creating WorkerDeployment {ns}/{NAME} with image {image}:v1");
    let wd: WorkerDeployment = serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": NAME},
        "spec": {
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
            "template": {"spec": {"terminationGracePeriodSeconds": 2,
                "containers": [{"name": "worker", "image": format!("{image}:v1")}]}}
        }
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
    println!(
        "== v1 ({v1}) is current. Starting {PINNED_WORKFLOWS} workflows of {WORKFLOW_SECONDS}s, pinned to v1"
    );
    let temporal = env.temporal().connect().await?;
    for i in 0..PINNED_WORKFLOWS {
        let seconds = WORKFLOW_SECONDS.to_string();
        twc_testenv::temporal::start_workflow(
            &temporal,
            &temporal_ns,
            NAME,
            "Sleep",
            &format!("pinned-{i}"),
            Some(&seconds),
        )
        .await?;
    }

    println!("== Changing the image to v2 (Progressive: 25% for 30s, 75% for 30s, then current)");
    wds.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!([{
            "op": "replace",
            "path": "/spec/template/spec/containers/0/image",
            "value": format!("{image}:v2")
        }]))?),
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
        if v2 == v1 || !end.versions.contains_key(&v2) {
            bail!("unexpected final state: {end:?}");
        }
        println!("final state checked: current={v2}, v1 gone");
    }
    Ok(())
}

/// What the demo shows, read from the API and Temporal.
#[derive(Clone, Debug, Default, PartialEq)]
struct Snapshot {
    target: Option<String>,
    target_status: Option<VersionStatus>,
    ramp: Option<f32>,
    current: Option<String>,
    /// build ID -> (status, ready pods, desired pods)
    versions: BTreeMap<String, (String, i32, i32)>,
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
            .map(|(b, (s, ready, want))| format!("{b} {s} {ready}/{want} pods"))
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
        let st = statuses.get(&build).cloned().unwrap_or_else(|| "?".into());
        s.versions.insert(build, (st, ready, want));
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
