//! The planner: pure functions from (spec, observed Kubernetes state, observed Temporal state,
//! now) to a plan. No client in sight; every rule is a table-driven test.

pub mod build_id;
pub mod deployment;
pub mod guard;
pub mod pace;
pub mod pods;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use twc_api::{
    ConnectionSpec, RolloutStrategyKind, VersionStatus, WorkerDeployment, WorkflowExecution,
    WorkflowExecutionStatus,
};

use crate::config::{Identity, Limits, Manager};
use crate::temporal::gates::{gate_workflow_id, step_gate_workflow_id};

pub use crate::observed::{
    Counted, DeploymentState, Observed, ObservedDeployment, PodTrouble, StepGates, TargetObserved,
    TaskQueueRef,
};

/// Which extra reads the planner needs about the target version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    pub task_queues: bool,
    pub gates: bool,
    pub unversioned_pollers: bool,
    /// Count the workflows closed on the ramping target since its step began.
    pub analysis: bool,
    /// Read the gate runs of this ramp step (counted from 0): the target ramps at a step
    /// that has a gate.
    pub step_gate: Option<usize>,
}

/// What to read about `target` before planning: its task queues while it is registered and
/// not current (they are shown in the status); the gate runs if a gate is set; the
/// unversioned-poller check for a Progressive first rollout (no current version yet) that
/// does not ramp yet. Such a target is Inactive, or Draining then Drained once a pinned gate
/// run went to it (the server reactivates a version a pinned workflow starts on).
pub fn needs(wd: &WorkerDeployment, target: &str, state: &DeploymentState) -> Needs {
    let status = status_of(state, target);
    let pending =
        status != VersionStatus::NotRegistered && state.current_build_id.as_deref() != Some(target);
    let steps = &wd.spec.rollout.steps;
    let ramping = pending
        && state.ramping_build_id.as_deref() == Some(target)
        && wd.spec.rollout.strategy == RolloutStrategyKind::Progressive;
    let step = step_index(steps, state.ramp_percentage);
    Needs {
        step_gate: (ramping && steps.get(step).is_some_and(|s| s.gate.is_some())).then_some(step),
        task_queues: pending,
        gates: pending && wd.spec.rollout.gate.is_some(),
        unversioned_pollers: pending
            && state.current_build_id.is_none()
            && state.ramping_build_id.as_deref() != Some(target)
            && wd.spec.rollout.strategy == RolloutStrategyKind::Progressive,
        analysis: pending
            && state.ramping_build_id.as_deref() == Some(target)
            && wd.spec.rollout.strategy == RolloutStrategyKind::Progressive
            && wd.spec.rollout.analysis.is_some(),
    }
}

/// While current `target` is still judged after its promotion: since when (it became
/// current) and until when. Counted a little past the window's end, so its last count gives
/// the verdict.
pub fn promoted_window(
    wd: &WorkerDeployment,
    target: &str,
    state: &DeploymentState,
    now: SystemTime,
) -> Option<(SystemTime, SystemTime)> {
    let window = wd
        .spec
        .rollout
        .analysis
        .as_ref()?
        .after_promotion
        .as_deref()
        .and_then(|d| twc_api::duration::parse(d).ok())?;
    if wd.spec.rollout.strategy == RolloutStrategyKind::Manual
        || state.current_build_id.as_deref() != Some(target)
    {
        return None;
    }
    let since = state.routing.current_changed_at?;
    let end = since + window;
    (now < end + guard::ANALYSIS_EVERY).then_some((since, end))
}

/// A gate workflow to start.
#[derive(Clone, Debug, PartialEq)]
pub struct GateStart {
    pub workflow_id: String,
    pub task_queue: String,
    /// The ramp step whose gate it is (`steps[step].gate`); None for the gate before any
    /// traffic (`rollout.gate`).
    pub step: Option<usize>,
}

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

/// A change to Temporal's routing.
#[derive(Clone, Debug, PartialEq)]
pub enum Routing {
    /// Make the build current (ends any ramp of it).
    SetCurrent(String),
    /// Ramp the build to the percentage.
    SetRamp(String, f32),
    /// Drop a stale ramp.
    ClearRamp,
}

