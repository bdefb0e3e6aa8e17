//! The pace of the restarts the controller starts by itself (today: workers restarted onto
//! renewed credential Secrets). One Secret shared by hundreds of WorkerDeployments (a CA
//! bundle copied into every namespace, one cert-manager certificate) must not roll every
//! worker of a Temporal namespace in one wave: per place (Temporal address and namespace) at
//! most `limit` versioned Deployments restart at once, the next only when one of them is
//! available again (or held its place for [`RESTART_HOLD`]).
//!
//! What restarts is known from the watch cache (each restart records when it started on its
//! Deployment, `temporal.io/credentials-restarted-at`), so a new leader counts the restarts
//! its predecessor started. This ledger adds only the grants the cache does not show yet, and
//! the WorkerDeployments waiting, first come first served. A restart whose pods' client
//! certificate expires within [`plan::credentials::URGENT_BEFORE_EXPIRY`] goes at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::metrics;
use crate::observed::ObservedDeployment;
use crate::plan::credentials::{self as plan, Place};

pub use plan::RESTART_HOLD;

/// A grant counts on its own until the watch shows its write, at most this long.
const GRANT_UNSEEN: Duration = Duration::from_secs(60);

/// A WorkerDeployment that waits asks again at least this often (it is also woken when a
/// restart of its place ends); one that did not ask for this long left the queue.
pub const RECHECK: Duration = Duration::from_secs(15);
const WAITER_GONE: Duration = Duration::from_secs(60);

/// Wakes a WorkerDeployment (`namespace/name`).
pub type Wake = Arc<dyn Fn(&str) + Send + Sync>;

/// The default of `--restart-pace`.
pub const DEFAULT_LIMIT: usize = 3;

/// What the pace says to one restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Restart now.
    Go,
    /// Restart now, ahead of the pace: the pods' certificate expires at `expires`.
    Urgent { expires: SystemTime },
    /// Wait: `restarting` of the place's Deployments restart (the pace allows `limit`),
    /// `ahead` WorkerDeployments were waiting before this one.
    Wait {
        restarting: usize,
        limit: usize,
        ahead: usize,
    },
}

/// A versioned Deployment of the place, as the watch cache shows it now.
#[derive(Clone, Debug)]
pub struct Seen {
    /// `namespace/name`.
    pub deployment: String,
    pub restarted_at: Option<SystemTime>,
    /// In the middle of a restart the controller started ([`plan::restarting`]).
    pub restarting: bool,
}

impl Seen {
    /// `d` of namespace `ns`, at `now`.
    pub fn of(ns: &str, d: &ObservedDeployment, now: SystemTime) -> Self {
        Self {
            deployment: format!("{ns}/{}", d.name),
            restarted_at: d.restarted_at,
            restarting: plan::restarting(d, now),
        }
    }
}

#[derive(Default)]
struct Inner {
    /// Restarts granted, by place: (`namespace/name`, when).
    granted: HashMap<Place, Vec<(String, SystemTime)>>,
    /// WorkerDeployments waiting, by place, in arrival order: (`namespace/name`, last asked).
    waiting: HashMap<Place, Vec<(String, SystemTime)>>,
}

/// The restart pace of one controller.
pub struct Restarts {
    limit: usize,
    inner: Mutex<Inner>,
    wake: Option<Wake>,
}

