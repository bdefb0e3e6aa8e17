//! `twc-chaos`: rollouts of real workers while faults are injected, with invariants checked
//! from outside the whole time.
//!
//! It starts the local environment (etcd, kube-apiserver, kube-controller-manager, the pod
//! runner, and the Temporal dev server on a SQLite file, so that it can be restarted), then
//! two controller replicas with leader election, and a few WorkerDeployments running the
//! example worker. Half of them use a ClusterConnection, half a namespaced Connection; the
//! second runs each version as two worker groups, `workflows` and an activity-only
//! `activities`, two Deployments of one build ID, and every check below holds for each group's
//! Deployment (`groups.rs`). It then
//! runs rounds. Each round starts a pinned workflow on every WorkerDeployment and changes
//! every image, then waits until each one converges. Meanwhile it injects faults at seeded
//! random times:
//!
//! - SIGKILL of a controller replica, then a restart;
//! - a leader failover (the leader is killed, the standby takes over);
//! - a kube-apiserver restart;
//! - a Temporal restart;
//! - a `connectionRef` change;
//! - image changes in quick succession (a new image, then the previous one back);
//! - a scaler taking over replicas: a WorkerResourceTemplate rendering an HPA (for the
//!   activity group, with groups), then the current version scaled to 2 as an HPA would;
//! - the client certificate Secret, the one every WorkerDeployment mounts, renewed (a new key
//!   pair from the same CA, the old one still valid, as cert-manager renews): every connection
//!   is mutual TLS through a TLS proxy in front of the dev server, so the controller must dial
//!   again with the new Secret and restart every worker, at its pace (I5);
//! - the client certificates moved to a new CA, the old one then distrusted and every
//!   connection closed: the workers must have been restarted with the new Secret (`tls.rs`);
//! - the auth mode switched: the namespaced Connection moves from mutual TLS to an API key or
//!   back, and every worker on it must run the new mode in time (I5, `auth_switch.rs`);
//! - the apiserver answering 409 and 500: the replicas reach it through a proxy that, for a
//!   few seconds, refuses some writes with 409 Conflict and loses the answer of some served
//!   requests with a 500 (`twc_testenv::api_proxy`);
//! - the leader paused (SIGSTOP) until the standby leads, then woken past its lease;
//! - a `temporalNamespace` change mid-drain (once per WorkerDeployment: a long pinned workflow
//!   and a new image make its current version Draining, then it moves): its Draining versions
//!   must keep their workers in the namespace it left, their pinned workflows complete there;
//! - another server mid-drain: the same with `connectionRef` changed to a ClusterConnection of
//!   a second dev server (after either move, the versions left behind are deleted by hand once
//!   drained where they poll, as docs/safety.md asks a person to: `operator.rs`);
//! - by the driver, one round in three: a WorkerDeployment deleted while its previous version
//!   drains a pinned workflow (every other time with both replicas down), then created again
//!   (`deletions.rs`).
//!
//! An observer reads Temporal (with the checker's own calls and reading of the answers, never
//! the controller's `temporal::describe`) and the apiserver every 200 ms and checks; a read
//! that fails is "not known", read again, never a pass. A watch on the Deployments sees every
//! change between two looks, so a scale to 0 and back is judged too (`watch.rs`):
//!
//! - I1: new work is never routed (Current or Ramping) to a version without ready workers, nor
//!   to one whose pods are ready but do not poll: once a pod of it has been ready 90 s and
//!   Temporal has not restarted within 90 s, Temporal's own worker list (`ListWorkers`, fed by
//!   the workers' heartbeats) must show a running worker of it;
//! - I2: a Draining version (open pinned workflows) is never scaled to 0, deleted or being
//!   deleted, and every pinned workflow started during the run completes, on the version it
//!   was pinned to at its first workflow task. A version the worker deployment's summary
//!   still calls Draining but whose own drainage status says Drained (the summary lags it,
//!   seen for 27 s on the real node) has drained: the controller trusts that status too;
//!   the completion of every pinned workflow is checked either way;
//! - I3: after the run, with every WorkerDeployment deleted, every Connection and
//!   ClusterConnection can be deleted, and Temporal keeps no worker deployment of them;
//! - I4: once the faults stop, each WorkerDeployment converges to its spec's target (the build
//!   ID of its template current in Temporal, nothing ramping, its pods ready; the controller's
//!   status is not consulted) within a
//!   bound (the bound plus the longest retry backoff); and replicas a scaler set are never
//!   written over while that version is current. Rollouts slower than the bound while faults
//!   go on are counted, not judged;
//! - I5: never more than `--restart-pace` versioned Deployments restarting at once for a
//!   renewed Secret at one place, and every running worker on the new credentials before the
//!   old ones expire (in this run, of 90-day certificates, within 10 minutes): `restarts.rs`.
//!
//! With `--real-node`, the workers are containers of the example worker image under containerd
//! and a real kubelet (`crates/testenv/src/node`; the images from `hack/image.sh`), each
//! version with two replicas, and two more faults join: a worker container killed (SIGKILL,
//! the kubelet restarts it) and the kubelet restarted.
//!
//! With `--namespace-scoped`, the replicas run as a ServiceAccount with the generated
//! namespace-scoped RBAC and watch only the run's namespace, every WorkerDeployment is on the
//! Connection, the faults that need a ClusterConnection are left out, and one joins: the
//! watched namespace deleted, then created again (`scoped.rs`, `namespace_gone.rs`).
//!
//! The seed is printed; the same seed replays the same choices (the timing of the servers is
//! not seeded). Exits non-zero on any violation.

