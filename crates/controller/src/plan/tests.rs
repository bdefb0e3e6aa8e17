//! Table-driven tests of the planner, with `now` injected.

use std::time::{Duration, SystemTime};

use serde_json::json;
use twc_api::{ConnectionSpec, VersionStatus, WorkerDeployment};

use super::*;
use crate::temporal::{DeploymentState, VersionInfo};

const ME: &str = "twc/me";

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

fn wd(strategy: &str, image: &str) -> WorkerDeployment {
    let mut rollout = json!({"strategy": strategy});
    if strategy == "Progressive" {
        rollout["steps"] = json!([
            {"rampPercentage": 10, "pauseDuration": "1m"},
            {"rampPercentage": 50, "pauseDuration": "5m"}
        ]);
    }
    let mut wd: WorkerDeployment = serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": "w", "namespace": "ns", "uid": "uid-1"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "worker", "image": image}]}},
            "rollout": rollout,
            "sunset": {"scaledownDelay": "1h", "deleteDelay": "24h"},
            "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "default"}
        }
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    wd.metadata.uid = Some("uid-1".into());
    wd
}

fn conn() -> ConnectionSpec {
    ConnectionSpec {
        host_port: "127.0.0.1:7233".into(),
        ..Default::default()
    }
}

fn target_of(wd: &WorkerDeployment) -> String {
    build_id::build_id(&wd.spec.template, None)
}

/// A healthy, up-to-date Deployment for `build`.
fn deployment(wd: &WorkerDeployment, build: &str, replicas: Option<i32>) -> ObservedDeployment {
    ObservedDeployment {
        name: build_id::deployment_name("w", build),
        build_id: build.into(),
        spec_replicas: replicas,
        replicas: replicas.unwrap_or(1),
        available_since: Some(t(0)),
        connection_hash: Some(deployment::connection_hash(&conn())),
        template_digest: Some(build_id::template_digest(&wd.spec.template)),
    }
}

fn version(status: VersionStatus) -> VersionInfo {
    VersionInfo {
        status,
        ..Default::default()
    }
}

fn observed(now: SystemTime) -> Observed {
    Observed::at(now)
}

#[test]
fn a_new_template_creates_its_deployment_and_waits_for_pollers() {
    let wd = wd("AllAtOnce", "w:v1");
    let p = plan(&wd, &conn(), ME, &observed(t(0)));
    assert_eq!(p.apply.len(), 1);
    assert_eq!(
        p.apply[0].metadata.name.as_deref(),
        Some(build_id::deployment_name("w", &p.target_build_id).as_str())
    );
    assert_eq!(p.routing, None, "no pollers yet: never route");
    assert!(p.moving);
}

#[test]
fn all_at_once_promotes_a_registered_healthy_target() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let mut o = observed(t(0));
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, None));
    o.temporal = DeploymentState {
        exists: true,
        current_build_id: Some("old".into()),
        ..Default::default()
    };
    o.temporal
        .versions
        .insert("old".into(), version(VersionStatus::Current));
    o.temporal
        .versions
        .insert(target.clone(), version(VersionStatus::Inactive));
    let p = plan(&wd, &conn(), ME, &o);
    assert!(p.apply.is_empty(), "up to date: no write");
    assert_eq!(p.routing, Some(Routing::SetCurrent(target.clone())));
    assert!(p.claim_manager, "the manager identity is free: claim it");

    // Not healthy yet: wait.
    if let Some(d) = o.deployments.get_mut(&target) {
        d.available_since = None;
    }
    assert_eq!(plan(&wd, &conn(), ME, &o).routing, None);
}

#[test]
fn manual_never_routes() {
    let wd = wd("Manual", "w:v2");
    let target = target_of(&wd);
    let mut o = observed(t(0));
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, None));
    o.temporal.exists = true;
    o.temporal
        .versions
        .insert(target, version(VersionStatus::Inactive));
    assert_eq!(plan(&wd, &conn(), ME, &o).routing, None);
}

#[test]
fn a_foreign_manager_blocks_routing_with_a_reason() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let mut o = observed(t(0));
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, None));
    o.temporal.exists = true;
    o.temporal.current_build_id = Some("old".into());
    o.temporal.manager_identity = "some-other-cli-user".into();
    o.temporal
        .versions
        .insert(target, version(VersionStatus::Inactive));
    let p = plan(&wd, &conn(), ME, &o);
    assert_eq!(p.routing, None);
    assert!(
        p.blocked
            .unwrap_or_default()
            .contains("some-other-cli-user")
    );
    assert!(!p.claim_manager, "never steal the manager identity");
}

