//! What the harness watches from outside: every WorkerDeployment's rollout state (one watch)
//! and the Temporal server's request counters (sampled every second).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;
use twc_api::WorkerDeployment;

/// The operations the controller calls (crates/controller/src/temporal); every other one the
/// server counts is the harness's (its polls, its dials' GetSystemInfo) or the server's own
/// system workers (the worker-deployment workflows answer through the frontend too).
/// GetSystemInfo is left out: the harness and the controller both call it once per dial.
pub const CONTROLLER_OPERATIONS: &[&str] = &[
    "DeleteWorkerDeployment",
    "DeleteWorkerDeploymentVersion",
    "DescribeTaskQueue",
    "DescribeWorkerDeployment",
    "DescribeWorkerDeploymentVersion",
    "DescribeWorkflowExecution",
    "ListWorkerDeployments",
    "ListWorkers",
    "CountWorkflowExecutions",
    "SetWorkerDeploymentCurrentVersion",
    "SetWorkerDeploymentManager",
    "SetWorkerDeploymentRampingVersion",
    "StartWorkflowExecution",
];

/// The Worker Deployment reads the server rate-limits per namespace.
pub const READ_OPERATIONS: &[&str] = &[
    "DescribeWorkerDeployment",
    "DescribeWorkerDeploymentVersion",
    "ListWorkerDeployments",
];

/// One WorkerDeployment as last seen.
#[derive(Clone, Debug, Default)]
pub struct WdState {
    /// `status.currentVersion.buildID`.
    pub current_build: Option<String>,
    /// The generation a `Ready` condition with reason `RolloutComplete` was written for.
    pub complete_generation: Option<i64>,
}

/// Every WorkerDeployment, `namespace/name` -> its state, kept by one watch.
#[derive(Clone, Default)]
pub struct Tracker(Arc<Mutex<HashMap<String, WdState>>>);

impl Tracker {
    pub fn spawn(client: Client) -> (Self, JoinHandle<()>) {
        let tracker = Self::default();
        let map = tracker.0.clone();
        let task = tokio::spawn(async move {
            let api: Api<WorkerDeployment> = Api::all(client);
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(Event::Apply(wd) | Event::InitApply(wd)) => {
                        let key =
                            format!("{}/{}", wd.namespace().unwrap_or_default(), wd.name_any());
                        let state = state_of(&wd);
                        if let Ok(mut m) = map.lock() {
                            m.insert(key, state);
                        }
                    }
                    Ok(Event::Delete(wd)) => {
                        let key =
                            format!("{}/{}", wd.namespace().unwrap_or_default(), wd.name_any());
                        if let Ok(mut m) = map.lock() {
                            m.remove(&key);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("tracker: WorkerDeployment watch: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        (tracker, task)
    }

    /// How many of `want` (key -> (generation, image tag)) report RolloutComplete for that
    /// generation or a later one, with a build ID of that tag current (the harness's images
    /// are `...:v<tag>`, so their build IDs start with `v<tag>-`); and how many report
    /// RolloutComplete for the generation while an older build is still current.
    pub fn complete(&self, want: &HashMap<String, (i64, usize)>) -> (usize, usize) {
        let Ok(m) = self.0.lock() else {
            return (0, 0);
        };
        let (mut done, mut premature) = (0, 0);
        for (k, (g, tag)) in want {
            let Some(s) = m.get(k) else { continue };
            if s.complete_generation.is_none_or(|c| c < *g) {
                continue;
            }
            let prefix = format!("v{tag}-");
            if s.current_build
                .as_deref()
                .is_some_and(|b| b.starts_with(&prefix))
            {
                done += 1;
            } else {
                premature += 1;
            }
        }
        (done, premature)
    }
}

fn state_of(wd: &WorkerDeployment) -> WdState {
    let complete_generation = wd.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| {
                c.type_ == twc_api::conditions::READY
                    && c.status == "True"
                    && c.reason == twc_api::conditions::ROLLOUT_COMPLETE
            })
            .map(|c| c.observed_generation.unwrap_or(0))
    });
    let current_build = wd
        .status
        .as_ref()
        .and_then(|s| s.current_version.as_ref())
        .map(|c| c.base.build_id.clone());
    WdState {
        current_build,
        complete_generation,
    }
}

/// The server's counters at one moment.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub at: Option<Instant>,
    /// Frontend requests by operation (`service_requests`).
    pub requests: BTreeMap<String, f64>,
    /// Frontend `ResourceExhausted` errors by operation (`service_errors_resource_exhausted`).
    pub exhausted: BTreeMap<String, f64>,
}

impl Sample {
    pub fn reads(&self) -> f64 {
        READ_OPERATIONS
            .iter()
            .map(|op| self.requests.get(*op).copied().unwrap_or(0.0))
            .sum()
    }

