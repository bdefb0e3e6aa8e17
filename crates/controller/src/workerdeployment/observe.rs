//! Observe: every read of a reconcile. The connection and its Temporal client, the worker
//! deployment's state in Temporal, the target version's extra reads (task queues, gate runs,
//! the unversioned-poller check), the versioned Deployments and autoscaling templates from
//! the watch caches, and the gate's input when a gate is about to start. Writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::Api;
use temporalio_client::Connection as TemporalConnection;
use twc_api::{WorkerDeployment, WorkflowExecution};

use super::Context;
use crate::connections::{self, Resolved};
use crate::error::{Error, Result, Rpc, kube_message};
use crate::plan::pods::PodsSeen;
use crate::plan::{self, Observed, TargetObserved, build_id};
use crate::scoped::Scoped;
use crate::temporal::gates::{TaskQueueRef, gate_workflow_id};
use crate::temporal::reads::Priority;
use crate::temporal::{self, DeploymentState, Status, WorkerDeploymentRef};

/// The spec checks the CRD's validation cannot make.
pub fn validate(wd: &WorkerDeployment) -> Result<()> {
    let problems = wd.spec.validate();
    if problems.is_empty() {
        return Ok(());
    }
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    Err(Error::InvalidSpec(text.join("; ")))
}

/// A Temporal client for `wd` through its resolved connection. A connection-level failure
/// evicts the pooled client, so the next reconcile dials afresh.
pub struct Temporal {
    pub conn: TemporalConnection,
    pub pool_key: temporal::pool::PoolKey,
    /// The Temporal worker deployment's name (`<namespace>/<name>`, as TWC).
    pub deployment_name: String,
    /// The server's version, as it reported it when the client was dialled.
    pub server_version: Option<String>,
    /// The digest of the credential Secrets' content the client was dialled with.
    pub secrets_digest: Option<String>,
}

impl Temporal {
    /// The worker deployment, written to as `identity`.
    pub fn target<'a>(
        &'a self,
        wd: &'a WorkerDeployment,
        identity: &'a str,
    ) -> WorkerDeploymentRef<'a> {
        WorkerDeploymentRef {
            conn: &self.conn,
            namespace: &wd.spec.worker_options.temporal_namespace,
            name: &self.deployment_name,
            identity,
        }
    }
}

/// The Temporal client of `wd` through `resolved` (Secrets from `wd`'s namespace only).
pub async fn temporal(
    wd: &WorkerDeployment,
    ctx: &Context,
    resolved: &Resolved,
) -> Result<Temporal> {
    let ns = wd.namespace().unwrap_or_default();
    let (conn, pool_key) = connections::temporal_client(
        &ctx.client,
        &ctx.pool,
        &ctx.secret_meta,
        &resolved.spec,
        &ns,
        &wd.spec.worker_options.temporal_namespace,
    )
    .await?;
    Ok(Temporal {
        server_version: ctx.pool.server_version(&pool_key),
        secrets_digest: ctx.pool.secrets_digest(&pool_key),
        conn,
        pool_key,
        deployment_name: build_id::temporal_deployment_name(&ns, &wd.name_any()),
    })
}

/// The Kubernetes side of what the planner looks at, from the watch caches, at `now`; the
/// Temporal side is left empty for [`read_temporal`] or a reused read to fill.
pub fn kubernetes(wd: &WorkerDeployment, ctx: &Context, now: SystemTime) -> Observed {
    Observed {
        deployments: crate::children::owned(wd, &ctx.deployments),
        autoscaled: autoscaled(wd, &ctx.templates),
        ..Observed::at(now)
    }
}

