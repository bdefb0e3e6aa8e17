//! The guard: progress deadlines, crash loops, analysis, step gates and the rollout
//! controls; a failed build gets no new work and what reached it is rolled back.

use super::*;
use twc_api::conditions::{ABORTED, PROGRESS_DEADLINE_EXCEEDED, WORKERS_CRASH_LOOPING};
use twc_api::controls::{ABORT, PAUSED, PROMOTE, RETRY};

fn trouble(reason: &str, restarts: i32) -> PodTrouble {
    PodTrouble {
        pod: "w-1".into(),
        container: "worker".into(),
        reason: reason.into(),
        message: "back-off 10s restarting failed container".into(),
        restarts,
    }
}

/// v1 current; `target` ramping at the first step (10 %) since t(0).
fn ramping_at_first_step(wd: &WorkerDeployment, target: &str) -> World {
    world(wd)
        .deployment("v1", None)
        .version("v1", VersionStatus::Current)
        .current("v1")
        .deployment(target, None)
        .version(target, VersionStatus::Ramping)
        .ramping(target)
        .ramp(10.0, t(0))
}

/// v1 current; v2 the target since t(0), its Deployment there but no pod ready.
fn pending(strategy: &str) -> (WorkerDeployment, String, World) {
    let wd = wd(strategy, "w:v2");
    let target = target_of(&wd);
    let wd = targeted(wd, &target, t(0));
    let w = world(&wd)
        .deployment("v1", None)
        .version("v1", VersionStatus::Current)
        .current("v1")
        .deployment(&target, None)
        .no_ready_pods(&target)
        .unavailable(&target);
    (wd, target, w)
}

#[test]
fn a_target_that_does_not_come_up_fails_at_its_deadline_and_says_what_is_missing() {
    let (wd, target, w) = pending("AllAtOnce");
    let before = plan(&wd, &conn(), &me(), &w.clone().at(t(599)).build());
    assert_eq!(before.failure, None);
    assert_eq!(before.wake_at, Some(t(600)), "woken at the deadline");
    assert_eq!(before.target_since, Some(t(0)), "counted from the status");

    let o = w.clone().at(t(600)).build();
    let p = plan(&wd, &conn(), &me(), &o);
    let f = p
        .failure
        .unwrap_or_else(|| panic!("no failure at the deadline"));
    assert_eq!(f.reason, PROGRESS_DEADLINE_EXCEEDED);
    assert!(f.new && !f.rolled_back);
    assert!(
        f.message.contains("within 600s") && f.message.contains("0 of 1 pods are ready"),
        "{}",
        f.message
    );
    assert_eq!(p.routing, None);

    // With the pods' reasons, the message names them, and so does the wait before it.
    let mut o = w.clone().at(t(600)).build();
    o.target_pods = vec![trouble("ErrImagePull", 0)];
    let f = plan(&wd, &conn(), &me(), &o)
        .failure
        .unwrap_or_else(|| panic!("no failure"));
    assert!(
        f.message.contains("pod w-1 container worker: ErrImagePull"),
        "{}",
        f.message
    );
    o.now = t(10);
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(p.failure, None);
    assert!(p.waiting.unwrap_or_default().contains("ErrImagePull"));

    // Ready pods but nobody polls: that is what it says.
    let up = world(&wd)
        .at(t(600))
        .deployment("v1", None)
        .version("v1", VersionStatus::Current)
        .current("v1")
        .deployment(&target, None)
        .build();
    let f = plan(&wd, &conn(), &me(), &up)
        .failure
        .unwrap_or_else(|| panic!("no failure"));
    assert!(f.message.contains("no worker polled"), "{}", f.message);
}

#[test]
fn the_deadline_counts_from_a_new_target_and_can_be_turned_off() {
    let (wd, target, w) = pending("AllAtOnce");
    // Another build was the target before: counted from now.
    let other = targeted(wd.clone(), "v0", t(0));
    let p = plan(&other, &conn(), &me(), &w.clone().at(t(5000)).build());
    assert_eq!((p.failure, p.target_since), (None, Some(t(5000))));
    // No deadline.
    let mut off = wd.clone();
    off.spec.progress_deadline_seconds = Some(0);
    assert_eq!(
        plan(&off, &conn(), &me(), &w.clone().at(t(5000)).build()).failure,
        None
    );
    // Paused: it does not run, and starts again from the resume.
    let paused = annotated(wd.clone(), PAUSED, "true");
    let p = plan(&paused, &conn(), &me(), &w.clone().at(t(5000)).build());
    assert_eq!((p.failure, p.target_since), (None, Some(t(0))));
    let mut resumed = wd.clone();
    resumed.status.get_or_insert_with(Default::default).controls = Some(p.controls);
    let p = plan(&resumed, &conn(), &me(), &w.at(t(5000)).build());
    assert_eq!((p.failure, p.target_since), (None, Some(t(5000))));
    let _ = target;
}

