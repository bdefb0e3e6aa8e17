//! Rollouts of worker containers: progressive with SIGTERM drains, a crash-looping build, and
//! the controller pod deleted and the kubelet restarted mid-rollout.

use std::time::Duration;

use crate::node::cluster;
use crate::workers::{
    build, container_id, crash_loop_v2, pods_of, ready, rolled_out_to, rolled_out_v1,
    set_worker_env, task_pid, wait_status,
};
use crate::{ROLLOUT, SYSTEM, TestResult};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progressive_rollout_of_worker_containers_drains_and_stops_the_old_with_sigterm()
-> TestResult {
    let env = cluster().await?;
    let (client, ns, _, v1) = rolled_out_v1(env, "node-roll").await?;
    let v1_pods = pods_of(&client, &ns, &v1).await;
    assert_eq!(v1_pods.len(), 2, "two workers of v1");
    for pod in &v1_pods {
        let id = container_id(pod).ok_or("a v1 worker has no containerd id")?;
        assert!(
            task_pid(env, &id).is_some(),
            "v1 worker {id} runs in containerd"
        );
    }

    // Watch v1's pods from now on: when the drained version is scaled down, each container
    // must end by its own SIGTERM handling (exit 0), not by SIGKILL (137) after the grace.
    let exits = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, i32)>::new()));
    let watch = {
        let api = Api::<Pod>::namespaced(client.clone(), &ns);
        let exits = exits.clone();
        let cfg = watcher::Config::default().labels(&format!("temporal.io/build-id={v1}"));
        tokio::spawn(async move {
            let mut stream = watcher::watcher(api, cfg).boxed();
            while let Some(Ok(event)) = stream.next().await {
                let (Event::Apply(pod) | Event::Delete(pod)) = event else {
                    continue;
                };
                let statuses = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.clone())
                    .unwrap_or_default();
                for c in statuses {
                    if let Some(t) = c.state.and_then(|s| s.terminated)
                        && let Ok(mut e) = exits.lock()
                        && !e.iter().any(|(p, _)| *p == pod.name_any())
                    {
                        e.push((pod.name_any(), t.exit_code));
                    }
                }
            }
        })
    };

    set_worker_env(&client, &ns, json!([{"name": "V", "value": "2"}])).await;
    let ramping = wait_status(&client, &ns, "v2 ramping at 50 %", ROLLOUT, |s| {
        build(s, "targetVersion").is_some_and(|t| t != v1)
            && s["targetVersion"]["rampPercentage"].as_f64() == Some(50.0)
    })
    .await;
    let v2 = build(&ramping, "targetVersion").ok_or("no target")?;
    assert_eq!(
        build(&ramping, "currentVersion").as_deref(),
        Some(v1.as_str())
    );
    wait_status(&client, &ns, "v2 current", ROLLOUT, |s| {
        rolled_out_to(s, Some(&v2))
    })
    .await;
    for pod in pods_of(&client, &ns, &v2).await {
        let id = container_id(&pod).ok_or("a v2 worker has no containerd id")?;
        assert!(
            task_pid(env, &id).is_some(),
            "v2 worker {id} runs in containerd"
        );
    }
    // v1 drains (no pinned workflow here), is scaled down after 2 s, and its containers get
    // SIGTERM.
    twc_testenv::wait_for("v1's pods gone", ROLLOUT, || {
        let client = client.clone();
        let ns = ns.clone();
        let v1 = v1.clone();
        async move {
            let left = pods_of(&client, &ns, &v1).await;
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{} pods left", left.len()))
            }
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let exits = exits.lock().map(|e| e.clone()).unwrap_or_default();
    assert!(!exits.is_empty(), "the watch saw v1's containers terminate");
    for (pod, code) in &exits {
        assert_eq!(*code, 0, "{pod} ended by its SIGTERM handling, not SIGKILL");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_exits_at_once_crash_loops_under_the_kubelet_and_v1_stays() -> TestResult {
    let env = cluster().await?;
    let (client, ns, _, v1) = rolled_out_v1(env, "node-crash").await?;
    let before: Vec<String> = pods_of(&client, &ns, &v1)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();

    let s = crash_loop_v2(&client, &ns).await;
    let v2 = build(&s, "failedVersion").ok_or("no failed build")?;
    assert_ne!(v2, v1);
    assert_eq!(build(&s, "currentVersion").as_deref(), Some(v1.as_str()));
    // The kubelet restarted the v2 containers after their back-off. One
    // container's third restart is what fails the build; the other replica, started a moment
    // later, may be a restart behind.
    let crashing = pods_of(&client, &ns, &v2).await;
    assert!(!crashing.is_empty(), "v2's pods are kept");
    let mut most = 0;
    for pod in &crashing {
        let c = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .ok_or("a v2 pod without container status")?;
        // Ready says little here: a container that just restarted is Ready (no probe) for
        // the moment before it exits again; that v2 never served is the failed mark above.
        assert!(
            c.restart_count >= 1,
            "{}: restarted {} times",
            pod.name_any(),
            c.restart_count
        );
        most = most.max(c.restart_count);
    }
    assert!(most >= 3, "no v2 container restarted three times: {most}");
    // v1 kept its workers: the same pods, never restarted.
    let after = pods_of(&client, &ns, &v1).await;
    let mut names: Vec<String> = after.iter().map(|p| p.name_any()).collect();
    names.sort();
    let mut before = before;
    before.sort();
    assert_eq!(names, before, "v1's pods are the same");
    // Ready, once the kubelet says so: another test of this binary restarts the kubelet, which
    // reports its containers unready until its first sync.
    twc_testenv::wait_for("v1's pods Ready", Duration::from_secs(60), || {
        let (client, ns, v1) = (client.clone(), ns.clone(), v1.clone());
        async move {
            let pods = pods_of(&client, &ns, &v1).await;
            let unready: Vec<String> = pods
                .iter()
                .filter(|p| !ready(p))
                .map(|p| p.name_any())
                .collect();
            if unready.is_empty() {
                Ok(())
            } else {
                Err(format!("not Ready: {unready:?}"))
            }
        }
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_pod_deleted_and_the_kubelet_restarted_mid_rollout() -> TestResult {
    let env = cluster().await?;
    let (client, ns, _, v1) = rolled_out_v1(env, "node-restart").await?;
    set_worker_env(&client, &ns, json!([{"name": "V", "value": "2"}])).await;
    let s = wait_status(&client, &ns, "v2 ramping", ROLLOUT, |s| {
        build(s, "targetVersion").is_some_and(|t| t != v1)
            && s["targetVersion"]["rampPercentage"].as_f64() == Some(50.0)
    })
    .await;
    let v2 = build(&s, "targetVersion").ok_or("no target")?;

    // The controller's pod goes (its ReplicaSet makes another), and the kubelet restarts.
    let controller_pods = Api::<Pod>::namespaced(client.clone(), SYSTEM);
    let lp = ListParams::default().labels("app.kubernetes.io/name=temporal-worker-controller");
    let old: Vec<String> = controller_pods
        .list(&lp)
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    for name in &old {
        controller_pods.delete(name, &Default::default()).await?;
    }
    env.node.restart_kubelet(Duration::from_secs(5)).await?;
    twc_testenv::wait_for("a new controller pod Ready", ROLLOUT, || {
        let api = controller_pods.clone();
        let lp = lp.clone();
        let old = old.clone();
        async move {
            let pods = api.list(&lp).await.map_err(|e| e.to_string())?.items;
            let fresh: Vec<&Pod> = pods
                .iter()
                .filter(|p| !old.contains(&p.name_any()))
                .collect();
            if fresh.iter().any(|p| ready(p)) {
                Ok(())
            } else {
                Err(format!("{} pods, none new and Ready", pods.len()))
            }
        }
    })
    .await?;

    let s = wait_status(
        &client,
        &ns,
        "v2 current after the restarts",
        ROLLOUT,
        |s| rolled_out_to(s, Some(&v2)),
    )
    .await;
    // No version lost: v1 is still known (draining or drained), with its Deployment.
    let deprecated = s["deprecatedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        deprecated.iter().any(|d| d["buildID"] == v1.as_str()),
        "v1 is still a known version: {deprecated:?}"
    );
    Ok(())
}
