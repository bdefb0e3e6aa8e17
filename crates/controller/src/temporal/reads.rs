//! Reading Temporal at scale. Temporal limits Worker Deployment reads per namespace (50 per
//! second by default, shared by every client), so reads here are rationed:
//!
//! - a [`Budget`] per Temporal namespace (server and namespace): a token bucket every read of
//!   that namespace waits on, serving moving rollouts before steady deployments;
//! - one paged `ListWorkerDeployments` per namespace, at most every `list_every`, says which
//!   worker deployments changed since they were read (a [`Listing`]);
//! - the last state read of each WorkerDeployment is [`Remembered`], and reused for as long as
//!   its [`Reuse`] allows and the listing agrees with it (see [`may_reuse`]).
//!
//! What may be reused, and for how long, is the planner's call (its pace).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use temporalio_client::Connection;
use tokio::sync::{OwnedMutexGuard, mpsc, oneshot};

use super::{Code, DeploymentState, Listed};
use crate::observed::{Reuse, TargetObserved};
use crate::temporal::pool::PoolKey;

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

/// A token bucket with two queues: a read waits until a token is free, moving reads first.
/// Waiters are served in order within a priority; one that gave up costs no token.
pub struct Budget {
    asks: mpsc::UnboundedSender<(Priority, oneshot::Sender<()>)>,
}

impl Budget {
    /// A bucket of `burst` tokens refilled at `rate` per second (its dispatcher runs on the
    /// current Tokio runtime until the bucket is dropped).
    pub fn new(rate: f64, burst: u32) -> Self {
        let (asks, rx) = mpsc::unbounded_channel();
        tokio::spawn(dispatch(rx, rate.max(0.001), f64::from(burst.max(1))));
        Self { asks }
    }

