//! `twc-loadgen`: thousands of WorkerDeployments against a real kube-apiserver and Temporal
//! dev server, with the real `twc run` binary, and the figures of issue #13 printed.
//!
//! No pods and no kube-controller-manager: the harness plays the Deployment controller, the
//! kubelet and the workers (see [`fleet`]), so thousands of WorkerDeployments fit on one
//! machine. Scenarios run in the order given, on the same servers:
//!
//! - `steady`: every rollout complete, then a window with nothing moving (Temporal RPCs by
//!   operation, counted by the server; controller CPU and memory), a full resync (controller
//!   restart), and spec-change latency (image patched -> new versioned Deployment watched);
//! - `rollout`: every image changed at once; time to all RolloutComplete, the peak rate of
//!   Worker Deployment reads the server saw, ResourceExhausted errors, RPCs per WorkerDeployment;
//! - `pending`: pods that never start (no status, no pollers); RPCs and CPU while waiting, then a
//!   full resync and spec changes (the Kubernetes side alone: nothing is read from Temporal).
//!
//! `--assert` exits non-zero unless every rollout completed, no ResourceExhausted was returned,
//! and (with `--expect-max-read-rps R --expect-burst B`) every 10 s of server-side reads stayed
//! within B + 10 R.

mod fleet;
mod observe;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use twc_api::{ClusterConnection, WorkerDeployment};
use twc_testenv::controller::Controller;
use twc_testenv::{ControlPlaneOptions, Options, TemporalOptions, TestEnv};

use observe::{CONTROLLER_OPERATIONS, Sample, Sampler, Tracker};

const CLUSTER_CONNECTION: &str = "loadgen";
const IDENTITY: &str = "twc-loadgen";
const IMAGE: &str = "example.com/loadgen-worker";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Steady,
    Rollout,
    Pending,
}

#[derive(Parser)]
#[command(
    name = "twc-loadgen",
    about = "Thousands of WorkerDeployments against a real apiserver and Temporal, without pods: the figures of issue #13"
)]
struct Cli {
    /// Scenarios, run in this order on the same servers (repeatable).
    #[arg(long, value_enum, default_values_t = [Scenario::Steady])]
    scenario: Vec<Scenario>,
    /// WorkerDeployments (AllAtOnce, 1 replica), spread evenly over the namespaces.
    #[arg(long, default_value_t = 100)]
    worker_deployments: usize,
    /// Kubernetes namespaces.
    #[arg(long, default_value_t = 10)]
    namespaces: usize,
    /// The Temporal namespace every WorkerDeployment uses.
    #[arg(long, default_value = "default")]
    temporal_namespace: String,
    /// Seconds to wait after the rollouts before a steady or pending window starts.
    #[arg(long, default_value_t = 30)]
    settle_seconds: u64,
    /// Length of the steady (and pending) measurement window.
    #[arg(long, default_value_t = 120)]
    window_seconds: u64,
    /// WorkerDeployments whose image `steady` changes to measure spec-change latency.
    #[arg(long, default_value_t = 50)]
    changes: usize,
    /// The changes are spread over this many seconds.
    #[arg(long, default_value_t = 5)]
    changes_spread_seconds: u64,
    /// WorkerDeployments (others than those of `--changes`) whose image changes, over 2 s,
    /// as soon as the restarted controller is ready: spec-change latency while every
    /// WorkerDeployment at rest waits for its first read after the restart.
    #[arg(long, default_value_t = 10)]
    resync_changes: usize,
    /// The server's Worker Deployment read limit per namespace
    /// (`frontend.globalNamespaceWorkerDeploymentReadRPS`); the server's default (50) if unset.
    #[arg(long)]
    server_read_rps: Option<u32>,
    /// The server's `matching.maxDeployments` (worker deployments per namespace; 100 by default).
    #[arg(long, default_value_t = 20000)]
    server_max_deployments: u32,
    /// Temporal's production drainage timing instead of testenv's fast one (versions drain
    /// and pollers expire in about a second).
    #[arg(long)]
    production_drainage: bool,
    /// No fleet: Deployments get no status and no pollers ("waiting for pollers").
    #[arg(long, alias = "no-fleet")]
    pods_never_start: bool,
    /// An extra argument for `twc run` (repeatable), e.g. `--controller-arg=--temporal-read-rps=20`.
    #[arg(long = "controller-arg", allow_hyphen_values = true)]
    controller_args: Vec<String>,
    /// Exit non-zero unless every rollout completed, no ResourceExhausted was returned and
    /// (with the two expectations) every 10 s of server-side reads stayed within B + 10 R.
    #[arg(long)]
    assert: bool,
    /// R of `--assert`: the read rate the controller promises, per second.
    #[arg(long, requires = "expect_burst")]
    expect_max_read_rps: Option<f64>,
    /// B of `--assert`: the read burst the controller promises.
    #[arg(long, requires = "expect_max_read_rps")]
    expect_burst: Option<f64>,
    /// Of `--assert`: every spec change made during the resync (`--resync-changes`) has its new
    /// Deployment within this many seconds.
    #[arg(long)]
    expect_resync_change_seconds: Option<f64>,
    /// Kubernetes writes in flight at once while creating and changing objects.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Give up waiting for rollouts after this long.
    #[arg(long, default_value_t = 1800)]
    timeout_seconds: u64,
    /// Directory for data and logs (wiped at start).
    #[arg(long, default_value = "target/loadgen")]
    dir: PathBuf,
}

