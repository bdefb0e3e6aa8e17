//! The WorkerDeployment reconciler, one pipeline read top to bottom:
//!
//! 1. deletion goes to [`cleanup`]; a missing finalizer is added first;
//! 2. [`observe`] reads everything (connection, Temporal client, Temporal's state, the
//!    target's extra reads, the watch caches);
//! 3. [`plan`](crate::plan) decides, with no IO;
//! 4. [`execute`] carries the plan out and returns what it did;
//! 5. [`status`] and [`events`] are computed from those values, on failure paths too; then
//!    the events are published and the status is written once, if it changed.

mod certificates;
pub mod cleanup;
pub mod credentials;
pub mod events;
pub mod execute;
pub mod know;
pub mod memory;
pub mod observe;
pub mod pollers;
mod remember;
pub mod status;
mod timeline;
pub mod timing;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use kube::api::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use twc_api::{FINALIZER, VersionStatus, WorkerDeployment, WorkerDeploymentStatus};

use crate::cached::CachedWorkerDeployment;
use crate::config::{Identity, Intervals, Limits};
use crate::connections::{self, ConnKey, ConnectionStores};
use crate::error::{Error, Result, Retry, Streak};
use crate::events::{EventType, Recorder};
use crate::metrics;
use crate::observed::{DeploymentState, Observed, TargetObserved};
use crate::plan::pace::{self, Pace};
use crate::plan::pods::PodsSeen;
use crate::plan::{self, Plan};
use crate::scoped::{Scoped, Synced};
use crate::temporal::pool::ClientPool;
use crate::temporal::reads::{self as reads, Reads};
use crate::writes::{self, OwnWrites, Swap};
use certificates::warn_of_certificate_expiry;
pub use certificates::{CERT_EXPIRES_SOON, CERT_WARNING_WINDOW, certificate_warning_due};
use execute::Applied;
use status::Outcome;
use timing::Phases;

/// The controller label of the WorkerDeployment reconciler's metrics.
const CONTROLLER: &str = "WorkerDeployment";

/// A compare-and-swap that met a changed object is retried this soon (never left waiting for
/// an event that will not come).
const STALE_RETRY: Duration = Duration::from_millis(200);

/// What the WorkerDeployment reconciler needs.
pub struct Context {
    pub client: Client,
    pub pool: ClientPool,
    pub stores: ConnectionStores,
    pub deployments: Scoped<crate::children::CachedDeployment>,
    pub secret_meta: Scoped<PartialObjectMeta<Secret>>,
    /// The pods of versioned Deployments (what keeps a target's workers from being ready).
    pub worker_pods: Scoped<crate::worker_pods::CachedPod>,
    /// The WorkerDeployments, as the watch shows them (whether one is still there).
    pub worker_deployments: Scoped<CachedWorkerDeployment>,
    /// WorkerResourceTemplates (one scaling the versions takes `replicas` over).
    pub templates: Scoped<twc_api::WorkerResourceTemplate>,
    pub recorder: Recorder,
    pub intervals: Intervals,
    pub limits: Limits,
    /// Who the controller is on Temporal, and whose routing it takes over.
    pub identity: Identity,
    /// WorkerDeployments triggered and waiting for their reconcile (a metric).
    pub queue: metrics::WorkQueue,
    /// Open once every watch cache a reconcile reads has been filled.
    pub synced: Synced,
    /// What is remembered of each WorkerDeployment between its reconciles (`namespace/name`).
    pub memories: memory::Memories,
    /// Status writes the watch cache has not shown yet.
    pub own: OwnWrites<WorkerDeployment>,
    /// Read budgets, listings and steady turns per Temporal namespace.
    pub reads: Reads,
    /// The pace of the restarts the controller starts by itself.
    pub restarts: crate::restarts::Restarts,
    /// The controller's own Role and RoleBinding in a watched namespace, held while needed.
    pub rights: Arc<crate::rights::Rights>,
}

impl Context {
    /// The identity of every Temporal write.
    pub fn identity(&self) -> &str {
        &self.identity.own
    }

    /// What the last look at the target's pods of `key` found.
    fn pods_seen(&self, key: &str) -> Option<PodsSeen> {
        self.memories.get(key).pods
    }

    fn remember_pods(&self, key: String, seen: PodsSeen) {
        self.memories.update(&key, |m| m.pods = Some(seen));
    }

    fn forget_pods(&self, key: &str) {
        self.memories.update(key, |m| m.pods = None);
    }

