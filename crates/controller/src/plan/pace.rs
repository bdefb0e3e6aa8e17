//! Pace: when to reconcile again, and whether the Temporal state just used may stand in for
//! the next read. Temporal is read at the pace of what can change there:
//!
//! - after a write to Temporal, or while the target's workers are up but not registered:
//!   read again at the fast poll (the next change is seconds away);
//! - while the target's workers are not up: nothing in Temporal can move for it, so no read
//!   until its Deployment changes (the watch wakes the reconcile); and no reconcile before its
//!   pods are listed again ([`super::pods`]) or a deadline falls due, however long that is;
//! - during a ramp step: no read until the step ends (its end is known), unless the step's
//!   gate runs (read at the fast poll: it may end, or fail, any moment);
//! - while older versions drain: read at the pace Temporal refreshes drainage
//!   ([`Intervals::drainage`]), not at the fast poll;
//! - a failed target, or a paused rollout: at the drainage pace (a person acts next);
//! - at rest: reused for as long as the namespace's listing agrees (see
//!   [`crate::temporal::reads`]).
//!
//! Whatever the pace, a plan that writes Temporal or stops workers is made again on a fresh
//! read before it runs ([`Plan::needs_fresh_state`]).

use std::time::{Duration, SystemTime};

use twc_api::{RolloutStrategyKind, VersionStatus, WorkerDeployment};

use super::{Observed, Plan, status_of, workers_up};
use crate::config::Intervals;
pub use crate::observed::Reuse;

/// When to come back, and what to read then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    pub requeue: Duration,
    pub reuse: Reuse,
}

/// A requeue this soon at the least (a timer that fell due while planning is served by the
/// next reconcile, not a busy loop).
const MIN_REQUEUE: Duration = Duration::from_millis(200);

/// How long to wait before looking again for the first poll of a version whose workers have
/// been up since `up_since`: a worker polls within a second of its start, so the read that
/// sees it registered should come a quarter of a second after it, not at the fast poll; a
/// worker that has not polled after a few seconds is slow (or wrong) and is looked at
/// less and less often, never less often than the fast poll `moving`. Without a time (the
/// Deployment does not say since when), the fast poll.
pub fn first_poll_wait(
    up_since: Option<SystemTime>,
    now: SystemTime,
    moving: Duration,
) -> Duration {
    let Some(since) = up_since else {
        return moving;
    };
    // The condition's time has whole seconds: up to a second earlier than the moment.
    let up_for = now.duration_since(since).unwrap_or_default();
    let wait = match up_for.as_secs() {
        0..=2 => Duration::from_millis(250),
        3..=5 => Duration::from_millis(500),
        6..=10 => Duration::from_secs(1),
        _ => moving,
    };
    wait.min(moving)
}

/// Requeues at least this long are rounded up to the next whole second (see [`coalesced`]).
const COALESCE_FROM: Duration = Duration::from_secs(10);

/// `requeue` from `now`, a long one (at rest, while versions drain) made to fall due on the
/// next whole second of the clock: the WorkerDeployments due within the same second are then
/// served by one wake-up of the controller instead of one each. At rest, where a pass reads
/// and writes nothing, the wake-up is most of its cost: at 1,000 WorkerDeployments, passes
/// spread over the minute took 0.8 s of CPU per minute, the same passes in bursts 0.45 s
/// (docs/benchmarks.md). Never sooner than asked, at most a second later; a short requeue
/// (the fast poll, a first poll looked for) keeps its instant.
pub fn coalesced(requeue: Duration, now: SystemTime) -> Duration {
    if requeue < COALESCE_FROM {
        return requeue;
    }
    let into_second = now
        .checked_add(requeue)
        .and_then(|due| due.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.subsec_nanos());
    match into_second {
        0 => requeue,
        n => requeue + Duration::from_nanos(u64::from(1_000_000_000 - n)),
    }
}

/// The pace after planning `plan` from `observed`.
pub fn pace(
    wd: &WorkerDeployment,
    observed: &Observed,
    plan: &Plan,
    intervals: &Intervals,
) -> Pace {
    let now = observed.now;
    let fast = Pace {
        requeue: intervals.moving,
        reuse: Reuse::Never,
    };
    if plan.writes_temporal() {
        return fast;
    }
    if plan.blocked.is_some() {
        // Held back by someone else's manager identity (not in the listing) or a limit: look
        // again at the steady pace.
        return Pace {
            requeue: intervals.steady,
            reuse: Reuse::Never,
        };
    }
    let state = &observed.temporal;
    let target = plan.target_build_id.as_str();
    let up = workers_up(&observed.deployments, target);
    let current = state.current_build_id.as_deref() == Some(target);
    let ramping = state.ramping_build_id.as_deref() == Some(target);
    let mut until = plan.wake_at;
    let mut by = |t: SystemTime| until = Some(until.map_or(t, |u| u.min(t)));
    let mut waiting_for_pods = false;
    // A failed target, or a paused rollout, waits for a person: only drainage moves by itself.
    let held = plan.failure.is_some() || plan.controls.paused;
    if held {
        by(now + intervals.drainage);
    } else if !current {
        match status_of(state, target) {
            // Its pollers come any moment: soon after its pods became ready, look again at
            // once, then less and less often (see [`first_poll_wait`]).
            VersionStatus::NotRegistered if up => {
                let since = observed
                    .deployments
                    .get(target)
                    .and_then(|d| d.available_since);
                return Pace {
                    requeue: first_poll_wait(since, now, intervals.moving),
                    reuse: Reuse::Never,
                };
            }
            // Waiting for its pods: the Deployment's change wakes the reconcile.
            VersionStatus::NotRegistered => waiting_for_pods = true,
            // Registered, waiting for its pods.
            _ if !up => waiting_for_pods = true,
            // A person promotes by hand: that changes the routing, which the listing shows.
            // Its own status may change too (a gate's pinned run drains it): read at the
            // drainage pace.
            _ if wd.spec.rollout.strategy == RolloutStrategyKind::Manual => {
                by(now + intervals.drainage)
            }
            // A ramp step's gate runs: its end (or failure) comes any moment.
            _ if ramping && plan.step_gate.is_some() => return fast,
            // In a ramp step: nothing to do before it ends.
            _ if ramping && plan.wake_at.is_some() => {}
            // A gate running, a first rollout asking about unversioned pollers, ...
            _ => return fast,
        }
    } else if state.ramping_build_id.is_some() {
        return fast;
    }
    // Drainage is not in the listing: read at the pace Temporal refreshes it.
    if state
        .versions
        .values()
        .any(|v| v.status == VersionStatus::Draining)
    {
        by(now + intervals.drainage);
    }
    // Waiting for pods, the next thing that can happen unannounced is their next list (the
    // Deployment's changes, the listing's and the connection's come as events): thousands of
    // WorkerDeployments whose pods never come are not reconciled every steady interval.
    let ceiling = match observed.pods_due.filter(|_| waiting_for_pods) {
        Some(t) => t
            .duration_since(now)
            .unwrap_or_default()
            .max(intervals.steady),
        None => intervals.steady,
    };
    let requeue = until
        .map(|t| t.duration_since(now).unwrap_or_default())
        .unwrap_or(ceiling)
        .clamp(MIN_REQUEUE, ceiling.max(MIN_REQUEUE));
    Pace {
        requeue,
        reuse: Reuse::Until(until),
    }
}
