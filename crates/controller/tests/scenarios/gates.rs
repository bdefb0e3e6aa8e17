//! Gate workflows and the unversioned-poller check (TWC's `*-gate-*` cases and
//! `progressive-rollout-yes-unversioned-pollers-expect-first-step`), plus gate input from a
//! ConfigMap and a Secret. Beyond TWC's expected statuses, each checks what a user sees: the
//! gate runs and task queues in `status.targetVersion`, the Progressing message and the one
//! `GateWorkflowFailed` event of a failed gate, and, in Temporal, that the gate run was pinned
//! to the target build and completed on its workers (not on the current version's).
//!
//! Where TWC expects an unpromoted gated target to stay Inactive, it is usually Drained here:
//! TWC's test server turns `history.enableVersionReactivationSignals` off, while by default the
//! server reactivates a version when a pinned workflow starts on it (Draining), and reports it
//! Drained once the gate run ended. The signal is not certain: on a loaded server a run that
//! starts and fails at once can leave the version Inactive for good (seen in CI). Both mean the
//! same to a user (no new work goes to it), so either is accepted; the controller reports
//! Temporal's status as it is.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use temporalio_client::tonic;
use temporalio_common::protos::temporal::api::common::v1::WorkflowExecution as PbExecution;
use temporalio_common::protos::temporal::api::enums::v1::WorkflowExecutionStatus as PbStatus;
use temporalio_common::protos::temporal::api::history::v1::history_event::Attributes;
use temporalio_common::protos::temporal::api::workflow::v1::WorkflowExecutionInfo;
use temporalio_common::protos::temporal::api::workflow::v1::versioning_override::Override;
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    DescribeWorkerDeploymentRequest, DescribeWorkflowExecutionRequest,
    GetWorkflowExecutionHistoryRequest,
};
use twc_api::VersionStatus::{Current, Drained, Inactive, Ramping};
use twc_api::{TaskQueue, WorkerDeployment, WorkflowExecution, WorkflowExecutionStatus};
use twc_controller::temporal::gates::gate_workflow_id;
use twc_testenv::{TemporalOptions, TemporalServer, wait_for};

use crate::common::{self, World, from_json};
use crate::harness::*;

/// The example worker's gate workflow types.
const PASS: &str = "Succeed";
const FAIL: &str = "Fail";
const CHECK_INPUT: &str = "CheckInput";

/// A dev server with the server's default `matching.PollerHistoryTTL` (5 minutes; the shared
/// one forgets a poller a second after its long poll started, so `DescribeTaskQueue` would
/// hardly ever list the unversioned workers), otherwise as fast-draining. TWC's `ts` server.
/// Started on first use.
async fn poller_ttl_server() -> &'static TemporalServer {
    static SERVER: tokio::sync::OnceCell<TemporalServer> = tokio::sync::OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            let mut opts = TemporalOptions::default();
            opts.dynamic_config
                .retain(|(k, _)| k != "matching.PollerHistoryTTL");
            opts.namespace_pool = 2;
            let dir = twc_testenv::paths::log_dir().join("temporal-poller-ttl");
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            TemporalServer::start(&opts, &dir)
                .await
                .unwrap_or_else(|e| panic!("the dev server with the default poller TTL: {e}"))
        })
        .await
}

/// An unpromoted target after its gate run ended: Drained, or Inactive (see the module doc).
fn gated_unpromoted(build: &str) -> Expect {
    Expect::target(build, Drained).or_status(Inactive)
}

/// `rollout` with a gate running `workflow_type`.
fn gated(mut rollout: Value, workflow_type: &str) -> Value {
    rollout["gate"] = json!({"workflowType": workflow_type});
    rollout
}

impl Scenario {
    /// A spec of `v1.0` (the target of TWC's gate cases), rolled out by `rollout` with a gate
    /// running `workflow_type`.
    fn gated_spec(&self, rollout: Value, workflow_type: &str) -> Value {
        self.spec(gated(rollout, workflow_type), &image("v1.0"))
    }

    /// [`Scenario::start`] over TWC's "(st)" preliminary status: after creating the
    /// WorkerDeployment from `spec` and before connecting it, v0's workers (one replica)
    /// registered and v0 made current by the test. Returns v0's and the target's build IDs.
    async fn start_over_v0(&mut self, spec: Value) -> (String, String) {
        self.create(spec).await;
        let v0 = self.existing_version(&image("v0"), 1).await;
        self.wait_registered(&[&v0]).await;
        self.set_current(&v0).await;
        self.connect().await;
        (v0, self.target_build_id())
    }

