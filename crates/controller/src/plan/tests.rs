//! Table-driven tests of the planner, with `now` injected.

use std::time::{Duration, SystemTime};
use twc_api::{WorkflowExecution, WorkflowExecutionStatus};

use serde_json::json;
use twc_api::{ConnectionSpec, VersionStatus, WorkerDeployment};

use super::*;
use crate::temporal::VersionInfo;

const ME_ID: &str = "twc/me";

fn me() -> Identity {
    Identity::new(ME_ID)
}

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

/// What the planner sees, built up as a scenario:
/// `world(&wd).at(t(60)).deployment(&target, None).version(&target, Inactive).build()`.
/// Telling anything about Temporal (a version, the routing, the manager) means the worker
/// deployment exists there.
#[derive(Clone, Debug)]
struct World {
    observed: Observed,
    /// The digest of the template the Deployments run.
    template_digest: String,
}

/// Nothing observed yet, at `t(0)`; Deployments run `wd`'s template.
fn world(wd: &WorkerDeployment) -> World {
    World {
        observed: Observed::at(t(0)),
        template_digest: build_id::template_digest(&wd.spec.template),
    }
}

impl World {
    /// The time the plan is made for.
    fn at(mut self, now: SystemTime) -> Self {
        self.observed.now = now;
        self
    }

    /// A healthy (available since `t(0)`), up-to-date Deployment for `build` with
    /// `spec.replicas` (and as many running, 1 when unset).
    fn deployment(mut self, build: &str, replicas: Option<i32>) -> Self {
        let d = ObservedDeployment {
            name: build_id::deployment_name("w", build),
            build_id: build.into(),
            spec_replicas: replicas,
            replicas: replicas.unwrap_or(1),
            ready_replicas: replicas.unwrap_or(1),
            available_replicas: replicas.unwrap_or(1),
            available_since: Some(t(0)),
            unavailable_since: None,
            connection_hash: Some(deployment::connection_hash(&conn())),
            template_digest: Some(self.template_digest.clone()),
            temporal_namespace: Some("default".into()),
        };
        self.observed.deployments.insert(build.into(), d);
        self
    }

    fn edit_deployment(mut self, build: &str, edit: impl FnOnce(&mut ObservedDeployment)) -> Self {
        match self.observed.deployments.get_mut(build) {
            Some(d) => edit(d),
            None => panic!("no Deployment for {build} in this world"),
        }
        self
    }

    /// `build`'s Deployment is not available.
    /// `build`'s Deployment is Available but none of its pods is ready (as a Deployment scaled
    /// to zero is).
    fn no_ready_pods(self, build: &str) -> Self {
        self.edit_deployment(build, |d| d.ready_replicas = 0)
    }

    fn unavailable(self, build: &str) -> Self {
        self.edit_deployment(build, |d| d.available_since = None)
    }

    /// `build`'s Deployment runs with a previous connection.
    fn stale_connection(self, build: &str) -> Self {
        self.edit_deployment(build, |d| d.connection_hash = Some("stale".into()))
    }

    /// `build`'s workers poll Temporal namespace `ns`.
    fn polls_namespace(self, build: &str, ns: &str) -> Self {
        self.edit_deployment(build, |d| d.temporal_namespace = Some(ns.into()))
    }

    /// A WorkerResourceTemplate scales the versions (an HPA).
    fn autoscaled(mut self) -> Self {
        self.observed.autoscaled = true;
        self
    }

    fn temporal(&mut self) -> &mut DeploymentState {
        self.observed.temporal.exists = true;
        &mut self.observed.temporal
    }

    fn edit_version(mut self, build: &str, edit: impl FnOnce(&mut VersionInfo)) -> Self {
        match self.temporal().versions.get_mut(build) {
            Some(v) => edit(v),
            None => panic!("no version {build} in this world"),
        }
        self
    }

    /// Temporal reports `build` with `status` (replacing what it reported before).
    fn version(mut self, build: &str, status: VersionStatus) -> Self {
        let v = VersionInfo {
            status,
            ..Default::default()
        };
        self.temporal().versions.insert(build.into(), v);
        self
    }

