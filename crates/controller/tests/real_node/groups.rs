//! Worker groups on the node: one version made of a workflow worker and an activity-only
//! worker (the example worker image, each polling its own task queue), rolled out Progressive,
//! with an HPA per group per version that the kube-controller-manager's HPA controller acts on.

use std::time::Duration;

use crate::node::{cluster, tenant};
use crate::workers::{build, pods_of, ready, rolled_out_to, wait_status};
use crate::{ROLLOUT, TestResult, WORKER_IMAGE};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use twc_api::{WorkerDeployment, WorkerResourceTemplate};
use twc_controller::plan::group_ids;

/// The task queue of the activity group (the workflow group polls `w`, the WorkerDeployment's
/// name).
const ACTIVITY_QUEUE: &str = "w-activities";
/// How long the pinned workflow's activity runs: long enough for v2 to ramp and be promoted
/// while it runs on v1.
const ACTIVITY_SECONDS: u64 = 75;

/// The two groups at version `v`: `workflows` (one replica; its `Work` runs its activity on
/// the activity group's queue) and `activities` (no replicas: its HPA owns them), with
/// `activities_env` added to the activity worker.
fn groups(v: &str, activities_env: Value) -> Value {
    let container = |env: Value| {
        json!({"spec": {"terminationGracePeriodSeconds": 20,
            "containers": [{"name": "worker", "image": WORKER_IMAGE, "env": env}]}})
    };
    let mut activity_env = vec![
        json!({"name": "V", "value": v}),
        json!({"name": "WORKER_ROLE", "value": "activities"}),
        json!({"name": "TEMPORAL_TASK_QUEUE", "value": ACTIVITY_QUEUE}),
    ];
    activity_env.extend(activities_env.as_array().cloned().unwrap_or_default());
    json!([
        {"name": "workflows", "deployment": {"replicas": 1, "template": container(json!([
            {"name": "V", "value": v},
            {"name": "WORKER_ACTIVITY_SECONDS", "value": ACTIVITY_SECONDS.to_string()},
            {"name": "WORKER_ACTIVITY_TASK_QUEUE", "value": ACTIVITY_QUEUE},
        ]))}},
        {"name": "activities", "deployment": {"template": container(json!(activity_env))}},
    ])
}

async fn set_groups(client: &Client, ns: &str, groups: Value) {
    Api::<WorkerDeployment>::namespaced(client.clone(), ns)
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerGroups": groups}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch {ns}/w: {e}"));
}

/// The pods of one group of a version.
async fn group_pods(client: &Client, ns: &str, build_id: &str, group: &str) -> Vec<Pod> {
    pods_of(client, ns, build_id)
        .await
        .into_iter()
        .filter(|p| p.labels().get(group_ids::WORKER_GROUP).map(String::as_str) == Some(group))
        .collect()
}

