//! Configuration values the reconcilers run with: how often Temporal is polled and the limits
//! the planner respects. Plain values, set from the command line in `main`.

use std::time::Duration;

/// How often Temporal is polled: fast while a rollout moves, slowly when steady.
#[derive(Clone, Copy, Debug)]
pub struct Intervals {
    pub moving: Duration,
    pub steady: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Self {
            moving: Duration::from_secs(2),
            steady: Duration::from_secs(60),
        }
    }
}

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