/// What to do.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub target_build_id: String,
    /// The collision count `target_build_id` was computed with (recorded in the status).
    pub collision_count: u32,
    /// Deployments to server-side apply (a new target, or a drifted one).
    pub apply: Vec<Deployment>,
    /// (Deployment name, replicas).
    pub scale: Vec<(String, i32)>,
    pub delete_deployments: Vec<String>,
    /// Temporal versions to delete (their Deployments are gone).
    pub delete_versions: Vec<String>,
    /// Build IDs of older versions whose running Deployment still uses a previous connection:
    /// re-applied with the new one (see [`deployment::reconnected`]).
    pub reconnect: Vec<String>,
    /// Gate workflows to start on the target (before any routing change).
    pub start_gates: Vec<GateStart>,
    /// Claim the manager identity before the routing change.
    pub claim_manager: bool,
    pub routing: Option<Routing>,
    /// Why routing is held back by someone else, if it is.
    pub blocked: Option<String>,
    /// Versions Temporal cannot account for here, left exactly as they are (not scaled, not
    /// deleted, not reconnected): what is not known is never taken for what is not there.
    pub kept: Vec<Kept>,
    /// The earliest time this plan changes by itself, with nothing else changing: a ramp
    /// step's end, a sunset delay's, a progress deadline.
    pub wake_at: Option<SystemTime>,
    /// Since when the target is the target (recorded in the status).
    pub target_since: Option<SystemTime>,
    /// The target's failure, found now or carried from the status: it gets no new work.
    pub failure: Option<guard::Failure>,
    /// What the target waits for, for people (its pods' trouble).
    pub waiting: Option<String>,
    /// The rollout controls as this plan acts on them (recorded in the status).
    pub controls: twc_api::RolloutControls,
    /// The target's analysis per ramp step (recorded in the status).
    pub analysis: Vec<twc_api::StepAnalysis>,
    /// The ramp step's gate the rollout waits for, for people ("step 2's gate workflow ...
    /// is running"); its runs are read at the fast pace.
    pub step_gate: Option<String>,
}

impl Plan {
    /// Whether carrying the plan out writes to Temporal.
    pub fn writes_temporal(&self) -> bool {
        self.routing.is_some()
            || self.claim_manager
            || !self.start_gates.is_empty()
            || !self.delete_versions.is_empty()
    }

    /// Whether the plan must be made on a state just read, not a reused one: it writes to
    /// Temporal, or it stops or deletes a version's workers (whose pinned workflows may have
    /// come back since the last read).
    pub fn needs_fresh_state(&self) -> bool {
        self.writes_temporal()
            || !self.delete_deployments.is_empty()
            || self.scale.iter().any(|(_, r)| *r == 0)
    }

    fn wake(&mut self, at: SystemTime) {
        self.wake_at = Some(self.wake_at.map_or(at, |t| t.min(at)));
    }
}

/// A version left as it is, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub build_id: String,
    pub why: Unaccounted,
}

/// Why Temporal cannot account for a version that has a Deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unaccounted {
    /// Its workers poll another Temporal namespace (`temporalNamespace` changed since): its
    /// pinned workflows live there, where this controller no longer looks.
    OtherNamespace(String),
    /// The worker deployment is not found where the controller looks (deleted in Temporal,
    /// or `hostPort` now names another server).
    DeploymentNotFound,
    /// Its workers were started with another connection (`hostPort`, TLS or credentials) and
    /// Temporal, reached through the new one, does not list it.
    OtherConnection,
    /// Temporal does not list the version although its workers are up (they poll somewhere
    /// else, or have not polled yet).
    NotListed { ready: i32 },
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.build_id;
        match &self.why {
            Unaccounted::OtherNamespace(ns) => {
                write!(f, "{b} (its workers poll Temporal namespace {ns:?})")
            }
            Unaccounted::DeploymentNotFound => {
                write!(f, "{b} (the worker deployment is not found in Temporal)")
            }
            Unaccounted::OtherConnection => write!(
                f,
                "{b} (its workers use a previous connection, and Temporal reached through the current one does not list it)"
            ),
            Unaccounted::NotListed { .. } => {
                write!(f, "{b} (Temporal does not list it, yet its pods are ready)")
            }
        }
    }
}

pub(crate) fn status_of(state: &DeploymentState, build_id: &str) -> VersionStatus {
    state
        .versions
        .get(build_id)
        .map(|v| v.status)
        .unwrap_or(VersionStatus::NotRegistered)
}

fn parse_delay(value: &Option<String>, default: Duration) -> Duration {
    value
        .as_deref()
        .and_then(|v| twc_api::duration::parse(v).ok())
        .unwrap_or(default)
}

/// The build ID the spec asks for, with the collision count recorded in the status (see
/// [`target`] for the one that accounts for the running Deployments).
pub fn target_build_id(wd: &WorkerDeployment) -> String {
    build_id::build_id_with(
        &wd.spec.template,
        wd.spec.worker_options.unsafe_custom_build_id.as_deref(),
        recorded_collisions(wd),
    )
}

