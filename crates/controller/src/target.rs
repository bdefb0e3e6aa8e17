//! The target version's extra reads and writes: its task queues, its gate workflows and the
//! unversioned-poller check (observe), and starting gate workflows (execute). Gate input from
//! a Secret is never logged, only its size.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;
use twc_api::{WorkerDeployment, WorkflowExecution, WorkflowExecutionStatus};

use crate::error::{Error, Result, kube_message};
use crate::plan::{self, Observed, Plan, TargetObserved};
use crate::reconcile::Context;
use crate::temporal::gates::gate_workflow_id;
use crate::temporal::{DeploymentState, Status, WorkerDeploymentRef};

/// Reads what the planner needs about `build` (see [`plan::needs`]).
pub async fn observe(
    wd: &WorkerDeployment,
    temporal: &WorkerDeploymentRef<'_>,
    build: &str,
    state: &DeploymentState,
) -> Result<TargetObserved> {
    let needs = plan::needs(wd, build, state);
    let mut out = TargetObserved::default();
    if !needs.task_queues {
        return Ok(out);
    }
    let failed = |rpc: &str, s: Status| {
        Error::temporal(
            &s,
            format!("{rpc} for buildID {build}"),
            Error::TemporalStateFetchFailed,
        )
    };
    out.task_queues = temporal
        .task_queues(build)
        .await
        .map_err(|s| failed("DescribeWorkerDeploymentVersion", s))?;
    if needs.gates {
        for q in out.task_queues.iter().filter(|q| q.workflow) {
            let id = gate_workflow_id(temporal.name, build, &q.name);
            let run = temporal
                .workflow_status(&id)
                .await
                .map_err(|s| failed("DescribeWorkflowExecution", s))?;
            if let Some((run_id, status)) = run {
                out.gates.push(WorkflowExecution {
                    workflow_id: id,
                    run_id,
                    status,
                    task_queue: q.name.clone(),
                });
            }
        }
    }
    if needs.unversioned_pollers && !out.task_queues.is_empty() {
        let mut all = true;
        for q in &out.task_queues {
            match temporal.has_unversioned_poller(q).await {
                Ok(true) => {}
                Ok(false) => {
                    all = false;
                    break;
                }
                Err(s) => {
                    // Unknown: promote straight to current rather than ramp to nobody.
                    tracing::warn!(
                        "DescribeTaskQueue {}: {}; treating it as without unversioned pollers",
                        q.name,
                        s.message()
                    );
                    all = false;
                    break;
                }
            }
        }
        out.unversioned_pollers = Some(all);
    }
    Ok(out)
}

/// The gate's argument: JSON bytes, and whether it came from a Secret.
async fn gate_input(wd: &WorkerDeployment, ctx: &Context) -> Result<Option<(Vec<u8>, bool)>> {
    let Some(gate) = &wd.spec.rollout.gate else {
        return Ok(None);
    };
    let ns = wd.namespace().unwrap_or_default();
    if let Some(input) = &gate.input {
        let bytes = serde_json::to_vec(input)
            .map_err(|e| Error::PlanGenerationFailed(format!("gate input: {e}")))?;
        return Ok(Some((bytes, false)));
    }
    let Some(from) = &gate.input_from else {
        return Ok(None);
    };
    let unreadable = |what: String, e: String| {
        Error::PlanGenerationFailed(format!("gate input from {what}: {e}"))
    };
    if let Some(sel) = &from.config_map_key_ref {
        let what = format!("ConfigMap {ns}/{} key {}", sel.name, sel.key);
        let cm = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
            .get(&sel.name)
            .await
            .map_err(|e| unreadable(what.clone(), kube_message(&e)))?;
        let value = cm
            .data
            .as_ref()
            .and_then(|d| d.get(&sel.key))
            .map(|s| s.as_bytes().to_vec())
            .or_else(|| {
                cm.binary_data
                    .as_ref()
                    .and_then(|d| d.get(&sel.key))
                    .map(|b| b.0.clone())
            })
            .ok_or_else(|| unreadable(what, "no such key".into()))?;
        return Ok(Some((value, false)));
    }
    if let Some(sel) = &from.secret_key_ref {
        let what = format!("Secret {ns}/{} key {}", sel.name, sel.key);
        let secret = Api::<Secret>::namespaced(ctx.client.clone(), &ns)
            .get(&sel.name)
            .await
            .map_err(|e| unreadable(what.clone(), kube_message(&e)))?;
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&sel.key))
            .map(|b| b.0.clone())
            .ok_or_else(|| unreadable(what, "no such key".into()))?;
        return Ok(Some((value, true)));
    }
    Ok(None)
}

/// The top-level keys of a JSON object input (what is logged of a non-secret gate input, as
/// TWC does: values may still be sensitive or large).
fn input_keys(bytes: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect::<Vec<_>>().join(", "),
        Ok(_) => "(not an object)".into(),
        Err(_) => "(not JSON)".into(),
    }
}

/// Starts the planned gate workflows. A start that fails is reported with a Warning event
/// (`TestWorkflowStartFailed`) and retried on the next reconcile; the routing change waits.
pub async fn start_gates(
    wd: &WorkerDeployment,
    ctx: &Context,
    temporal: &WorkerDeploymentRef<'_>,
    plan: &Plan,
    observed: &mut Observed,
) -> Result<()> {
    let Some(gate) = &wd.spec.rollout.gate else {
        return Ok(());
    };
    if plan.start_gates.is_empty() {
        return Ok(());
    }
    let input = gate_input(wd, ctx).await?;
    let build = &plan.target_build_id;
    for start in &plan.start_gates {
        match &input {
            Some((bytes, true)) => tracing::info!(
                workflow_id = start.workflow_id,
                "starting gate workflow {} with {} bytes of input from a Secret",
                gate.workflow_type,
                bytes.len()
            ),
            Some((bytes, false)) => tracing::info!(
                workflow_id = start.workflow_id,
                "starting gate workflow {} with input keys [{}]",
                gate.workflow_type,
                input_keys(bytes)
            ),
            None => tracing::info!(
                workflow_id = start.workflow_id,
                "starting gate workflow {}",
                gate.workflow_type
            ),
        }
        let started = temporal
            .start_gate(
                &gate.workflow_type,
                &start.workflow_id,
                &start.task_queue,
                build,
                input.as_ref().map(|(b, _)| b.as_slice()),
            )
            .await;
        match started {
            Ok(run_id) => {
                observed.target.gates.push(WorkflowExecution {
                    workflow_id: start.workflow_id.clone(),
                    run_id,
                    status: WorkflowExecutionStatus::Running,
                    task_queue: start.task_queue.clone(),
                });
                ctx.event(
                    wd,
                    EventType::Normal,
                    "GateWorkflowStarted",
                    format!(
                        "started gate workflow {} ({}) on task queue {} pinned to buildID {build}",
                        gate.workflow_type, start.workflow_id, start.task_queue
                    ),
                )
                .await;
            }
            Err(s) => {
                ctx.event(
                    wd,
                    EventType::Warning,
                    "TestWorkflowStartFailed",
                    format!(
                        "cannot start gate workflow {} on task queue {}: {}",
                        gate.workflow_type,
                        start.task_queue,
                        s.message()
                    ),
                )
                .await;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_keys_of_a_gate_input_are_logged() {
        assert_eq!(
            super::input_keys(br#"{"ok": true, "token": "s3cr3t"}"#),
            "ok, token"
        );
        assert_eq!(super::input_keys(b"[1]"), "(not an object)");
        assert_eq!(super::input_keys(b"{"), "(not JSON)");
    }
}
