//! Execute: every write a plan asks for, in order (Deployments applied, reconnected, scaled,
//! deleted; gate workflows started; versions deleted; the routing changed). It returns what
//! was done as an [`Applied`] record, also when a write fails part way, and never changes what
//! was observed: the status and the events are computed from the record.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use twc_api::{WorkerDeployment, WorkflowExecution, WorkflowExecutionStatus};

use super::Context;
use super::observe::GateInput;
use crate::error::{Error, Result, Rpc};
use crate::plan::{self, Observed, ObservedDeployment, Plan, Routing};
use crate::temporal::WorkerDeploymentRef;
use crate::writes::MANAGER;

/// One write that went through (or a gate start that was refused: it is retried next time).
#[derive(Clone, Debug, PartialEq)]
pub enum Done {
    /// A versioned Deployment was created (it was not in the cache), for `build`.
    Created {
        deployment: String,
        build: String,
    },
    /// An existing versioned Deployment was re-applied (a drifted target).
    Applied {
        deployment: String,
    },
    /// An older version's Deployment was moved to the new connection.
    Reconnected {
        deployment: String,
        build: String,
    },
    Scaled {
        deployment: String,
        replicas: i32,
    },
    /// A Deployment's Deployment-level settings were set to the spec's: `fields` names them
    /// (`strategy`, `minReadySeconds`, ...).
    Resettled {
        deployment: String,
        fields: Vec<&'static str>,
    },
    DeletedDeployment {
        deployment: String,
    },
    /// A gate run started; `step` is its ramp step (None: the gate before traffic).
    GateStarted {
        run: WorkflowExecution,
        step: Option<usize>,
    },
    GateStartFailed {
        task_queue: String,
        message: String,
        step: Option<usize>,
    },
    DeletedVersion {
        build: String,
    },
    ClaimedManager,
    Promoted {
        build: String,
    },
    Ramped {
        build: String,
        percentage: f32,
    },
    RampCleared,
}

/// What one execution did, in order, and the error that stopped it, if one did.
#[derive(Debug, Default)]
pub struct Applied {
    pub done: Vec<Done>,
    pub error: Option<Error>,
    /// Deployments left alone because they changed since the plan's view of them (a
    /// precondition failed): planned again at once.
    pub stale: Vec<String>,
    /// Credentials digests recorded, and restarts made, in order.
    pub recorded: Vec<super::credentials::Recorded>,
    /// Restarts onto renewed credentials the restart pace holds back.
    pub held: Vec<plan::credentials::HeldRestart>,
    /// When the routing write was answered (the routing changed at most then).
    pub routed_at: Option<std::time::SystemTime>,
    /// The conflict token the last write to the worker deployment returned (the status shows
    /// it, and the state remembered after the write holds it).
    pub conflict_token: Option<Vec<u8>>,
}

impl Applied {
    /// Whether this pass made `build` current.
    pub fn promoted(&self, build: &str) -> bool {
        self.done
            .iter()
            .any(|d| matches!(d, Done::Promoted { build: b } if b == build))
    }
}

/// The body of a scale to `replicas` of the Deployment `seen`. A scale-down carries the
/// resourceVersion the plan saw, so the apiserver refuses it (409) if the Deployment changed
/// since; a scale-up, which stops nothing, does not.
pub fn scale_body(seen: Option<&ObservedDeployment>, replicas: i32) -> serde_json::Value {
    let down = seen.is_none_or(|d| d.spec_replicas.is_none_or(|r| replicas < r));
    match seen
        .and_then(|d| d.resource_version.as_ref())
        .filter(|_| down)
    {
        Some(rv) => json!({"metadata": {"resourceVersion": rv}, "spec": {"replicas": replicas}}),
        None => json!({"spec": {"replicas": replicas}}),
    }
}

/// The deletion of the Deployment `seen`, in the background, only if it is still the object
/// (uid) at the version (resourceVersion) the plan saw.
pub fn delete_params(seen: Option<&ObservedDeployment>) -> DeleteParams {
    let mut params = DeleteParams::background();
    if let Some(d) = seen {
        params.preconditions = Some(Preconditions {
            uid: d.uid.clone(),
            resource_version: d.resource_version.clone(),
        });
    }
    params
}

