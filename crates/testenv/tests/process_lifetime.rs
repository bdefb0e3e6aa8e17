//! Servers die with the process that started them, however it ends.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// PIDs whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            (fields.get(1)? == &pid.to_string() && fields.first()? != &"Z").then_some(child)
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn servers_die_when_their_parent_is_killed() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut parent = Command::new(env!("CARGO_BIN_EXE_twc-local-env"))
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start twc-local-env: {e}"));
    let stdout = parent.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut ready = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_default();
        if line.contains("Press Ctrl-C") {
            ready = true;
            break;
        }
    }
    assert!(ready, "twc-local-env never became ready");
    let servers = children(parent.id());
    assert!(
        servers.len() >= 4,
        "expected etcd, kube-apiserver, kube-controller-manager and temporal, got {servers:?}"
    );
    // SIGKILL: no destructor, no signal handler runs in the parent.
    parent.kill().unwrap_or_else(|e| panic!("{e}"));
    let _ = parent.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left: Vec<u32> = servers.clone();
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left.retain(|p| alive(*p));
    }
    assert!(left.is_empty(), "servers outlived their parent: {left:?}");
}