mod auth_switch;
mod deletions;
mod faults;
mod groups;
mod invariants;
mod namespace_gone;
mod operator;
mod replicas;
mod report;
mod restarts;
mod rollouts;
mod run;
mod scoped;
mod setup;
mod temporal_view;
mod tls;
mod watch;

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::bail;
use clap::Parser;
use twc_testenv::api_proxy::ApiProxy;
use twc_testenv::node::NodeEnv;
use twc_testenv::{LocalImage, Options, TemporalOptions, TemporalServer, TestEnv, paths};

use faults::inject;
use invariants::{check_deletion, check_pinned, observe};
use replicas::{restart_stopped, start_replica, wait_for_leader};
use report::print_report;
use restarts::watch_restarts;
use rollouts::{drive, wait_converged};
use setup::{setup, tag_images};
use watch::watch_deployments;

pub(crate) use run::{Env, Place, Report, Rng, Run};

const IMAGE: &str = "example.com/chaos-worker";
/// The example worker's image as `hack/image.sh` names it; on a real node, [`IMAGE`]'s tags
/// are its aliases.
const WORKER_IMAGE: &str = "docker.io/twc/example-worker:0.1.0";
/// How many `blip-N` tags a real node has for the rapid image changes.
const BLIPS: u64 = 40;
const CLUSTER_CONNECTION: &str = "chaos";
/// The ClusterConnection to the second Temporal server.
const CLUSTER_CONNECTION_B: &str = "chaos-b";
const CONNECTION: &str = "local";
const IDENTITY: &str = "twc-chaos";
/// The client certificate Secret every connection names, and the server name of the proxy.
const MTLS_SECRET: &str = "chaos-mtls";
const SERVER_NAME: &str = "temporal.chaos";
/// Every call to a server gives up after this long (a server restarting may leave a call
/// hanging).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The replicas the stand-in scaler sets.
const SCALED: i32 = 2;
/// How often the observer looks.
const OBSERVE_EVERY: Duration = Duration::from_millis(200);