    /// TWC's gate workflow ID for `build` on the WorkerDeployment's task queue (its name).
    fn gate_id(&self, build: &str) -> String {
        gate_workflow_id(&self.deployment_name, build, &self.name)
    }

    /// `DescribeWorkflowExecution` of the latest run of `id`.
    async fn run_info(&self, id: &str) -> WorkflowExecutionInfo {
        self.temporal
            .workflow_service()
            .describe_workflow_execution(tonic::Request::new(DescribeWorkflowExecutionRequest {
                namespace: self.temporal_ns.clone(),
                execution: Some(PbExecution {
                    workflow_id: id.to_string(),
                    run_id: String::new(),
                }),
            }))
            .await
            .unwrap_or_else(|e| panic!("DescribeWorkflowExecution {id}: {e}"))
            .into_inner()
            .workflow_execution_info
            .unwrap_or_else(|| panic!("{id}: no execution info"))
    }

    /// Waits until `status.targetVersion` shows `build`'s one gate run with `status` on the
    /// WorkerDeployment's task queue, and that task queue; returns the run.
    async fn wait_gate_status(
        &self,
        build: &str,
        status: WorkflowExecutionStatus,
    ) -> WorkflowExecution {
        let id = self.gate_id(build);
        let queues = vec![TaskQueue {
            name: self.name.clone(),
        }];
        let wd = common::wait_wd(
            &self.client,
            &self.ns,
            &self.name,
            &format!("gate {id} {status:?}"),
            WAIT,
            |wd| {
                let Some(t) = wd.status.as_ref().and_then(|s| s.target_version.as_ref()) else {
                    return false;
                };
                t.base.build_id == build
                    && t.base.task_queues == queues
                    && matches!(t.test_workflows.as_slice(),
                        [g] if g.workflow_id == id
                            && g.status == status
                            && g.task_queue == self.name
                            && !g.run_id.is_empty())
            },
        )
        .await;
        gate_runs(&wd).remove(0)
    }

