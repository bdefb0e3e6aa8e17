//! The exposition of every family: names, labels, and their place in docs/metrics.md.

use super::*;

#[test]
fn exposition_names_every_family() {
    let m = Metrics::new();
    m.reconciled("WorkerDeployment", Duration::from_millis(3));
    m.rpc(
        "DescribeWorkerDeployment",
        temporalio_client::tonic::Code::Ok,
        Duration::ZERO,
    );
    m.worker_deployment(
        "ns",
        "wd",
        &[
            VersionStatus::Current,
            VersionStatus::Draining,
            VersionStatus::Draining,
        ],
        5.0,
        &[],
    );
    let text = m.encode();
    assert!(text.contains("twc_reconcile_total{controller=\"WorkerDeployment\"} 1"));
    assert!(
        text.contains("twc_temporal_rpc_total{rpc=\"DescribeWorkerDeployment\",code=\"Ok\"} 1")
    );
    assert!(text.contains(
        "twc_worker_deployment_versions{namespace=\"ns\",worker_deployment=\"wd\",status=\"Draining\"} 2"
    ));
    m.forget_worker_deployment("ns", "wd");
    assert!(!m.encode().contains("worker_deployment=\"wd\""));
}

fn condition(type_: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    serde_json::from_value(serde_json::json!({
        "type": type_, "status": "True", "reason": "RolloutComplete", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A condition's series holds what the status says now: a new status or reason replaces it
/// (an alert on `== 1` never sees the old one), a deleted object has none left.
#[test]
fn condition_series_follow_the_status() {
    let m = Metrics::new();
    let mut ready = condition("Ready");
    m.worker_deployment("ns", "wd", &[], 0.0, std::slice::from_ref(&ready));
    let series = |m: &Metrics| {
        m.encode()
            .lines()
            .filter(|l| l.starts_with("twc_status_condition{"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        series(&m),
        [
            "twc_status_condition{kind=\"WorkerDeployment\",namespace=\"ns\",name=\"wd\",condition=\"Ready\",status=\"True\",reason=\"RolloutComplete\"} 1"
        ]
    );
    ready.status = "False".into();
    ready.reason = "WorkersCrashLooping".into();
    m.worker_deployment("ns", "wd", &[], 0.0, std::slice::from_ref(&ready));
    assert_eq!(
        series(&m),
        [
            "twc_status_condition{kind=\"WorkerDeployment\",namespace=\"ns\",name=\"wd\",condition=\"Ready\",status=\"False\",reason=\"WorkersCrashLooping\"} 1"
        ]
    );
    m.conditions("ClusterConnection", "", "shared", &[condition("Ready")]);
    m.forget_worker_deployment("ns", "wd");
    assert_eq!(
        series(&m).len(),
        1,
        "only the ClusterConnection's: {:?}",
        series(&m)
    );
    m.forget_conditions("ClusterConnection", "", "shared");
    assert!(series(&m).is_empty());
}

/// Every family documented in docs/metrics.md is registered, and every registered one is
/// documented: one sample in each (a family without samples is not exposed at all, so the
/// scrape of a running controller cannot show the ones only present once something
/// happened, such as a restart onto renewed credentials).
#[test]
fn every_family_is_documented_and_registered() {
    let m = Metrics::new();
    m.reconciled("WorkerDeployment", Duration::from_millis(3));
    m.reconcile_failed("WorkerDeployment", "ConnectionNotFound");
    drop(m.in_flight("WorkerDeployment"));
    m.rpc(
        "GetSystemInfo",
        temporalio_client::tonic::Code::Ok,
        Duration::ZERO,
    );
    m.read_budget_waited("steady", Duration::ZERO);
    m.state_read(true);
    m.dialed(true);
    m.client_certificate("ns", "tls", SystemTime::UNIX_EPOCH);
    m.worker_deployment(
        "ns",
        "wd",
        &[VersionStatus::Current],
        5.0,
        &[condition("Ready")],
    );
    m.remembered(1);
    m.restarts("temporal:7233", "default", 1, 1);
    m.restarted(false);
    m.set_leader(true);
    m.set_build_info("0.0.1", "abc", "rustc 1");
    let queue = ControllerLabels {
        controller: "WorkerDeployment",
    };
    m.queue_depth.get_or_create(&queue).set(1);
    m.runtime
        .reconciled("WorkerDeployment", "error", Duration::from_millis(3));
    m.set_max_concurrent("WorkerDeployment", 32);
    m.set_lease_holder("twc", true);
    m.rest_request("200", "GET", "127.0.0.1:6443");
    m.runtime.queue_depth("WorkerDeployment", 1);
    m.runtime.queue_added("WorkerDeployment");
    m.runtime
        .queue_waited("WorkerDeployment", Duration::from_millis(1));
    let text = m.encode();
    let exposed: std::collections::BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let (name, kind) = l.split_once(' ')?;
            Some(if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            })
        })
        .collect();
    let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
    let doc = std::fs::read_to_string(doc).unwrap_or_default();
    let documented: std::collections::BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter(|l| FAMILY_PREFIXES.iter().any(|p| l.starts_with(p)))
        .filter_map(|l| Some(l.split('`').next()?.to_string()))
        .collect();
    assert_eq!(
        exposed, documented,
        "registered (left) vs docs/metrics.md (right)"
    );
}

#[test]
fn build_info_is_one_series() {
    let m = Metrics::new();
    m.set_build_info("0.0.1", "abc", "rustc 1");
    m.set_build_info("0.1.0", "def", "rustc 2");
    let text = m.encode();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("twc_build_info{"))
        .collect();
    assert_eq!(
        series,
        ["twc_build_info{version=\"0.1.0\",commit=\"def\",rustc=\"rustc 2\"} 1"]
    );
}

/// controller-runtime's families carry its names, labels and buckets: a TWC dashboard's query
/// finds the same series.
#[test]
fn controller_runtime_names_labels_and_buckets() {
    let m = Metrics::new();
    m.runtime.reconciled(
        "WorkerDeployment",
        "requeue_after",
        Duration::from_millis(20),
    );
    m.runtime
        .reconciled("WorkerDeployment", "error", Duration::from_millis(20));
    m.rest_request("404", "GET", "10.0.0.1:443");
    let text = m.encode();
    for series in [
        "controller_runtime_reconcile_total{controller=\"workerdeployment\",result=\"requeue_after\"} 1",
        "controller_runtime_reconcile_total{controller=\"workerdeployment\",result=\"error\"} 1",
        "controller_runtime_reconcile_errors_total{controller=\"workerdeployment\"} 1",
        "workqueue_retries_total{controller=\"workerdeployment\",name=\"workerdeployment\"} 1",
        "controller_runtime_reconcile_time_seconds_bucket{le=\"0.025\",controller=\"workerdeployment\"} 2",
        "controller_runtime_reconcile_time_seconds_bucket{le=\"0.01\",controller=\"workerdeployment\"} 0",
        "rest_client_requests_total{code=\"404\",host=\"10.0.0.1:443\",method=\"GET\"} 1",
    ] {
        assert!(text.contains(series), "{series} not in:\n{text}");
    }
    // Buckets end at 60 s, as controller-runtime's.
    assert!(text.contains("controller_runtime_reconcile_time_seconds_bucket{le=\"60.0\""));
}

/// A reconcile that records its failure in the status and returns normally (as the
/// WorkerDeployment's does) is an error for controller-runtime's counters too.
#[tokio::test]
async fn a_failure_recorded_and_returned_normally_is_an_error() {
    let ok = || async { Ok::<_, ()>(Action::requeue(Duration::from_secs(1))) };
    counted("TestRecorded", ok(), |_| "x").await.ok();
    counted(
        "TestRecorded",
        async {
            global().reconcile_failed("TestRecorded", "ConnectionNotFound");
            Ok::<_, ()>(Action::requeue(Duration::from_secs(1)))
        },
        |_| "x",
    )
    .await
    .ok();
    let text = global().encode();
    for series in [
        "controller_runtime_reconcile_total{controller=\"testrecorded\",result=\"requeue_after\"} 1",
        "controller_runtime_reconcile_total{controller=\"testrecorded\",result=\"error\"} 1",
        "controller_runtime_reconcile_errors_total{controller=\"testrecorded\"} 1",
    ] {
        assert!(text.contains(series), "{series} not in:\n{text}");
    }
}
