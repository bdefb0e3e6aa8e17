//! Reading Temporal at scale. Temporal limits Worker Deployment reads per namespace (50 per
//! second by default, shared by every client), so reads here are rationed:
//!
//! - a [`Budget`] per Temporal namespace (server and namespace): a token bucket every read of
//!   that namespace waits on, serving moving rollouts before steady deployments;
//! - one paged `ListWorkerDeployments` per namespace, at most every `list_every`, says which
//!   worker deployments changed since they were read (a [`Listing`]);
//! - the last state read of each WorkerDeployment is [`Remembered`], and reused for as long as
//!   its [`Reuse`](crate::observed::Reuse) allows and the listing agrees with it (see
//!   [`may_reuse`]).
//!
//! What may be reused, and for how long, is the planner's call (its pace).

mod budget;
mod listing;
mod presence;
mod remembered;
mod turns;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use temporalio_client::Connection;

use crate::temporal::pool::PoolKey;

pub use budget::{Budget, Priority};
pub use listing::{Listing, Wake};
pub use presence::Presence;
pub use remembered::{Asking, Remembered, may_reuse, priority};
pub use turns::STEADY_SEATS;

use listing::{Directory, Refresh, list_into, refresh};
use turns::{Turn, Turns, step, turn};

/// How reads are rationed.
#[derive(Clone, Copy, Debug)]
pub struct ReadConfig {
    /// Worker Deployment reads per second per Temporal namespace (every controller replica
    /// reads only while it leads).
    pub rate: f64,
    /// How many reads may go at once after a quiet spell.
    pub burst: u32,
    /// How old the listing of a namespace may get before a check refreshes it.
    pub list_every: Duration,
}

impl Default for ReadConfig {
    fn default() -> Self {
        Self {
            rate: DEFAULT_READ_RATE,
            burst: DEFAULT_READ_BURST,
            list_every: Duration::from_secs(60),
        }
    }
}

/// The default read budget: 20 per second, 40 % of the server's default per-namespace limit
/// (`frontend.globalNamespaceWorkerDeploymentReadRPS`, 50), leaving room for workers, people
/// and other tools.
pub const DEFAULT_READ_RATE: f64 = 20.0;
/// The default burst: one second's worth.
pub const DEFAULT_READ_BURST: u32 = 20;

/// Budgets, listings and remembered states, shared by every reconcile.
pub struct Reads {
    config: ReadConfig,
    budgets: Mutex<HashMap<(String, String), Arc<Budget>>>,
    turns: Mutex<Turns>,
    directories: Mutex<HashMap<(String, String), Arc<Directory>>>,
    rolls: Mutex<HashMap<(String, String), Arc<presence::Roll>>>,
    wake: Option<Wake>,
}

impl Reads {
    pub fn new(config: ReadConfig, wake: Option<Wake>) -> Self {
        Self {
            config,
            budgets: Default::default(),
            turns: Default::default(),
            directories: Default::default(),
            rolls: Default::default(),
            wake,
        }
    }

    /// The server and namespace a client reads: what the server's limit is per.
    fn scope(key: &PoolKey) -> (String, String) {
        (key.host_port.clone(), key.temporal_namespace.clone())
    }

    /// The budget of the namespace `key` reads.
    pub fn budget(&self, key: &PoolKey) -> Arc<Budget> {
        let Ok(mut budgets) = self.budgets.lock() else {
            return Arc::new(Budget::new(self.config.rate, self.config.burst));
        };
        budgets
            .entry(Self::scope(key))
            .or_insert_with(|| Arc::new(Budget::new(self.config.rate, self.config.burst)))
            .clone()
    }

    /// How long the reads waiting for the budget of the namespace `key` reads now take to be
    /// served: a read asked for sooner than that only lines up behind them.
    pub fn backlog(&self, key: &PoolKey) -> Duration {
        self.spacing() * u32::try_from(self.budget(key).waiting()).unwrap_or(u32::MAX)
    }

    /// Waits for a read of the namespace `key` reads.
    pub async fn take(&self, key: &PoolKey, priority: Priority) {
        if priority == Priority::Moving {
            // A moving read goes ahead of the steady ones: their turns come after it.
            self.advance(key);
        }
        self.budget(key).take(priority).await;
    }