    /// The gate run `id` ended with `want` in Temporal, pinned to `build` by the controller
    /// and completed by `build`'s workers; returns its close time.
    async fn assert_pinned_run(&self, id: &str, build: &str, want: PbStatus) -> SystemTime {
        let info = self.run_info(id).await;
        assert_eq!(info.status(), want, "{id}: {info:?}");
        let versioning = info
            .versioning_info
            .clone()
            .unwrap_or_else(|| panic!("{id} has no versioning info: {info:?}"));
        let pinned = match versioning.versioning_override.and_then(|o| o.r#override) {
            Some(Override::Pinned(p)) => p.version,
            other => panic!("{id} is not pinned by an override: {other:?}"),
        }
        .unwrap_or_else(|| panic!("{id}: pinned to no version"));
        assert_eq!(
            (pinned.deployment_name.as_str(), pinned.build_id.as_str()),
            (self.deployment_name.as_str(), build),
            "{id} pinned elsewhere"
        );
        let ran_on = versioning
            .deployment_version
            .unwrap_or_else(|| panic!("{id}: no worker version completed a task"));
        assert_eq!(
            (ran_on.deployment_name.as_str(), ran_on.build_id.as_str()),
            (self.deployment_name.as_str(), build),
            "{id} ran on another version's workers"
        );
        info.close_time
            .map(|t| SystemTime::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos as u32))
            .unwrap_or_else(|| panic!("{id} has no close time"))
    }

    /// When the routing last changed: (current version changed, ramping version changed).
    /// Retried: the worker deployment refuses reads while busy (`ResourceExhausted`).
    async fn routing_changed(&self) -> (SystemTime, SystemTime) {
        let info = wait_for(
            &format!("{}: DescribeWorkerDeployment", self.deployment_name),
            WAIT,
            || async {
                tokio::time::sleep(Duration::from_millis(400)).await;
                self.temporal
                    .workflow_service()
                    .describe_worker_deployment(tonic::Request::new(
                        DescribeWorkerDeploymentRequest {
                            namespace: self.temporal_ns.clone(),
                            deployment_name: self.deployment_name.clone(),
                        },
                    ))
                    .await
                    .map_err(|e| e.to_string())
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_inner()
        .worker_deployment_info
        .and_then(|i| i.routing_config)
        .unwrap_or_default();
        let at = |t: Option<prost_wkt_types::Timestamp>| {
            t.map(|t| SystemTime::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos as u32))
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        (
            at(info.current_version_changed_time),
            at(info.ramping_version_changed_time),
        )
    }

    /// The JSON argument the first run of `id` was started with.
    async fn started_input(&self, id: &str) -> Value {
        let history = self
            .temporal
            .workflow_service()
            .get_workflow_execution_history(tonic::Request::new(
                GetWorkflowExecutionHistoryRequest {
                    namespace: self.temporal_ns.clone(),
                    execution: Some(PbExecution {
                        workflow_id: id.to_string(),
                        run_id: String::new(),
                    }),
                    maximum_page_size: 1,
                    ..Default::default()
                },
            ))
            .await
            .unwrap_or_else(|e| panic!("history of {id}: {e}"))
            .into_inner();
        let started = history
            .history
            .and_then(|h| h.events.into_iter().next())
            .and_then(|e| e.attributes);
        let Some(Attributes::WorkflowExecutionStartedEventAttributes(a)) = started else {
            panic!("{id}: no WorkflowExecutionStarted event");
        };
        let payload = a
            .input
            .and_then(|p| p.payloads.into_iter().next())
            .unwrap_or_else(|| panic!("{id} was started without input"));
        serde_json::from_slice(&payload.data)
            .unwrap_or_else(|e| panic!("{id}'s input is not JSON: {e}"))
    }

    /// Warning events `GateWorkflowFailed` about the WorkerDeployment, counting repeats.
    async fn gate_failed_events(&self) -> (i32, Vec<String>) {
        let events = Api::<Event>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("events: {e}"));
        let mine: Vec<&Event> = events
            .items
            .iter()
            .filter(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("GateWorkflowFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&self.name)
            })
            .collect();
        let count = mine
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum();
        (count, mine.iter().filter_map(|e| e.note.clone()).collect())
    }

    /// A failed gate, as a user sees it: the run Failed in the status and in Temporal (pinned
    /// to `build`, on its workers), one `GateWorkflowFailed` event naming the run, a
    /// Progressing message naming it, and no retry while the controller keeps reconciling
    /// (checked after `expect` settled).
    async fn assert_failed_gate(&self, build: &str, expect: &Expect) {
        let id = self.gate_id(build);
        let run = self
            .wait_gate_status(build, WorkflowExecutionStatus::Failed)
            .await;
        self.assert_pinned_run(&id, build, PbStatus::Failed).await;
        let note = self.wait_warning("GateWorkflowFailed").await;
        assert!(
            note.contains(&id) && note.contains(&run.run_id) && note.contains("Failed"),
            "event: {note}"
        );
        let (reason, message) = self.wait_progressing_says(&[&id, "Failed"]).await;
        assert_eq!(reason, "WaitingForPromotion", "{message}");
        self.settle(expect).await;
        let (count, notes) = self.gate_failed_events().await;
        assert_eq!(count, 1, "GateWorkflowFailed events: {notes:?}");
        let again = self
            .wait_gate_status(build, WorkflowExecutionStatus::Failed)
            .await;
        assert_eq!(again.run_id, run.run_id, "the failed gate was retried");
        assert_eq!(
            self.run_info(&id).await.execution.map(|e| e.run_id),
            Some(run.run_id),
            "Temporal has a newer run of the gate"
        );
    }
}

fn gate_runs(wd: &WorkerDeployment) -> Vec<WorkflowExecution> {
    wd.status
        .as_ref()
        .and_then(|s| s.target_version.as_ref())
        .map(|t| t.test_workflows.clone())
        .unwrap_or_default()
}

/// A passed gate: the run Completed in the status, pinned to `build` and completed on its
/// workers in Temporal; no `GateWorkflowFailed` event. Returns when it closed.
async fn assert_passed_gate(s: &Scenario, build: &str) -> SystemTime {
    s.wait_gate_status(build, WorkflowExecutionStatus::Completed)
        .await;
    let closed = s
        .assert_pinned_run(&s.gate_id(build), build, PbStatus::Completed)
        .await;
    assert_eq!(s.gate_failed_events().await.0, 0);
    closed
}

/// The same for a target already promoted (its status no longer lists gate runs), plus: the
/// routing changed only after the gate completed.
async fn assert_gate_held_promotion(s: &Scenario, build: &str) {
    let closed = s
        .assert_pinned_run(&s.gate_id(build), build, PbStatus::Completed)
        .await;
    let (current_changed, _) = s.routing_changed().await;
    assert!(
        current_changed >= closed,
        "{build} became current at {current_changed:?}, before its gate completed at {closed:?}"
    );
    assert_eq!(s.gate_failed_events().await.0, 0);
}

/// Waits until `build` is current (and the only version), then checks that its gate held the
/// promotion ([`assert_gate_held_promotion`]).
async fn assert_promoted_after_gate(s: &Scenario, build: &str) {
    s.wait_status(&Expect::target(build, Current).current(build))
        .await;
    assert_gate_held_promotion(s, build).await;
}

