//! Figures for the rollout engine, with the controller's production poll intervals (2 s while
//! something moves, 60 s when steady), real apiserver, Temporal dev server and example workers:
//!
//! * spec change -> versioned Deployment created (first version, then an image change);
//! * pollers registered -> version Current with AllAtOnce;
//! * Temporal RPCs per WorkerDeployment per minute, during the rollouts and when steady
//!   (from the controller's own `twc_temporal_rpc_total`).
//!
//!     cargo bench -p twc-controller --bench rollout_latency
//!
//! TWC_BENCH_WDS (default 10) WorkerDeployments roll out concurrently, one per namespace;
//! TWC_BENCH_STEADY_SECONDS (default 120) is the steady window.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use twc_api::{Connection, WorkerDeployment};
use twc_controller::controller::{Config, prepare};
use twc_controller::temporal;

const IMAGE: &str = "twc/example-worker";

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Sum of the controller's Temporal RPCs so far.
fn rpcs() -> f64 {
    twc_controller::metrics::global()
        .encode()
        .lines()
        .filter(|l| l.starts_with("twc_temporal_rpc_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(what: &str, mut v: Vec<Duration>) {
    v.sort();
    println!(
        "{what:<48} p50 {:>6.2} s   p99 {:>6.2} s   max {:>6.2} s   (n={})",
        percentile(&v, 0.5).as_secs_f64(),
        percentile(&v, 0.99).as_secs_f64(),
        v.last().copied().unwrap_or_default().as_secs_f64(),
        v.len()
    );
}

/// One rollout's timings: spec written -> Deployment of `build` exists; version registered in
/// Temporal -> current.
struct Timing {
    to_deployment: Duration,
    registered_to_current: Duration,
}

async fn follow(
    client: &Client,
    conn: &temporalio_client::Connection,
    ns: &str,
    temporal_ns: &str,
    written: Instant,
    known: &[String],
) -> anyhow::Result<(String, Timing)> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deadline = written + Duration::from_secs(180);
    let (build, to_deployment) = loop {
        let list = deployments
            .list(&ListParams::default().labels(twc_api::labels::BUILD_ID))
            .await?;
        if let Some(d) = list.items.iter().find(|d| {
            let b = d.labels().get(twc_api::labels::BUILD_ID);
            b.is_some_and(|b| !known.contains(b))
        }) {
            let b = d.labels()[twc_api::labels::BUILD_ID].clone();
            break (b, written.elapsed());
        }
        anyhow::ensure!(Instant::now() < deadline, "{ns}: no new Deployment");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let name = twc_controller::plan::build_id::temporal_deployment_name(ns, "w");
    let mut registered: Option<Instant> = None;
    loop {
        // The bench reads Temporal too; a busy deployment just means "look again".
        let Ok(state) = temporal::describe(conn, temporal_ns, &name).await else {
            anyhow::ensure!(Instant::now() < deadline, "{ns}: Temporal keeps failing");
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if registered.is_none() && state.versions.contains_key(&build) {
            registered = Some(Instant::now());
        }
        if state.current_build_id.as_deref() == Some(build.as_str()) {
            let registered_to_current = registered.map(|r| r.elapsed()).unwrap_or_default();
            return Ok((
                build,
                Timing {
                    to_deployment,
                    registered_to_current,
                },
            ));
        }
        anyhow::ensure!(Instant::now() < deadline, "{ns}: {build} never current");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn main() -> anyhow::Result<()> {
    let n = env_usize("TWC_BENCH_WDS", 10);
    let steady = Duration::from_secs(env_usize("TWC_BENCH_STEADY_SECONDS", 120) as u64);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let env = twc_testenv::shared().await?;
        let client = env.client().await?;
        twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;
        let worker =
            twc_testenv::paths::workspace_binary("twc-example-worker", "twc-example-worker")?;
        env.pod_runner
            .register_image(IMAGE, twc_testenv::LocalImage::new(worker));
        let (_, controller) = prepare(
            client.clone(),
            Config {
                identity: "twc-bench".into(),
                ..Default::default()
            },
        )
        .await;
        tokio::spawn(controller);
        let temporal_conn = env.temporal.connect().await?;

        let mut tenants = Vec::new();
        for _ in 0..n {
            let ns = env.namespace("bench-rollout").await?;
            let temporal_ns = env.temporal_namespace().await?;
            let conn: Connection = serde_json::from_value(json!({
                "metadata": {"name": "temporal", "namespace": ns},
                "spec": {"hostPort": env.temporal.address},
            }))?;
            Api::<Connection>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &conn)
                .await?;
            tenants.push((ns, temporal_ns));
        }

        let mut results = Vec::new();
        for (round, image) in [(0, "v1"), (1, "v2")] {
            let rpcs_before = rpcs();
            let started = Instant::now();
            let mut follows = Vec::new();
            for (i, (ns, temporal_ns)) in tenants.iter().enumerate() {
                let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
                let known: Vec<String> = results
                    .iter()
                    .filter(|(j, _, _)| *j == i)
                    .map(|(_, b, _): &(usize, String, Timing)| b.clone())
                    .collect();
                let written = Instant::now();
                if round == 0 {
                    let wd: WorkerDeployment = serde_json::from_value(json!({
                        "metadata": {"name": "w", "namespace": ns},
                        "spec": {
                            "replicas": 1,
                            "workerOptions": {"connectionRef": {"name": "temporal"}, "temporalNamespace": temporal_ns},
                            "rollout": {"strategy": "AllAtOnce"},
                            "template": {"spec": {"terminationGracePeriodSeconds": 2, "containers": [{"name": "worker", "image": format!("{IMAGE}:{image}")}]}}
                        }
                    }))?;
                    api.create(&PostParams::default(), &wd).await?;
                } else {
                    api.patch(
                        "w",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [
                            {"name": "worker", "image": format!("{IMAGE}:{image}")}
                        ]}}}})),
                    )
                    .await?;
                }
                let (client, conn) = (client.clone(), temporal_conn.clone());
                let (ns, temporal_ns) = (ns.clone(), temporal_ns.clone());
                follows.push(tokio::spawn(async move {
                    follow(&client, &conn, &ns, &temporal_ns, written, &known)
                        .await
                        .map(|r| (i, r))
                }));
            }
            let mut timings = Vec::new();
            for f in follows {
                let (i, (build, timing)) = f.await??;
                timings.push((i, build, timing));
            }
            let took = started.elapsed();
            let per_wd = (rpcs() - rpcs_before) / n as f64;
            let per_wd_minute = per_wd / took.as_secs_f64() * 60.0;
            let what = if round == 0 {
                "first version"
            } else {
                "image change"
            };
            println!("\n{what}: {n} WorkerDeployments rolled out in {:.1} s", took.as_secs_f64());
            report(
                &format!("{what}: spec -> versioned Deployment created"),
                timings.iter().map(|(_, _, t)| t.to_deployment).collect(),
            );
            report(
                &format!("{what}: pollers registered -> Current"),
                timings
                    .iter()
                    .map(|(_, _, t)| t.registered_to_current)
                    .collect(),
            );
            println!("{what}: Temporal RPCs per WorkerDeployment: {per_wd:.1} for the rollout, {per_wd_minute:.1} per minute while it ran");
            results.extend(timings);
        }

        // Let old versions drain (the dev server reports drainage within seconds), then count.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let before = rpcs();
        tokio::time::sleep(steady).await;
        let per_wd_minute = (rpcs() - before) / n as f64 / steady.as_secs_f64() * 60.0;
        println!(
            "\nsteady ({} s window): Temporal RPCs per WorkerDeployment per minute: {per_wd_minute:.2}",
            steady.as_secs()
        );
        println!("\nRPCs by method:\n{}", twc_controller::metrics::global()
            .encode()
            .lines()
            .filter(|l| l.starts_with("twc_temporal_rpc_total{"))
            .collect::<Vec<_>>()
            .join("\n"));
        Ok(())
    })
}
