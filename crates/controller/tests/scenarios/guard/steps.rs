//! What a ramp step's gate workflow and analysis decide: a failed gate rolls the ramp back, a
//! step without samples is inconclusive, a healthy build passes.

use std::time::{Duration, Instant};

use serde_json::json;
use twc_api::VersionStatus::Ramping;
use twc_api::conditions::{ROLLED_BACK, STEP_GATE_FAILED};
use twc_api::controls;

use crate::common::{self, World};
use crate::harness::{Expect, Scenario, image};

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
