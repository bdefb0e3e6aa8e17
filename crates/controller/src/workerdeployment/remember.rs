//! After a pass: when to come back, and what of Temporal's state is remembered for the next
//! (see [`crate::temporal::reads`]): the state read, or what a routing write left.
//!
//! What a routing write of this controller left in Temporal is known without reading it back.
//! A `SetWorkerDeploymentCurrentVersion` or `SetWorkerDeploymentRampingVersion` that
//! succeeded did what it asked: the version is current, or ramps at the percentage, from the
//! moment of the answer. A describe right after it would show only that (and, on a busy
//! deployment, get `ResourceExhausted`: the server refuses bursts of reads right after a
//! routing change). So the state it left stands in for a read, paced as if it had been read
//! (the next step's end, the old version's drainage); the namespace's listing confirms it by
//! its routing (its revision and times are not in the write's answer), and anything else it
//! shows differently brings a read, as for any state remembered.

use std::time::SystemTime;

use twc_api::WorkerDeployment;

use super::execute::Applied;
use super::{Context, key, observe};
use crate::plan::{self, Observed, Plan, pace::Pace};
use crate::temporal::DeploymentState;
use crate::temporal::reads::Remembered;

/// What a pass did and knew.
pub(super) struct Pass<'a> {
    pub spec: &'a twc_api::ConnectionSpec,
    pub temporal: &'a observe::Temporal,
    pub observed: &'a Observed,
    pub plan: &'a Plan,
    pub applied: &'a Applied,
    /// Whether the state was read in this pass (not reused).
    pub fresh: bool,
    pub now: SystemTime,
}

/// The pace after `pass`; remembers the state it read, or its routing write left.
pub(super) fn pace_and_remember(wd: &WorkerDeployment, ctx: &Context, pass: Pass<'_>) -> Pace {
    let Pass {
        spec,
        temporal,
        observed,
        plan,
        applied,
        fresh,
        now,
    } = pass;
    // After a routing write, what it left is known without a read: paced as if read.
    let routed = after(wd, ctx, spec, observed, plan, applied);
    let mut pace = match &routed {
        Some((_, pace)) => *pace,
        None => plan::pace::pace(wd, observed, plan, &ctx.intervals),
    };
    // A quick look for a first poll waits at least for the reads already lined up for the
    // namespace's budget (up to the fast poll): asked sooner, it only lines up behind them,
    // holding a reconcile slot, and takes a token from a version that did register.
    if pace.reuse == plan::pace::Reuse::Never && pace.requeue < ctx.intervals.moving {
        let backlog = ctx.reads.backlog(&temporal.pool_key);
        pace.requeue = pace.requeue.max(backlog.min(ctx.intervals.moving));
    }
    // Promoted without its task queues read (an AllAtOnce target): the next pass reads them
    // for the status, within the fast poll.
    if applied.promoted(&plan.target_build_id) && observed.target.task_queues.is_empty() {
        pace.requeue = pace.requeue.min(ctx.intervals.moving);
    }
    if fresh && applied.error.is_none() {
        let (state, written, read_at) = match routed {
            Some((after, _)) => (after, true, SystemTime::now()),
            None => (observed.temporal.clone(), false, now),
        };
        let read = Remembered {
            pool_key: temporal.pool_key.clone(),
            generation: wd.metadata.generation,
            target_build: plan.target_build_id.clone(),
            target_up: plan::workers_up(&observed.deployments, &plan.target_build_id),
            state,
            target: observed.target.clone(),
            read_at,
            reuse: pace.reuse,
            written,
        };
        ctx.memories.update(&key(wd), |m| m.read = Some(read));
    }
    pace
}

/// The state the routing writes of `applied` left and the pace from it, when the pass wrote
/// only routing (and the manager identity) and a plan made on that state would not write
/// again; None otherwise (read back as before).
fn after(
    wd: &WorkerDeployment,
    ctx: &Context,
    spec: &twc_api::ConnectionSpec,
    observed: &Observed,
    plan: &Plan,
    applied: &Applied,
) -> Option<(DeploymentState, Pace)> {
    let only_routing =
        plan.start_gates.is_empty() && plan.delete_versions.is_empty() && plan.retire.is_empty();
    if applied.error.is_some() || !only_routing || applied.routed_at.is_none() {
        return None;
    }
    // Stamped with the time the write was answered: the change's time in Temporal is at
    // most that.
    let after = super::status::effective(observed, applied, ctx.identity());
    let again = plan::plan_with(wd, spec, &ctx.identity, &after, &ctx.limits);
    if again.needs_fresh_state() {
        return None;
    }
    let mut pace = plan::pace::pace(wd, &after, &again, &ctx.intervals);
    // Beside the routing, the state holds what the read before the write saw of each
    // version (a workflow pinned since makes an Inactive one Draining, unlisted): trusted no
    // longer than a draining version's state would be.
    if let plan::pace::Reuse::Until(until) = pace.reuse {
        let by = after.now + ctx.intervals.drainage;
        pace.reuse = plan::pace::Reuse::Until(Some(until.map_or(by, |u| u.min(by))));
    }
    Some((after.temporal, pace))
}