#[derive(Parser)]
#[command(
    name = "twc-chaos",
    about = "Rollouts of real workers under injected faults, invariants checked from outside"
)]
struct Cli {
    /// Seed of every random choice (printed; a random one when not given).
    #[arg(long)]
    seed: Option<u64>,
    /// Rollouts to complete (one per WorkerDeployment per round).
    #[arg(long, default_value_t = 100)]
    rollouts: usize,
    /// WorkerDeployments (one replica each).
    #[arg(long, default_value_t = 4)]
    worker_deployments: usize,
    /// A WorkerDeployment that has not reached its spec's target this long after a change
    /// (or a fault) violates I4.
    #[arg(long, default_value_t = 180)]
    converge_seconds: u64,
    /// Mean seconds between faults.
    #[arg(long, default_value_t = 10)]
    fault_every_seconds: u64,
    /// Inject only this fault (its name in the report, e.g. "client certificates to a new
    /// CA"); the driver's deletions are still made.
    #[arg(long)]
    only_fault: Option<String>,
    /// Run the workers as containers on a real node (containerd + kubelet; needs root and
    /// the images of `hack/image.sh`), with two replicas per version and the node's faults.
    #[arg(long)]
    real_node: bool,
    /// The self-test (`hack/chaos-self-test.sh`): the controller runs a deliberately broken
    /// variant (`TWC_CHAOS_BREAK`), and the run succeeds only if this invariant (I1 to I5)
    /// caught it. The checks after the rollouts wait only the bound (no faults to back off
    /// from).
    #[arg(long)]
    expect_violation: Option<String>,
    /// The controllers' `--restart-pace`: at most this many versioned Deployments restart at
    /// once per place for a renewed Secret (I5). Below the controller's default so that the
    /// run's few WorkerDeployments meet it.
    #[arg(long, default_value_t = 2)]
    restart_pace: usize,
    /// Install the controller namespace-scoped: its replicas run as a ServiceAccount with the
    /// generated namespaced RBAC and watch only the run's namespace; every WorkerDeployment is
    /// on the namespaced Connection; the faults that need a ClusterConnection are left out and
    /// the watched namespace is deleted and created again (`namespace_gone.rs`).
    #[arg(long)]
    namespace_scoped: bool,
    /// Directory for data and logs (wiped at start).
    #[arg(long, default_value = "target/chaos")]
    dir: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let seed = cli.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    println!("== twc-chaos seed {seed} (replay: --seed {seed})");
    let dir = twc_testenv::fresh_dir(&cli.dir)?;
    let temporal = TemporalOptions {
        db_file: Some(dir.join("temporal.db")),
        ..Default::default()
    };
    let rounds = cli.rollouts.div_ceil(cli.worker_deployments.max(1));
    let env = if cli.real_node {
        let env =
            NodeEnv::start_with(&dir, &[paths::image_archive("example-worker")], temporal).await?;
        tag_images(&env.node, rounds)?;
        Env::Node(env)
    } else {
        let env = TestEnv::start(
            &Options {
                temporal,
                ..Default::default()
            },
            &dir,
        )
        .await?;
        let worker = paths::workspace_binary("twc-example-worker", "twc-example-worker")?;
        env.pod_runner
            .register_image(IMAGE, LocalImage::new(worker));
        Env::Runner(env)
    };
    let cp = env.control_plane();
    let client = cp.client().await?;
    twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;
    // The replicas reach the apiserver through a proxy that answers 409 and 500 on demand.
    let api_proxy = ApiProxy::start(&cp.server_url, &cp.ca_pem).await?;
    let kubeconfig = dir.join("controllers.kubeconfig");
    let ns = twc_testenv::control_plane::create_namespace(&client, "chaos").await?;
    let mut extra = vec![format!("--restart-pace={}", cli.restart_pace)];
    if cli.namespace_scoped {
        scoped::grant(&client, &ns).await?;
        scoped::write_kubeconfig(cp, &api_proxy, &kubeconfig).await?;
        extra.push(format!("--watch-namespaces={ns}"));
    } else {
        api_proxy.write_kubeconfig(cp.kubeconfig(), &kubeconfig)?;
    }
    let controllers = Mutex::new([
        start_replica(&kubeconfig, &dir, 0, &extra)?,
        start_replica(&kubeconfig, &dir, 1, &extra)?,
    ]);
    wait_for_leader(&controllers, Duration::from_secs(60)).await?;

