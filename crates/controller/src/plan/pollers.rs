//! Whether a current version's task queues have active pollers: a pure judgement from the
//! namespace's worker list (shared, read once per interval) and, only where that list cannot
//! tell, a `DescribeTaskQueue` per queue, remembered for [`CONFIRM_EVERY`].
//!
//! The list tells when the worker deployment's workers heartbeat (any of its versions is on
//! it): a queue of the version with no running worker listed has no poller. When none of its
//! workers is listed (a server without `ListWorkers`, heartbeats turned off, or SDKs that do
//! not send them) the task queues are asked instead. A read that failed is "not known", never
//! "no pollers".

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::observed::Pollers;

/// How long a `DescribeTaskQueue` answer stands for a WorkerDeployment whose workers the
/// list does not show (so that such a fleet costs one read per queue per 5 minutes, not per
/// pass).
pub const CONFIRM_EVERY: Duration = Duration::from_secs(300);

/// What the worker list shows for the version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    /// The list was asked for long enough after the version's workers came up to show them
    /// (the SDKs heartbeat as they start): before that, its silence says nothing.
    pub settled: bool,
    /// Some worker of the worker deployment (any version) is listed: its workers heartbeat.
    pub heartbeats: bool,
    /// The task queues the version's running workers poll.
    pub queues: BTreeSet<String>,
    /// The hosts the version's running workers run on, as their SDKs report them.
    pub hosts: BTreeSet<String>,
}

/// The task queues asked with `DescribeTaskQueue`, remembered between passes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub build_id: String,
    pub at: SystemTime,
    /// The queues asked (answered or not), of those the ones a worker of the version
    /// polled, and the ones whose answer failed (not known).
    pub asked: BTreeSet<String>,
    pub polled: BTreeSet<String>,
    pub failed: BTreeSet<String>,
}

/// The judgement, or the queues to ask first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judged {
    Done(Pollers),
    Ask(BTreeSet<String>),
}

/// Whether `build_id`'s `known` task queues (workflow queues; the listed ones count too) have
/// pollers, at `now`, from the worker list (`None`: not to be had) and what was asked before.
pub fn judge(
    build_id: &str,
    known: &BTreeSet<String>,
    listed: Option<&Listed>,
    asked: Option<&Asked>,
    now: SystemTime,
) -> Judged {
    let listed_queues = listed.map(|l| l.queues.clone()).unwrap_or_default();
    let queues: BTreeSet<String> = known.union(&listed_queues).cloned().collect();
    if queues.is_empty() {
        return Judged::Done(Pollers::Unknown);
    }
    let unlisted: BTreeSet<String> = queues.difference(&listed_queues).cloned().collect();
    if unlisted.is_empty() {
        return Judged::Done(Pollers::Active);
    }
    match listed {
        // Too early to tell: the next list will.
        Some(l) if !l.settled => return Judged::Done(Pollers::Unknown),
        Some(l) if l.heartbeats => {
            return Judged::Done(Pollers::Missing(unlisted.into_iter().collect()));
        }
        _ => {}
    }
    let fresh = asked.filter(|a| {
        a.build_id == build_id
            && unlisted.is_subset(&a.asked)
            && now
                .duration_since(a.at)
                .is_ok_and(|age| age < CONFIRM_EVERY)
    });
    let Some(a) = fresh else {
        return Judged::Ask(unlisted);
    };
    let missing: Vec<String> = unlisted
        .iter()
        .filter(|q| !a.polled.contains(*q) && !a.failed.contains(*q))
        .cloned()
        .collect();
    Judged::Done(if !missing.is_empty() {
        Pollers::Missing(missing)
    } else if unlisted.iter().any(|q| a.failed.contains(q)) {
        Pollers::Unknown
    } else {
        Pollers::Active
    })
}

/// The longest hostname a pod gets: the kubelet cuts a longer pod name there.
const HOSTNAME_MAX: usize = 63;

