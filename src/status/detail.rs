//! `twc status NAME`: everything about one WorkerDeployment, rendered (pure).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::SystemTime;

use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use twc_api::{VersionStatus, WorkerDeployment, controls};

use super::{columns, short, step};

/// Everything about one WorkerDeployment, and its last ten events.
/// Everything about one WorkerDeployment, with the open workflows per version as counted by
/// [`super::open_workflows`].
pub fn detail(
    wd: &WorkerDeployment,
    events: &[Event],
    open: &Result<BTreeMap<String, i64>, String>,
    now: SystemTime,
) -> String {
    let status = wd.status.clone().unwrap_or_default();
    let mut o = String::new();
    let ns = wd.namespace().unwrap_or_default();
    let _ = writeln!(o, "Name:      {ns}/{}", wd.name_any());
    let rollout = &wd.spec.rollout;
    let steps: Vec<String> = rollout
        .steps
        .iter()
        .map(|s| {
            let gate = s
                .gate
                .as_ref()
                .map(|g| format!(" with gate {}", g.workflow_type))
                .unwrap_or_default();
            format!("{}% for {}{gate}", s.ramp_percentage, s.pause_duration)
        })
        .collect();
    let _ = writeln!(
        o,
        "Strategy:  {:?}{}{}",
        rollout.strategy,
        if steps.is_empty() {
            String::new()
        } else {
            format!(" ({})", steps.join(", "))
        },
        rollout
            .gate
            .as_ref()
            .map(|g| format!(", gate {}", g.workflow_type))
            .unwrap_or_default()
    );
    if let Some(t) = &status.target_version {
        let mut line = format!("Target:    {} {:?}", t.base.build_id, t.base.status);
        if t.base.status == VersionStatus::Ramping
            && let Some(r) = t.ramp_percentage
        {
            let _ = write!(line, " at {r}%");
        }
        if let Some((i, n, left)) = step(wd, now) {
            let _ = write!(line, ", step {} of {n}, {} left", i + 1, short(left));
        }
        if let Some(since) = &t.target_since {
            let age = now
                .duration_since(SystemTime::from(since.0))
                .unwrap_or_default();
            let _ = write!(line, ", target for {}", short(age));
        }
        let _ = writeln!(o, "{line}");
    }
    if let Some(c) = &status.current_version {
        let _ = writeln!(o, "Current:   {}", c.base.build_id);
    }
    if let Some(f) = &status.failed_version {
        let _ = writeln!(
            o,
            "Failed:    {} {}{}: {}",
            f.build_id,
            f.reason,
            if f.rolled_back { ", rolled back" } else { "" },
            f.message
        );
    }
    if let Some(t) = &status.target_version
        && !t.analysis.is_empty()
    {
        let _ = writeln!(o, "Analysis:");
        for a in &t.analysis {
            let step = if usize::try_from(a.step).is_ok_and(|s| s >= rollout.steps.len()) {
                "after promotion".to_string()
            } else {
                format!("step {} at {}%", a.step + 1, a.ramp_percentage)
            };
            let _ = writeln!(
                o,
                "  {step}: {} ({} of {} closed failed, {}%)",
                a.verdict, a.failed, a.closed, a.failed_percent
            );
        }
    }
    let annotations = wd.annotations();
    let mut held = Vec::new();
    if annotations
        .get(controls::PAUSED)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        held.push(format!(
            "paused ({}){}",
            controls::PAUSED,
            if status.controls.as_ref().is_some_and(|c| c.paused) {
                ""
            } else {
                ", not acknowledged yet"
            }
        ));
    }
    if let Some(b) = status
        .controls
        .as_ref()
        .and_then(|c| c.promoted_build_id.as_ref())
    {
        held.push(format!("promoted {b} on request"));
    }
    if !held.is_empty() {
        let _ = writeln!(o, "Controls:  {}", held.join("; "));
    }
    if let Some(t) = &status.last_rollout {
        o.push_str(&timeline(t));
    }
    let _ = writeln!(o, "Conditions:");
    for c in &status.conditions {
        let _ = writeln!(
            o,
            "  {:<14} {:<6} {}: {}",
            c.type_, c.status, c.reason, c.message
        );
    }
    let _ = writeln!(o, "Versions:");
    let mut rows = vec![vec![
        "  BUILD ID".to_string(),
        "ROLE".into(),
        "STATUS".into(),
        "DEPLOYMENT".into(),
        "DRAINED FOR".into(),
        "OPEN WORKFLOWS".into(),
    ]];
    let open_on = |b: &twc_api::BaseWorkerDeploymentVersion| match open {
        Ok(counts) => counts
            .get(&b.build_id)
            .map(ToString::to_string)
            .unwrap_or_else(|| "-".into()),
        Err(_) => "?".into(),
    };
    let drained = |d: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        d.as_ref()
            .map(|t| {
                short(
                    now.duration_since(SystemTime::from(t.0))
                        .unwrap_or_default(),
                )
            })
            .unwrap_or_else(|| "-".into())
    };
    // With worker groups, every group's Deployment.
    let deployment = |b: &twc_api::BaseWorkerDeploymentVersion| {
        let groups: Vec<String> = b
            .worker_groups
            .iter()
            .filter_map(|g| g.deployment.as_ref()?.name.clone())
            .collect();
        b.deployment
            .as_ref()
            .and_then(|d| d.name.clone())
            .or_else(|| (!groups.is_empty()).then(|| groups.join(",")))
            .unwrap_or_else(|| "-".into())
    };
    if let Some(t) = &status.target_version {
        rows.push(vec![
            format!("  {}", t.base.build_id),
            "target".into(),
            format!("{:?}", t.base.status),
            deployment(&t.base),
            "-".into(),
            open_on(&t.base),
        ]);
    }
    if let Some(c) = &status.current_version
        && status
            .target_version
            .as_ref()
            .is_none_or(|t| t.base.build_id != c.base.build_id)
    {
        rows.push(vec![
            format!("  {}", c.base.build_id),
            "current".into(),
            format!("{:?}", c.base.status),
            deployment(&c.base),
            "-".into(),
            open_on(&c.base),
        ]);
    }
    for d in &status.deprecated_versions {
        rows.push(vec![
            format!("  {}", d.base.build_id),
            "older".into(),
            format!("{:?}", d.base.status),
            deployment(&d.base),
            drained(&d.drained_since),
            open_on(&d.base),
        ]);
    }
    o.push_str(&columns(&rows));
    if let Err(why) = open {
        let _ = writeln!(o, "  (open workflows not counted: {why})");
    }
    let mut events: Vec<&Event> = events.iter().collect();
    let at = |e: &Event| {
        e.series
            .as_ref()
            .map(|s| SystemTime::from(s.last_observed_time.0))
            .or_else(|| e.event_time.as_ref().map(|t| SystemTime::from(t.0)))
            .or_else(|| {
                e.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| SystemTime::from(t.0))
            })
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    events.sort_by_key(|e| at(e));
    let _ = writeln!(o, "Events:");
    let skip = events.len().saturating_sub(10);
    for e in events.into_iter().skip(skip) {
        let age = now.duration_since(at(e)).unwrap_or_default();
        let _ = writeln!(
            o,
            "  {:>6} ago  {:<7} {:<22} {}",
            short(age),
            e.type_.as_deref().unwrap_or_default(),
            e.reason.as_deref().unwrap_or_default(),
            e.note.as_deref().unwrap_or_default()
        );
    }
    o
}

/// The last rollout's phases, each as the time since the changed template was seen (and
/// since the phase before), the phases not reached yet left out.
fn timeline(t: &twc_api::RolloutTimeline) -> String {
    let mut o = String::new();
    let from = t
        .previous_build_id
        .as_deref()
        .map(|p| format!(" (from {p})"))
        .unwrap_or_default();
    let _ = writeln!(o, "Last rollout: {}{from}", t.build_id);
    let start = t.spec_seen.as_ref().map(|s| s.0);
    let mut before = start;
    for (name, at) in t.phases() {
        let Some(at) = at.map(|a| a.0) else {
            continue;
        };
        let since = |from: Option<k8s_openapi::jiff::Timestamp>| {
            from.map(|f| {
                (at - f)
                    .total(k8s_openapi::jiff::Unit::Second)
                    .unwrap_or(0.0)
            })
        };
        let line = match (since(start), since(before)) {
            (Some(total), Some(step)) if name != "spec seen" => {
                format!("+{total:.3} s (+{step:.3} s)")
            }
            _ => at.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        };
        let _ = writeln!(o, "  {name:<20} {line}");
        before = Some(at);
    }
    o
}