    fn spacing(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.config.rate.max(0.001))
    }

    fn advance(&self, key: &PoolKey) {
        let spacing = self.spacing();
        if let Ok(mut turns) = self.turns.lock() {
            let now = Instant::now();
            let next = turns.next.entry(Self::scope(key)).or_insert(now);
            step(next, now, spacing);
        }
    }

    /// Waits for the token of WorkerDeployment `wd_key`'s read of the namespace `key` reads. A
    /// moving read waits in the budget. A steady read takes its turn (see [`STEADY_SEATS`]):
    /// it breaks off with the instant to be reconciled again at when its turn is later, or when
    /// no token came within twice `STEADY_SEATS` tokens' time (the wait given up costs no
    /// token), so that it never holds a reconcile slot for long.
    pub async fn grant(
        &self,
        wd_key: &str,
        key: &PoolKey,
        priority: Priority,
    ) -> std::ops::ControlFlow<Instant> {
        use std::ops::ControlFlow::{Break, Continue};
        if priority == Priority::Moving {
            self.forget_turn(wd_key);
            self.take(key, priority).await;
            return Continue(());
        }
        if let Turn::At(at) = self.steady_turn(wd_key, key) {
            return Break(at);
        }
        let patience = self.spacing() * STEADY_SEATS * 2;
        match tokio::time::timeout(patience, self.take(key, priority)).await {
            Ok(()) => Continue(()),
            Err(_) => Break(Instant::now() + patience),
        }
    }

    /// The turn of WorkerDeployment `wd_key`'s steady read of the namespace `key` reads: now,
    /// or a later instant to be reconciled again at (see [`STEADY_SEATS`]).
    fn steady_turn(&self, wd_key: &str, key: &PoolKey) -> Turn {
        let spacing = self.spacing();
        let Ok(mut turns) = self.turns.lock() else {
            return Turn::Now;
        };
        let now = Instant::now();
        let given = turns.given.remove(wd_key);
        let next = turns.next.entry(Self::scope(key)).or_insert(now);
        let t = turn(next, given, now, spacing, STEADY_SEATS);
        if let Turn::At(at) = t {
            turns.given.insert(wd_key.to_string(), at);
        }
        t
    }

    /// The namespace's listing, refreshed if older than `list_every`. One caller refreshes it
    /// at a time; a listing younger than twice `list_every` stands in meanwhile, for the
    /// refreshing caller too (the refresh goes on in the background), and only a caller with
    /// none that young waits for the paged list. None when the server cannot list.
    pub async fn listing(&self, conn: &Connection, key: &PoolKey) -> Option<Listing> {
        let dir = {
            let mut dirs = self.directories.lock().ok()?;
            dirs.entry(Self::scope(key)).or_default().clone()
        };
        let every = self.config.list_every;
        let mut last = match dir.enter(every * 2).await {
            Ok(last) => last,
            Err(shown) => return Some(shown),
        };
        let budget = self.budget(key);
        match refresh(&last, every, SystemTime::now()) {
            Refresh::Fresh => last.listing.clone(),
            Refresh::Skip => None,
            Refresh::Behind => {
                let stand_in = last.listing.clone();
                let (conn, key, wake) = (conn.clone(), key.clone(), self.wake.clone());
                tokio::spawn(async move {
                    list_into(&mut last, &dir, &conn, &key, &budget, wake.as_ref()).await;
                });
                stand_in
            }
            Refresh::Wait => {
                list_into(&mut last, &dir, conn, key, &budget, self.wake.as_ref()).await
            }
        }
    }

    /// Who polls the namespace `key` reads (its worker list, at most `list_every` old when
    /// it can be had; see [`Presence`]). None when the server cannot list its workers.
    pub async fn presence(&self, conn: &Connection, key: &PoolKey) -> Option<Presence> {
        let roll = {
            let mut rolls = self.rolls.lock().ok()?;
            rolls.entry(Self::scope(key)).or_default().clone()
        };
        let budget = self.budget(key);
        roll.presence(conn, key, budget, self.config.list_every, self.wake.clone())
            .await
    }

    /// Drops `wd_key`'s steady turn (it reads at the moving priority now, or is gone).
    pub fn forget_turn(&self, wd_key: &str) {
        if let Ok(mut turns) = self.turns.lock() {
            turns.given.remove(wd_key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reads::fixtures::key;

    #[tokio::test(start_paused = true)]
    async fn a_steady_read_short_of_a_token_gives_its_wait_up_at_no_cost() {
        use std::ops::ControlFlow;
        let config = ReadConfig {
            rate: 1.0,
            burst: 1,
            list_every: Duration::from_secs(60),
        };
        let reads = Reads::new(config, None);
        let k = key("h:7233");
        // A moving read takes the only token; the steady read's turn is within its seats, but
        // no token comes within its patience (8 s at 1 a second).
        assert_eq!(
            reads.grant("ns/a", &k, Priority::Moving).await,
            ControlFlow::Continue(())
        );
        let start = tokio::time::Instant::now();
        let moving = {
            let (reads, k) = (&reads, k.clone());
            async move {
                // Moving reads keep the budget: a token a second for 10 s.
                for _ in 0..10 {
                    let _ = reads.grant("ns/m", &k, Priority::Moving).await;
                }
            }
        };
        let steady = reads.grant("ns/b", &k, Priority::Steady);
        let (_, gave_up) = tokio::join!(moving, steady);
        assert!(
            matches!(gave_up, ControlFlow::Break(_)),
            "a steady read starved by moving ones gives its slot up"
        );
        assert!(start.elapsed() <= Duration::from_secs(11));
        // Its turn is behind the moving reads' now.
        assert!(matches!(
            reads.grant("ns/c", &k, Priority::Steady).await,
            ControlFlow::Break(_)
        ));
        // The given-up wait cost no token: the next read gets the one that comes next.
        let before = tokio::time::Instant::now();
        reads.take(&k, Priority::Steady).await;
        assert!(before.elapsed() <= Duration::from_millis(1100));
    }
}

#[cfg(test)]
mod fixtures {
    //! What the tests of the reads build on.
    use super::*;
    use crate::temporal::Listed;

    pub(super) fn key(host: &str) -> PoolKey {
        PoolKey {
            host_port: host.into(),
            tls_server_name: None,
            temporal_namespace: "default".into(),
            auth_mode: twc_api::AuthMode::None,
            credential_key: None,
            secrets: vec![],
        }
    }

    pub(super) fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000 + s)
    }

    pub(super) fn listing(at_s: u64, entries: Vec<(&str, Listed)>) -> Listing {
        Listing {
            at: at(at_s),
            deployments: Arc::new(entries.into_iter().map(|(n, l)| (n.into(), l)).collect()),
        }
    }
}
