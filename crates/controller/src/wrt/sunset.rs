//! Autoscalers off drained versions (TWC #544): the copy of a template that scales its version
//! (any `scaleTargetRef` under `spec`: an HPA, a KEDA ScaledObject) is deleted once the version
//! is scaled down at sunset, so it cannot scale the drained workers back up, and comes back when
//! the version is routed to again. Other copies (a PodDisruptionBudget) stay until the versioned
//! Deployment goes. Which templates scale their version is [`super::render::scales_target`].
//! Pure.

use std::collections::BTreeSet;
use std::time::SystemTime;

use twc_api::{VersionStatus, WorkerDeployment};

/// The versions of `wd` past their sunset scale-down, and when the next one will be.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sunset {
    /// Build IDs Drained for at least `scaledownDelay`, neither target nor current: the
    /// controller scales them to zero, as it does these.
    pub builds: BTreeSet<String>,
    /// When the next Drained version reaches its scale-down, if one will.
    pub next: Option<SystemTime>,
}

/// What `wd`'s status says of its drained versions at `now` (the same rule and the same
/// `drainedSince` the WorkerDeployment's planner scales them down by).
pub fn sunset(wd: &WorkerDeployment, now: SystemTime) -> Sunset {
    let mut out = Sunset::default();
    let Some(status) = &wd.status else {
        return out;
    };
    let delay = crate::plan::scaledown_delay(&wd.spec);
    let routed: BTreeSet<&str> = [
        status
            .target_version
            .as_ref()
            .map(|t| t.base.build_id.as_str()),
        status
            .current_version
            .as_ref()
            .map(|c| c.base.build_id.as_str()),
    ]
    .into_iter()
    .flatten()
    .collect();
    for v in &status.deprecated_versions {
        let build = v.base.build_id.as_str();
        if v.base.status != VersionStatus::Drained || routed.contains(build) {
            continue;
        }
        let Some(since) = v.drained_since.as_ref().map(|t| SystemTime::from(t.0)) else {
            continue;
        };
        let due = since + delay;
        if due <= now {
            out.builds.insert(build.to_string());
        } else {
            out.next = Some(out.next.map_or(due, |n| n.min(due)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::time::Duration;

    fn wd(delay: &str, deprecated: Value, target: &str) -> WorkerDeployment {
        serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": "w", "namespace": "n"},
            "spec": {
                "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "t"},
                "rollout": {"strategy": "AllAtOnce"},
                "sunset": {"scaledownDelay": delay},
                "template": {"spec": {"containers": []}}
            },
            "status": {
                "targetVersion": {"buildID": target, "status": "Current"},
                "currentVersion": {"buildID": target, "status": "Current"},
                "deprecatedVersions": deprecated,
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn drained_versions_past_the_scaledown_delay_and_only_those() {
        let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs);
        let deprecated = json!([
            {"buildID": "old", "status": "Drained", "drainedSince": "2027-01-15T08:00:00Z"},
            {"buildID": "newer", "status": "Drained", "drainedSince": "2027-01-15T08:10:00Z"},
            {"buildID": "draining", "status": "Draining"},
            {"buildID": "inactive", "status": "Inactive"},
            {"buildID": "unknown-since", "status": "Drained"},
        ]);
        // 2027-01-15T08:00:00Z is 1_800_000_000 s.
        let w = wd("5m", deprecated.clone(), "v9");
        let s = sunset(&w, at(6 * 60));
        assert_eq!(s.builds, BTreeSet::from(["old".to_string()]));
        assert_eq!(s.next, Some(at(15 * 60)));
        let s = sunset(&w, at(20 * 60));
        assert_eq!(s.builds.len(), 2);
        assert_eq!(s.next, None);
        // Routed to again (a rollback made it the target): its autoscaler comes back.
        let back = wd("5m", deprecated, "old");
        assert!(!sunset(&back, at(20 * 60)).builds.contains("old"));
    }
}