/// The target's containers that are not ready, with the kubelet's reasons, from the pods'
/// watch cache: looked at only while the target's Deployment has fewer ready pods than it
/// wants, and looked at again only when [`plan::pods::due`] (the troubles found stand until
/// then, so that the pace of a waiting WorkerDeployment's reconciles stays the same).
pub fn target_pods(wd: &WorkerDeployment, ctx: &Context, observed: &mut Observed, target: &str) {
    let key = super::key(wd);
    let Some(d) = observed.deployments.get(target).filter(|d| {
        let wanted = d.spec_replicas.unwrap_or(d.replicas);
        wanted > 0 && d.ready_replicas < wanted
    }) else {
        ctx.forget_pods(&key);
        return;
    };
    let seen = ctx.pods_seen(&key);
    if !plan::pods::due(seen.as_ref(), target, d, observed.now) {
        observed.pods_due = seen.as_ref().map(PodsSeen::due_at);
        observed.target_pods = seen.map(|s| s.troubles).unwrap_or_default();
        return;
    }
    let ns = wd.namespace().unwrap_or_default();
    let troubles = crate::worker_pods::troubles_of(&ctx.worker_pods, &ns, &wd.name_any(), target);
    let next = plan::pods::after_list(seen.as_ref(), target, d, troubles, observed.now);
    observed.target_pods = next.troubles.clone();
    observed.pods_due = Some(next.due_at());
    ctx.remember_pods(key, next);
}

/// Reads the worker deployment's state and what the planner needs about `target_build`: the
/// describe on the token the caller took, each further Worker Deployment read waiting for the
/// namespace's budget at `priority`; `now` is the reconcile's (the planner judges the analysis
/// window with the same clock).
pub async fn read_temporal(
    wd: &WorkerDeployment,
    ctx: &Context,
    temporal: &Temporal,
    target_build: &str,
    priority: Priority,
    now: SystemTime,
) -> Result<(DeploymentState, TargetObserved)> {
    // The version only names the server in messages: what decides is whether its Worker
    // Deployment calls answer `Unimplemented` (a managed service may report a version that
    // does not follow the open-source releases).
    let server_version = temporal.server_version.as_deref();
    let target = temporal.target(wd, ctx.identity());
    let asked = std::time::Instant::now();
    let described = target.describe().await;
    let state = match described {
        Ok(s) => {
            // How long the server took, and how far into the pass (the rollout benchmark
            // splits a promotion's latency by it).
            tracing::debug!(
                namespace = wd.namespace().unwrap_or_default(),
                target_build,
                status = ?plan::status_of(&s, target_build),
                since_pass_ms = now.elapsed().map_or(0, |d| d.as_millis()),
                took_ms = asked.elapsed().as_millis(),
                "read Temporal's state"
            );
            s
        }
        Err(status) => {
            if temporal::is_connection_error(&status) {
                ctx.pool.evict(&temporal.pool_key);
            }
            return Err(Error::temporal(
                Rpc::DescribeWorkerDeployment,
                format!("{} in Temporal namespace {}", target.name, target.namespace),
                &status,
            )
            .on_server(server_version));
        }
    };
    let needs = plan::needs(wd, target_build, &state);
    if needs.task_queues {
        ctx.reads.take(&temporal.pool_key, priority).await;
    }
    let mut target_observed = target_version(wd, needs, &target, target_build).await?;
    let promoted = plan::promoted_window(wd, target_build, &state, now);
    if needs.analysis || promoted.is_some() {
        let since = match promoted {
            Some((since, _)) => Some(since),
            None => state.ramp_changed_at,
        };
        let at = since
            .map(crate::connections::auth::rfc3339)
            .unwrap_or_else(|| "1970-01-01T00:00:00Z".into());
        let (closed, failed) = target.closed_since(target_build, &at).await.map_err(|s| {
            Error::temporal(
                Rpc::CountWorkflowExecutions,
                format!("closed on buildID {target_build}"),
                &s,
            )
        })?;
        target_observed.analysis = Some(plan::Counted {
            since,
            closed,
            failed,
        });
    }
    // Superseded versions that never served, scaled down: retired only once visibility
    // counts no running workflow on them (a failed count keeps them).
    let owned = crate::children::owned(wd, &ctx.deployments);
    for (build, d) in &owned {
        if !plan::retirable(build, d, target_build, &state) {
            continue;
        }
        ctx.reads.take(&temporal.pool_key, priority).await;
        match target.open_on(build).await {
            Ok(0) => target_observed.idle_inactive.push(build.clone()),
            Ok(n) => tracing::debug!(build, "kept: {n} workflows still run on it"),
            Err(s) => tracing::warn!(
                build,
                "kept: its running workflows could not be counted: {}",
                s.message()
            ),
        }
    }
    Ok((state, target_observed))
}