impl Restarts {
    /// At most `limit` restarts at once per place (0: no pace); `wake` reconciles a waiting
    /// WorkerDeployment when a restart of its place ends.
    pub fn new(limit: usize, wake: Option<Wake>) -> Self {
        Self {
            limit,
            inner: Mutex::default(),
            wake,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A place for the restart of `deployment` (`namespace/name`) of WorkerDeployment `wd`,
    /// whose pods' certificate expires at `expires`, at `now`; `seen` is every versioned
    /// Deployment of `place` the watch cache shows. A grant is taken at once (give it back
    /// with [`Restarts::release`] if the write fails).
    pub fn admit(
        &self,
        wd: &str,
        deployment: &str,
        place: &Place,
        expires: Option<SystemTime>,
        now: SystemTime,
        seen: &[Seen],
    ) -> Admission {
        let Ok(mut inner) = self.inner.lock() else {
            return Admission::Go;
        };
        let Inner { granted, waiting } = &mut *inner;
        let grants = granted.entry(place.clone()).or_default();
        // A grant the cache shows (its restart recorded at or after it) is counted from the
        // cache from then on.
        grants.retain(|(name, at)| {
            let shown = seen.iter().any(|s| {
                s.deployment == *name && s.restarted_at.is_some_and(|r| r + SECOND >= *at)
            });
            !shown && now < *at + GRANT_UNSEEN
        });
        let mut restarting: Vec<&str> = seen
            .iter()
            .filter(|s| s.restarting)
            .map(|s| s.deployment.as_str())
            .collect();
        for (name, _) in grants.iter() {
            if !restarting.contains(&name.as_str()) {
                restarting.push(name);
            }
        }
        let restarting = restarting.len();
        let queue = waiting.entry(place.clone()).or_default();
        queue.retain(|(_, asked)| now < *asked + WAITER_GONE);
        let ahead = queue
            .iter()
            .position(|(w, _)| w == wd)
            .unwrap_or(queue.len());
        let free = self.limit.saturating_sub(restarting);
        // (The chaos self-test's broken variant restarts them all at once.)
        let no_pace = self.limit == 0 || crate::chaos_break::is("restart-all-at-once");
        let admission = if no_pace || ahead < free {
            Admission::Go
        } else if let Some(e) = expires.filter(|e| plan::urgent(Some(*e), now)) {
            Admission::Urgent { expires: e }
        } else {
            Admission::Wait {
                restarting,
                limit: self.limit,
                ahead,
            }
        };
        match admission {
            Admission::Wait { .. } => match queue.iter_mut().find(|(w, _)| w == wd) {
                Some(entry) => entry.1 = now,
                None => queue.push((wd.to_string(), now)),
            },
            _ => {
                grants.push((deployment.to_string(), now));
                // The WorkerDeployment's other restarts ask again; it keeps its turn for them.
                if let Some(entry) = queue.iter_mut().find(|(w, _)| w == wd) {
                    entry.1 = now;
                }
            }
        }
        metrics::global().restarts(
            &place.address,
            &place.namespace,
            restarting + usize::from(!matches!(admission, Admission::Wait { .. })),
            queue.len(),
        );
        admission
    }

    /// The WorkerDeployment `wd` has no restart waiting any more at `place`: it leaves the
    /// queue.
    pub fn done(&self, wd: &str, place: &Place) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some(queue) = inner.waiting.get_mut(place)
        {
            queue.retain(|(w, _)| w != wd);
        }
    }

    /// The restart of `deployment` at `place` was not written: its grant is given back.
    pub fn release(&self, place: &Place, deployment: &str) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some(grants) = inner.granted.get_mut(place)
        {
            grants.retain(|(name, _)| name != deployment);
        }
    }

