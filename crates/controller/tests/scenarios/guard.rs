//! Rollouts that protect themselves (not in TWC): a ramp whose workers crash-loop is rolled
//! back, a build that never polls fails at its progress deadline, and the controls a person
//! uses mid-rollout (pause, promote, abort, retry) work and are acknowledged, and a ramp
//! step whose gate workflow fails is rolled back.

use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use twc_api::VersionStatus::Ramping;
use twc_api::conditions::{
    ABORTED, ANALYSIS_FAILED, PAUSED, PROGRESS_DEADLINE_EXCEEDED, PROGRESSING, ROLLED_BACK,
    STEP_GATE_FAILED, WORKERS_CRASH_LOOPING,
};
use twc_api::controls;

use crate::common::{self, World};
use crate::harness::{Expect, Scenario, image};

impl Scenario {
    /// Makes the WorkerDeployment's worker container run with `env` (after the older versions
    /// were made from the spec as created, so they behave).
    async fn misbehave(&mut self, env: Value) {
        let patched = self
            .wds()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Json::<()>(
                    serde_json::from_value(json!([
                        {"op": "add", "path": "/spec/template/spec/containers/0/env", "value": env}
                    ]))
                    .unwrap_or_else(|e| panic!("{e}")),
                ),
            )
            .await
            .unwrap_or_else(|e| panic!("patch the template: {e}"));
        self.wd = Some(patched);
    }

    /// Sets (or, with None, removes) annotation `key` on the WorkerDeployment.
    async fn annotate(&self, key: &str, value: Option<&str>) {
        self.wds()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("annotate {key}: {e}"));
    }

    /// Runs `twc <args>` against the test cluster as a person would; returns its stdout.
    /// With `via_kubectl`, as the kubectl plugin: `kubectl twc <args>`, with the binary on
    /// PATH as `kubectl-twc`.
    async fn twc(&self, w: &'static World, args: &[&str], via_kubectl: bool) -> String {
        let twc = twc_testenv::paths::workspace_binary("temporal-worker-controller", "twc")
            .unwrap_or_else(|e| panic!("{e}"));
        let kubeconfig = w.env.control_plane.kubeconfig_path.clone();
        let mut command = if via_kubectl {
            let dir = std::env::temp_dir().join(format!("kubectl-plugin-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
            let plugin = dir.join("kubectl-twc");
            if !plugin.exists() {
                std::os::unix::fs::symlink(&twc, &plugin).unwrap_or_else(|e| panic!("{e}"));
            }
            let path = format!(
                "{}:{}",
                dir.display(),
                std::env::var("PATH").unwrap_or_default()
            );
            let mut c = tokio::process::Command::new(twc_testenv::paths::kubectl());
            c.arg("twc").env("PATH", path);
            c
        } else {
            tokio::process::Command::new(twc)
        };
        let out = command
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .await
            .unwrap_or_else(|e| panic!("twc {args:?}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "twc {args:?} failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Starts workflow `Work(n)` on the task queue (Temporal routes it by the ramp).
    async fn start_work(&self, id: &str, n: u64) {
        use temporalio_common::protos::temporal::api::common::v1::{
            Payload, Payloads, WorkflowType,
        };
        use temporalio_common::protos::temporal::api::taskqueue::v1::TaskQueue;
        use temporalio_common::protos::temporal::api::workflowservice::v1::StartWorkflowExecutionRequest;
        let payload = Payload {
            metadata: [("encoding".to_string(), b"json/plain".to_vec())].into(),
            data: n.to_string().into_bytes(),
            ..Default::default()
        };
        let mut svc = self.temporal.workflow_service();
        svc.start_workflow_execution(temporalio_client::tonic::Request::new(
            StartWorkflowExecutionRequest {
                namespace: self.temporal_ns.clone(),
                workflow_id: id.to_string(),
                request_id: id.to_string(),
                workflow_type: Some(WorkflowType {
                    name: "Work".into(),
                }),
                task_queue: Some(TaskQueue {
                    name: self.name.clone(),
                    ..Default::default()
                }),
                input: Some(Payloads {
                    payloads: vec![payload],
                }),
                identity: crate::harness::SETUP_IDENTITY.into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_or_else(|e| panic!("start {id}: {e}"));
    }

    /// Waits for a Normal event with `reason` about the WorkerDeployment.
    async fn wait_normal(&self, reason: &str) -> String {
        self.wait_event_about("Normal", "WorkerDeployment", &self.name, reason)
            .await
    }

    /// Creates the WorkerDeployment from `spec` (image v2; its worker container run with
    /// `env`), and an older v1 made current by the test; then connects. Returns (v1, v2).
    async fn v1_current_then(&mut self, spec: Value, env: Option<Value>) -> (String, String) {
        self.create(spec).await;
        let v1 = self.existing_version(&image("v1"), 1).await;
        if let Some(env) = env {
            self.misbehave(env).await;
        }
        self.wait_registered(&[&v1]).await;
        self.set_current(&v1).await;
        self.connect().await;
        (v1, self.target_build_id())
    }

    /// After [`SETTLE`](crate::harness::SETTLE), Temporal still routes every new workflow to
    /// `build` (not ramped or promoted again).
    async fn stays_on(&self, build: &str) {
        tokio::time::sleep(crate::harness::SETTLE).await;
        let st = self.describe().await;
        assert_eq!(
            (
                st.current_build_id.as_deref(),
                st.ramping_build_id.as_deref()
            ),
            (Some(build), None)
        );
    }

    /// The failed version the status records: (build ID, reason, rolled back).
    async fn failed_version(&self) -> Option<(String, String, bool)> {
        self.get()
            .await
            .status
            .and_then(|s| s.failed_version)
            .map(|f| (f.build_id, f.reason, f.rolled_back))
    }
}

/// v1 current with its workers; v2 ramps to 50 %, then its workers crash every 8 s: the ramp is
/// cleared well before the 600 s deadline, v1 keeps all new work, v2 is marked
/// `WorkersCrashLooping` and `RolledBack`, and is not ramped again.
pub async fn a_crash_looping_ramp_is_rolled_back_before_its_deadline(w: &'static World) {
    let mut s = Scenario::new(w, "guard-crashloop").await;
    let env = json!([
        {"name": "WORKER_MODE", "value": "crash"},
        {"name": "WORKER_CRASH_AFTER_SECONDS", "value": "8"}
    ]);
    let steps = json!({"strategy": "Progressive", "steps": [
        {"rampPercentage": 50, "pauseDuration": "1h"}
    ]});
    let (v1, v2) = s
        .v1_current_then(s.spec(steps, &image("v2")), Some(env))
        .await;
    s.wait_temporal("v2 ramping", |st| {
        st.ramping_build_id.as_deref() == Some(v2.as_str())
    })
    .await;
    let ramped = Instant::now();
    let message = s
        .wait_condition(ROLLED_BACK, "True", WORKERS_CRASH_LOOPING)
        .await;
    assert!(message.contains("keep crashing"), "{message}");
    s.wait_temporal("ramp cleared", |st| {
        st.ramping_build_id.is_none() && st.current_build_id.as_deref() == Some(v1.as_str())
    })
    .await;
    let took = ramped.elapsed();
    println!(
        "crash-looping ramp: routing restored {:.1}s after the ramp started (first crash at 8 s)",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(120), "took {took:?}");
    assert_eq!(
        s.failed_version().await,
        Some((v2.clone(), WORKERS_CRASH_LOOPING.into(), true))
    );
    s.wait_warning(WORKERS_CRASH_LOOPING).await;
    s.wait_warning(ROLLED_BACK).await;
    // Not ramped again while the controller keeps reconciling.
    s.stays_on(&v1).await;
}

/// v1 current; v2 fails about half of its `Work` workflows. Progressive at 50 % for 30 s with
/// an analysis (at most 20 % failed, 4 samples): 40 workflows started during the step, about
/// half on v2; the ramp is rolled back (`AnalysisFailed`) by the step's end, v2 is never
/// promoted, and the status shows the step's counts.
pub async fn a_ramp_failing_half_its_workflows_is_rolled_back_at_the_first_step(w: &'static World) {
    let mut s = Scenario::new(w, "guard-analysis").await;
    let steps = json!({
        "strategy": "Progressive",
        "steps": [{"rampPercentage": 50, "pauseDuration": "30s"}],
        "analysis": {"maxFailurePercent": 20, "minSamples": 4}
    });
    let failing = json!([{"name": "WORKER_FAIL_PERCENT", "value": "50"}]);
    let (v1, v2) = s
        .v1_current_then(s.spec(steps, &image("v2")), Some(failing))
        .await;
    s.wait_temporal("v2 ramping", |st| {
        st.ramping_build_id.as_deref() == Some(v2.as_str())
    })
    .await;
    let ramped = Instant::now();
    for n in 0..40u64 {
        s.start_work(&format!("work-{n}"), n).await;
    }
    let message = s.wait_condition(ROLLED_BACK, "True", ANALYSIS_FAILED).await;
    assert!(
        message.contains("failed its analysis at step 1 (50%)"),
        "{message}"
    );
    s.wait_temporal("ramp cleared", |st| {
        st.ramping_build_id.is_none() && st.current_build_id.as_deref() == Some(v1.as_str())
    })
    .await;
    println!(
        "analysis: routing restored {:.1}s after the ramp started (30 s step)",
        ramped.elapsed().as_secs_f64()
    );
    let wd = s.get().await;
    let step = wd
        .status
        .and_then(|st| st.target_version)
        .and_then(|t| t.analysis.first().cloned())
        .unwrap_or_else(|| panic!("no analysis in the status"));
    assert_eq!(step.verdict, twc_api::AnalysisVerdict::Failed);
    assert!(
        step.closed >= 4 && step.failed * 5 > step.closed,
        "{step:?}"
    );
    s.wait_warning(ANALYSIS_FAILED).await;
    s.stays_on(&v1).await;
}

/// v1 current; AllAtOnce with an analysis for 5 minutes after promotion; v2 fails about half
/// of its `Work` workflows. Once v2 is current, 20 workflows go to it: v1 is current again
/// (`AnalysisFailed`, `RolledBack`) and v2 is not promoted again.
pub async fn an_all_at_once_promotion_failing_its_analysis_is_rolled_back(w: &'static World) {
    let mut s = Scenario::new(w, "guard-promoted").await;
    let rollout = json!({
        "strategy": "AllAtOnce",
        "analysis": {"maxFailurePercent": 20, "minSamples": 4, "afterPromotion": "5m"}
    });
    let failing = json!([{"name": "WORKER_FAIL_PERCENT", "value": "50"}]);
    let (v1, v2) = s
        .v1_current_then(s.spec(rollout, &image("v2")), Some(failing))
        .await;
    s.wait_temporal("v2 current", |st| {
        st.current_build_id.as_deref() == Some(v2.as_str())
    })
    .await;
    let promoted = Instant::now();
    for n in 0..20u64 {
        s.start_work(&format!("work-{n}"), n).await;
    }
    let message = s.wait_condition(ROLLED_BACK, "True", ANALYSIS_FAILED).await;
    assert!(message.contains("after its promotion"), "{message}");
    s.wait_temporal("v1 current again", |st| {
        st.current_build_id.as_deref() == Some(v1.as_str())
    })
    .await;
    println!(
        "analysis after promotion: v1 current again {:.1}s after v2's promotion",
        promoted.elapsed().as_secs_f64()
    );
    s.stays_on(&v1).await;
}

/// v1 current; v2's pods are ready but never poll: at its 20 s deadline the rollout fails with
/// `ProgressDeadlineExceeded` saying no worker polled, and v1 stays current. A retry clears
/// the mark and starts the deadline again, which then fails it again.
pub async fn a_build_that_never_polls_fails_at_its_deadline_until_retried(w: &'static World) {
    let mut s = Scenario::new(w, "guard-deadline").await;
    let mut spec = s.spec(crate::harness::all_at_once(), &image("v2"));
    spec["progressDeadlineSeconds"] = json!(20);
    s.create(spec).await;
    let v1 = s.existing_version(&image("v1"), 1).await;
    s.misbehave(json!([{"name": "WORKER_MODE", "value": "no-poll"}]))
        .await;
    s.wait_registered(&[&v1]).await;
    s.set_current(&v1).await;
    let started = Instant::now();
    s.connect().await;
    let message = s
        .wait_condition(PROGRESSING, "False", PROGRESS_DEADLINE_EXCEEDED)
        .await;
    let took = started.elapsed();
    assert!(
        message.contains("within 20s") && message.contains("no worker polled"),
        "{message}"
    );
    assert!(took >= Duration::from_secs(19), "failed after {took:?}");
    let note = s.wait_warning(PROGRESS_DEADLINE_EXCEEDED).await;
    assert!(note.contains("no worker polled"), "{note}");
    let v2 = s.target_build_id();
    assert_eq!(
        s.failed_version().await,
        Some((v2.clone(), PROGRESS_DEADLINE_EXCEEDED.into(), false))
    );
    assert_eq!(s.describe().await.current_build_id, Some(v1.clone()));

    s.annotate(controls::RETRY, Some("first")).await;
    s.wait_normal("RetryRequested").await;
    s.wait_condition(PROGRESSING, "True", "WaitingForPollers")
        .await;
    assert_eq!(s.failed_version().await, None);
    let again = Instant::now();
    s.wait_condition(PROGRESSING, "False", PROGRESS_DEADLINE_EXCEEDED)
        .await;
    assert!(
        again.elapsed() >= Duration::from_secs(15),
        "the deadline did not start again: {:?}",
        again.elapsed()
    );
}

/// Mid-rollout controls, through `twc` as a person uses it: v2 ramps at 10 % (a 1 h step);
/// `twc pause` holds it (`Progressing=False Paused`); `twc promote` makes it current at once,
/// pause or not; `twc abort` gives new work back to v1 (`RolledBack`, `Aborted`); `twc retry`
/// and `twc resume` bring v2 back as current. `kubectl twc status` shows each step.
pub async fn rollout_controls_work_mid_rollout(w: &'static World) {
    let mut s = Scenario::new(w, "guard-controls").await;
    let steps = json!({"strategy": "Progressive", "steps": [
        {"rampPercentage": 10, "pauseDuration": "1h"}
    ]});
    let (v1, v2) = s.v1_current_then(s.spec(steps, &image("v2")), None).await;
    s.wait_status(&Expect::target(&v2, Ramping).ramp(10.0).current(&v1))
        .await;
    let ns = s.ns.clone();
    let name = s.name.clone();
    let ctl = |verb: &'static str| [verb, "-n", ns.as_str(), name.as_str()];
    let line = s.twc(w, &["status", "-n", &ns], true).await;
    for word in [
        name.as_str(),
        v2.as_str(),
        v1.as_str(),
        "10%",
        "1/1",
        "Ramping",
    ] {
        assert!(
            line.contains(word),
            "{word} missing in `kubectl twc status`: {line}"
        );
    }

    s.twc(w, &ctl("pause"), false).await;
    s.wait_condition(PROGRESSING, "False", PAUSED).await;
    s.wait_normal("RolloutPaused").await;
    let detail = s.twc(w, &["status", "-n", &ns, &name], true).await;
    assert!(
        detail.contains("Controls:  paused") && detail.contains("RolloutPaused"),
        "{detail}"
    );

    s.twc(w, &ctl("promote"), false).await;
    s.wait_temporal("v2 promoted", |st| {
        st.current_build_id.as_deref() == Some(v2.as_str()) && st.ramping_build_id.is_none()
    })
    .await;
    s.wait_normal("PromotedOnRequest").await;

    let aborted = Instant::now();
    s.twc(w, &ctl("abort"), false).await;
    let message = s.wait_condition(ROLLED_BACK, "True", ABORTED).await;
    assert!(message.contains("aborted on request"), "{message}");
    s.wait_temporal("v1 current again", |st| {
        st.current_build_id.as_deref() == Some(v1.as_str())
    })
    .await;
    println!(
        "abort: v1 current again {:.1}s after `twc abort`",
        aborted.elapsed().as_secs_f64()
    );
    assert_eq!(
        s.failed_version().await,
        Some((v2.clone(), ABORTED.into(), true))
    );
    let detail = s.twc(w, &["status", "-n", &ns, &name], false).await;
    assert!(
        detail.contains(&format!("Failed:    {v2} Aborted, rolled back")),
        "{detail}"
    );

    // Retry while paused: the mark goes, routing waits for the resume.
    s.twc(w, &ctl("retry"), false).await;
    s.wait_normal("RetryRequested").await;
    // The event can come before the status that clears the mark: wait for the status.
    common::wait_wd(
        &s.client,
        &s.ns,
        &s.name,
        "the failed mark cleared",
        Duration::from_secs(60),
        |wd| {
            wd.status
                .as_ref()
                .is_some_and(|st| st.failed_version.is_none())
        },
    )
    .await;
    assert_eq!(s.describe().await.current_build_id, Some(v1.clone()));
    s.twc(w, &ctl("resume"), false).await;
    s.wait_normal("RolloutResumed").await;
    // v2 was current moments ago: a rollback to it, at once.
    s.wait_temporal("v2 current again", |st| {
        st.current_build_id.as_deref() == Some(v2.as_str())
    })
    .await;
    s.wait_condition(ROLLED_BACK, "False", twc_api::conditions::NOT_ROLLED_BACK)
        .await;
}

impl Scenario {
    /// Waits until the status lists a Completed gate run whose workflow ID has `part`.
    async fn wait_gate_completed(&self, part: &str) -> twc_api::WorkerDeployment {
        common::wait_wd(
            &self.client,
            &self.ns,
            &self.name,
            &format!("a gate run {part} completed"),
            Duration::from_secs(60),
            |wd| {
                step_gate_runs(wd, part)
                    .iter()
                    .any(|(_, st)| st == "Completed")
            },
        )
        .await
    }
}

/// The gate runs of the status's target whose workflow ID has `part`, with their statuses.
fn step_gate_runs(wd: &twc_api::WorkerDeployment, part: &str) -> Vec<(String, String)> {
    wd.status
        .iter()
        .flat_map(|s| s.target_version.iter())
        .flat_map(|t| t.test_workflows.iter())
        .filter(|r| r.workflow_id.contains(part))
        .map(|r| (r.workflow_id.clone(), format!("{:?}", r.status)))
        .collect()
}

/// v1 current; v2 ramps through two steps of 30 s, each with a gate workflow: the first
/// (`Succeed`) completes and the rollout moves on; the second (`Fail`) fails, and new work
/// goes back to v1 at once (`StepGateFailed`, `RolledBack`, a `GateWorkflowFailed` Warning).
/// After a retry the first step's gate runs again, under a new workflow ID.
pub async fn a_failed_step_gate_rolls_the_ramp_back(w: &'static World) {
    let mut s = Scenario::new(w, "guard-step-gate").await;
    let steps = json!({"strategy": "Progressive", "steps": [
        {"rampPercentage": 10, "pauseDuration": "30s", "gate": {"workflowType": "Succeed"}},
        {"rampPercentage": 50, "pauseDuration": "30s", "gate": {"workflowType": "Fail"}}
    ]});
    let (v1, v2) = s.v1_current_then(s.spec(steps, &image("v2")), None).await;
    s.wait_status(&Expect::target(&v2, Ramping).ramp(10.0).current(&v1))
        .await;
    let wd = s.wait_gate_completed("-step1").await;
    let first = step_gate_runs(&wd, "-step1");
    assert_eq!(
        first.len(),
        1,
        "one gate run per workflow task queue: {first:?}"
    );
    s.wait_temporal("v2 at the second step", |st| {
        st.ramping_build_id.as_deref() == Some(v2.as_str()) && st.ramp_percentage > 49.0
    })
    .await;
    let second_step = Instant::now();
    let message = s
        .wait_condition(ROLLED_BACK, "True", STEP_GATE_FAILED)
        .await;
    assert!(
        message.contains("of step 2 (50%)") && message.contains("ended Failed"),
        "{message}"
    );
    s.wait_temporal("ramp cleared", |st| {
        st.ramping_build_id.is_none() && st.current_build_id.as_deref() == Some(v1.as_str())
    })
    .await;
    println!(
        "step gate: routing restored {:.1}s after the second step began",
        second_step.elapsed().as_secs_f64()
    );
    assert_eq!(
        s.failed_version().await,
        Some((v2.clone(), STEP_GATE_FAILED.into(), true))
    );
    let note = s.wait_warning("GateWorkflowFailed").await;
    assert!(note.contains("-step2"), "{note}");
    s.stays_on(&v1).await;

    // A retry ramps again from the first step, whose gate runs anew.
    s.annotate(controls::RETRY, Some("1")).await;
    s.wait_temporal("v2 ramping again", |st| {
        st.ramping_build_id.as_deref() == Some(v2.as_str())
    })
    .await;
    let wd = s.wait_gate_completed("-step1-retry-").await;
    let again = step_gate_runs(&wd, "-step1");
    assert!(
        again.iter().all(|(id, _)| *id != first[0].0),
        "the retry reused the first run's ID: {again:?}"
    );
}

/// v1 current; v2's `Work` workflows each run a 120 s activity (a slow build). Progressive at
/// 50 % for 30 s with an analysis (min 4 samples): 12 workflows started during the step, about
/// half pinned to v2, none closed on it by the step's end, so the step is `Inconclusive` (an
/// event says so) and v2 is promoted, not failed. `twc status NAME` counts the workflows still
/// open on v2 through the WorkerDeployment's own connection.
pub async fn a_slow_build_is_not_judged_without_samples_and_shows_its_open_workflows(
    w: &'static World,
) {
    let mut s = Scenario::new(w, "guard-slow").await;
    let steps = json!({
        "strategy": "Progressive",
        "steps": [{"rampPercentage": 50, "pauseDuration": "30s"}],
        "analysis": {"maxFailurePercent": 20, "minSamples": 4}
    });
    let slow = json!([{"name": "WORKER_ACTIVITY_SECONDS", "value": "120"}]);
    let (v1, v2) = s
        .v1_current_then(s.spec(steps, &image("v2")), Some(slow))
        .await;
    s.wait_temporal("v2 ramping", |st| {
        st.ramping_build_id.as_deref() == Some(v2.as_str())
    })
    .await;
    for n in 0..12u64 {
        s.start_work(&format!("slow-{n}"), n).await;
    }
    let note = s.wait_normal("AnalysisInconclusive").await;
    assert!(note.contains("at 50%: 0 of 0"), "{note}");
    s.wait_temporal("v2 current", |st| {
        st.current_build_id.as_deref() == Some(v2.as_str())
    })
    .await;
    assert_eq!(s.failed_version().await, None);
    let detail = s.twc(w, &["status", "-n", &s.ns, &s.name], false).await;
    assert!(
        detail.contains("OPEN WORKFLOWS") && !detail.contains("not counted"),
        "{detail}"
    );
    let open = |build: &str| -> i64 {
        detail
            .lines()
            .find(|l| l.trim_start().starts_with(build))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no open count for {build}: {detail}"))
    };
    println!(
        "slow build: twc status counts {} open on v2, {} on v1 (12 started at 50 %)",
        open(&v2),
        open(&v1)
    );
    assert!(open(&v2) >= 1, "{detail}");
    assert_eq!(open(&v1), 0, "v1's workflows completed: {detail}");
}

/// v1 current; a healthy v2 ramps at 50 % for 30 s with an analysis (min 4 samples) and a
/// step gate (`Succeed`): 40 workflows started during the step, those on v2 all complete, the
/// step is `Passed` (an event says so), and v2 is promoted with nothing marked failed.
pub async fn a_healthy_build_passes_its_analysis_and_is_promoted(w: &'static World) {
    let mut s = Scenario::new(w, "guard-healthy").await;
    let steps = json!({
        "strategy": "Progressive",
        "steps": [{"rampPercentage": 50, "pauseDuration": "30s", "gate": {"workflowType": "Succeed"}}],
        "analysis": {"maxFailurePercent": 20, "minSamples": 4}
    });
    let (_, v2) = s.v1_current_then(s.spec(steps, &image("v2")), None).await;
    s.wait_temporal("v2 ramping", |st| {
        st.ramping_build_id.as_deref() == Some(v2.as_str())
    })
    .await;
    for n in 0..40u64 {
        s.start_work(&format!("work-{n}"), n).await;
    }
    let note = s.wait_normal("AnalysisPassed").await;
    assert!(note.contains("at 50%: 0 of"), "{note}");
    // Temporal is promoted before the status is written: wait for the status.
    s.wait_condition("Ready", "True", "RolloutComplete").await;
    let step = s
        .get()
        .await
        .status
        .and_then(|st| st.target_version)
        .and_then(|t| t.analysis.first().cloned())
        .unwrap_or_else(|| panic!("no analysis in the status"));
    println!(
        "healthy build: step 1 {} with {} of {} closed on v2 failed",
        step.verdict, step.failed, step.closed
    );
    assert_eq!((step.verdict.as_str(), step.failed), ("Passed", 0));
    assert_eq!(s.failed_version().await, None);
    let wd = s.get().await;
    assert!(
        crate::common::condition(&wd, ROLLED_BACK).is_none_or(|(st, _, _)| st == "False"),
        "{:?}",
        crate::common::condition(&wd, ROLLED_BACK)
    );
}
