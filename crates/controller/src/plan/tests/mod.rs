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
    build_id::build_id(wd.spec.pod_template(), None)
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
        template_digest: build_id::template_digest(wd.spec.pod_template()),
    }
}

/// At `t(60)`: `old` current and running, `wd`'s target registered (Inactive) with its
/// Deployment up; returns the target's build ID.
fn registered_beside_current(wd: &WorkerDeployment) -> (String, World) {
    let target = target_of(wd);
    let w = world(wd)
        .at(t(60))
        .deployment("old", Some(1))
        .version("old", VersionStatus::Current)
        .current("old")
        .deployment(&target, Some(1))
        .version(&target, VersionStatus::Inactive);
    (target, w)
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
            group: twc_api::DEFAULT_GROUP.into(),
            spec_replicas: replicas,
            replicas: replicas.unwrap_or(1),
            ready_replicas: replicas.unwrap_or(1),
            available_replicas: replicas.unwrap_or(1),
            available_since: Some(t(0)),
            unavailable_since: None,
            connection_hash: Some(deployment::connection_hash(&conn())),
            auth: Some(deployment::auth_of(&conn())),
            template_digest: Some(self.template_digest.clone()),
            credentials_digest: None,
            temporal_namespace: Some("default".into()),
            temporal_address: Some(conn().host_port),
            tls_server_name: None,
            generation: Some(1),
            observed_generation: Some(1),
            updated_replicas: replicas.unwrap_or(1),
            restarted_at: None,
            oldest_pod: None,
            credentials_not_after: None,
            // As the apiserver stores a Deployment created without one.
            strategy: Some(twc_api::deployment_strategy::defaulted(&Default::default())),
            min_ready_seconds: None,
            progress_deadline_seconds: Some(600),
            revision_history_limit: Some(10),
            uid: Some(format!("uid-{build}")),
            resource_version: Some("1".into()),
            members: Vec::new(),
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
        self.observed
            .autoscaled
            .insert(twc_api::DEFAULT_GROUP.into());
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

fn gate_run(queue: &str, status: WorkflowExecutionStatus) -> WorkflowExecution {
    WorkflowExecution {
        workflow_id: format!("test-ns/w:b-{queue}"),
        run_id: "run".into(),
        status,
        task_queue: queue.into(),
    }
}

/// The pace after `p` was planned from `o`, at the production intervals.
fn paced(wd: &WorkerDeployment, o: &Observed, p: &Plan) -> crate::plan::pace::Pace {
    crate::plan::pace::pace(wd, o, p, &crate::config::Intervals::default())
}

use crate::plan::pace::Reuse;

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

mod build_ids;
mod credentials;
mod deployments;
mod gates;
mod groups;
mod guarded;
mod invariants;
mod paced;
mod routing;
