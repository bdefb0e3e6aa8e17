//! Gates: the gate before any traffic (`rollout.gate`) and the ramp steps' gates
//! (`steps[i].gate`): which runs to start, and what their runs say.

use std::time::{Duration, SystemTime};

use kube::ResourceExt;
use twc_api::{WorkerDeployment, WorkflowExecution, WorkflowExecutionStatus};

use super::rollback::is_rollback;
use super::{
    GateStart, Observed, TargetObserved, TaskQueueRef, build_id, guard, needs, step_index,
};
use crate::temporal::gates::{gate_workflow_id, step_gate_workflow_id};

/// The `temporal.io/retry` value set on `wd`, if any: it names the step gates' runs, so that
/// a retry runs them again.
pub fn retry_token(wd: &WorkerDeployment) -> Option<String> {
    guard::control_value(wd, twc_api::controls::RETRY)
}

/// The workflow ID of `target`'s gate of ramp step `step` on `task_queue`.
pub fn step_gate_id(wd: &WorkerDeployment, target: &str, task_queue: &str, step: usize) -> String {
    let deployment_name =
        build_id::temporal_deployment_name(&wd.namespace().unwrap_or_default(), &wd.name_any());
    step_gate_workflow_id(
        &deployment_name,
        target,
        task_queue,
        step,
        retry_token(wd).as_deref(),
    )
}

/// Gate workflows to start: one per workflow task queue of a registered, not yet current
/// target that has none yet (not for a rollback, which skips the gate).
pub(super) fn gate_starts(
    wd: &WorkerDeployment,
    target: &str,
    observed: &Observed,
    now: SystemTime,
    window: Duration,
) -> Vec<GateStart> {
    let state = &observed.temporal;
    // A grouped target's gate waits until every group is available (upstream's rule: a gate
    // on the workflow group alone could schedule activities no worker polls yet).
    let grouped = observed
        .deployments
        .get(target)
        .is_some_and(|d| !d.members.is_empty());
    if wd.spec.rollout.gate.is_none()
        || !needs(wd, target, state).gates
        || is_rollback(state, target, now, window)
        || (grouped && !super::workers_up(&observed.deployments, target))
    {
        return Vec::new();
    }
    let deployment_name =
        build_id::temporal_deployment_name(&wd.namespace().unwrap_or_default(), &wd.name_any());
    observed
        .target
        .task_queues
        .iter()
        .filter(|q| q.workflow)
        .filter(|q| !observed.target.gates.iter().any(|g| g.task_queue == q.name))
        .map(|q| GateStart {
            workflow_id: gate_workflow_id(&deployment_name, target, &q.name),
            task_queue: q.name.clone(),
            step: None,
        })
        .collect()
}

/// The gates whose input a pass reads before planning, by step (None: the gate before
/// traffic): those configured whose runs are not all there on the target's workflow task
/// queues while the planner would look at them. A superset of what the plan starts (it may
/// hold a gate back: a rollback, a step still paused).
pub fn gates_may_start(
    wd: &WorkerDeployment,
    target: &str,
    observed: &Observed,
) -> std::collections::BTreeSet<Option<usize>> {
    let needs = needs(wd, target, &observed.temporal);
    let queues: Vec<&TaskQueueRef> = observed
        .target
        .task_queues
        .iter()
        .filter(|q| q.workflow)
        .collect();
    let mut out = std::collections::BTreeSet::new();
    if wd.spec.rollout.gate.is_some()
        && needs.gates
        && queues
            .iter()
            .any(|q| !observed.target.gates.iter().any(|g| g.task_queue == q.name))
    {
        out.insert(None);
    }
    if let Some(step) = needs.step_gate
        && wd
            .spec
            .rollout
            .steps
            .get(step)
            .is_some_and(|s| s.gate.is_some())
    {
        let runs = match &observed.target.step_gates {
            Some(g) if g.step == step => g.runs.as_slice(),
            _ => &[],
        };
        if queues.iter().any(|q| {
            let id = step_gate_id(wd, target, &q.name, step);
            !runs.iter().any(|r| r.workflow_id == id)
        }) {
            out.insert(Some(step));
        }
    }
    out
}