    /// Forgets everything about the WorkerDeployment `key` (deleted, or being deleted).
    pub fn forget(&self, key: &str) {
        self.memories.forget(key);
        self.reads.forget_turn(key);
        if let Some((ns, name)) = key.split_once('/') {
            metrics::global().forget_worker_deployment(ns, name);
        }
    }

    /// Records how a reconcile of `wd` ended; returns its failure streak, this one included.
    fn streak(&self, wd: &WorkerDeployment, error: Option<&Error>) -> Streak {
        self.memories
            .update(&key(wd), |m| {
                m.streak = m.streak.next(error);
                m.streak
            })
            .unwrap_or(Streak {
                rate_limited: u32::MAX,
                failed: u32::MAX,
            })
    }

    pub(crate) async fn event(
        &self,
        wd: &WorkerDeployment,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        writes::publish(&self.recorder, wd, type_, reason, note).await;
    }
}

fn key(wd: &WorkerDeployment) -> String {
    format!("{}/{}", wd.namespace().unwrap_or_default(), wd.name_any())
}

/// Reconciles one WorkerDeployment, counted in the metrics.
pub async fn reconcile(cached: Arc<CachedWorkerDeployment>, ctx: Arc<Context>) -> Result<Action> {
    let mut phases = Phases::start(ctx.queue.started(&key(&cached.watched())));
    let (wd, template_problem) = cached.full();
    // The copy from before our own last status write, if the cache has not caught up.
    let wd = ctx.own.freshest(Arc::new(wd));
    let (ns, name) = (wd.namespace().unwrap_or_default(), wd.name_any());
    let result = metrics::counted(
        CONTROLLER,
        reconcile_one(wd, template_problem, ctx.clone(), &mut phases),
        Error::reason,
    )
    .await;
    // Deleted while this reconcile ran: what it remembered goes too (the deletion's watch
    // event may have come first).
    if ctx.worker_deployments.get(&ns, &name).is_none() {
        ctx.forget(&format!("{ns}/{name}"));
    }
    if phases.slow() {
        tracing::info!(namespace = ns, name, "slow reconcile: {}", phases.summary());
    } else {
        tracing::debug!(namespace = ns, name, "reconciled in {}", phases.summary());
    }
    result
}

/// The error policy: only a failed status or finalizer write gets here; back off.
pub fn error_policy(
    cached: Arc<CachedWorkerDeployment>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    tracing::warn!(reason = error.reason(), "reconcile failed: {error}");
    let streak = ctx.streak(&cached.watched(), Some(error));
    Action::requeue(Retry::Backoff.after(&ctx.intervals, streak))
}

async fn reconcile_one(
    wd: Arc<WorkerDeployment>,
    template_problem: Option<String>,
    ctx: Arc<Context>,
    phases: &mut Phases,
) -> Result<Action> {
    // Right after a start or a leadership gain a cache still filling reads as "not there": a
    // Connection "not found" would skip the cleanup of a deletion, a Deployment not yet seen
    // would be created again, a scaler not yet seen would have its replicas written over.
    ctx.synced.wait().await;
    phases.mark("caches");
    // Rights that a deleted namespace would take before its cleanup is done are held first.
    if wd.metadata.deletion_timestamp.is_none() || wd.finalizers().iter().any(|f| f == FINALIZER) {
        ctx.rights.hold(&wd.namespace().unwrap_or_default()).await;
    }
    if wd.metadata.deletion_timestamp.is_some() {
        let action = delete(&wd, &ctx).await;
        phases.mark("cleanup");
        return action;
    }
    if !wd.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = wd.finalizers().to_vec();
        finalizers.push(FINALIZER.into());
        let api = writes::namespaced_api(&ctx.client, wd.as_ref());
        // The update event brings us back with the finalizer in place.
        let swapped = writes::swap_finalizers(&api, wd.as_ref(), finalizers).await;
        phases.mark("finalizer");
        return Ok(match swapped? {
            Swap::Written(_) | Swap::Gone => Action::await_change(),
            Swap::Stale => Action::requeue(STALE_RETRY),
        });
    }
    roll_out(&wd, template_problem, &ctx, phases).await
}

/// A WorkerDeployment being deleted: clean Temporal up, or wait saying why.
async fn delete(wd: &WorkerDeployment, ctx: &Context) -> Result<Action> {
    ctx.forget(&key(wd));
    match cleanup::cleanup(wd, ctx).await {
        Ok(action) => {
            ctx.streak(wd, None);
            Ok(action)
        }
        Err(e) => {
            // Deleting now could leave Temporal routing new workflows to versions whose
            // workers are gone; wait, and say how to get out.
            if let Err(report) = cleanup::report_blocked(wd, ctx, &e).await {
                tracing::debug!("cannot report the blocked cleanup: {report}");
            }
            let streak = ctx.streak(wd, Some(&e));
            Ok(Action::requeue(
                Retry::Backoff.after(&ctx.intervals, streak),
            ))
        }
    }
}

