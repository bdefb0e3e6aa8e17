//! The example worker's WorkerDeployment, its status, and its pods and containers as the
//! kubelet and containerd report them.

use std::time::Duration;

use crate::node::tenant;
use crate::{ROLLOUT, WORKER_IMAGE};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use twc_api::WorkerDeployment;
use twc_testenv::node::NodeEnv;

/// A WorkerDeployment of the example worker image: Progressive (one 50 % step of `pause`, 30 s
/// at least, as in TWC),
/// two replicas, quick sunset; `env` goes to the worker container (a change makes a version).
pub(crate) fn worker_deployment(
    ns: &str,
    temporal_ns: &str,
    pause: &str,
    env: Value,
) -> WorkerDeployment {
    serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": "w", "namespace": ns},
        "spec": {
            "replicas": 2,
            "workerOptions": {"connectionRef": {"name": "temporal"}, "temporalNamespace": temporal_ns},
            "rollout": {"strategy": "Progressive", "steps": [{"rampPercentage": 50, "pauseDuration": pause}]},
            "sunset": {"scaledownDelay": "2s", "deleteDelay": "1h"},
            "template": {"spec": {
                "terminationGracePeriodSeconds": 20,
                "containers": [{"name": "worker", "image": WORKER_IMAGE, "env": env}]
            }}
        }
    }))
    .unwrap_or_else(|e| panic!("a WorkerDeployment: {e}"))
}

pub(crate) async fn set_worker_env(client: &Client, ns: &str, env: Value) {
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "worker", "image": WORKER_IMAGE, "env": env}
    ]}}}});
    Api::<WorkerDeployment>::namespaced(client.clone(), ns)
        .patch("w", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patch {ns}/w: {e}"));
}

pub(crate) fn status(wd: &WorkerDeployment) -> Value {
    serde_json::to_value(&wd.status).unwrap_or_default()
}

pub(crate) fn build(s: &Value, which: &str) -> Option<String> {
    s[which]["buildID"].as_str().map(str::to_string)
}

/// Waits until `pred` holds for `ns/w`'s status; says the status on timeout.
pub(crate) async fn wait_status(
    client: &Client,
    ns: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
    twc_testenv::wait_for(&format!("{ns}/w: {what}"), timeout, || {
        let api = api.clone();
        let pred = &pred;
        async move {
            let wd = api.get("w").await.map_err(|e| e.to_string())?;
            let s = status(&wd);
            if pred(&s) { Ok(s) } else { Err(s.to_string()) }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn rolled_out_to(s: &Value, build_id: Option<&str>) -> bool {
    let current = build(s, "currentVersion");
    current.is_some()
        && build(s, "targetVersion") == current
        && build_id.is_none_or(|b| current.as_deref() == Some(b))
        && s["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// A tenant whose WorkerDeployment `w` has rolled out its first version: (client, namespace,
/// Temporal namespace, v1's build ID).
pub(crate) async fn rolled_out_v1(
    env: &NodeEnv,
    prefix: &str,
) -> Result<(Client, String, String, String), Box<dyn std::error::Error>> {
    let (client, ns, temporal_ns) = tenant(env, prefix).await?;
    let wd = worker_deployment(
        &ns,
        &temporal_ns,
        "30s",
        json!([{"name": "V", "value": "1"}]),
    );
    Api::<WorkerDeployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &wd)
        .await?;
    let s = wait_status(&client, &ns, "v1 rolled out", ROLLOUT, |s| {
        rolled_out_to(s, None)
    })
    .await;
    let v1 = build(&s, "currentVersion").ok_or("no current version")?;
    Ok((client, ns, temporal_ns, v1))
}

/// Rolls `ns/w` to a v2 whose workers exit at once, and waits until the controller fails it as
/// crash looping: its status then.
pub(crate) async fn crash_loop_v2(client: &Client, ns: &str) -> Value {
    set_worker_env(
        client,
        ns,
        json!([{"name": "V", "value": "2"}, {"name": "WORKER_MODE", "value": "crash"}]),
    )
    .await;
    // The kubelet backs off 10 s, 20 s, 40 s: the third restart comes about 70 s in. Between
    // restarts, kubelet 1.35 reports the container as `terminated` (reason Error), not as
    // `waiting: CrashLoopBackOff` as the pod runner did: the controller must see both.
    wait_status(client, ns, "v2 failed as crash-looping", ROLLOUT, |s| {
        s["failedVersion"]["reason"] == "WorkersCrashLooping"
    })
    .await
}

/// The pods of `ns` with build ID `build_id` (TWC's label).
pub(crate) async fn pods_of(client: &Client, ns: &str, build_id: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("temporal.io/build-id={build_id}")))
        .await
        .unwrap_or_else(|e| panic!("list pods: {e}"))
        .items
}

/// The containerd id of a pod's first container, as the kubelet reports it.
pub(crate) fn container_id(pod: &Pod) -> Option<String> {
    let s = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    s.container_id
        .as_deref()?
        .strip_prefix("containerd://")
        .map(str::to_string)
}

pub(crate) fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The process containerd runs for container `id`: its pid, from `ctr tasks ls`.
pub(crate) fn task_pid(env: &NodeEnv, id: &str) -> Option<u32> {
    env.node
        .tasks()
        .ok()?
        .into_iter()
        .find(|(task, _, status)| task == id && status == "RUNNING")
        .map(|(_, pid, _)| pid)
}
