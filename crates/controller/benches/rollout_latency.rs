//! Rollout latency and the Temporal calls a rollout costs, with the controller's production
//! poll intervals (2 s while something moves, 60 s when steady), the real apiserver, the
//! Temporal dev server and the example worker (one replica per WorkerDeployment, run by the
//! pod runner: a real worker process that polls with the build ID it was given).
//!
//!     cargo bench -p twc-controller --bench rollout_latency
//!
//! Three rounds over TWC_BENCH_WDS (default 10) WorkerDeployments, one per Kubernetes
//! namespace and one Temporal namespace each (TWC_BENCH_TEMPORAL_NAMESPACES=shared: all in
//! one, sharing its read budget; at 100 the dev server's per-namespace poller limit, hit by
//! 300 workers, starves its own deployment workflows):
//!
//! 1. startup: the WorkerDeployments exist before the controller starts (AllAtOnce, first
//!    version); startup -> all Current, and the last worker's first poll -> all Current;
//! 2. image change, AllAtOnce;
//! 3. image change, Progressive (one 50 % step of 30 s).
//!
//! Each rollout's phases come from outside the controller: the write (the benchmark's clock),
//! the versioned Deployment's creation and first available replica (a watch), the version's
//! registration, ramp and promotion (the times Temporal records: `createTime`, `rampingSinceTime`,
//! `currentSinceTime`, read once per rollout after it ended) and the WorkerDeployment's status
//! showing it (a watch). The Temporal calls are what the server saw (its `service_requests`),
//! minus the benchmark's own reads, by method, beside the controller's own count. Then a steady
//! window (TWC_BENCH_STEADY_SECONDS, default 120): calls per WorkerDeployment per minute.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use twc_api::{Connection, WorkerDeployment};
use twc_controller::controller::{Config, prepare};

#[path = "common/stats.rs"]
mod stats;
use stats::secs;
#[path = "rollout_latency/asked.rs"]
mod asked;
#[path = "rollout_latency/calls.rs"]
mod calls;

use calls::{Counts, counts, delta, print_calls, recorded};

const IMAGE: &str = "twc/example-worker";

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the watches saw, by Kubernetes namespace and build ID.
#[derive(Default)]
struct Seen {
    /// (namespace, build) -> when its Deployment first showed, when it first had an
    /// available replica.
    deployments: BTreeMap<(String, String), (SystemTime, Option<SystemTime>)>,
    /// (namespace, build) -> when the WorkerDeployment's status first said it was current.
    status_current: BTreeMap<(String, String), SystemTime>,
}

fn spawn_watches(client: &Client, seen: Arc<Mutex<Seen>>) {
    let deployments: Api<Deployment> = Api::all(client.clone());
    let s = seen.clone();
    tokio::spawn(async move {
        let config = watcher::Config::default().labels(twc_api::labels::BUILD_ID);
        let mut events = std::pin::pin!(watcher::watcher(deployments, config));
        while let Some(event) = events.next().await {
            let d = match event {
                Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => d,
                _ => continue,
            };
            let (Some(ns), Some(build)) =
                (d.namespace(), d.labels().get(twc_api::labels::BUILD_ID))
            else {
                continue;
            };
            let now = SystemTime::now();
            let available = d
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0)
                > 0;
            let mut seen = s.lock().unwrap_or_else(|e| e.into_inner());
            let entry = seen
                .deployments
                .entry((ns, build.clone()))
                .or_insert((now, None));
            if available && entry.1.is_none() {
                entry.1 = Some(now);
            }
        }
    });
    let wds: Api<WorkerDeployment> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(wds, watcher::Config::default()));
        while let Some(event) = events.next().await {
            let wd = match event {
                Ok(watcher::Event::Apply(wd) | watcher::Event::InitApply(wd)) => wd,
                _ => continue,
            };
            let (Some(ns), Some(current)) = (
                wd.namespace(),
                wd.status
                    .as_ref()
                    .and_then(|s| s.current_version.as_ref())
                    .map(|c| c.base.build_id.clone()),
            ) else {
                continue;
            };
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.status_current
                .entry((ns, current))
                .or_insert_with(SystemTime::now);
        }
    });
}

