//! The planner: pure functions from (spec, observed Kubernetes state, observed Temporal state,
//! now) to a plan. No client in sight; every rule is a table-driven test.

pub mod build_id;
pub mod deployment;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use twc_api::{ConnectionSpec, RolloutStrategyKind, VersionStatus, WorkerDeployment};

use crate::temporal::DeploymentState;

/// A version that was current this recently is restored at once (no ramp, no gate).
pub const ROLLBACK_WINDOW: Duration = Duration::from_secs(3600);

/// A versioned Deployment as observed in the watch cache.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedDeployment {
    pub name: String,
    pub build_id: String,
    /// `spec.replicas` (None when an autoscaler owns it and it was never set).
    pub spec_replicas: Option<i32>,
    /// `status.replicas`.
    pub replicas: i32,
    /// Since when `Available` is True; None when not available.
    pub available_since: Option<SystemTime>,
    pub connection_hash: Option<String>,
    pub template_digest: Option<String>,
}

/// Everything the planner looks at.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub now: Option<SystemTime>,
    /// Owned versioned Deployments by build ID.
    pub deployments: BTreeMap<String, ObservedDeployment>,
    pub temporal: DeploymentState,
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
    /// Deployments to server-side apply (a new target, or a drifted one).
    pub apply: Vec<Deployment>,
    /// (Deployment name, replicas).
    pub scale: Vec<(String, i32)>,
    pub delete_deployments: Vec<String>,
    /// Temporal versions to delete (their Deployments are gone).
    pub delete_versions: Vec<String>,
    /// Claim the manager identity before the routing change.
    pub claim_manager: bool,
    pub routing: Option<Routing>,
    /// Why routing is held back by someone else, if it is.
    pub blocked: Option<String>,
    /// Something is in motion: poll Temporal fast.
    pub moving: bool,
}

fn status_of(state: &DeploymentState, build_id: &str) -> VersionStatus {
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

/// Limits the planner respects.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// No new version is created while this many versions cannot be deleted: the server keeps
    /// at most `matching.maxVersionsInDeployment` (100) versions and only deletes drained ones
    /// without pollers, so a new version would never register. Default 75, as TWC.
    pub max_undeletable_versions: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_undeletable_versions: 75,
        }
    }
}

/// Plans one reconcile of `wd` through connection `conn`, as controller `identity`.
pub fn plan(
    wd: &WorkerDeployment,
    conn: &ConnectionSpec,
    identity: &str,
    observed: &Observed,
) -> Plan {
    plan_with(wd, conn, identity, observed, &Limits::default())
}