    /// A versioned Deployment as the watch delivered it: when a restart of its place just
    /// ended (restarted and rolled out), the first waiting WorkerDeployments of its place are
    /// reconciled (as many as the pace lets through).
    pub fn saw(&self, d: &ObservedDeployment) {
        if d.restarted_at.is_none() || !plan::rolled_out(d) {
            return;
        }
        let (Some(wake), Some(place)) = (&self.wake, plan::place_of(d)) else {
            return;
        };
        let first: Vec<String> = match self.inner.lock() {
            Ok(inner) => inner
                .waiting
                .get(&place)
                .into_iter()
                .flatten()
                .take(self.limit.max(1))
                .map(|(w, _)| w.clone())
                .collect(),
            Err(_) => return,
        };
        for wd in first {
            wake(&wd);
        }
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn place() -> Place {
        Place {
            address: "t:7233".into(),
            namespace: "default".into(),
        }
    }

    fn seen(name: &str, restarted_at: Option<SystemTime>, restarting: bool) -> Seen {
        Seen {
            deployment: name.into(),
            restarted_at,
            restarting,
        }
    }

    fn waits(a: &Admission) -> bool {
        matches!(a, Admission::Wait { .. })
    }

    #[test]
    fn at_most_the_limit_restart_at_once_the_next_when_one_ends() {
        let pace = Restarts::new(2, None);
        let p = place();
        let admit = |wd: &str, d: &str, now, seen: &[Seen]| pace.admit(wd, d, &p, None, now, seen);
        assert_eq!(admit("ns/a", "ns/a-1", t(0), &[]), Admission::Go);
        assert_eq!(admit("ns/b", "ns/b-1", t(0), &[]), Admission::Go);
        // Two granted, the cache does not show them yet: the third waits.
        assert_eq!(
            admit("ns/c", "ns/c-1", t(1), &[]),
            Admission::Wait {
                restarting: 2,
                limit: 2,
                ahead: 0
            }
        );
        // The cache shows both restarting: still two.
        let both = [
            seen("ns/a-1", Some(t(0)), true),
            seen("ns/b-1", Some(t(0)), true),
        ];
        assert!(waits(&admit("ns/c", "ns/c-1", t(5), &both)));
        // Another WorkerDeployment comes later: it is behind c.
        assert!(waits(&admit("ns/d", "ns/d-1", t(5), &both)));
        // a is available again: c goes, not d (first come, first served).
        let a_done = [
            seen("ns/a-1", Some(t(0)), false),
            seen("ns/b-1", Some(t(0)), true),
        ];
        assert!(waits(&admit("ns/d", "ns/d-1", t(9), &a_done)));
        assert_eq!(admit("ns/c", "ns/c-1", t(10), &a_done), Admission::Go);
        pace.done("ns/c", &p);
        let c_going = [
            seen("ns/a-1", Some(t(0)), false),
            seen("ns/b-1", Some(t(0)), true),
            seen("ns/c-1", Some(t(10)), true),
        ];
        assert!(waits(&admit("ns/d", "ns/d-1", t(11), &c_going)));
        // Another place is paced on its own.
        let other = Place {
            namespace: "other".into(),
            ..place()
        };
        assert_eq!(
            pace.admit("ns/d", "ns/d-2", &other, None, t(11), &[]),
            Admission::Go
        );
    }

    #[test]
    fn a_write_not_shown_by_the_watch_counts_for_a_minute_and_a_failed_one_not_at_all() {
        let pace = Restarts::new(1, None);
        let p = place();
        assert_eq!(
            pace.admit("ns/a", "ns/a-1", &p, None, t(0), &[]),
            Admission::Go
        );
        assert!(waits(&pace.admit("ns/b", "ns/b-1", &p, None, t(30), &[])));
        // Never shown (the watch lost it): after a minute it no longer counts.
        assert_eq!(
            pace.admit("ns/b", "ns/b-1", &p, None, t(61), &[]),
            Admission::Go
        );
        // A write that failed gives its grant back at once.
        pace.release(&p, "ns/b-1");
        pace.done("ns/b", &p);
        assert_eq!(
            pace.admit("ns/c", "ns/c-1", &p, None, t(62), &[]),
            Admission::Go
        );
    }

    #[test]
    fn a_certificate_about_to_expire_never_waits_and_no_limit_means_no_pace() {
        let pace = Restarts::new(1, None);
        let p = place();
        let busy = [seen("ns/a-1", Some(t(0)), true)];
        let soon = t(0) + plan::URGENT_BEFORE_EXPIRY;
        let later = soon + SECOND;
        assert!(waits(&pace.admit(
            "ns/b",
            "ns/b-1",
            &p,
            Some(later),
            t(0),
            &busy
        )));
        assert_eq!(
            pace.admit("ns/b", "ns/b-1", &p, Some(soon), t(0), &busy),
            Admission::Urgent { expires: soon }
        );
        let unpaced = Restarts::new(0, None);
        for i in 0..50 {
            let d = format!("ns/d-{i}");
            assert_eq!(
                unpaced.admit("ns/w", &d, &p, None, t(0), &busy),
                Admission::Go
            );
        }
    }

    #[test]
    fn a_waiter_that_stops_asking_leaves_the_queue() {
        let pace = Restarts::new(1, None);
        let p = place();
        let busy = [seen("ns/a-1", Some(t(0)), true)];
        assert!(waits(&pace.admit(
            "ns/gone",
            "ns/gone-1",
            &p,
            None,
            t(0),
            &busy
        )));
        let idle: [Seen; 0] = [];
        // The WorkerDeployment was deleted and never asks again: the next one is not stuck
        // behind it.
        assert_eq!(
            pace.admit("ns/b", "ns/b-1", &p, None, t(0) + WAITER_GONE, &idle),
            Admission::Go
        );
    }
}