/// Records that `name` changed since the plan saw it, so `what` was not done.
fn stale(applied: &mut Applied, name: &str, what: &str) {
    tracing::debug!(
        deployment = name,
        "not {what}d: it changed since the plan's view of it; planning again"
    );
    applied.stale.push(name.to_string());
}

/// What execution works from.
pub struct Inputs<'a> {
    pub wd: &'a WorkerDeployment,
    /// The worker deployment in Temporal, written to as the controller.
    pub temporal: WorkerDeploymentRef<'a>,
    /// The connection the versioned Deployments are rendered for.
    pub conn: &'a crate::connections::Resolved,
    pub plan: &'a Plan,
    pub observed: &'a Observed,
    /// What was read for the gate runs the plan starts: each gate's input, by step (None:
    /// the gate before traffic).
    pub gate_input: Result<BTreeMap<Option<usize>, GateInput>>,
}

/// Carries out the plan; what went through is recorded even when a write fails.
pub async fn execute(ctx: &Context, inputs: Inputs<'_>) -> Applied {
    let mut applied = Applied::default();
    if let Err(e) = run(ctx, inputs, &mut applied).await {
        applied.error = Some(e);
    }
    applied
}

async fn run(ctx: &Context, inputs: Inputs<'_>, applied: &mut Applied) -> Result<()> {
    let Inputs {
        wd,
        temporal,
        conn,
        plan,
        observed,
        gate_input,
    } = inputs;
    let ns = wd.namespace().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    for d in &plan.apply {
        let name = d.name_any();
        apply(&deployments, d).await?;
        let known = observed
            .deployments
            .values()
            .flat_map(|v| v.each())
            .any(|o| o.name == name);
        applied.done.push(if known {
            Done::Applied { deployment: name }
        } else {
            Done::Created {
                deployment: name,
                build: d
                    .labels()
                    .get(twc_api::labels::BUILD_ID)
                    .cloned()
                    .unwrap_or_default(),
            }
        });
    }
    for build in &plan.reconnect {
        // Every Deployment of the version (one per worker group), as observed. The cache keeps
        // only part of a Deployment (`children::CachedDeployment`): the whole one is read, as
        // the apiserver has it now.
        let names = observed
            .deployments
            .get(build)
            .into_iter()
            .flat_map(|v| v.each());
        for name in names.map(|m| m.name.as_str()) {
            // (A list by name: the controller's RBAC has list, not get, on Deployments.)
            let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
            let existing = deployments
                .list(&by_name)
                .await
                .map_err(|e| Error::kube_write(format!("read Deployment {ns}/{name}"), &e))?
                .items
                .into_iter()
                .find(|d| plan::deployment::is_owned_by(d, wd));
            match existing.and_then(|d| plan::deployment::reconnected(&d, wd, build, &conn.spec)) {
                Some(mut d) => {
                    // Its pods restart with the Secrets as they are now.
                    if let Some(digest) = &observed.secrets_digest {
                        d.annotations_mut()
                            .insert(twc_api::labels::CREDENTIALS_DIGEST.into(), digest.clone());
                    }
                    apply(&deployments, &d).await?;
                    applied.done.push(Done::Reconnected {
                        deployment: d.name_any(),
                        build: build.clone(),
                    });
                }
                None => tracing::warn!(
                    build,
                    "Deployment {name} of buildID {build} has no spec; it keeps its previous connection"
                ),
            }
        }
    }
    for (name, change) in &plan.settings {
        let mut spec = serde_json::Map::new();
        if let Some(strategy) = &change.strategy {
            // A merge patch replaces what it names: `rollingUpdate: null` takes a rolling
            // update's settings away when the strategy becomes Recreate (apps/v1 refuses both
            // at once).
            spec.insert(
                "strategy".into(),
                serde_json::json!({"type": strategy.type_, "rollingUpdate": strategy.rolling_update}),
            );
        }
        for (field, value) in [
            ("minReadySeconds", change.min_ready_seconds),
            ("progressDeadlineSeconds", change.progress_deadline_seconds),
            ("revisionHistoryLimit", change.revision_history_limit),
        ] {
            if let Some(v) = value {
                spec.insert(field.into(), v.into());
            }
        }
        let fields: Vec<&'static str> = [
            "strategy",
            "minReadySeconds",
            "progressDeadlineSeconds",
            "revisionHistoryLimit",
        ]
        .into_iter()
        .filter(|f| spec.contains_key(*f))
        .collect();
        let body = serde_json::json!({ "spec": spec });
        match deployments
            .patch(name, &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            Ok(_) => applied.done.push(Done::Resettled {
                deployment: name.clone(),
                fields,
            }),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(Error::kube_write(
                    format!("set the strategy and settings of Deployment {ns}/{name}"),
                    &e,
                ));
            }
        }
    }
    let (written, result) =
        super::credentials::write(ctx, wd, &deployments, &plan.credentials, conn, observed.now)
            .await;
    applied.recorded.extend(written.recorded);
    applied.held.extend(written.held);
    result?;
    // Each Deployment as observed (each group's, for a grouped version): the preconditions of
    // a destructive write are its own uid and resourceVersion.
    let seen = |name: &str| {
        observed
            .deployments
            .values()
            .flat_map(|d| d.each())
            .find(|d| d.name == name)
    };
    for (name, replicas) in &plan.scale {
        let body = scale_body(seen(name), *replicas);
        match deployments
            .patch_scale(name, &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            Ok(_) => applied.done.push(Done::Scaled {
                deployment: name.clone(),
                replicas: *replicas,
            }),
            Err(kube::Error::Api(s)) if s.code == 409 => stale(applied, name, "scale"),
            Err(e) => {
                return Err(Error::kube_write(
                    format!("scale Deployment {ns}/{name}"),
                    &e,
                ));
            }
        }
    }
    for name in &plan.delete_deployments {
        match deployments.delete(name, &delete_params(seen(name))).await {
            Ok(_) => applied.done.push(Done::DeletedDeployment {
                deployment: name.clone(),
            }),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(kube::Error::Api(s)) if s.code == 409 => stale(applied, name, "delete"),
            Err(e) => {
                return Err(Error::kube_write(
                    format!("delete Deployment {ns}/{name}"),
                    &e,
                ));
            }
        }
    }
    // The gate's input was read before execution; unreadable, it stops here (the target's
    // routing waits for its gate anyway).
    start_gates(wd, &temporal, plan, &gate_input?, applied).await;
    for build in &plan.retire {
        // The version first: while the server refuses (its pollers linger for a few minutes
        // after the pods stop) the Deployment stays, and the next pass tries again.
        if let Err(s) = temporal.delete_version(build, false).await {
            tracing::debug!("version {build} not retired yet: {}", s.message());
            continue;
        }
        applied.done.push(Done::DeletedVersion {
            build: build.clone(),
        });
        let Some(version) = observed.deployments.get(build) else {
            continue;
        };
        // Every group's Deployment of the version.
        for d in version.each() {
            match deployments.delete(&d.name, &delete_params(Some(d))).await {
                Ok(_) => applied.done.push(Done::DeletedDeployment {
                    deployment: d.name.clone(),
                }),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(kube::Error::Api(s)) if s.code == 409 => stale(applied, &d.name, "delete"),
                Err(e) => {
                    return Err(Error::kube_write(
                        format!("delete Deployment {ns}/{}", d.name),
                        &e,
                    ));
                }
            }
        }
    }
    for build in &plan.delete_versions {
        // Pollers linger for the server's poller TTL after the pods are gone; that and any
        // other refusal just means "later".
        match temporal.delete_version(build, false).await {
            Ok(()) => applied.done.push(Done::DeletedVersion {
                build: build.clone(),
            }),
            Err(s) => tracing::debug!("version {build} not deleted yet: {}", s.message()),
        }
    }
    let Some(routing) = &plan.routing else {
        return Ok(());
    };
    let subject = format!("for {}", temporal.name);
    let fail = |rpc: Rpc, s: crate::temporal::Status| Error::temporal(rpc, &subject, &s);
    let mut token = observed.temporal.conflict_token.clone();
    if plan.claim_manager {
        token = temporal
            .claim_manager(token)
            .await
            .map_err(|s| fail(Rpc::SetWorkerDeploymentManager, s))?;
        applied.conflict_token = Some(token.clone());
        applied.done.push(Done::ClaimedManager);
    }
    match routing {
        Routing::SetCurrent(build) => {
            tracing::debug!(deployment = temporal.name, build, "promoting");
            token = temporal
                .set_current(build, token, false)
                .await
                .map_err(|s| fail(Rpc::SetWorkerDeploymentCurrentVersion, s))?;
            applied.done.push(Done::Promoted {
                build: build.clone(),
            });
        }
        Routing::SetRamp(build, pct) => {
            token = temporal
                .set_ramping(build, *pct, token)
                .await
                .map_err(|s| fail(Rpc::SetWorkerDeploymentRampingVersion, s))?;
            applied.done.push(Done::Ramped {
                build: build.clone(),
                percentage: *pct,
            });
        }
        Routing::ClearRamp => {
            token = temporal
                .set_ramping("", 0.0, token)
                .await
                .map_err(|s| fail(Rpc::SetWorkerDeploymentRampingVersion, s))?;
            applied.done.push(Done::RampCleared);
        }
    }
    applied.routed_at = Some(std::time::SystemTime::now());
    applied.conflict_token = Some(token);
    Ok(())
}