fn report(what: &str, v: Vec<f64>) {
    stats::report(what, v, 2);
}

struct Tenant {
    ns: String,
    temporal_ns: String,
}

fn worker_deployment(t: &Tenant, image: &str) -> anyhow::Result<WorkerDeployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "w", "namespace": t.ns},
        "spec": {
            "replicas": 1,
            "workerOptions": {"connectionRef": {"name": "temporal"}, "temporalNamespace": t.temporal_ns},
            "rollout": {"strategy": "AllAtOnce"},
            "template": {"spec": {"terminationGracePeriodSeconds": 2, "containers": [container(t, image)]}}
        }
    }))?)
}

/// The worker container: a task queue of its own per WorkerDeployment (a task queue takes
/// at most 200 versions).
fn container(t: &Tenant, image: &str) -> serde_json::Value {
    json!({
        "name": "worker",
        "image": format!("{IMAGE}:{image}"),
        "env": [{"name": "TEMPORAL_TASK_QUEUE", "value": t.ns}],
    })
}

/// Waits until every tenant's status shows a build other than `known[ns]` current; returns
/// each tenant's new build.
async fn until_current(
    seen: &Mutex<Seen>,
    tenants: &[Tenant],
    known: &BTreeMap<String, BTreeSet<String>>,
    timeout: Duration,
) -> anyhow::Result<BTreeMap<String, String>> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        {
            let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            let found: BTreeMap<String, String> = seen
                .status_current
                .keys()
                .filter(|(ns, b)| known.get(ns).is_none_or(|k| !k.contains(b)))
                .map(|(ns, b)| (ns.clone(), b.clone()))
                .collect();
            if tenants.iter().all(|t| found.contains_key(&t.ns)) {
                return Ok(found);
            }
            if std::time::Instant::now() > deadline {
                let missing: Vec<&str> = tenants
                    .iter()
                    .filter(|t| !found.contains_key(&t.ns))
                    .map(|t| t.ns.as_str())
                    .collect();
                anyhow::bail!("not current after {timeout:?}: {missing:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn round(
    what: &str,
    env: &twc_testenv::TestEnv,
    client: &Client,
    temporal: &temporalio_client::Connection,
    seen: &Mutex<Seen>,
    tenants: &[Tenant],
    known: &mut BTreeMap<String, BTreeSet<String>>,
    written: &BTreeMap<String, SystemTime>,
    before: Counts,
) -> anyhow::Result<()> {
    let builds = until_current(seen, tenants, known, Duration::from_secs(600)).await?;
    // The status written with the promotion may lag the one the watch saw by a pass.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ended = SystemTime::now();
    let after = counts(env).await?;
    let mut rows: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut last_poll = SystemTime::UNIX_EPOCH;
    let mut last_current = SystemTime::UNIX_EPOCH;
    let first_written = written.values().min().copied().unwrap_or(ended);
    for t in tenants {
        let build = &builds[&t.ns];
        let name = twc_controller::plan::build_id::temporal_deployment_name(&t.ns, "w");
        let Some(rec) = recorded(temporal, &t.temporal_ns, &name, build).await? else {
            anyhow::bail!("{}: Temporal has no times for {build}", t.ns);
        };
        let w = written[&t.ns];
        let (created, ready) = {
            let s = seen.lock().unwrap_or_else(|e| e.into_inner());
            s.deployments
                .get(&(t.ns.clone(), build.clone()))
                .copied()
                .unwrap_or((w, None))
        };
        let status = {
            let s = seen.lock().unwrap_or_else(|e| e.into_inner());
            s.status_current
                .get(&(t.ns.clone(), build.clone()))
                .copied()
                .unwrap_or(ended)
        };
        if std::env::var_os("TWC_BENCH_VERBOSE").is_some() {
            let at = |t: SystemTime| {
                k8s_openapi::jiff::Timestamp::try_from(t)
                    .map(|t| t.to_string())
                    .unwrap_or_default()
            };
            println!(
                "  {} {build}: written {} deployment {} available {} registered {} current {} status {}",
                t.ns,
                at(w),
                at(created),
                ready.map(at).unwrap_or_default(),
                at(rec.created),
                at(rec.current),
                at(status)
            );
        }
        let mut row = |k: &'static str, v: f64| rows.entry(k).or_default().push(v);
        row("1 spec written -> versioned Deployment", secs(w, created));
        if let Some(ready) = ready {
            row(
                "2 Deployment -> first replica available",
                secs(created, ready),
            );
            row(
                "3 available -> registered (first poll)",
                secs(ready, rec.created),
            );
        }
        if let Some(ramping) = rec.ramping {
            row("4 registered -> ramping", secs(rec.created, ramping));
        }
        row("5 registered -> Current", secs(rec.created, rec.current));
        // Of it: the controller's and the server's parts, from the pass that promoted (an
        // AllAtOnce promotion: Temporal forgets the ramp's times once the version is current).
        let all_at_once = !what.contains("Progressive");
        if let (Some(p), Some(ready), true) =
            (asked::global().promotion(&t.ns, build), ready, all_at_once)
        {
            row(
                "5a   registered and available -> promoting pass (controller)",
                secs(rec.created.max(ready), p.pass_began),
            );
            if let Some(took) = p.read_took {
                row(
                    "5b   its read of the worker deployment (server)",
                    took.as_secs_f64(),
                );
            }
            row(
                "5c   the rest of the pass before the request (controller)",
                secs(p.pass_began, p.asked) - p.read_took.map_or(0.0, |d| d.as_secs_f64()),
            );
            row(
                "5d   promotion asked -> currentSinceTime (server)",
                secs(p.asked, rec.current),
            );
        }
        row("6 Current -> status shows it", secs(rec.current, status));
        row("7 spec written -> Current", secs(w, rec.current));
        last_poll = last_poll.max(rec.created);
        last_current = last_current.max(rec.current);
        known.entry(t.ns.clone()).or_default().insert(build.clone());
    }
    println!(
        "\n{what}: {} WorkerDeployments, all Current {:.2} s after the first write, {:.2} s after the last first poll",
        tenants.len(),
        secs(first_written, last_current),
        secs(last_poll, last_current),
    );
    for (k, v) in rows {
        report(k, v);
    }
    timelines(client, tenants, &builds).await?;
    print_calls(what, &before, &after, tenants.len());
    Ok(())
}

/// The same rollouts as the controller's `status.lastRollout` records them: each phase since
/// the one before.
async fn timelines(
    client: &Client,
    tenants: &[Tenant],
    builds: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    // By the phase's place in the rollout: each since the one before.
    let mut rows: BTreeMap<usize, (&str, Vec<f64>)> = BTreeMap::new();
    for t in tenants {
        let wd = Api::<WorkerDeployment>::namespaced(client.clone(), &t.ns)
            .get("w")
            .await?;
        let Some(tl) = wd.status.and_then(|s| s.last_rollout) else {
            continue;
        };
        if Some(&tl.build_id) != builds.get(&t.ns) {
            continue;
        }
        let mut before = tl.spec_seen.as_ref().map(|s| SystemTime::from(s.0));
        for (i, (name, at)) in tl.phases().into_iter().enumerate().skip(1) {
            let Some(at) = at.map(|a| SystemTime::from(a.0)) else {
                continue;
            };
            if let Some(b) = before {
                rows.entry(i)
                    .or_insert((name, Vec::new()))
                    .1
                    .push(secs(b, at));
            }
            before = Some(at);
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    println!("  as the controller's status.lastRollout records it (each since the one before):");
    for (_, (k, v)) in rows {
        report(&format!("-> {k}"), v);
    }
    Ok(())
}

async fn patch_all(
    client: &Client,
    tenants: &[Tenant],
    spec: impl Fn(&Tenant) -> serde_json::Value,
) -> anyhow::Result<BTreeMap<String, SystemTime>> {
    let mut written = BTreeMap::new();
    for t in tenants {
        let spec = spec(t);
        let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), &t.ns);
        written.insert(t.ns.clone(), SystemTime::now());
        api.patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await?;
    }
    Ok(written)
}

fn main() -> anyhow::Result<()> {
    let n = env_usize("TWC_BENCH_WDS", 10);
    let steady = Duration::from_secs(env_usize("TWC_BENCH_STEADY_SECONDS", 120) as u64);
    let each = std::env::var("TWC_BENCH_TEMPORAL_NAMESPACES").as_deref() != Ok("shared");
    // The controller's promotions, from its debug events; and its log on stderr when asked
    // for (RUST_LOG=twc_controller=debug).
    {
        use tracing_subscriber::prelude::*;
        let log = std::env::var_os("RUST_LOG").is_some().then(|| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::EnvFilter::from_default_env())
        });
        let promotions = tracing_subscriber::filter::Targets::new()
            .with_target("twc_controller::workerdeployment", tracing::Level::DEBUG);
        tracing_subscriber::registry()
            .with(asked::global().clone().with_filter(promotions))
            .with(log)
            .init();
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let env = twc_testenv::shared().await?;
        let client = env.client().await?;
        twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;
        let worker =
            twc_testenv::paths::workspace_binary("twc-example-worker", "twc-example-worker")?;
        env.pod_runner
            .register_image(IMAGE, twc_testenv::LocalImage::new(worker));
        let temporal = env.temporal.connect().await?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        spawn_watches(&client, seen.clone());
        println!(
            "{n} WorkerDeployments, one replica of the example worker each (pod runner), {}",
            if each { "one Temporal namespace each" } else { "one Temporal namespace" }
        );

        let shared_ns = env.temporal_namespace().await?;
        let mut tenants = Vec::new();
        let mut written = BTreeMap::new();
        for _ in 0..n {
            let ns = env.namespace("bench-rollout").await?;
            let temporal_ns = if each {
                env.temporal_namespace().await?
            } else {
                shared_ns.clone()
            };
            let conn: Connection = serde_json::from_value(json!({
                "metadata": {"name": "temporal", "namespace": ns},
                "spec": {"hostPort": env.temporal.address},
            }))?;
            Api::<Connection>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &conn)
                .await?;
            let t = Tenant { ns, temporal_ns };
            Api::<WorkerDeployment>::namespaced(client.clone(), &t.ns)
                .create(&PostParams::default(), &worker_deployment(&t, "v1")?)
                .await?;
            tenants.push(t);
        }
        let mut known = BTreeMap::new();

        // 1. Startup: the controller starts with every WorkerDeployment waiting.
        let before = counts(env).await?;
        let started = SystemTime::now();
        let (_, controller) = prepare(
            client.clone(),
            Config {
                identity: "twc-bench".into(),
                ..Default::default()
            },
        )
        .await;
        tokio::spawn(controller);
        for t in &tenants {
            written.insert(t.ns.clone(), started);
        }
        round("startup, first version (AllAtOnce)", env, &client, &temporal, &seen, &tenants, &mut known, &written, before).await?;

        // 2. An image change, AllAtOnce.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let before = counts(env).await?;
        let written = patch_all(&client, &tenants, |t| json!({"template": {"spec": {"containers": [
            container(t, "v2")
        ]}}})).await?;
        round("image change (AllAtOnce)", env, &client, &temporal, &seen, &tenants, &mut known, &written, before).await?;

        // 3. An image change, Progressive: one 50 % step of 30 s.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let before = counts(env).await?;
        let written = patch_all(&client, &tenants, |t| json!({
            "rollout": {"strategy": "Progressive", "steps": [{"rampPercentage": 50, "pauseDuration": "30s"}]},
            "template": {"spec": {"containers": [container(t, "v3")]}}
        })).await?;
        round("image change (Progressive, 50 % for 30 s)", env, &client, &temporal, &seen, &tenants, &mut known, &written, before).await?;

        // Old versions drain (the dev server's fast drainage), are scaled down and deleted;
        // then the steady window.
        tokio::time::sleep(Duration::from_secs(30)).await;
        let before = counts(env).await?;
        tokio::time::sleep(steady).await;
        let after = counts(env).await?;
        let minutes = steady.as_secs_f64() / 60.0;
        println!("\nsteady ({} s window, nothing moving):", steady.as_secs());
        print_calls("steady", &before, &after, n);
        let total: f64 = delta(&after.server, &before.server).values().sum();
        println!(
            "  Temporal calls per WorkerDeployment per minute: {:.2}",
            total / n as f64 / minutes
        );
        Ok(())
    })
}
