//! What Temporal saw of the rollouts: the times it recorded for each version, and the calls
//! its frontend served by method (its `service_requests`), less the benchmark's own reads.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::stats::ts;

/// The Temporal methods the controller calls (the workers call others: polls, heartbeats).
pub const CONTROLLER_METHODS: &[&str] = &[
    "ListWorkerDeployments",
    "DescribeWorkerDeployment",
    "DescribeWorkerDeploymentVersion",
    "SetWorkerDeploymentManager",
    "SetWorkerDeploymentCurrentVersion",
    "SetWorkerDeploymentRampingVersion",
    "DeleteWorkerDeploymentVersion",
    "ListWorkers",
    "DescribeTaskQueue",
    "CountWorkflowExecutions",
];

/// What Temporal recorded of one version: registered (first poll), ramping since, current since.
pub struct Recorded {
    pub created: SystemTime,
    pub ramping: Option<SystemTime>,
    pub current: SystemTime,
}

/// The benchmark's own DescribeWorkerDeployment calls, taken off the server's count.
static OWN_DESCRIBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub async fn recorded(
    conn: &temporalio_client::Connection,
    temporal_ns: &str,
    deployment: &str,
    build: &str,
) -> anyhow::Result<Option<Recorded>> {
    use temporalio_common::protos::temporal::api::workflowservice::v1::DescribeWorkerDeploymentRequest;
    let mut tries = 0;
    let resp = loop {
        OWN_DESCRIBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut svc = conn.workflow_service();
        let answer = svc
            .describe_worker_deployment(temporalio_client::tonic::Request::new(
                DescribeWorkerDeploymentRequest {
                    namespace: temporal_ns.to_string(),
                    deployment_name: deployment.to_string(),
                },
            ))
            .await;
        match answer {
            Ok(r) => break r.into_inner(),
            // Right after a routing change the server may refuse a burst of reads.
            Err(s) if tries < 20 => {
                tries += 1;
                tracing_or_print(&s);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(s) => return Err(s.into()),
        }
    };
    let info = resp.worker_deployment_info.unwrap_or_default();
    let Some(v) = info.version_summaries.iter().find(|v| {
        v.deployment_version
            .as_ref()
            .is_some_and(|d| d.build_id == build)
    }) else {
        return Ok(None);
    };
    Ok(match (ts(&v.create_time), ts(&v.current_since_time)) {
        (Some(created), Some(current)) => Some(Recorded {
            created,
            ramping: ts(&v.ramping_since_time),
            current,
        }),
        _ => None,
    })
}

fn tracing_or_print(s: &temporalio_client::tonic::Status) {
    eprintln!("bench: describe refused ({:?}), again in 0.5 s", s.code());
}

/// The controller's time in Temporal calls so far: (seconds, calls) by method.
fn controller_durations() -> BTreeMap<String, (f64, f64)> {
    let mut by: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in twc_controller::metrics::global().encode().lines() {
        let (sum, rest) =
            if let Some(r) = line.strip_prefix("twc_temporal_rpc_duration_seconds_sum{") {
                (true, r)
            } else if let Some(r) = line.strip_prefix("twc_temporal_rpc_duration_seconds_count{") {
                (false, r)
            } else {
                continue;
            };
        let (labels, value) = rest.rsplit_once(' ').unwrap_or((rest, "0"));
        let rpc = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("rpc=\""))
            .map(|v| v.trim_end_matches(['"', '}']).to_string())
            .unwrap_or_default();
        let v = value.parse::<f64>().unwrap_or(0.0);
        let e = by.entry(rpc).or_default();
        if sum {
            e.0 += v;
        } else {
            e.1 += v;
        }
    }
    by
}

/// The controller's own count of Temporal calls, by method (and code).
fn controller_rpcs() -> BTreeMap<String, f64> {
    let mut by = BTreeMap::new();
    for line in twc_controller::metrics::global().encode().lines() {
        let Some(rest) = line.strip_prefix("twc_temporal_rpc_total{") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once(' ').unwrap_or((rest, "0"));
        let field = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches(['"', '}']).to_string())
                .unwrap_or_default()
        };
        let key = match field("code").as_str() {
            "Ok" => field("rpc"),
            code => format!("{} ({code})", field("rpc")),
        };
        *by.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    by
}

pub fn delta(
    after: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

pub struct Counts {
    pub server: BTreeMap<String, f64>,
    pub controller: BTreeMap<String, f64>,
    pub durations: BTreeMap<String, (f64, f64)>,
    pub own: u64,
}

pub async fn counts(env: &twc_testenv::TestEnv) -> anyhow::Result<Counts> {
    // The server's metrics are flushed about every second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let server = env
        .temporal
        .service_requests()
        .await?
        .into_iter()
        .filter(|(k, _)| CONTROLLER_METHODS.contains(&k.as_str()))
        .collect();
    Ok(Counts {
        server,
        controller: controller_rpcs(),
        durations: controller_durations(),
        own: OWN_DESCRIBES.load(std::sync::atomic::Ordering::Relaxed),
    })
}

pub fn print_calls(what: &str, before: &Counts, after: &Counts, n: usize) {
    let mut server = delta(&after.server, &before.server);
    if let Some(d) = server.get_mut("DescribeWorkerDeployment") {
        *d -= (after.own - before.own) as f64;
    }
    let total: f64 = server.values().sum();
    println!(
        "  {what}: Temporal calls per WorkerDeployment (the server's count): {:.1}",
        total / n as f64
    );
    for (k, v) in &server {
        println!("    {k:<36} {:>6.2}", v / n as f64);
    }
    let controller = delta(&after.controller, &before.controller);
    let line: Vec<String> = controller
        .iter()
        .map(|(k, v)| format!("{k} {:.2}", v / n as f64))
        .collect();
    println!("    controller's own count per WD: {}", line.join(", "));
    let took: Vec<String> = after
        .durations
        .iter()
        .filter_map(|(k, (sum, count))| {
            let (s0, c0) = before.durations.get(k).copied().unwrap_or_default();
            let n = count - c0;
            (n > 0.0).then(|| format!("{k} {:.0} ms", (sum - s0) / n * 1000.0))
        })
        .collect();
    println!(
        "    mean time of a call, as the controller waited for it: {}",
        took.join(", ")
    );
}