#[test]
fn crash_looping_workers_fail_the_build_before_the_deadline() {
    let (wd, _, w) = pending("Progressive");
    let mut o = w.at(t(30)).build();
    o.target_pods = vec![trouble("CrashLoopBackOff", CRASH_LOOP - 1)];
    assert_eq!(plan(&wd, &conn(), &me(), &o).failure, None);
    o.target_pods = vec![trouble("CrashLoopBackOff", CRASH_LOOP)];
    let f = plan(&wd, &conn(), &me(), &o)
        .failure
        .unwrap_or_else(|| panic!("no failure"));
    assert_eq!(f.reason, WORKERS_CRASH_LOOPING);
    assert!(
        f.message.contains("CrashLoopBackOff (3 restarts)"),
        "{}",
        f.message
    );
    // The current version's workers are down too: Temporal or the network, not the build.
    if let Some(d) = o.deployments.get_mut("v1") {
        d.ready_replicas = 0;
    }
    assert_eq!(plan(&wd, &conn(), &me(), &o).failure, None);
}
const CRASH_LOOP: i32 = guard::CRASH_LOOP_RESTARTS;

#[test]
fn a_ramp_whose_workers_fail_is_rolled_back_at_once() {
    let wd = wd("Progressive", "w:v2");
    let target = target_of(&wd);
    let wd = targeted(wd, &target, t(0));
    let ramping = ramping_at_first_step(&wd, &target);
    // Crash-looping while ramping.
    let mut o = ramping.clone().at(t(20)).no_ready_pods(&target).build();
    o.target_pods = vec![trouble("CrashLoopBackOff", 5)];
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(p.routing, Some(Routing::ClearRamp));
    assert!(p.failure.as_ref().is_some_and(|f| f.rolled_back && f.new));
    // Unavailable past the deadline while ramping.
    let down = ramping.clone().edit_deployment(&target, |d| {
        d.available_since = None;
        d.unavailable_since = Some(t(100));
    });
    let p = plan(&wd, &conn(), &me(), &down.clone().at(t(699)).build());
    assert_eq!(
        (p.routing, p.wake_at.is_some_and(|w| w <= t(700))),
        (None, true)
    );
    let p = plan(&wd, &conn(), &me(), &down.at(t(700)).build());
    assert_eq!(p.routing, Some(Routing::ClearRamp));
    let f = p.failure.unwrap_or_else(|| panic!("no failure"));
    assert_eq!(f.reason, PROGRESS_DEADLINE_EXCEEDED);
    assert!(f.message.contains("while ramping at 10%"), "{}", f.message);
}

#[test]
fn a_failed_build_gets_no_work_until_a_retry() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let wd = failed(
        targeted(wd, &target, t(0)),
        &target,
        PROGRESS_DEADLINE_EXCEEDED,
    );
    let healthy = world(&wd)
        .at(t(900))
        .deployment("v1", None)
        .version("v1", VersionStatus::Current)
        .current("v1")
        .deployment(&target, None)
        .version(&target, VersionStatus::Inactive)
        .build();
    let p = plan(&wd, &conn(), &me(), &healthy);
    assert_eq!(p.routing, None, "a failed build is not promoted");
    assert!(p.failure.as_ref().is_some_and(|f| !f.new));
    let pace = pace::pace(&wd, &healthy, &p, &crate::config::Intervals::default());
    assert_ne!(
        pace.requeue,
        crate::config::Intervals::default().moving,
        "no fast poll"
    );

    let retried = annotated(wd.clone(), RETRY, "2026-12-01T18:00:00Z");
    let p = plan(&retried, &conn(), &me(), &healthy);
    assert_eq!(p.routing, Some(Routing::SetCurrent(target.clone())));
    assert_eq!(p.failure, None);
    assert_eq!(p.target_since, Some(t(900)), "the deadline starts again");
    assert_eq!(p.controls.retry.as_deref(), Some("2026-12-01T18:00:00Z"));
    // Acted on once: the same value again is not a new retry.
    let mut again = retried.clone();
    again.status.get_or_insert_with(Default::default).controls = Some(p.controls.clone());
    assert_eq!(guard::controls(&again).retry, None);
    assert!(plan(&again, &conn(), &me(), &healthy).failure.is_some());
}