    /// Temporal does not report `build`: no worker of it polled.
    fn unregistered(mut self, build: &str) -> Self {
        self.temporal().versions.remove(build);
        self
    }

    /// `build`'s drainage status last changed at `at`.
    fn drainage_changed(self, build: &str, at: SystemTime) -> Self {
        self.edit_version(build, |v| v.drainage_changed_at = Some(at))
    }

    /// `build` is Drained since `since`.
    fn drained_since(self, build: &str, since: SystemTime) -> Self {
        self.version(build, VersionStatus::Drained)
            .drainage_changed(build, since)
    }

    /// `build` was last current at `at`.
    fn last_current(self, build: &str, at: SystemTime) -> Self {
        self.edit_version(build, |v| v.last_current_at = Some(at))
    }

    /// The current version.
    fn current(mut self, build: &str) -> Self {
        self.temporal().current_build_id = Some(build.into());
        self
    }

    /// The ramping version.
    fn ramping(mut self, build: &str) -> Self {
        self.temporal().ramping_build_id = Some(build.into());
        self
    }

    /// The ramp is at `percentage`, set at `since`.
    fn ramp(mut self, percentage: f32, since: SystemTime) -> Self {
        let temporal = self.temporal();
        temporal.ramp_percentage = percentage;
        temporal.ramp_changed_at = Some(since);
        self
    }

    /// The manager identity ("" for none).
    fn manager(mut self, identity: &str) -> Self {
        self.temporal().manager_identity = identity.into();
        self
    }

    /// The task queues the target polls.
    fn task_queues(mut self, queues: Vec<TaskQueueRef>) -> Self {
        self.observed.target.task_queues = queues;
        self
    }

    /// A gate run of the target on `queue`.
    fn gate(mut self, queue: &str, status: WorkflowExecutionStatus) -> Self {
        self.observed.target.gates.push(gate_run(queue, status));
        self
    }

    /// Whether every task queue still has an unversioned poller.
    fn unversioned_pollers(mut self, polled: bool) -> Self {
        self.observed.target.unversioned_pollers = Some(polled);
        self
    }

    fn build(self) -> Observed {
        self.observed
    }
}

fn workflow_queue(name: &str) -> TaskQueueRef {
    TaskQueueRef {
        name: name.into(),
        workflow: true,
    }
}

fn activity_queue(name: &str) -> TaskQueueRef {
    TaskQueueRef {
        name: name.into(),
        workflow: false,
    }
}

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
fn sunset_scales_drained_versions_down_then_deletes_them_and_never_touches_draining_ones() {
    use VersionStatus::{Current, Draining, Inactive};
    let wd = wd("AllAtOnce", "w:v3");
    let target = target_of(&wd);
    let ago = |secs: u64| t(100_000 - secs);
    let o = world(&wd)
        .at(t(100_000))
        .deployment(&target, None)
        .version(&target, Current)
        .current(&target)
        .deployment("draining", Some(2))
        .version("draining", Draining)
        .deployment("drained-recent", Some(2))
        .drained_since("drained-recent", ago(600))
        .deployment("drained-old", Some(2))
        .drained_since("drained-old", ago(2 * 3600))
        .deployment("drained-ancient", Some(0))
        .drained_since("drained-ancient", ago(26 * 3600))
        .deployment("inactive", Some(2))
        .version("inactive", Inactive)
        .deployment("gone-from-temporal", Some(1))
        .no_ready_pods("gone-from-temporal")
        .deployment("unlisted-but-up", Some(1))
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
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
    assert_eq!(
        p.kept,
        vec![Kept {
            build_id: "unlisted-but-up".into(),
            why: Unaccounted::NotListed { ready: 1 }
        }]
    );
}

/// What the planner touches of the Deployment of `build`: scaled, deleted, reconnected.
fn touched(p: &Plan, build: &str) -> Vec<&'static str> {
    let name = build_id::deployment_name("w", build);
    let mut out = Vec::new();
    if p.scale.iter().any(|(n, _)| *n == name) {
        out.push("scaled");
    }
    if p.delete_deployments.contains(&name) {
        out.push("deleted");
    }
    if p.reconnect.iter().any(|b| b == build) {
        out.push("reconnected");
    }
    out
}

