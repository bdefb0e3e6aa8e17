//! The state last read of each WorkerDeployment, and when it may stand in for a new read.

use std::time::SystemTime;

use super::budget::Priority;
use super::listing::Listing;
use crate::observed::{Reuse, TargetObserved};
use crate::temporal::DeploymentState;
use crate::temporal::pool::PoolKey;

/// The state last read for one WorkerDeployment, and what it was read under.
#[derive(Clone, Debug)]
pub struct Remembered {
    pub pool_key: PoolKey,
    pub generation: Option<i64>,
    pub target_build: String,
    /// Whether the target's workers were up (a change means pollers may come or go).
    pub target_up: bool,
    pub state: DeploymentState,
    pub target: TargetObserved,
    pub read_at: SystemTime,
    pub reuse: Reuse,
    /// Not read: the state a routing write of this controller left (its answer does not
    /// carry the routing's revision and times). A listing confirms it by its routing alone.
    pub written: bool,
}

/// What a reconcile holds when it asks whether it may skip the read.
pub struct Asking<'a> {
    pub pool_key: &'a PoolKey,
    pub target_build: &'a str,
    pub target_up: bool,
    pub now: SystemTime,
}

/// Whether `r` may stand in for a new read: read under the same connection, within what its
/// pace allows, with the namespace's listing (if newer than the read) agreeing, and with the
/// target's workers as they were. A new target (a changed template) may use it only while
/// nothing about it can be in Temporal: its workers are not up and the state does not know it
/// (then its Deployment is created without a read; its pods' readiness brings the read).
/// Without a listing, never.
pub fn may_reuse(
    r: &Remembered,
    asking: &Asking<'_>,
    listing: Option<&Listing>,
    deployment: &str,
) -> bool {
    let Reuse::Until(until) = r.reuse else {
        return false;
    };
    let target_as_read = if r.target_build == asking.target_build {
        r.target_up == asking.target_up
    } else {
        !asking.target_up && !r.state.versions.contains_key(asking.target_build)
    };
    if r.pool_key != *asking.pool_key || !target_as_read || until.is_some_and(|t| asking.now >= t) {
        return false;
    }
    let Some(listing) = listing else {
        return false;
    };
    if listing.at <= r.read_at {
        return true;
    }
    match listing.deployments.get(deployment) {
        Some(l) if r.written => l.routes_as(&r.state),
        Some(l) => l.agrees_with(&r.state),
        None => !r.state.exists,
    }
}

