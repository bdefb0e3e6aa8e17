//! The pace after a plan: when to come back, and whether the state read may be reused.

use super::*;
use crate::config::Intervals;
use crate::plan::pace::{Pace, Reuse, pace};

fn intervals() -> Intervals {
    Intervals {
        moving: Duration::from_secs(2),
        steady: Duration::from_secs(60),
        drainage: Duration::from_secs(180),
    }
}

fn paced(wd: &WorkerDeployment, observed: &Observed) -> (Plan, Pace) {
    let p = plan(wd, &conn(), &me(), observed);
    let paced = pace(wd, observed, &p, &intervals());
    (p, paced)
}

#[test]
fn a_target_whose_workers_are_not_up_is_not_read_until_its_deployment_changes() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let mut o = world(&wd)
        .at(t(60))
        .deployment("old", Some(1))
        .version("old", VersionStatus::Current)
        .current("old")
        .deployment(&target, Some(1))
        .no_ready_pods(&target)
        .build();
    let (_, p) = paced(&wd, &o);
    // Only its progress deadline, 600 s after it became the target, is known ahead.
    assert_eq!(p.reuse, Reuse::Until(Some(t(660))));
    assert_eq!(p.requeue, Duration::from_secs(60));

    // It comes back when its pods are listed again: their troubles stand five minutes.
    o.pods_due = Some(t(360));
    assert_eq!(paced(&wd, &o).1.requeue, Duration::from_secs(300));
    // The deadline comes first.
    o.pods_due = Some(t(1000));
    assert_eq!(paced(&wd, &o).1.requeue, Duration::from_secs(600));
    // A list due sooner than the steady pace: the steady pace.
    o.pods_due = Some(t(70));
    assert_eq!(paced(&wd, &o).1.requeue, Duration::from_secs(60));
}

#[test]
fn a_target_whose_workers_just_came_up_is_read_again_within_a_quarter_second() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let mut o = world(&wd)
        .at(t(60))
        .deployment("old", Some(1))
        .version("old", VersionStatus::Current)
        .current("old")
        .deployment(&target, Some(1))
        .build();
    let up_for = |o: &mut Observed, secs: u64| {
        if let Some(d) = o.deployments.get_mut(&target) {
            d.available_since = Some(t(60 - secs));
        }
    };
    let waits: Vec<u64> = [0, 2, 3, 5, 6, 10, 11, 60]
        .into_iter()
        .map(|secs| {
            up_for(&mut o, secs);
            let (_, p) = paced(&wd, &o);
            assert_eq!(p.reuse, Reuse::Never, "up for {secs} s");
            p.requeue.as_millis() as u64
        })
        .collect();
    // Workers poll within a second of their start: looked for at once, then less often, at
    // most at the fast pace for those that take long.
    assert_eq!(waits, [250, 250, 500, 500, 1000, 1000, 2000, 2000]);
    // A Deployment that does not say since when: the fast pace.
    assert_eq!(
        crate::plan::pace::first_poll_wait(None, t(60), Duration::from_secs(2)),
        Duration::from_secs(2)
    );
    // Never slower than a fast pace set lower than the backoff's step.
    assert_eq!(
        crate::plan::pace::first_poll_wait(Some(t(55)), t(60), Duration::from_millis(100)),
        Duration::from_millis(100)
    );
}

#[test]
fn long_requeues_fall_due_together_on_the_next_whole_second() {
    use crate::plan::pace::coalesced;
    let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + ms);
    let steady = Duration::from_secs(60);
    // Two passes a few hundred milliseconds apart come back in the same instant.
    let (a, b) = (at(100), at(730));
    assert_eq!(a + coalesced(steady, a), at(61_000));
    assert_eq!(b + coalesced(steady, b), at(61_000));
    // Already on a whole second: as asked; never sooner, at most a second later.
    assert_eq!(coalesced(steady, at(0)), steady);
    for ms in [1, 250, 999] {
        let r = coalesced(Duration::from_millis(10_500), at(ms));
        assert!(r >= Duration::from_millis(10_500) && r < Duration::from_millis(11_500));
    }
    // Past what the clock can hold: as asked, no panic.
    assert_eq!(coalesced(Duration::MAX, a), Duration::MAX);
    // A short requeue keeps its instant: the fast poll, a first poll looked for.
    for short in [Duration::from_millis(250), Duration::from_secs(2)] {
        assert_eq!(coalesced(short, at(100)), short);
    }
}

#[test]
fn a_routing_write_is_followed_by_a_read() {
    let wd = wd("AllAtOnce", "w:v2");
    let (_, w) = registered_beside_current(&wd);
    let o = w.task_queues(vec![workflow_queue("q")]).build();
    let (plan, p) = paced(&wd, &o);
    assert!(plan.routing.is_some());
    assert!(plan.needs_fresh_state());
    assert_eq!(p.reuse, Reuse::Never);
}

#[test]
fn at_rest_the_state_is_reused_and_draining_versions_are_read_at_the_drainage_pace() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let rest = world(&wd)
        .at(t(60))
        .deployment(&target, Some(1))
        .version(&target, VersionStatus::Current)
        .current(&target);
    let (plan, p) = paced(&wd, &rest.clone().build());
    assert!(!plan.needs_fresh_state());
    assert_eq!(p.reuse, Reuse::Until(None));
    assert_eq!(p.requeue, Duration::from_secs(60));

    let draining = rest
        .deployment("old", Some(1))
        .version("old", VersionStatus::Draining)
        .build();
    let (_, p) = paced(&wd, &draining);
    assert_eq!(p.reuse, Reuse::Until(Some(t(60 + 180))));
    assert_eq!(p.requeue, Duration::from_secs(60));
}

#[test]
fn a_ramp_step_is_not_read_before_it_ends() {
    let wd = wd("Progressive", "w:v2");
    let target = target_of(&wd);
    // At 10 % since t(20): the 1 m pause ends at t(80).
    let o = world(&wd)
        .at(t(60))
        .deployment("old", Some(1))
        .version("old", VersionStatus::Current)
        .current("old")
        .deployment(&target, Some(1))
        .version(&target, VersionStatus::Ramping)
        .ramping(&target)
        .ramp(10.0, t(20))
        .task_queues(vec![workflow_queue("q")])
        .build();
    let (plan, p) = paced(&wd, &o);
    assert_eq!(plan.routing, None);
    assert_eq!(p.reuse, Reuse::Until(Some(t(80))));
    assert_eq!(p.requeue, Duration::from_secs(20));
}

#[test]
fn a_sunset_timer_is_known_in_advance_and_its_action_is_planned_on_a_fresh_read() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let rest = world(&wd)
        .deployment(&target, Some(1))
        .version(&target, VersionStatus::Current)
        .current(&target)
        .deployment("old", Some(1))
        .drained_since("old", t(0));
    // Scaled down 1 h after it drained.
    let (plan, p) = paced(&wd, &rest.clone().at(t(600)).build());
    assert!(plan.scale.is_empty());
    assert_eq!(p.reuse, Reuse::Until(Some(t(3600))));
    let (plan, _) = paced(&wd, &rest.at(t(3600)).build());
    assert_eq!(plan.scale, vec![(build_id::deployment_name("w", "old"), 0)]);
    assert!(
        plan.needs_fresh_state(),
        "never scaled down on a reused read"
    );
}