/// Server-side applies a versioned Deployment.
async fn apply(api: &Api<Deployment>, d: &Deployment) -> Result<()> {
    let name = d.name_any();
    let what = format!(
        "apply Deployment {}/{name}",
        d.namespace().unwrap_or_default()
    );
    let mut body = serde_json::to_value(d).map_err(|e| Error::KubeWrite {
        what: what.clone(),
        message: e.to_string(),
    })?;
    body["apiVersion"] = json!("apps/v1");
    body["kind"] = json!("Deployment");
    let params = PatchParams::apply(MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(&body))
        .await
        .map_err(|e| Error::kube_write(what, &e))?;
    Ok(())
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

/// Starts the planned gate workflows, pinned to the target. A refused start is recorded (one
/// Warning event) and retried on the next reconcile; the routing change waits for the gate.
async fn start_gates(
    wd: &WorkerDeployment,
    temporal: &WorkerDeploymentRef<'_>,
    plan: &Plan,
    inputs: &BTreeMap<Option<usize>, GateInput>,
    applied: &mut Applied,
) {
    let build = &plan.target_build_id;
    for start in &plan.start_gates {
        let Some(gate) = super::observe::gate_config(wd, start.step) else {
            continue;
        };
        let input = inputs.get(&start.step);
        match input {
            Some(GateInput {
                bytes,
                secret: true,
            }) => tracing::info!(
                workflow_id = start.workflow_id,
                "starting gate workflow {} with {} bytes of input from a Secret",
                gate.workflow_type,
                bytes.len()
            ),
            Some(GateInput {
                bytes,
                secret: false,
            }) => tracing::info!(
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
                input.map(|i| crate::temporal::GatePayload {
                    data: &i.bytes,
                    encoding: gate.encoding.map_or("json/plain", |e| e.as_str()),
                    message_type: gate.message_type.as_deref(),
                }),
            )
            .await;
        applied.done.push(match started {
            Ok(run_id) => Done::GateStarted {
                run: WorkflowExecution {
                    workflow_id: start.workflow_id.clone(),
                    run_id,
                    status: WorkflowExecutionStatus::Running,
                    task_queue: start.task_queue.clone(),
                },
                step: start.step,
            },
            Err(s) => Done::GateStartFailed {
                task_queue: start.task_queue.clone(),
                message: s.message().to_string(),
                step: start.step,
            },
        });
    }
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
