//! Routing: where new work goes (current, ramp, steps), and who may change it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use twc_api::{RolloutStrategyKind, VersionStatus, WorkerDeployment};

use super::gates::{Gate, StepGate, gate_starts, gate_verdict, step_gate_verdict};
use super::rollback::{gives_current_back, is_rollback, roll_back};
use super::{
    DeploymentState, Observed, ObservedDeployment, Plan, Routing, guard, status_of, step_index,
};
use crate::config::{Identity, Limits, Manager};

/// The routing change of this reconcile, once the guard has judged the target: a failed
/// target's work taken back, a promotion on request, or the rollout's next move (with the gate
/// runs to start); then whether the manager identity is claimed for it.
pub(super) fn route(
    wd: &WorkerDeployment,
    identity: &Identity,
    observed: &Observed,
    limits: &Limits,
    target: &str,
    guard: guard::Guard,
    plan: &mut Plan,
) {
    let now = observed.now;
    let state = &observed.temporal;
    let window = limits.rollback_window;
    let controls = &guard.controls;
    let up = workers_up(&observed.deployments, target);
    if let Some(mut failure) = guard.failure {
        // No new work to a failed build; what reached it goes back.
        let back = roll_back(wd, &failure, target, observed);
        plan.routing = by_manager(back, identity, state, plan);
        if plan.routing.is_some() {
            failure.rolled_back = true;
        } else if plan.blocked.is_none() && gives_current_back(&failure, state, target) {
            failure.message.push_str(
                "; no earlier version with running workers to route new workflows back to, so they stay on it",
            );
        }
        plan.failure = Some(failure);
    } else if controls.promote.as_deref() == Some(target)
        && state.current_build_id.as_deref() != Some(target)
        && status_of(state, target) != VersionStatus::NotRegistered
        && up
    {
        // Promoted on request: now, skipping the remaining steps (and a gate still running).
        let promote = Some(Routing::SetCurrent(target.to_string()));
        plan.routing = by_manager(promote, identity, state, plan);
        if plan.routing.is_some() {
            plan.controls.promoted_build_id = Some(target.to_string());
        }
    } else {
        plan.start_gates = gate_starts(wd, target, observed, now, window);
        let change = routing(wd, target, observed, (now, window), plan);
        // Paused: only a stale ramp is cleared (the target is already current).
        let change = change.filter(|c| !controls.paused || *c == Routing::ClearRamp);
        plan.routing = by_manager(change, identity, state, plan);
    }
    // No manager yet, TWC's deprecated default or an identity named for takeover: claimed
    // before the routing change.
    plan.claim_manager =
        plan.routing.is_some() && identity.manager(&state.manager_identity) == Manager::Claimable;
}

/// `change`, unless another manager identity holds the routing (then None, and why).
fn by_manager(
    change: Option<Routing>,
    identity: &Identity,
    state: &DeploymentState,
    plan: &mut Plan,
) -> Option<Routing> {
    let manager = &state.manager_identity;
    if change.is_some() && identity.manager(manager) == Manager::Foreign {
        let own = &identity.own;
        plan.blocked = Some(format!(
            "routing is managed by {manager:?}; the controller ({own}) will not change it until that manager identity is removed or named with --take-over-identity"
        ));
        return None;
    }
    change
}

