//! The controller replicas: started, killed and restarted, and which one leads.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::bail;
use twc_testenv::controller::Controller;

use crate::IDENTITY;

/// One controller replica: the `twc` binary with leader election, on short lease timings.
pub(crate) type Replica = Controller;

/// Replica `i`, reaching the apiserver through `kubeconfig` (the fault-injecting proxy's),
/// with `extra` arguments of `twc run` (its restart pace, the namespaces it watches).
pub(crate) fn start_replica(
    kubeconfig: &Path,
    dir: &Path,
    i: usize,
    extra: &[String],
) -> anyhow::Result<Replica> {
    let mut lease = vec![
        "--leader-election-lease-seconds",
        "6",
        "--leader-election-renew-deadline-seconds",
        "4",
        "--leader-election-retry-seconds",
        "1",
    ];
    lease.extend(extra.iter().map(String::as_str));
    Ok(Controller::start_named_via(
        kubeconfig,
        dir,
        &format!("controller-{i}"),
        IDENTITY,
        &lease,
    )?)
}

/// The replica that leads with its caches synced, from `/readyz`.
pub(crate) async fn leader_of(addrs: &[String]) -> Option<usize> {
    for (i, addr) in addrs.iter().enumerate() {
        if let Some(body) = http_get(addr, "/readyz").await
            && body.contains("leader; caches synced")
        {
            return Some(i);
        }
    }
    None
}

pub(crate) fn addrs(controllers: &Mutex<[Replica; 2]>) -> Vec<String> {
    controllers
        .lock()
        .map(|c| c.iter().map(|r| r.addr.clone()).collect())
        .unwrap_or_default()
}

pub(crate) async fn wait_for_leader(
    controllers: &Mutex<[Replica; 2]>,
    timeout: Duration,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(i) = leader_of(&addrs(controllers)).await {
            return Ok(i);
        }
        if Instant::now() > deadline {
            bail!("no controller replica leads after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts again every replica that is not running.
pub(crate) fn restart_stopped(controllers: &Mutex<[Replica; 2]>) -> anyhow::Result<()> {
    let mut c = controllers
        .lock()
        .map_err(|_| anyhow::anyhow!("controllers lock poisoned"))?;
    for r in c.iter_mut() {
        if r.process.try_wait().is_some() {
            r.process.restart(Duration::from_secs(1))?;
        }
    }
    Ok(())
}

async fn http_get(addr: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream =
        tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut raw = String::new();
    tokio::time::timeout(Duration::from_secs(2), stream.read_to_string(&mut raw))
        .await
        .ok()?
        .ok()?;
    raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}
