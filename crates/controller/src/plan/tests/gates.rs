//! The gate before traffic: its runs started per workflow task queue and its verdict.

use super::*;

fn with_gate(mut wd: WorkerDeployment) -> WorkerDeployment {
    wd.spec.rollout.gate = Some(
        serde_json::from_value(json!({"workflowType": "Check"})).unwrap_or_else(|e| panic!("{e}")),
    );
    wd
}

/// A registered, healthy gated target v2, no current version, polling workflow queues `a` and
/// `b` and activity queue `acts`.
fn gated_target(strategy: &str) -> (WorkerDeployment, String, World) {
    let wd = with_gate(wd(strategy, "w:v2"));
    let target = target_of(&wd);
    let world = world(&wd)
        .deployment(&target, None)
        .version(&target, VersionStatus::Inactive)
        .task_queues(vec![
            workflow_queue("a"),
            activity_queue("acts"),
            workflow_queue("b"),
        ]);
    (wd, target, world)
}

/// [`gated_target`] with v1 current.
fn gated(strategy: &str) -> (WorkerDeployment, String, World) {
    let (wd, target, world) = gated_target(strategy);
    let world = world.version("v1", VersionStatus::Current).current("v1");
    (wd, target, world)
}

#[test]
fn a_gate_starts_one_pinned_run_per_workflow_queue_and_holds_routing_until_all_complete() {
    use WorkflowExecutionStatus::{Completed, Running};
    let (wd, target, gated_v2) = gated("AllAtOnce");
    let p = plan(&wd, &conn(), &me(), &gated_v2.clone().build());
    let queues: Vec<&str> = p
        .start_gates
        .iter()
        .map(|g| g.task_queue.as_str())
        .collect();
    assert_eq!(queues, ["a", "b"], "workflow queues only");
    assert_eq!(
        p.start_gates[0].workflow_id,
        format!("test-ns/w:{target}-a"),
        "TWC's gate workflow ID"
    );
    assert_eq!(p.routing, None);
    // Gates to start write to Temporal: read again at the fast poll.
    assert_eq!(
        paced(&wd, &gated_v2.clone().build(), &p).reuse,
        Reuse::Never
    );

    let o = gated_v2
        .clone()
        .gate("a", Completed)
        .gate("b", Running)
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert!(p.start_gates.is_empty(), "never started twice");
    assert_eq!(p.routing, None, "one still runs");

    let o = gated_v2.gate("a", Completed).gate("b", Completed).build();
    assert_eq!(
        plan(&wd, &conn(), &me(), &o).routing,
        Some(Routing::SetCurrent(target.clone()))
    );

    // Manual starts the gate too but never promotes.
    let (manual, _, gated_v2) = gated("Manual");
    let o = gated_v2.clone().build();
    assert_eq!(plan(&manual, &conn(), &me(), &o).start_gates.len(), 2);
    let o = gated_v2.gate("a", Completed).gate("b", Completed).build();
    assert_eq!(plan(&manual, &conn(), &me(), &o).routing, None);
}

#[test]
fn a_failed_gate_blocks_the_build_for_good_and_says_why() {
    use WorkflowExecutionStatus::{Completed, Failed, TimedOut};
    for (strategy, failure) in [
        ("Progressive", Failed),
        ("AllAtOnce", TimedOut),
        ("Manual", Failed),
    ] {
        let (wd, target, gated_v2) = gated(strategy);
        let o = gated_v2.gate("a", Completed).gate("b", failure).build();
        let p = plan(&wd, &conn(), &me(), &o);
        assert_eq!(p.routing, None);
        assert!(p.start_gates.is_empty(), "a failed gate is not retried");
        let why = p.blocked.unwrap_or_default();
        assert!(
            why.contains("task queue b") && why.contains(&target),
            "{why}"
        );
    }
}

#[test]
fn no_gate_before_registration_or_for_the_current_version_or_a_rollback() {
    use VersionStatus::{Current, Drained};
    let (wd, target, gated_v2) = gated("AllAtOnce");
    // Not registered: nothing to pin a run to.
    let o = gated_v2.clone().unregistered(&target).build();
    assert!(!needs(&wd, &target, &o.temporal).gates);
    assert!(plan(&wd, &conn(), &me(), &o).start_gates.is_empty());
    // Already current: nothing to gate.
    let o = gated_v2
        .clone()
        .version(&target, Current)
        .current(&target)
        .build();
    assert!(plan(&wd, &conn(), &me(), &o).start_gates.is_empty());
    // A rollback skips the gate and promotes at once.
    let o = gated_v2
        .version(&target, Drained)
        .last_current(&target, t(0) - Duration::from_secs(60))
        .current("v3")
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert!(p.start_gates.is_empty());
    assert_eq!(p.routing, Some(Routing::SetCurrent(target)));
}

#[test]
fn a_gate_waits_until_the_version_reports_its_task_queues() {
    let (wd, _, gated_v2) = gated("AllAtOnce");
    let o = gated_v2.task_queues(Vec::new()).build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert!(p.start_gates.is_empty());
    assert_eq!(p.routing, None);
    assert_eq!(
        paced(&wd, &o, &p).reuse,
        Reuse::Never,
        "the gate waits at the fast poll"
    );
}

#[test]
fn a_first_version_drained_by_its_gate_run_is_still_checked_for_unversioned_pollers() {
    use WorkflowExecutionStatus::Completed;
    // No current version; the server reactivated the target for its pinned gate run, which
    // left it Drained once the run completed.
    let (wd, target, gated_v2) = gated_target("Progressive");
    let gate_passed = gated_v2
        .version(&target, VersionStatus::Drained)
        .gate("a", Completed)
        .gate("b", Completed);
    let o = gate_passed.clone().build();
    assert!(needs(&wd, &target, &o.temporal).unversioned_pollers);
    assert_eq!(plan(&wd, &conn(), &me(), &o).routing, None, "not known yet");
    let o = gate_passed.clone().unversioned_pollers(false).build();
    assert_eq!(
        plan(&wd, &conn(), &me(), &o).routing,
        Some(Routing::SetCurrent(target.clone()))
    );
    let o = gate_passed.unversioned_pollers(true).build();
    assert_eq!(
        plan(&wd, &conn(), &me(), &o).routing,
        Some(Routing::SetRamp(target.clone(), 10.0))
    );
}