#[test]
fn progressive_walks_the_steps_using_temporals_ramp_time() {
    let wd = wd("Progressive", "w:v2");
    let target = target_of(&wd);
    let mut o = observed(t(1000));
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, None));
    o.temporal.exists = true;
    o.temporal.current_build_id = Some("old".into());
    o.temporal
        .versions
        .insert(target.clone(), version(VersionStatus::Inactive));
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
        match ramp {
            Some(r) => {
                o.temporal.ramping_build_id = Some(target.clone());
                o.temporal.ramp_percentage = r;
                o.temporal.ramp_changed_at = Some(t(1000 - ago));
            }
            None => {
                o.temporal.ramping_build_id = None;
                o.temporal.ramp_percentage = 0.0;
            }
        }
        assert_eq!(
            plan(&wd, &conn(), ME, &o).routing,
            expected,
            "ramp {ramp:?}, {ago}s ago"
        );
    }
}

#[test]
fn the_first_version_and_a_recent_rollback_are_promoted_at_once() {
    let wd = wd("Progressive", "w:v1");
    let target = target_of(&wd);
    let mut o = observed(t(10_000));
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, None));
    o.temporal.exists = true;
    o.temporal
        .versions
        .insert(target.clone(), version(VersionStatus::Inactive));
    assert!(needs(&wd, &target, &o.temporal).unversioned_pollers);
    // Whether unversioned workers still poll is not known yet: wait for it.
    assert_eq!(plan(&wd, &conn(), ME, &o).routing, None);
    // No unversioned workers would take the rest of the traffic: current at once.
    o.target.unversioned_pollers = Some(false);
    assert_eq!(
        plan(&wd, &conn(), ME, &o).routing,
        Some(Routing::SetCurrent(target.clone()))
    );
    // Every task queue still has unversioned pollers: ramp by the steps from unversioned.
    o.target.unversioned_pollers = Some(true);
    assert_eq!(
        plan(&wd, &conn(), ME, &o).routing,
        Some(Routing::SetRamp(target.clone(), 10.0))
    );
    // AllAtOnce never checks.
    let all_at_once = self::wd("AllAtOnce", "w:v1");
    assert!(!needs(&all_at_once, &target, &o.temporal).unversioned_pollers);
    // A rollback to a version that was current 10 minutes ago skips the steps.
    o.temporal.current_build_id = Some("newer".into());
    o.temporal.versions.insert(
        target.clone(),
        VersionInfo {
            status: VersionStatus::Drained,
            last_current_at: Some(t(10_000 - 600)),
            ..Default::default()
        },
    );
    assert_eq!(
        plan(&wd, &conn(), ME, &o).routing,
        Some(Routing::SetCurrent(target.clone()))
    );
    // The window is configurable: with 5 minutes, 10 minutes ago is no rollback.
    let short = Limits {
        rollback_window: Duration::from_secs(300),
        ..Default::default()
    };
    assert_eq!(
        plan_with(&wd, &conn(), ME, &o, &short).routing,
        Some(Routing::SetRamp(target.clone(), 10.0))
    );
    // Two hours ago is no rollback: ramp.
    if let Some(v) = o.temporal.versions.get_mut(&target) {
        v.last_current_at = Some(t(10_000 - 7200));
    }
    assert_eq!(
        plan(&wd, &conn(), ME, &o).routing,
        Some(Routing::SetRamp(target, 10.0))
    );
}

