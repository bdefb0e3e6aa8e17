//! The report printed at the end of the run.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::faults::Fault;
use crate::{OBSERVE_EVERY, Report, Run};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) fn print_report(report: &Report, seed: u64, took: Duration, run: &Run<'_>) {
    println!("\n== twc-chaos report (seed {seed})");
    println!(
        "setup: {} WorkerDeployments x {} replica(s) of the example worker{} ({}), 2 controller replicas with leader election{}, one Temporal dev server on SQLite",
        run.names.len(),
        run.replicas,
        match run.names.get(1) {
            Some(name) => format!(
                " ({name} in worker groups {}, each of that many)",
                crate::groups::GROUPS.join(" and ")
            ),
            None => String::new(),
        },
        if run.env.node().is_some() {
            "containers under containerd and a real kubelet"
        } else {
            "processes of the pod runner"
        },
        if run.namespace_scoped {
            " installed namespace-scoped (a ServiceAccount with the generated namespaced RBAC, watching the run's namespace)"
        } else {
            ""
        }
    );
    println!(
        "rollouts completed: {} in {:.0} s ({} more converged only after the {} s bound, under faults); pinned workflows started: {} ({} with their own version seen at start, checked at completion); observations: {} (every {} ms), reads skipped while a server restarted: {}",
        report.rollouts,
        took.as_secs_f64(),
        report.slow,
        run.converge.as_secs(),
        report.pinned.len(),
        report.pinned.iter().filter(|(_, _, v)| v.is_some()).count(),
        report.observations,
        OBSERVE_EVERY.as_millis(),
        report.read_errors
    );
    let (requests, conflicts, errors) = run.api_proxy.counts();
    println!(
        "apiserver proxy: {requests} requests of the controllers, {conflicts} answered 409 without being served, {errors} answered 500 after being served"
    );
    println!(
        "watch: {} changes of Deployments seen ({} watch errors while the apiserver restarted)",
        report.watched, report.watch_errors
    );
    println!(
        "faults, the time from each until every WorkerDeployment was at its spec's target, and the violations seen after each (until the next):"
    );
    println!(
        "  {:<38} {:>5} {:>8} {:>8} {:>4} {:>4} {:>4} {:>4} {:>4}",
        "kind", "count", "p50 s", "p99 s", "I1", "I2", "I3", "I4", "I5"
    );
    let kinds = Fault::of_run(run.env.node().is_some(), run.namespace_scoped);
    let rows = table(report);
    for kind in kinds {
        let mut times: Vec<Duration> = report
            .faults
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .filter_map(|(_, _, t)| *t)
            .collect();
        let count = report.faults.iter().filter(|(k, _, _)| *k == kind).count();
        times.sort();
        let v = rows.get(&Some(kind)).copied().unwrap_or_default();
        println!(
            "  {:<38} {:>5} {:>8.1} {:>8.1} {:>4} {:>4} {:>4} {:>4} {:>4}",
            kind.name(),
            count,
            percentile(&times, 0.5).as_secs_f64(),
            percentile(&times, 0.99).as_secs_f64(),
            v[0],
            v[1],
            v[2],
            v[3],
            v[4]
        );
    }
    let before = rows.get(&None).copied().unwrap_or_default();
    for (label, v) in [
        ("(before any fault)", before),
        ("(after the faults stopped)", after_faults(report)),
    ] {
        println!(
            "  {label:<38} {:>5} {:>8} {:>8} {:>4} {:>4} {:>4} {:>4} {:>4}",
            "", "", "", v[0], v[1], v[2], v[3], v[4]
        );
    }
    println!(
        "Deployments of versions a move left behind, deleted by hand once drained where they poll (docs/safety.md): {}",
        report.deleted_by_hand
    );
    println!(
        "worker deployments left where a WorkerDeployment moved away from (not cleaned up there, docs/safety.md): {}",
        report.left_behind.len()
    );
    for note in &report.left_behind {
        println!("    {note}");
    }
    if run.namespace_scoped {
        let deletions = &report.namespace_deletions;
        println!(
            "watched namespace deleted and created again: {} times",
            deletions.len()
        );
        for d in deletions {
            println!(
                "    gone after {:.1} s; {} pinned workflows lost their workers with it (terminated, not judged); every WorkerDeployment at its target {}",
                d.gone_after.as_secs_f64(),
                d.lost_pinned,
                d.converged_after
                    .map_or("not within the bound".to_string(), |t| format!(
                        "{:.1} s after it was created again",
                        t.as_secs_f64()
                    ))
            );
        }
    }
    let (renewals, in_time, longest) = run.renewals.counts();
    println!(
        "credential restarts (I5): pace {} per place; {renewals} renewals of the Secret, {in_time} with every running worker on the new credentials in time (the longest took {:.1} s; the deadline: the old certificate's expiry, at most {} s after)",
        run.restart_pace,
        longest.as_secs_f64(),
        crate::restarts::RENEWAL_DEADLINE.as_secs()
    );
    for invariant in INVARIANTS {
        let v = report.violations.get(invariant).map_or(0, Vec::len);
        println!("invariant {invariant}: {v} violations");
        for what in report
            .violations
            .get(invariant)
            .into_iter()
            .flatten()
            .take(10)
        {
            println!("    {what}");
        }
    }
}

const INVARIANTS: [&str; 5] = ["I1", "I2", "I3", "I4", "I5"];

fn column(invariant: &str) -> Option<usize> {
    INVARIANTS.iter().position(|i| *i == invariant)
}

/// Violations seen while the faults went on, by the fault injected last before each (None:
/// before the first fault).
fn table(report: &Report) -> BTreeMap<Option<Fault>, [usize; 5]> {
    let mut rows: BTreeMap<Option<Fault>, [usize; 5]> = BTreeMap::new();
    for (invariant, at) in &report.violated_at {
        if report.faults_ended.is_some_and(|end| *at >= end) {
            continue;
        }
        let last = report
            .faults
            .iter()
            .filter(|(_, injected, _)| injected <= at)
            .max_by_key(|(_, injected, _)| *injected)
            .map(|(kind, _, _)| *kind);
        if let Some(c) = column(invariant) {
            rows.entry(last).or_default()[c] += 1;
        }
    }
    rows
}

/// Violations seen once the faults stopped (convergence, pinned workflows, deletion).
fn after_faults(report: &Report) -> [usize; 5] {
    let mut row = [0; 5];
    for (invariant, at) in &report.violated_at {
        if report.faults_ended.is_some_and(|end| *at >= end)
            && let Some(c) = column(invariant)
        {
            row[c] += 1;
        }
    }
    row
}
