//! The node's configuration files: containerd's (its CRI plugin), the pods' network (CNI) and
//! the kubelet's. Pure functions of the paths and ports, so each is read in one place.

use serde_json::json;

use super::{BRIDGE, HOST_IP, PAUSE_IMAGE, POD_SUBNET};

/// containerd 1.6's configuration (version 2): its own root, state and socket, so it never
/// meets a containerd the machine may run; runc with the cgroupfs driver, as the kubelet;
/// the pause image built here (no registry serves one); CNI from Debian's plugins.
pub fn containerd(root: &str, state: &str, socket: &str, cni_bin: &str, cni_conf: &str) -> String {
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # A random port for exec/attach/port-forward streams, not the fixed 10010.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # A sandbox asks for oom_score_adj -998 and a Guaranteed pod for -997; lowering it needs
  # CAP_SYS_RESOURCE, which some machines (these among them) withhold even from root, and runc
  # then fails every sandbox ("can't get final child's PID from pipe"). This keeps the score
  # no lower than containerd's own, as rootless setups do; the kubelet's own settings stand.
  restrict_oom_score_adj = true
  max_container_log_line_size = 16384

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
"#
    )
}

/// The pods' network: a bridge with the host as gateway ([`HOST_IP`]), addresses from
/// [`POD_SUBNET`]; no masquerade (nothing leaves the machine).
pub fn cni(ipam_dir: &str) -> serde_json::Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "twc-pods",
        "plugins": [{
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{ "subnet": POD_SUBNET, "gateway": HOST_IP }]],
                "routes": [{ "dst": "0.0.0.0/0" }],
                "dataDir": ipam_dir,
            },
        }],
    })
}

/// Where the kubelet keeps things and listens.
pub struct Kubelet<'a> {
    pub runtime_socket: &'a str,
    pub pod_logs: &'a str,
    pub port: u16,
    pub healthz_port: u16,
}

/// The kubelet's configuration. cgroup v1 is refused by default since 1.35
/// (`failCgroupV1: false` accepts it); the eviction and image GC thresholds are set so that a
/// test machine's full disk or small memory never evicts the pods under test; the kubelet's
/// own API takes anonymous requests (only the apiserver, on this machine, calls it: logs).
pub fn kubelet(k: &Kubelet<'_>) -> serde_json::Value {
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": false,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": format!("unix://{}", k.runtime_socket),
        "port": k.port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": k.healthz_port,
        "authentication": {
            "anonymous": { "enabled": true },
            "webhook": { "enabled": false },
        },
        "authorization": { "mode": "AlwaysAllow" },
        "failSwapOn": false,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "podLogsDir": k.pod_logs,
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": false,
        "nodeStatusUpdateFrequency": "5s",
        "shutdownGracePeriod": "0s",
        "rotateCertificates": false,
        "serverTLSBootstrap": false,
        "hairpinMode": "hairpin-veth",
        "maxPods": 110,
    })
}
