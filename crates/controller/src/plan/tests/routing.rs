//! Routing: what a plan routes where (promotion, steps, rollback, foreign managers).

use super::*;

#[test]
fn a_new_template_creates_its_deployment_and_waits_for_pollers() {
    let wd = wd("AllAtOnce", "w:v1");
    let p = plan(&wd, &conn(), &me(), &world(&wd).build());
    assert_eq!(p.apply.len(), 1);
    assert_eq!(
        p.apply[0].metadata.name.as_deref(),
        Some(build_id::deployment_name("w", &p.target_build_id).as_str())
    );
    assert_eq!(p.routing, None, "no pollers yet: never route");
    // No Deployment yet: nothing to read until its workers are up.
    assert_eq!(
        paced(&wd, &world(&wd).build(), &p).reuse,
        Reuse::Until(None)
    );
}

#[test]
fn all_at_once_promotes_a_registered_healthy_target() {
    use VersionStatus::{Current, Inactive};
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let registered = world(&wd)
        .deployment(&target, None)
        .version("old", Current)
        .version(&target, Inactive)
        .current("old");
    let p = plan(&wd, &conn(), &me(), &registered.clone().build());
    assert!(p.apply.is_empty(), "up to date: no write");
    assert_eq!(p.routing, Some(Routing::SetCurrent(target.clone())));
    assert!(p.claim_manager, "the manager identity is free: claim it");

    // Not healthy yet: wait.
    let o = registered.unavailable(&target).build();
    assert_eq!(plan(&wd, &conn(), &me(), &o).routing, None);
}

#[test]
fn manual_never_routes() {
    let wd = wd("Manual", "w:v2");
    let target = target_of(&wd);
    let o = world(&wd)
        .deployment(&target, None)
        .version(&target, VersionStatus::Inactive)
        .build();
    assert_eq!(plan(&wd, &conn(), &me(), &o).routing, None);
}

#[test]
fn a_foreign_manager_blocks_routing_with_a_reason() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let o = world(&wd)
        .deployment(&target, None)
        .version(&target, VersionStatus::Inactive)
        .current("old")
        .manager("some-other-cli-user")
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(p.routing, None);
    assert!(
        p.blocked
            .unwrap_or_default()
            .contains("some-other-cli-user")
    );
    assert!(!p.claim_manager, "never steal the manager identity");
}

#[test]
fn routing_is_taken_over_only_from_identities_named_for_it() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let under = |manager: &str| {
        world(&wd)
            .deployment(&target, None)
            .version(&target, VersionStatus::Inactive)
            .current("old")
            .manager(manager)
            .build()
    };
    // TWC's deprecated default identity is reclaimed, as TWC reclaims it.
    let p = plan(&wd, &conn(), &me(), &under("temporal-worker-controller"));
    assert_eq!(p.routing, Some(Routing::SetCurrent(target.clone())));
    assert!(p.claim_manager);
    // Another TWC installation's identity only when the operator names it.
    let twc = "twc/temporal-system/2f0c";
    let p = plan(&wd, &conn(), &me(), &under(twc));
    assert_eq!((p.routing, p.claim_manager), (None, false));
    let taking_over = Identity {
        own: ME_ID.into(),
        take_over: vec![twc.into()],
    };
    let p = plan(&wd, &conn(), &taking_over, &under(twc));
    assert_eq!(p.routing, Some(Routing::SetCurrent(target.clone())));
    assert!(p.claim_manager, "claimed before the routing change");
    // Once claimed, it is ours: no claim again.
    let p = plan(&wd, &conn(), &taking_over, &under(ME_ID));
    assert!(!p.claim_manager);
}

