//! The scenarios: steady (with a full resync and spec changes), rollout, pending.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use twc_api::WorkerDeployment;

use crate::observe;
use crate::{Run, Written, container, percentile, row};

impl Run {
    /// The steady window, full resync and spec-change latency.
    pub(crate) async fn steady(&mut self) -> anyhow::Result<()> {
        self.window("steady (nothing moves)").await;
        self.resync().await?;
        self.spec_changes().await?;
        Ok(())
    }

    /// Restarts the controller and waits until it reconciled every WorkerDeployment again.
    async fn resync(&mut self) -> anyhow::Result<()> {
        eprintln!("full resync: restarting the controller...");
        let t = Instant::now();
        self.controller.process.restart(Duration::from_secs(10))?;
        self.controller.wait_ready().await?;
        let ready = t.elapsed();
        // Changes while the restarted controller reads everything again (`spec_changes` picks
        // others: these are already at the next tag).
        let k = self.cli.resync_changes.min(self.total() / 2);
        let step = self.total() / k.max(1);
        let picked: Vec<(String, String)> = (0..k)
            .map(|i| self.wds[i * step + step / 2].clone())
            .collect();
        self.resync_changed.extend(picked.iter().cloned());
        let tag = self.tag + 1;
        let (written, want) = self
            .change_images(&picked, Duration::from_secs(2), tag)
            .await?;
        let w = self.total() as f64;
        let deadline = Instant::now() + Duration::from_secs(self.cli.timeout_seconds);
        let (mut reconciled_at, mut described_at) = (None, None);
        // With no pods, nothing is described (nothing can be in Temporal for those builds).
        let describes_expected = !self.cli.pods_never_start;
        while reconciled_at.is_none() || (describes_expected && described_at.is_none()) {
            let text = self.controller_metrics().await;
            let reconciles = observe::controller_counter(
                &text,
                "twc_reconcile_total",
                &[("controller", "WorkerDeployment")],
            );
            if reconciled_at.is_none() && reconciles >= w {
                reconciled_at = Some(t.elapsed());
            }
            let describes = observe::controller_counter(
                &text,
                "twc_temporal_rpc_total",
                &[("rpc", "DescribeWorkerDeployment")],
            );
            if described_at.is_none() && describes >= w {
                described_at = Some(t.elapsed());
            }
            if Instant::now() > deadline {
                eprintln!("!! full resync: not every WorkerDeployment reconciled in time");
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let secs = |d: Option<Duration>| {
            d.map(|d| format!("{:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| "not reached".into())
        };
        println!("\nfull resync: the controller process restarted (times from the restart)");
        row(
            "  ready (leader, caches synced)",
            format!("{:.1} s", ready.as_secs_f64()),
        );
        row(
            &format!("  {} reconciles (twc_reconcile_total)", self.total()),
            secs(reconciled_at),
        );
        if describes_expected {
            row(
                &format!("  {} DescribeWorkerDeployment", self.total()),
                secs(described_at),
            );
        }
        self.usage_row();
        if !written.is_empty() {
            let found = self.latencies(&written).await;
            let slowest = found.last().map(|(d, _, _)| *d).unwrap_or_default();
            self.resync_changes = Some((slowest, found.len(), written.len()));
            self.print_latencies(
                &format!("  {k} spec changes from ready, p50/p99/max"),
                k,
                &found,
            );
            self.finish_changes(want, "changes during the resync").await;
        }
        Ok(())
    }

    /// Writes image tag `tag` into each of `picked`, spread over `spread`: (WorkerDeployment,
    /// when written) and the generation each rollout must reach.
    async fn change_images(
        &mut self,
        picked: &[(String, String)],
        spread: Duration,
        tag: usize,
    ) -> anyhow::Result<(Written, HashMap<String, (i64, usize)>)> {
        let gap = spread / picked.len().max(1) as u32;
        let mut written = Vec::new();
        let mut want = HashMap::new();
        for (ns, name) in picked {
            let at = Instant::now();
            let generation = self.set_image(ns, name, tag).await?;
            written.push((ns.clone(), name.clone(), at));
            want.insert(format!("{ns}/{name}"), (generation, tag));
            tokio::time::sleep(gap).await;
        }
        Ok((written, want))
    }

    /// For each written WorkerDeployment, the time from its write to the first new versioned
    /// Deployment seen in a watch after it (waiting 120 s at most), fastest first.
    async fn latencies(&self, written: &Written) -> Vec<(Duration, String, String)> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut found = Vec::new();
            if let Ok(seen) = self.fleet.first_seen.lock() {
                for (ns, name, at) in written {
                    let wd = format!("{ns}/{name}");
                    let first = seen
                        .by_wd
                        .get(&wd)
                        .and_then(|v| v.iter().find(|(_, t)| *t >= *at));
                    if let Some((deployment, t)) = first {
                        found.push((t.duration_since(*at), wd, deployment.clone()));
                    }
                }
            }
            if found.len() == written.len() || Instant::now() > deadline {
                found.sort();
                return found;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Prints p50 / p99 / max of `found` (of `k` changes) and the three slowest.
    fn print_latencies(&self, what: &str, k: usize, found: &[(Duration, String, String)]) {
        let latencies: Vec<Duration> = found.iter().map(|(d, _, _)| *d).collect();
        row(
            what,
            format!(
                "{:.2} s / {:.2} s / {:.2} s (n={} of {k})",
                percentile(&latencies, 0.5).as_secs_f64(),
                percentile(&latencies, 0.99).as_secs_f64(),
                latencies.last().copied().unwrap_or_default().as_secs_f64(),
                latencies.len()
            ),
        );
        for (d, wd, deployment) in found.iter().rev().take(3) {
            row(
                "  slowest",
                format!("{wd}: {deployment} after {:.2} s", d.as_secs_f64()),
            );
        }
    }

    /// Waits for the rollouts of `want` (so later scenarios start from steady), then counts
    /// them with the others; returns how long that took.
    async fn finish_changes(
        &mut self,
        want: HashMap<String, (i64, usize)>,
        what: &str,
    ) -> Duration {
        let others = std::mem::take(&mut self.want);
        self.want = want;
        let done = self.wait_rollouts(Instant::now(), what).await;
        let changed = std::mem::take(&mut self.want);
        self.want = others;
        self.want.extend(changed);
        done
    }

    /// Patches the image of `--changes` WorkerDeployments, spread over a few seconds; spec write
    /// -> the new versioned Deployment seen in a watch.
    async fn spec_changes(&mut self) -> anyhow::Result<()> {
        let k = self.cli.changes.min(self.total());
        if k == 0 {
            return Ok(());
        }
        eprintln!("spec-change latency: {k} image changes...");
        let step = self.total() / k;
        // Each step's first WorkerDeployment the resync did not change (one it did would not
        // get a new version: its image is already the one written).
        let picked: Vec<(String, String)> = (0..k)
            .filter_map(|i| {
                self.wds[i * step..]
                    .iter()
                    .take(step)
                    .find(|wd| !self.resync_changed.contains(*wd))
                    .cloned()
            })
            .collect();
        let k = picked.len();
        let tag = self.tag + 1;
        let spread = Duration::from_secs(self.cli.changes_spread_seconds);
        let (written, want) = self.change_images(&picked, spread, tag).await?;
        let found = self.latencies(&written).await;
        println!(
            "\nspec-change latency: {k} images patched over {} s (spec write -> new versioned Deployment seen in a watch)",
            self.cli.changes_spread_seconds
        );
        self.print_latencies("  p50 / p99 / max", k, &found);
        let done = self.finish_changes(want, "spec changes").await;
        if !self.cli.pods_never_start {
            row(
                &format!("  those {k} RolloutComplete"),
                format!("{:.1} s after the last write", done.as_secs_f64()),
            );
        }
        // Every other WorkerDeployment goes to the same tag in the rollout scenario.
        self.tag = tag;
        Ok(())
    }

    /// Writes image tag `tag` into `ns/name`'s pod template; returns the new generation.
    async fn set_image(&self, ns: &str, name: &str, tag: usize) -> anyhow::Result<i64> {
        let api: Api<WorkerDeployment> = Api::namespaced(self.client.clone(), ns);
        let patch =
            json!({"spec": {"template": {"spec": {"containers": [container(ns, name, tag)]}}}});
        let wd = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patch WorkerDeployment {ns}/{name}"))?;
        Ok(wd.metadata.generation.unwrap_or(0))
    }

    /// Every image changes at once.
    pub(crate) async fn rollout(&mut self) -> anyhow::Result<()> {
        let tag = self.tag + 1;
        let w = self.total();
        eprintln!("rollout: changing all {w} images at once...");
        // Settle: the previous versions drain and scale down.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let ctl_before = self.controller_metrics().await;
        let before = observe::sample(&self.env.temporal.metrics_address).await;
        let t = Instant::now();
        let wds = self.wds.clone();
        let generations: Vec<(String, (i64, usize))> =
            futures::stream::iter(wds.iter().map(|(ns, name)| {
                let this = &*self;
                async move {
                    let g = this.set_image(ns, name, tag).await?;
                    Ok::<_, anyhow::Error>((format!("{ns}/{name}"), (g, tag)))
                }
            }))
            .buffer_unordered(self.cli.concurrency)
            .try_collect()
            .await?;
        let written = t.elapsed();
        self.want = generations.into_iter().collect();
        self.tag = tag;
        let done = self.wait_rollouts(t, "rollout").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = observe::sample(&self.env.temporal.metrics_address).await;
        let ctl_after = self.controller_metrics().await;
        let samples = self.sampler.since(t);
        let minutes = done.as_secs_f64() / 60.0;
        println!("\nrollout: all {w} images changed at once");
        row(
            "  images written",
            format!("in {:.1} s", written.as_secs_f64()),
        );
        row(
            &format!("  all {w} RolloutComplete"),
            format!("{:.1} s after the first write", done.as_secs_f64()),
        );
        row(
            "  reads, max in 1 s",
            format!("{:.0}", observe::max_reads_in(&samples, 1)),
        );
        row(
            "  reads, max in 10 s",
            format!(
                "{:.0} ({:.1} per s)",
                observe::max_reads_in(&samples, 10),
                observe::max_reads_in(&samples, 10) / 10.0
            ),
        );
        let ctl_reads = match (samples.first(), samples.last()) {
            (Some(a), Some(b)) => b.reads - a.reads,
            _ => 0.0,
        };
        row(
            "  reads, whole rollout",
            format!(
                "{:.0} counted by the server, {ctl_reads:.0} by the controller",
                after.reads() - before.reads()
            ),
        );
        let controller = self.print_rpcs(&before, &after, minutes.max(1.0 / 60.0));
        row(
            "  controller's RPCs per WD, whole rollout",
            format!("{:.1}", controller / w as f64),
        );
        row(
            "  controller saw ResourceExhausted",
            format!(
                "{:.0}",
                observe::refused(&ctl_after) - observe::refused(&ctl_before)
            ),
        );
        self.usage_row();
        Ok(())
    }

    /// Pods that never start: the window figures while every WorkerDeployment waits.
    /// Then a full resync and spec changes, as in `steady`: nothing is read from Temporal for
    /// a version whose pods are not ready, so these measure the Kubernetes side alone.
    pub(crate) async fn pending(&mut self) -> anyhow::Result<()> {
        self.window("pending (pods never start: waiting for pollers)")
            .await;
        self.resync().await?;
        self.spec_changes().await?;
        Ok(())
    }
}