    /// Waits for a token.
    pub async fn take(&self, priority: Priority) {
        let start = Instant::now();
        let (tx, rx) = oneshot::channel();
        if self.asks.send((priority, tx)).is_ok() {
            let _ = rx.await;
        }
        crate::metrics::global().read_budget_waited(priority.label(), start.elapsed());
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

/// A namespace's worker deployments as listed, and when the listing was asked for.
#[derive(Clone)]
pub struct Listing {
    /// When the list was requested: what it shows is at least as new as this.
    pub at: SystemTime,
    pub deployments: Arc<HashMap<String, Listed>>,
}

/// The listing of one namespace, refreshed by whoever needs it first (one at a time).
#[derive(Default)]
struct Directory {
    /// Held by the one refreshing it (a reconcile, or a task of its own in the background).
    last: Arc<tokio::sync::Mutex<Last>>,
    /// A copy of the last listing, for the callers that come while another one refreshes it.
    shown: Mutex<Option<Listing>>,
}

impl Directory {
    /// The right to refresh the listing, or, while another caller holds it, the last listing
    /// if it is younger than `within` (else waits for the right).
    async fn enter(&self, within: Duration) -> Result<OwnedMutexGuard<Last>, Listing> {
        if let Ok(last) = self.last.clone().try_lock_owned() {
            return Ok(last);
        }
        let shown = self.shown.lock().ok().and_then(|shown| {
            shown
                .as_ref()
                .filter(|l| {
                    SystemTime::now()
                        .duration_since(l.at)
                        .is_ok_and(|age| age < within)
                })
                .cloned()
        });
        match shown {
            Some(l) => Err(l),
            None => Ok(self.last.clone().lock_owned().await),
        }
    }
}

/// What a caller holding the right to refresh does, with the listing it has, at `now`.
#[derive(Debug, PartialEq)]
enum Refresh {
    /// Younger than `list_every`: use it.
    Fresh,
    /// Older, but younger than twice `list_every`: use it now and refresh it in the
    /// background (no reconcile waits for the paged list).
    Behind,
    /// None, or too old to stand in: refresh and wait for it.
    Wait,
    /// The server cannot list, or the last list failed less than `list_every` ago.
    Skip,
}

fn refresh(last: &Last, every: Duration, now: SystemTime) -> Refresh {
    let age = |l: &Listing| now.duration_since(l.at).unwrap_or_default();
    if last.unimplemented {
        return Refresh::Skip;
    }
    match &last.listing {
        Some(l) if age(l) < every => return Refresh::Fresh,
        Some(l) if age(l) < every * 2 && last.failed_at.is_none() => return Refresh::Behind,
        _ => {}
    }
    if last.failed_at.is_some_and(|t| t.elapsed() < every) {
        return Refresh::Skip;
    }
    Refresh::Wait
}

/// Lists the namespace `key` reads, one budget token a page, and keeps the listing in
/// `last` and `dir`'s copy; wakes the worker deployments whose entry changed.
async fn list_into(
    last: &mut Last,
    dir: &Directory,
    conn: &Connection,
    key: &PoolKey,
    budget: &Budget,
    wake: Option<&Wake>,
) -> Option<Listing> {
    let at = SystemTime::now();
    let started = Instant::now();
    // Moving: every check that may reuse a state needs a listing.
    match super::list(conn, &key.temporal_namespace, budget, Priority::Moving).await {
        Ok(deployments) => {
            tracing::debug!(
                "listed {} worker deployments of {} in {:.2} s",
                deployments.len(),
                key.temporal_namespace,
                started.elapsed().as_secs_f64()
            );
            if let (Some(wake), Some(before)) = (wake, &last.listing) {
                for (name, l) in &deployments {
                    if before.deployments.get(name) != Some(l) {
                        wake(name);
                    }
                }
            }
            let listing = Listing {
                at,
                deployments: Arc::new(deployments),
            };
            last.listing = Some(listing.clone());
            if let Ok(mut shown) = dir.shown.lock() {
                *shown = Some(listing.clone());
            }
            last.failed_at = None;
            Some(listing)
        }
        Err(s) => {
            if s.code() == Code::Unimplemented {
                last.unimplemented = true;
            }
            tracing::debug!(
                "ListWorkerDeployments in {}: {}; every check reads its deployment instead",
                key.temporal_namespace,
                s.message()
            );
            last.failed_at = Some(Instant::now());
            None
        }
    }
}

#[derive(Default)]
struct Last {
    listing: Option<Listing>,
    /// When a list last failed (not retried before `list_every` has passed again).
    failed_at: Option<Instant>,
    /// The server has no `ListWorkerDeployments`: never asked again.
    unimplemented: bool,
}

/// The state last read for one WorkerDeployment, and what it was read under.
#[derive(Clone, Debug)]
pub struct Remembered {
    pub pool_key: PoolKey,
    pub generation: Option<i64>,
    pub target_build: String,
    /// Whether the target's workers were up (a change means pollers may come or go).
    pub target_up: bool,
    pub state: DeploymentState,
    pub target: TargetObserved,
    pub read_at: SystemTime,
    pub reuse: Reuse,
}

/// What a reconcile holds when it asks whether it may skip the read.
pub struct Asking<'a> {
    pub pool_key: &'a PoolKey,
    pub target_build: &'a str,
    pub target_up: bool,
    pub now: SystemTime,
}

/// Whether `r` may stand in for a new read: read under the same connection, within what its
/// pace allows, with the namespace's listing (if newer than the read) agreeing, and with the
/// target's workers as they were. A new target (a changed template) may use it only while
/// nothing about it can be in Temporal: its workers are not up and the state does not know it
/// (then its Deployment is created without a read; its pods' readiness brings the read).
/// Without a listing, never.
pub fn may_reuse(
    r: &Remembered,
    asking: &Asking<'_>,
    listing: Option<&Listing>,
    deployment: &str,
) -> bool {
    let Reuse::Until(until) = r.reuse else {
        return false;
    };
    let target_as_read = if r.target_build == asking.target_build {
        r.target_up == asking.target_up
    } else {
        !asking.target_up && !r.state.versions.contains_key(asking.target_build)
    };
    if r.pool_key != *asking.pool_key || !target_as_read || until.is_some_and(|t| asking.now >= t) {
        return false;
    }
    let Some(listing) = listing else {
        return false;
    };
    if listing.at <= r.read_at {
        return true;
    }
    match listing.deployments.get(deployment) {
        Some(l) => l.agrees_with(&r.state),
        None => !r.state.exists,
    }
}

/// The priority of the read that replaces `r` for `wd`: moving unless it was read at rest.
/// With nothing remembered (after a restart, or a leadership gain), `wd`'s status says: at
/// rest if its target is current for the spec as it is, so the first pass over thousands at
/// rest does not hold back the rollouts in motion and the specs just changed.
pub fn priority(r: Option<&Remembered>, wd: &twc_api::WorkerDeployment) -> Priority {
    let generation = wd.metadata.generation;
    match r {
        Some(r)
            if r.generation == generation
                && matches!(r.reuse, Reuse::Until(_))
                && r.state.current_build_id.as_deref() == Some(r.target_build.as_str()) =>
        {
            Priority::Steady
        }
        None if wd.status.as_ref().is_some_and(|s| {
            s.observed_generation.is_some()
                && s.observed_generation == generation
                && s.target_version
                    .as_ref()
                    .is_some_and(|t| t.base.status == twc_api::VersionStatus::Current)
        }) =>
        {
            Priority::Steady
        }
        _ => Priority::Moving,
    }
}

/// Called with the `namespace/name` of worker deployments whose listing changed.
pub type Wake = Arc<dyn Fn(&str) + Send + Sync>;

/// Steady reads are paced: at most this many are due within the time the budget takes to grant
/// them, so at most about this many reconciles wait for a token at the steady priority at once.
/// The others are requeued at their turn, holding no reconcile slot meanwhile, so a spec
/// change or a rollout in motion finds a free slot and goes ahead even while thousands at rest
/// wait for their first read after a restart. One that waits longer than twice this many
/// tokens' time (moving reads went first) gives its wait up and comes back at a new turn.
pub const STEADY_SEATS: u32 = 4;

/// The turn of each steady read, per Temporal namespace: a clock that every read moves on by
/// one token's time, so steady reads are spread at the budget's rate behind the moving ones.
#[derive(Default)]
struct Turns {
    /// When the namespace's budget is next expected to have a token nobody asked for.
    next: HashMap<(String, String), Instant>,
    /// WorkerDeployments (`namespace/name`) given a later turn, and when it comes.
    given: HashMap<String, Instant>,
}

/// Whether a steady read goes now or at a later turn.
#[derive(Debug, PartialEq)]
enum Turn {
    Now,
    At(Instant),
}

/// The turn of a steady read given `given` (its turn from before, if any), against the
/// namespace's clock `next`, with `spacing` per token and up to `seats` reads waiting.
fn turn(
    next: &mut Instant,
    given: Option<Instant>,
    now: Instant,
    spacing: Duration,
    seats: u32,
) -> Turn {
    if let Some(at) = given {
        return if at <= now { Turn::Now } else { Turn::At(at) };
    }
    let at = step(next, now, spacing);
    if at <= now + spacing * seats {
        Turn::Now
    } else {
        Turn::At(at)
    }
}

/// Moves the namespace's clock `next` on by one token: returns the instant that token is due.
fn step(next: &mut Instant, now: Instant, spacing: Duration) -> Instant {
    let at = (*next).max(now);
    *next = at + spacing;
    at
}

/// Budgets, listings and remembered states, shared by every reconcile.
pub struct Reads {
    config: ReadConfig,
    budgets: Mutex<HashMap<(String, String), Arc<Budget>>>,
    turns: Mutex<Turns>,
    directories: Mutex<HashMap<(String, String), Arc<Directory>>>,
    wake: Option<Wake>,
}

impl Reads {
    pub fn new(config: ReadConfig, wake: Option<Wake>) -> Self {
        Self {
            config,
            budgets: Default::default(),
            turns: Default::default(),
            directories: Default::default(),
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
    use crate::temporal::RoutingMark;

    fn key(host: &str) -> PoolKey {
        PoolKey {
            host_port: host.into(),
            tls_server_name: None,
            temporal_namespace: "default".into(),
            auth_mode: twc_api::AuthMode::None,
            credential_key: None,
            secrets: vec![],
        }
    }

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000 + s)
    }

