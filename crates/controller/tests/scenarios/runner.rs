//! Runs the scenarios concurrently while keeping one libtest test per scenario.
//!
//! libtest runs as many tests at once as the machine has cores (two here), and a scenario
//! spends most of its time waiting for workers, Temporal and the controller. So the first
//! scenario test to start launches every scenario the command line selects on a background
//! runtime (at most [`CONCURRENCY`] at a time), and each test then waits for the outcome of its
//! own: the names, filters and pass/fail report stay those of libtest, and the binary takes
//! about as long as its slowest few scenarios instead of their sum.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::sync::Semaphore;

use crate::common::{self, World};

/// Scenarios running at once. Each runs one to seven worker processes.
pub const CONCURRENCY: usize = 10;

/// The body of a scenario by name.
pub type Bodies = fn(&str, &'static World) -> Option<BoxFuture<'static, ()>>;

type Outcome = Shared<BoxFuture<'static, Result<(), String>>>;

struct Runner {
    world: Result<&'static World, String>,
    runtime: tokio::runtime::Runtime,
    permits: Arc<Semaphore>,
    bodies: Bodies,
    outcomes: Mutex<HashMap<String, Outcome>>,
}

static RUNNER: OnceLock<Runner> = OnceLock::new();

impl Runner {
    fn start(&self, name: &str) -> Outcome {
        let Ok(world) = self.world.clone() else {
            let e = self.world.clone().err().unwrap_or_default();
            return futures::future::ready(Err(format!("no test world: {e}")))
                .boxed()
                .shared();
        };
        let Some(body) = (self.bodies)(name, world) else {
            let msg = format!("no scenario named {name}");
            return futures::future::ready(Err(msg)).boxed().shared();
        };
        let permits = self.permits.clone();
        let label = name.to_string();
        let task = self.runtime.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let started = Instant::now();
            let result = tokio::spawn(body).await;
            eprintln!(
                "scenario {label}: {} in {:.1}s",
                if result.is_ok() { "passed" } else { "FAILED" },
                started.elapsed().as_secs_f64()
            );
            result
        });
        async move {
            match task.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) | Err(e) => Err(panic_message(e)),
            }
        }
        .boxed()
        .shared()
    }
}

fn panic_message(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return e.to_string();
    }
    let payload = e.into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

/// The outcome of scenario `name`; the first call launches every selected scenario.
pub async fn outcome(
    name: &str,
    all: &'static [&'static str],
    bodies: Bodies,
) -> Result<(), String> {
    let runner = tokio::task::spawn_blocking(move || {
        RUNNER.get_or_init(|| {
            std::thread::spawn(move || launch(all, bodies))
                .join()
                .unwrap_or_else(|_| panic!("the scenario runner did not start"))
        })
    })
    .await
    .map_err(|e| e.to_string())?;
    let outcome = {
        let mut outcomes = runner.outcomes.lock().map_err(|e| e.to_string())?;
        outcomes
            .entry(name.to_string())
            .or_insert_with(|| runner.start(name))
            .clone()
    };
    outcome.await
}

fn launch(all: &'static [&'static str], bodies: Bodies) -> Runner {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("scenarios")
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("scenario runtime: {e}"));
    let mut config = common::test_config();
    config.limits.max_undeletable_versions = crate::harness::MAX_UNDELETABLE;
    // `wrt_apply_failure` renders a kind no apiserver serves (TWC's `FakeResource`).
    config.wrt_allowed_kinds.push("FakeResource".into());
    let world = runtime.block_on(common::world_with(Some(config)));
    let runner = Runner {
        world,
        runtime,
        permits: Arc::new(Semaphore::new(CONCURRENCY)),
        bodies,
        outcomes: Mutex::new(HashMap::new()),
    };
    let selected: Vec<&str> = all.iter().copied().filter(|n| selected(n)).collect();
    if let Ok(mut outcomes) = runner.outcomes.lock() {
        for name in selected {
            outcomes.insert(name.to_string(), runner.start(name));
        }
    }
    runner
}

/// Whether libtest's command line selects test `name` (filters, `--exact`, `--skip`).
fn selected(name: &str) -> bool {
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut exact = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--exact" => exact = true,
            "--skip" => skips.extend(args.next()),
            "--test-threads" | "--format" | "--logfile" | "--color" | "-Z" | "--shuffle-seed" => {
                args.next();
            }
            a if a.starts_with('-') => {}
            a => filters.push(a.to_string()),
        }
    }
    let matches = |f: &String| {
        if exact {
            name == f
        } else {
            name.contains(f.as_str())
        }
    };
    (filters.is_empty() || filters.iter().any(matches))
        && !skips.iter().any(|s| name.contains(s.as_str()))
}