/// The rollout: one pass of the pipeline, then its status and events, on failure too.
async fn roll_out(
    wd: &WorkerDeployment,
    template_problem: Option<String>,
    ctx: &Context,
    phases: &mut Phases,
) -> Result<Action> {
    let now = SystemTime::now();
    let mut connection = None;
    let pass = match template_problem {
        Some(problem) => Err(Error::InvalidSpec(problem)),
        None => pipeline(wd, ctx, now, &mut connection, phases).await,
    };
    let pass = match pass {
        // Nothing was read or done: the status stands until the read at its turn.
        Ok(ControlFlow::Break(at)) => {
            return Ok(Action::requeue(
                at.saturating_duration_since(std::time::Instant::now()),
            ));
        }
        Ok(ControlFlow::Continue(p)) => Ok(*p),
        Err(e) => Err(e),
    };
    let previous = wd.status.clone().unwrap_or_default();
    let failure = match &pass {
        Ok(p) => p.applied.error.as_ref(),
        Err(e) => Some(e),
    };
    let streak = ctx.streak(wd, failure);
    let outcome = match &pass {
        Ok(
            p @ Pass {
                applied: Applied { error: None, .. },
                ..
            },
        ) => Outcome::Executed {
            observed: &p.observed,
            plan: &p.plan,
            applied: &p.applied,
        },
        Ok(Pass {
            applied: Applied { error: Some(e), .. },
            ..
        })
        | Err(e) => Outcome::Failed {
            error: e,
            verdict: e.verdict(streak.rate_limited),
        },
    };
    let requeue = match (&outcome, &pass) {
        // A Deployment changed under a destructive write: plan again soon, on what it is now.
        (Outcome::Executed { .. }, Ok(p)) if !p.applied.stale.is_empty() => {
            p.pace.requeue.min(ctx.intervals.moving)
        }
        // Restarts wait for the pace: asked again at least this often (and woken sooner
        // when a restart of their place ends).
        (Outcome::Executed { .. }, Ok(p))
            if !p.plan.restarts_held.is_empty() || !p.applied.held.is_empty() =>
        {
            p.pace.requeue.min(crate::restarts::RECHECK)
        }
        (Outcome::Executed { .. }, Ok(p)) => p.pace.requeue,
        (Outcome::Failed { verdict, .. }, _) => {
            ctx.memories.update(&key(wd), |m| m.read = None);
            verdict.retry.after(&ctx.intervals, streak)
        }
        (Outcome::Executed { .. }, Err(_)) => ctx.intervals.moving,
    };

    let mut failed = Vec::new();
    if let Outcome::Failed { error, verdict } = &outcome {
        metrics::global().reconcile_failed(CONTROLLER, verdict.reason);
        failed.extend(events::of_error(&previous, error, *verdict));
        let (ns, name) = (wd.namespace().unwrap_or_default(), wd.name_any());
        if verdict.warning {
            tracing::warn!(namespace = ns, name, reason = verdict.reason, "{error}");
        } else {
            tracing::debug!(namespace = ns, name, "{error}");
        }
    }
    let new_status = status::next(
        wd,
        &previous,
        outcome,
        connection.as_ref(),
        ctx.identity(),
        now,
    );
    // In the order things happened: what was seen (a version registered or drained), then
    // what was done about it (created, promoted, scaled), then what failed.
    let mut notes = events::of_status(&previous, &new_status);
    if let Ok(p) = &pass {
        notes.extend(events::of_applied(wd, &p.plan.target_build_id, &p.applied));
        let held: Vec<_> = p
            .plan
            .restarts_held
            .iter()
            .chain(&p.applied.held)
            .cloned()
            .collect();
        notes.extend(credentials::notes(wd, &p.applied.recorded, &held));
    }
    notes.extend(failed);
    for n in notes {
        ctx.event(wd, n.type_, n.reason, n.note).await;
    }
    phases.mark("events");
    record_metrics(wd, &new_status);
    if previous != new_status {
        let api = writes::namespaced_api(&ctx.client, wd);
        let written = writes::apply_status(&api, &wd.name_any(), &new_status).await;
        phases.mark("status");
        if let Some(written) = written? {
            ctx.own.wrote(wd, written);
        }
    }
    // Long requeues on a whole second: those due together share one wake-up.
    Ok(Action::requeue(pace::coalesced(requeue, SystemTime::now())))
}

