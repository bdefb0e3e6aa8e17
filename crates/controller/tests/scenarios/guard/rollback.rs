//! Guards that roll a rollout back: a ramp whose workers crash-loop, and a build failing its
//! analysis at a ramp step or after an AllAtOnce promotion.

use std::time::{Duration, Instant};

use serde_json::json;
use twc_api::conditions::{ANALYSIS_FAILED, ROLLED_BACK, WORKERS_CRASH_LOOPING};

use crate::common::World;
use crate::harness::{Scenario, image};

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