    let tls = tls::Tls::new()?;
    let real_node = env.node().is_some();
    let tls_address = tls.proxy(real_node, &env.temporal().address).await?;
    // The second server, which the server change moves a WorkerDeployment to: its own SQLite
    // file, never restarted; the same namespaces (the pool's names), the same CA.
    let dir_b = dir.join("temporal-b");
    std::fs::create_dir_all(&dir_b)?;
    let server_b = TemporalServer::start(
        &TemporalOptions {
            db_file: Some(dir_b.join("temporal.db")),
            ..Default::default()
        },
        &dir_b,
    )
    .await?;
    let tls_address_b = tls.proxy(real_node, &server_b.address).await?;
    let temporal_ns = env.temporal().namespace().await?;
    let moved_ns = env.temporal().namespace().await?;
    let names: Vec<String> = (0..cli.worker_deployments.max(1))
        .map(|i| format!("wd-{i}"))
        .collect();
    let run = Run {
        temporal: env.temporal().connect().await?,
        temporal_b: server_b.connect().await?,
        tls_address_b,
        env: &env,
        api_proxy: &api_proxy,
        replicas: if cli.real_node { 2 } else { 1 },
        tls,
        tls_address,
        client,
        ns,
        temporal_ns,
        moved_ns,
        names,
        converge: Duration::from_secs(cli.converge_seconds),
        self_test: cli.expect_violation.is_some(),
        restart_pace: cli.restart_pace,
        renewals: Default::default(),
        report: Mutex::new(Report::default()),
        done: AtomicBool::new(false),
        spec_lock: tokio::sync::Mutex::new(()),
        namespace_scoped: cli.namespace_scoped,
        away: AtomicBool::new(false),
        namespace_lock: tokio::sync::Mutex::new(()),
        dir: dir.clone(),
    };
    setup(&run).await?;
    println!(
        "== {} WorkerDeployments in {} converged; rolling out under faults",
        run.names.len(),
        run.ns
    );

    let started = Instant::now();
    let mut rng = Rng(seed);
    let fault_seed = rng.next();
    let (driven, ..) = tokio::join!(
        async {
            let result = drive(&run, &controllers, &mut rng, rounds).await;
            run.done.store(true, Ordering::SeqCst);
            run.report().faults_ended = Some(Instant::now());
            result
        },
        inject(
            &run,
            &controllers,
            Rng(fault_seed),
            cli.fault_every_seconds,
            cli.only_fault.as_deref()
        ),
        observe(&run),
        watch_deployments(&run),
        watch_restarts(&run),
    );
    driven?;
    let rolled = started.elapsed();
    // I4: once the faults stop, everything converges within the bound plus the longest retry
    // backoff (a WorkerDeployment that failed many times in a row waits up to 5 minutes).
    restart_stopped(&controllers)?;
    let settle = match cli.expect_violation {
        Some(_) => run.converge,
        None => run.converge + twc_controller::error::MAX_BACKOFF,
    };
    for name in &run.names {
        if let Err(e) = wait_converged(&run, name, settle).await {
            run.report()
                .violate("I4", format!("after the faults stopped: {e}"));
        }
    }
    check_pinned(&run).await;
    restarts::judge_remaining(&run).await;
    // Faults may have left a replica down: the deletions need a leader.
    restart_stopped(&controllers)?;
    wait_for_leader(&controllers, Duration::from_secs(60)).await?;
    check_deletion(&run).await;

    let report = run.report();
    print_report(&report, seed, rolled, &run);
    if let Ok(mut c) = controllers.lock() {
        for r in c.iter_mut() {
            r.process.stop(Duration::from_secs(5));
        }
    }
    let violations: usize = report.violations.values().map(Vec::len).sum();
    if let Some(expected) = &cli.expect_violation {
        let caught = report.violations.get(expected.as_str()).map_or(0, Vec::len);
        let variant = std::env::var("TWC_CHAOS_BREAK").unwrap_or_default();
        println!("self-test: variant {variant:?}: {expected} caught {caught} violations");
        if caught == 0 {
            bail!("{expected} did not catch the broken variant {variant:?} (seed {seed})");
        }
        return Ok(());
    }
    if violations > 0 {
        bail!(
            "{violations} invariant violations (seed {seed}); logs under {}",
            dir.display()
        );
    }
    Ok(())
}
