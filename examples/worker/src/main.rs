//! An example Temporal worker for the controller's versioned Deployments.
//!
//! It reads what the controller injects into every worker container:
//! `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_DEPLOYMENT_NAME`,
//! `TEMPORAL_WORKER_BUILD_ID`, and for TLS `TEMPORAL_TLS`, `TEMPORAL_TLS_SERVER_NAME`,
//! `TEMPORAL_TLS_CLIENT_CERT_PATH`, `TEMPORAL_TLS_CLIENT_KEY_PATH`,
//! `TEMPORAL_TLS_SERVER_CA_CERT_PATH`, or `TEMPORAL_API_KEY`. The task queue is
//! `TEMPORAL_TASK_QUEUE`, or else the WorkerDeployment's name (the part of the deployment name
//! after `/`).
//!
//! With `TEMPORAL_WORKER_UNVERSIONED=true` it polls without worker versioning (as a worker
//! from before the migration to versioning does); then only the address, namespace and
//! `TEMPORAL_TASK_QUEUE` are needed.
//!
//! `WORKER_MODE` makes it misbehave on purpose, to test what a rollout does with a bad build:
//! `crash` exits with an error (a crash loop under a Deployment): at start, or after polling
//! for `WORKER_CRASH_AFTER_SECONDS`; `no-poll` stays up without ever polling Temporal (ready
//! pods, no pollers). `WORKER_FAIL_PERCENT=N` makes about N % of the `Work` workflows fail.
//! `WORKER_ACTIVITY_SECONDS=N` makes each `Work` workflow run one activity that takes N seconds
//! (a slow build: its workflows stay open, pinned to it), on the task queue
//! `WORKER_ACTIVITY_TASK_QUEUE` if set (else the workflow's own). `WORKER_ROLE=activities`
//! makes an activity-only worker (a worker group of its own): it polls only activities, runs
//! only `slow`, on its task queue.
//!
//! It polls with worker versioning on and Pinned as the default behaviour, and offers:
//! * `Succeed` - completes at once (a passing gate);
//! * `Fail` - fails at once (a failing gate);
//! * `Sleep(seconds)` - waits, then completes (keeps a version Draining while it runs);
//! * `Work(n)` - completes, or fails for about `WORKER_FAIL_PERCENT` % of the numbers `n`
//!   (spread over them, the same `n` always the same way: a build with a bug); with
//!   `WORKER_ACTIVITY_SECONDS` set, first runs the activity `slow` for that long;
//! * `CheckInput(json)` - completes if its JSON argument has `"ok": true`, else fails (a gate
//!   whose input comes from the spec, a ConfigMap or a Secret).

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use temporalio_client::{
    Client, ClientOptions, ClientTlsOptions, Connection, ConnectionOptions, TlsOptions, Url,
};
use temporalio_common::worker::{
    VersioningBehavior, WorkerDeploymentOptions, WorkerDeploymentVersion,
};
use temporalio_macros::{activities, workflow, workflow_methods};
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use temporalio_sdk::{
    ActivityOptions, ApplicationFailure, Runtime, Worker, WorkerOptions, WorkflowContext,
    WorkflowResult,
};

#[workflow]
#[derive(Default)]
pub struct Succeed;

#[workflow_methods]
impl Succeed {
    #[run]
    pub async fn run(_ctx: &mut WorkflowContext<Self>) -> WorkflowResult<String> {
        Ok("ok".to_string())
    }
}

#[workflow]
#[derive(Default)]
pub struct Fail;

#[workflow_methods]
impl Fail {
    #[run]
    pub async fn run(_ctx: &mut WorkflowContext<Self>) -> WorkflowResult<String> {
        Err(ApplicationFailure::new("this gate always fails").into())
    }
}

#[workflow]
#[derive(Default)]
pub struct Sleep;

#[workflow_methods]
impl Sleep {
    #[run]
    pub async fn run(ctx: &mut WorkflowContext<Self>, seconds: u64) -> WorkflowResult<String> {
        ctx.timer(Duration::from_secs(seconds)).await;
        Ok(format!("slept {seconds}s"))
    }
}

