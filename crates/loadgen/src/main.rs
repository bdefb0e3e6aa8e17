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
//!   full resync and spec changes (the Kubernetes side alone: nothing is read from Temporal);
//! - `renew`: the connection is mutual TLS through a proxy, every namespace holds the client
//!   certificate Secret; it is renewed, and the controller restarts every versioned Deployment
//!   onto it: the most restarting at once and the time until all restarted and rolled out, once
//!   per `--restart-paces` (the controller restarted with each), with `--pod-ready-seconds` for
//!   each restart's new pods.
//!
//! `--assert` exits non-zero unless every rollout completed, no ResourceExhausted was returned,
//! and (with `--expect-max-read-rps R --expect-burst B`) every 10 s of server-side reads stayed
//! within B + 10 R.

mod check;
mod create;
mod fleet;
mod measure;
mod mtls;
mod observe;
mod renew;
mod restarts;
mod scenarios;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::{Parser, ValueEnum};
use kube::Client;
use serde_json::{Value, json};
use twc_testenv::controller::Controller;
use twc_testenv::{ControlPlaneOptions, Options, TemporalOptions, TestEnv};

use observe::{Sampler, Tracker};

const CLUSTER_CONNECTION: &str = "loadgen";
const IDENTITY: &str = "twc-loadgen";
const IMAGE: &str = "example.com/loadgen-worker";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Steady,
    Rollout,
    Pending,
    Renew,
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
    /// A new pod template of a Deployment that is up (a restart) takes this long before its
    /// new pods are ready; 0: at once.
    #[arg(long, default_value_t = 0)]
    pod_ready_seconds: u64,
    /// Of `renew`: run it once per pace (comma-separated, e.g. `0,3`), the controller started
    /// with `--restart-pace` of each in turn; unset: once, with the controller's own.
    #[arg(long, value_delimiter = ',')]
    restart_paces: Vec<usize>,
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
    /// The run's directory (data and logs).
    dir: PathBuf,
    controller: Controller,
    /// The `--restart-pace` the controller runs with (None: its default).
    pace: Option<usize>,
    /// Of `renew`: the CA and the TLS proxy in front of the dev server.
    mtls: Option<mtls::Mtls>,
    /// Of `renew`: the watch of the versioned Deployments.
    restarts: Option<restarts::Restarts>,
    /// Each renewal: the pace it ran with, its figures.
    renewals: Vec<(String, restarts::Outcome)>,
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
    /// The WorkerDeployments the resync changed (already at the next tag: the spec changes
    /// that follow pick others).
    resync_changed: std::collections::HashSet<(String, String)>,
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
    let renews = cli.scenario.contains(&Scenario::Renew);
    if renews && cli.pods_never_start {
        bail!("the renew scenario needs the fleet (no --pods-never-start)");
    }
    if !cli.restart_paces.is_empty()
        && cli
            .controller_args
            .iter()
            .any(|a| a.starts_with("--restart-pace"))
    {
        bail!("--restart-paces sets the controller's --restart-pace: give one or the other");
    }
    let started = Instant::now();
    let dir = twc_testenv::fresh_dir(&cli.dir)?;
    let mut temporal = TemporalOptions {
        namespace_pool: 0,
        ..Default::default()
    };
    if cli.production_drainage {
        // The server's own drainage timing; the workers' heartbeats stay on.
        temporal.dynamic_config = vec![(
            twc_testenv::temporal::WORKER_HEARTBEATS.0.into(),
            twc_testenv::temporal::WORKER_HEARTBEATS.1.into(),
        )];
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
    let mtls = if renews {
        Some(mtls::Mtls::start(&env.temporal.address).await?)
    } else {
        None
    };

    let (tracker, tracker_task) = Tracker::spawn(client.clone());
    let fleet = fleet::Fleet::new(
        client.clone(),
        env.temporal.address.clone(),
        !cli.pods_never_start,
        Duration::from_secs(cli.pod_ready_seconds),
    );
    let fleet_task = tokio::spawn(fleet.clone().run());

    let pace = cli
        .restart_paces
        .first()
        .copied()
        .or_else(|| pace_in(&cli.controller_args));
    let mut controller = Controller::start_with_args(
        &env.control_plane,
        &dir,
        "controller",
        IDENTITY,
        &controller_args(&cli, cli.restart_paces.first().copied()),
    )?;
    controller.wait_ready().await?;
    let (sampler, sampler_task) = Sampler::spawn(controller.addr.clone());
    let mut tasks = vec![fleet_task, sampler_task, tracker_task];
    let restarts = renews.then(|| {
        let (restarts, task) = restarts::Restarts::spawn(client.clone());
        tasks.push(task);
        restarts
    });

    let mut run = Run {
        cli,
        env,
        client,
        dir,
        controller,
        pace,
        mtls,
        restarts,
        renewals: Vec::new(),
        fleet,
        tracker,
        sampler,
        wds: Vec::new(),
        want: HashMap::new(),
        premature: 0,
        tag: 1,
        incomplete: 0,
        resync_changes: None,
        resync_changed: Default::default(),
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
            Scenario::Renew => run.renew().await?,
        }
    }
    if run.cli.assert {
        failed = run.check().await;
    }
    run.fleet_summary().await;
    if run.premature > 0 {
        println!(
            "\nodd: up to {} WorkerDeployments at once reported Ready=RolloutComplete for their new generation while the old build was still current",
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

/// `twc run`'s arguments: `--controller-arg`s, and `--restart-pace pace` when given.
fn controller_args(cli: &Cli, pace: Option<usize>) -> Vec<String> {
    let mut args = cli.controller_args.clone();
    if let Some(pace) = pace {
        args.push(format!("--restart-pace={pace}"));
    }
    args
}

/// The `--restart-pace` among `args`, if any.
fn pace_in(args: &[String]) -> Option<usize> {
    args.iter().enumerate().find_map(|(i, a)| {
        match a.strip_prefix("--restart-pace") {
            Some(rest) => rest
                .strip_prefix('=')
                .or_else(|| args.get(i + 1).map(|s| s.as_str())),
            None => None,
        }
        .and_then(|v| v.parse().ok())
    })
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
    if let Some(m) = &run.mtls {
        row(
            "connection",
            format!(
                "mutual TLS through a TLS proxy ({}) to the dev server; one client certificate Secret ({}) per namespace",
                m.address(),
                mtls::SECRET
            ),
        );
        row(
            "restart pace",
            if cli.restart_paces.is_empty() {
                run.pace_label()
            } else {
                format!(
                    "{} in turn (the controller restarted with each)",
                    cli.restart_paces
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", then ")
                )
            },
        );
    }
    row(
        "pod ready after a restart",
        if cli.pod_ready_seconds == 0 {
            "at once".to_string()
        } else {
            format!(
                "{} s (the status shows the rolling update under way until then)",
                cli.pod_ready_seconds
            )
        },
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
