//! The timeline of the last rollout (`status.lastRollout`): when each phase was reached, from
//! what each pass observed, so that a person sees where a rollout's seconds went (the
//! worker's start, its first poll, the controller, the drainage).

use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use twc_api::{RolloutTimeline, VersionStatus};

use crate::plan::{self, Observed};

fn micro(t: SystemTime) -> Option<MicroTime> {
    Timestamp::try_from(t).ok().map(MicroTime)
}

/// The timeline of `target` after a pass at `now` that left `after` (the state with its own
/// writes applied): `previous` with the phases reached since. A new target starts a new one.
pub fn record(
    previous: Option<&RolloutTimeline>,
    target: &str,
    after: &Observed,
    now: SystemTime,
) -> RolloutTimeline {
    let state = &after.temporal;
    let mut t = match previous {
        Some(p) if p.build_id == target => p.clone(),
        _ => RolloutTimeline {
            build_id: target.to_string(),
            previous_build_id: state.current_build_id.clone().filter(|c| c != target),
            spec_seen: micro(now),
            ..Default::default()
        },
    };
    let version = state.versions.get(target);
    let set = |phase: &mut Option<MicroTime>, reached: bool, at: Option<SystemTime>| {
        if phase.is_none() && reached {
            *phase = at.and_then(micro);
        }
    };
    set(
        &mut t.deployment_written,
        after.deployments.contains_key(target),
        Some(now),
    );
    set(
        &mut t.pods_ready,
        plan::workers_up(&after.deployments, target),
        Some(now),
    );
    let registered = version.is_some_and(|v| v.status != VersionStatus::NotRegistered);
    set(
        &mut t.first_poller,
        registered,
        version.and_then(|v| v.created_at),
    );
    set(&mut t.registered, registered, Some(now));
    // A change time from before the rollout began is another version's.
    let seen = t.spec_seen.as_ref().map(|s| SystemTime::from(s.0));
    let since_seen = |at: Option<SystemTime>| at.filter(|a| seen.is_none_or(|s| *a >= s));
    let ramping = state.ramping_build_id.as_deref() == Some(target);
    set(
        &mut t.ramping,
        ramping,
        since_seen(state.ramping_since).or(Some(now)),
    );
    let current = state.current_build_id.as_deref() == Some(target);
    set(
        &mut t.promoted,
        current,
        since_seen(state.routing.current_changed_at).or(Some(now)),
    );
    if let Some(prev) = t.previous_build_id.as_deref() {
        let drained = state
            .versions
            .get(prev)
            .filter(|v| v.status == VersionStatus::Drained);
        set(
            &mut t.previous_drained,
            drained.is_some(),
            drained.and_then(|v| v.drainage_changed_at),
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::{ObservedDeployment, VersionInfo};
    use std::time::Duration;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_millis(ms)
    }

    fn ms(t: &Option<MicroTime>) -> Option<u64> {
        let t = SystemTime::from(t.as_ref()?.0);
        Some(t.duration_since(at(0)).ok()?.as_millis() as u64)
    }

    #[test]
    fn each_phase_is_stamped_once_when_first_reached() {
        let mut o = Observed::at(at(0));
        o.temporal.exists = true;
        o.temporal.current_build_id = Some("v1".into());
        o.temporal.versions.insert(
            "v1".into(),
            VersionInfo {
                status: VersionStatus::Current,
                ..Default::default()
            },
        );
        // The changed template seen, its Deployment written in the same pass.
        o.deployments.insert(
            "v2".into(),
            ObservedDeployment {
                build_id: "v2".into(),
                ..Default::default()
            },
        );
        let t = record(None, "v2", &o, at(0));
        assert_eq!(t.previous_build_id.as_deref(), Some("v1"));
        assert_eq!(
            (ms(&t.spec_seen), ms(&t.deployment_written)),
            (Some(0), Some(0))
        );
        assert_eq!(ms(&t.pods_ready), None);

        // Its pods ready.
        if let Some(d) = o.deployments.get_mut("v2") {
            (d.available_since, d.ready_replicas, d.available_replicas) = (Some(at(400)), 1, 1);
        }
        let t = record(Some(&t), "v2", &o, at(450));
        assert_eq!(ms(&t.pods_ready), Some(450));
        assert_eq!(ms(&t.registered), None);

        // Registered (its first poll at 500 by Temporal's clock), then promoted by this pass.
        o.temporal.versions.insert(
            "v2".into(),
            VersionInfo {
                status: VersionStatus::Current,
                created_at: Some(at(500)),
                ..Default::default()
            },
        );
        o.temporal.current_build_id = Some("v2".into());
        if let Some(v) = o.temporal.versions.get_mut("v1") {
            v.status = VersionStatus::Draining;
        }
        let t = record(Some(&t), "v2", &o, at(700));
        assert_eq!(
            (ms(&t.first_poller), ms(&t.registered), ms(&t.promoted)),
            (Some(500), Some(700), Some(700))
        );
        // A later pass keeps the times; the previous version's drainage is Temporal's time.
        if let Some(v) = o.temporal.versions.get_mut("v1") {
            (v.status, v.drainage_changed_at) = (VersionStatus::Drained, Some(at(60_000)));
        }
        let later = record(Some(&t), "v2", &o, at(90_000));
        assert_eq!(ms(&later.promoted), Some(700));
        assert_eq!(ms(&later.previous_drained), Some(60_000));
        assert_eq!(ms(&later.ramping), None);

        // A new target starts over.
        let next = record(Some(&later), "v3", &o, at(100_000));
        assert_eq!(next.previous_build_id.as_deref(), Some("v2"));
        assert_eq!(ms(&next.promoted), None);
    }
}
