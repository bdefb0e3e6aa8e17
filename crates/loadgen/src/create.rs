//! Creating the fleet and waiting until its rollouts complete.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;
use twc_api::{ClusterConnection, WorkerDeployment};

use crate::{CLUSTER_CONNECTION, Run, row, wd_manifest};

impl Run {
    pub(crate) fn total(&self) -> usize {
        self.cli.worker_deployments
    }

    /// The ClusterConnection (mutual TLS through the proxy, with `renew`), the namespaces (each
    /// with the client certificate Secret, with `renew`) and the WorkerDeployments, with
    /// bounded concurrency.
    pub(crate) async fn create(&mut self) -> anyhow::Result<()> {
        let port = self
            .env
            .temporal
            .address
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_string();
        let spec = match &self.mtls {
            Some(m) => m.connection_spec(),
            None => json!({"hostPort": format!("127.0.0.1:{port}")}),
        };
        let cc: ClusterConnection = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
            "metadata": {"name": CLUSTER_CONNECTION},
            "spec": spec
        }))?;
        Api::<ClusterConnection>::all(self.client.clone())
            .create(&PostParams::default(), &cc)
            .await?;
        let namespaces: Vec<String> = (0..self.cli.namespaces)
            .map(|i| format!("lg-{i:04}"))
            .collect();
        let t = Instant::now();
        let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let (client, mtls) = (&self.client, self.mtls.as_ref());
        futures::stream::iter(namespaces.iter().map(|name| {
            let api = ns_api.clone();
            async move {
                let ns = k8s_openapi::api::core::v1::Namespace {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                api.create(&PostParams::default(), &ns)
                    .await
                    .with_context(|| format!("create namespace {name}"))?;
                if let Some(m) = mtls {
                    m.create_secret(client, name).await?;
                }
                Ok::<_, anyhow::Error>(())
            }
        }))
        .buffer_unordered(self.cli.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
        let ns_time = t.elapsed();
        self.wds = (0..self.total())
            .map(|i| {
                (
                    namespaces[i % namespaces.len()].clone(),
                    format!("w{:05}", i),
                )
            })
            .collect();
        let t = Instant::now();
        let client = self.client.clone();
        let created: Vec<(String, (i64, usize))> =
            futures::stream::iter(self.wds.iter().map(|(ns, name)| {
                let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
                let manifest = wd_manifest(ns, name, &self.cli.temporal_namespace, 1);
                async move {
                    let wd: WorkerDeployment = serde_json::from_value(manifest)?;
                    let made = api
                        .create(&PostParams::default(), &wd)
                        .await
                        .with_context(|| format!("create WorkerDeployment {ns}/{name}"))?;
                    Ok::<_, anyhow::Error>((
                        format!("{ns}/{name}"),
                        (made.metadata.generation.unwrap_or(1), 1),
                    ))
                }
            }))
            .buffer_unordered(self.cli.concurrency)
            .try_collect()
            .await?;
        let wd_time = t.elapsed();
        self.want = created.into_iter().collect();
        println!("\ncreation");
        row(
            "namespaces",
            format!("{} in {:.1} s", namespaces.len(), ns_time.as_secs_f64()),
        );
        row(
            "WorkerDeployments",
            format!(
                "{} in {:.1} s ({:.0} per s, {} in flight)",
                self.total(),
                wd_time.as_secs_f64(),
                self.total() as f64 / wd_time.as_secs_f64().max(0.001),
                self.cli.concurrency
            ),
        );
        Ok(())
    }

    /// Waits until every WorkerDeployment completed its rollout (with the fleet) or has a
    /// versioned Deployment (without), printing progress every 10 s.
    pub(crate) async fn settle(&mut self) -> anyhow::Result<()> {
        let t = Instant::now();
        let done = self.wait_rollouts(t, "first rollout").await;
        println!("\nfirst rollout (from the first WorkerDeployment created)");
        if self.cli.pods_never_start {
            row(
                "all versioned Deployments written",
                format!("{:.1} s", done.as_secs_f64()),
            );
        } else {
            row(
                "all RolloutComplete",
                format!("{:.1} s", done.as_secs_f64()),
            );
        }
        self.usage_row();
        Ok(())
    }

    /// Waits for `self.want` (or, without the fleet, for a Deployment of every
    /// WorkerDeployment); returns how long since `since`. Counts what did not finish.
    pub(crate) async fn wait_rollouts(&mut self, since: Instant, what: &str) -> Duration {
        let deadline = Instant::now() + Duration::from_secs(self.cli.timeout_seconds);
        let mut last_print = Instant::now();
        let mut last_sample = self.sampler.last();
        loop {
            let done = if self.cli.pods_never_start {
                self.with_deployment()
            } else {
                let (done, premature) = self.tracker.complete(&self.want);
                if premature > self.premature {
                    self.premature = premature;
                }
                done
            };
            if done >= self.want.len() {
                return since.elapsed();
            }
            if Instant::now() > deadline {
                eprintln!(
                    "!! {what}: only {done} of {} done after {} s",
                    self.want.len(),
                    self.cli.timeout_seconds
                );
                self.incomplete += self.want.len() - done;
                return since.elapsed();
            }
            if last_print.elapsed() >= Duration::from_secs(10) {
                let s = self.sampler.last();
                let secs = match (s.at, last_sample.at) {
                    (Some(a), Some(b)) => a.duration_since(b).as_secs_f64().max(0.001),
                    _ => 1.0,
                };
                let per_second = (s.reads - last_sample.reads) / secs;
                eprintln!(
                    "  {what}: {done}/{} after {:.0} s; pollers {}; controller reads {per_second:.1}/s; ResourceExhausted so far {}",
                    self.want.len(),
                    since.elapsed().as_secs_f64(),
                    self.fleet.pollers().await,
                    s.exhausted,
                );
                last_sample = s;
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// How many WorkerDeployments have a versioned Deployment.
    fn with_deployment(&self) -> usize {
        self.fleet
            .first_seen
            .lock()
            .map(|seen| seen.by_wd.len())
            .unwrap_or(0)
    }
}
