//! When the target's pods are listed again. Their troubles (a crash loop, an image that does
//! not pull) say why a rollout waits, and a crash loop fails it early; but a WorkerDeployment
//! whose pods never come would list them at every reconcile, and thousands of them at the
//! steady pace are more lists than an apiserver serves beside everything else.
//!
//! So the troubles found are kept, and listed again:
//! - when the target or its Deployment changed (a pod became ready, one went, the spec
//!   moved): the Deployment's watch wakes the reconcile, and the list follows at once;
//! - else when they are [`PodsSeen::every`] old: [`FIRST`] after a list that found a change,
//!   twice as long after each list that found none, up to [`LONGEST`] (the kubelet's own
//!   longest crash back-off, so a crash loop still shows each restart).

use std::time::{Duration, SystemTime};

use super::{ObservedDeployment, PodTrouble};

/// How soon troubles that just changed are looked at again.
pub const FIRST: Duration = Duration::from_secs(30);

/// The longest troubles that do not change stand before the next list.
pub const LONGEST: Duration = Duration::from_secs(300);

/// What the last list of a target's pods found.
#[derive(Clone, Debug, PartialEq)]
pub struct PodsSeen {
    pub target_build: String,
    /// The target's Deployment as it was at that list.
    pub deployment: ObservedDeployment,
    pub listed_at: SystemTime,
    /// How long the troubles stand while the Deployment does not change.
    pub every: Duration,
    pub troubles: Vec<PodTrouble>,
}

impl PodsSeen {
    /// When they are listed again if the Deployment does not change first.
    pub fn due_at(&self) -> SystemTime {
        self.listed_at + self.every
    }
}

/// Whether the pods of `target`, whose Deployment is `deployment`, are listed at `now`
/// (else `seen`'s troubles stand).
pub fn due(
    seen: Option<&PodsSeen>,
    target: &str,
    deployment: &ObservedDeployment,
    now: SystemTime,
) -> bool {
    seen.is_none_or(|s| {
        s.target_build != target || &s.deployment != deployment || now >= s.due_at()
    })
}

/// What to keep after a list at `now` found `troubles`.
pub fn after_list(
    previous: Option<&PodsSeen>,
    target: &str,
    deployment: &ObservedDeployment,
    troubles: Vec<PodTrouble>,
    now: SystemTime,
) -> PodsSeen {
    let every = match previous {
        Some(p) if p.target_build == target && p.troubles == troubles => {
            (p.every * 2).clamp(FIRST, LONGEST)
        }
        _ => FIRST,
    };
    PodsSeen {
        target_build: target.to_string(),
        deployment: deployment.clone(),
        listed_at: now,
        every,
        troubles,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crash(restarts: i32) -> Vec<PodTrouble> {
        vec![PodTrouble {
            pod: "p".into(),
            container: "worker".into(),
            reason: "CrashLoopBackOff".into(),
            message: String::new(),
            restarts,
        }]
    }

    fn waiting(ready: i32) -> ObservedDeployment {
        ObservedDeployment {
            name: "d".into(),
            build_id: "b".into(),
            spec_replicas: Some(2),
            replicas: 2,
            ready_replicas: ready,
            ..Default::default()
        }
    }

    #[test]
    fn unchanged_troubles_are_listed_ever_less_often_up_to_five_minutes() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let d = waiting(0);
        assert!(due(None, "b", &d, t0));
        let mut seen = after_list(None, "b", &d, Vec::new(), t0);
        let mut gaps = Vec::new();
        for _ in 0..6 {
            gaps.push(seen.every.as_secs());
            let at = seen.listed_at + seen.every;
            assert!(!due(Some(&seen), "b", &d, at - Duration::from_secs(1)));
            assert!(due(Some(&seen), "b", &d, at));
            seen = after_list(Some(&seen), "b", &d, Vec::new(), at);
        }
        assert_eq!(gaps, [30, 60, 120, 240, 300, 300]);
    }

    #[test]
    fn a_change_in_the_troubles_brings_the_first_pace_back() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let d = waiting(0);
        let mut seen = after_list(None, "b", &d, crash(1), t0);
        seen = after_list(Some(&seen), "b", &d, crash(1), t0 + FIRST);
        assert_eq!(seen.every, 2 * FIRST);
        // A restart more: each one is seen within the first pace.
        seen = after_list(Some(&seen), "b", &d, crash(2), t0 + 3 * FIRST);
        assert_eq!(seen.every, FIRST);
        // Another target starts over.
        let other = after_list(Some(&seen), "c", &d, crash(2), t0 + 4 * FIRST);
        assert_eq!(other.every, FIRST);
    }

    #[test]
    fn a_changed_deployment_or_target_is_listed_at_once() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let seen = after_list(None, "b", &waiting(0), Vec::new(), t0);
        let soon = t0 + Duration::from_secs(1);
        assert!(!due(Some(&seen), "b", &waiting(0), soon));
        assert!(due(Some(&seen), "b", &waiting(1), soon));
        assert!(due(Some(&seen), "c", &waiting(0), soon));
    }
}
