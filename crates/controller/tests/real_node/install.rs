//! What the install gives: the chart's controller running the image built here under the
//! restricted standard, worker containers with the injected environment, and a team's own
//! release judged by Helm 4's `--wait`.

use std::time::Duration;

use crate::node::cluster;
use crate::workers::{container_id, pods_of, ready, rolled_out_to, rolled_out_v1, task_pid};
use crate::{CONTROLLER_IMAGE, SYSTEM, TestResult};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use twc_api::WorkerDeployment;
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

/// Helm 4's `--wait` judges our kinds with kstatus: a team's release holding a Connection and a
/// WorkerDeployment succeeds once the workers are rolled out, and one whose template the
/// controller refuses fails at once with the reason instead of waiting out its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_wait_succeeds_once_rolled_out_and_fails_at_once_on_an_invalid_template()
-> TestResult {
    let env = cluster().await?;
    let client = env.client().await?;
    let ns = env.namespace("node-helm").await?;
    let temporal_ns = env.temporal_namespace().await?;
    let kubeconfig = env.control_plane.kubeconfig_path.display().to_string();
    let chart = "crates/controller/tests/fixtures/worker-chart";
    let install = |release: &'static str, extra: Vec<String>| {
        let mut args: Vec<String> = [
            "install",
            release,
            chart,
            "--namespace",
            &ns,
            "--kubeconfig",
            &kubeconfig,
            "--wait",
            "--timeout",
            "3m",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for v in [
            format!("hostPort={}", env.temporal_address_for_pods()),
            format!("temporalNamespace={temporal_ns}"),
        ]
        .into_iter()
        .chain(extra)
        {
            args.extend(["--set".to_string(), v]);
        }
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let started = std::time::Instant::now();
            (twc_testenv::node::helm(&args).await, started.elapsed())
        }
    };

    let (good, took) = install("good", vec![]).await;
    good.map_err(|e| format!("helm install --wait of a good release: {e}"))?;
    let wd = Api::<WorkerDeployment>::namespaced(client.clone(), &ns)
        .get("good")
        .await?;
    let s = serde_json::to_value(&wd.status)?;
    assert!(
        rolled_out_to(&s, None),
        "helm returned before the rollout was done ({took:?}): {s}"
    );

    let (bad, took) = install("bad", vec!["cpuLimit=lots".into()]).await;
    let Err(e) = bad else {
        return Err("helm install --wait of an invalid template succeeded".into());
    };
    let said = e.to_string();
    assert!(
        took < Duration::from_secs(60),
        "failed only after {took:?}: {said}"
    );
    assert!(
        said.contains("spec.template") && said.contains("cpu"),
        "helm names the reason: {said}"
    );
    Ok(())
}
