//! Versions that never served (superseded while Inactive): when they may be retired.

use std::time::Duration;

use twc_api::VersionStatus;

use super::{DeploymentState, ObservedDeployment, status_of};

/// How soon a superseded version that could not be retired yet is looked at again.
pub(super) const RETIRE_AGAIN: Duration = Duration::from_secs(120);

/// Whether `build` is a version that never served and is done with (TWC's rule for Inactive
/// versions, #577): Inactive in Temporal, neither the target nor current nor ramping, and its
/// Deployment fully scaled down. Its running workflows are counted before it is retired.
pub fn retirable(
    build: &str,
    d: &ObservedDeployment,
    target: &str,
    state: &DeploymentState,
) -> bool {
    state.exists
        && status_of(state, build) == VersionStatus::Inactive
        && build != target
        && state.current_build_id.as_deref() != Some(build)
        && state.ramping_build_id.as_deref() != Some(build)
        && d.spec_replicas == Some(0)
        && d.replicas == 0
}