#[test]
fn a_temporal_namespace_change_moves_the_target_and_keeps_the_older_versions_where_they_are() {
    use VersionStatus::NotRegistered;
    let mut wd = wd("AllAtOnce", "w:v2");
    wd.spec.worker_options.temporal_namespace = "elsewhere".into();
    let target = target_of(&wd);
    // v1 drains pinned workflows in "default", v2 is current there; the new namespace has
    // never seen this worker deployment.
    let o = world(&wd)
        .deployment("v1", Some(1))
        .polls_namespace("v1", "default")
        .deployment("v1-scaled-down", Some(0))
        .polls_namespace("v1-scaled-down", "default")
        .deployment(&target, Some(1))
        .polls_namespace(&target, "default")
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(p.apply.len(), 1, "the target moves to the new namespace");
    assert_eq!(touched(&p, "v1"), Vec::<&str>::new());
    assert_eq!(touched(&p, "v1-scaled-down"), Vec::<&str>::new());
    let other = || Unaccounted::OtherNamespace("default".into());
    assert_eq!(
        p.kept,
        vec![
            Kept {
                build_id: "v1".into(),
                why: other()
            },
            Kept {
                build_id: "v1-scaled-down".into(),
                why: other()
            },
        ]
    );
    assert_eq!(status_of(&o.temporal, &target), NotRegistered);
    assert_eq!(p.routing, None);
}

#[test]
fn a_worker_deployment_temporal_does_not_find_deletes_no_worker_that_is_up() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    // Deleted in Temporal, or a NotFound of another cause: nothing is listed.
    let o = world(&wd)
        .deployment(&target, Some(1))
        .deployment("was-current", Some(2))
        .deployment("never-polled", Some(1))
        .no_ready_pods("never-polled")
        .build();
    assert!(!o.temporal.exists);
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(touched(&p, "was-current"), Vec::<&str>::new());
    assert_eq!(
        p.kept,
        vec![Kept {
            build_id: "was-current".into(),
            why: Unaccounted::DeploymentNotFound
        }]
    );
    // A first rollout that crash-looped and was replaced: nothing can be pinned to it.
    assert_eq!(touched(&p, "never-polled"), vec!["deleted"]);
}

#[test]
fn after_a_connection_change_only_the_versions_temporal_lists_follow_it() {
    use VersionStatus::{Current, Draining};
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let o = world(&wd)
        .deployment(&target, None)
        .version(&target, Current)
        .current(&target)
        .deployment("listed", Some(1))
        .version("listed", Draining)
        .stale_connection("listed")
        // Another server behind the new hostPort: v0 drains on the old one.
        .deployment("unlisted", Some(1))
        .stale_connection("unlisted")
        .deployment("unlisted-down", Some(0))
        .stale_connection("unlisted-down")
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(touched(&p, "listed"), vec!["reconnected"]);
    assert_eq!(touched(&p, "unlisted"), Vec::<&str>::new());
    assert_eq!(touched(&p, "unlisted-down"), Vec::<&str>::new());
    assert_eq!(
        p.kept.iter().map(|k| k.to_string()).collect::<Vec<_>>(),
        vec![
            "unlisted (its workers use a previous connection, and Temporal reached through the current one does not list it)",
            "unlisted-down (its workers use a previous connection, and Temporal reached through the current one does not list it)",
        ]
    );
}