#[test]
fn an_abort_takes_the_work_away_from_the_target() {
    // Ramping: the ramp is cleared.
    let wd = wd("Progressive", "w:v2");
    let target = target_of(&wd);
    let aborted = annotated(targeted(wd, &target, t(0)), ABORT, "now");
    let ramping = ramping_at_first_step(&aborted, &target).at(t(30)).build();
    let p = plan(&aborted, &conn(), &me(), &ramping);
    assert_eq!(p.routing, Some(Routing::ClearRamp));
    let f = p.failure.clone().unwrap_or_else(|| panic!("no failure"));
    assert_eq!((f.reason, f.rolled_back), (ABORTED, true));
    assert_eq!(p.controls.abort.as_deref(), Some("now"));

    // Current after an AllAtOnce promotion: the version current before it is restored.
    let mut all = aborted.clone();
    all.spec.rollout.strategy = RolloutStrategyKind::AllAtOnce;
    let promoted = world(&all)
        .at(t(30))
        .deployment("v1", None)
        .version("v1", VersionStatus::Draining)
        .last_current("v1", t(10))
        .deployment("v0", None)
        .version("v0", VersionStatus::Draining)
        .last_current("v0", t(5))
        .deployment(&target, None)
        .version(&target, VersionStatus::Current)
        .current(&target);
    let p = plan(&all, &conn(), &me(), &promoted.clone().build());
    assert_eq!(p.routing, Some(Routing::SetCurrent("v1".into())));
    // Nothing to go back to (v1's and v0's workers are gone): said, not invented.
    let gone = promoted.no_ready_pods("v1").no_ready_pods("v0").build();
    let p = plan(&all, &conn(), &me(), &gone);
    assert_eq!(p.routing, None);
    assert!(p.failure.is_some_and(|f| f.message.contains("stay on it")));
}

#[test]
fn pause_holds_routing_and_promote_skips_the_steps() {
    let wd = wd("Progressive", "w:v2");
    let target = target_of(&wd);
    let at_step_end = ramping_at_first_step(&wd, &target).at(t(61)).build();
    assert_eq!(
        plan(&wd, &conn(), &me(), &at_step_end).routing,
        Some(Routing::SetRamp(target.clone(), 50.0))
    );
    let paused = annotated(wd.clone(), PAUSED, "true");
    let p = plan(&paused, &conn(), &me(), &at_step_end);
    assert_eq!(p.routing, None);
    assert!(p.controls.paused);
    // Promote now, even while paused: the person's explicit word.
    let promote = annotated(paused, PROMOTE, &target);
    let p = plan(&promote, &conn(), &me(), &at_step_end);
    assert_eq!(p.routing, Some(Routing::SetCurrent(target.clone())));
    assert_eq!(
        p.controls.promoted_build_id.as_deref(),
        Some(target.as_str())
    );
    // A promote naming another build is ignored.
    let other = annotated(wd, PROMOTE, "v7");
    assert_eq!(
        plan(&other, &conn(), &me(), &at_step_end).routing,
        Some(Routing::SetRamp(target, 50.0))
    );
}
/// The promotion happened but its status was never written (the write failed after the
/// routing change): seeing the build current records the promotion, so after an abort and a
/// retry while paused the build is not promoted a second time.
#[test]
fn a_promotion_seen_current_is_recorded_even_if_its_status_was_lost() {
    let wd = wd("Progressive", "w:v2");
    let target = target_of(&wd);
    let asked = annotated(
        annotated(targeted(wd, &target, t(0)), PAUSED, "true"),
        PROMOTE,
        &target,
    );
    let promoted = world(&asked)
        .at(t(30))
        .deployment("v1", None)
        .version("v1", VersionStatus::Draining)
        .last_current("v1", t(10))
        .deployment(&target, None)
        .version(&target, VersionStatus::Current)
        .current(&target)
        .build();
    let p = plan(&asked, &conn(), &me(), &promoted);
    assert_eq!(p.routing, None);
    assert_eq!(
        p.controls.promoted_build_id.as_deref(),
        Some(target.as_str())
    );

    // Aborted (v1 current again, the mark recorded), then retried while still paused.
    let mut retried = failed(asked, &target, ABORTED);
    retried.status.get_or_insert_with(Default::default).controls = Some(p.controls.clone());
    let retried = annotated(retried, RETRY, "2026-12-03T17:00:00Z");
    let back = world(&retried)
        .at(t(60))
        .deployment("v1", None)
        .version("v1", VersionStatus::Current)
        .current("v1")
        .deployment(&target, None)
        .version(&target, VersionStatus::Draining)
        .last_current(&target, t(40))
        .build();
    let p = plan(&retried, &conn(), &me(), &back);
    assert_eq!(p.failure, None);
    assert_eq!(p.routing, None, "paused, and promoted once already");
}

