//! The server's part of "pollers registered -> Current", with no controller: how long the
//! Temporal dev server takes to show a version its first poller registered, and to record a
//! promotion it was asked for. What is left of the rollout benchmark's figure is the
//! controller's.
//!
//!     cargo bench --profile dev -p twc-controller --bench registration_floor
//!
//! For each of TWC_BENCH_VERSIONS (default 10) versions, one after the other in one worker
//! deployment and one Temporal namespace: a fresh example worker process polls with the new
//! build ID; the benchmark reads `DescribeWorkerDeploymentVersion` and
//! `DescribeWorkerDeployment` every TWC_BENCH_POLL_MS (default 20) until the version shows in
//! each, then asks `SetWorkerDeploymentCurrentVersion` at once (alternately as soon as the
//! version's own describe shows it, and as soon as the deployment's does) and reads the
//! `currentSinceTime` the server recorded. The old worker is stopped after each promotion.
//! Times are from the version's `createTime` (the server's clock, the same machine).

use std::time::{Duration, Instant, SystemTime};

use temporalio_client::tonic::Request;
use temporalio_common::protos::temporal::api::deployment::v1::WorkerDeploymentVersion;
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    DescribeWorkerDeploymentRequest, DescribeWorkerDeploymentVersionRequest,
    SetWorkerDeploymentCurrentVersionRequest,
};

#[path = "common/stats.rs"]
mod stats;
use stats::{secs as since, ts};

