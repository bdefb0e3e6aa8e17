//! After a pass: when to come back, and what of Temporal's state is remembered for the next
//! (see [`crate::temporal::reads`]).

use std::time::SystemTime;

use twc_api::WorkerDeployment;

use super::execute::Applied;
use super::{Context, key, observe};
use crate::plan::{self, Observed, Plan, pace::Pace};
use crate::temporal::reads::Remembered;

/// What a pass did and knew.
pub(super) struct Pass<'a> {
    pub temporal: &'a observe::Temporal,
    pub observed: &'a Observed,
    pub plan: &'a Plan,
    pub applied: &'a Applied,
    /// Whether the state was read in this pass (not reused).
    pub fresh: bool,
    pub now: SystemTime,
}

/// The pace after `pass`; remembers the state it read.
pub(super) fn pace_and_remember(wd: &WorkerDeployment, ctx: &Context, pass: Pass<'_>) -> Pace {
    let Pass {
        temporal,
        observed,
        plan,
        applied,
        fresh,
        now,
    } = pass;
    let mut pace = plan::pace::pace(wd, observed, plan, &ctx.intervals);
    // A quick look for a first poll waits at least for the reads already lined up for the
    // namespace's budget (up to the fast poll): asked sooner, it only lines up behind them,
    // holding a reconcile slot, and takes a token from a version that did register.
    if pace.reuse == plan::pace::Reuse::Never && pace.requeue < ctx.intervals.moving {
        let backlog = ctx.reads.backlog(&temporal.pool_key);
        pace.requeue = pace.requeue.max(backlog.min(ctx.intervals.moving));
    }
    if fresh && applied.error.is_none() {
        let read = Remembered {
            pool_key: temporal.pool_key.clone(),
            generation: wd.metadata.generation,
            target_build: plan.target_build_id.clone(),
            target_up: plan::workers_up(&observed.deployments, &plan.target_build_id),
            state: observed.temporal.clone(),
            target: observed.target.clone(),
            read_at: now,
            reuse: pace.reuse,
        };
        ctx.memories.update(&key(wd), |m| m.read = Some(read));
    }
    pace
}