/// While `wd` is being deleted: restarts the versions `kept` for their pinned workflows whose
/// credential Secrets changed (see [`crate::plan::credentials::while_deleting`]), as read by
/// the client of `key` for the connection `resolved`, with an event for each.
async fn restart_kept<'a>(
    ctx: &Context,
    wd: &WorkerDeployment,
    deployments: &kube::Api<k8s_openapi::api::apps::v1::Deployment>,
    kept: impl IntoIterator<Item = &'a crate::plan::ObservedDeployment>,
    client: Option<(&crate::temporal::pool::PoolKey, &connections::Resolved)>,
) -> Result<()> {
    let Some((key, resolved)) = client else {
        return Ok(());
    };
    let digest = ctx.pool.secrets_digest(key);
    let here = plan::credentials::Place {
        address: key.host_port.clone(),
        namespace: key.temporal_namespace.clone(),
    };
    let restarts = plan::credentials::while_deleting(wd, kept, digest.as_deref(), &here);
    let now = SystemTime::now();
    let (written, result) =
        credentials::write(ctx, wd, deployments, &restarts, resolved, now).await;
    for n in credentials::notes(wd, &written.recorded, &written.held) {
        ctx.event(wd, n.type_, n.reason, n.note).await;
    }
    result
}

/// One pass through observe -> plan -> execute.
struct Pass {
    observed: Observed,
    plan: Plan,
    applied: Applied,
    pace: Pace,
}

