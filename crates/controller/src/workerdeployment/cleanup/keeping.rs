//! What a deletion keeps: the versions whose workers stay, place by place (Temporal namespace),
//! by why, and how that is said.

use twc_api::conditions::{ROUTED_BY_ANOTHER_MANAGER, WAITING_FOR_DRAINAGE};
use twc_api::{SKIP_DRAINAGE_ANNOTATION, VersionStatus};

use crate::temporal::{DeploymentState, Status, WorkerDeploymentRef};

/// What a deletion keeps, place by place, and the versions it cannot account for.
#[derive(Debug, Default)]
pub struct Keeping {
    /// (Temporal namespace, what it needs there).
    pub places: Vec<(String, Kept)>,
    /// (build ID, why) of versions whose needs cannot be read.
    pub unknown: Vec<(String, String)>,
}

impl Keeping {
    pub fn is_empty(&self) -> bool {
        self.unknown.is_empty() && self.places.iter().all(|(_, k)| k.is_empty())
    }

    /// Whether the workers of `build`, polling in Temporal namespace `place`, stay.
    pub fn contains(&self, place: &str, build: &str) -> bool {
        self.unknown.iter().any(|(b, _)| b == build)
            || self
                .places
                .iter()
                .any(|(p, k)| p == place && k.contains(build))
    }

    /// `(reason, message)` for the Ready condition and the event: each place's, the spec's
    /// own namespace first, others named.
    pub fn explain(&self, deployment_name: &str, spec_ns: &str) -> (&'static str, String) {
        let mut reason = WAITING_FOR_DRAINAGE;
        let mut parts = Vec::new();
        let mut places: Vec<&(String, Kept)> =
            self.places.iter().filter(|(_, k)| !k.is_empty()).collect();
        places.sort_by_key(|(p, _)| p != spec_ns);
        for (place, kept) in places {
            let (why, message) = kept.explain(deployment_name);
            if why == ROUTED_BY_ANOTHER_MANAGER {
                reason = why;
            }
            parts.push(if place == spec_ns {
                message
            } else {
                format!("in Temporal namespace {place} (where they were registered): {message}")
            });
        }
        if !self.unknown.is_empty() {
            let named: Vec<String> = self
                .unknown
                .iter()
                .map(|(b, why)| format!("{b} ({why})"))
                .collect();
            parts.push(format!(
                "deletion keeps the workers of versions it cannot account for: {}; delete their Deployments once Temporal reports them drained where they poll, or annotate the WorkerDeployment {SKIP_DRAINAGE_ANNOTATION}=true to delete them now",
                named.join(", ")
            ));
        }
        (reason, parts.join("; "))
    }
}

/// The versions a deletion keeps the workers of, by why.
#[derive(Debug, Default)]
pub struct Kept {
    /// Routing is another manager's (it routes to `routed`).
    pub manager: Option<String>,
    /// Versions new work is routed to, with "current" or "ramping".
    routed: Vec<(String, &'static str)>,
    /// Versions with open pinned workflows.
    draining: Vec<String>,
}

impl Kept {
    /// What `state` still needs: Draining versions, and (`routed`) the versions new work goes
    /// to.
    pub fn of(state: &DeploymentState, routed: bool) -> Self {
        let mut kept = Kept::default();
        if routed {
            kept.routed
                .extend(state.current_build_id.clone().map(|b| (b, "current")));
            kept.routed
                .extend(state.ramping_build_id.clone().map(|b| (b, "ramping")));
        }
        kept.draining = state
            .versions
            .iter()
            .filter(|(b, v)| {
                v.status == VersionStatus::Draining && !kept.routed.iter().any(|(r, _)| r == *b)
            })
            .map(|(b, _)| b.clone())
            .collect();
        kept
    }

    /// Drops the Draining versions that say themselves they are drained: the worker
    /// deployment's summary can lag a version's own drainage status.
    pub async fn confirm_draining(
        &mut self,
        target: &WorkerDeploymentRef<'_>,
    ) -> Result<(), Status> {
        let mut still = Vec::new();
        for build in std::mem::take(&mut self.draining) {
            if !target.drained(&build).await? {
                still.push(build);
            }
        }
        self.draining = still;
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.routed.is_empty() && self.draining.is_empty()
    }

    /// Keeps only the versions `has` says have workers to keep.
    pub fn retain(&mut self, has: impl Fn(&str) -> bool) {
        self.routed.retain(|(b, _)| has(b));
        self.draining.retain(|b| has(b));
    }

    pub fn contains(&self, build: &str) -> bool {
        self.routed.iter().any(|(b, _)| b == build) || self.draining.iter().any(|b| b == build)
    }

    /// `(reason, message)` for the Ready condition and the event.
    pub fn explain(&self, deployment_name: &str) -> (&'static str, String) {
        let escape = format!(
            "or annotate the WorkerDeployment {SKIP_DRAINAGE_ANNOTATION}=true to delete them now (their workflows lose their workers)"
        );
        let draining = (!self.draining.is_empty())
            .then(|| format!("{} still run pinned workflows", self.draining.join(", ")));
        match &self.manager {
            Some(manager) if !self.routed.is_empty() => {
                let routed: Vec<String> = self
                    .routed
                    .iter()
                    .map(|(b, how)| format!("{b} ({how})"))
                    .collect();
                (
                    ROUTED_BY_ANOTHER_MANAGER,
                    format!(
                        "deletion waits: {manager:?} manages the routing of {deployment_name} and still sends new work to {}{}; route it elsewhere (or unset the manager) and the deletion goes on, {escape}",
                        routed.join(", "),
                        draining.map(|d| format!("; {d}")).unwrap_or_default()
                    ),
                )
            }
            _ => (
                WAITING_FOR_DRAINAGE,
                format!(
                    "deletion waits until no pinned workflow runs on the versions that keep their workers: {}; it goes on once Temporal reports them drained, {escape}",
                    draining.unwrap_or_default()
                ),
            ),
        }
    }
}
