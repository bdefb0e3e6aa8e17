//! The planner: pure functions from (spec, observed Kubernetes state, observed Temporal state,
//! now) to a plan. No client in sight; every rule is a table-driven test.

pub mod build_id;
pub mod credentials;
pub mod deployment;
mod gates;
pub mod group_ids;
pub mod guard;
mod kept;
pub mod pace;
pub mod pods;
pub mod pollers;
mod retire;
mod rollback;
mod routing;
mod sunset;

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::apps::v1::Deployment;
use twc_api::{ConnectionSpec, RolloutStrategyKind, VersionStatus, WorkerDeployment};

use crate::config::{Identity, Limits};

pub use crate::observed::{
    Counted, DeploymentState, Observed, ObservedDeployment, PodTrouble, StepGates, TargetObserved,
    TaskQueueRef,
};
pub use credentials::CredentialsWrite;
pub use gates::{failed_step_gate, gates_may_start, retry_token, step_gate_id};
pub use kept::{Kept, Unaccounted};
pub use retire::retirable;
pub use routing::workers_up;
use sunset::scale_and_sunset;
pub use sunset::scaledown_delay;

/// Which extra reads the planner needs about the target version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    pub task_queues: bool,
    /// Read the target's task queues after the pass, for the status, unless it was promoted
    /// (then the next pass reads them): an AllAtOnce target without a gate is promoted
    /// without waiting for them.
    pub task_queues_after: bool,
    pub gates: bool,
    pub unversioned_pollers: bool,
    /// Count the workflows closed on the ramping target since its step began.
    pub analysis: bool,
    /// Read the gate runs of this ramp step (counted from 0): the target ramps at a step
    /// that has a gate.
    pub step_gate: Option<usize>,
}

/// What to read about `target` before planning: its task queues while it is registered and
/// not current (they are shown in the status), except for an AllAtOnce target without a gate,
/// whose promotion does not wait for them (right after a registration the server takes up to
/// a second to describe the version: read after the pass, or once current for the status);
/// the gate runs if a gate is set; the
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
    let promoted_at_once = wd.spec.rollout.strategy == RolloutStrategyKind::AllAtOnce
        && wd.spec.rollout.gate.is_none();
    Needs {
        step_gate: (ramping && steps.get(step).is_some_and(|s| s.gate.is_some())).then_some(step),
        task_queues: pending && !promoted_at_once,
        task_queues_after: pending && promoted_at_once,
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
    /// Superseded versions that never served to retire (TWC's rule): the Temporal version is
    /// deleted first (without skipping drainage), then its Deployment.
    pub retire: Vec<String>,
    /// (Deployment name, change): versions whose Deployment-level settings (strategy,
    /// minReadySeconds, ...) differ from the spec's; patched in place, no pod rolls.
    pub settings: Vec<(String, deployment::SettingsChange)>,
    /// Credential digests to record, and restarts for changed credential Secrets.
    pub credentials: Vec<CredentialsWrite>,
    /// Restarts for changed credential Secrets this plan holds back (the current and target
    /// versions wait for the others').
    pub restarts_held: Vec<credentials::HeldRestart>,
    /// Gate workflows to start on the target (before any routing change).
    pub start_gates: Vec<GateStart>,
    /// Claim the manager identity before the routing change.
    pub claim_manager: bool,
    pub routing: Option<Routing>,
    /// Why routing is held back by someone else, if it is.
    pub blocked: Option<String>,
    /// `blocked` is the spec's doing (upstream's blocked reason): no wait can clear it, so
    /// Ready and Progressing read `InvalidSpec` (Stalled) until the spec changes.
    pub blocked_by_spec: bool,
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
            || !self.retire.is_empty()
    }

    /// Whether the plan must be made on a state just read, not a reused one: it writes to
    /// Temporal, or it stops or deletes a version's workers (whose pinned workflows may have
    /// come back since the last read).
    pub fn needs_fresh_state(&self) -> bool {
        self.writes_temporal()
            || !self.retire.is_empty()
            || !self.delete_deployments.is_empty()
            || self.scale.iter().any(|(_, r)| *r == 0)
    }

    fn wake(&mut self, at: SystemTime) {
        self.wake_at = Some(self.wake_at.map_or(at, |t| t.min(at)));
    }
}