#[test]
fn sunset_scales_drained_versions_down_then_deletes_them_and_never_touches_draining_ones() {
    let wd = wd("AllAtOnce", "w:v3");
    let target = target_of(&wd);
    let mut o = observed(t(100_000));
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, None));
    o.temporal.exists = true;
    o.temporal.current_build_id = Some(target.clone());
    o.temporal
        .versions
        .insert(target.clone(), version(VersionStatus::Current));
    let drained = |ago: u64| VersionInfo {
        status: VersionStatus::Drained,
        drainage_changed_at: Some(t(100_000 - ago)),
        ..Default::default()
    };
    for (build, info, replicas) in [
        ("draining", version(VersionStatus::Draining), Some(2)),
        ("drained-recent", drained(600), Some(2)),
        ("drained-old", drained(2 * 3600), Some(2)),
        ("drained-ancient", drained(26 * 3600), Some(0)),
        ("inactive", version(VersionStatus::Inactive), Some(2)),
    ] {
        o.temporal.versions.insert(build.into(), info);
        o.deployments
            .insert(build.into(), deployment(&wd, build, replicas));
    }
    o.deployments.insert(
        "gone-from-temporal".into(),
        deployment(&wd, "gone-from-temporal", Some(1)),
    );
    let p = plan(&wd, &conn(), ME, &o);
    let name = |b: &str| build_id::deployment_name("w", b);
    let mut scaled = p.scale.clone();
    scaled.sort();
    assert_eq!(
        scaled,
        vec![(name("drained-old"), 0), (name("inactive"), 0)]
    );
    let mut deleted = p.delete_deployments.clone();
    deleted.sort();
    assert_eq!(
        deleted,
        vec![name("drained-ancient"), name("gone-from-temporal")]
    );
    assert_eq!(p.delete_versions, vec!["drained-ancient".to_string()]);
    assert!(!p.scale.iter().any(|(n, _)| *n == name("draining")));
}

#[test]
fn replicas_follow_the_spec_for_active_versions_only() {
    let mut wd = wd("AllAtOnce", "w:v1");
    wd.spec.replicas = Some(3);
    let target = target_of(&wd);
    let mut o = observed(t(0));
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, Some(1)));
    o.temporal.exists = true;
    o.temporal.current_build_id = Some(target.clone());
    o.temporal
        .versions
        .insert(target.clone(), version(VersionStatus::Current));
    let p = plan(&wd, &conn(), ME, &o);
    assert_eq!(p.scale, vec![(build_id::deployment_name("w", &target), 3)]);
    // A WorkerResourceTemplate scaling the versions (an HPA) owns them, whatever the spec.
    o.autoscaled = true;
    assert!(plan(&wd, &conn(), ME, &o).scale.is_empty());
    o.deployments.clear();
    let p = plan(&wd, &conn(), ME, &o);
    assert_eq!(p.apply.len(), 1);
    assert_eq!(
        p.apply[0].spec.as_ref().and_then(|s| s.replicas),
        None,
        "not applied"
    );
    // Without spec.replicas an autoscaler owns them: no scaling.
    o.autoscaled = false;
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, Some(1)));
    wd.spec.replicas = None;
    assert!(plan(&wd, &conn(), ME, &o).scale.is_empty());
}

#[test]
fn a_connection_change_re_applies_the_target() {
    let wd = wd("AllAtOnce", "w:v1");
    let target = target_of(&wd);
    let mut o = observed(t(0));
    let mut d = deployment(&wd, &target, None);
    d.connection_hash = Some("stale".into());
    o.deployments.insert(target.clone(), d);
    assert_eq!(plan(&wd, &conn(), ME, &o).apply.len(), 1);

    // Older versions that still run follow the connection too; scaled-down ones do not.
    let stale = |build: &str, replicas| ObservedDeployment {
        connection_hash: Some("stale".into()),
        ..deployment(&wd, build, replicas)
    };
    o.deployments
        .insert("draining".into(), stale("draining", Some(1)));
    o.deployments
        .insert("current".into(), stale("current", Some(1)));
    o.deployments
        .insert("asleep".into(), stale("asleep", Some(0)));
    o.deployments
        .insert("fresh".into(), deployment(&wd, "fresh", Some(1)));
    o.temporal.current_build_id = Some("current".into());
    for (b, st) in [
        ("draining", VersionStatus::Draining),
        ("current", VersionStatus::Current),
        ("asleep", VersionStatus::Drained),
        ("fresh", VersionStatus::Draining),
    ] {
        o.temporal.versions.insert(b.into(), version(st));
    }
    let p = plan(&wd, &conn(), ME, &o);
    assert_eq!(p.reconnect, ["current", "draining"]);
    assert!(
        p.apply.iter().any(|d| d.metadata.name.as_deref()
            == Some(build_id::deployment_name("w", &target).as_str()))
    );
}