fn routing(
    wd: &WorkerDeployment,
    target: &str,
    observed: &Observed,
    (now, window): (SystemTime, Duration),
    plan: &mut Plan,
) -> Option<Routing> {
    let state = &observed.temporal;
    let rollout = &wd.spec.rollout;
    if rollout.strategy == RolloutStrategyKind::Manual {
        // Manual never routes, but whoever promotes by hand should see that the gate failed.
        if rollout.gate.is_some()
            && let Gate::Failed(why) = gate_verdict(target, &observed.target)
        {
            plan.blocked = Some(why);
        }
        return None;
    }
    let target_status = status_of(state, target);
    if target_status == VersionStatus::NotRegistered {
        return None;
    }
    // New work only to a version whose workers are up: Available alone is not enough (a
    // Deployment scaled to zero is Available with no pod, and a rollback scales it up in the
    // same reconcile).
    if !workers_up(&observed.deployments, target) {
        return None;
    }
    if state.current_build_id.as_deref() == Some(target) {
        state
            .ramping_build_id
            .is_some()
            .then_some(Routing::ClearRamp)
    } else if is_rollback(state, target, now, window) {
        // Back to a version that was current recently: at once, without a gate.
        Some(Routing::SetCurrent(target.to_string()))
    } else {
        if rollout.gate.is_some() {
            match gate_verdict(target, &observed.target) {
                Gate::Passed => {}
                Gate::Pending => return None,
                Gate::Failed(why) => {
                    plan.blocked = Some(why);
                    return None;
                }
            }
        }
        match (rollout.strategy, state.current_build_id.is_some()) {
            // The first version, from unversioned workers: ramp only if every task queue still
            // has unversioned pollers to take the rest, else all new workflows would go to
            // nobody. Once it ramps, it walks the steps.
            (RolloutStrategyKind::Progressive, false)
                if state.ramping_build_id.as_deref() == Some(target) =>
            {
                progressive(wd, target, observed, now, plan)
            }
            (RolloutStrategyKind::Progressive, false) => {
                match observed.target.unversioned_pollers {
                    Some(true) => progressive(wd, target, observed, now, plan),
                    Some(false) => Some(Routing::SetCurrent(target.to_string())),
                    None => None,
                }
            }
            (_, false) | (RolloutStrategyKind::AllAtOnce, true) => {
                Some(Routing::SetCurrent(target.to_string()))
            }
            (RolloutStrategyKind::Progressive, true) => {
                progressive(wd, target, observed, now, plan)
            }
            (RolloutStrategyKind::Manual, true) => None,
        }
    }
}

/// Whether `build`'s workers are up: Available alone is not enough (a Deployment scaled to
/// zero is Available with no pod).
pub fn workers_up(deployments: &BTreeMap<String, ObservedDeployment>, build: &str) -> bool {
    deployments.get(build).is_some_and(|d| {
        d.available_since.is_some() && d.ready_replicas > 0 && d.spec_replicas != Some(0)
    })
}

fn progressive(
    wd: &WorkerDeployment,
    target: &str,
    observed: &Observed,
    now: SystemTime,
    plan: &mut Plan,
) -> Option<Routing> {
    let state = &observed.temporal;
    let steps = &wd.spec.rollout.steps;
    let first = steps.first()?;
    let ramping_target = state.ramping_build_id.as_deref() == Some(target);
    if !ramping_target {
        return Some(Routing::SetRamp(
            target.to_string(),
            first.ramp_percentage as f32,
        ));
    }
    let current_ramp = state.ramp_percentage;
    let index = step_index(steps, current_ramp);
    let step = &steps[index];
    if (step.ramp_percentage as f32 - current_ramp).abs() > f32::EPSILON {
        return Some(Routing::SetRamp(
            target.to_string(),
            step.ramp_percentage as f32,
        ));
    }
    let pause = twc_api::duration::parse(&step.pause_duration).unwrap_or(Duration::from_secs(30));
    let since = state.ramp_changed_at.unwrap_or(now);
    let paused = now.duration_since(since).unwrap_or_default() < pause;
    if paused {
        plan.wake(since + pause);
    }
    if step.gate.is_some() {
        // The step ends once its gate completed too; a failed one is the guard's.
        match step_gate_verdict(wd, target, index, observed) {
            StepGate::Passed => {}
            StepGate::Failed => return None,
            StepGate::Pending { start, running } => {
                plan.start_gates.extend(start);
                plan.step_gate = Some(format!(
                    "the gate of step {} ({}%) {}",
                    index + 1,
                    step.ramp_percentage,
                    running
                ));
                return None;
            }
        }
    }
    if paused {
        return None;
    }
    match steps.get(index + 1) {
        Some(next) => Some(Routing::SetRamp(
            target.to_string(),
            next.ramp_percentage as f32,
        )),
        None => Some(Routing::SetCurrent(target.to_string())),
    }
}