pub(crate) fn status_of(state: &DeploymentState, build_id: &str) -> VersionStatus {
    state
        .versions
        .get(build_id)
        .map(|v| v.status)
        .unwrap_or(VersionStatus::NotRegistered)
}

/// The build ID the spec asks for, with the collision count recorded in the status (see
/// [`target`] for the one that accounts for the running Deployments).
pub fn target_build_id(wd: &WorkerDeployment) -> String {
    build_id_with(wd, recorded_collisions(wd))
}

/// The build ID of `wd`'s spec with collision count `count`: over its pod template, or over
/// every worker group's (upstream's build ID for groups).
fn build_id_with(wd: &WorkerDeployment, count: u32) -> String {
    let custom = wd.spec.worker_options.unsafe_custom_build_id.as_deref();
    if wd.spec.has_worker_groups() {
        let views = wd.spec.group_views();
        let groups: Vec<(&str, &k8s_openapi::api::core::v1::PodTemplateSpec)> =
            views.iter().map(|g| (g.name, g.template)).collect();
        return group_ids::build_id(&groups, custom, count);
    }
    build_id::build_id_with(wd.spec.pod_template(), custom, count)
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
/// the user's word (a changed template re-applies its Deployment) and never collides, nor does
/// a grouped one (10 hexadecimal digits of hash, where TWC's single template has 4).
pub fn target(
    wd: &WorkerDeployment,
    deployments: &BTreeMap<String, ObservedDeployment>,
) -> (String, u32) {
    let custom = wd.spec.worker_options.unsafe_custom_build_id.as_deref();
    let recorded = recorded_collisions(wd);
    let digest = build_id::template_digest(wd.spec.pod_template());
    let mut count = recorded;
    loop {
        let build = build_id_with(wd, count);
        let taken = custom.is_none()
            && !wd.spec.has_worker_groups()
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
    let (target, collisions) = self::target(wd, &observed.deployments);
    let mut plan = Plan {
        target_build_id: target.clone(),
        collision_count: collisions,
        ..Default::default()
    };
    let desired_conn = deployment::PodConnection::of(conn);

    target_deployment(
        wd,
        conn,
        observed,
        limits,
        &target,
        &desired_conn,
        &mut plan,
    );
    scale_and_sunset(wd, observed, &target, &desired_conn, &mut plan);
    reconnect_older_versions(observed, &target, &desired_conn, &mut plan);
    delete_drained_versions(observed, &target, &mut plan);
    plan.settings = deployment::settings_changes(wd, observed, |name| {
        plan.delete_deployments.iter().any(|n| n == name)
            || plan
                .apply
                .iter()
                .any(|a| a.metadata.name.as_deref() == Some(name))
    });

    let here = credentials::Place {
        address: conn.host_port.clone(),
        namespace: wd.spec.worker_options.temporal_namespace.clone(),
    };
    credentials::plan_credentials(wd, observed, &desired_conn, &here, &mut plan);

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
    routing::route(wd, identity, observed, limits, &target, guard, &mut plan);
    plan
}

/// The target's Deployment: create it, or re-apply it if its template or connection drifted.
/// Not created while too many versions cannot be deleted (`plan.blocked` says so).
fn target_deployment(
    wd: &WorkerDeployment,
    conn: &ConnectionSpec,
    observed: &Observed,
    limits: &Limits,
    target: &str,
    desired_conn: &deployment::PodConnection,
    plan: &mut Plan,
) {
    let spec = &wd.spec;
    let state = &observed.temporal;
    let mut desired = deployment::versioned_deployments(wd, target, conn);
    // With an autoscaler, `replicas` is its field: never applied, never scaled to the spec.
    for (d, group) in desired.iter_mut().zip(spec.group_views()) {
        if observed.autoscaled.contains(group.name)
            && let Some(s) = d.spec.as_mut()
        {
            s.replicas = None;
        }
    }
    let Some(version) = observed.deployments.get(target) else {
        let undeletable = undeletable_versions(observed, target);
        if undeletable.len() >= limits.max_undeletable_versions
            && !state.versions.contains_key(target)
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
            plan.apply.extend(desired);
        }
        return;
    };
    // Selectors are immutable: a build ID's Deployments stay grouped or ungrouped.
    let running_grouped = !version.members.is_empty();
    if running_grouped != spec.has_worker_groups() {
        plan.blocked = Some(format!(
            "adding or removing spec.workerGroups requires a new unsafeCustomBuildID: build ID {target:?} already has Deployments"
        ));
        plan.blocked_by_spec = true;
        return;
    }
    let custom = spec.worker_options.unsafe_custom_build_id.is_some();
    let groups = spec.group_views();
    // A group taken out of the spec under the same custom build ID: its Deployment goes, the
    // version stays (upstream's rule; without a custom ID it is a new version).
    if custom && running_grouped {
        let wanted: Vec<&str> = desired
            .iter()
            .filter_map(|d| d.metadata.name.as_deref())
            .collect();
        for m in &version.members {
            if !wanted.contains(&m.name.as_str()) {
                plan.delete_deployments.push(m.name.clone());
            }
        }
    }
    for (want, group) in desired.into_iter().zip(&groups) {
        // Without groups the version is its one Deployment, whatever its name (TWC's); with
        // them, each group's by name (a group added under a custom build ID has none yet).
        let have = if version.members.is_empty() {
            Some(version)
        } else {
            version
                .members
                .iter()
                .find(|m| Some(&m.name) == want.metadata.name.as_ref())
        };
        let Some(d) = have else {
            plan.apply.push(want);
            continue;
        };
        let desired_digest = build_id::template_digest(group.template);
        let template_drift = custom && d.template_digest.as_deref() != Some(&desired_digest);
        let conn_drift = !desired_conn.holds(d);
        // The target follows the spec to a new Temporal namespace (older versions stay).
        let moved = d
            .temporal_namespace
            .as_ref()
            .is_some_and(|n| *n != spec.worker_options.temporal_namespace);
        if template_drift || conn_drift || moved {
            plan.apply.push(want);
        }
    }
}

/// Older versions that follow a connection change.
fn reconnect_older_versions(
    observed: &Observed,
    target: &str,
    desired_conn: &deployment::PodConnection,
    plan: &mut Plan,
) {
    let state = &observed.temporal;
    // Older versions still running on a previous connection follow it (their workers must
    // keep reaching Temporal while pinned workflows finish); scaled-down ones wait until they
    // are needed again. Only versions Temporal lists through the new connection: one it does
    // not know (another server) keeps the connection its pinned workflows are on.
    for (build, d) in &observed.deployments {
        if *build != target
            && status_of(state, build) != VersionStatus::NotRegistered
            && !plan.kept.iter().any(|k| k.build_id == *build)
            && !desired_conn.holds(d)
            && d.spec_replicas != Some(0)
            && !plan.delete_deployments.contains(&d.name)
            && !plan.scale.iter().any(|(n, r)| *n == d.name && *r == 0)
        {
            plan.reconnect.push(build.clone());
        }
    }
}

/// The Temporal versions to delete whose Deployment is already gone.
fn delete_drained_versions(observed: &Observed, target: &str, plan: &mut Plan) {
    let state = &observed.temporal;
    let current = state.current_build_id.clone();
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

/// The step a ramp is at: the last whose ramp is at or below `ramp` (0 if none).
pub fn step_index(steps: &[twc_api::RolloutStep], ramp: f32) -> usize {
    steps
        .iter()
        .rposition(|s| s.ramp_percentage as f32 <= ramp)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