    fn state() -> DeploymentState {
        let mut s = DeploymentState {
            exists: true,
            current_build_id: Some("b1".into()),
            routing: RoutingMark {
                revision: 3,
                current_changed_at: Some(at(0)),
            },
            ..Default::default()
        };
        s.versions.insert("b1".into(), Default::default());
        s
    }

    fn listed(s: &DeploymentState) -> Listed {
        Listed {
            current_build_id: s.current_build_id.clone(),
            ramping_build_id: s.ramping_build_id.clone(),
            ramp_percentage: s.ramp_percentage,
            ramping_since: s.ramping_since,
            ramp_changed_at: s.ramp_changed_at,
            routing: s.routing.clone(),
            latest_build_id: Some("b1".into()),
        }
    }

    fn remembered(reuse: Reuse) -> Remembered {
        Remembered {
            pool_key: key("h:7233"),
            generation: Some(2),
            target_build: "b1".into(),
            target_up: true,
            state: state(),
            target: Default::default(),
            read_at: at(10),
            reuse,
        }
    }

    fn listing(at_s: u64, entries: Vec<(&str, Listed)>) -> Listing {
        Listing {
            at: at(at_s),
            deployments: Arc::new(entries.into_iter().map(|(n, l)| (n.into(), l)).collect()),
        }
    }