#[test]
fn no_new_version_while_too_many_cannot_be_deleted() {
    let wd = wd("AllAtOnce", "w:v9");
    let mut o = observed(t(0));
    o.temporal.exists = true;
    o.temporal.current_build_id = Some("v4".into());
    for (b, s) in [
        ("v0", VersionStatus::Drained),
        ("v1", VersionStatus::Drained),
        ("v2", VersionStatus::Draining),
        ("v3", VersionStatus::Inactive),
        ("v4", VersionStatus::Current),
    ] {
        o.temporal.versions.insert(b.into(), version(s));
    }
    // v1 is drained but its workers still run, so the server cannot delete it.
    o.deployments
        .insert("v1".into(), deployment(&wd, "v1", Some(1)));
    let limits = Limits {
        max_undeletable_versions: 4,
        ..Default::default()
    };
    let p = plan_with(&wd, &conn(), ME, &o, &limits);
    assert!(p.apply.is_empty(), "must not create the new version");
    let why = p.blocked.unwrap_or_default();
    assert!(
        why.contains("4 versions cannot be deleted yet (limit 4)"),
        "{why}"
    );
    assert!(
        why.contains("v1, v2, v3, v4"),
        "names the blocking versions: {why}"
    );
    // One more drained and stopped version frees a slot.
    o.deployments.remove("v1");
    assert_eq!(plan_with(&wd, &conn(), ME, &o, &limits).apply.len(), 1);
}

mod invariants {
    //! Safety invariants of the planner over random observed states.

    use super::*;
    use proptest::prelude::*;

    const STATUSES: [VersionStatus; 6] = [
        VersionStatus::NotRegistered,
        VersionStatus::Inactive,
        VersionStatus::Ramping,
        VersionStatus::Current,
        VersionStatus::Draining,
        VersionStatus::Drained,
    ];

    #[derive(Debug, Clone)]
    struct Case {
        strategy: &'static str,
        replicas: Option<i32>,
        /// Per other build: (status index, has deployment, replicas, available, drained secs ago)
        others: Vec<(usize, bool, Option<i32>, bool, u64)>,
        target: (usize, bool, bool),
        current: Option<usize>,
        ramping: Option<usize>,
        manager: usize,
        now: u64,
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            prop::sample::select(vec!["Manual", "AllAtOnce", "Progressive"]),
            prop::option::of(0..4i32),
            prop::collection::vec(
                (
                    0..6usize,
                    any::<bool>(),
                    prop::option::of(0..3i32),
                    any::<bool>(),
                    0..200_000u64,
                ),
                0..5,
            ),
            (0..6usize, any::<bool>(), any::<bool>()),
            prop::option::of(0..6usize),
            prop::option::of(0..6usize),
            0..3usize,
            0..100_000u64,
        )
            .prop_map(
                |(strategy, replicas, others, target, current, ramping, manager, now)| Case {
                    strategy,
                    replicas,
                    others,
                    target,
                    current,
                    ramping,
                    manager,
                    now,
                },
            )
    }

    fn build(i: usize) -> String {
        format!("old-{i}")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn the_planner_never_breaks_safety(c in case()) {
            let mut w = wd(c.strategy, "w:v9");
            w.spec.replicas = c.replicas;
            let target = target_of(&w);
            let now = t(300_000 + c.now);
            let mut o = observed(now);
            o.temporal.exists = true;
            o.temporal.manager_identity = ["", ME, "someone-else"][c.manager].to_string();
            let (t_status, t_has_dep, t_available) = c.target;
            let mut builds = vec![target.clone()];
            if t_status > 0 {
                o.temporal.versions.insert(target.clone(), version(STATUSES[t_status]));
            }
            if t_has_dep {
                let mut d = deployment(&w, &target, c.replicas);
                if !t_available { d.available_since = None; }
                o.deployments.insert(target.clone(), d);
            }
            for (i, (s, has_dep, replicas, available, ago)) in c.others.iter().enumerate() {
                let b = build(i);
                builds.push(b.clone());
                if *s > 0 {
                    o.temporal.versions.insert(b.clone(), VersionInfo {
                        status: STATUSES[*s],
                        drainage_changed_at: Some(t(300_000 + c.now).checked_sub(Duration::from_secs(*ago)).unwrap_or(now)),
                        ..Default::default()
                    });
                }
                if *has_dep {
                    let mut d = deployment(&w, &b, *replicas);
                    if !available { d.available_since = None; }
                    o.deployments.insert(b, d);
                }
            }
            o.temporal.current_build_id = c.current.and_then(|i| builds.get(i).cloned());
            o.temporal.ramping_build_id = c.ramping.and_then(|i| builds.get(i).cloned());

            let p = plan(&w, &conn(), ME, &o);
            let status = |b: &str| o.temporal.versions.get(b).map(|v| v.status).unwrap_or(VersionStatus::NotRegistered);
            let build_of = |name: &str| o.deployments.values().find(|d| d.name == name).map(|d| d.build_id.clone()).unwrap_or_default();

            // Never route to a version with no pollers or an unhealthy Deployment.
            if let Some(Routing::SetCurrent(b) | Routing::SetRamp(b, _)) = &p.routing {
                prop_assert_ne!(status(b), VersionStatus::NotRegistered);
                prop_assert!(o.deployments.get(b).is_some_and(|d| d.available_since.is_some()));
            }
            // Never take routing from a foreign manager; Manual never routes.
            if c.manager == 2 || c.strategy == "Manual" {
                prop_assert!(p.routing.is_none());
                prop_assert!(!p.claim_manager);
            }
            // Never scale to zero or delete a Draining, Current or Ramping version, nor the target.
            let protected = |b: &str| {
                matches!(status(b), VersionStatus::Draining | VersionStatus::Current | VersionStatus::Ramping)
                    || o.temporal.current_build_id.as_deref() == Some(b)
                    || o.temporal.ramping_build_id.as_deref() == Some(b)
                    || b == target
            };
            for (name, replicas) in &p.scale {
                let b = build_of(name);
                if *replicas == 0 {
                    prop_assert!(!protected(&b) || c.replicas == Some(0), "scaled {} ({:?}) to 0", b, status(&b));
                }
            }
            for name in &p.delete_deployments {
                let b = build_of(name);
                prop_assert!(!protected(&b), "deleted {} ({:?})", b, status(&b));
            }
            for b in &p.delete_versions {
                prop_assert!(!protected(b), "deleted version {} ({:?})", b, status(b));
                prop_assert_eq!(status(b), VersionStatus::Drained);
            }
        }
    }
}

