//! The `renew` scenario: the client certificate Secret that every versioned Deployment mounts
//! is renewed (a new key pair from the same CA, as cert-manager renews), and the controller
//! restarts their pods onto it, at most `--restart-pace` at once per Temporal address and
//! namespace. Measured from outside ([`crate::restarts`]): the most Deployments restarting at
//! once, and the time until every one restarted and rolled out again. With
//! `--restart-paces 0,3` the renewal runs once per pace, the controller restarted with each.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use twc_testenv::controller::Controller;

use crate::observe;
use crate::restarts::Outcome;
use crate::{IDENTITY, Run, percentile, row};

/// After every versioned Deployment is at rest (rolled out, digest recorded), this long with
/// nothing moving before the renewal, so the controller is idle when it comes.
const QUIET: Duration = Duration::from_secs(5);

/// `twc run`'s `--restart-pace` when not given (`restarts::DEFAULT_LIMIT` of the controller).
const DEFAULT_PACE: usize = 3;

impl Run {
    /// One renewal per pace of `--restart-paces` (or one with the controller as started).
    pub(crate) async fn renew(&mut self) -> anyhow::Result<()> {
        let paces: Vec<Option<usize>> = if self.cli.restart_paces.is_empty() {
            vec![None]
        } else {
            self.cli.restart_paces.iter().copied().map(Some).collect()
        };
        for pace in paces {
            if let Some(pace) = pace
                && Some(pace) != self.pace
            {
                self.restart_controller(pace).await?;
            }
            let outcome = self.renew_once().await?;
            self.renewals.push((self.pace_label(), outcome));
        }
        self.print_renewals();
        Ok(())
    }

    /// The pace the controller runs with, as printed.
    pub(crate) fn pace_label(&self) -> String {
        match self.pace {
            Some(0) => "0 (no pace)".into(),
            Some(n) => n.to_string(),
            None => format!("{DEFAULT_PACE} (the controller's default)"),
        }
    }