/// Everything the scenarios share.
struct Run {
    cli: Cli,
    env: TestEnv,
    client: Client,
    controller: Controller,
    fleet: Arc<fleet::Fleet>,
    tracker: Tracker,
    sampler: Sampler,
    /// `namespace/name` of every WorkerDeployment.
    wds: Vec<(String, String)>,
    /// The generation each WorkerDeployment must report RolloutComplete for.
    want: HashMap<String, (i64, usize)>,
    /// The most WorkerDeployments seen at once reporting RolloutComplete for their new
    /// generation while the old build was still current.
    premature: usize,
    /// The image tag last written to every WorkerDeployment.
    tag: usize,
    /// Rollouts that did not complete in time.
    incomplete: usize,
    /// The slowest spec change made during the resync, and how many were seen of how many.
    resync_changes: Option<(Duration, usize, usize)>,
    started: Instant,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let failed = runtime.block_on(run(cli))?;
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    if cli.scenario.contains(&Scenario::Pending) && !cli.pods_never_start {
        bail!("the pending scenario needs --pods-never-start");
    }
    if cli.pods_never_start && cli.scenario.contains(&Scenario::Rollout) {
        bail!("the rollout scenario needs the fleet (no --pods-never-start)");
    }
    if cli.namespaces == 0 || cli.worker_deployments < cli.namespaces {
        bail!("need at least one WorkerDeployment per namespace");
    }
    let started = Instant::now();
    let dir = twc_testenv::fresh_dir(&cli.dir)?;
    let mut temporal = TemporalOptions {
        namespace_pool: 0,
        ..Default::default()
    };
    if cli.production_drainage {
        temporal.dynamic_config.clear();
    }
    temporal.dynamic_config.push((
        "matching.maxDeployments".into(),
        cli.server_max_deployments.to_string(),
    ));
    if let Some(rps) = cli.server_read_rps {
        temporal.dynamic_config.push((
            "frontend.globalNamespaceWorkerDeploymentReadRPS".into(),
            rps.to_string(),
        ));
    }
    let opts = Options {
        control_plane: ControlPlaneOptions {
            controller_manager: false,
            ..Default::default()
        },
        temporal,
    };
    let env = TestEnv::start(&opts, &dir).await?;
    eprintln!(
        "servers ready in {:.1} s; logs in {}",
        env.startup.as_secs_f64(),
        dir.display()
    );
    let client = env.client().await?;
    twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;

    let (tracker, tracker_task) = Tracker::spawn(client.clone());
    let fleet = fleet::Fleet::new(
        client.clone(),
        env.temporal.address.clone(),
        !cli.pods_never_start,
    );
    let fleet_task = tokio::spawn(fleet.clone().run());

    let mut controller = Controller::start_with_args(
        &env.control_plane,
        &dir,
        "controller",
        IDENTITY,
        &cli.controller_args,
    )?;
    controller.wait_ready().await?;
    let (sampler, sampler_task) = Sampler::spawn(controller.addr.clone());
    let tasks = [fleet_task, sampler_task, tracker_task];

    let mut run = Run {
        cli,
        env,
        client,
        controller,
        fleet,
        tracker,
        sampler,
        wds: Vec::new(),
        want: HashMap::new(),
        premature: 0,
        tag: 1,
        incomplete: 0,
        resync_changes: None,
        started,
    };
    print_setup(&run);
    run.create().await?;
    run.settle().await?;
    let mut failed = false;
    for scenario in run.cli.scenario.clone() {
        match scenario {
            Scenario::Steady => run.steady().await?,
            Scenario::Rollout => run.rollout().await?,
            Scenario::Pending => run.pending().await?,
        }
    }
    if run.cli.assert {
        failed = run.check().await;
    }
    run.fleet_summary().await;
    if run.premature > 0 {
        println!(
            "\nodd: up to {} WorkerDeployments at once reported Progressing=RolloutComplete for their new generation while the old build was still current",
            run.premature
        );
    }
    println!(
        "\nrun took {:.0} s in all",
        run.started.elapsed().as_secs_f64()
    );
    run.controller.process.stop(Duration::from_secs(5));
    for task in &tasks {
        task.abort();
    }
    run.fleet.stop().await;
    Ok(failed)
}