fn with_gate(mut wd: WorkerDeployment) -> WorkerDeployment {
    wd.spec.rollout.gate = Some(
        serde_json::from_value(json!({"workflowType": "Check"})).unwrap_or_else(|e| panic!("{e}")),
    );
    wd
}

fn gate_run(queue: &str, status: WorkflowExecutionStatus) -> WorkflowExecution {
    WorkflowExecution {
        workflow_id: format!("test-ns/w:b-{queue}"),
        run_id: "run".into(),
        status,
        task_queue: queue.into(),
    }
}

/// A registered, healthy target v2 with v1 current, polling workflow queues `a` and `b` and
/// activity queue `acts`.
fn gated(strategy: &str) -> (WorkerDeployment, String, Observed) {
    let wd = with_gate(wd(strategy, "w:v2"));
    let target = target_of(&wd);
    let mut o = observed(t(0));
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, None));
    o.temporal.exists = true;
    o.temporal.current_build_id = Some("v1".into());
    o.temporal
        .versions
        .insert("v1".into(), version(VersionStatus::Current));
    o.temporal
        .versions
        .insert(target.clone(), version(VersionStatus::Inactive));
    o.target.task_queues = vec![
        TaskQueueRef {
            name: "a".into(),
            workflow: true,
        },
        TaskQueueRef {
            name: "acts".into(),
            workflow: false,
        },
        TaskQueueRef {
            name: "b".into(),
            workflow: true,
        },
    ];
    (wd, target, o)
}

#[test]
fn a_gate_starts_one_pinned_run_per_workflow_queue_and_holds_routing_until_all_complete() {
    use WorkflowExecutionStatus::{Completed, Running};
    let (wd, target, mut o) = gated("AllAtOnce");
    let p = plan(&wd, &conn(), ME, &o);
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
    assert!(p.moving);

    o.target.gates = vec![gate_run("a", Completed), gate_run("b", Running)];
    let p = plan(&wd, &conn(), ME, &o);
    assert!(p.start_gates.is_empty(), "never started twice");
    assert_eq!(p.routing, None, "one still runs");

    o.target.gates[1].status = Completed;
    assert_eq!(
        plan(&wd, &conn(), ME, &o).routing,
        Some(Routing::SetCurrent(target.clone()))
    );

    // Manual starts the gate too but never promotes.
    let (manual, _, mut o) = gated("Manual");
    assert_eq!(plan(&manual, &conn(), ME, &o).start_gates.len(), 2);
    o.target.gates = vec![gate_run("a", Completed), gate_run("b", Completed)];
    assert_eq!(plan(&manual, &conn(), ME, &o).routing, None);
}