fn recorded_collisions(wd: &WorkerDeployment) -> u32 {
    wd.status
        .as_ref()
        .and_then(|s| s.collision_count)
        .and_then(|c| u32::try_from(c).ok())
        .unwrap_or(0)
}

/// How many more collisions are looked past in one reconcile (each needs 1 in 10,000 luck).
const MAX_NEW_COLLISIONS: u32 = 16;

/// The target build ID and the collision count it was computed with. A build ID whose
/// Deployment runs a different template (its `pod-template-spec-hash` differs) is taken: the
/// count goes up until the build ID is free or runs this very template. A custom build ID is
/// the user's word (a changed template re-applies its Deployment) and never collides.
pub fn target(
    wd: &WorkerDeployment,
    deployments: &BTreeMap<String, ObservedDeployment>,
) -> (String, u32) {
    let custom = wd.spec.worker_options.unsafe_custom_build_id.as_deref();
    let recorded = recorded_collisions(wd);
    let digest = build_id::template_digest(&wd.spec.template);
    let mut count = recorded;
    loop {
        let build = build_id::build_id_with(&wd.spec.template, custom, count);
        let taken = custom.is_none()
            && deployments.get(&build).is_some_and(|d| {
                d.template_digest
                    .as_deref()
                    .is_some_and(|running| running != digest)
            });
        if !taken || count >= recorded.saturating_add(MAX_NEW_COLLISIONS) {
            return (build, count);
        }
        count += 1;
    }
}

/// Plans one reconcile of `wd` through connection `conn`, as controller `identity`.
pub fn plan(
    wd: &WorkerDeployment,
    conn: &ConnectionSpec,
    identity: &Identity,
    observed: &Observed,
) -> Plan {
    plan_with(wd, conn, identity, observed, &Limits::default())
}