/// Waits until the `group` Deployment of `build_id` wants `replicas` and has them Ready.
async fn wait_group_ready(client: &Client, ns: &str, build_id: &str, group: &str, replicas: i32) {
    let name = group_ids::deployment_name("w", group, build_id);
    let api = Api::<Deployment>::namespaced(client.clone(), ns);
    twc_testenv::wait_for(&format!("{name}: {replicas} Ready"), ROLLOUT, || {
        let (api, name) = (api.clone(), name.clone());
        async move {
            let d = api.get(&name).await.map_err(|e| e.to_string())?;
            let want = d.spec.as_ref().and_then(|s| s.replicas);
            let ready = d.status.as_ref().and_then(|s| s.ready_replicas);
            if want == Some(replicas) && ready == Some(replicas) {
                Ok(())
            } else {
                Err(format!("spec {want:?}, ready {ready:?}"))
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_groups_roll_out_progressive_drain_a_pinned_workflow_and_fail_a_crashing_group()
-> TestResult {
    let env = cluster().await?;
    let (client, ns, temporal_ns) = tenant(env, "node-groups").await?;
    // An HPA for the activity group only (at least 2): the HPA controller scales each
    // version's activity Deployment; the workflow group keeps its one replica.
    let hpa: WorkerResourceTemplate = serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
        "metadata": {"name": "activities-hpa", "namespace": ns},
        "spec": {"workerDeploymentRef": {"name": "w"}, "workerGroup": "activities",
            "template": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "spec": {"scaleTargetRef": {}, "minReplicas": 2, "maxReplicas": 3}}}
    }))?;
    Api::<WorkerResourceTemplate>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &hpa)
        .await?;
    let wd: WorkerDeployment = serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": "w", "namespace": ns},
        "spec": {
            "workerOptions": {"connectionRef": {"name": "temporal"}, "temporalNamespace": temporal_ns},
            "rollout": {"strategy": "Progressive", "steps": [{"rampPercentage": 50, "pauseDuration": "30s"}]},
            "sunset": {"scaledownDelay": "2s", "deleteDelay": "1h"},
            "workerGroups": groups("1", json!([])),
        }
    }))?;
    Api::<WorkerDeployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &wd)
        .await?;
    let s = wait_status(&client, &ns, "v1 rolled out", ROLLOUT, |s| {
        rolled_out_to(s, None)
    })
    .await;
    let v1 = build(&s, "currentVersion").ok_or("no current version")?;
    let named: Vec<&str> = s["currentVersion"]["workerGroups"]
        .as_array()
        .map(|g| g.iter().filter_map(|g| g["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        named,
        ["activities", "workflows"],
        "sorted, as upstream: {s}"
    );
    wait_group_ready(&client, &ns, &v1, "workflows", 1).await;
    wait_group_ready(&client, &ns, &v1, "activities", 2).await;

    // A Work workflow pinned to v1 runs its slow activity on v1's activity group.
    let temporal = env.temporal.connect().await?;
    twc_testenv::temporal::start_workflow(
        &temporal,
        &temporal_ns,
        "w",
        "Work",
        "pinned",
        Some("1"),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    set_groups(&client, &ns, groups("2", json!([]))).await;
    let ramping = wait_status(&client, &ns, "v2 ramping at 50 %", ROLLOUT, |s| {
        build(s, "targetVersion").is_some_and(|t| t != v1)
            && s["targetVersion"]["rampPercentage"].as_f64() == Some(50.0)
    })
    .await;
    let v2 = build(&ramping, "targetVersion").ok_or("no target")?;
    // Ramping means every group of v2 is available, its HPA included.
    wait_group_ready(&client, &ns, &v2, "activities", 2).await;
    wait_status(&client, &ns, "v2 current", ROLLOUT, |s| {
        rolled_out_to(s, Some(&v2))
    })
    .await;
    // v1 drains: the pinned workflow is still on its activity, so v1's groups keep running.
    let status = twc_testenv::temporal::workflow_status(&temporal, &temporal_ns, "pinned").await?;
    assert_eq!(status, "Running", "the activity outlives the rollout");
    let s = wait_status(&client, &ns, "v1 draining", ROLLOUT, |s| {
        s["deprecatedVersions"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["buildID"] == v1.as_str()))
    })
    .await;
    assert!(s.to_string().contains("Draining"), "{s}");
    let mut v1_activity_pods = Vec::new();
    for group in ["workflows", "activities"] {
        let pods = group_pods(&client, &ns, &v1, group).await;
        assert!(
            !pods.is_empty() && pods.iter().all(ready),
            "v1's {group} group keeps its Ready workers while its workflow runs"
        );
        if group == "activities" {
            v1_activity_pods = pods.iter().map(|p| p.name_any()).collect();
        }
    }

    twc_testenv::wait_for(
        "the pinned workflow completed",
        Duration::from_secs(ACTIVITY_SECONDS) + ROLLOUT,
        || {
            let temporal = temporal.clone();
            let temporal_ns = temporal_ns.clone();
            async move {
                let s = twc_testenv::temporal::workflow_status(&temporal, &temporal_ns, "pinned")
                    .await
                    .map_err(|e| e.to_string())?;
                (s == "Completed").then_some(()).ok_or(s)
            }
        },
    )
    .await?;
    // Its activity ran on v1's activity group: the worker's identity ends with its hostname,
    // the pod's name (cut at 63 characters).
    let ran_on =
        twc_testenv::temporal::activity_identities(&temporal, &temporal_ns, "pinned").await?;
    let on_v1 = |identity: &String| {
        let host = identity.rsplit('@').next().unwrap_or_default();
        !host.is_empty() && v1_activity_pods.iter().any(|p| p.starts_with(host))
    };
    assert!(
        !ran_on.is_empty() && ran_on.iter().all(on_v1),
        "the pinned workflow's activity ran on {ran_on:?}, not on v1's {v1_activity_pods:?}"
    );
    // Drained, both of v1's groups go together.
    twc_testenv::wait_for("v1's pods gone", ROLLOUT, || {
        let (client, ns, v1) = (client.clone(), ns.clone(), v1.clone());
        async move {
            let left = pods_of(&client, &ns, &v1).await;
            let names: Vec<String> = left.iter().map(|p| p.name_any()).collect();
            names.is_empty().then_some(()).ok_or(format!("{names:?}"))
        }
    })
    .await?;

    // v3's activity group crash-loops under the kubelet: the whole version fails, v2 stays.
    set_groups(
        &client,
        &ns,
        groups("3", json!([{"name": "WORKER_MODE", "value": "crash"}])),
    )
    .await;
    let s = wait_status(&client, &ns, "v3 failed as crash-looping", ROLLOUT, |s| {
        s["failedVersion"]["reason"] == "WorkersCrashLooping"
    })
    .await;
    let v3 = build(&s, "failedVersion").ok_or("no failed build")?;
    assert_ne!(v3, v2);
    assert_eq!(build(&s, "currentVersion").as_deref(), Some(v2.as_str()));
    let message = s["failedVersion"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("activities"), "names the group: {message}");

    // v4's activity workers run (Ready) but never poll: its Deployments are available, so it
    // rolls out as upstream rolls it out, and once current the condition names the group
    // whose pods are not among its workers in Temporal's worker list (the workflow group's are).
    set_groups(
        &client,
        &ns,
        groups("4", json!([{"name": "WORKER_MODE", "value": "no-poll"}])),
    )
    .await;
    let s = wait_status(
        &client,
        &ns,
        "v4 current, its silent group named",
        2 * ROLLOUT,
        |s| {
            build(s, "currentVersion").is_some_and(|c| c != v2 && c != v3)
                && progressing(s)
                    .is_some_and(|(status, why, _)| status == "True" && why == "WaitingForPollers")
        },
    )
    .await;
    let (_, _, message) = progressing(&s).unwrap_or_default();
    assert!(
        message.contains("worker group(s): activities (") && !message.contains("workflows"),
        "{message}"
    );
    Ok(())
}

/// Progressing's (status, reason, message).
fn progressing(s: &Value) -> Option<(String, String, String)> {
    let c = s["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Progressing")?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}