fn print_setup(run: &Run) {
    let cli = &run.cli;
    println!("setup");
    row("WorkerDeployments", cli.worker_deployments);
    row("Kubernetes namespaces", cli.namespaces);
    row("Temporal namespace", &cli.temporal_namespace);
    row("replicas, strategy", "1, AllAtOnce");
    row(
        "pods",
        if cli.pods_never_start {
            "none: Deployments get no status, nobody polls (waiting for pollers)"
        } else {
            "none: the harness writes Deployment status and polls per build ID"
        },
    );
    row(
        "server read limit",
        match cli.server_read_rps {
            Some(r) => {
                format!("{r} RPS per namespace (frontend.globalNamespaceWorkerDeploymentReadRPS)")
            }
            None => "server default (50 RPS per namespace)".into(),
        },
    );
    row("server maxDeployments", cli.server_max_deployments);
    row(
        "drainage timing",
        if cli.production_drainage {
            "production"
        } else {
            "fast (testenv: 1 s grace and refresh, pollers expire after 1 s)"
        },
    );
    row(
        "controller",
        format!(
            "twc run ({}) --leader-elect, production poll intervals{}",
            match std::env::var("TWC_CONTROLLER_BINARY") {
                Ok(path) => format!("TWC_CONTROLLER_BINARY={path}"),
                Err(_) => "debug build".to_string(),
            },
            if cli.controller_args.is_empty() {
                String::new()
            } else {
                format!(" + {}", cli.controller_args.join(" "))
            }
        ),
    );
    row("machine", format!("{} cores", cores()));
    row(
        "how counted",
        "totals: the server's service_requests; per-second reads: the controller's twc_temporal_rpc_total",
    );
}

fn row(what: &str, value: impl std::fmt::Display) {
    println!("  {what:<34} {value}");
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// WorkerDeployments written, (namespace, name, when).
type Written = Vec<(String, String, Instant)>;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn wd_manifest(ns: &str, name: &str, temporal_namespace: &str, tag: usize) -> Value {
    json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "workerOptions": {
                "connectionRef": {"objectRef": {"kind": "ClusterConnection", "name": CLUSTER_CONNECTION}},
                "temporalNamespace": temporal_namespace,
            },
            "rollout": {"strategy": "AllAtOnce"},
            "template": {"spec": {"containers": [container(ns, name, tag)]}}
        }
    })
}

fn container(ns: &str, name: &str, tag: usize) -> Value {
    json!({
        "name": "worker",
        "image": format!("{IMAGE}:v{tag}"),
        "env": [{"name": "TASK_QUEUE", "value": format!("{ns}.{name}")}],
    })
}

impl Run {
    fn total(&self) -> usize {
        self.cli.worker_deployments
    }