/// [`plan`] with explicit limits.
pub fn plan_with(
    wd: &WorkerDeployment,
    conn: &ConnectionSpec,
    identity: &Identity,
    observed: &Observed,
    limits: &Limits,
) -> Plan {
    let now = observed.now;
    let spec = &wd.spec;
    let state = &observed.temporal;
    let (target, collisions) = self::target(wd, &observed.deployments);
    let mut plan = Plan {
        target_build_id: target.clone(),
        collision_count: collisions,
        ..Default::default()
    };

    // The target's Deployment: create it, or re-apply it if its template or connection drifted.
    let mut desired = deployment::versioned_deployment(wd, &target, conn);
    // With an autoscaler, `replicas` is its field: never applied, never scaled to the spec.
    let replicas = if observed.autoscaled {
        if let Some(s) = desired.spec.as_mut() {
            s.replicas = None;
        }
        None
    } else {
        spec.replicas
    };
    let desired_conn_hash = deployment::connection_hash(conn);
    let desired_digest = build_id::template_digest(&spec.template);
    match observed.deployments.get(&target) {
        None => {
            let undeletable = undeletable_versions(observed, &target);
            if undeletable.len() >= limits.max_undeletable_versions
                && !state.versions.contains_key(&target)
            {
                let shown: Vec<&str> = undeletable.iter().take(10).map(String::as_str).collect();
                plan.blocked = Some(format!(
                    "not creating buildID {target}: {} versions cannot be deleted yet (limit {}), so the server would not register another; waiting for some to drain and stop: {}{}",
                    undeletable.len(),
                    limits.max_undeletable_versions,
                    shown.join(", "),
                    if undeletable.len() > shown.len() {
                        ", ..."
                    } else {
                        ""
                    }
                ));
            } else {
                plan.apply.push(desired);
            }
        }
        Some(d) => {
            let custom = spec.worker_options.unsafe_custom_build_id.is_some();
            let template_drift = custom && d.template_digest.as_deref() != Some(&desired_digest);
            let conn_drift = d.connection_hash.as_deref() != Some(&desired_conn_hash);
            // The target follows the spec to a new Temporal namespace (older versions stay).
            let moved = d
                .temporal_namespace
                .as_ref()
                .is_some_and(|n| *n != spec.worker_options.temporal_namespace);
            if template_drift || conn_drift || moved {
                plan.apply.push(desired);
            }
        }
    }

    let current = state.current_build_id.clone();
    let scaledown = parse_delay(&spec.sunset.scaledown_delay, Duration::from_secs(3600));
    let delete_after =
        scaledown + parse_delay(&spec.sunset.delete_delay, Duration::from_secs(86400));

    // Scaling and sunset, per version with a Deployment.
    for (build, d) in &observed.deployments {
        let status = status_of(state, build);
        let is_target = *build == target;
        let is_current = current.as_deref() == Some(build.as_str());
        if !is_target
            && let Some(ns) = &d.temporal_namespace
            && *ns != spec.worker_options.temporal_namespace
        {
            // Its state here says nothing of the namespace its workers serve.
            plan.kept.push(Kept {
                build_id: build.clone(),
                why: Unaccounted::OtherNamespace(ns.clone()),
            });
            continue;
        }
        if state.ramping_build_id.as_deref() == Some(build.as_str()) && !is_target && !is_current {
            // Routed to, whatever its summary says: never scaled down or deleted.
            continue;
        }
        if is_target || is_current {
            match replicas {
                Some(r) if d.spec_replicas != Some(r) => plan.scale.push((d.name.clone(), r)),
                None if is_target && !is_current && d.spec_replicas == Some(0) => {
                    // Re-activated after a sunset scale-down.
                    plan.scale.push((d.name.clone(), 1))
                }
                _ => {}
            }
            continue;
        }
        match status {
            VersionStatus::Inactive => {
                if d.spec_replicas != Some(0) {
                    plan.scale.push((d.name.clone(), 0));
                }
            }
            VersionStatus::NotRegistered => {
                let here = d.connection_hash.as_deref() == Some(&desired_conn_hash);
                if d.ready_replicas == 0 && here {
                    // No worker up, and they would poll where the controller looks: it never
                    // polled, or the server deleted it (Drained, no pollers) to make room.
                    // Nothing can be pinned to it.
                    plan.delete_deployments.push(d.name.clone());
                } else {
                    let why = if !state.exists {
                        Unaccounted::DeploymentNotFound
                    } else if !here {
                        Unaccounted::OtherConnection
                    } else {
                        Unaccounted::NotListed {
                            ready: d.ready_replicas,
                        }
                    };
                    plan.kept.push(Kept {
                        build_id: build.clone(),
                        why,
                    });
                }
            }
            // Never scale a draining version: its pinned workflows need the workers.
            VersionStatus::Draining => {}
            VersionStatus::Ramping | VersionStatus::Current => {
                if let Some(r) = replicas
                    && d.spec_replicas != Some(r)
                {
                    plan.scale.push((d.name.clone(), r));
                }
            }
            VersionStatus::Drained => {
                let since = state
                    .versions
                    .get(build)
                    .and_then(|v| v.drainage_changed_at)
                    .unwrap_or(now);
                let age = now.duration_since(since).unwrap_or_default();
                if age >= delete_after {
                    plan.delete_deployments.push(d.name.clone());
                    plan.delete_versions.push(build.clone());
                } else if age >= scaledown {
                    if d.spec_replicas != Some(0) {
                        plan.scale.push((d.name.clone(), 0));
                    }
                    plan.wake(since + delete_after);
                } else {
                    plan.wake(since + scaledown);
                }
            }
        }
    }
    // Older versions still running on a previous connection follow it (their workers must
    // keep reaching Temporal while pinned workflows finish); scaled-down ones wait until they
    // are needed again. Only versions Temporal lists through the new connection: one it does
    // not know (another server) keeps the connection its pinned workflows are on.
    for (build, d) in &observed.deployments {
        if *build != target
            && status_of(state, build) != VersionStatus::NotRegistered
            && !plan.kept.iter().any(|k| k.build_id == *build)
            && d.connection_hash.as_deref() != Some(&desired_conn_hash)
            && d.spec_replicas != Some(0)
            && !plan.delete_deployments.contains(&d.name)
            && !plan.scale.iter().any(|(n, r)| *n == d.name && *r == 0)
        {
            plan.reconnect.push(build.clone());
        }
    }
    // Drained Temporal versions whose Deployment is already gone: remove the version record.
    for (build, v) in &state.versions {
        let routed = current.as_deref() == Some(build.as_str())
            || state.ramping_build_id.as_deref() == Some(build.as_str());
        if v.status == VersionStatus::Drained
            && !observed.deployments.contains_key(build)
            && *build != target
            && !routed
        {
            plan.delete_versions.push(build.clone());
        }
    }
    plan.delete_versions.sort();
    plan.delete_versions.dedup();

    let window = limits.rollback_window;
    let guard = guard::assess(wd, &target, observed);
    if let Some(at) = guard.deadline_at {
        plan.wake(at);
    }
    plan.target_since = Some(guard.target_since);
    plan.waiting = guard.waiting.clone();
    plan.controls = guard.acted.clone();
    plan.analysis = guard.analysis.clone();
    if let Some(at) = guard.analysis_at {
        plan.wake(at);
    }
    let controls = &guard.controls;
    let up = workers_up(&observed.deployments, &target);
    if let Some(mut failure) = guard.failure {
        // No new work to a failed build; what reached it goes back.
        let back = roll_back(wd, &failure, &target, observed);
        plan.routing = by_manager(back, identity, state, &mut plan);
        if plan.routing.is_some() {
            failure.rolled_back = true;
        } else if plan.blocked.is_none() && gives_current_back(&failure, state, &target) {
            failure.message.push_str(
                "; no earlier version with running workers to route new workflows back to, so they stay on it",
            );
        }
        plan.failure = Some(failure);
    } else if controls.promote.as_deref() == Some(target.as_str())
        && state.current_build_id.as_deref() != Some(target.as_str())
        && status_of(state, &target) != VersionStatus::NotRegistered
        && up
    {
        // Promoted on request: now, skipping the remaining steps (and a gate still running).
        let promote = Some(Routing::SetCurrent(target.clone()));
        plan.routing = by_manager(promote, identity, state, &mut plan);
        if plan.routing.is_some() {
            plan.controls.promoted_build_id = Some(target.clone());
        }
    } else {
        plan.start_gates = gate_starts(wd, &target, observed, now, window);
        let change = routing(wd, &target, observed, (now, window), &mut plan);
        // Paused: only a stale ramp is cleared (the target is already current).
        let change = change.filter(|c| !controls.paused || *c == Routing::ClearRamp);
        plan.routing = by_manager(change, identity, state, &mut plan);
    }
    // No manager yet, TWC's deprecated default or an identity named for takeover: claimed
    // before the routing change.
    plan.claim_manager =
        plan.routing.is_some() && identity.manager(&state.manager_identity) == Manager::Claimable;
    plan
}