#[test]
fn progressive_walks_the_steps_using_temporals_ramp_time() {
    let wd = wd("Progressive", "w:v2");
    let target = target_of(&wd);
    let pending = world(&wd)
        .at(t(1000))
        .deployment(&target, None)
        .version(&target, VersionStatus::Inactive)
        .current("old");
    let cases: Vec<(Option<f32>, u64, Option<Routing>)> = vec![
        // (current ramp of the target, seconds since it changed, expected)
        (None, 0, Some(Routing::SetRamp(target.clone(), 10.0))),
        (Some(10.0), 30, None),
        (Some(10.0), 61, Some(Routing::SetRamp(target.clone(), 50.0))),
        (Some(50.0), 200, None),
        (Some(50.0), 301, Some(Routing::SetCurrent(target.clone()))),
        // Someone changed the ramp by hand to a value between steps: back to the step.
        (Some(30.0), 1, Some(Routing::SetRamp(target.clone(), 10.0))),
    ];
    for (ramp, ago, expected) in cases {
        let o = match ramp {
            Some(r) => pending.clone().ramping(&target).ramp(r, t(1000 - ago)),
            None => pending.clone(),
        }
        .build();
        assert_eq!(
            plan(&wd, &conn(), &me(), &o).routing,
            expected,
            "ramp {ramp:?}, {ago}s ago"
        );
    }
}

#[test]
fn the_first_version_and_a_recent_rollback_are_promoted_at_once() {
    use VersionStatus::{Drained, Inactive};
    let wd = wd("Progressive", "w:v1");
    let target = target_of(&wd);
    let first = world(&wd)
        .at(t(10_000))
        .deployment(&target, None)
        .version(&target, Inactive);
    let o = first.clone().build();
    assert!(needs(&wd, &target, &o.temporal).unversioned_pollers);
    // Whether unversioned workers still poll is not known yet: wait for it.
    assert_eq!(plan(&wd, &conn(), &me(), &o).routing, None);
    // No unversioned workers would take the rest of the traffic: current at once.
    let o = first.clone().unversioned_pollers(false).build();
    assert_eq!(
        plan(&wd, &conn(), &me(), &o).routing,
        Some(Routing::SetCurrent(target.clone()))
    );
    // Every task queue still has unversioned pollers: ramp by the steps from unversioned.
    let alongside_unversioned = first.unversioned_pollers(true);
    let o = alongside_unversioned.clone().build();
    assert_eq!(
        plan(&wd, &conn(), &me(), &o).routing,
        Some(Routing::SetRamp(target.clone(), 10.0))
    );
    // AllAtOnce never checks.
    let all_at_once = self::wd("AllAtOnce", "w:v1");
    assert!(!needs(&all_at_once, &target, &o.temporal).unversioned_pollers);
    // A rollback to a version that was current 10 minutes ago skips the steps.
    let current_ago = |secs: u64| {
        alongside_unversioned
            .clone()
            .current("newer")
            .version(&target, Drained)
            .last_current(&target, t(10_000 - secs))
            .build()
    };
    let o = current_ago(600);
    assert_eq!(
        plan(&wd, &conn(), &me(), &o).routing,
        Some(Routing::SetCurrent(target.clone()))
    );
    // The window is configurable: with 5 minutes, 10 minutes ago is no rollback.
    let short = Limits {
        rollback_window: Duration::from_secs(300),
        ..Default::default()
    };
    assert_eq!(
        plan_with(&wd, &conn(), &me(), &o, &short).routing,
        Some(Routing::SetRamp(target.clone(), 10.0))
    );
    // Two hours ago is no rollback: ramp.
    assert_eq!(
        plan(&wd, &conn(), &me(), &current_ago(7200)).routing,
        Some(Routing::SetRamp(target, 10.0))
    );
}