/// A scenario on the dev server that remembers pollers ([`poller_ttl_server`]), with
/// unversioned workers polling its task queue before the WorkerDeployment exists.
async fn with_unversioned_pollers(w: &'static World, prefix: &str) -> Scenario {
    let server = poller_ttl_server().await;
    let s = Scenario::on(w, server, prefix).await;
    s.unversioned_workers().await;
    s
}

/// `manual-rollout-with-failed-gate-expect-no-current`: Manual still runs the gate, and says
/// when it failed.
pub async fn manual_rollout_with_failed_gate_expect_no_current(w: &'static World) {
    let mut s = Scenario::new(w, "manual-failed-gate").await;
    let mut spec = s.gated_spec(manual(), FAIL);
    spec["replicas"] = json!(2);
    let target = s.start(spec).await;
    let expect = gated_unpromoted(&target);
    s.wait_status(&expect).await;
    s.wait_replicas(&target, 2).await;
    s.assert_failed_gate(&target, &expect).await;
}

/// `manual-rollout-with-success-gate-expect-no-current`: Manual never promotes.
pub async fn manual_rollout_with_success_gate_expect_no_current(w: &'static World) {
    let mut s = Scenario::new(w, "manual-success-gate").await;
    let target = s.start(s.gated_spec(manual(), PASS)).await;
    let expect = gated_unpromoted(&target);
    s.wait_status(&expect).await;
    assert_passed_gate(&s, &target).await;
    s.settle(&expect).await;
    assert_eq!(
        gate_runs(&s.get().await)[0].status,
        WorkflowExecutionStatus::Completed
    );
}

/// `all-at-once-with-success-gate-expect-current`.
pub async fn all_at_once_with_success_gate_expect_current(w: &'static World) {
    let mut s = Scenario::new(w, "aao-success-gate").await;
    let mut spec = s.gated_spec(all_at_once(), PASS);
    spec["replicas"] = json!(2);
    let target = s.start(spec).await;
    assert_promoted_after_gate(&s, &target).await;
}

/// `all-at-once-rollout-with-failed-gate-expect-no-current`: (st) v0 current.
pub async fn all_at_once_rollout_with_failed_gate_expect_no_current(w: &'static World) {
    let mut s = Scenario::new(w, "aao-failed-gate").await;
    let (v0, target) = s.start_over_v0(s.gated_spec(all_at_once(), FAIL)).await;
    let expect = gated_unpromoted(&target).current(&v0);
    s.wait_status(&expect).await;
    s.assert_failed_gate(&target, &expect).await;
}

/// `progressive-rollout-with-gate-no-current-expect-all-at-once`: the first version, with no
/// unversioned workers, goes current once the gate passes.
pub async fn progressive_rollout_with_gate_no_current_expect_all_at_once(w: &'static World) {
    let mut s = Scenario::new(w, "prog-gate-no-current").await;
    let target = s.start(s.gated_spec(progressive(10, "1h"), PASS)).await;
    assert_promoted_after_gate(&s, &target).await;
}

/// `progressive-rollout-yes-unversioned-pollers-expect-first-step`: unversioned workers still
/// poll every task queue of the first version, so it ramps from them by the steps instead of
/// taking all traffic. On a dev server that remembers pollers (TWC's `ts`).
pub async fn progressive_rollout_yes_unversioned_pollers_expect_first_step(w: &'static World) {
    let mut s = with_unversioned_pollers(w, "prog-unversioned").await;
    let target = s.start(s.spec(progressive(5, "1h"), &image("v1"))).await;
    let expect = Expect::target(&target, Ramping).ramp(5.0);
    s.settle(&expect).await;
    let wd = s.get().await;
    let t = wd
        .status
        .and_then(|s| s.target_version)
        .unwrap_or_else(|| panic!("no targetVersion"));
    assert_eq!(
        t.base.task_queues,
        vec![TaskQueue {
            name: s.name.clone()
        }]
    );
}

/// Ours: a first version ramping from unversioned workers walks its steps to current (the
/// unversioned-poller check decides only how it starts).
pub async fn progressive_rollout_from_unversioned_pollers_walks_the_steps(w: &'static World) {
    let mut s = with_unversioned_pollers(w, "prog-unversioned-steps").await;
    let target = s.start(s.spec(progressive(5, "30s"), &image("v1"))).await;
    s.wait_status(&Expect::target(&target, Ramping).ramp(5.0))
        .await;
    // The pause is 30 s; the wait, 60 s from here.
    s.wait_status(&Expect::target(&target, Current).current(&target))
        .await;
}

