//! The rollout's guard: when a target build has failed (its progress deadline passed, its
//! workers crash-loop, its analysis found too many failed workflows, a ramp step's gate did
//! not complete, a person aborted it), the rollout controls a person set
//! (pause, promote, abort, retry), and since when the target is the target. Pure: read from
//! the WorkerDeployment (its annotations and last status) and what was observed.
//!
//! A failed build gets no new workflows: a ramp to it is cleared at once, and an aborted current
//! version gives its place back to the version that was current before it. Its workers keep
//! running (pinned workflows may be on it) until the template changes or a retry clears the
//! mark.

use std::time::{Duration, SystemTime};

use kube::ResourceExt;
use twc_api::conditions as reason;
use twc_api::{
    AnalysisVerdict, RolloutControls, StepAnalysis, VersionStatus, WorkerDeployment, controls,
};

use super::{Observed, PodTrouble, status_of, workers_up};

/// A container restarted this many times and waiting in `CrashLoopBackOff` fails the build
/// before its deadline: the kubelet itself says it keeps crashing.
pub const CRASH_LOOP_RESTARTS: i32 = 3;

/// The controls as the annotations set them, against what the status says was acted on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Controls {
    pub paused: bool,
    /// The build `temporal.io/promote` names, unless it was promoted on request already
    /// (a build is promoted on request once: after an abort and a retry, it is not again).
    pub promote: Option<String>,
    /// A `temporal.io/abort` value not acted on yet.
    pub abort: Option<String>,
    /// A `temporal.io/retry` value not acted on yet.
    pub retry: Option<String>,
}

/// The value of control annotation `key` on `wd`, trimmed; None when unset or empty.
pub fn control_value(wd: &WorkerDeployment, key: &str) -> Option<String> {
    wd.annotations()
        .get(key)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Reads the controls of `wd`.
pub fn controls(wd: &WorkerDeployment) -> Controls {
    let acted = wd
        .status
        .as_ref()
        .and_then(|s| s.controls.clone())
        .unwrap_or_default();
    let value = |key: &str| control_value(wd, key);
    Controls {
        paused: value(controls::PAUSED).is_some_and(|v| v.eq_ignore_ascii_case("true")),
        promote: value(controls::PROMOTE).filter(|v| acted.promoted_build_id.as_ref() != Some(v)),
        abort: value(controls::ABORT).filter(|v| acted.abort.as_ref() != Some(v)),
        retry: value(controls::RETRY).filter(|v| acted.retry.as_ref() != Some(v)),
    }
}

/// A failed target build.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub build_id: String,
    /// One of the reasons in [`twc_api::conditions`].
    pub reason: &'static str,
    pub message: String,
    pub at: SystemTime,
    /// New workflows had reached it and were routed back.
    pub rolled_back: bool,
    /// Found by this reconcile (not carried from the status).
    pub new: bool,
}

/// What the guard decided before routing.
#[derive(Clone, Debug, PartialEq)]
pub struct Guard {
    pub controls: Controls,
    /// Since when the target is the target (the deadline counts from here).
    pub target_since: SystemTime,
    pub failure: Option<Failure>,
    /// What the target still waits for, for people (its pods' trouble).
    pub waiting: Option<String>,
    /// When the deadline falls, if it is still ahead.
    pub deadline_at: Option<SystemTime>,
    /// What the status records of the controls once this plan is carried out.
    pub acted: RolloutControls,
    /// The target's analysis per step, this step's updated.
    pub analysis: Vec<StepAnalysis>,
    /// When to count again while a step's analysis runs.
    pub analysis_at: Option<SystemTime>,
}

/// How often a ramp step's analysis is counted while the step runs (failures show before its
/// end).
pub const ANALYSIS_EVERY: Duration = Duration::from_secs(30);

/// The verdict on the current ramp step of `target`, from what was counted: Failed as soon as
/// enough workflows closed with too many failures, else Running until the step ends, then
/// Passed, or Inconclusive with too few.
pub fn analyse(wd: &WorkerDeployment, target: &str, observed: &Observed) -> Option<StepAnalysis> {
    let config = wd.spec.rollout.analysis.as_ref()?;
    let counted = observed.target.analysis.as_ref()?;
    let state = &observed.temporal;
    let steps = &wd.spec.rollout.steps;
    let (index, ramp, ended) = if state.current_build_id.as_deref() == Some(target) {
        // The window after promotion.
        let (since, end) = super::promoted_window(wd, target, state, observed.now)?;
        if counted.since != Some(since) {
            return None;
        }
        (steps.len(), 100, observed.now >= end)
    } else {
        let index = super::step_index(steps, state.ramp_percentage);
        let step = steps.get(index)?;
        if counted.since != state.ramp_changed_at {
            // Counted for another step.
            return None;
        }
        let pause =
            twc_api::duration::parse(&step.pause_duration).unwrap_or(Duration::from_secs(30));
        let ended = state
            .ramp_changed_at
            .is_none_or(|since| observed.now >= since + pause);
        (index, step.ramp_percentage, ended)
    };
    let enough = counted.closed >= i64::from(config.min_samples.max(1));
    let too_many = counted.failed * 100 > i64::from(config.max_failure_percent) * counted.closed;
    let verdict = match (enough, too_many, ended) {
        (true, true, _) => AnalysisVerdict::Failed,
        (_, _, false) => AnalysisVerdict::Running,
        (true, false, true) => AnalysisVerdict::Passed,
        (false, _, true) => AnalysisVerdict::Inconclusive,
    };
    Some(StepAnalysis {
        step: i32::try_from(index).unwrap_or(i32::MAX),
        ramp_percentage: ramp,
        closed: counted.closed,
        failed: counted.failed,
        failed_percent: (counted.failed * 100)
            .checked_div(counted.closed)
            .unwrap_or(0),
        verdict,
        checked_at: crate::conditions::time(observed.now),
    })
}