#[test]
fn analysis_judges_each_step_by_the_workflows_closed_on_the_build() {
    let mut wd = wd("Progressive", "w:v2");
    wd.spec.rollout.analysis = Some(twc_api::AnalysisConfig {
        max_failure_percent: 20,
        min_samples: 10,
        after_promotion: None,
    });
    let target = target_of(&wd);
    let wd = targeted(wd, &target, t(0));
    let ramping = |now: SystemTime, closed: i64, failed: i64| {
        let mut o = ramping_at_first_step(&wd, &target).at(now).build();
        o.target.analysis = Some(Counted {
            since: Some(t(0)),
            closed,
            failed,
        });
        o
    };
    assert!(needs(&wd, &target, &ramping(t(1), 0, 0).temporal).analysis);
    // Mid-step, healthy: counted again in 30 s, no routing yet.
    let p = plan(&wd, &conn(), &me(), &ramping(t(20), 12, 1));
    assert_eq!(p.routing, None);
    assert_eq!(p.wake_at, Some(t(50)));
    assert_eq!(
        p.analysis.first().map(|a| a.verdict.as_str()),
        Some("Running")
    );
    // Too many failed, mid-step: rolled back at once.
    let p = plan(&wd, &conn(), &me(), &ramping(t(20), 12, 6));
    assert_eq!(p.routing, Some(Routing::ClearRamp));
    let f = p.failure.unwrap_or_else(|| panic!("no failure"));
    assert_eq!(f.reason, twc_api::conditions::ANALYSIS_FAILED);
    assert!(f.message.contains("6 of the 12 workflows"), "{}", f.message);
    // Too few to judge: the failures do not count, the step ends inconclusive and goes on.
    let p = plan(&wd, &conn(), &me(), &ramping(t(61), 4, 4));
    assert_eq!(p.routing, Some(Routing::SetRamp(target.clone(), 50.0)));
    assert_eq!(
        p.analysis.first().map(|a| a.verdict.as_str()),
        Some("Inconclusive")
    );
    // Enough and healthy at the step's end: passed.
    let p = plan(&wd, &conn(), &me(), &ramping(t(61), 40, 2));
    assert_eq!(p.routing, Some(Routing::SetRamp(target, 50.0)));
    assert_eq!(
        p.analysis.first().map(|a| a.verdict.as_str()),
        Some("Passed")
    );
}
#[test]
fn a_promoted_build_judged_bad_within_its_window_gives_the_work_back() {
    let mut wd = wd("AllAtOnce", "w:v2");
    wd.spec.rollout.analysis = Some(twc_api::AnalysisConfig {
        max_failure_percent: 20,
        min_samples: 10,
        after_promotion: Some("10m".into()),
    });
    let target = target_of(&wd);
    let wd = targeted(wd, &target, t(0));
    let promoted = |now: SystemTime, closed: i64, failed: i64| {
        let mut w = world(&wd)
            .at(now)
            .deployment("v1", None)
            .version("v1", VersionStatus::Draining)
            .last_current("v1", t(0))
            .deployment(&target, None)
            .version(&target, VersionStatus::Current)
            .current(&target);
        w.temporal().routing.current_changed_at = Some(t(0));
        let mut o = w.build();
        o.target.analysis = Some(Counted {
            since: Some(t(0)),
            closed,
            failed,
        });
        o
    };
    // Healthy in the window: counted again in 30 s.
    let p = plan(&wd, &conn(), &me(), &promoted(t(60), 20, 1));
    assert_eq!((p.routing.clone(), p.wake_at), (None, Some(t(90))));
    assert_eq!(
        p.analysis.first().map(|a| (a.step, a.ramp_percentage)),
        Some((0, 100))
    );
    // Bad in the window: v1 is current again.
    let p = plan(&wd, &conn(), &me(), &promoted(t(60), 20, 10));
    assert_eq!(p.routing, Some(Routing::SetCurrent("v1".into())));
    let f = p.failure.unwrap_or_else(|| panic!("no failure"));
    assert!(
        f.rolled_back && f.message.contains("after its promotion"),
        "{}",
        f.message
    );
    // The window over: its last count gives the verdict, then it is not judged again.
    let p = plan(&wd, &conn(), &me(), &promoted(t(600), 20, 1));
    assert_eq!(
        p.analysis.first().map(|a| a.verdict.as_str()),
        Some("Passed")
    );
    assert!(promoted_window(&wd, &target, &promoted(t(0), 0, 0).temporal, t(631)).is_none());
}
#[test]
fn a_step_gate_holds_its_step_until_it_completes_and_a_failed_one_rolls_back() {
    let mut wd = wd("Progressive", "w:v2");
    wd.spec.rollout.steps[0].gate = Some(twc_api::GateWorkflowConfig {
        workflow_type: "Check".into(),
        ..Default::default()
    });
    let target = target_of(&wd);
    let wd = targeted(wd, &target, t(0));
    let ramping = |now: SystemTime, run: Option<WorkflowExecutionStatus>| {
        let mut o = ramping_at_first_step(&wd, &target)
            .at(now)
            .task_queues(vec![workflow_queue("q"), activity_queue("a")])
            .build();
        o.target.step_gates = Some(StepGates {
            step: 0,
            runs: run
                .into_iter()
                .map(|status| WorkflowExecution {
                    workflow_id: step_gate_id(&wd, &target, "q", 0),
                    run_id: "r1".into(),
                    status,
                    task_queue: "q".into(),
                })
                .collect(),
        });
        o
    };
    assert_eq!(
        needs(&wd, &target, &ramping(t(1), None).temporal).step_gate,
        Some(0)
    );
    // The step began: its gate starts on the workflow queue only, pinned to the target.
    let p = plan(&wd, &conn(), &me(), &ramping(t(1), None));
    assert_eq!(
        p.start_gates,
        vec![GateStart {
            workflow_id: "test-ns/w:".to_string() + &target + "-q-step1",
            task_queue: "q".into(),
            step: Some(0),
        }]
    );
    assert_eq!(p.routing, None);
    // Running past the pause: the step waits for it, read at the fast pace.
    let o = ramping(t(61), Some(WorkflowExecutionStatus::Running));
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!((p.routing.clone(), p.start_gates.len()), (None, 0));
    assert!(
        p.step_gate
            .as_deref()
            .is_some_and(|g| g.contains("step 1 (10%) runs")),
        "{:?}",
        p.step_gate
    );
    assert_eq!(paced(&wd, &o, &p).requeue, Duration::from_secs(2));
    // Completed: the step ends at its pause, not before.
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &ramping(t(30), Some(WorkflowExecutionStatus::Completed)),
    );
    assert_eq!((p.routing, p.wake_at), (None, Some(t(60))));
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &ramping(t(61), Some(WorkflowExecutionStatus::Completed)),
    );
    assert_eq!(p.routing, Some(Routing::SetRamp(target.clone(), 50.0)));
    // Failed: new work is taken away at once, and the build is marked.
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &ramping(t(20), Some(WorkflowExecutionStatus::Failed)),
    );
    assert_eq!(p.routing, Some(Routing::ClearRamp));
    let f = p.failure.unwrap_or_else(|| panic!("no failure"));
    assert_eq!(f.reason, twc_api::conditions::STEP_GATE_FAILED);
    assert!(
        f.rolled_back
            && f.message
                .contains("of step 1 (10%) on task queue q ended Failed"),
        "{}",
        f.message
    );
    // After a retry the gate has a new workflow ID, so it runs again.
    let retried = annotated(wd.clone(), RETRY, "1");
    let again = step_gate_id(&retried, &target, "q", 0);
    assert!(
        again.starts_with(&step_gate_id(&wd, &target, "q", 0)) && again.contains("-retry-"),
        "{again}"
    );
}
