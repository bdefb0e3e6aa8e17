//! A real local environment for tests and the demo, like controller-runtime's envtest plus a
//! Temporal dev server and a kubelet stand-in:
//!
//! * [`ControlPlane`]: etcd + kube-apiserver (token auth, RBAC, default admission chain) +
//!   kube-controller-manager (garbage collector, Deployments, ReplicaSets, namespaces,
//!   ServiceAccounts), on loopback with free ports;
//! * [`TemporalServer`]: `temporal server start-dev` with fast drainage;
//! * [`PodRunner`]: binds pods to a Node and runs their containers as local processes;
//! * [`node::NodeEnv`]: instead of the pod runner, a real node (containerd, runc, a kubelet,
//!   kube-proxy, kube-scheduler) running pods as containers of images built here.
//!
//! Tests share one environment per test binary through [`shared`]; each test makes its own
//! namespaces ([`TestEnv::namespace`], [`TestEnv::temporal_namespace`]) and its own clients
//! ([`TestEnv::client`]). Every process dies with the test binary (see [`process`]). Logs are
//! under `target/testenv/<pid>/`; errors print the path.
//!
//! Binaries come from `hack/provision.sh` (versions in `hack/versions.env`).

pub mod api_proxy;
pub mod control_plane;
pub mod controller;
pub mod crds;
pub mod deployments;
mod error;
pub mod grafana;
pub mod kstatus;
pub mod node;
pub mod paths;
pub mod pki;
pub mod pod_runner;
pub mod process;
pub mod prometheus;
pub mod temporal;
pub mod tls_proxy;
pub mod wait;

/// The signals [`process::ChildProcess::signal`] sends.
pub use nix::sys::signal::Signal;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use control_plane::{ControlPlane, ControlPlaneOptions};
pub use error::Error;
pub use pod_runner::{LocalImage, PodRunner};
pub use temporal::{TemporalOptions, TemporalServer};
pub use wait::wait_for;

/// The node name the pod runner registers.
pub const NODE_NAME: &str = "twc-testenv-node";

/// Options for [`TestEnv::start`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub control_plane: ControlPlaneOptions,
    pub temporal: TemporalOptions,
}

/// A running environment. Dropping it stops every process it started.
pub struct TestEnv {
    pub control_plane: ControlPlane,
    pub temporal: TemporalServer,
    pub pod_runner: PodRunner,
    dir: PathBuf,
    /// How long [`TestEnv::start`] took.
    pub startup: Duration,
}

impl TestEnv {
    /// Starts everything under `dir` (data and logs) and waits until it is ready. The pod
    /// runner runs on the calling tokio runtime, which must outlive the environment.
    pub async fn start(opts: &Options, dir: &Path) -> Result<Self, Error> {
        let started = Instant::now();
        std::fs::create_dir_all(dir).map_err(|e| Error::io("testenv", dir, e))?;
        let (control_plane, temporal) = tokio::try_join!(
            ControlPlane::start(&opts.control_plane, dir),
            TemporalServer::start(&opts.temporal, dir),
        )?;
        let client = control_plane.client().await?;
        let pod_runner = PodRunner::start(client, NODE_NAME, &dir.join("pods")).await?;
        Ok(Self {
            control_plane,
            temporal,
            pod_runner,
            dir: dir.to_path_buf(),
            startup: started.elapsed(),
        })
    }

    /// Where data and logs of this environment are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new admin Kubernetes client for the calling runtime.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        self.control_plane.client().await
    }

    /// A fresh Kubernetes namespace `<prefix>-<random>`.
    pub async fn namespace(&self, prefix: &str) -> Result<String, Error> {
        self.control_plane.namespace(prefix).await
    }

    /// A Temporal namespace no other test uses.
    pub async fn temporal_namespace(&self) -> Result<String, Error> {
        self.temporal.namespace().await
    }

    /// Fails, naming the component and its log, if any server has exited.
    pub fn check_running(&self) -> Result<(), Error> {
        self.control_plane.check_running()?;
        self.temporal.check_running()
    }

    /// (component, RSS bytes) for every server process.
    pub fn rss(&self) -> Vec<(String, u64)> {
        let mut out = self.control_plane.rss();
        if let Some(r) = self.temporal.rss_bytes() {
            out.push(("temporal".into(), r));
        }
        out
    }
}

struct Shared {
    env: TestEnv,
    /// The runtime the pod runner lives on; it lives as long as the test binary.
    _runtime: tokio::runtime::Runtime,
}

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();

/// The environment shared by every test in this test binary, started on first use.
///
/// It runs on its own runtime, so any test runtime can use it; make clients per test with
/// [`TestEnv::client`]. If it failed to start, every caller gets the same error.
pub async fn shared() -> Result<&'static TestEnv, Error> {
    let result = tokio::task::spawn_blocking(|| {
        SHARED.get_or_init(|| {
            // A plain thread: a runtime cannot be blocked on from inside another one.
            std::thread::spawn(start_shared)
                .join()
                .unwrap_or_else(|_| Err("the testenv start thread panicked".into()))
        })
    })
    .await
    .map_err(|e| Error::Other(format!("testenv start task failed: {e}")))?;
    match result {
        Ok(shared) => {
            shared.env.check_running()?;
            Ok(&shared.env)
        }
        Err(e) => Err(Error::Other(format!(
            "the shared test environment did not start: {e}"
        ))),
    }
}

fn start_shared() -> Result<Shared, String> {
    let dir = paths::log_dir();
    prune_old_runs(&dir);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("testenv")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build the testenv runtime: {e}"))?;
    let env = runtime
        .block_on(TestEnv::start(&Options::default(), &dir))
        .map_err(|e| e.to_string())?;
    eprintln!(
        "testenv: ready in {:.1}s; logs in {}",
        env.startup.as_secs_f64(),
        dir.display()
    );
    Ok(Shared {
        env,
        _runtime: runtime,
    })
}

/// Keeps the logs of the last few runs under `target/testenv/`.
fn prune_old_runs(current: &Path) {
    let Some(parent) = current.parent() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let mut runs: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path() != current)
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    runs.sort();
    let keep = 6;
    for (_, path) in runs.iter().rev().skip(keep) {
        let _ = std::fs::remove_dir_all(path);
    }
}

/// Empties (or creates) `dir` and returns its absolute path.
pub fn fresh_dir(dir: &Path) -> Result<PathBuf, Error> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| Error::io("testenv", dir, e))?;
    std::fs::canonicalize(dir).map_err(|e| Error::io("testenv", dir, e))
}

/// Resident memory of process `pid` in bytes, from `/proc`.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