    #[tokio::test]
    async fn a_refresh_in_progress_holds_up_no_one_while_the_last_listing_is_young() {
        let dir = Directory::default();
        let every = Duration::from_secs(60);
        let young = Listing {
            at: SystemTime::now() - Duration::from_secs(90),
            deployments: Default::default(),
        };
        // No refresh under way: the caller gets the right to refresh.
        assert!(dir.enter(every * 2).await.is_ok());
        *dir.shown.lock().unwrap_or_else(|e| panic!("{e}")) = Some(young.clone());
        let refreshing = dir.last.lock().await;
        // Another caller refreshes: the listing before it (90 s old, under 120) stands in.
        // (Each call that must not wait is bounded, so a broken stand-in fails, not hangs.)
        let soon = Duration::from_secs(5);
        let shown = tokio::time::timeout(soon, dir.enter(every * 2))
            .await
            .expect("a young listing stands in at once, without waiting for the refresh")
            .err()
            .expect("the last listing");
        assert_eq!(shown.at, young.at);
        // Too old to stand in: the caller waits for the refresh to end.
        *dir.shown.lock().unwrap_or_else(|e| panic!("{e}")) = Some(Listing {
            at: SystemTime::now() - Duration::from_secs(130),
            deployments: Default::default(),
        });
        let waiting = tokio::time::timeout(Duration::from_millis(50), dir.enter(every * 2));
        assert!(waiting.await.is_err(), "it should wait for the refresh");
        drop(refreshing);
        let after = tokio::time::timeout(soon, dir.enter(every * 2)).await;
        assert!(
            matches!(after, Ok(Ok(_))),
            "the refresh ended: the next may refresh"
        );
    }

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