fn report(what: &str, v: Vec<f64>) {
    stats::report(what, v, 3);
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One version's times, each from its `createTime`.
#[derive(Default)]
struct Sample {
    in_version_describe: f64,
    in_deployment_describe: f64,
    asked: f64,
    current_since: f64,
    answered: f64,
    /// The promotion was asked for as soon as the version's own describe showed it.
    early: bool,
    refused: Option<String>,
}

struct Worker(std::process::Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> anyhow::Result<()> {
    let versions = env_u64("TWC_BENCH_VERSIONS", 10);
    let poll = Duration::from_millis(env_u64("TWC_BENCH_POLL_MS", 20));
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let dir = twc_testenv::fresh_dir(&std::env::temp_dir().join("twc-registration-floor"))?;
        let server =
            twc_testenv::TemporalServer::start(&twc_testenv::TemporalOptions::default(), &dir)
                .await?;
        let worker_bin =
            twc_testenv::paths::workspace_binary("twc-example-worker", "twc-example-worker")?;
        let namespace = server.namespace().await?;
        let conn = server.connect().await?;
        let deployment = "floor/w".to_string();
        println!(
            "{versions} versions, one after the other, in one worker deployment; reads every {} ms",
            poll.as_millis()
        );
        let mut samples = Vec::new();
        let mut previous: Option<Worker> = None;
        for i in 0..versions {
            let build = format!("b{i}");
            let worker = Worker(
                std::process::Command::new(&worker_bin)
                    .env("TEMPORAL_ADDRESS", &server.address)
                    .env("TEMPORAL_NAMESPACE", &namespace)
                    .env("TEMPORAL_DEPLOYMENT_NAME", &deployment)
                    .env("TEMPORAL_WORKER_BUILD_ID", &build)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()?,
            );
            let early = i % 2 == 0;
            let started = Instant::now();
            let (mut seen_version, mut seen_deployment) = (None, None);
            let mut created = None;
            while seen_deployment.is_none() || (early && seen_version.is_none()) {
                if started.elapsed() > Duration::from_secs(60) {
                    anyhow::bail!("version {build} not seen in 60 s");
                }
                let mut svc = conn.workflow_service();
                let at = SystemTime::now();
                if seen_version.is_none()
                    && let Ok(r) = svc
                        .describe_worker_deployment_version(Request::new(
                            DescribeWorkerDeploymentVersionRequest {
                                namespace: namespace.clone(),
                                deployment_version: Some(WorkerDeploymentVersion {
                                    deployment_name: deployment.clone(),
                                    build_id: build.clone(),
                                }),
                                ..Default::default()
                            },
                        ))
                        .await
                    && let Some(info) = r.into_inner().worker_deployment_version_info
                {
                    seen_version = Some(at);
                    created = created.or(ts(&info.create_time));
                }
                if early && seen_version.is_some() {
                    break;
                }
                let at = SystemTime::now();
                if let Ok(r) = svc
                    .describe_worker_deployment(Request::new(DescribeWorkerDeploymentRequest {
                        namespace: namespace.clone(),
                        deployment_name: deployment.clone(),
                    }))
                    .await
                    && let Some(v) = r
                        .into_inner()
                        .worker_deployment_info
                        .unwrap_or_default()
                        .version_summaries
                        .into_iter()
                        .find(|v| v.deployment_version.as_ref().is_some_and(|d| d.build_id == build))
                {
                    seen_deployment = Some(at);
                    created = created.or(ts(&v.create_time));
                }
                tokio::time::sleep(poll).await;
            }
            let asked = SystemTime::now();
            let mut svc = conn.workflow_service();
            let answer = svc
                .set_worker_deployment_current_version(Request::new(
                    SetWorkerDeploymentCurrentVersionRequest {
                        namespace: namespace.clone(),
                        deployment_name: deployment.clone(),
                        build_id: build.clone(),
                        identity: "registration-floor".into(),
                        ..Default::default()
                    },
                ))
                .await;
            let answered = SystemTime::now();
            let refused = answer.err().map(|s| format!("{:?}: {}", s.code(), s.message()));
            // What the server recorded.
            let mut current_since = None;
            for _ in 0..100 {
                let r = svc
                    .describe_worker_deployment(Request::new(DescribeWorkerDeploymentRequest {
                        namespace: namespace.clone(),
                        deployment_name: deployment.clone(),
                    }))
                    .await?
                    .into_inner();
                current_since = r
                    .worker_deployment_info
                    .unwrap_or_default()
                    .version_summaries
                    .iter()
                    .find(|v| v.deployment_version.as_ref().is_some_and(|d| d.build_id == build))
                    .and_then(|v| ts(&v.current_since_time));
                if current_since.is_some() || refused.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let Some(created) = created else {
                anyhow::bail!("version {build}: no createTime");
            };
            let s = Sample {
                in_version_describe: seen_version.map_or(f64::NAN, |t| since(created, t)),
                in_deployment_describe: seen_deployment.map_or(f64::NAN, |t| since(created, t)),
                asked: since(created, asked),
                current_since: current_since.map_or(f64::NAN, |t| since(created, t)),
                answered: since(created, answered),
                early,
                refused,
            };
            println!(
                "  {build}: version describe {:.3} s, deployment describe {:.3} s, asked {:.3} s{}, current since {:.3} s, answered {:.3} s{}",
                s.in_version_describe,
                s.in_deployment_describe,
                s.asked,
                if early { " (early)" } else { "" },
                s.current_since,
                s.answered,
                s.refused.as_deref().map(|r| format!(", refused: {r}")).unwrap_or_default()
            );
            samples.push(s);
            drop(previous.replace(worker));
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        println!("\nfrom the version's createTime (its first poll):");
        let col = |f: &dyn Fn(&Sample) -> f64, early: Option<bool>| -> Vec<f64> {
            samples
                .iter()
                .filter(|s| early.is_none_or(|e| s.early == e) && s.refused.is_none())
                .map(f)
                .filter(|x| x.is_finite())
                .collect()
        };
        report("shown by DescribeWorkerDeploymentVersion", col(&|s| s.in_version_describe, None));
        report("shown by DescribeWorkerDeployment", col(&|s| s.in_deployment_describe, Some(false)));
        for (early, how) in [(true, "on the version's describe"), (false, "on the deployment's describe")] {
            report(&format!("promotion asked {how}: currentSinceTime"), col(&|s| s.current_since, Some(early)));
            report(&format!("promotion asked {how}: answered"), col(&|s| s.answered, Some(early)));
            report("  asked -> currentSinceTime", col(&|s| s.current_since - s.asked, Some(early)));
        }
        let refused = samples.iter().filter(|s| s.refused.is_some()).count();
        println!("  promotions refused: {refused} of {}", samples.len());
        Ok(())
    })
}
