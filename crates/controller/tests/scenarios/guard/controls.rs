//! A build that never polls fails at its progress deadline until retried, and the controls a
//! person uses mid-rollout (pause, promote, abort, retry, resume).

use std::time::{Duration, Instant};

use serde_json::json;
use twc_api::VersionStatus::Ramping;
use twc_api::conditions::{ABORTED, PAUSED, PROGRESS_DEADLINE_EXCEEDED, PROGRESSING, ROLLED_BACK};
use twc_api::controls;

use crate::common::{self, World};
use crate::harness::{Expect, Scenario, image};

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
    // A moment's rate limit by the dev server can stand in the state column: asked again.
    let words = [
        name.as_str(),
        v2.as_str(),
        v1.as_str(),
        "10%",
        "1/1",
        "Ramping",
    ];
    let mut line = String::new();
    for _ in 0..30 {
        line = s.twc(w, &["status", "-n", &ns], true).await;
        if words.iter().all(|word| line.contains(word)) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for word in words {
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
