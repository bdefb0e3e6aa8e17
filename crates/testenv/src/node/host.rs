//! The machine's side of a real node: what it needs (checked before anything starts, each
//! missing piece named), the lock that keeps one real node per machine, the cleanup of what an
//! earlier node left behind, and the bridge its pods live on.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{BRIDGE, HOST_IP, POD_PREFIX, RUN_DIR, STATE_DIR};
use crate::{Error, paths};

/// The machine-wide lock: the bridge, the pods' cgroups, iptables and the directories are the
/// machine's, so two nodes at once would tear each other down.
const LOCK: &str = "/run/twc-node.lock";

const CLEANUP_SCRIPT: &str = include_str!("cleanup.sh");

/// Debian's CNI plugins (package `containernetworking-plugins`).
pub(crate) const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// What the node needs from the machine, each missing piece said in one line.
pub fn preflight() -> Result<(), Error> {
    let mut missing = Vec::new();
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false);
    if !root {
        missing.push(
            "root: containerd, runc and the kubelet make mounts, cgroups and network \
             namespaces, which needs root (run the tests as root)"
                .to_string(),
        );
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems.split_whitespace().any(|f| f == "overlay") {
        missing.push(
            "overlayfs: /proc/filesystems has no `overlay` (containerd's snapshotter needs it; \
             try `modprobe overlay`)"
                .into(),
        );
    }
    let v1 = Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    if !v1 && !v2 {
        missing.push(
            "cgroups: neither cgroup v1 (/sys/fs/cgroup/memory) nor v2 \
             (/sys/fs/cgroup/cgroup.controllers) is mounted"
                .into(),
        );
    }
    for (program, package) in [
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("containerd-shim-runc-v2", "containerd"),
        ("runc", "runc"),
        ("iptables", "iptables"),
        ("iptables-restore", "iptables"),
        ("ip", "iproute2"),
        ("umount", "mount"),
    ] {
        if which(program).is_none() {
            missing.push(format!(
                "`{program}` is not installed (Debian package `{package}`; hack/provision.sh \
                 installs it)"
            ));
        }
    }
    for plugin in ["bridge", "host-local", "loopback"] {
        if !Path::new(CNI_BIN_DIR).join(plugin).exists() {
            missing.push(format!(
                "the CNI plugin {CNI_BIN_DIR}/{plugin} is missing (Debian package \
                 `containernetworking-plugins`; hack/provision.sh installs it)"
            ));
        }
    }
    for bin in [
        paths::kubelet(),
        paths::kube_scheduler(),
        paths::kube_proxy(),
    ] {
        if !bin.exists() {
            missing.push(format!(
                "{} is missing (hack/provision.sh builds it)",
                bin.display()
            ));
        }
    }
    missing.extend(disk_short(Path::new("/var/lib")));
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::NodeUnavailable(missing))
    }
}

/// The free space the node needs where the kubelet keeps pods: the kubelet evicts every pod
/// below 1 % free (its `evictionHard`), and a test run writes a few GiB (images, logs), so a
/// nearly full disk shows as pods evicted in the middle of a test. Said before it starts.
fn disk_short(path: &Path) -> Option<String> {
    const MIN_FREE_BYTES: u64 = 4 << 30;
    const MIN_FREE_PERCENT: f64 = 3.0;
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    let block = stat.fragment_size();
    let free = stat.blocks_available().saturating_mul(block);
    let total = stat.blocks().saturating_mul(block).max(1);
    let percent = free as f64 * 100.0 / total as f64;
    (free < MIN_FREE_BYTES || percent < MIN_FREE_PERCENT).then(|| {
        format!(
            "disk: {} has {:.1} GiB free ({percent:.1} %); the kubelet evicts every pod below 1 % and a run writes a few GiB, so at least {} GiB and {MIN_FREE_PERCENT} % are needed (cargo's target/debug/incremental is often the largest thing to delete)",
            path.display(),
            free as f64 / (1u64 << 30) as f64,
            MIN_FREE_BYTES >> 30
        )
    })
}

/// `program` on `PATH` (with the sbin directories, where Debian puts iptables and ip).
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// Runs `program args` to completion; fails with its output.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String, Error> {
    let bin = which(program).unwrap_or_else(|| PathBuf::from(program));
    let out = Command::new(&bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io("node", &bin, e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Other(format!(
            "node: `{program} {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim(),
        )))
    }
}

/// The machine claimed for a node: lock held, leftovers removed, the bridge up with
/// [`HOST_IP`], so that kube-apiserver and Temporal can listen on it before the node starts.
pub struct Host {
    /// Held (flock) as long as the node lives.
    _lock: File,
    pub(crate) cleanup: PathBuf,
    pub(crate) dir: PathBuf,
}

impl Host {
    /// Checks the machine ([`preflight`]), takes the lock (waiting for another run's node to
    /// end), removes what an earlier node left and brings the bridge up. Blocking.
    pub fn claim(dir: &Path) -> Result<Self, Error> {
        preflight()?;
        std::fs::create_dir_all(dir).map_err(|e| Error::io("node", dir, e))?;
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK)
            .map_err(|e| Error::io("node", Path::new(LOCK), e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                eprintln!("testenv: waiting for another run's real node to end ({LOCK})");
                lock.lock()
                    .map_err(|e| Error::io("node", Path::new(LOCK), e))?;
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io("node", Path::new(LOCK), e));
            }
        }
        let cleanup = dir.join("node-cleanup.sh");
        std::fs::write(&cleanup, CLEANUP_SCRIPT).map_err(|e| Error::io("node", &cleanup, e))?;
        let host = Self {
            _lock: lock,
            cleanup,
            dir: dir.to_path_buf(),
        };
        host.clean()?;
        host.spawn_reaper()?;
        for d in [STATE_DIR, RUN_DIR] {
            std::fs::create_dir_all(d).map_err(|e| Error::io("node", Path::new(d), e))?;
        }
        run("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{HOST_IP}/{POD_PREFIX}"),
                "dev",
                BRIDGE,
            ],
        )?;
        run("ip", &["link", "set", BRIDGE, "up"])?;
        Ok(host)
    }

    /// Runs the cleanup script (see `cleanup.sh`); the lock must be held.
    pub(crate) fn clean(&self) -> Result<(), Error> {
        let proxy = paths::kube_proxy();
        let proxy = proxy.display().to_string();
        let script = self.cleanup.display().to_string();
        run("sh", &[&script, STATE_DIR, RUN_DIR, BRIDGE, &proxy]).map(|_| ())
    }

    /// A detached process that waits for this process to exit (however it ends: a test binary
    /// keeps its environment in a static, never dropped), then takes the lock and cleans up, so
    /// no container outlives the run that started it.
    fn spawn_reaper(&self) -> Result<(), Error> {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; exec flock {LOCK} sh {cleanup} {STATE_DIR} {RUN_DIR} {BRIDGE} {proxy}",
            pid = std::process::id(),
            cleanup = self.cleanup.display(),
            proxy = paths::kube_proxy().display(),
        );
        let log = self.dir.join("node-reaper.log");
        let out = File::create(&log).map_err(|e| Error::io("node", &log, e))?;
        let err = out.try_clone().map_err(|e| Error::io("node", &log, e))?;
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::io("node", Path::new("setsid"), e))?;
        Ok(())
    }
}