/// [`plan`] with explicit limits.
pub fn plan_with(
    wd: &WorkerDeployment,
    conn: &ConnectionSpec,
    identity: &str,
    observed: &Observed,
    limits: &Limits,
) -> Plan {
    let now = observed.now.unwrap_or_else(SystemTime::now);
    let spec = &wd.spec;
    let state = &observed.temporal;
    let target = build_id::build_id(
        &spec.template,
        spec.worker_options.unsafe_custom_build_id.as_deref(),
    );
    let mut plan = Plan {
        target_build_id: target.clone(),
        ..Default::default()
    };

    // The target's Deployment: create it, or re-apply it if its template or connection drifted.
    let desired = deployment::versioned_deployment(wd, &target, conn);
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
            if template_drift || conn_drift {
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
        if state.ramping_build_id.as_deref() == Some(build.as_str()) && !is_target && !is_current {
            // Routed to, whatever its summary says: never scaled down or deleted.
            continue;
        }
        if is_target || is_current {
            match spec.replicas {
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
                // Never polled, or deleted from Temporal: nothing can be pinned to it.
                plan.delete_deployments.push(d.name.clone());
            }
            VersionStatus::Draining => {
                // Never scale a draining version: its pinned workflows need the workers.
                plan.moving = true;
            }
            VersionStatus::Ramping | VersionStatus::Current => {
                if let Some(r) = spec.replicas
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
                    plan.moving |= delete_after.saturating_sub(age) < Duration::from_secs(120);
                } else {
                    plan.moving |= scaledown.saturating_sub(age) < Duration::from_secs(120);
                }
            }
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

    plan.routing = routing(wd, &target, identity, observed, now, &mut plan);
    plan.claim_manager = plan.routing.is_some() && state.manager_identity.is_empty();
    // Waiting for pollers of a target scaled to zero would wait forever: that is not motion.
    let target_scaled_to_zero =
        spec.replicas == Some(0) && status_of(state, &target) == VersionStatus::NotRegistered;
    plan.moving |= (current.as_deref() != Some(target.as_str()) && !target_scaled_to_zero)
        || plan.routing.is_some();
    plan
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

fn routing(
    wd: &WorkerDeployment,
    target: &str,
    identity: &str,
    observed: &Observed,
    now: SystemTime,
    plan: &mut Plan,
) -> Option<Routing> {
    let state = &observed.temporal;
    let rollout = &wd.spec.rollout;
    if rollout.strategy == RolloutStrategyKind::Manual {
        return None;
    }
    let target_status = status_of(state, target);
    if target_status == VersionStatus::NotRegistered {
        return None;
    }
    let healthy = observed
        .deployments
        .get(target)
        .is_some_and(|d| d.available_since.is_some());
    if !healthy {
        return None;
    }
    let change = if state.current_build_id.as_deref() == Some(target) {
        state
            .ramping_build_id
            .is_some()
            .then_some(Routing::ClearRamp)
    } else {
        let recently_current = state
            .versions
            .get(target)
            .and_then(|v| v.last_current_at)
            .is_some_and(|t| now.duration_since(t).unwrap_or_default() < ROLLBACK_WINDOW);
        if recently_current || state.current_build_id.is_none() {
            // Rollback to a recent version, or the first version: promote at once.
            Some(Routing::SetCurrent(target.to_string()))
        } else {
            match rollout.strategy {
                RolloutStrategyKind::AllAtOnce => Some(Routing::SetCurrent(target.to_string())),
                RolloutStrategyKind::Progressive => progressive(wd, target, state, now),
                RolloutStrategyKind::Manual => None,
            }
        }
    };
    let manager = &state.manager_identity;
    if change.is_some() && !manager.is_empty() && manager != identity {
        plan.blocked = Some(format!(
            "routing is managed by {manager:?}; the controller ({identity}) will not change it until that manager identity is removed"
        ));
        return None;
    }
    change
}

fn progressive(
    wd: &WorkerDeployment,
    target: &str,
    state: &DeploymentState,
    now: SystemTime,
) -> Option<Routing> {
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
    // The step we are at: the last whose ramp is at or below the current ramp.
    let index = steps
        .iter()
        .rposition(|s| s.ramp_percentage as f32 <= current_ramp)
        .unwrap_or(0);
    let step = &steps[index];
    if (step.ramp_percentage as f32 - current_ramp).abs() > f32::EPSILON {
        return Some(Routing::SetRamp(
            target.to_string(),
            step.ramp_percentage as f32,
        ));
    }
    let pause = twc_api::duration::parse(&step.pause_duration).unwrap_or(Duration::from_secs(30));
    let since = state.ramp_changed_at.unwrap_or(now);
    if now.duration_since(since).unwrap_or_default() < pause {
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

/// The observed view of an owned Deployment.
pub fn observe_deployment(d: &Deployment) -> Option<ObservedDeployment> {
    let build_id = d.labels().get(twc_api::labels::BUILD_ID)?.clone();
    let spec = d.spec.as_ref();
    let status = d.status.as_ref();
    let annotations = spec
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    let available_since = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "Available" && c.status == "True")
        })
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map(|t| SystemTime::from(t.0))
                .unwrap_or(SystemTime::UNIX_EPOCH)
        });
    Some(ObservedDeployment {
        name: d.name_any(),
        build_id,
        spec_replicas: spec.and_then(|s| s.replicas),
        replicas: status.and_then(|s| s.replicas).unwrap_or(0),
        available_since,
        connection_hash: annotations
            .get(twc_api::labels::CONNECTION_SPEC_HASH)
            .cloned(),
        template_digest: annotations
            .get(twc_api::labels::POD_TEMPLATE_SPEC_HASH)
            .cloned(),
    })
}

#[cfg(test)]
mod tests;