pub fn failure_reason(reason: &str) -> &'static str {
    match reason {
        reason::WORKERS_CRASH_LOOPING => reason::WORKERS_CRASH_LOOPING,
        reason::ABORTED => reason::ABORTED,
        reason::ANALYSIS_FAILED => reason::ANALYSIS_FAILED,
        reason::STEP_GATE_FAILED => reason::STEP_GATE_FAILED,
        _ => reason::PROGRESS_DEADLINE_EXCEEDED,
    }
}

/// The progress deadline of `wd`; None when it has none (0 or less).
pub fn deadline(wd: &WorkerDeployment) -> Option<Duration> {
    wd.spec
        .rollout_deadline_seconds()
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// Assesses target `target` of `wd`. A failed gate before traffic (`rollout.gate`) is not a
/// failure here: as in TWC, it holds the build back before any work reaches it (see the
/// planner's gate verdict). A failed ramp step's gate is: work reached the build.
pub fn assess(wd: &WorkerDeployment, target: &str, observed: &Observed) -> Guard {
    let now = observed.now;
    let mut controls = controls(wd);
    let previous = wd.status.clone().unwrap_or_default();
    let mut acted = previous.controls.clone().unwrap_or_default();
    acted.paused = controls.paused;
    // A promotion asked for is done once its build is current, whoever made it so and
    // whether or not the status that recorded it was written (the write can fail after the
    // routing change): without this, an abort and a retry would promote the build again.
    if let Some(build) = controls
        .promote
        .take_if(|b| observed.temporal.current_build_id.as_ref() == Some(b))
    {
        acted.promoted_build_id = Some(build);
    }
    if let Some(r) = &controls.retry {
        acted.retry = Some(r.clone());
    }
    if let Some(a) = &controls.abort {
        acted.abort = Some(a.clone());
    }
    let state = &observed.temporal;
    let current = state.current_build_id.as_deref() == Some(target);
    let ramping = state.ramping_build_id.as_deref() == Some(target);

    let same_target = previous
        .target_version
        .as_ref()
        .is_some_and(|t| t.base.build_id == target);
    let since = previous
        .target_version
        .as_ref()
        .filter(|_| same_target)
        .and_then(|t| t.target_since.as_ref())
        .map(|t| SystemTime::from(t.0));
    // A retry starts the deadline again, and so does a resume (it does not run while paused).
    let resumed = !controls.paused && previous.controls.as_ref().is_some_and(|c| c.paused);
    let target_since = match since {
        Some(s) if controls.retry.is_none() && !resumed => s,
        _ => now,
    };
    let carried = previous
        .failed_version
        .filter(|f| f.build_id == target && controls.retry.is_none())
        .map(|f| Failure {
            build_id: f.build_id,
            reason: failure_reason(&f.reason),
            message: f.message,
            at: f.failed_at.map(|t| SystemTime::from(t.0)).unwrap_or(now),
            rolled_back: f.rolled_back,
            new: false,
        });

    let d = observed.deployments.get(target);
    let up = workers_up(&observed.deployments, target);
    let registered = status_of(state, target) != VersionStatus::NotRegistered;
    let troubles = &observed.target_pods;
    let waiting = (!up || !registered)
        .then(|| describe_troubles(troubles))
        .flatten();
    let fail = |reason: &'static str, message: String| Failure {
        build_id: target.to_string(),
        reason,
        message,
        at: now,
        rolled_back: false,
        new: true,
    };
    let deadline = deadline(wd);
    // Crash loops fail a build early only while the current version's workers stay up: when
    // every version crashes (Temporal or the network is down), the build is not to blame.
    let others_up = state
        .current_build_id
        .as_deref()
        .is_some_and(|c| c != target && workers_up(&observed.deployments, c));
    let step_analysis = if ramping || current {
        analyse(wd, target, observed)
    } else {
        None
    };
    let mut analysis: Vec<StepAnalysis> = previous
        .target_version
        .as_ref()
        .filter(|_| same_target)
        .map(|t| t.analysis.clone())
        .unwrap_or_default();
    if let Some(a) = &step_analysis {
        analysis.retain(|p| p.step != a.step);
        analysis.push(a.clone());
        analysis.sort_by_key(|p| p.step);
    }
    let analysis_at = step_analysis
        .as_ref()
        .filter(|a| a.verdict == AnalysisVerdict::Running)
        .map(|_| now + ANALYSIS_EVERY);
    // Scaled to zero on purpose: every group's Deployment, as the spec asks.
    let stopped = d.is_some_and(|d| d.spec_replicas == Some(0))
        && wd.spec.group_views().iter().all(|g| g.replicas == Some(0));
    let mut deadline_at = None;
    let found = if carried.is_some() {
        None
    } else if let Some(token) = &controls.abort {
        Some(fail(
            reason::ABORTED,
            format!(
                "buildID {target} was aborted on request ({} = {token:?})",
                controls::ABORT
            ),
        ))
    } else if let Some(a) = step_analysis
        .as_ref()
        .filter(|a| a.verdict == AnalysisVerdict::Failed)
    {
        let config = wd.spec.rollout.analysis.clone().unwrap_or_default();
        let when = if current {
            "after its promotion".to_string()
        } else {
            format!("at step {} ({}%)", a.step + 1, a.ramp_percentage)
        };
        Some(fail(
            reason::ANALYSIS_FAILED,
            format!(
                "buildID {target} failed its analysis {when}: {} of the {} workflows closed on it since failed, timed out or were terminated (more than {}%)",
                a.failed, a.closed, config.max_failure_percent
            ),
        ))
    } else if let Some(why) = super::failed_step_gate(wd, target, observed) {
        Some(fail(
            reason::STEP_GATE_FAILED,
            format!("buildID {target} failed a ramp step's gate: {why}"),
        ))
    } else if current {
        None
    } else if let Some(crash) = troubles
        .iter()
        .find(|t| t.reason == "CrashLoopBackOff" && t.restarts >= CRASH_LOOP_RESTARTS)
        .filter(|_| others_up)
    {
        Some(fail(
            reason::WORKERS_CRASH_LOOPING,
            format!("the workers of buildID {target} keep crashing: {crash}"),
        ))
    } else if let (Some(limit), Some(d), false, false) = (deadline, d, controls.paused, stopped) {
        if ramping {
            // Routed to: how long it may stay unavailable.
            match d.unavailable_since {
                Some(t) if now >= t + limit => Some(fail(
                    reason::PROGRESS_DEADLINE_EXCEEDED,
                    format!(
                        "buildID {target} has been unavailable for more than {}s while ramping at {}%{}",
                        limit.as_secs(),
                        state.ramp_percentage,
                        waiting
                            .as_deref()
                            .map(|w| format!(": {w}"))
                            .unwrap_or_default()
                    ),
                )),
                Some(t) => {
                    deadline_at = Some(t + limit);
                    None
                }
                None => None,
            }
        } else if !up || !registered {
            if now >= target_since + limit {
                let missing = if !up {
                    match &waiting {
                        Some(w) => format!("its pods are not ready: {w}"),
                        None => format!(
                            "{} of {} pods are ready",
                            d.ready_replicas,
                            d.spec_replicas.unwrap_or(d.replicas)
                        ),
                    }
                } else {
                    format!(
                        "{} pods are ready but no worker polled Temporal namespace {} with this build ID (check the workers' task queues and their TEMPORAL_* settings)",
                        d.ready_replicas, wd.spec.worker_options.temporal_namespace
                    )
                };
                Some(fail(
                    reason::PROGRESS_DEADLINE_EXCEEDED,
                    format!(
                        "buildID {target} did not progress within {}s: {missing}",
                        limit.as_secs()
                    ),
                ))
            } else {
                deadline_at = Some(target_since + limit);
                None
            }
        } else {
            None
        }
    } else {
        None
    };
    Guard {
        controls,
        target_since,
        failure: carried.or(found),
        waiting,
        deadline_at,
        acted,
        analysis,
        analysis_at,
    }
}

/// The first container's trouble, and how many more; None without trouble.
fn describe_troubles(troubles: &[PodTrouble]) -> Option<String> {
    let first = troubles.first()?;
    Some(match troubles.len() - 1 {
        0 => first.to_string(),
        more => format!("{first} (and {more} more)"),
    })
}

/// The version new workflows go back to when current `target` is aborted: the one current
/// most recently before it, with its workers up.
pub fn previous_current(observed: &Observed, target: &str) -> Option<String> {
    observed
        .temporal
        .versions
        .iter()
        .filter(|(b, _)| b.as_str() != target)
        .filter(|(b, _)| workers_up(&observed.deployments, b))
        .filter_map(|(b, v)| v.last_current_at.map(|t| (t, b)))
        .max()
        .map(|(_, b)| b.clone())
}

/// The status record of a failure.
pub fn record(f: &Failure) -> twc_api::FailedVersion {
    twc_api::FailedVersion {
        build_id: f.build_id.clone(),
        reason: f.reason.to_string(),
        message: f.message.clone(),
        failed_at: crate::conditions::time(f.at),
        rolled_back: f.rolled_back,
    }
}