/// The worker groups of a grouped version whose ready pods (`ready_pods`: group -> pod names,
/// those up long enough to have heartbeat) are none of them among the version's running
/// workers in the list, matched by host name (a pod's hostname is its name, cut at 63
/// characters). None when the list cannot tell: too early, the workers do not heartbeat,
/// the version has one group (its task queues say it), or no group's pods are listed at all
/// (SDKs that do not report their host, or pods on their node's network, named after it).
pub fn silent_groups(
    listed: &Listed,
    ready_pods: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    if !listed.settled || !listed.heartbeats || ready_pods.len() < 2 {
        return None;
    }
    let is_listed = |pod: &String| {
        listed.hosts.iter().any(|h| {
            !h.is_empty() && (h == pod || (pod.len() > HOSTNAME_MAX && pod.starts_with(h.as_str())))
        })
    };
    let (heard, silent): (Vec<_>, Vec<_>) = ready_pods
        .iter()
        .filter(|(_, pods)| !pods.is_empty())
        .partition(|(_, pods)| pods.iter().any(is_listed));
    if heard.is_empty() {
        return None;
    }
    Some(silent.into_iter().map(|(g, _)| g.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000 + s)
    }

    #[test]
    fn the_worker_list_settles_it_when_the_workers_heartbeat() {
        let known = set(&["a", "b"]);
        let listed = |queues: &[&str]| Listed {
            settled: true,
            heartbeats: true,
            queues: set(queues),
            hosts: BTreeSet::new(),
        };
        let j = |l: &Listed| judge("b1", &known, Some(l), None, at(0));
        assert_eq!(j(&listed(&["a", "b"])), Judged::Done(Pollers::Active));
        // A queue the version polls that the status did not know yet counts too.
        assert_eq!(j(&listed(&["a", "b", "c"])), Judged::Done(Pollers::Active));
        assert_eq!(
            j(&listed(&["a"])),
            Judged::Done(Pollers::Missing(vec!["b".into()]))
        );
        // Its workers are gone, an older version's still heartbeat: nothing to ask.
        assert_eq!(
            j(&listed(&[])),
            Judged::Done(Pollers::Missing(vec!["a".into(), "b".into()]))
        );
        // A list from before the version's workers came up (and their first heartbeat):
        // what it shows counts, its silence does not.
        let early = |queues: &[&str]| Listed {
            settled: false,
            ..listed(queues)
        };
        assert_eq!(j(&early(&["a", "b"])), Judged::Done(Pollers::Active));
        assert_eq!(j(&early(&["a"])), Judged::Done(Pollers::Unknown));
        // No queue known and none listed: not known, not "missing".
        assert_eq!(
            judge("b1", &BTreeSet::new(), Some(&listed(&[])), None, at(0)),
            Judged::Done(Pollers::Unknown)
        );
    }

    #[test]
    fn where_the_list_cannot_tell_the_queues_are_asked_once_per_interval() {
        let known = set(&["a", "b"]);
        let silent = Listed {
            settled: true,
            ..Default::default()
        };
        // No worker of the deployment is listed (or no list): ask the unlisted queues.
        assert_eq!(
            judge("b1", &known, Some(&silent), None, at(0)),
            Judged::Ask(set(&["a", "b"]))
        );
        assert_eq!(
            judge("b1", &known, None, None, at(0)),
            Judged::Ask(set(&["a", "b"]))
        );
        let asked = Asked {
            build_id: "b1".into(),
            at: at(0),
            asked: set(&["a", "b"]),
            polled: set(&["a", "b"]),
            failed: BTreeSet::new(),
        };
        assert_eq!(
            judge("b1", &known, None, Some(&asked), at(60)),
            Judged::Done(Pollers::Active)
        );
        // The answer grows old, or was for another build: asked again.
        assert_eq!(
            judge("b1", &known, None, Some(&asked), at(301)),
            Judged::Ask(set(&["a", "b"]))
        );
        assert_eq!(
            judge("b2", &known, None, Some(&asked), at(60)),
            Judged::Ask(set(&["a", "b"]))
        );
        let half = Asked {
            polled: set(&["a"]),
            ..asked.clone()
        };
        assert_eq!(
            judge("b1", &known, None, Some(&half), at(60)),
            Judged::Done(Pollers::Missing(vec!["b".into()]))
        );
        // A failed answer is not known: never "missing"; a queue answered without a poller
        // still says so.
        let failed = Asked {
            polled: set(&["a"]),
            failed: set(&["b"]),
            ..asked.clone()
        };
        assert_eq!(
            judge("b1", &known, None, Some(&failed), at(60)),
            Judged::Done(Pollers::Unknown)
        );
        let one_missing = Asked {
            polled: BTreeSet::new(),
            failed: set(&["b"]),
            ..asked.clone()
        };
        assert_eq!(
            judge("b1", &known, None, Some(&one_missing), at(60)),
            Judged::Done(Pollers::Missing(vec!["a".into()]))
        );
    }

    #[test]
    fn a_group_whose_ready_pods_are_not_among_the_listed_workers_is_silent() {
        let long = format!(
            "{}-abcde",
            "w-activities-0-1-0-d58b83d8b9-b2d2a340-7d9f8c6b5".repeat(2)
        );
        let listed = Listed {
            settled: true,
            heartbeats: true,
            queues: set(&["w"]),
            hosts: set(&["w-workflows-1-xyz", &long[..HOSTNAME_MAX]]),
        };
        let pods = |groups: &[(&str, &[&str])]| -> BTreeMap<String, Vec<String>> {
            groups
                .iter()
                .map(|(g, p)| (g.to_string(), p.iter().map(|p| p.to_string()).collect()))
                .collect()
        };
        let both = pods(&[
            ("activities", &["w-activities-1-abc"]),
            ("workflows", &["w-workflows-1-xyz"]),
        ]);
        assert_eq!(
            silent_groups(&listed, &both),
            Some(vec!["activities".to_string()])
        );
        // A pod name longer than a hostname is matched by the hostname it gets.
        let cut = pods(&[
            ("activities", &[long.as_str()]),
            ("workflows", &["w-workflows-1-xyz"]),
        ]);
        assert_eq!(silent_groups(&listed, &cut), Some(vec![]));
        // A group with no ready pod is not judged here (its availability is).
        let none_ready = pods(&[("activities", &[]), ("workflows", &["w-workflows-1-xyz"])]);
        assert_eq!(silent_groups(&listed, &none_ready), Some(vec![]));
        // No group's pods listed (hosts not reported, or named after the node): cannot tell.
        let unmatched = Listed {
            hosts: set(&["node-1"]),
            ..listed.clone()
        };
        assert_eq!(silent_groups(&unmatched, &both), None);
        // Too early, no heartbeats, one group: cannot tell.
        let early = Listed {
            settled: false,
            ..listed.clone()
        };
        assert_eq!(silent_groups(&early, &both), None);
        let quiet = Listed {
            heartbeats: false,
            ..listed.clone()
        };
        assert_eq!(silent_groups(&quiet, &both), None);
        let one = pods(&[("default", &["w-1-abc"])]);
        assert_eq!(silent_groups(&listed, &one), None);
    }
}