/// Gate workflows to start: one per workflow task queue of a registered, not yet current
/// target that has none yet (not for a rollback, which skips the gate).
fn gate_starts(
    wd: &WorkerDeployment,
    target: &str,
    observed: &Observed,
    now: SystemTime,
    window: Duration,
) -> Vec<GateStart> {
    let state = &observed.temporal;
    if wd.spec.rollout.gate.is_none()
        || !needs(wd, target, state).gates
        || is_rollback(state, target, now, window)
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

/// Versions Temporal cannot delete to make room: anything but Drained, or Drained with running
/// workers. Sorted.
fn undeletable_versions(observed: &Observed, target: &str) -> Vec<String> {
    observed
        .temporal
        .versions
        .iter()
        .filter(|(b, _)| b.as_str() != target)
        .filter(|(b, v)| {
            v.status != VersionStatus::Drained
                || observed.deployments.get(*b).is_some_and(|d| d.replicas > 0)
        })
        .map(|(b, _)| b.clone())
        .collect()
}

/// The routing that takes new work away from failed `target`: its ramp cleared; an aborted
/// (or analysis-failed) current version replaced by the one current before it. Under
/// Manual, only an abort.
fn roll_back(
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
fn gives_current_back(failure: &guard::Failure, state: &DeploymentState, target: &str) -> bool {
    failure.new
        && matches!(
            failure.reason,
            twc_api::conditions::ABORTED | twc_api::conditions::ANALYSIS_FAILED
        )
        && state.current_build_id.as_deref() == Some(target)
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

/// Whether routing to `target` is a rollback: it was current within `window`.
fn is_rollback(state: &DeploymentState, target: &str, now: SystemTime, window: Duration) -> bool {
    state.current_build_id.as_deref() != Some(target)
        && state
            .versions
            .get(target)
            .and_then(|v| v.last_current_at)
            .is_some_and(|t| now.duration_since(t).unwrap_or_default() < window)
}

enum Gate {
    Passed,
    Pending,
    Failed(String),
}

/// A gate passes when a gate run completed on every workflow task queue of the target; one
/// failed run blocks the build for good (a gate is never retried under the same build ID).
fn gate_verdict(target: &str, observed: &TargetObserved) -> Gate {
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

/// The step a ramp is at: the last whose ramp is at or below `ramp` (0 if none).
pub fn step_index(steps: &[twc_api::RolloutStep], ramp: f32) -> usize {
    steps
        .iter()
        .rposition(|s| s.ramp_percentage as f32 <= ramp)
        .unwrap_or(0)
}

/// A ramp step's gate, as observed.
enum StepGate {
    Passed,
    /// A run ended without success.
    Failed,
    /// Runs to start, and what runs (for people).
    Pending {
        start: Vec<GateStart>,
        running: String,
    },
}

fn step_gate_verdict(
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

#[cfg(test)]
mod tests;