    pub fn exhausted_total(&self) -> f64 {
        self.exhausted.values().fold(0.0, |a, b| a + b)
    }

    /// `ResourceExhausted` answers to Worker Deployment reads.
    pub fn exhausted_reads(&self) -> f64 {
        READ_OPERATIONS
            .iter()
            .filter_map(|op| self.exhausted.get(*op))
            .fold(0.0, |a, b| a + b)
    }
}

/// Reads the server's counters now.
pub async fn sample(metrics_address: &str) -> Sample {
    let text = twc_testenv::temporal::http_get_text(metrics_address, "/metrics")
        .await
        .unwrap_or_default();
    let at = Some(Instant::now());
    // The page is large (about 100 MB at 1,000 task queues): parse it off the runtime.
    let parse = move || {
        let frontend = [("service_name", "frontend")];
        Sample {
            at,
            requests: twc_testenv::temporal::sum_by_label(
                &text,
                "service_requests",
                &frontend,
                "operation",
            ),
            exhausted: twc_testenv::temporal::sum_by_label(
                &text,
                "service_errors_resource_exhausted",
                &frontend,
                "operation",
            ),
        }
    };
    tokio::task::spawn_blocking(parse).await.unwrap_or_default()
}

/// The controller's Worker Deployment reads and ResourceExhausted answers so far, as counted
/// by the controller (`twc_temporal_rpc_total`), summed over its restarts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tick {
    pub at: Option<Instant>,
    pub reads: f64,
    pub exhausted: f64,
    /// Tokens the read budget granted (`twc_temporal_read_budget_wait_seconds_count`),
    /// counted when granted: what the bucket bounds, whatever the reads' latency.
    pub granted: f64,
}

/// The controller's counters every second since the start. The server's own counters cannot
/// be sampled that often: with 1,000 task queues its metrics page is about 100 MB and takes
/// seconds to render, so the server is read only at the start and end of each measurement.
/// Every RPC the controller sends reaches the server's frontend, so the per-second series of
/// reads is the same from either side.
#[derive(Clone, Default)]
pub struct Sampler(
    Arc<Mutex<Vec<Tick>>>,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<Mutex<String>>,
);