#[test]
fn a_failed_gate_blocks_the_build_for_good_and_says_why() {
    use WorkflowExecutionStatus::{Completed, Failed, TimedOut};
    for (strategy, failure) in [
        ("Progressive", Failed),
        ("AllAtOnce", TimedOut),
        ("Manual", Failed),
    ] {
        let (wd, target, mut o) = gated(strategy);
        o.target.gates = vec![gate_run("a", Completed), gate_run("b", failure)];
        let p = plan(&wd, &conn(), ME, &o);
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
    let (wd, target, mut o) = gated("AllAtOnce");
    // Not registered: nothing to pin a run to.
    o.temporal.versions.remove(&target);
    assert!(!needs(&wd, &target, &o.temporal).gates);
    assert!(plan(&wd, &conn(), ME, &o).start_gates.is_empty());
    // Already current: nothing to gate.
    o.temporal
        .versions
        .insert(target.clone(), version(VersionStatus::Current));
    o.temporal.current_build_id = Some(target.clone());
    assert!(plan(&wd, &conn(), ME, &o).start_gates.is_empty());
    // A rollback skips the gate and promotes at once.
    o.temporal.current_build_id = Some("v3".into());
    o.temporal.versions.insert(
        target.clone(),
        VersionInfo {
            status: VersionStatus::Drained,
            last_current_at: Some(t(0) - Duration::from_secs(60)),
            ..Default::default()
        },
    );
    let p = plan(&wd, &conn(), ME, &o);
    assert!(p.start_gates.is_empty());
    assert_eq!(p.routing, Some(Routing::SetCurrent(target)));
}

#[test]
fn a_gate_waits_until_the_version_reports_its_task_queues() {
    let (wd, _, mut o) = gated("AllAtOnce");
    o.target.task_queues.clear();
    let p = plan(&wd, &conn(), ME, &o);
    assert!(p.start_gates.is_empty());
    assert_eq!(p.routing, None);
    assert!(p.moving);
}

#[test]
fn a_first_version_drained_by_its_gate_run_is_still_checked_for_unversioned_pollers() {
    use WorkflowExecutionStatus::Completed;
    let (wd, target, mut o) = gated("Progressive");
    // No current version; the server reactivated the target for its pinned gate run, which
    // left it Drained once the run completed.
    o.temporal.current_build_id = None;
    o.temporal.versions.remove("v1");
    o.temporal
        .versions
        .insert(target.clone(), version(VersionStatus::Drained));
    o.target.gates = vec![gate_run("a", Completed), gate_run("b", Completed)];
    assert!(needs(&wd, &target, &o.temporal).unversioned_pollers);
    assert_eq!(plan(&wd, &conn(), ME, &o).routing, None, "not known yet");
    o.target.unversioned_pollers = Some(false);
    assert_eq!(
        plan(&wd, &conn(), ME, &o).routing,
        Some(Routing::SetCurrent(target.clone()))
    );
    o.target.unversioned_pollers = Some(true);
    assert_eq!(
        plan(&wd, &conn(), ME, &o).routing,
        Some(Routing::SetRamp(target.clone(), 10.0))
    );
}

#[test]
fn a_first_version_ramping_from_unversioned_workers_walks_the_steps() {
    let wd = wd("Progressive", "w:v1");
    let target = target_of(&wd);
    let mut o = observed(t(1000));
    o.deployments
        .insert(target.clone(), deployment(&wd, &target, None));
    o.temporal.exists = true;
    o.temporal
        .versions
        .insert(target.clone(), version(VersionStatus::Ramping));
    o.temporal.ramping_build_id = Some(target.clone());
    // The check was made before the first step; it is not read again.
    assert!(!needs(&wd, &target, &o.temporal).unversioned_pollers);
    let cases: Vec<(f32, u64, Option<Routing>)> = vec![
        // (ramp, seconds since it changed, expected)
        (10.0, 30, None),
        (10.0, 61, Some(Routing::SetRamp(target.clone(), 50.0))),
        (50.0, 301, Some(Routing::SetCurrent(target.clone()))),
    ];
    for (ramp, ago, expected) in cases {
        o.temporal.ramp_percentage = ramp;
        o.temporal.ramp_changed_at = Some(t(1000 - ago));
        assert_eq!(
            plan(&wd, &conn(), ME, &o).routing,
            expected,
            "ramp {ramp}, {ago}s ago"
        );
    }
}
