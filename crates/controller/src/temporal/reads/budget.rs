//! The read budget of a Temporal namespace: a token bucket with two queues, moving reads
//! before steady ones.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

/// Which reads go first when the budget is short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// A rollout in motion (a new spec, a version waiting for pollers, a ramp step).
    Moving,
    /// Checks of deployments at rest.
    Steady,
}

impl Priority {
    pub fn label(self) -> &'static str {
        match self {
            Priority::Moving => "moving",
            Priority::Steady => "steady",
        }
    }
}

/// A token bucket with two queues: a read waits until a token is free, moving reads first.
/// Waiters are served in order within a priority; one that gave up costs no token.
pub struct Budget {
    asks: mpsc::UnboundedSender<(Priority, oneshot::Sender<()>)>,
    /// Reads waiting for a token now.
    waiting: std::sync::atomic::AtomicUsize,
}

impl Budget {
    /// A bucket of `burst` tokens refilled at `rate` per second (its dispatcher runs on the
    /// current Tokio runtime until the bucket is dropped).
    pub fn new(rate: f64, burst: u32) -> Self {
        let (asks, rx) = mpsc::unbounded_channel();
        tokio::spawn(dispatch(rx, rate.max(0.001), f64::from(burst.max(1))));
        Self {
            asks,
            waiting: Default::default(),
        }
    }

    /// How many reads wait for a token now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits for a token.
    pub async fn take(&self, priority: Priority) {
        let start = Instant::now();
        let (tx, rx) = oneshot::channel();
        // Counted while waiting, also when the wait is given up (the future dropped).
        let _waiting = Waiting::new(&self.waiting);
        if self.asks.send((priority, tx)).is_ok() {
            let _ = rx.await;
        }
        crate::metrics::global().read_budget_waited(priority.label(), start.elapsed());
    }
}

/// One read counted in [`Budget::waiting`] for as long as it lives.
struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

async fn dispatch(
    mut asks: mpsc::UnboundedReceiver<(Priority, oneshot::Sender<()>)>,
    rate: f64,
    burst: f64,
) {
    let mut queues: [VecDeque<oneshot::Sender<()>>; 2] = [VecDeque::new(), VecDeque::new()];
    let push = |queues: &mut [VecDeque<oneshot::Sender<()>>; 2], (p, tx)| {
        queues[usize::from(p == Priority::Steady)].push_back(tx);
    };
    let mut tokens = burst;
    let mut at = tokio::time::Instant::now();
    let mut open = true;
    loop {
        if queues.iter().all(VecDeque::is_empty) {
            if !open {
                return;
            }
            match asks.recv().await {
                Some(a) => push(&mut queues, a),
                None => return,
            }
        }
        while let Ok(a) = asks.try_recv() {
            push(&mut queues, a);
        }
        let now = tokio::time::Instant::now();
        tokens = (tokens + now.duration_since(at).as_secs_f64() * rate).min(burst);
        at = now;
        if tokens >= 1.0 {
            let next = match queues[0].pop_front() {
                Some(tx) => Some(tx),
                None => queues[1].pop_front(),
            };
            if let Some(tx) = next
                && tx.send(()).is_ok()
            {
                tokens -= 1.0;
            }
            continue;
        }
        let wait = Duration::from_secs_f64((1.0 - tokens) / rate);
        if open {
            tokio::select! {
                a = asks.recv() => match a {
                    Some(a) => push(&mut queues, a),
                    None => open = false,
                },
                _ = tokio::time::sleep(wait) => {}
            }
        } else {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[tokio::test(start_paused = true)]
    async fn a_read_given_up_no_longer_counts_as_waiting() {
        let budget = Budget::new(1.0, 1);
        budget.take(Priority::Moving).await;
        // No token for a second: given up after 0.1 s.
        let gave_up =
            tokio::time::timeout(Duration::from_millis(100), budget.take(Priority::Steady)).await;
        assert!(gave_up.is_err());
        assert_eq!(budget.waiting(), 0);
        let waiting = budget.take(Priority::Steady);
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(Duration::from_millis(10), &mut waiting)
                .await
                .is_err()
        );
        assert_eq!(budget.waiting(), 1);
        waiting.await;
        assert_eq!(budget.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_is_never_exceeded_and_moving_reads_go_first() {
        let budget = Arc::new(Budget::new(10.0, 5));
        let start = tokio::time::Instant::now();
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // 20 steady reads queued first, then 5 moving ones.
        for i in 0..25 {
            let (b, d) = (budget.clone(), done.clone());
            let p = if i < 20 {
                Priority::Steady
            } else {
                Priority::Moving
            };
            tasks.push(tokio::spawn(async move {
                b.take(p).await;
                if let Ok(mut d) = d.lock() {
                    d.push((start.elapsed(), p));
                }
            }));
            tokio::task::yield_now().await;
        }
        for t in tasks {
            t.await.expect("task");
        }
        let done = done.lock().expect("lock").clone();
        assert_eq!(done.len(), 25);
        // Within any window of w seconds, at most burst + rate * w reads.
        for (i, (t0, _)) in done.iter().enumerate() {
            for (t1, _) in &done[i..] {
                let w = (*t1 - *t0).as_secs_f64();
                let n = done.iter().filter(|(t, _)| t >= t0 && t <= t1).count() as f64;
                assert!(n <= 5.0 + 10.0 * w + 1e-9, "{n} reads in {w} s");
            }
        }
        // The burst went to the steady reads already waiting; every moving read came before
        // the steady reads still queued.
        let last_moving = done
            .iter()
            .rposition(|(_, p)| *p == Priority::Moving)
            .expect("moving");
        assert!(last_moving < 12, "moving reads served at {last_moving}");
        // 25 reads at 10/s after a burst of 5: 2 s.
        let total = done
            .last()
            .map(|(t, _)| t.as_secs_f64())
            .unwrap_or_default();
        assert!((1.9..2.1).contains(&total), "took {total} s");
    }
}
