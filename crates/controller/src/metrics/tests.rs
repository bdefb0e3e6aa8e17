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
    m.worker_deployment("ns", "wd", &[VersionStatus::Current], 5.0);
    m.remembered(1);
    m.restarts("temporal:7233", "default", 1, 1);
    m.restarted(false);
    m.set_leader(true);
    m.set_build_info("0.0.1", "abc", "rustc 1");
    let queue = ControllerLabels {
        controller: "WorkerDeployment",
    };
    m.queue_depth.get_or_create(&queue).set(1);
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
        .filter_map(|l| l.strip_prefix("| `twc_"))
        .filter_map(|l| Some(format!("twc_{}", l.split('`').next()?)))
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
