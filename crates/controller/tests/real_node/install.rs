//! What the install gives: the chart's controller running the image built here under the
//! restricted standard, and worker containers with the injected environment.

use crate::node::cluster;
use crate::workers::{container_id, pods_of, ready, rolled_out_v1, task_pid};
use crate::{CONTROLLER_IMAGE, SYSTEM, TestResult};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use twc_testenv::node::{self};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_the_image_built_here_under_the_restricted_standard() -> TestResult {
    let env = cluster().await?;
    let client = env.client().await?;
    let pods = Api::<Pod>::namespaced(client.clone(), SYSTEM)
        .list(&ListParams::default().labels("app.kubernetes.io/name=temporal-worker-controller"))
        .await?
        .items;
    assert_eq!(pods.len(), 1, "one controller pod: {pods:?}");
    let pod = &pods[0];
    assert!(ready(pod), "Ready through its /readyz probe");
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(spec.containers[0].image.as_deref(), Some(CONTROLLER_IMAGE));
    assert_eq!(spec.node_name.as_deref(), Some(node::NAME));
    let id = container_id(pod).ok_or("the controller's container has no containerd id")?;
    let pid = task_pid(env, &id).ok_or("containerd runs no task for the controller")?;
    // The image's user, and the read-only root the chart asks for.
    let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let uid = proc_status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap_or_default();
    assert!(
        uid.split_whitespace().skip(1).all(|u| u == "65532"),
        "runs as 65532: {uid}"
    );
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap_or_default();
    assert!(
        root.split_whitespace()
            .nth(5)
            .is_some_and(|o| o.split(',').any(|o| o == "ro")),
        "read-only root: {root}"
    );
    // No shell in the image: the container's file system has none.
    let rootfs = format!("/proc/{pid}/root");
    for shell in ["bin/sh", "bin/bash", "bin/dash", "usr/bin/sh"] {
        assert!(
            !std::path::Path::new(&rootfs).join(shell).exists(),
            "the image has {shell}"
        );
    }
    let restarts = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(-1, |c| c.restart_count);
    assert_eq!(restarts, 0, "the controller never restarted");
    Ok(())
}

/// The worker image's container has what the controller injects (a read of its environment
/// from the node's side: `/proc/<pid>/environ` of the real container process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_containers_get_the_injected_environment() -> TestResult {
    let env = cluster().await?;
    let (client, ns, temporal_ns, v1) = rolled_out_v1(env, "node-env").await?;
    let pod = pods_of(&client, &ns, &v1)
        .await
        .into_iter()
        .next()
        .ok_or("no v1 pod")?;
    let id = container_id(&pod).ok_or("no containerd id")?;
    let pid = task_pid(env, &id).ok_or("no task")?;
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    let vars: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    let get = |k: &str| {
        vars.iter()
            .find_map(|v| v.strip_prefix(&format!("{k}=")).map(str::to_string))
    };
    assert_eq!(
        get("TEMPORAL_WORKER_BUILD_ID").as_deref(),
        Some(v1.as_str())
    );
    assert_eq!(
        get("TEMPORAL_NAMESPACE").as_deref(),
        Some(temporal_ns.as_str())
    );
    assert_eq!(
        get("TEMPORAL_ADDRESS").as_deref(),
        Some(env.temporal_address_for_pods())
    );
    Ok(())
}