impl Sampler {
    /// Samples the controller's `/metrics` at `controller_address` (`host:port`; the same
    /// across restarts of its process, another for a new controller: [`Sampler::follow`]).
    pub fn spawn(controller_address: String) -> (Self, JoinHandle<()>) {
        let sampler = Self::default();
        sampler.follow(controller_address);
        let ticks = sampler.0.clone();
        let paused = sampler.1.clone();
        let address = sampler.2.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // Raw counters last seen, to sum across restarts (a counter that went down was
            // reset by a restart).
            let (mut last_reads, mut last_exhausted, mut last_granted) = (0.0, 0.0, 0.0);
            let mut total = Tick::default();
            loop {
                tick.tick().await;
                if paused.load(std::sync::atomic::Ordering::Relaxed) {
                    continue;
                }
                let Ok(controller_address) = address.lock().map(|a| a.clone()) else {
                    return;
                };
                let Ok(text) =
                    twc_testenv::temporal::http_get_text(&controller_address, "/metrics").await
                else {
                    continue;
                };
                let reads: f64 = READ_OPERATIONS
                    .iter()
                    .map(|op| controller_counter(&text, "twc_temporal_rpc_total", &[("rpc", op)]))
                    .fold(0.0, |a, b| a + b);
                // Refused reads only: a routing write refused for the deployment's own update
                // rate ("too many requests issued to Worker Deployment") is not the read budget's.
                let exhausted: f64 = READ_OPERATIONS
                    .iter()
                    .map(|op| {
                        controller_counter(
                            &text,
                            "twc_temporal_rpc_total",
                            &[("rpc", op), ("code", "ResourceExhausted")],
                        )
                    })
                    .fold(0.0, |a, b| a + b);
                let granted =
                    controller_counter(&text, "twc_temporal_read_budget_wait_seconds_count", &[]);
                let grew = |now: f64, last: f64| if now >= last { now - last } else { now };
                total.reads += grew(reads, last_reads);
                total.exhausted += grew(exhausted, last_exhausted);
                total.granted += grew(granted, last_granted);
                (last_reads, last_exhausted, last_granted) = (reads, exhausted, granted);
                total.at = Some(Instant::now());
                if let Ok(mut v) = ticks.lock() {
                    v.push(total);
                }
            }
        });
        (sampler, task)
    }

    /// Samples the controller at `controller_address` from now on (a new controller process,
    /// started with other arguments: its counters start at 0, as after a restart).
    pub fn follow(&self, controller_address: String) {
        if let Ok(mut a) = self.2.lock() {
            *a = controller_address;
        }
    }

    /// Stops (true) or resumes sampling: the controller's CPU in a steady window is measured
    /// without the harness reading its metrics every second (a 400 KB page at 1,000
    /// WorkerDeployments).
    pub fn pause(&self, paused: bool) {
        self.1.store(paused, std::sync::atomic::Ordering::Relaxed);
    }

    /// Ticks from `since` on.
    pub fn since(&self, since: Instant) -> Vec<Tick> {
        self.0
            .lock()
            .map(|v| {
                v.iter()
                    .filter(|s| s.at.is_some_and(|t| t >= since))
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The latest tick.
    pub fn last(&self) -> Tick {
        self.0
            .lock()
            .ok()
            .and_then(|v| v.last().copied())
            .unwrap_or_default()
    }
}

/// The most reads in any `window` seconds, over ticks about 1 s apart; spans across a pause
/// of the sampler (more than a second longer than `window`) are left out.
pub fn max_reads_in(ticks: &[Tick], window: usize) -> f64 {
    let span = |a: &Tick, b: &Tick| match (a.at, b.at) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => f64::MAX,
    };
    if ticks.len() <= window {
        return match (ticks.first(), ticks.last()) {
            (Some(a), Some(b)) => b.reads - a.reads,
            _ => 0.0,
        };
    }
    ticks
        .windows(window + 1)
        .filter(|w| span(&w[0], &w[window]) <= window as f64 + 1.0)
        .map(|w| w[window].reads - w[0].reads)
        .fold(0.0, f64::max)
}

/// The most any window of `window` samples held above what a token bucket of `rate` per
/// second allows in the time the window really spans: tokens granted, counted when granted
/// (a read counted when it completes may have had its token seconds before, on a loaded
/// server), with one second more for when each sample's page was rendered. The bucket keeps
/// this at or under its burst.
pub fn max_reads_over_budget(ticks: &[Tick], window: usize, rate: f64) -> f64 {
    ticks
        .windows(window.min(ticks.len().saturating_sub(1)) + 1)
        .filter_map(|w| {
            let (a, b) = (w.first()?, w.last()?);
            let span = b.at?.duration_since(a.at?).as_secs_f64();
            Some(b.granted - a.granted - rate * (span + 1.0))
        })
        .fold(f64::MIN, f64::max)
}

/// `after - before` by key, keys with no change left out.
pub fn diff(
    after: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// The controller's RPCs answered `ResourceExhausted`, from its metrics page `text`.
pub fn refused(text: &str) -> f64 {
    controller_counter(
        text,
        "twc_temporal_rpc_total",
        &[("code", "ResourceExhausted")],
    )
}

/// Sum of samples of `name` in a controller's `/metrics` text with every label of `must`.
pub fn controller_counter(text: &str, name: &str, must: &[(&str, &str)]) -> f64 {
    twc_testenv::temporal::sum_by_label(text, name, must, "")
        .values()
        .sum()
}
