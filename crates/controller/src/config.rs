//! Configuration values the reconcilers run with: how often Temporal is polled and the limits
//! the planner respects. Plain values, set from the command line in `main`.

use std::time::Duration;

/// How often Temporal is polled: fast while a rollout moves, slowly when steady.
#[derive(Clone, Copy, Debug)]
pub struct Intervals {
    /// While a rollout moves (waiting for pollers, after a routing change).
    pub moving: Duration,
    /// At rest, and the age at which a namespace's listing is refreshed.
    pub steady: Duration,
    /// While older versions drain: Temporal refreshes drainage every 3 minutes by default
    /// (`matching.wv.VersionDrainageStatusRefreshInterval`), so reading faster sees nothing new.
    pub drainage: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Self {
            moving: Duration::from_secs(2),
            steady: Duration::from_secs(60),
            drainage: DRAINAGE_POLL,
        }
    }
}

/// The default [`Intervals::drainage`]: Temporal's default drainage refresh interval.
pub const DRAINAGE_POLL: Duration = Duration::from_secs(180);

/// By default, a version that was current this recently is restored at once (no ramp, no
/// gate): [`Limits::rollback_window`].
pub const ROLLBACK_WINDOW: Duration = Duration::from_secs(3600);

/// Limits the planner respects.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// No new version is created while this many versions cannot be deleted: the server keeps
    /// at most `matching.maxVersionsInDeployment` (100) versions and only deletes drained ones
    /// without pollers, so a new version would never register. Default 75, as TWC.
    pub max_undeletable_versions: usize,
    /// Routing back to a version that was current within this window is a rollback: at once,
    /// without steps or gate. Default 1 h, as TWC.
    pub rollback_window: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_undeletable_versions: 75,
            rollback_window: ROLLBACK_WINDOW,
        }
    }
}

/// The manager identity TWC used before its identities had a per-installation suffix; worker
/// deployments left under it are reclaimed, as TWC reclaims them.
pub const DEPRECATED_DEFAULT_IDENTITY: &str = "temporal-worker-controller";

/// Who the controller is on Temporal, and whose routing it may take over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The identity of every Temporal write and the manager identity claimed.
    pub own: String,
    /// Manager identities whose worker deployments this controller takes over (claims, then
    /// routes), named explicitly by the operator (`--take-over-identity`); any other identity's
    /// routing is left alone.
    pub take_over: Vec<String>,
}

/// Whose routing a worker deployment is under, as seen by this controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Manager {
    /// No manager yet, or one this controller may claim: it claims before routing.
    Claimable,
    /// This controller.
    Own,
    /// Another manager: its routing is never changed.
    Foreign,
}

impl Identity {
    /// An identity that takes nothing over but the deprecated default.
    pub fn new(own: impl Into<String>) -> Self {
        Self {
            own: own.into(),
            take_over: Vec::new(),
        }
    }

    /// What a worker deployment's manager identity means for this controller.
    pub fn manager(&self, manager: &str) -> Manager {
        if manager == self.own {
            Manager::Own
        } else if manager.is_empty()
            || manager == DEPRECATED_DEFAULT_IDENTITY
            || self.take_over.iter().any(|t| t == manager)
        {
            Manager::Claimable
        } else {
            Manager::Foreign
        }
    }
}