#[workflow]
#[derive(Default)]
pub struct Work;

#[workflow_methods]
impl Work {
    #[run]
    pub async fn run(ctx: &mut WorkflowContext<Self>, n: u64) -> WorkflowResult<String> {
        // The same for every run of this build (set on its pods): deterministic on replay.
        let percent: u64 = std::env::var("WORKER_FAIL_PERCENT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let slow: u64 = std::env::var("WORKER_ACTIVITY_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if slow > 0 {
            let mut options =
                ActivityOptions::start_to_close_timeout(Duration::from_secs(slow + 60));
            options.task_queue = std::env::var("WORKER_ACTIVITY_TASK_QUEUE").ok();
            ctx.execute_activity(SlowActivities::slow, slow, options)
                .await?;
        }
        if n.wrapping_mul(37) % 100 < percent {
            Err(
                ApplicationFailure::new(format!("work {n} failed (WORKER_FAIL_PERCENT={percent})"))
                    .into(),
            )
        } else {
            Ok(format!("work {n} done"))
        }
    }
}

/// The activity of a slow build.
pub struct SlowActivities;

#[activities]
impl SlowActivities {
    /// Takes `seconds`, then completes.
    #[activity]
    pub async fn slow(_ctx: ActivityContext, seconds: u64) -> Result<String, ActivityError> {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        Ok(format!("took {seconds}s"))
    }
}

#[workflow]
#[derive(Default)]
pub struct CheckInput;

#[workflow_methods]
impl CheckInput {
    #[run]
    pub async fn run(
        _ctx: &mut WorkflowContext<Self>,
        input: serde_json::Value,
    ) -> WorkflowResult<String> {
        if input.get("ok") == Some(&serde_json::Value::Bool(true)) {
            Ok("input ok".to_string())
        } else {
            // Never echo the input: it may come from a Secret.
            Err(ApplicationFailure::new("the gate input does not have \"ok\": true").into())
        }
    }
}

fn env(key: &str) -> anyhow::Result<String> {
    std::env::var(key).with_context(|| format!("{key} is not set"))
}

fn read(path_var: &str) -> anyhow::Result<Option<Vec<u8>>> {
    match std::env::var(path_var) {
        Ok(path) => Ok(Some(
            std::fs::read(&path).with_context(|| format!("{path_var}={path}"))?,
        )),
        Err(_) => Ok(None),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let crash_after = std::env::var("WORKER_CRASH_AFTER_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let mode = std::env::var("WORKER_MODE").unwrap_or_default();
    match mode.as_str() {
        "crash" if crash_after == 0 => {
            anyhow::bail!("WORKER_MODE=crash: exiting at start, as a broken build does")
        }
        "no-poll" => {
            println!("WORKER_MODE=no-poll: up, never polling");
            shutdown_signal().await;
            return Ok(());
        }
        _ => {}
    }
    let address = env("TEMPORAL_ADDRESS")?;
    let namespace = env("TEMPORAL_NAMESPACE")?;
    let unversioned = std::env::var("TEMPORAL_WORKER_UNVERSIONED").is_ok_and(|v| v == "true");
    let (deployment, build_id, task_queue) = if unversioned {
        let build_id =
            std::env::var("TEMPORAL_WORKER_BUILD_ID").unwrap_or_else(|_| "unversioned".into());
        (String::new(), build_id, env("TEMPORAL_TASK_QUEUE")?)
    } else {
        let deployment = env("TEMPORAL_DEPLOYMENT_NAME")?;
        let build_id = env("TEMPORAL_WORKER_BUILD_ID")?;
        let task_queue = std::env::var("TEMPORAL_TASK_QUEUE").unwrap_or_else(|_| {
            deployment
                .rsplit('/')
                .next()
                .unwrap_or(&deployment)
                .to_string()
        });
        (deployment, build_id, task_queue)
    };

    let api_key = std::env::var("TEMPORAL_API_KEY").ok();
    let cert = read("TEMPORAL_TLS_CLIENT_CERT_PATH")?;
    let key = read("TEMPORAL_TLS_CLIENT_KEY_PATH")?;
    let ca = read("TEMPORAL_TLS_SERVER_CA_CERT_PATH")?;
    let use_tls = std::env::var("TEMPORAL_TLS").is_ok_and(|v| v == "true")
        || api_key.is_some()
        || cert.is_some();
    let tls = use_tls.then(|| {
        let client_tls = match (cert, key) {
            (Some(c), Some(k)) => Some(
                ClientTlsOptions::builder()
                    .client_cert(c)
                    .client_private_key(k)
                    .build(),
            ),
            _ => None,
        };
        TlsOptions::builder()
            .maybe_domain(std::env::var("TEMPORAL_TLS_SERVER_NAME").ok())
            .maybe_server_root_ca_cert(ca)
            .maybe_client_tls_options(client_tls)
            .build()
    });
    let scheme = if use_tls { "https" } else { "http" };
    let url = Url::from_str(&format!("{scheme}://{address}"))?;
    let connection = Connection::connect(
        ConnectionOptions::new(url)
            .identity(format!(
                "twc-example-worker@{}",
                std::env::var("HOSTNAME").unwrap_or_default()
            ))
            .maybe_tls_options(tls)
            .maybe_api_key(api_key)
            .build(),
    )
    .await
    .with_context(|| format!("connecting to {address}"))?;
    let client = Client::new(connection, ClientOptions::new(namespace.clone()).build())?;

    let runtime = Runtime::from_current_tokio(Default::default())?;
    let deployment_options = if unversioned {
        WorkerDeploymentOptions::from_build_id(build_id.clone())
    } else {
        WorkerDeploymentOptions::new(
            WorkerDeploymentVersion::builder()
                .deployment_name(deployment.clone())
                .build_id(build_id.clone())
                .build(),
        )
        .use_worker_versioning(true)
        .default_versioning_behavior(VersioningBehavior::Pinned)
        .build()
    };
    let activities_only = std::env::var("WORKER_ROLE").is_ok_and(|r| r == "activities");
    let mut options = if activities_only {
        WorkerOptions::new(task_queue.clone())
            .deployment_options(deployment_options)
            .build()
    } else {
        WorkerOptions::new(task_queue.clone())
            .deployment_options(deployment_options)
            .register_workflow::<Succeed>()?
            .register_workflow::<Fail>()?
            .register_workflow::<Sleep>()?
            .register_workflow::<CheckInput>()?
            .register_workflow::<Work>()?
            .build()
    };
    // Only a slow build (or an activity worker) polls for activities: every other worker stays
    // a workflow-only poller, as light on the server as before.
    let slow = std::env::var("WORKER_ACTIVITY_SECONDS")
        .is_ok_and(|v| v.parse::<u64>().is_ok_and(|n| n > 0));
    let activities_elsewhere = std::env::var("WORKER_ACTIVITY_TASK_QUEUE").is_ok();
    if activities_only || (slow && !activities_elsewhere) {
        options.register_activities(SlowActivities);
    }
    let mut worker = Worker::new(&runtime, client, options)?;
    println!(
        "polling task queue {task_queue} in {namespace} as {deployment}:{build_id} at {address}"
    );
    let crash = async {
        if mode == "crash" {
            tokio::time::sleep(Duration::from_secs(crash_after)).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    // SIGTERM (a pod deleted or scaled away): a graceful shutdown, as a real worker does. The
    // SDK finishes the tasks in hand and tells the server, so the worker leaves Temporal's
    // worker list at once (ShuttingDown) instead of after its heartbeats go stale.
    let stop = worker.shutdown_handle();
    let run = worker.run();
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => result?,
        _ = shutdown_signal() => {
            println!("shutting down");
            stop();
            match tokio::time::timeout(Duration::from_secs(20), run).await {
                Ok(result) => result?,
                Err(_) => println!("the shutdown took over 20 s; exiting"),
            }
        }
        _ = crash => anyhow::bail!("WORKER_MODE=crash: exiting after {crash_after}s, as a broken build does"),
    }
    Ok(())
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
