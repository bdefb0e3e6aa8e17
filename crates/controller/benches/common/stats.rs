//! What the benchmarks share: Temporal's timestamps as times, signed seconds between two
//! times, and a p50 / p99 / max line.

use std::time::{Duration, SystemTime};

/// A Temporal timestamp as a time (none when unset).
pub fn ts(t: &Option<prost_wkt_types::Timestamp>) -> Option<SystemTime> {
    let t = t.as_ref()?;
    (t.seconds > 0)
        .then(|| SystemTime::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos.max(0) as u32))
}

/// Seconds from `from` to `to`, negative when `to` came first.
pub fn secs(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Prints `what` with the p50, p99 and max of `v` in seconds, to `digits` decimals.
pub fn report(what: &str, mut v: Vec<f64>, digits: usize) {
    v.sort_by(f64::total_cmp);
    println!(
        "  {what:<58} p50 {:>6.digits$} s   p99 {:>6.digits$} s   max {:>6.digits$} s   (n={})",
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        v.last().copied().unwrap_or(f64::NAN),
        v.len()
    );
}