    #[test]
    fn steady_reads_take_turns_at_the_budgets_pace_and_keep_them() {
        let now = Instant::now();
        let spacing = Duration::from_millis(50); // 20 per second
        let mut next = now;
        // The first seats go now; the one after gets a turn one spacing later each.
        let turns: Vec<Turn> = (0..12)
            .map(|_| turn(&mut next, None, now, spacing, 8))
            .collect();
        assert!(turns[..9].iter().all(|t| *t == Turn::Now), "{turns:?}");
        assert_eq!(turns[9], Turn::At(now + spacing * 9));
        assert_eq!(turns[11], Turn::At(now + spacing * 11));
        assert_eq!(next, now + spacing * 12);
        // Back before its turn (another trigger): still later, and the clock does not move.
        let early = turn(&mut next, Some(now + spacing * 9), now, spacing, 8);
        assert_eq!(early, Turn::At(now + spacing * 9));
        assert_eq!(next, now + spacing * 12);
        // Back at its turn: now.
        assert_eq!(
            turn(
                &mut next,
                Some(now + spacing * 9),
                now + spacing * 9,
                spacing,
                8
            ),
            Turn::Now
        );
        // After a quiet spell the clock starts from now again.
        let later = now + Duration::from_secs(10);
        assert_eq!(turn(&mut next, None, later, spacing, 8), Turn::Now);
        assert_eq!(next, later + spacing);
    }

    #[test]
    fn a_listing_behind_stands_in_while_it_is_refreshed_and_only_one_too_old_is_waited_for() {
        let every = Duration::from_secs(60);
        let now = at(1000);
        let last = |age_s: u64| Last {
            listing: Some(listing(1000 - age_s, vec![])),
            ..Default::default()
        };
        assert_eq!(refresh(&last(10), every, now), Refresh::Fresh);
        // The one that finds it behind does not wait for the paged list either.
        assert_eq!(refresh(&last(61), every, now), Refresh::Behind);
        assert_eq!(refresh(&last(119), every, now), Refresh::Behind);
        assert_eq!(refresh(&last(121), every, now), Refresh::Wait);
        assert_eq!(refresh(&Last::default(), every, now), Refresh::Wait);
        // A list that failed a moment ago is not asked again before `every`; the checks read
        // their deployments meanwhile.
        let mut failed = last(90);
        failed.failed_at = Some(Instant::now());
        assert_eq!(refresh(&failed, every, now), Refresh::Skip);
        let long_ago = Instant::now().checked_sub(Duration::from_secs(61));
        if let Some(t) = long_ago {
            failed.failed_at = Some(t);
            assert_eq!(refresh(&failed, every, now), Refresh::Wait);
        }
        let unimplemented = Last {
            unimplemented: true,
            ..Default::default()
        };
        assert_eq!(refresh(&unimplemented, every, now), Refresh::Skip);
    }

    #[test]
    fn a_state_is_reused_only_while_nothing_says_it_changed() {
        let r = remembered(Reuse::Until(None));
        let pk = key("h:7233");
        let ask = |target_build: &'static str, target_up: bool, now: u64| Asking {
            pool_key: &pk,
            target_build,
            target_up,
            now: at(now),
        };
        let same = listing(20, vec![("ns/wd", listed(&r.state))]);
        let ok = ask("b1", true, 30);
        assert!(may_reuse(&r, &ok, Some(&same), "ns/wd"));
        // No listing (the server cannot list, or the list failed): read.
        assert!(!may_reuse(&r, &ok, None, "ns/wd"));
        // The target's workers coming or going: read.
        assert!(!may_reuse(&r, &ask("b1", false, 30), Some(&same), "ns/wd"));
        // A new template: its Deployment is made without a read while its workers are not up
        // and Temporal knew nothing of it; a template Temporal knows (a rollback) is read.
        assert!(may_reuse(&r, &ask("b2", false, 30), Some(&same), "ns/wd"));
        assert!(!may_reuse(&r, &ask("b2", true, 30), Some(&same), "ns/wd"));
        let mut known = remembered(Reuse::Until(None));
        known.target_build = "b2".into();
        assert!(!may_reuse(
            &known,
            &ask("b1", false, 30),
            Some(&same),
            "ns/wd"
        ));
        // Another connection: read.
        let other = key("other:7233");
        let mut a = ask("b1", true, 30);
        a.pool_key = &other;
        assert!(!may_reuse(&r, &a, Some(&same), "ns/wd"));
        // The listing shows another routing, or a version it does not know: read.
        let mut moved = listed(&r.state);
        moved.current_build_id = Some("b2".into());
        moved.routing.revision = 4;
        assert!(!may_reuse(
            &r,
            &ok,
            Some(&listing(20, vec![("ns/wd", moved)])),
            "ns/wd"
        ));
        let mut registered = listed(&r.state);
        registered.latest_build_id = Some("b9".into());
        assert!(!may_reuse(
            &r,
            &ok,
            Some(&listing(20, vec![("ns/wd", registered)])),
            "ns/wd"
        ));
        // Gone from the listing (deleted in Temporal): read.
        assert!(!may_reuse(&r, &ok, Some(&listing(20, vec![])), "ns/wd"));
        // A listing older than the read says nothing against it.
        assert!(may_reuse(&r, &ok, Some(&listing(5, vec![])), "ns/wd"));
        // Past its time (a drainage check, a ramp step's end): read.
        let timed = remembered(Reuse::Until(Some(at(40))));
        assert!(may_reuse(&timed, &ok, Some(&same), "ns/wd"));
        assert!(!may_reuse(
            &timed,
            &ask("b1", true, 40),
            Some(&same),
            "ns/wd"
        ));
        // Read after a write or while pollers are awaited: never reused.
        assert!(!may_reuse(
            &remembered(Reuse::Never),
            &ok,
            Some(&same),
            "ns/wd"
        ));
    }