#[test]
fn replicas_follow_the_spec_for_active_versions_only() {
    let mut wd = wd("AllAtOnce", "w:v1");
    wd.spec.replicas = Some(3);
    let target = target_of(&wd);
    let current = world(&wd)
        .version(&target, VersionStatus::Current)
        .current(&target);
    let running = current.clone().deployment(&target, Some(1));
    let p = plan(&wd, &conn(), &me(), &running.clone().build());
    assert_eq!(p.scale, vec![(build_id::deployment_name("w", &target), 3)]);
    // A WorkerResourceTemplate scaling the versions (an HPA) owns them, whatever the spec.
    let o = running.clone().autoscaled().build();
    assert!(plan(&wd, &conn(), &me(), &o).scale.is_empty());
    let p = plan(&wd, &conn(), &me(), &current.autoscaled().build());
    assert_eq!(p.apply.len(), 1);
    assert_eq!(
        p.apply[0].spec.as_ref().and_then(|s| s.replicas),
        None,
        "not applied"
    );
    // Without spec.replicas an autoscaler owns them: no scaling.
    wd.spec.replicas = None;
    assert!(plan(&wd, &conn(), &me(), &running.build()).scale.is_empty());
}

#[test]
fn a_connection_change_re_applies_the_target() {
    use VersionStatus::{Current, Drained, Draining};
    let wd = wd("AllAtOnce", "w:v1");
    let target = target_of(&wd);
    let stale = world(&wd)
        .deployment(&target, None)
        .stale_connection(&target);
    assert_eq!(
        plan(&wd, &conn(), &me(), &stale.clone().build())
            .apply
            .len(),
        1
    );

    // Older versions that still run follow the connection too; scaled-down ones do not.
    let o = stale
        .deployment("draining", Some(1))
        .stale_connection("draining")
        .version("draining", Draining)
        .deployment("current", Some(1))
        .stale_connection("current")
        .version("current", Current)
        .current("current")
        .deployment("asleep", Some(0))
        .stale_connection("asleep")
        .version("asleep", Drained)
        .deployment("fresh", Some(1))
        .version("fresh", Draining)
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(p.reconnect, ["current", "draining"]);
    assert!(
        p.apply.iter().any(|d| d.metadata.name.as_deref()
            == Some(build_id::deployment_name("w", &target).as_str()))
    );
}