pub(super) enum Gate {
    Passed,
    Pending,
    Failed(String),
}

/// A gate passes when a gate run completed on every workflow task queue of the target; one
/// failed run blocks the build for good (a gate is never retried under the same build ID).
pub(super) fn gate_verdict(target: &str, observed: &TargetObserved) -> Gate {
    let queues: Vec<&TaskQueueRef> = observed.task_queues.iter().filter(|q| q.workflow).collect();
    if queues.is_empty() {
        return Gate::Pending;
    }
    let mut passed = true;
    for q in queues {
        match observed.gates.iter().find(|g| g.task_queue == q.name) {
            Some(g) => match g.status {
                WorkflowExecutionStatus::Completed => {}
                WorkflowExecutionStatus::Running => passed = false,
                failed => {
                    return Gate::Failed(format!(
                        "gate workflow {} on task queue {} ended {failed:?}; buildID {target} will not be promoted (a gate is not retried for the same build: change the template to try a new build)",
                        g.workflow_id, g.task_queue
                    ));
                }
            },
            None => passed = false,
        }
    }
    if passed { Gate::Passed } else { Gate::Pending }
}

/// A ramp step's gate, as observed.
pub(super) enum StepGate {
    Passed,
    /// A run ended without success.
    Failed,
    /// Runs to start, and what runs (for people).
    Pending {
        start: Vec<GateStart>,
        running: String,
    },
}

pub(super) fn step_gate_verdict(
    wd: &WorkerDeployment,
    target: &str,
    step: usize,
    observed: &Observed,
) -> StepGate {
    let queues: Vec<&TaskQueueRef> = observed
        .target
        .task_queues
        .iter()
        .filter(|q| q.workflow)
        .collect();
    let runs: &[WorkflowExecution] = match &observed.target.step_gates {
        Some(g) if g.step == step => &g.runs,
        _ => &[],
    };
    if queues.is_empty() {
        return StepGate::Pending {
            start: Vec::new(),
            running: "waits for the version's task queues".into(),
        };
    }
    let mut start = Vec::new();
    let mut running = Vec::new();
    for q in queues {
        let id = step_gate_id(wd, target, &q.name, step);
        match runs.iter().find(|r| r.workflow_id == id) {
            Some(r) => match r.status {
                WorkflowExecutionStatus::Completed => {}
                WorkflowExecutionStatus::Running => running.push(id),
                _ => return StepGate::Failed,
            },
            None => start.push(GateStart {
                workflow_id: id,
                task_queue: q.name.clone(),
                step: Some(step),
            }),
        }
    }
    if start.is_empty() && running.is_empty() {
        return StepGate::Passed;
    }
    let running = if running.is_empty() {
        "is starting".to_string()
    } else {
        format!("runs ({})", running.join(", "))
    };
    StepGate::Pending { start, running }
}

/// The first run of `target`'s current step gate that ended without success: "gate workflow
/// ID of step 2 (20%) on task queue q ended Failed". None while the target does not ramp at a
/// step whose gate ended so.
pub fn failed_step_gate(
    wd: &WorkerDeployment,
    target: &str,
    observed: &Observed,
) -> Option<String> {
    let state = &observed.temporal;
    if state.ramping_build_id.as_deref() != Some(target) {
        return None;
    }
    let steps = &wd.spec.rollout.steps;
    let gates = observed.target.step_gates.as_ref()?;
    let step = steps.get(gates.step)?;
    step.gate.as_ref()?;
    if gates.step != step_index(steps, state.ramp_percentage) {
        return None;
    }
    gates
        .runs
        .iter()
        .find(|r| {
            !matches!(
                r.status,
                WorkflowExecutionStatus::Completed | WorkflowExecutionStatus::Running
            ) && r.workflow_id == step_gate_id(wd, target, &r.task_queue, gates.step)
        })
        .map(|r| {
            format!(
                "gate workflow {} (run {}) of step {} ({}%) on task queue {} ended {:?}",
                r.workflow_id,
                r.run_id,
                gates.step + 1,
                step.ramp_percentage,
                r.task_queue,
                r.status
            )
        })
}