/// The priority of the read that replaces `r` for `wd`: moving unless it was read at rest.
/// With nothing remembered (after a restart, or a leadership gain), `wd`'s status says: at
/// rest if its target is current for the spec as it is, so the first pass over thousands at
/// rest does not hold back the rollouts in motion and the specs just changed.
pub fn priority(r: Option<&Remembered>, wd: &twc_api::WorkerDeployment) -> Priority {
    let generation = wd.metadata.generation;
    match r {
        Some(r)
            if r.generation == generation
                && matches!(r.reuse, Reuse::Until(_))
                && r.state.current_build_id.as_deref() == Some(r.target_build.as_str()) =>
        {
            Priority::Steady
        }
        None if wd.status.as_ref().is_some_and(|s| {
            s.observed_generation.is_some()
                && s.observed_generation == generation
                && s.target_version
                    .as_ref()
                    .is_some_and(|t| t.base.status == twc_api::VersionStatus::Current)
        }) =>
        {
            Priority::Steady
        }
        _ => Priority::Moving,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reads::fixtures::{at, key, listing};
    use crate::temporal::{Listed, RoutingMark};

    fn state() -> DeploymentState {
        let mut s = DeploymentState {
            exists: true,
            current_build_id: Some("b1".into()),
            routing: RoutingMark {
                revision: 3,
                current_changed_at: Some(at(0)),
            },
            ..Default::default()
        };
        s.versions.insert("b1".into(), Default::default());
        s
    }

    fn listed(s: &DeploymentState) -> Listed {
        Listed {
            current_build_id: s.current_build_id.clone(),
            ramping_build_id: s.ramping_build_id.clone(),
            ramp_percentage: s.ramp_percentage,
            ramping_since: s.ramping_since,
            ramp_changed_at: s.ramp_changed_at,
            routing: s.routing.clone(),
            latest_build_id: Some("b1".into()),
        }
    }

    fn remembered(reuse: Reuse) -> Remembered {
        Remembered {
            pool_key: key("h:7233"),
            generation: Some(2),
            target_build: "b1".into(),
            target_up: true,
            state: state(),
            target: Default::default(),
            read_at: at(10),
            reuse,
            written: false,
        }
    }

    #[test]
    fn a_state_is_reused_only_while_nothing_says_it_changed() {
        let r = remembered(Reuse::Until(None));
        let pk = key("h:7233");
        let ask = |target_build: &'static str, target_up: bool, now: u64| Asking {
            pool_key: &pk,
            target_build,
            target_up,
            now: at(now),
        };
        let same = listing(20, vec![("ns/wd", listed(&r.state))]);
        let ok = ask("b1", true, 30);
        assert!(may_reuse(&r, &ok, Some(&same), "ns/wd"));
        // No listing (the server cannot list, or the list failed): read.
        assert!(!may_reuse(&r, &ok, None, "ns/wd"));
        // The target's workers coming or going: read.
        assert!(!may_reuse(&r, &ask("b1", false, 30), Some(&same), "ns/wd"));
        // A new template: its Deployment is made without a read while its workers are not up
        // and Temporal knew nothing of it; a template Temporal knows (a rollback) is read.
        assert!(may_reuse(&r, &ask("b2", false, 30), Some(&same), "ns/wd"));
        assert!(!may_reuse(&r, &ask("b2", true, 30), Some(&same), "ns/wd"));
        let mut known = remembered(Reuse::Until(None));
        known.target_build = "b2".into();
        assert!(!may_reuse(
            &known,
            &ask("b1", false, 30),
            Some(&same),
            "ns/wd"
        ));
        // Another connection: read.
        let other = key("other:7233");
        let mut a = ask("b1", true, 30);
        a.pool_key = &other;
        assert!(!may_reuse(&r, &a, Some(&same), "ns/wd"));
        // The listing shows another routing, or a version it does not know: read.
        let mut moved = listed(&r.state);
        moved.current_build_id = Some("b2".into());
        moved.routing.revision = 4;
        assert!(!may_reuse(
            &r,
            &ok,
            Some(&listing(20, vec![("ns/wd", moved)])),
            "ns/wd"
        ));
        let mut registered = listed(&r.state);
        registered.latest_build_id = Some("b9".into());
        assert!(!may_reuse(
            &r,
            &ok,
            Some(&listing(20, vec![("ns/wd", registered)])),
            "ns/wd"
        ));
        // Gone from the listing (deleted in Temporal): read.
        assert!(!may_reuse(&r, &ok, Some(&listing(20, vec![])), "ns/wd"));
        // A listing older than the read says nothing against it.
        assert!(may_reuse(&r, &ok, Some(&listing(5, vec![])), "ns/wd"));
        // Past its time (a drainage check, a ramp step's end): read.
        let timed = remembered(Reuse::Until(Some(at(40))));
        assert!(may_reuse(&timed, &ok, Some(&same), "ns/wd"));
        assert!(!may_reuse(
            &timed,
            &ask("b1", true, 40),
            Some(&same),
            "ns/wd"
        ));
        // Read after a write or while pollers are awaited: never reused.
        assert!(!may_reuse(
            &remembered(Reuse::Never),
            &ok,
            Some(&same),
            "ns/wd"
        ));
    }

    #[test]
    fn a_state_a_routing_write_left_is_confirmed_by_the_listings_routing() {
        // The write's answer has no revision nor times: the remembered state keeps the old.
        let mut r = remembered(Reuse::Until(None));
        r.written = true;
        let pk = key("h:7233");
        let ok = Asking {
            pool_key: &pk,
            target_build: "b1",
            target_up: true,
            now: at(30),
        };
        let mut shown = listed(&r.state);
        shown.routing = RoutingMark {
            revision: 4,
            current_changed_at: Some(at(9)),
        };
        let confirming = listing(20, vec![("ns/wd", shown.clone())]);
        assert!(may_reuse(&r, &ok, Some(&confirming), "ns/wd"));
        // A state read is not: its revision must match.
        r.written = false;
        assert!(!may_reuse(&r, &ok, Some(&confirming), "ns/wd"));
        r.written = true;
        // Another routing since (someone else's write), or a version it does not know: read.
        let mut other = shown.clone();
        other.current_build_id = Some("b2".into());
        assert!(!may_reuse(
            &r,
            &ok,
            Some(&listing(20, vec![("ns/wd", other)])),
            "ns/wd"
        ));
        let mut ramped = shown.clone();
        ramped.ramping_build_id = Some("b2".into());
        ramped.ramp_percentage = 10.0;
        assert!(!may_reuse(
            &r,
            &ok,
            Some(&listing(20, vec![("ns/wd", ramped)])),
            "ns/wd"
        ));
        shown.latest_build_id = Some("b9".into());
        assert!(!may_reuse(
            &r,
            &ok,
            Some(&listing(20, vec![("ns/wd", shown)])),
            "ns/wd"
        ));
    }

    #[test]
    fn a_deployment_not_in_temporal_stays_unread_while_it_is_not_listed() {
        let mut r = remembered(Reuse::Until(None));
        r.state = DeploymentState::default();
        let pk = key("h:7233");
        let ok = Asking {
            pool_key: &pk,
            target_build: "b1",
            target_up: false,
            now: at(30),
        };
        r.target_up = false;
        assert!(may_reuse(&r, &ok, Some(&listing(20, vec![])), "ns/wd"));
        let appeared = listed(&state());
        assert!(!may_reuse(
            &r,
            &ok,
            Some(&listing(20, vec![("ns/wd", appeared)])),
            "ns/wd"
        ));
    }

    #[test]
    fn reads_of_rollouts_in_motion_go_first() {
        let wd = |generation: i64| {
            let mut wd = twc_api::WorkerDeployment::new("wd", Default::default());
            wd.metadata.generation = Some(generation);
            wd
        };
        assert_eq!(priority(None, &wd(1)), Priority::Moving);
        let at_rest = remembered(Reuse::Until(None));
        assert_eq!(priority(Some(&at_rest), &wd(2)), Priority::Steady);
        assert_eq!(
            priority(Some(&at_rest), &wd(3)),
            Priority::Moving,
            "a new spec"
        );
        assert_eq!(
            priority(Some(&remembered(Reuse::Never)), &wd(2)),
            Priority::Moving
        );
        let mut rolling = remembered(Reuse::Until(Some(at(40))));
        rolling.target_build = "b2".into();
        assert_eq!(
            priority(Some(&rolling), &wd(2)),
            Priority::Moving,
            "a ramp step"
        );
    }

    #[test]
    fn after_a_restart_the_status_says_whether_a_read_is_at_rest() {
        use twc_api::{TargetWorkerDeploymentVersion, VersionStatus, WorkerDeploymentStatus};
        let wd = |generation: i64, observed: i64, target: VersionStatus| {
            let mut wd = twc_api::WorkerDeployment::new("wd", Default::default());
            wd.metadata.generation = Some(generation);
            let mut t = TargetWorkerDeploymentVersion::default();
            t.base.status = target;
            wd.status = Some(WorkerDeploymentStatus {
                observed_generation: Some(observed),
                target_version: Some(t),
                ..Default::default()
            });
            wd
        };
        assert_eq!(
            priority(None, &wd(4, 4, VersionStatus::Current)),
            Priority::Steady
        );
        assert_eq!(
            priority(None, &wd(5, 4, VersionStatus::Current)),
            Priority::Moving,
            "a spec changed while the controller was away"
        );
        assert_eq!(
            priority(None, &wd(4, 4, VersionStatus::Ramping)),
            Priority::Moving,
            "a ramp"
        );
    }
}
