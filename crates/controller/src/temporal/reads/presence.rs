//! Who polls each namespace: one paged `ListWorkers` at most every `list_every`, shared by
//! every WorkerDeployment of the namespace (the poller-presence check costs no read per
//! WorkerDeployment at rest), refreshed by one caller at a time while the last stands in.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use temporalio_client::{Connection, tonic};

use super::Budget;
use super::listing::Wake;
use crate::temporal::Code;
use crate::temporal::pool::PoolKey;
use crate::temporal::workers::{self, Polling};

/// The longest a refresh (every page, with the waits for the budget) may take; a caller
/// waits for another's refresh no longer either.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(30);

/// What the namespace's worker list showed, and when it was asked for.
#[derive(Clone, Debug)]
pub struct Presence {
    pub at: SystemTime,
    pub polling: Arc<Polling>,
}

impl Presence {
    /// Whether the list shows any running worker of worker deployment `deployment` (of any
    /// version): its workers heartbeat, so a version missing from the list has no worker.
    pub fn heartbeats(&self, deployment: &str) -> bool {
        self.polling.get(deployment).is_some_and(|v| !v.is_empty())
    }

    /// The task queues `build_id`'s running workers poll.
    pub fn queues(&self, deployment: &str, build_id: &str) -> HashSet<&str> {
        self.polling
            .get(deployment)
            .and_then(|v| v.get(build_id))
            .map(|w| w.queues.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// The hosts `build_id`'s running workers run on (pods' hostnames).
    pub fn hosts(&self, deployment: &str, build_id: &str) -> HashSet<&str> {
        self.polling
            .get(deployment)
            .and_then(|v| v.get(build_id))
            .map(|w| w.hosts.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

/// The worker list of one namespace.
#[derive(Default)]
pub(super) struct Roll {
    /// Held by the one refreshing it.
    refreshing: Arc<tokio::sync::Mutex<()>>,
    last: Mutex<Last>,
}

#[derive(Default)]
struct Last {
    shown: Option<Presence>,
    failed_at: Option<Instant>,
    /// The server has no `ListWorkers`: never asked again.
    unimplemented: bool,
}

impl Roll {
    fn shown_within(&self, within: Duration) -> Option<Presence> {
        let last = self.last.lock().ok()?;
        last.shown
            .as_ref()
            .filter(|p| {
                SystemTime::now()
                    .duration_since(p.at)
                    .is_ok_and(|age| age < within)
            })
            .cloned()
    }

    fn skips(&self, every: Duration) -> bool {
        self.last
            .lock()
            .map(|l| l.unimplemented || l.failed_at.is_some_and(|t| t.elapsed() < every))
            .unwrap_or(true)
    }

    /// Who polls, no older than `every` if it can be had: the last list while it is younger,
    /// or while a refresh goes on in the background and it is younger than twice `every`;
    /// else a list now. None when the server cannot list (or the last list failed less than
    /// `every` ago and nothing young enough stands in).
    pub(super) async fn presence(
        self: &Arc<Self>,
        conn: &Connection,
        key: &PoolKey,
        budget: Arc<Budget>,
        every: Duration,
        wake: Option<Wake>,
    ) -> Option<Presence> {
        if let Some(p) = self.shown_within(every) {
            return Some(p);
        }
        if self.skips(every) {
            return self.shown_within(every * 2);
        }
        let stand_in = self.shown_within(every * 2);
        let guard = match self.refreshing.clone().try_lock_owned() {
            Ok(guard) => guard,
            // Another caller refreshes it.
            Err(_) if stand_in.is_some() => return stand_in,
            Err(_) => {
                let _ = tokio::time::timeout(REFRESH_TIMEOUT, self.refreshing.lock()).await;
                return self.shown_within(every * 2);
            }
        };
        let (roll, conn, ns) = (self.clone(), conn.clone(), key.temporal_namespace.clone());
        let refresh = async move {
            let _guard = guard;
            roll.refresh(&conn, &ns, &budget, wake.as_ref()).await;
        };
        if stand_in.is_some() {
            tokio::spawn(refresh);
            return stand_in;
        }
        refresh.await;
        self.shown_within(every * 2)
    }

    async fn refresh(&self, conn: &Connection, ns: &str, budget: &Budget, wake: Option<&Wake>) {
        let at = SystemTime::now();
        let listed = tokio::time::timeout(REFRESH_TIMEOUT, workers::list(conn, ns, budget, at));
        let listed = listed.await.unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded(
                "ListWorkers took too long",
            ))
        });
        match listed {
            Ok(polling) => {
                let Ok(mut last) = self.last.lock() else {
                    return;
                };
                if let (Some(wake), Some(before)) = (wake, &last.shown) {
                    for name in changed(&before.polling, &polling) {
                        wake(name);
                    }
                }
                last.shown = Some(Presence {
                    at,
                    polling: Arc::new(polling),
                });
                last.failed_at = None;
            }
            Err(s) => {
                tracing::debug!(
                    "ListWorkers in {ns}: {}; poller presence falls back on DescribeTaskQueue",
                    s.message()
                );
                if let Ok(mut last) = self.last.lock() {
                    last.unimplemented |= s.code() == Code::Unimplemented;
                    last.failed_at = Some(Instant::now());
                }
            }
        }
    }
}

/// The worker deployments whose pollers differ between two lists.
fn changed<'a>(before: &'a Polling, after: &'a Polling) -> Vec<&'a str> {
    let mut names: Vec<&str> = before
        .keys()
        .chain(after.keys())
        .map(String::as_str)
        .filter(|n| before.get(*n) != after.get(*n))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_is_woken_when_its_pollers_change_and_only_then() {
        let polling = |entries: &[(&str, &str, &str)]| {
            let mut p = Polling::new();
            for (d, b, q) in entries {
                p.entry(d.to_string())
                    .or_default()
                    .entry(b.to_string())
                    .or_default()
                    .queues
                    .insert(q.to_string());
            }
            p
        };
        let before = polling(&[("ns/a", "b1", "q"), ("ns/b", "b1", "q")]);
        let after = polling(&[("ns/a", "b1", "q"), ("ns/c", "b1", "q")]);
        assert_eq!(changed(&before, &after), vec!["ns/b", "ns/c"]);
        assert!(changed(&before, &before).is_empty());
        let presence = Presence {
            at: SystemTime::UNIX_EPOCH,
            polling: Arc::new(after),
        };
        assert!(presence.heartbeats("ns/a") && !presence.heartbeats("ns/b"));
        assert_eq!(presence.queues("ns/a", "b1"), HashSet::from(["q"]));
        assert!(presence.queues("ns/a", "b2").is_empty());
    }
}
