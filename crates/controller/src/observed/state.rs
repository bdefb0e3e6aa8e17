//! A worker deployment's state in Temporal, as plain values (the RPCs that fill them are in
//! [`crate::temporal`]).

use std::collections::BTreeMap;
use std::time::SystemTime;

use twc_api::VersionStatus;

/// One version as Temporal reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VersionInfo {
    pub status: VersionStatus,
    /// When the drainage status last changed (the "drained since" time once Drained).
    pub drainage_changed_at: Option<SystemTime>,
    /// The last time this version was current (rollback detection).
    pub last_current_at: Option<SystemTime>,
    /// When the version was created: its first worker's first poll.
    pub created_at: Option<SystemTime>,
}

/// A worker deployment's state in Temporal. `exists == false` means no worker ever polled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeploymentState {
    pub exists: bool,
    pub conflict_token: Vec<u8>,
    pub current_build_id: Option<String>,
    pub ramping_build_id: Option<String>,
    pub ramp_percentage: f32,
    pub ramping_since: Option<SystemTime>,
    /// When the ramp percentage last changed: Progressive pauses count from here, so they
    /// survive controller restarts.
    pub ramp_changed_at: Option<SystemTime>,
    pub manager_identity: String,
    pub last_modifier_identity: String,
    pub versions: BTreeMap<String, VersionInfo>,
    /// When the routing last changed, as the routing config says it (with the ramp times
    /// above, what [`Listed`] is compared on).
    pub routing: RoutingMark,
}

/// What marks a routing config: its revision (0 on servers that do not count) and when its
/// current version last changed. Two reads with the same mark saw the same routing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoutingMark {
    pub revision: i64,
    pub current_changed_at: Option<SystemTime>,
}

/// One worker deployment as `ListWorkerDeployments` summarises it: enough to tell whether a
/// state read earlier is still what Temporal holds, not enough to plan with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listed {
    pub current_build_id: Option<String>,
    pub ramping_build_id: Option<String>,
    pub ramp_percentage: f32,
    pub ramping_since: Option<SystemTime>,
    pub ramp_changed_at: Option<SystemTime>,
    pub routing: RoutingMark,
    /// The version added most recently (a new version registers as the latest).
    pub latest_build_id: Option<String>,
}

impl Listed {
    /// Whether `state`, read before this summary was listed, still holds: the same routing,
    /// and no version registered that it does not know. What the summary cannot show (the
    /// drainage of older versions, the manager identity) is paced separately.
    pub fn agrees_with(&self, state: &DeploymentState) -> bool {
        state.exists
            && self.current_build_id == state.current_build_id
            && self.ramping_build_id == state.ramping_build_id
            && self.ramp_percentage.to_bits() == state.ramp_percentage.to_bits()
            && self.ramping_since == state.ramping_since
            && self.ramp_changed_at == state.ramp_changed_at
            && self.routing == state.routing
            && self
                .latest_build_id
                .as_ref()
                .is_none_or(|b| state.versions.contains_key(b))
    }

    /// Whether it routes as `state` says, a state this controller's own routing write left
    /// (whose revision and change times only a read would tell): the same current and
    /// ramping versions at the same percentage, and no version registered that it does not
    /// know.
    pub fn routes_as(&self, state: &DeploymentState) -> bool {
        state.exists
            && self.current_build_id == state.current_build_id
            && self.ramping_build_id == state.ramping_build_id
            && self.ramp_percentage.to_bits() == state.ramp_percentage.to_bits()
            && self
                .latest_build_id
                .as_ref()
                .is_none_or(|b| state.versions.contains_key(b))
    }
}
