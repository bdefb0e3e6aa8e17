//! Rollback: taking new work away from a failed target, and routing back to a version that
//! was current recently.

use std::time::{Duration, SystemTime};

use twc_api::{RolloutStrategyKind, WorkerDeployment};

use super::{DeploymentState, Observed, Routing, guard};

/// The routing that takes new work away from failed `target`: its ramp cleared; an aborted
/// (or analysis-failed) current version replaced by the one current before it. Under
/// Manual, only an abort.
pub(super) fn roll_back(
    wd: &WorkerDeployment,
    failure: &guard::Failure,
    target: &str,
    observed: &Observed,
) -> Option<Routing> {
    let state = &observed.temporal;
    if wd.spec.rollout.strategy == RolloutStrategyKind::Manual
        && !(failure.new && failure.reason == twc_api::conditions::ABORTED)
    {
        // Manual routing is a person's: only their abort changes it.
        return None;
    }
    if state.ramping_build_id.as_deref() == Some(target) {
        return Some(Routing::ClearRamp);
    }
    if gives_current_back(failure, state, target) {
        return guard::previous_current(observed, target).map(Routing::SetCurrent);
    }
    None
}

/// Whether failed `target` is current and should give its place back: aborted, or judged
/// bad by its analysis after promotion, in this reconcile.
pub(super) fn gives_current_back(
    failure: &guard::Failure,
    state: &DeploymentState,
    target: &str,
) -> bool {
    failure.new
        && matches!(
            failure.reason,
            twc_api::conditions::ABORTED | twc_api::conditions::ANALYSIS_FAILED
        )
        && state.current_build_id.as_deref() == Some(target)
}

/// Whether routing to `target` is a rollback: it was current within `window`.
pub(super) fn is_rollback(
    state: &DeploymentState,
    target: &str,
    now: SystemTime,
    window: Duration,
) -> bool {
    state.current_build_id.as_deref() != Some(target)
        && state
            .versions
            .get(target)
            .and_then(|v| v.last_current_at)
            .is_some_and(|t| now.duration_since(t).unwrap_or_default() < window)
}
