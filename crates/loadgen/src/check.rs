//! The `--assert` checks and the fleet's summary.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use crate::observe;
use crate::{Run, row};

impl Run {
    /// The `--assert` properties; true when one failed.
    pub(crate) async fn check(&self) -> bool {
        let mut failed = false;
        println!("\nassertions");
        if self.incomplete > 0 {
            println!("  FAIL {} rollouts did not complete", self.incomplete);
            failed = true;
        } else {
            println!("  ok   every rollout completed");
        }
        let server = observe::sample(&self.env.temporal.metrics_address).await;
        let exhausted = server.exhausted_reads();
        let ctl = self.sampler.last().exhausted;
        if exhausted > 0.0 || ctl > 0.0 {
            println!(
                "  FAIL ResourceExhausted on reads: {exhausted:.0} counted by the server, {ctl:.0} by the controller"
            );
            failed = true;
        } else {
            println!("  ok   no ResourceExhausted on reads");
        }
        let others = server.exhausted_total() - exhausted;
        if others > 0.0 {
            println!(
                "  note {others:.0} ResourceExhausted on other operations (a deployment's own update rate), retried: {:?}",
                server.exhausted
            );
        }
        if let Some(limit) = self.cli.expect_resync_change_seconds {
            match self.resync_changes {
                Some((slowest, seen, of)) if seen == of && slowest.as_secs_f64() <= limit => {
                    println!(
                        "  ok   the {of} spec changes during the resync had their Deployment within {:.2} s (limit {limit} s)",
                        slowest.as_secs_f64()
                    );
                }
                Some((slowest, seen, of)) => {
                    println!(
                        "  FAIL spec changes during the resync: {seen} of {of} had their Deployment, the slowest after {:.2} s (limit {limit} s)",
                        slowest.as_secs_f64()
                    );
                    failed = true;
                }
                None => {
                    println!(
                        "  FAIL no spec changes were made during a resync (scenario steady or pending, --resync-changes)"
                    );
                    failed = true;
                }
            }
        }
        if let (Some(r), Some(b)) = (self.cli.expect_max_read_rps, self.cli.expect_burst) {
            let samples = self.sampler.since(self.started);
            // Every window of 10 samples against B + R * (its real span + 1 s): the tokens the
            // budget granted, counted when granted (a read counted when it completes may have
            // had its token seconds before on a loaded server; the 1 s is the samples' jitter).
            let max = observe::max_reads_in(&samples, 10);
            let over = observe::max_reads_over_budget(&samples, 10, r);
            let granted = match (samples.first(), samples.last()) {
                (Some(a), Some(z)) => z.granted - a.granted,
                _ => 0.0,
            };
            if granted <= 0.0 {
                // Nothing granted means the budget's metric was not found: no check at all.
                println!(
                    "  FAIL no read budget grants seen (twc_temporal_read_budget_wait_seconds_count)"
                );
                failed = true;
            } else if over > b {
                println!(
                    "  FAIL granted reads went {over:.1} over R * (span + 1 s) in some 10 s, more than the burst {b:.0}"
                );
                failed = true;
            } else {
                println!(
                    "  ok   granted reads within B + R * (span + 1 s) in every 10 s (at most {max:.0} completed in 10 samples; {granted:.0} granted in all, at most {over:.1} over R * (span + 1 s), burst {b:.0})"
                );
            }
        }
        failed
    }

    pub(crate) async fn fleet_summary(&self) {
        let c = &self.fleet.counts;
        println!("\nthe harness (fleet)");
        row(
            "  status writes",
            format!(
                "{} ({} retried)",
                c.status_writes.load(Ordering::Relaxed),
                c.status_errors.load(Ordering::Relaxed)
            ),
        );
        row(
            "  polls",
            format!(
                "{} ({} failed), {} pollers started, {} running",
                c.polls.load(Ordering::Relaxed),
                c.poll_errors.load(Ordering::Relaxed),
                c.pollers_started.load(Ordering::Relaxed),
                self.fleet.pollers().await
            ),
        );
        let by_op: BTreeMap<String, f64> = observe::sample(&self.env.temporal.metrics_address)
            .await
            .exhausted;
        if !by_op.is_empty() {
            row("  server ResourceExhausted by op", format!("{by_op:?}"));
        }
    }
}
