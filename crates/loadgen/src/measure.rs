//! What a window measures and prints: the controller's usage and metrics, RPCs by operation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::observe;
use crate::observe::{CONTROLLER_OPERATIONS, Sample};
use crate::{Run, row};

impl Run {
    pub(crate) fn usage_row(&self) {
        let u = self.controller.usage_figures();
        row(
            "controller",
            format!(
                "RSS {:.1} MiB (peak {:.1} MiB), CPU {:.1} s so far",
                u.rss_mib, u.peak_rss_mib, u.cpu_seconds
            ),
        );
    }

    pub(crate) async fn controller_metrics(&self) -> String {
        self.controller
            .get("/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Server-side RPCs between two samples: printed by operation, the controller's marked.
    /// Returns the controller's total.
    pub(crate) fn print_rpcs(&self, before: &Sample, after: &Sample, minutes: f64) -> f64 {
        let d = observe::diff(&after.requests, &before.requests);
        let mut controller = 0.0;
        let w = self.total() as f64;
        println!(
            "  {:<34} {:>9} {:>12} {:>16}",
            "Temporal RPCs (server-side)", "count", "per minute", "per WD per min"
        );
        for (op, n) in &d {
            let ours = CONTROLLER_OPERATIONS.contains(&op.as_str());
            if ours {
                controller += n;
            }
            println!(
                "    {:<32} {:>9.0} {:>12.1} {:>16.3}{}",
                op,
                n,
                n / minutes,
                n / minutes / w,
                if ours {
                    "  controller"
                } else {
                    "  (harness / server's own workers)"
                }
            );
        }
        println!(
            "    {:<32} {:>9.0} {:>12.1} {:>16.3}",
            "controller's operations, total",
            controller,
            controller / minutes,
            controller / minutes / w
        );
        let exhausted = after.exhausted_total() - before.exhausted_total();
        row("  server ResourceExhausted", format!("{exhausted:.0}"));
        controller
    }

    /// The apiserver's `apiserver_request_total`, summed by verb and resource (the subresource
    /// joined with a `/`).
    pub(crate) async fn apiserver_requests(&self) -> BTreeMap<(String, String), f64> {
        let req = match http::Request::get("/metrics").body(Vec::new()) {
            Ok(r) => r,
            Err(_) => return BTreeMap::new(),
        };
        let text = self.client.request_text(req).await.unwrap_or_default();
        let mut out = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_string())
                    .unwrap_or_default()
            };
            let mut resource = label("resource");
            let sub = label("subresource");
            if !sub.is_empty() {
                resource = format!("{resource}/{sub}");
            }
            if let Ok(v) = value.trim().parse::<f64>() {
                *out.entry((label("verb"), resource)).or_default() += v;
            }
        }
        out
    }

    /// What the apiserver served between two of its samples, per minute, by verb and resource.
    /// The harness is idle in a window (its sampler paused, no pods of its own), so what is
    /// counted is the controller's, plus the apiserver's own housekeeping.
    fn print_apiserver(
        &self,
        before: &BTreeMap<(String, String), f64>,
        after: &BTreeMap<(String, String), f64>,
        minutes: f64,
    ) {
        println!(
            "  {:<34} {:>9} {:>12}",
            "apiserver requests (its own count)", "count", "per minute"
        );
        let mut total = 0.0;
        for (key, n) in after {
            let d = n - before.get(key).copied().unwrap_or(0.0);
            if d < 0.5 {
                continue;
            }
            total += d;
            println!(
                "    {:<32} {:>9.0} {:>12.1}",
                format!("{} {}", key.0, key.1),
                d,
                d / minutes
            );
        }
        println!(
            "    {:<32} {:>9.0} {:>12.1}",
            "all requests",
            total,
            total / minutes
        );
    }

    /// Nothing changes for `--window-seconds`: RPCs, apiserver requests, CPU, memory.
    pub(crate) async fn window(&mut self, what: &str) {
        let secs = self.cli.window_seconds;
        eprintln!(
            "settling {} s, then measuring {what} for {secs} s...",
            self.cli.settle_seconds
        );
        tokio::time::sleep(Duration::from_secs(self.cli.settle_seconds)).await;
        self.sampler.pause(true);
        let before = observe::sample(&self.env.temporal.metrics_address).await;
        let api_before = self.apiserver_requests().await;
        let ctl_before = self.controller_metrics().await;
        let (u0, t0) = (self.controller.usage_figures(), Instant::now());
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let (u1, cpu_minutes) = (
            self.controller.usage_figures(),
            t0.elapsed().as_secs_f64() / 60.0,
        );
        let ctl_after = self.controller_metrics().await;
        let api_after = self.apiserver_requests().await;
        let after = observe::sample(&self.env.temporal.metrics_address).await;
        self.sampler.pause(false);
        let minutes = match (after.at, before.at) {
            (Some(a), Some(b)) => a.duration_since(b).as_secs_f64() / 60.0,
            _ => secs as f64 / 60.0,
        };
        println!("\n{what}: a {secs} s window");
        self.print_rpcs(&before, &after, minutes);
        self.print_apiserver(&api_before, &api_after, minutes);
        let rpc = |t: &str| observe::controller_counter(t, "twc_temporal_rpc_total", &[]);
        let own = rpc(&ctl_after) - rpc(&ctl_before);
        row(
            "  controller's own count",
            format!(
                "{own:.0} Temporal RPCs ({:.3} per WD per minute; twc_temporal_rpc_total)",
                own / minutes / self.total() as f64
            ),
        );
        // Passes at rest: each costs CPU even when it reads and writes nothing.
        let reconciles = |t: &str, c: &str| {
            observe::controller_counter(t, "twc_reconcile_total", &[("controller", c)])
        };
        for c in [
            "WorkerDeployment",
            "WorkerResourceTemplate",
            "Connection",
            "ClusterConnection",
        ] {
            let n = reconciles(&ctl_after, c) - reconciles(&ctl_before, c);
            row(
                &format!("  controller's {c} reconciles"),
                format!(
                    "{n:.0} ({:.1} per minute; twc_reconcile_total)",
                    n / minutes
                ),
            );
        }
        row(
            "  controller saw ResourceExhausted",
            format!(
                "{:.0}",
                observe::refused(&ctl_after) - observe::refused(&ctl_before)
            ),
        );
        row(
            "  controller CPU",
            format!(
                "{:.2} s per minute",
                (u1.cpu_seconds - u0.cpu_seconds) / cpu_minutes
            ),
        );
        row(
            "  controller memory at the end",
            format!(
                "VmRSS {:.1} MiB (anon {:.1}, file {:.1}), VmHWM {:.1} MiB",
                u1.rss_mib, u1.anon_rss_mib, u1.file_rss_mib, u1.peak_rss_mib
            ),
        );
        if let Some(rss) = self.env.temporal.rss_bytes() {
            row(
                "  Temporal dev server RSS",
                format!("{:.0} MiB", rss as f64 / 1048576.0),
            );
        }
    }
}