    /// The ClusterConnection, the namespaces and the WorkerDeployments, with bounded
    /// concurrency.
    async fn create(&mut self) -> anyhow::Result<()> {
        let port = self
            .env
            .temporal
            .address
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_string();
        let cc: ClusterConnection = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
            "metadata": {"name": CLUSTER_CONNECTION},
            "spec": {"hostPort": format!("127.0.0.1:{port}")}
        }))?;
        Api::<ClusterConnection>::all(self.client.clone())
            .create(&PostParams::default(), &cc)
            .await?;
        let namespaces: Vec<String> = (0..self.cli.namespaces)
            .map(|i| format!("lg-{i:04}"))
            .collect();
        let t = Instant::now();
        let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        futures::stream::iter(namespaces.iter().map(|name| {
            let api = ns_api.clone();
            async move {
                let ns = k8s_openapi::api::core::v1::Namespace {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                api.create(&PostParams::default(), &ns)
                    .await
                    .with_context(|| format!("create namespace {name}"))
            }
        }))
        .buffer_unordered(self.cli.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
        let ns_time = t.elapsed();
        self.wds = (0..self.total())
            .map(|i| {
                (
                    namespaces[i % namespaces.len()].clone(),
                    format!("w{:05}", i),
                )
            })
            .collect();
        let t = Instant::now();
        let client = self.client.clone();
        let created: Vec<(String, (i64, usize))> =
            futures::stream::iter(self.wds.iter().map(|(ns, name)| {
                let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
                let manifest = wd_manifest(ns, name, &self.cli.temporal_namespace, 1);
                async move {
                    let wd: WorkerDeployment = serde_json::from_value(manifest)?;
                    let made = api
                        .create(&PostParams::default(), &wd)
                        .await
                        .with_context(|| format!("create WorkerDeployment {ns}/{name}"))?;
                    Ok::<_, anyhow::Error>((
                        format!("{ns}/{name}"),
                        (made.metadata.generation.unwrap_or(1), 1),
                    ))
                }
            }))
            .buffer_unordered(self.cli.concurrency)
            .try_collect()
            .await?;
        let wd_time = t.elapsed();
        self.want = created.into_iter().collect();
        println!("\ncreation");
        row(
            "namespaces",
            format!("{} in {:.1} s", namespaces.len(), ns_time.as_secs_f64()),
        );
        row(
            "WorkerDeployments",
            format!(
                "{} in {:.1} s ({:.0} per s, {} in flight)",
                self.total(),
                wd_time.as_secs_f64(),
                self.total() as f64 / wd_time.as_secs_f64().max(0.001),
                self.cli.concurrency
            ),
        );
        Ok(())
    }

    /// Waits until every WorkerDeployment completed its rollout (with the fleet) or has a
    /// versioned Deployment (without), printing progress every 10 s.
    async fn settle(&mut self) -> anyhow::Result<()> {
        let t = Instant::now();
        let done = self.wait_rollouts(t, "first rollout").await;
        println!("\nfirst rollout (from the first WorkerDeployment created)");
        if self.cli.pods_never_start {
            row(
                "all versioned Deployments written",
                format!("{:.1} s", done.as_secs_f64()),
            );
        } else {
            row(
                "all RolloutComplete",
                format!("{:.1} s", done.as_secs_f64()),
            );
        }
        self.usage_row();
        Ok(())
    }

    /// Waits for `self.want` (or, without the fleet, for a Deployment of every
    /// WorkerDeployment); returns how long since `since`. Counts what did not finish.
    async fn wait_rollouts(&mut self, since: Instant, what: &str) -> Duration {
        let deadline = Instant::now() + Duration::from_secs(self.cli.timeout_seconds);
        let mut last_print = Instant::now();
        let mut last_sample = self.sampler.last();
        loop {
            let done = if self.cli.pods_never_start {
                self.with_deployment()
            } else {
                let (done, premature) = self.tracker.complete(&self.want);
                if premature > self.premature {
                    self.premature = premature;
                }
                done
            };
            if done >= self.want.len() {
                return since.elapsed();
            }
            if Instant::now() > deadline {
                eprintln!(
                    "!! {what}: only {done} of {} done after {} s",
                    self.want.len(),
                    self.cli.timeout_seconds
                );
                self.incomplete += self.want.len() - done;
                return since.elapsed();
            }
            if last_print.elapsed() >= Duration::from_secs(10) {
                let s = self.sampler.last();
                let secs = match (s.at, last_sample.at) {
                    (Some(a), Some(b)) => a.duration_since(b).as_secs_f64().max(0.001),
                    _ => 1.0,
                };
                let per_second = (s.reads - last_sample.reads) / secs;
                eprintln!(
                    "  {what}: {done}/{} after {:.0} s; pollers {}; controller reads {per_second:.1}/s; ResourceExhausted so far {}",
                    self.want.len(),
                    since.elapsed().as_secs_f64(),
                    self.fleet.pollers().await,
                    s.exhausted,
                );
                last_sample = s;
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// How many WorkerDeployments have a versioned Deployment.
    fn with_deployment(&self) -> usize {
        self.fleet
            .first_seen
            .lock()
            .map(|seen| seen.by_wd.len())
            .unwrap_or(0)
    }

    fn usage_row(&self) {
        let u = self.controller.usage_figures();
        row(
            "controller",
            format!(
                "RSS {:.1} MiB (peak {:.1} MiB), CPU {:.1} s so far",
                u.rss_mib, u.peak_rss_mib, u.cpu_seconds
            ),
        );
    }

    async fn controller_metrics(&self) -> String {
        self.controller
            .get("/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Server-side RPCs between two samples: printed by operation, the controller's marked.
    /// Returns the controller's total.
    fn print_rpcs(&self, before: &Sample, after: &Sample, minutes: f64) -> f64 {
        let d = observe::diff(&after.requests, &before.requests);
        let mut controller = 0.0;
        let w = self.total() as f64;
        println!(
            "  {:<34} {:>9} {:>12} {:>16}",
            "Temporal RPCs (server-side)", "count", "per minute", "per WD per min"
        );
        for (op, n) in &d {
            let ours = CONTROLLER_OPERATIONS.contains(&op.as_str());
            if ours {
                controller += n;
            }
            println!(
                "    {:<32} {:>9.0} {:>12.1} {:>16.3}{}",
                op,
                n,
                n / minutes,
                n / minutes / w,
                if ours {
                    "  controller"
                } else {
                    "  (harness / server's own workers)"
                }
            );
        }
        println!(
            "    {:<32} {:>9.0} {:>12.1} {:>16.3}",
            "controller's operations, total",
            controller,
            controller / minutes,
            controller / minutes / w
        );
        let exhausted = after.exhausted_total() - before.exhausted_total();
        row("  server ResourceExhausted", format!("{exhausted:.0}"));
        controller
    }

    /// The steady window, full resync and spec-change latency.
    async fn steady(&mut self) -> anyhow::Result<()> {
        self.window("steady (nothing moves)").await;
        self.resync().await?;
        self.spec_changes().await?;
        Ok(())
    }

    /// Nothing changes for `--window-seconds`: RPCs, CPU, memory.
    async fn window(&mut self, what: &str) {
        let secs = self.cli.window_seconds;
        eprintln!(
            "settling {} s, then measuring {what} for {secs} s...",
            self.cli.settle_seconds
        );
        tokio::time::sleep(Duration::from_secs(self.cli.settle_seconds)).await;
        self.sampler.pause(true);
        let before = observe::sample(&self.env.temporal.metrics_address).await;
        let ctl_before = self.controller_metrics().await;
        let (u0, t0) = (self.controller.usage_figures(), Instant::now());
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let (u1, cpu_minutes) = (
            self.controller.usage_figures(),
            t0.elapsed().as_secs_f64() / 60.0,
        );
        let ctl_after = self.controller_metrics().await;
        let after = observe::sample(&self.env.temporal.metrics_address).await;
        self.sampler.pause(false);
        let minutes = match (after.at, before.at) {
            (Some(a), Some(b)) => a.duration_since(b).as_secs_f64() / 60.0,
            _ => secs as f64 / 60.0,
        };
        println!("\n{what}: a {secs} s window");
        self.print_rpcs(&before, &after, minutes);
        let rpc = |t: &str| observe::controller_counter(t, "twc_temporal_rpc_total", &[]);
        let own = rpc(&ctl_after) - rpc(&ctl_before);
        row(
            "  controller's own count",
            format!(
                "{own:.0} Temporal RPCs ({:.3} per WD per minute; twc_temporal_rpc_total)",
                own / minutes / self.total() as f64
            ),
        );
        row(
            "  controller saw ResourceExhausted",
            format!(
                "{:.0}",
                observe::refused(&ctl_after) - observe::refused(&ctl_before)
            ),
        );
        row(
            "  controller CPU",
            format!(
                "{:.2} s per minute",
                (u1.cpu_seconds - u0.cpu_seconds) / cpu_minutes
            ),
        );
        row(
            "  controller memory at the end",
            format!(
                "VmRSS {:.1} MiB (anon {:.1}, file {:.1}), VmHWM {:.1} MiB",
                u1.rss_mib, u1.anon_rss_mib, u1.file_rss_mib, u1.peak_rss_mib
            ),
        );
        if let Some(rss) = self.env.temporal.rss_bytes() {
            row(
                "  Temporal dev server RSS",
                format!("{:.0} MiB", rss as f64 / 1048576.0),
            );
        }
    }

    /// Restarts the controller and waits until it reconciled every WorkerDeployment again.
    async fn resync(&mut self) -> anyhow::Result<()> {
        eprintln!("full resync: restarting the controller...");
        let t = Instant::now();
        self.controller.process.restart(Duration::from_secs(10))?;
        self.controller.wait_ready().await?;
        let ready = t.elapsed();
        // Changes while the restarted controller reads everything again (not the WorkerDeployments
        // `spec_changes` picks: those are at offset 0 of each step, these at half a step).
        let k = self.cli.resync_changes.min(self.total() / 2);
        let step = self.total() / k.max(1);
        let picked: Vec<(String, String)> = (0..k)
            .map(|i| self.wds[i * step + step / 2].clone())
            .collect();
        let tag = self.tag + 1;
        let (written, want) = self
            .change_images(&picked, Duration::from_secs(2), tag)
            .await?;
        let w = self.total() as f64;
        let deadline = Instant::now() + Duration::from_secs(self.cli.timeout_seconds);
        let (mut reconciled_at, mut described_at) = (None, None);
        // With no pods, nothing is described (nothing can be in Temporal for those builds).
        let describes_expected = !self.cli.pods_never_start;
        while reconciled_at.is_none() || (describes_expected && described_at.is_none()) {
            let text = self.controller_metrics().await;
            let reconciles = observe::controller_counter(
                &text,
                "twc_reconcile_total",
                &[("controller", "WorkerDeployment")],
            );
            if reconciled_at.is_none() && reconciles >= w {
                reconciled_at = Some(t.elapsed());
            }
            let describes = observe::controller_counter(
                &text,
                "twc_temporal_rpc_total",
                &[("rpc", "DescribeWorkerDeployment")],
            );
            if described_at.is_none() && describes >= w {
                described_at = Some(t.elapsed());
            }
            if Instant::now() > deadline {
                eprintln!("!! full resync: not every WorkerDeployment reconciled in time");
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let secs = |d: Option<Duration>| {
            d.map(|d| format!("{:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| "not reached".into())
        };
        println!("\nfull resync: the controller process restarted (times from the restart)");
        row(
            "  ready (leader, caches synced)",
            format!("{:.1} s", ready.as_secs_f64()),
        );
        row(
            &format!("  {} reconciles (twc_reconcile_total)", self.total()),
            secs(reconciled_at),
        );
        if describes_expected {
            row(
                &format!("  {} DescribeWorkerDeployment", self.total()),
                secs(described_at),
            );
        }
        self.usage_row();
        if !written.is_empty() {
            let found = self.latencies(&written).await;
            let slowest = found.last().map(|(d, _, _)| *d).unwrap_or_default();
            self.resync_changes = Some((slowest, found.len(), written.len()));
            self.print_latencies(
                &format!("  {k} spec changes from ready, p50/p99/max"),
                k,
                &found,
            );
            self.finish_changes(want, "changes during the resync").await;
        }
        Ok(())
    }

    /// Writes image tag `tag` into each of `picked`, spread over `spread`: (WorkerDeployment,
    /// when written) and the generation each rollout must reach.
    async fn change_images(
        &mut self,
        picked: &[(String, String)],
        spread: Duration,
        tag: usize,
    ) -> anyhow::Result<(Written, HashMap<String, (i64, usize)>)> {
        let gap = spread / picked.len().max(1) as u32;
        let mut written = Vec::new();
        let mut want = HashMap::new();
        for (ns, name) in picked {
            let at = Instant::now();
            let generation = self.set_image(ns, name, tag).await?;
            written.push((ns.clone(), name.clone(), at));
            want.insert(format!("{ns}/{name}"), (generation, tag));
            tokio::time::sleep(gap).await;
        }
        Ok((written, want))
    }

    /// For each written WorkerDeployment, the time from its write to the first new versioned
    /// Deployment seen in a watch after it (waiting 120 s at most), fastest first.
    async fn latencies(&self, written: &Written) -> Vec<(Duration, String, String)> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut found = Vec::new();
            if let Ok(seen) = self.fleet.first_seen.lock() {
                for (ns, name, at) in written {
                    let wd = format!("{ns}/{name}");
                    let first = seen
                        .by_wd
                        .get(&wd)
                        .and_then(|v| v.iter().find(|(_, t)| *t >= *at));
                    if let Some((deployment, t)) = first {
                        found.push((t.duration_since(*at), wd, deployment.clone()));
                    }
                }
            }
            if found.len() == written.len() || Instant::now() > deadline {
                found.sort();
                return found;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Prints p50 / p99 / max of `found` (of `k` changes) and the three slowest.
    fn print_latencies(&self, what: &str, k: usize, found: &[(Duration, String, String)]) {
        let latencies: Vec<Duration> = found.iter().map(|(d, _, _)| *d).collect();
        row(
            what,
            format!(
                "{:.2} s / {:.2} s / {:.2} s (n={} of {k})",
                percentile(&latencies, 0.5).as_secs_f64(),
                percentile(&latencies, 0.99).as_secs_f64(),
                latencies.last().copied().unwrap_or_default().as_secs_f64(),
                latencies.len()
            ),
        );
        for (d, wd, deployment) in found.iter().rev().take(3) {
            row(
                "  slowest",
                format!("{wd}: {deployment} after {:.2} s", d.as_secs_f64()),
            );
        }
    }

    /// Waits for the rollouts of `want` (so later scenarios start from steady), then counts
    /// them with the others; returns how long that took.
    async fn finish_changes(
        &mut self,
        want: HashMap<String, (i64, usize)>,
        what: &str,
    ) -> Duration {
        let others = std::mem::take(&mut self.want);
        self.want = want;
        let done = self.wait_rollouts(Instant::now(), what).await;
        let changed = std::mem::take(&mut self.want);
        self.want = others;
        self.want.extend(changed);
        done
    }

    /// Patches the image of `--changes` WorkerDeployments, spread over a few seconds; spec write
    /// -> the new versioned Deployment seen in a watch.
    async fn spec_changes(&mut self) -> anyhow::Result<()> {
        let k = self.cli.changes.min(self.total());
        if k == 0 {
            return Ok(());
        }
        eprintln!("spec-change latency: {k} image changes...");
        let step = self.total() / k;
        let picked: Vec<(String, String)> = (0..k).map(|i| self.wds[i * step].clone()).collect();
        let tag = self.tag + 1;
        let spread = Duration::from_secs(self.cli.changes_spread_seconds);
        let (written, want) = self.change_images(&picked, spread, tag).await?;
        let found = self.latencies(&written).await;
        println!(
            "\nspec-change latency: {k} images patched over {} s (spec write -> new versioned Deployment seen in a watch)",
            self.cli.changes_spread_seconds
        );
        self.print_latencies("  p50 / p99 / max", k, &found);
        let done = self.finish_changes(want, "spec changes").await;
        if !self.cli.pods_never_start {
            row(
                &format!("  those {k} RolloutComplete"),
                format!("{:.1} s after the last write", done.as_secs_f64()),
            );
        }
        // Every other WorkerDeployment goes to the same tag in the rollout scenario.
        self.tag = tag;
        Ok(())
    }

    /// Writes image tag `tag` into `ns/name`'s pod template; returns the new generation.
    async fn set_image(&self, ns: &str, name: &str, tag: usize) -> anyhow::Result<i64> {
        let api: Api<WorkerDeployment> = Api::namespaced(self.client.clone(), ns);
        let patch =
            json!({"spec": {"template": {"spec": {"containers": [container(ns, name, tag)]}}}});
        let wd = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patch WorkerDeployment {ns}/{name}"))?;
        Ok(wd.metadata.generation.unwrap_or(0))
    }

    /// Every image changes at once.
    async fn rollout(&mut self) -> anyhow::Result<()> {
        let tag = self.tag + 1;
        let w = self.total();
        eprintln!("rollout: changing all {w} images at once...");
        // Settle: the previous versions drain and scale down.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let ctl_before = self.controller_metrics().await;
        let before = observe::sample(&self.env.temporal.metrics_address).await;
        let t = Instant::now();
        let wds = self.wds.clone();
        let generations: Vec<(String, (i64, usize))> =
            futures::stream::iter(wds.iter().map(|(ns, name)| {
                let this = &*self;
                async move {
                    let g = this.set_image(ns, name, tag).await?;
                    Ok::<_, anyhow::Error>((format!("{ns}/{name}"), (g, tag)))
                }
            }))
            .buffer_unordered(self.cli.concurrency)
            .try_collect()
            .await?;
        let written = t.elapsed();
        self.want = generations.into_iter().collect();
        self.tag = tag;
        let done = self.wait_rollouts(t, "rollout").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = observe::sample(&self.env.temporal.metrics_address).await;
        let ctl_after = self.controller_metrics().await;
        let samples = self.sampler.since(t);
        let minutes = done.as_secs_f64() / 60.0;
        println!("\nrollout: all {w} images changed at once");
        row(
            "  images written",
            format!("in {:.1} s", written.as_secs_f64()),
        );
        row(
            &format!("  all {w} RolloutComplete"),
            format!("{:.1} s after the first write", done.as_secs_f64()),
        );
        row(
            "  reads, max in 1 s",
            format!("{:.0}", observe::max_reads_in(&samples, 1)),
        );
        row(
            "  reads, max in 10 s",
            format!(
                "{:.0} ({:.1} per s)",
                observe::max_reads_in(&samples, 10),
                observe::max_reads_in(&samples, 10) / 10.0
            ),
        );
        let ctl_reads = match (samples.first(), samples.last()) {
            (Some(a), Some(b)) => b.reads - a.reads,
            _ => 0.0,
        };
        row(
            "  reads, whole rollout",
            format!(
                "{:.0} counted by the server, {ctl_reads:.0} by the controller",
                after.reads() - before.reads()
            ),
        );
        let controller = self.print_rpcs(&before, &after, minutes.max(1.0 / 60.0));
        row(
            "  controller's RPCs per WD, whole rollout",
            format!("{:.1}", controller / w as f64),
        );
        row(
            "  controller saw ResourceExhausted",
            format!(
                "{:.0}",
                observe::refused(&ctl_after) - observe::refused(&ctl_before)
            ),
        );
        self.usage_row();
        Ok(())
    }

    /// Pods that never start: the window figures while every WorkerDeployment waits.
    /// Then a full resync and spec changes, as in `steady`: nothing is read from Temporal for
    /// a version whose pods are not ready, so these measure the Kubernetes side alone.
    async fn pending(&mut self) -> anyhow::Result<()> {
        self.window("pending (pods never start: waiting for pollers)")
            .await;
        self.resync().await?;
        self.spec_changes().await?;
        Ok(())
    }

    /// The `--assert` properties; true when one failed.
    async fn check(&self) -> bool {
        let mut failed = false;
        println!("\nassertions");
        if self.incomplete > 0 {
            println!("  FAIL {} rollouts did not complete", self.incomplete);
            failed = true;
        } else {
            println!("  ok   every rollout completed");
        }
        let server = observe::sample(&self.env.temporal.metrics_address).await;
        let exhausted = server.exhausted_reads();
        let ctl = self.sampler.last().exhausted;
        if exhausted > 0.0 || ctl > 0.0 {
            println!(
                "  FAIL ResourceExhausted on reads: {exhausted:.0} counted by the server, {ctl:.0} by the controller"
            );
            failed = true;
        } else {
            println!("  ok   no ResourceExhausted on reads");
        }
        let others = server.exhausted_total() - exhausted;
        if others > 0.0 {
            println!(
                "  note {others:.0} ResourceExhausted on other operations (a deployment's own update rate), retried: {:?}",
                server.exhausted
            );
        }
        if let Some(limit) = self.cli.expect_resync_change_seconds {
            match self.resync_changes {
                Some((slowest, seen, of)) if seen == of && slowest.as_secs_f64() <= limit => {
                    println!(
                        "  ok   the {of} spec changes during the resync had their Deployment within {:.2} s (limit {limit} s)",
                        slowest.as_secs_f64()
                    );
                }
                Some((slowest, seen, of)) => {
                    println!(
                        "  FAIL spec changes during the resync: {seen} of {of} had their Deployment, the slowest after {:.2} s (limit {limit} s)",
                        slowest.as_secs_f64()
                    );
                    failed = true;
                }
                None => {
                    println!(
                        "  FAIL no spec changes were made during a resync (scenario steady or pending, --resync-changes)"
                    );
                    failed = true;
                }
            }
        }
        if let (Some(r), Some(b)) = (self.cli.expect_max_read_rps, self.cli.expect_burst) {
            let samples = self.sampler.since(self.started);
            // Every window of 10 samples against B + R * (its real span + 1 s): the tokens the
            // budget granted, counted when granted (a read counted when it completes may have
            // had its token seconds before on a loaded server; the 1 s is the samples' jitter).
            let max = observe::max_reads_in(&samples, 10);
            let over = observe::max_reads_over_budget(&samples, 10, r);
            let granted = match (samples.first(), samples.last()) {
                (Some(a), Some(z)) => z.granted - a.granted,
                _ => 0.0,
            };
            if granted <= 0.0 {
                // Nothing granted means the budget's metric was not found: no check at all.
                println!(
                    "  FAIL no read budget grants seen (twc_temporal_read_budget_wait_seconds_count)"
                );
                failed = true;
            } else if over > b {
                println!(
                    "  FAIL granted reads went {over:.1} over R * (span + 1 s) in some 10 s, more than the burst {b:.0}"
                );
                failed = true;
            } else {
                println!(
                    "  ok   granted reads within B + R * (span + 1 s) in every 10 s (at most {max:.0} completed in 10 samples; {granted:.0} granted in all, at most {over:.1} over R * (span + 1 s), burst {b:.0})"
                );
            }
        }
        failed
    }

    async fn fleet_summary(&self) {
        let c = &self.fleet.counts;
        println!("\nthe harness (fleet)");
        row(
            "  status writes",
            format!(
                "{} ({} retried)",
                c.status_writes.load(Ordering::Relaxed),
                c.status_errors.load(Ordering::Relaxed)
            ),
        );
        row(
            "  polls",
            format!(
                "{} ({} failed), {} pollers started, {} running",
                c.polls.load(Ordering::Relaxed),
                c.poll_errors.load(Ordering::Relaxed),
                c.pollers_started.load(Ordering::Relaxed),
                self.fleet.pollers().await
            ),
        );
        let by_op: BTreeMap<String, f64> = observe::sample(&self.env.temporal.metrics_address)
            .await
            .exhausted;
        if !by_op.is_empty() {
            row("  server ResourceExhausted by op", format!("{by_op:?}"));
        }
    }
}