#[test]
fn a_rollback_to_a_version_scaled_to_zero_waits_for_its_workers() {
    use VersionStatus::{Current, Drained};
    let mut wd = wd("AllAtOnce", "w:v1");
    wd.spec.replicas = Some(2);
    let target = target_of(&wd);
    // Sunset scaled v1 to 0; its Deployment still reports Available (0 of 0).
    let scaled_down = world(&wd)
        .at(t(10_000))
        .deployment(&target, Some(0))
        .version(&target, Drained)
        .last_current(&target, t(9_400))
        .version("newer", Current)
        .current("newer");
    let p = plan(&wd, &conn(), &me(), &scaled_down.clone().build());
    assert_eq!(
        p.scale,
        vec![(build_id::deployment_name("w", &target), 2)],
        "scaled up"
    );
    assert_eq!(p.routing, None, "no new work before its workers are ready");
    // Scaled up: its pods becoming ready brings the next read (or its progress deadline).
    let now = scaled_down.clone().build().now;
    assert_eq!(
        paced(&wd, &scaled_down.clone().build(), &p).reuse,
        Reuse::Until(Some(now + Duration::from_secs(600)))
    );
    // Its workers are ready again: the rollback goes through at once.
    let back = scaled_down.deployment(&target, Some(2)).build();
    assert_eq!(
        plan(&wd, &conn(), &me(), &back).routing,
        Some(Routing::SetCurrent(target.clone()))
    );
    // Available with no ready pod (all restarting) is no better.
    let restarting = world(&wd)
        .deployment(&target, Some(2))
        .no_ready_pods(&target)
        .version(&target, VersionStatus::Inactive)
        .version("newer", Current)
        .current("newer")
        .build();
    assert_eq!(plan(&wd, &conn(), &me(), &restarting).routing, None);
}

#[test]
fn a_first_version_ramping_from_unversioned_workers_walks_the_steps() {
    let wd = wd("Progressive", "w:v1");
    let target = target_of(&wd);
    let ramping = world(&wd)
        .at(t(1000))
        .deployment(&target, None)
        .version(&target, VersionStatus::Ramping)
        .ramping(&target);
    // The check was made before the first step; it is not read again.
    let o = ramping.clone().build();
    assert!(!needs(&wd, &target, &o.temporal).unversioned_pollers);
    let cases: Vec<(f32, u64, Option<Routing>)> = vec![
        // (ramp, seconds since it changed, expected)
        (10.0, 30, None),
        (10.0, 61, Some(Routing::SetRamp(target.clone(), 50.0))),
        (50.0, 301, Some(Routing::SetCurrent(target.clone()))),
    ];
    for (ramp, ago, expected) in cases {
        let o = ramping.clone().ramp(ramp, t(1000 - ago)).build();
        assert_eq!(
            plan(&wd, &conn(), &me(), &o).routing,
            expected,
            "ramp {ramp}, {ago}s ago"
        );
    }
}

#[test]
fn an_allatonce_target_without_a_gate_is_promoted_without_reading_its_task_queues() {
    let registered = |wd: &WorkerDeployment| {
        let (target, w) = registered_beside_current(wd);
        (target, w.build())
    };
    let wd = wd("AllAtOnce", "w:v2");
    let (target, o) = registered(&wd);
    let needs = needs(&wd, &target, &o.temporal);
    assert!(!needs.task_queues, "not read before the plan");
    assert!(needs.task_queues_after, "read after it, for the status");
    // No queue known: promoted all the same.
    assert!(o.target.task_queues.is_empty());
    assert_eq!(
        plan(&wd, &conn(), &me(), &o).routing,
        Some(Routing::SetCurrent(target.clone()))
    );
    // A gate runs on the queues, a ramp shows them while it lasts: read first.
    let mut gated = wd.clone();
    gated.spec.rollout.gate = Some(twc_api::GateWorkflowConfig {
        workflow_type: "Check".into(),
        ..Default::default()
    });
    let gated_needs = super::needs(&gated, &target, &o.temporal);
    assert!(gated_needs.task_queues && !gated_needs.task_queues_after);
    let progressive = super::wd("Progressive", "w:v2");
    let (target, o) = registered(&progressive);
    assert!(super::needs(&progressive, &target, &o.temporal).task_queues);
    // Once current, neither: the pollers' check reads them if the status has none.
    let mut current = o.temporal.clone();
    current.current_build_id = Some(target.clone());
    let after = super::needs(&wd, &target, &current);
    assert!(!after.task_queues && !after.task_queues_after);
}
