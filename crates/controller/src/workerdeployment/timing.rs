//! Where a reconcile's time went, step by step: said at debug level for every reconcile, and
//! at info level for one slower than [`SLOW`] (a person asking why a spec change took seconds
//! to show reads the answer in the log, without a debug build or a profiler).

use std::fmt::Write;
use std::time::{Duration, Instant};

/// A reconcile that takes this long, or waited this long in the queue, is said at info level.
pub const SLOW: Duration = Duration::from_secs(2);

/// The steps of one reconcile, each with the time since the step before.
pub struct Phases {
    /// How long it waited between its trigger and its start (None: a timed requeue).
    queued: Option<Duration>,
    last: Instant,
    spent: Vec<(&'static str, Duration)>,
}

impl Phases {
    pub fn start(queued: Option<Duration>) -> Self {
        Self {
            queued,
            last: Instant::now(),
            spent: Vec::new(),
        }
    }

    /// `step` ended now.
    pub fn mark(&mut self, step: &'static str) {
        let now = Instant::now();
        self.spent.push((step, now.duration_since(self.last)));
        self.last = now;
    }

    /// The time from the start to the last mark.
    pub fn total(&self) -> Duration {
        self.spent.iter().map(|(_, d)| *d).sum()
    }

    /// Whether it is worth saying at info level.
    pub fn slow(&self) -> bool {
        self.total() >= SLOW || self.queued.is_some_and(|q| q >= SLOW)
    }

    /// "2.31 s (queued 0.02 s; sync 0.00, listing 2.20, ...)": the steps in order, each
    /// counted once even if marked more than once.
    pub fn summary(&self) -> String {
        let mut out = format!("{:.2} s (", self.total().as_secs_f64());
        if let Some(q) = self.queued {
            let _ = write!(out, "queued {:.2} s; ", q.as_secs_f64());
        }
        let mut steps: Vec<(&'static str, Duration)> = Vec::new();
        for (step, d) in &self.spent {
            match steps.iter_mut().find(|(s, _)| s == step) {
                Some((_, total)) => *total += *d,
                None => steps.push((step, *d)),
            }
        }
        for (i, (step, d)) in steps.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(out, "{sep}{step} {:.2}", d.as_secs_f64());
        }
        out.push(')');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_summed_in_order_and_slowness_counts_the_queue() {
        let mut p = Phases::start(Some(Duration::from_millis(10)));
        p.spent = vec![
            ("listing", Duration::from_millis(1500)),
            ("read", Duration::from_millis(200)),
            ("listing", Duration::from_millis(500)),
        ];
        assert_eq!(p.total(), Duration::from_millis(2200));
        assert!(p.slow());
        assert_eq!(
            p.summary(),
            "2.20 s (queued 0.01 s; listing 2.00, read 0.20)"
        );

        let mut quick = Phases::start(None);
        quick.spent = vec![("read", Duration::from_millis(300))];
        assert!(!quick.slow());
        assert_eq!(quick.summary(), "0.30 s (read 0.30)");
        let waited = Phases::start(Some(Duration::from_secs(3)));
        assert!(waited.slow(), "a long wait in the queue is slow too");
    }
}
