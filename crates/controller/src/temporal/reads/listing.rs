//! The listing of a namespace: one paged `ListWorkerDeployments` at most every `list_every`,
//! refreshed by one caller at a time while a young enough listing stands in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use temporalio_client::Connection;
use tokio::sync::OwnedMutexGuard;

use super::budget::{Budget, Priority};
use crate::temporal::pool::PoolKey;
use crate::temporal::{Code, Listed};

/// A namespace's worker deployments as listed, and when the listing was asked for.
#[derive(Clone)]
pub struct Listing {
    /// When the list was requested: what it shows is at least as new as this.
    pub at: SystemTime,
    pub deployments: Arc<HashMap<String, Listed>>,
}

/// The listing of one namespace, refreshed by whoever needs it first (one at a time).
#[derive(Default)]
pub(super) struct Directory {
    /// Held by the one refreshing it (a reconcile, or a task of its own in the background).
    last: Arc<tokio::sync::Mutex<Last>>,
    /// A copy of the last listing, for the callers that come while another one refreshes it.
    shown: Mutex<Option<Listing>>,
}

impl Directory {
    /// The right to refresh the listing, or, while another caller holds it, the last listing
    /// if it is younger than `within` (else waits for the right).
    pub(super) async fn enter(&self, within: Duration) -> Result<OwnedMutexGuard<Last>, Listing> {
        if let Ok(last) = self.last.clone().try_lock_owned() {
            return Ok(last);
        }
        let shown = self.shown.lock().ok().and_then(|shown| {
            shown
                .as_ref()
                .filter(|l| {
                    SystemTime::now()
                        .duration_since(l.at)
                        .is_ok_and(|age| age < within)
                })
                .cloned()
        });
        match shown {
            Some(l) => Err(l),
            None => Ok(self.last.clone().lock_owned().await),
        }
    }
}

/// What a caller holding the right to refresh does, with the listing it has, at `now`.
#[derive(Debug, PartialEq)]
pub(super) enum Refresh {
    /// Younger than `list_every`: use it.
    Fresh,
    /// Older, but younger than twice `list_every`: use it now and refresh it in the
    /// background (no reconcile waits for the paged list).
    Behind,
    /// None, or too old to stand in: refresh and wait for it.
    Wait,
    /// The server cannot list, or the last list failed less than `list_every` ago.
    Skip,
}

pub(super) fn refresh(last: &Last, every: Duration, now: SystemTime) -> Refresh {
    let age = |l: &Listing| now.duration_since(l.at).unwrap_or_default();
    if last.unimplemented {
        return Refresh::Skip;
    }
    match &last.listing {
        Some(l) if age(l) < every => return Refresh::Fresh,
        Some(l) if age(l) < every * 2 && last.failed_at.is_none() => return Refresh::Behind,
        _ => {}
    }
    if last.failed_at.is_some_and(|t| t.elapsed() < every) {
        return Refresh::Skip;
    }
    Refresh::Wait
}

/// Lists the namespace `key` reads, one budget token a page, and keeps the listing in
/// `last` and `dir`'s copy; wakes the worker deployments whose entry changed.
pub(super) async fn list_into(
    last: &mut Last,
    dir: &Directory,
    conn: &Connection,
    key: &PoolKey,
    budget: &Budget,
    wake: Option<&Wake>,
) -> Option<Listing> {
    let at = SystemTime::now();
    let started = Instant::now();
    // Moving: every check that may reuse a state needs a listing.
    match crate::temporal::list(conn, &key.temporal_namespace, budget, Priority::Moving).await {
        Ok(deployments) => {
            tracing::debug!(
                "listed {} worker deployments of {} in {:.2} s",
                deployments.len(),
                key.temporal_namespace,
                started.elapsed().as_secs_f64()
            );
            if let (Some(wake), Some(before)) = (wake, &last.listing) {
                for (name, l) in &deployments {
                    if before.deployments.get(name) != Some(l) {
                        wake(name);
                    }
                }
            }
            let listing = Listing {
                at,
                deployments: Arc::new(deployments),
            };
            last.listing = Some(listing.clone());
            if let Ok(mut shown) = dir.shown.lock() {
                *shown = Some(listing.clone());
            }
            last.failed_at = None;
            Some(listing)
        }
        Err(s) => {
            if s.code() == Code::Unimplemented {
                last.unimplemented = true;
            }
            tracing::debug!(
                "ListWorkerDeployments in {}: {}; every check reads its deployment instead",
                key.temporal_namespace,
                s.message()
            );
            last.failed_at = Some(Instant::now());
            None
        }
    }
}

