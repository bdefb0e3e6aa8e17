//! Deliberately broken behaviours, for the chaos run's self-test (`hack/chaos-self-test.sh`):
//! each one breaks one invariant the chaos checker watches, and the checker must catch it.
//! Chosen with the environment variable `TWC_CHAOS_BREAK`, and compiled in only with the
//! feature `chaos-break` (which `twc-chaos` turns on for the workspace's test builds; a release
//! build of the controller alone never has it). Without it, [`is`] is `false` and nothing
//! here acts.

use twc_api::VersionStatus;

use crate::plan::{Observed, Plan};

/// The variants: which invariant each one breaks.
pub const VARIANTS: &[(&str, &str)] = &[
    // I1: the current version's workers are stopped while it still gets new workflows.
    ("scale-current", "I1"),
    // I2: a Draining version's workers are stopped while pinned workflows wait for them.
    ("drain-early", "I2"),
    // I3: a deleted WorkerDeployment leaves its worker deployment in Temporal.
    ("skip-cleanup", "I3"),
    // I4: a new template is never promoted.
    ("never-promote", "I4"),
    // I2: workers are not restarted when their credential Secret changes (its digest is
    // recorded as if they had been); once the servers distrust the old CA they poll no more,
    // and the pinned workflows of a Draining version never complete. (I1 would see a current
    // version's silent workers only once their last heartbeat is 3 minutes old.)
    ("stale-credentials", "I2"),
    // I5: every restart onto a renewed Secret goes at once, whatever the pace.
    ("restart-all-at-once", "I5"),
];

/// Whether broken behaviour `variant` is on.
pub fn is(variant: &str) -> bool {
    cfg!(feature = "chaos-break") && std::env::var("TWC_CHAOS_BREAK").is_ok_and(|v| v == variant)
}

/// An error while broken behaviour `variant` is on (a step that then fails on purpose).
pub fn refuse(variant: &str) -> crate::error::Result<()> {
    if is(variant) {
        let what = format!("chaos-break: {variant}");
        return Err(crate::error::Error::InvalidSpec(what));
    }
    Ok(())
}

/// Breaks `plan` as the chosen variant asks.
pub fn break_plan(plan: &mut Plan, observed: &Observed) {
    let deployment_of = |build: &str| observed.deployments.get(build).map(|d| d.name.clone());
    // (Once a second version exists, so that the run's set-up converges first.)
    if is("scale-current")
        && observed.deployments.len() > 1
        && let Some(name) = observed
            .temporal
            .current_build_id
            .as_deref()
            .and_then(deployment_of)
    {
        plan.scale.push((name, 0));
    }
    if is("drain-early") {
        for (build, v) in &observed.temporal.versions {
            if v.status == VersionStatus::Draining
                && let Some(name) = deployment_of(build)
            {
                plan.scale.push((name, 0));
            }
        }
    }
    if is("stale-credentials") {
        for write in &mut plan.credentials {
            write.restart = false;
        }
    }
    // (Once a version is current, so that the run's set-up converges first.)
    if is("never-promote") && observed.temporal.current_build_id.is_some() {
        plan.routing = None;
    }
}
