//! The controller as a process: `twc run` against a [`ControlPlane`], as a user runs it, for the
//! demo and the local playground.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::Error;
use crate::control_plane::ControlPlane;
use crate::process::{ChildProcess, Spec};

/// The controller as a user runs it: the `twc` binary, with leader election and its endpoints.
pub struct Controller {
    pub process: ChildProcess,
    /// `host:port` of its health and metrics endpoints.
    pub addr: String,
}

/// Polling Temporal fast (1 s moving, 10 s steady; the test servers refresh drainage every
/// second) so tests go quickly.
const FAST: [&str; 6] = [
    "--fast-poll-seconds",
    "1",
    "--steady-poll-seconds",
    "10",
    "--drainage-poll-seconds",
    "1",
];

impl Controller {
    /// Starts `twc run` against `env` as `identity`, logging to `dir/controller.log`.
    pub fn start(env: &ControlPlane, dir: &Path, identity: &str) -> Result<Self, Error> {
        Self::start_named(env, dir, "controller", identity, &[])
    }

    /// The same as process `name` (log `dir/<name>.log`), with `extra` arguments for
    /// `twc run`, polling Temporal fast (1 s moving, 10 s steady) so tests go quickly.
    pub fn start_named(
        env: &ControlPlane,
        dir: &Path,
        name: &str,
        identity: &str,
        extra: &[&str],
    ) -> Result<Self, Error> {
        Self::start_named_via(&env.kubeconfig_path, dir, name, identity, extra)
    }

    /// [`Controller::start_named`], reaching the apiserver through `kubeconfig` (a proxy's,
    /// from [`crate::api_proxy::ApiProxy::write_kubeconfig`]).
    pub fn start_named_via(
        kubeconfig: &Path,
        dir: &Path,
        name: &str,
        identity: &str,
        extra: &[&str],
    ) -> Result<Self, Error> {
        let mut args = FAST.to_vec();
        args.extend_from_slice(extra);
        Self::start_process(kubeconfig, dir, name, identity, &args)
    }

    /// Process `name` (log `dir/<name>.log`) with leader election, its endpoints on a free
    /// port and exactly `args` besides: every other flag of `twc run` keeps its production
    /// default (poll intervals included), for benchmarks.
    pub fn start_with_args<S: AsRef<str>>(
        env: &ControlPlane,
        dir: &Path,
        name: &str,
        identity: &str,
        args: &[S],
    ) -> Result<Self, Error> {
        Self::start_process(&env.kubeconfig_path, dir, name, identity, args)
    }

    fn start_process<S: AsRef<str>>(
        kubeconfig: &Path,
        dir: &Path,
        name: &str,
        identity: &str,
        args: &[S],
    ) -> Result<Self, Error> {
        // `TWC_CONTROLLER_BINARY` runs another build (a release build, for figures).
        let bin = match std::env::var_os("TWC_CONTROLLER_BINARY") {
            Some(path) => std::path::PathBuf::from(path),
            None => crate::paths::workspace_binary("temporal-worker-controller", "twc")?,
        };
        let addr = format!("127.0.0.1:{}", crate::process::free_port()?);
        let mut spec = Spec::new(name, bin, dir.join(format!("{name}.log")))
            .args([
                "run",
                "--identity",
                identity,
                "--leader-elect",
                "--leader-election-namespace",
                "default",
                "--metrics-bind-address",
                &addr,
                "--health-probe-bind-address",
                &addr,
            ])
            .args(args.iter().map(|a| a.as_ref()));
        spec.env
            .push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
        // The allocator's settings, as the controller's image sets them (Dockerfile): glibc's
        // `MALLOC_*` variables and its tunables.
        for (key, value) in std::env::vars() {
            if key.starts_with("MALLOC_") || key == "GLIBC_TUNABLES" {
                spec.env.push((key, value));
            }
        }
        Ok(Self {
            process: ChildProcess::start(&spec)?,
            addr,
        })
    }

    /// GET `path` of its endpoints: (200?, body).
    pub async fn get(&self, path: &str) -> Option<(bool, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&self.addr).await.ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.ok()?;
        let ok = raw.starts_with("HTTP/1.0 200") || raw.starts_with("HTTP/1.1 200");
        Some((
            ok,
            raw.split_once("\r\n\r\n")
                .map(|(_, b)| b.to_string())
                .unwrap_or_default(),
        ))
    }

    /// Waits (60 s at most) until `/readyz` says it leads with synced caches.
    pub async fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.process.check_running()?;
            if let Some((true, body)) = self.get("/readyz").await
                && body.contains("leader")
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Other(format!(
                    "the controller is not ready after 60 s; see {}",
                    self.process.log_path().display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Resident memory (now and peak) and CPU time so far, from /proc.
    pub fn usage(&self) -> String {
        self.usage_figures().to_string()
    }

    /// The figures of [`Controller::usage`], as numbers (zero when /proc cannot be read).
    pub fn usage_figures(&self) -> Usage {
        Usage::of_pid(self.process.pid())
    }

    /// Temporal RPCs the controller made, from its metrics.
    pub async fn rpcs(&self) -> f64 {
        let body = self
            .get("/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        temporal_rpcs(&body)
    }
}

/// The Temporal RPCs counted in a `/metrics` body (the sum of `twc_temporal_rpc_total`).
pub fn temporal_rpcs(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("twc_temporal_rpc_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A process's resources, from /proc.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// Resident memory now (VmRSS), MiB.
    pub rss_mib: f64,
    /// Peak resident memory (VmHWM), MiB.
    pub peak_rss_mib: f64,
    /// The part of `rss_mib` that is the process's own memory (RssAnon: heap, stacks), MiB.
    pub anon_rss_mib: f64,
    /// The part of `rss_mib` mapped from files (RssFile: the binary's code and data), MiB.
    pub file_rss_mib: f64,
    /// User + system CPU time so far, seconds.
    pub cpu_seconds: f64,
}

impl Usage {
    /// The figures of process `pid`, from /proc (zero when it cannot be read): the controller
    /// run here, or the one in a container of the real node (its task's pid).
    pub fn of_pid(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name: utime and stime are the 14th and 15th of the line.
        let ticks: f64 = stat
            .rsplit_once(')')
            .map(|(_, rest)| {
                rest.split_whitespace()
                    .skip(11)
                    .take(2)
                    .filter_map(|v| v.parse::<f64>().ok())
                    .sum()
            })
            .unwrap_or(0.0);
        Self {
            rss_mib: kib("VmRSS:") / 1024.0,
            peak_rss_mib: kib("VmHWM:") / 1024.0,
            anon_rss_mib: kib("RssAnon:") / 1024.0,
            file_rss_mib: kib("RssFile:") / 1024.0,
            cpu_seconds: ticks / 100.0,
        }
    }
}

impl std::fmt::Display for Usage {
    /// Resident memory (now and peak) and CPU time so far.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {:.0} MiB (peak {:.0} MiB), CPU {:.2} s",
            self.rss_mib, self.peak_rss_mib, self.cpu_seconds
        )
    }
}