    /// Stops the controller and starts a new one with `--restart-pace pace`; waits until it
    /// reconciled every WorkerDeployment once (its full resync is over before a renewal).
    async fn restart_controller(&mut self, pace: usize) -> anyhow::Result<()> {
        eprintln!("renew: a new controller with --restart-pace {pace}...");
        self.controller.process.stop(Duration::from_secs(10));
        let args = crate::controller_args(&self.cli, Some(pace));
        self.controller = Controller::start_with_args(
            &self.env.control_plane,
            &self.dir,
            "controller",
            IDENTITY,
            &args,
        )?;
        self.controller.wait_ready().await?;
        self.sampler.follow(self.controller.addr.clone());
        self.pace = Some(pace);
        let deadline = Instant::now() + Duration::from_secs(self.cli.timeout_seconds);
        loop {
            let text = self.controller_metrics().await;
            let reconciles = observe::controller_counter(
                &text,
                "twc_reconcile_total",
                &[("controller", "WorkerDeployment")],
            );
            if reconciles >= self.total() as f64 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the new controller did not reconcile every WorkerDeployment in time");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until every versioned Deployment is at rest, renews every namespace's Secret
    /// at once and measures until each Deployment restarted and rolled out again.
    async fn renew_once(&mut self) -> anyhow::Result<Outcome> {
        let restarts = self
            .restarts
            .clone()
            .context("the renew scenario runs without its Deployment watch")?;
        let mtls = self
            .mtls
            .as_ref()
            .context("the renew scenario runs without mutual TLS")?;
        let deadline = Instant::now() + Duration::from_secs(self.cli.timeout_seconds);
        loop {
            match restarts.at_rest() {
                Some((all, ready)) if all >= self.total() && ready == all => break,
                seen if Instant::now() > deadline => bail!(
                    "renew: the versioned Deployments are not at rest after {} s: {seen:?} (running, rolled out with a digest recorded) of {}",
                    self.cli.timeout_seconds,
                    self.total()
                ),
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
        tokio::time::sleep(QUIET).await;
        let mut namespaces: Vec<&str> = self.wds.iter().map(|(ns, _)| ns.as_str()).collect();
        namespaces.sort();
        namespaces.dedup();
        eprintln!(
            "renew: renewing {} Secret(s), controller pace {}...",
            namespaces.len(),
            self.pace_label()
        );
        let of = restarts.begin();
        let t = Instant::now();
        let client = &self.client;
        futures::stream::iter(namespaces.iter().map(|ns| mtls.renew_secret(client, ns)))
            .buffer_unordered(self.cli.concurrency)
            .try_collect::<Vec<_>>()
            .await?;
        let written = t.elapsed();
        let deadline = Instant::now() + Duration::from_secs(self.cli.timeout_seconds);
        let mut last_print = Instant::now();
        loop {
            let (restarted, done, now, _) = restarts.progress();
            if done >= of {
                break;
            }
            if Instant::now() > deadline {
                eprintln!(
                    "!! renew: only {done} of {of} restarted and rolled out after {} s",
                    self.cli.timeout_seconds
                );
                self.incomplete += of - done;
                break;
            }
            if last_print.elapsed() >= Duration::from_secs(10) {
                eprintln!(
                    "  renew: {restarted}/{of} restarted, {done} rolled out, {now} restarting, after {:.0} s",
                    t.elapsed().as_secs_f64()
                );
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let outcome = restarts.end();
        self.print_renewal(namespaces.len(), written, &outcome);
        Ok(outcome)
    }

    fn print_renewal(&self, secrets: usize, written: Duration, o: &Outcome) {
        let secs = |d: Option<Duration>| {
            d.map(|d| format!("{:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| "not reached".into())
        };
        println!(
            "\nrenew: {secrets} client certificate Secret(s) renewed, {} versioned Deployments mount them; --restart-pace {} (times from the first Secret write)",
            o.of,
            self.pace_label()
        );
        row(
            "  Secrets written",
            format!("in {:.2} s", written.as_secs_f64()),
        );
        row(
            "  restarted / rolled out after",
            format!("{} / {} of {}", o.restarted, o.done, o.of),
        );
        row("  first restart seen", secs(o.first_restart));
        row("  last restart seen", secs(o.last_restart));
        row("  all restarted and rolled out", secs(o.all_done));
        row(
            "  peak restarting at once",
            format!("{} (first at {:.1} s)", o.peak, o.peak_at.as_secs_f64()),
        );
        row("  restarting at once, mean", format!("{:.1}", o.mean));
        row(
            "  one restart, p50 / max",
            format!(
                "{:.1} s / {:.1} s (restarted -> rolled out)",
                percentile(&o.each, 0.5).as_secs_f64(),
                o.each.last().copied().unwrap_or_default().as_secs_f64()
            ),
        );
        let pace = self.pace.unwrap_or(DEFAULT_PACE);
        if pace > 0 && o.peak > pace {
            println!(
                "  odd: more restarting at once ({}) than the pace ({pace})",
                o.peak
            );
        }
        self.usage_row();
    }

    /// The renewals side by side, each against the first (before).
    fn print_renewals(&self) {
        let Some((first_pace, first)) = self.renewals.first() else {
            return;
        };
        if self.renewals.len() < 2 {
            return;
        }
        println!(
            "\nrestart storm: {} versioned Deployments, one renewal per pace (ratio: against pace {first_pace})",
            first.of
        );
        let mut header = format!("  {:<34}", "--restart-pace");
        let mut peak = format!("  {:<34}", "peak restarting at once");
        let mut all = format!("  {:<34}", "all restarted and rolled out");
        for (pace, o) in &self.renewals {
            header.push_str(&format!(" {pace:>14}"));
            peak.push_str(&format!(" {:>14}", o.peak));
            all.push_str(&format!(
                " {:>14}",
                o.all_done
                    .map(|d| format!("{:.1} s", d.as_secs_f64()))
                    .unwrap_or_else(|| "not reached".into())
            ));
        }
        println!("{header}\n{peak}\n{all}");
        for (pace, o) in &self.renewals[1..] {
            let time = match (o.all_done, first.all_done) {
                (Some(a), Some(b)) => format!(
                    "{:.1} times as long",
                    a.as_secs_f64() / b.as_secs_f64().max(0.001)
                ),
                _ => "n/a".into(),
            };
            row(
                &format!("  pace {pace} against {first_pace}"),
                format!(
                    "peak {:.1} times lower; all restarted {time}",
                    first.peak as f64 / o.peak.max(1) as f64
                ),
            );
        }
    }
}