/// The worker groups (`default` without groups) a WorkerResourceTemplate of `wd` renders a
/// scaler for (an HPA or the like with `scaleTargetRef`): the scaler owns those Deployments'
/// replicas, not the spec.
fn autoscaled(
    wd: &WorkerDeployment,
    templates: &Scoped<twc_api::WorkerResourceTemplate>,
) -> std::collections::BTreeSet<String> {
    let name = wd.name_any();
    templates
        .in_namespace(&wd.namespace().unwrap_or_default())
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .filter(|t| t.spec.worker_deployment_name() == Some(name.as_str()))
        .filter(|t| crate::wrt::render::scales_target(&t.spec.template))
        .map(|t| t.spec.effective_worker_group().to_string())
        .collect()
}

/// Reads what the planner needs about `build` beyond `DescribeWorkerDeployment` (see
/// [`plan::needs`]).
async fn target_version(
    wd: &WorkerDeployment,
    needs: plan::Needs,
    temporal: &WorkerDeploymentRef<'_>,
    build: &str,
) -> Result<TargetObserved> {
    let mut out = TargetObserved::default();
    if !needs.task_queues {
        return Ok(out);
    }
    let subject = format!("for buildID {build}");
    out.task_queues = temporal
        .task_queues(build)
        .await
        .map_err(|s| Error::temporal(Rpc::DescribeWorkerDeploymentVersion, &subject, &s))?;
    if needs.gates {
        for q in out.task_queues.iter().filter(|q| q.workflow) {
            let id = gate_workflow_id(temporal.name, build, &q.name);
            let run = temporal
                .workflow_status(&id)
                .await
                .map_err(|s| Error::temporal(Rpc::DescribeWorkflowExecution, &subject, &s))?;
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
    if let Some(step) = needs.step_gate {
        let mut runs = Vec::new();
        for q in out.task_queues.iter().filter(|q| q.workflow) {
            let id = plan::step_gate_id(wd, build, &q.name, step);
            let run = temporal
                .workflow_status(&id)
                .await
                .map_err(|s| Error::temporal(Rpc::DescribeWorkflowExecution, &subject, &s))?;
            if let Some((run_id, status)) = run {
                runs.push(WorkflowExecution {
                    workflow_id: id,
                    run_id,
                    status,
                    task_queue: q.name.clone(),
                });
            }
        }
        out.step_gates = Some(plan::StepGates { step, runs });
    }
    if needs.unversioned_pollers && !out.task_queues.is_empty() {
        out.unversioned_pollers = every_queue_has_unversioned_pollers(&out.task_queues, |q| {
            temporal.has_unversioned_poller(q)
        })
        .await;
    }
    Ok(out)
}

/// Whether every task queue still has an unversioned poller (asked queue by queue with `has`):
/// `Some(false)` at the first without one; `None` when one cannot be told. An error is not a
/// "no": it would promote a Progressive first version to 100 % at once, skipping its ramp, so
/// the planner waits and the next reconcile asks again.
async fn every_queue_has_unversioned_pollers<'q, F, Fut>(
    queues: &'q [TaskQueueRef],
    mut has: F,
) -> Option<bool>
where
    F: FnMut(&'q TaskQueueRef) -> Fut,
    Fut: Future<Output = std::result::Result<bool, Status>>,
{
    for q in queues {
        match has(q).await {
            Ok(true) => {}
            Ok(false) => return Some(false),
            Err(s) => {
                tracing::warn!(
                    "DescribeTaskQueue {}: {}; the first rollout waits until it can be told whether unversioned workers still poll",
                    q.name,
                    s.message()
                );
                return None;
            }
        }
    }
    Some(true)
}

/// The inputs of the gates of `steps`, by step (None: the gate before traffic); a gate
/// without input has none here.
pub async fn gate_inputs(
    wd: &WorkerDeployment,
    steps: &BTreeSet<Option<usize>>,
    client: &kube::Client,
) -> Result<BTreeMap<Option<usize>, GateInput>> {
    let mut out = BTreeMap::new();
    for &step in steps {
        if let Some(input) = gate_input(wd, step, client).await? {
            out.insert(step, input);
        }
    }
    Ok(out)
}

/// The gate before traffic (`step` None) or ramp step `step`'s.
pub fn gate_config(
    wd: &WorkerDeployment,
    step: Option<usize>,
) -> Option<&twc_api::GateWorkflowConfig> {
    match step {
        None => wd.spec.rollout.gate.as_ref(),
        Some(i) => wd.spec.rollout.steps.get(i)?.gate.as_ref(),
    }
}

/// A gate workflow's argument: JSON bytes, and whether they came from a Secret (then they are
/// never logged, only their size).
pub struct GateInput {
    pub bytes: Vec<u8>,
    pub secret: bool,
}

/// The input of `wd`'s gate before traffic (`step` None) or of ramp step `step`'s gate, from
/// the spec, a ConfigMap key or a Secret key of `wd`'s namespace.
pub async fn gate_input(
    wd: &WorkerDeployment,
    step: Option<usize>,
    client: &kube::Client,
) -> Result<Option<GateInput>> {
    let Some(gate) = gate_config(wd, step) else {
        return Ok(None);
    };
    let ns = wd.namespace().unwrap_or_default();
    if let Some(input) = &gate.input {
        let bytes =
            serde_json::to_vec(input).map_err(|e| Error::GateInput(format!("gate input: {e}")))?;
        return Ok(Some(GateInput {
            bytes,
            secret: false,
        }));
    }
    let Some(from) = &gate.input_from else {
        return Ok(None);
    };
    let unreadable =
        |what: String, e: String| Error::GateInput(format!("gate input from {what}: {e}"));
    if let Some(sel) = &from.config_map_key_ref {
        let what = format!("ConfigMap {ns}/{} key {}", sel.name, sel.key);
        let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
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
        return Ok(Some(GateInput {
            bytes: value,
            secret: false,
        }));
    }
    if let Some(sel) = &from.secret_key_ref {
        let what = format!("Secret {ns}/{} key {}", sel.name, sel.key);
        let secret = Api::<Secret>::namespaced(client.clone(), &ns)
            .get(&sel.name)
            .await
            .map_err(|e| unreadable(what.clone(), kube_message(&e)))?;
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&sel.key))
            .map(|b| b.0.clone())
            .ok_or_else(|| unreadable(what, "no such key".into()))?;
        return Ok(Some(GateInput {
            bytes: value,
            secret: true,
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use futures::executor::block_on;

    use super::*;

    fn queues(names: &[&str]) -> Vec<TaskQueueRef> {
        names
            .iter()
            .map(|n| TaskQueueRef {
                name: n.to_string(),
                workflow: true,
            })
            .collect()
    }

    #[test]
    fn an_unanswered_poller_check_holds_the_ramp_instead_of_skipping_it() {
        let qs = queues(&["a", "b"]);
        let answer = |a: std::result::Result<bool, Status>,
                      b: std::result::Result<bool, Status>| {
            block_on(every_queue_has_unversioned_pollers(&qs, |q| {
                let r = if q.name == "a" { a.clone() } else { b.clone() };
                async move { r }
            }))
        };
        assert_eq!(answer(Ok(true), Ok(true)), Some(true));
        assert_eq!(answer(Ok(true), Ok(false)), Some(false));
        assert_eq!(
            answer(Ok(true), Err(Status::unavailable("server restarting"))),
            None,
            "an error is not known, not a no"
        );
        assert_eq!(
            answer(Ok(false), Err(Status::unavailable("x"))),
            Some(false),
            "the first queue without pollers settles it"
        );
    }
}