/// One pass, top to bottom: the caches once, then how to know Temporal's state (a value,
/// [`know::decide`]), one read if it says so, gate inputs, one plan; a plan that writes
/// Temporal or stops workers on a state not read in this pass is made again on a fresh read
/// (the only loop); then execute. `connection` is set as soon as the reference resolves (the
/// status records it even if a later step fails). Breaks off, with nothing read or done, when
/// its read at the steady priority must wait for its turn: reconcile again at that instant
/// (without holding the reconcile: see [`reads::STEADY_SEATS`]).
async fn pipeline(
    wd: &WorkerDeployment,
    ctx: &Context,
    now: SystemTime,
    connection: &mut Option<ConnKey>,
    phases: &mut Phases,
) -> Result<ControlFlow<std::time::Instant, Box<Pass>>> {
    observe::validate(wd)?;
    let resolved = connections::resolve(wd, &ctx.stores)?;
    *connection = Some(resolved.key.clone());
    let temporal = observe::temporal(wd, ctx, &resolved).await;
    phases.mark("client");
    let temporal = temporal?;
    warn_of_certificate_expiry(wd, ctx, &resolved, &temporal, now).await;

    // How to know Temporal's state, from what the caches show now.
    let looked = observe::kubernetes(wd, ctx, now);
    let target = plan::target(wd, &looked.deployments).0;
    let remembered = ctx.memories.get(&key(wd)).read;
    let listing = if know::wants_listing(remembered.as_ref(), &looked) {
        ctx.reads.listing(&temporal.conn, &temporal.pool_key).await
    } else {
        None
    };
    phases.mark("listing");
    let knowing = know::decide(
        &know::Deciding {
            remembered: remembered.as_ref(),
            listing: listing.as_ref(),
            snapshot: &looked,
            target: &target,
            pool_key: &temporal.pool_key,
            deployment: &temporal.deployment_name,
            now,
        },
        wd,
    );
    let read = |priority| read_state(wd, ctx, &temporal, &target, priority, now);
    let mut fresh = !knowing.stands_in();
    let (state, known_target) = match knowing {
        know::Knowing::Reuse { state, target } => (*state, target.map(|t| *t)),
        know::Knowing::Absent => (DeploymentState::default(), None),
        know::Knowing::Read(priority) => match read(priority).await? {
            ControlFlow::Continue((state, t)) => (state, Some(t)),
            ControlFlow::Break(at) => return Ok(ControlFlow::Break(at)),
        },
    };
    // What the plan acts on: the caches as they are after the waits for the listing, the
    // budget and the read (a scaler that appeared meanwhile owns the replicas), the target's
    // pods, and Temporal's state as known.
    let mut observed = observe::kubernetes(wd, ctx, now);
    observed.secrets_digest = temporal.secrets_digest.clone();
    observed.secrets_not_after = ctx.pool.not_after(&temporal.pool_key);
    observed.secrets_written_at = ctx.pool.secrets_written_at(&temporal.pool_key);
    // A Deployment with no credentials digest recorded (TWC's, or an earlier build's): when
    // its pods started says whether they can hold older credentials.
    for (build, d) in observed.deployments.iter_mut() {
        if d.credentials_digest.is_none() {
            let (ns, name) = (wd.namespace().unwrap_or_default(), wd.name_any());
            d.oldest_pod = crate::worker_pods::oldest_pod_of(&ctx.worker_pods, &ns, &name, build);
        }
    }
    observe::target_pods(wd, ctx, &mut observed, &target);
    observed.temporal = state;
    if let Some(t) = known_target {
        observed.target = t;
    }
    phases.mark("read");

    // The inputs of the gates that may start: part of the observation (a ConfigMap or Secret
    // is read only while a gate is about to start).
    let gate_inputs = async |observed: &Observed| {
        let steps = plan::gates_may_start(wd, &target, observed);
        observe::gate_inputs(wd, &steps, &ctx.client).await
    };
    let mut gate_input = gate_inputs(&observed).await;
    phases.mark("gate input");

    // Plan once; a destructive plan on a state not read in this pass, once more on a read.
    let mut plan = plan::plan_with(wd, &resolved.spec, &ctx.identity, &observed, &ctx.limits);
    if !fresh && plan.needs_fresh_state() {
        match read(reads::priority(remembered.as_ref(), wd)).await? {
            ControlFlow::Continue((state, t)) => (observed.temporal, observed.target) = (state, t),
            ControlFlow::Break(at) => return Ok(ControlFlow::Break(at)),
        }
        fresh = true;
        // The caches again after that wait; the pods' troubles stand.
        let again = observe::kubernetes(wd, ctx, now);
        (observed.deployments, observed.autoscaled) = (again.deployments, again.autoscaled);
        gate_input = gate_inputs(&observed).await;
        phases.mark("read");
        plan = plan::plan_with(wd, &resolved.spec, &ctx.identity, &observed, &ctx.limits);
    }
    metrics::global().state_read(!fresh);
    // Inert unless the chaos self-test's build chose a broken variant.
    crate::chaos_break::break_plan(&mut plan, &observed);
    if plan.start_gates.is_empty() {
        // Unreadable, an input fails only the pass that starts its gate.
        gate_input = Ok(Default::default());
    }

    let applied = execute::execute(
        ctx,
        execute::Inputs {
            wd,
            temporal: temporal.target(wd, ctx.identity()),
            conn: &resolved,
            plan: &plan,
            observed: &observed,
            gate_input,
        },
    )
    .await;
    phases.mark("execute");
    if applied.error.is_none()
        && pollers::after_pass(
            wd,
            ctx,
            &temporal,
            &mut observed,
            &applied,
            &plan.target_build_id,
        )
        .await
    {
        phases.mark("pollers");
    }
    let pace = remember::pace_and_remember(
        wd,
        ctx,
        remember::Pass {
            spec: &resolved.spec,
            temporal: &temporal,
            observed: &observed,
            plan: &plan,
            applied: &applied,
            fresh,
            now,
        },
    );
    Ok(ControlFlow::Continue(Box::new(Pass {
        observed,
        plan,
        applied,
        pace,
    })))
}

/// Reads the worker deployment's state and what the planner needs about `target`, once the
/// namespace's budget grants it at `priority`; breaks off with the instant of its turn when a
/// steady read must wait for it.
async fn read_state(
    wd: &WorkerDeployment,
    ctx: &Context,
    temporal: &observe::Temporal,
    target: &str,
    priority: reads::Priority,
    now: SystemTime,
) -> Result<ControlFlow<std::time::Instant, (DeploymentState, TargetObserved)>> {
    let granted = ctx
        .reads
        .grant(&key(wd), &temporal.pool_key, priority)
        .await;
    if let ControlFlow::Break(at) = granted {
        return Ok(ControlFlow::Break(at));
    }
    let read = observe::read_temporal(wd, ctx, temporal, target, priority, now).await?;
    Ok(ControlFlow::Continue(read))
}

/// Records the versions by status, the ramp and the conditions of a WorkerDeployment's new
/// status.
fn record_metrics(wd: &WorkerDeployment, status: &WorkerDeploymentStatus) {
    let statuses: Vec<VersionStatus> = events::versions(status).into_values().collect();
    let ramp = status
        .target_version
        .as_ref()
        .filter(|t| t.base.status == VersionStatus::Ramping)
        .and_then(|t| t.ramp_percentage)
        .unwrap_or(0.0);
    metrics::global().worker_deployment(
        &wd.namespace().unwrap_or_default(),
        &wd.name_any(),
        &statuses,
        ramp,
        &status.conditions,
    );
}
