//! Scaling and sunset, per version with a Deployment: the target and current at the spec's
//! replicas, older versions scaled down and deleted on the sunset delays as they drain.

use std::time::Duration;

use twc_api::{VersionStatus, WorkerDeployment};

use super::retire::{RETIRE_AGAIN, retirable};
use super::{Kept, Observed, ObservedDeployment, Plan, Unaccounted, deployment, status_of};

/// How long a Drained version keeps its workers before it is scaled to zero
/// (`spec.sunset.scaledownDelay`, one hour unless set).
pub fn scaledown_delay(spec: &twc_api::WorkerDeploymentSpec) -> Duration {
    parse_delay(&spec.sunset.scaledown_delay, Duration::from_secs(3600))
}

fn parse_delay(value: &Option<String>, default: Duration) -> Duration {
    value
        .as_deref()
        .and_then(|v| twc_api::duration::parse(v).ok())
        .unwrap_or(default)
}

/// Scaling and sunset, per version with a Deployment.
pub(super) fn scale_and_sunset(
    wd: &WorkerDeployment,
    observed: &Observed,
    target: &str,
    desired_conn: &deployment::PodConnection,
    plan: &mut Plan,
) {
    let now = observed.now;
    let spec = &wd.spec;
    // What each Deployment (each group's) should run when active: with an autoscaler,
    // `replicas` is its field, never scaled to the spec.
    let wanted = |m: &ObservedDeployment| {
        if observed.autoscaled.contains(&m.group) {
            None
        } else {
            spec.group_replicas(&m.group)
        }
    };
    // Sets Deployments of the version to `replicas` (each one not already there).
    let scale = |plan: &mut Plan,
                 d: &ObservedDeployment,
                 replicas: &dyn Fn(&ObservedDeployment) -> Option<i32>| {
        for m in d.each() {
            if let Some(r) = replicas(m)
                && m.spec_replicas != Some(r)
            {
                plan.scale.push((m.name.clone(), r));
            }
        }
    };
    let delete = |plan: &mut Plan, d: &ObservedDeployment| {
        plan.delete_deployments
            .extend(d.each().map(|m| m.name.clone()));
    };
    let state = &observed.temporal;
    let current = state.current_build_id.clone();
    let scaledown = scaledown_delay(spec);
    let delete_after =
        scaledown + parse_delay(&spec.sunset.delete_delay, Duration::from_secs(86400));

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
            scale(plan, d, &|m| match wanted(m) {
                Some(r) => Some(r),
                // Re-activated after a sunset scale-down.
                None if is_target && !is_current && m.spec_replicas == Some(0) => Some(1),
                None => None,
            });
            continue;
        }
        match status {
            VersionStatus::Inactive => {
                if d.spec_replicas != Some(0) {
                    scale(plan, d, &|_| Some(0));
                } else if retirable(build, d, target, state) {
                    if observed.target.idle_inactive.contains(build) {
                        plan.retire.push(build.clone());
                    } else {
                        // Counted again a little later (pollers linger after the pods stop,
                        // and the server refuses the deletion while they do).
                        plan.wake(now + RETIRE_AGAIN);
                    }
                }
            }
            VersionStatus::NotRegistered => {
                // Where they poll (the place, not how they authenticate).
                let here = d.connection_hash.as_deref() == Some(desired_conn.hash.as_str());
                if d.ready_replicas == 0 && here {
                    // No worker up, and they would poll where the controller looks: it never
                    // polled, or the server deleted it (Drained, no pollers) to make room.
                    // Nothing can be pinned to it.
                    delete(plan, d);
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
            // Never scale a draining version down: its pinned workflows need the workers. One
            // at 0 (scaled down Inactive or Drained, then reactivated by a workflow pinned to
            // it) gets them back, as TWC does since #587.
            VersionStatus::Draining => scale(plan, d, &|m| {
                (m.spec_replicas == Some(0)).then(|| wanted(m).unwrap_or(1))
            }),
            VersionStatus::Ramping | VersionStatus::Current => scale(plan, d, &wanted),
            VersionStatus::Drained => {
                let since = state
                    .versions
                    .get(build)
                    .and_then(|v| v.drainage_changed_at)
                    .unwrap_or(now);
                let age = now.duration_since(since).unwrap_or_default();
                if age >= delete_after {
                    delete(plan, d);
                    plan.delete_versions.push(build.clone());
                } else if age >= scaledown {
                    scale(plan, d, &|_| Some(0));
                    plan.wake(since + delete_after);
                } else {
                    plan.wake(since + scaledown);
                }
            }
        }
    }
}
