//! The report printed at the end of the run.

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
        "setup: {} WorkerDeployments x {} replica(s) of the example worker ({}), 2 controller replicas with leader election, one Temporal dev server on SQLite",
        run.names.len(),
        run.replicas,
        if run.env.node().is_some() {
            "containers under containerd and a real kubelet"
        } else {
            "processes of the pod runner"
        }
    );
    println!(
        "rollouts completed: {} in {:.0} s ({} more converged only after the {} s bound, under faults); pinned workflows started: {} ({} with their own version seen at start, checked at completion); observations: {} (every {} ms), reads skipped while a server restarted: {}",
        report.rollouts,
        took.as_secs_f64(),
        report.slow,
        run.converge.as_secs(),
        report.pinned.len(),
        report.pinned.iter().filter(|(_, v)| v.is_some()).count(),
        report.observations,
        OBSERVE_EVERY.as_millis(),
        report.read_errors
    );
    println!(
        "faults, and time from each fault until every WorkerDeployment was at its spec's target:"
    );
    println!(
        "  {:<34} {:>5} {:>8} {:>8}",
        "kind", "count", "p50 s", "p99 s"
    );
    let kinds: &[Fault] = if run.env.node().is_some() {
        &Fault::REAL_NODE
    } else {
        Fault::ALL
    };
    for &kind in kinds {
        let mut times: Vec<Duration> = report
            .faults
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .filter_map(|(_, _, t)| *t)
            .collect();
        let count = report.faults.iter().filter(|(k, _, _)| *k == kind).count();
        times.sort();
        println!(
            "  {:<34} {:>5} {:>8.1} {:>8.1}",
            kind.name(),
            count,
            percentile(&times, 0.5).as_secs_f64(),
            percentile(&times, 0.99).as_secs_f64()
        );
    }
    for invariant in ["I1", "I2", "I3", "I4"] {
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