#[test]
fn no_new_version_while_too_many_cannot_be_deleted() {
    use VersionStatus::{Current, Drained, Draining, Inactive};
    let wd = wd("AllAtOnce", "w:v9");
    let versions = world(&wd)
        .version("v0", Drained)
        .version("v1", Drained)
        .version("v2", Draining)
        .version("v3", Inactive)
        .version("v4", Current)
        .current("v4");
    // v1 is drained but its workers still run, so the server cannot delete it.
    let o = versions.clone().deployment("v1", Some(1)).build();
    let limits = Limits {
        max_undeletable_versions: 4,
        ..Default::default()
    };
    let p = plan_with(&wd, &conn(), &me(), &o, &limits);
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
    assert_eq!(
        plan_with(&wd, &conn(), &me(), &versions.build(), &limits)
            .apply
            .len(),
        1
    );
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
        /// 0: nothing, 1: the target is marked failed, 2: paused, 3: an abort asked for.
        guard: usize,
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
            0..4usize,
        )
            .prop_map(
                |(strategy, replicas, others, target, current, ramping, manager, now, guard)| {
                    Case {
                        strategy,
                        replicas,
                        others,
                        target,
                        current,
                        ramping,
                        manager,
                        now,
                        guard,
                    }
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
            match c.guard {
                1 => w = failed(w, &target, twc_api::conditions::PROGRESS_DEADLINE_EXCEEDED),
                2 => w = annotated(w, twc_api::controls::PAUSED, "true"),
                3 => w = annotated(w, twc_api::controls::ABORT, "now"),
                _ => {}
            }
            let now = t(300_000 + c.now);
            let mut scene = world(&w).at(now).manager(["", ME_ID, "someone-else"][c.manager]);
            let (t_status, t_has_dep, t_available) = c.target;
            let mut builds = vec![target.clone()];
            if t_status > 0 {
                scene = scene.version(&target, STATUSES[t_status]);
            }
            if t_has_dep {
                scene = scene.deployment(&target, c.replicas);
                if !t_available { scene = scene.unavailable(&target); }
            }
            for (i, (s, has_dep, replicas, available, ago)) in c.others.iter().enumerate() {
                let b = build(i);
                builds.push(b.clone());
                if *s > 0 {
                    let changed = now.checked_sub(Duration::from_secs(*ago)).unwrap_or(now);
                    scene = scene.version(&b, STATUSES[*s]).drainage_changed(&b, changed);
                }
                if *has_dep {
                    scene = scene.deployment(&b, *replicas);
                    if !available { scene = scene.unavailable(&b); }
                }
            }
            if let Some(b) = c.current.and_then(|i| builds.get(i)) {
                scene = scene.current(b);
            }
            if let Some(b) = c.ramping.and_then(|i| builds.get(i)) {
                scene = scene.ramping(b);
            }
            let o = scene.build();

            let p = plan(&w, &conn(), &me(), &o);
            let status = |b: &str| o.temporal.versions.get(b).map(|v| v.status).unwrap_or(VersionStatus::NotRegistered);
            let build_of = |name: &str| o.deployments.values().find(|d| d.name == name).map(|d| d.build_id.clone()).unwrap_or_default();

            // Never route to a version with no pollers, no ready workers or an unavailable
            // Deployment.
            if let Some(Routing::SetCurrent(b) | Routing::SetRamp(b, _)) = &p.routing {
                prop_assert_ne!(status(b), VersionStatus::NotRegistered);
                prop_assert!(
                    o.deployments.get(b).is_some_and(|d| d.available_since.is_some()
                        && d.ready_replicas > 0
                        && d.spec_replicas != Some(0)),
                    "routed to {} with no ready workers: {:?}", b, o.deployments.get(b)
                );
            }
            // A failed or aborted build never gets new work; a pause only clears a stale ramp
            // (or takes work away).
            if c.guard == 1 || c.guard == 3 {
                let to_target = matches!(&p.routing, Some(Routing::SetCurrent(b) | Routing::SetRamp(b, _)) if *b == target);
                prop_assert!(!to_target, "routed to failed {}: {:?}", target, p.routing);
                prop_assert!(p.start_gates.is_empty());
                prop_assert!(p.failure.is_some());
            }
            if c.guard == 2 {
                prop_assert!(matches!(p.routing, None | Some(Routing::ClearRamp)), "{:?}", p.routing);
            }
            // Never take routing from a foreign manager; Manual never routes.
            if c.manager == 2 || (c.strategy == "Manual" && c.guard != 3) {
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
                // What Temporal does not list is deleted only with no worker up.
                if status(&b) == VersionStatus::NotRegistered {
                    prop_assert!(
                        o.deployments.get(&b).is_some_and(|d| d.ready_replicas == 0),
                        "deleted {} (not listed) with ready workers", b
                    );
                }
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
fn a_changed_template_whose_build_id_is_taken_gets_one_of_its_own() {
    use VersionStatus::Current;
    let mut wd = wd("AllAtOnce", "w:v1");
    let taken = target_of(&wd);
    // The build ID's Deployment runs another template (same image tag, another env).
    let running = world(&wd)
        .deployment(&taken, Some(1))
        .edit_deployment(&taken, |d| d.template_digest = Some("another".into()))
        .version(&taken, Current)
        .current(&taken);
    let p = plan(&wd, &conn(), &me(), &running.clone().build());
    let own = build_id::build_id_with(&wd.spec.template, None, 1);
    assert_ne!(own, taken);
    assert_eq!(
        (p.target_build_id.as_str(), p.collision_count),
        (own.as_str(), 1)
    );
    assert_eq!(
        p.apply[0].metadata.name.as_deref(),
        Some(build_id::deployment_name("w", &own).as_str())
    );
    assert!(
        !p.scale
            .iter()
            .any(|(n, _)| *n == build_id::deployment_name("w", &taken))
    );

    // Recorded in the status: the same build ID while the other template runs, and after.
    wd.status = Some(twc_api::WorkerDeploymentStatus {
        collision_count: Some(1),
        ..Default::default()
    });
    let both = running.deployment(&own, Some(1));
    let p = plan(&wd, &conn(), &me(), &both.clone().build());
    assert_eq!(
        (p.target_build_id.as_str(), p.collision_count),
        (own.as_str(), 1)
    );
    assert!(p.apply.is_empty(), "its Deployment is up to date");
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &world(&wd).deployment(&own, Some(1)).build(),
    );
    assert_eq!(p.target_build_id, own);
}

#[test]
fn without_a_collision_the_build_id_is_twc_s_and_a_custom_one_never_moves() {
    let mut wd = wd("AllAtOnce", "w:v1");
    let b = target_of(&wd);
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &world(&wd).deployment(&b, Some(1)).build(),
    );
    assert_eq!(
        (p.target_build_id.as_str(), p.collision_count),
        (b.as_str(), 0)
    );

    wd.spec.worker_options.unsafe_custom_build_id = Some("mine".into());
    let o = world(&wd)
        .deployment("mine", Some(1))
        .edit_deployment("mine", |d| d.template_digest = Some("older".into()))
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!((p.target_build_id.as_str(), p.collision_count), ("mine", 0));
    assert_eq!(
        p.apply.len(),
        1,
        "the custom build's Deployment rolls to the new template"
    );
}

/// The pace after `p` was planned from `o`, at the production intervals.
fn paced(wd: &WorkerDeployment, o: &Observed, p: &Plan) -> crate::plan::pace::Pace {
    crate::plan::pace::pace(wd, o, p, &crate::config::Intervals::default())
}

use crate::plan::pace::Reuse;

mod paced {
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
    fn a_target_whose_workers_are_up_waits_for_pollers_at_the_fast_pace() {
        let wd = wd("AllAtOnce", "w:v2");
        let target = target_of(&wd);
        let o = world(&wd)
            .at(t(60))
            .deployment("old", Some(1))
            .version("old", VersionStatus::Current)
            .current("old")
            .deployment(&target, Some(1))
            .build();
        let (_, p) = paced(&wd, &o);
        assert_eq!(
            p,
            Pace {
                requeue: Duration::from_secs(2),
                reuse: Reuse::Never
            }
        );
    }

    #[test]
    fn a_routing_write_is_followed_by_a_read() {
        let wd = wd("AllAtOnce", "w:v2");
        let target = target_of(&wd);
        let o = world(&wd)
            .at(t(60))
            .deployment("old", Some(1))
            .version("old", VersionStatus::Current)
            .current("old")
            .deployment(&target, Some(1))
            .version(&target, VersionStatus::Inactive)
            .task_queues(vec![workflow_queue("q")])
            .build();
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
}

/// `wd` with annotation `key` set to `value`.
fn annotated(mut wd: WorkerDeployment, key: &str, value: &str) -> WorkerDeployment {
    wd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    wd
}

/// `wd` whose last status made `target` the target at `since`.
fn targeted(mut wd: WorkerDeployment, target: &str, since: SystemTime) -> WorkerDeployment {
    let status = wd.status.get_or_insert_with(Default::default);
    status.target_version = Some(twc_api::TargetWorkerDeploymentVersion {
        base: twc_api::BaseWorkerDeploymentVersion {
            build_id: target.into(),
            ..Default::default()
        },
        target_since: crate::conditions::time(since),
        ..Default::default()
    });
    wd
}

/// `wd` whose last status marked `target` failed for `reason`.
fn failed(mut wd: WorkerDeployment, target: &str, reason: &str) -> WorkerDeployment {
    wd.status
        .get_or_insert_with(Default::default)
        .failed_version = Some(twc_api::FailedVersion {
        build_id: target.into(),
        reason: reason.into(),
        message: "it failed".into(),
        failed_at: crate::conditions::time(t(0)),
        rolled_back: false,
    });
    wd
}

fn trouble(reason: &str, restarts: i32) -> PodTrouble {
    PodTrouble {
        pod: "w-1".into(),
        container: "worker".into(),
        reason: reason.into(),
        message: "back-off 10s restarting failed container".into(),
        restarts,
    }
}

mod guarded {
    use super::*;
    use twc_api::conditions::{ABORTED, PROGRESS_DEADLINE_EXCEEDED, WORKERS_CRASH_LOOPING};
    use twc_api::controls::{ABORT, PAUSED, PROMOTE, RETRY};

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
}