/// `progressive-rollout-success-gate-expect-first-step`: (st) v0 current.
pub async fn progressive_rollout_success_gate_expect_first_step(w: &'static World) {
    let mut s = Scenario::new(w, "prog-success-gate").await;
    let (v0, target) = s
        .start_over_v0(s.gated_spec(progressive(5, "1h"), PASS))
        .await;
    let expect = Expect::target(&target, Ramping).ramp(5.0).current(&v0);
    s.wait_status(&expect).await;
    let closed = assert_passed_gate(&s, &target).await;
    let (_, ramp_changed) = s.routing_changed().await;
    assert!(
        ramp_changed >= closed,
        "{target} ramped at {ramp_changed:?}, before its gate completed at {closed:?}"
    );
    s.settle(&expect).await;
}

/// `progressive-rollout-with-failed-gate`: (st) v0 current; the target never ramps.
pub async fn progressive_rollout_with_failed_gate(w: &'static World) {
    let mut s = Scenario::new(w, "prog-failed-gate").await;
    let (v0, target) = s
        .start_over_v0(s.gated_spec(progressive(5, "1h"), FAIL))
        .await;
    let expect = gated_unpromoted(&target).current(&v0);
    s.wait_status(&expect).await;
    s.assert_failed_gate(&target, &expect).await;
}

/// Ours: gate input from a ConfigMap, then (for the next build) from a Secret, reaches the
/// gate workflow (`CheckInput` passes only on `"ok": true`) as its JSON argument; the Secret's
/// value never appears in the controller's logs, only its size.
pub async fn gate_input_from_config_map_and_secret(w: &'static World) {
    let mut s = Scenario::new(w, "gate-input-from").await;
    let token = format!(
        "gate-token-{:x}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    );
    let from_config_map = json!({"ok": true, "source": "configmap"});
    let from_secret = json!({"ok": true, "source": "secret", "token": token});
    let cm: ConfigMap = from_json(json!({
        "metadata": {"name": "gate-input"},
        "data": {"input.json": from_config_map.to_string()},
    }));
    Api::<ConfigMap>::namespaced(s.client.clone(), &s.ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("create ConfigMap: {e}"));
    let secret: Secret = from_json(json!({
        "metadata": {"name": "gate-input"},
        "stringData": {"input.json": from_secret.to_string()},
    }));
    Api::<Secret>::namespaced(s.client.clone(), &s.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("create Secret: {e}"));

    let mut rollout = all_at_once();
    rollout["gate"] = json!({
        "workflowType": CHECK_INPUT,
        "inputFrom": {"configMapKeyRef": {"name": "gate-input", "key": "input.json"}},
    });
    let v1 = s.start(s.spec(rollout, &image("v1"))).await;
    assert_promoted_after_gate(&s, &v1).await;
    assert_eq!(s.started_input(&s.gate_id(&v1)).await, from_config_map);

    // The next build takes its gate input from the Secret.
    let patch = json!({"spec": {
        "rollout": {"gate": {
            "workflowType": CHECK_INPUT,
            "inputFrom": {
                "configMapKeyRef": null,
                "secretKeyRef": {"name": "gate-input", "key": "input.json"},
            },
        }},
        "template": {"spec": {"containers": [{"name": "worker", "image": image("v2")}]}},
    }});
    let wd = s
        .wds()
        .patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patch to v2: {e}"));
    s.wd = Some(wd);
    let v2 = s.target_build_id();
    assert_ne!(v1, v2);
    common::wait_wd(&s.client, &s.ns, &s.name, "v2 rolled out", WAIT, |wd| {
        common::rolled_out(wd)
            && wd
                .status
                .as_ref()
                .and_then(|s| s.current_version.as_ref())
                .is_some_and(|c| c.base.build_id == v2)
    })
    .await;
    let id = s.gate_id(&v2);
    assert_gate_held_promotion(&s, &v2).await;
    assert_eq!(s.started_input(&id).await, from_secret);

    let logs = common::capture_logs();
    let text =
        String::from_utf8_lossy(&logs.lock().map(|l| l.clone()).unwrap_or_default()).into_owned();
    assert!(
        text.lines()
            .any(|l| l.contains(&id) && l.contains("bytes of input from a Secret")),
        "the controller did not log the start of {id}:\n{}",
        common::logs_about(&s.ns)
    );
    let leaks: Vec<&str> = text.lines().filter(|l| l.contains(&token)).collect();
    assert!(
        leaks.is_empty(),
        "the Secret's value is in the controller's logs:\n{}",
        leaks.join("\n")
    );
}