    #[test]
    fn a_deployment_not_in_temporal_stays_unread_while_it_is_not_listed() {
        let mut r = remembered(Reuse::Until(None));
        r.state = DeploymentState::default();
        let pk = key("h:7233");
        let ok = Asking {
            pool_key: &pk,
            target_build: "b1",
            target_up: false,
            now: at(30),
        };
        r.target_up = false;
        assert!(may_reuse(&r, &ok, Some(&listing(20, vec![])), "ns/wd"));
        let appeared = listed(&state());
        assert!(!may_reuse(
            &r,
            &ok,
            Some(&listing(20, vec![("ns/wd", appeared)])),
            "ns/wd"
        ));
    }

    #[test]
    fn reads_of_rollouts_in_motion_go_first() {
        let wd = |generation: i64| {
            let mut wd = twc_api::WorkerDeployment::new("wd", Default::default());
            wd.metadata.generation = Some(generation);
            wd
        };
        assert_eq!(priority(None, &wd(1)), Priority::Moving);
        let at_rest = remembered(Reuse::Until(None));
        assert_eq!(priority(Some(&at_rest), &wd(2)), Priority::Steady);
        assert_eq!(
            priority(Some(&at_rest), &wd(3)),
            Priority::Moving,
            "a new spec"
        );
        assert_eq!(
            priority(Some(&remembered(Reuse::Never)), &wd(2)),
            Priority::Moving
        );
        let mut rolling = remembered(Reuse::Until(Some(at(40))));
        rolling.target_build = "b2".into();
        assert_eq!(
            priority(Some(&rolling), &wd(2)),
            Priority::Moving,
            "a ramp step"
        );
    }

    #[test]
    fn after_a_restart_the_status_says_whether_a_read_is_at_rest() {
        use twc_api::{TargetWorkerDeploymentVersion, VersionStatus, WorkerDeploymentStatus};
        let wd = |generation: i64, observed: i64, target: VersionStatus| {
            let mut wd = twc_api::WorkerDeployment::new("wd", Default::default());
            wd.metadata.generation = Some(generation);
            let mut t = TargetWorkerDeploymentVersion::default();
            t.base.status = target;
            wd.status = Some(WorkerDeploymentStatus {
                observed_generation: Some(observed),
                target_version: Some(t),
                ..Default::default()
            });
            wd
        };
        assert_eq!(
            priority(None, &wd(4, 4, VersionStatus::Current)),
            Priority::Steady
        );
        assert_eq!(
            priority(None, &wd(5, 4, VersionStatus::Current)),
            Priority::Moving,
            "a spec changed while the controller was away"
        );
        assert_eq!(
            priority(None, &wd(4, 4, VersionStatus::Ramping)),
            Priority::Moving,
            "a ramp"
        );
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