#[derive(Default)]
pub(super) struct Last {
    pub(super) listing: Option<Listing>,
    /// When a list last failed (not retried before `list_every` has passed again).
    failed_at: Option<Instant>,
    /// The server has no `ListWorkerDeployments`: never asked again.
    unimplemented: bool,
}

/// Called with the `namespace/name` of worker deployments whose listing changed.
pub type Wake = Arc<dyn Fn(&str) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reads::fixtures::{at, listing};

    #[tokio::test]
    async fn a_refresh_in_progress_holds_up_no_one_while_the_last_listing_is_young() {
        let dir = Directory::default();
        let every = Duration::from_secs(60);
        let young = Listing {
            at: SystemTime::now() - Duration::from_secs(90),
            deployments: Default::default(),
        };
        // No refresh under way: the caller gets the right to refresh.
        assert!(dir.enter(every * 2).await.is_ok());
        *dir.shown.lock().unwrap_or_else(|e| panic!("{e}")) = Some(young.clone());
        let refreshing = dir.last.lock().await;
        // Another caller refreshes: the listing before it (90 s old, under 120) stands in.
        // (Each call that must not wait is bounded, so a broken stand-in fails, not hangs.)
        let soon = Duration::from_secs(5);
        let shown = tokio::time::timeout(soon, dir.enter(every * 2))
            .await
            .expect("a young listing stands in at once, without waiting for the refresh")
            .err()
            .expect("the last listing");
        assert_eq!(shown.at, young.at);
        // Too old to stand in: the caller waits for the refresh to end.
        *dir.shown.lock().unwrap_or_else(|e| panic!("{e}")) = Some(Listing {
            at: SystemTime::now() - Duration::from_secs(130),
            deployments: Default::default(),
        });
        let waiting = tokio::time::timeout(Duration::from_millis(50), dir.enter(every * 2));
        assert!(waiting.await.is_err(), "it should wait for the refresh");
        drop(refreshing);
        let after = tokio::time::timeout(soon, dir.enter(every * 2)).await;
        assert!(
            matches!(after, Ok(Ok(_))),
            "the refresh ended: the next may refresh"
        );
    }

    #[test]
    fn a_listing_behind_stands_in_while_it_is_refreshed_and_only_one_too_old_is_waited_for() {
        let every = Duration::from_secs(60);
        let now = at(1000);
        let last = |age_s: u64| Last {
            listing: Some(listing(1000 - age_s, vec![])),
            ..Default::default()
        };
        assert_eq!(refresh(&last(10), every, now), Refresh::Fresh);
        // The one that finds it behind does not wait for the paged list either.
        assert_eq!(refresh(&last(61), every, now), Refresh::Behind);
        assert_eq!(refresh(&last(119), every, now), Refresh::Behind);
        assert_eq!(refresh(&last(121), every, now), Refresh::Wait);
        assert_eq!(refresh(&Last::default(), every, now), Refresh::Wait);
        // A list that failed a moment ago is not asked again before `every`; the checks read
        // their deployments meanwhile.
        let mut failed = last(90);
        failed.failed_at = Some(Instant::now());
        assert_eq!(refresh(&failed, every, now), Refresh::Skip);
        let long_ago = Instant::now().checked_sub(Duration::from_secs(61));
        if let Some(t) = long_ago {
            failed.failed_at = Some(t);
            assert_eq!(refresh(&failed, every, now), Refresh::Wait);
        }
        let unimplemented = Last {
            unimplemented: true,
            ..Default::default()
        };
        assert_eq!(refresh(&unimplemented, every, now), Refresh::Skip);
    }
}
