//! How a pass knows Temporal's state: a pure decision from the remembered read, the
//! namespace's listing and the snapshot of the caches. The reconcile acts on its answer (see
//! [`super::pipeline`]); the read itself, and the wait for the budget, are the only IO.

use std::time::SystemTime;

use crate::observed::{DeploymentState, Observed, Reuse, TargetObserved};
use crate::plan;
use crate::temporal::pool::PoolKey;
use crate::temporal::reads::{self, Asking, Listing, Priority, Remembered};

/// How this pass knows the worker deployment's state in Temporal.
#[derive(Debug, PartialEq)]
pub enum Knowing {
    /// The last state read stands in (see [`reads::may_reuse`]); with what was read about the
    /// target when the target is the same.
    Reuse {
        state: Box<DeploymentState>,
        target: Option<Box<TargetObserved>>,
    },
    /// The namespace's listing shows no such worker deployment and none of its versions'
    /// workers are up: it reads as a describe answering `NotFound` would, with no read.
    Absent,
    /// Read it now, at this priority (a steady read may have to wait for its turn).
    Read(Priority),
}

impl Knowing {
    /// Whether the state was not read in this pass (a plan that writes Temporal or stops
    /// workers is then made again on a read).
    pub fn stands_in(&self) -> bool {
        !matches!(self, Knowing::Read(_))
    }
}

/// What a pass holds when it decides.
pub struct Deciding<'a> {
    pub remembered: Option<&'a Remembered>,
    pub listing: Option<&'a Listing>,
    pub snapshot: &'a Observed,
    pub target: &'a str,
    pub pool_key: &'a PoolKey,
    /// The Temporal worker deployment's name.
    pub deployment: &'a str,
    pub now: SystemTime,
}

/// Whether the decision needs the namespace's listing: to reuse a remembered state, or to
/// know a worker deployment none of whose workers are up is absent.
pub fn wants_listing(remembered: Option<&Remembered>, snapshot: &Observed) -> bool {
    remembered.is_some_and(|r| matches!(r.reuse, Reuse::Until(_))) || !any_workers_up(snapshot)
}

/// How to know the state: reuse the remembered read when nothing says it changed, take it as
/// absent when the listing says so, else read it (at the priority `wd`'s last read or status
/// gives).
pub fn decide(d: &Deciding<'_>, wd: &twc_api::WorkerDeployment) -> Knowing {
    let reusable = d.remembered.filter(|r| matches!(r.reuse, Reuse::Until(_)));
    if let Some(r) = reusable {
        let asking = Asking {
            pool_key: d.pool_key,
            target_build: d.target,
            target_up: plan::workers_up(&d.snapshot.deployments, d.target),
            now: d.now,
        };
        if reads::may_reuse(r, &asking, d.listing, d.deployment) {
            return Knowing::Reuse {
                state: Box::new(r.state.clone()),
                target: (r.target_build == d.target).then(|| Box::new(r.target.clone())),
            };
        }
    }
    if absent_from(d.listing, d.deployment, d.snapshot, d.remembered) {
        return Knowing::Absent;
    }
    Knowing::Read(reads::priority(d.remembered, wd))
}

/// Whether any versioned Deployment of the observed ones has its workers up.
fn any_workers_up(observed: &Observed) -> bool {
    observed
        .deployments
        .keys()
        .any(|b| plan::workers_up(&observed.deployments, b))
}

/// Whether the worker deployment `name` is known not to exist: the namespace's listing does
/// not show it, and none of its versions' workers are up (only their pollers would make it
/// since the listing). Then a new WorkerDeployment gets its first Deployment, and thousands
/// whose pods never start wait, without a read each. A listing taken before the last read
/// that found it says nothing of it (a listing stands in for up to twice its period: a
/// version registered and its workers scaled to zero by an autoscaler within it would
/// otherwise read as absent, and its scale be undone).
fn absent_from(
    listing: Option<&Listing>,
    name: &str,
    observed: &Observed,
    remembered: Option<&Remembered>,
) -> bool {
    let seen_since = |l: &Listing| remembered.is_some_and(|r| r.state.exists && r.read_at >= l.at);
    listing.is_some_and(|l| !l.deployments.contains_key(name) && !seen_since(l))
        && !any_workers_up(observed)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::observed::ObservedDeployment;

    #[test]
    fn only_a_listing_without_it_and_no_workers_up_stand_for_not_found() {
        let listing = |names: &[&str]| Listing {
            at: SystemTime::UNIX_EPOCH,
            deployments: Arc::new(
                names
                    .iter()
                    .map(|n| (n.to_string(), Default::default()))
                    .collect(),
            ),
        };
        let mut observed = Observed::at(SystemTime::UNIX_EPOCH);
        // Its Deployment is there, its pods are not ready.
        observed.deployments.insert(
            "b1".into(),
            ObservedDeployment {
                build_id: "b1".into(),
                spec_replicas: Some(1),
                replicas: 1,
                ..Default::default()
            },
        );
        assert!(absent_from(
            Some(&listing(&["ns/other"])),
            "ns/wd",
            &observed,
            None
        ));
        assert!(!absent_from(
            Some(&listing(&["ns/wd"])),
            "ns/wd",
            &observed,
            None
        ));
        assert!(
            !absent_from(None, "ns/wd", &observed, None),
            "no listing: read"
        );
        assert!(wants_listing(None, &observed), "to know it absent");
        // Its workers are up: their pollers may have made it since the listing.
        if let Some(d) = observed.deployments.get_mut("b1") {
            d.ready_replicas = 1;
            d.available_since = Some(SystemTime::UNIX_EPOCH);
        }
        assert!(!absent_from(
            Some(&listing(&["ns/other"])),
            "ns/wd",
            &observed,
            None
        ));
        assert!(!wants_listing(None, &observed), "nothing to reuse: read");
    }

    #[test]
    fn the_decision_reuses_takes_absent_or_reads() {
        let key = PoolKey {
            host_port: "t:7233".into(),
            tls_server_name: None,
            temporal_namespace: "default".into(),
            auth_mode: twc_api::AuthMode::None,
            credential_key: None,
            secrets: vec![],
        };
        let at =
            |s: u64| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_900_000_000 + s);
        let state = DeploymentState {
            exists: true,
            current_build_id: Some("b1".into()),
            ..Default::default()
        };
        let remembered = Remembered {
            pool_key: key.clone(),
            generation: Some(1),
            target_build: "b1".into(),
            target_up: false,
            state: state.clone(),
            target: TargetObserved::default(),
            read_at: at(0),
            reuse: Reuse::Until(None),
            written: false,
        };
        let listing = |names: &[&str]| Listing {
            at: at(10),
            deployments: Arc::new(
                names
                    .iter()
                    .map(|n| {
                        let listed = crate::observed::Listed {
                            current_build_id: Some("b1".into()),
                            ..Default::default()
                        };
                        (n.to_string(), listed)
                    })
                    .collect(),
            ),
        };
        let snapshot = Observed::at(at(20));
        let wd: twc_api::WorkerDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": "wd", "namespace": "ns", "generation": 1},
            "spec": {"template": {"spec": {"containers": []}}, "rollout": {"strategy": "AllAtOnce"}, "sunset": {},
                     "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "default"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let agreeing = listing(&["ns/wd"]);
        let deciding = |remembered: Option<&Remembered>, listing: Option<&Listing>| {
            decide(
                &Deciding {
                    remembered,
                    listing,
                    snapshot: &snapshot,
                    target: "b1",
                    pool_key: &key,
                    deployment: "ns/wd",
                    now: at(20),
                },
                &wd,
            )
        };
        // The listing agrees with what was read: reused, with what was read of the target.
        assert!(matches!(
            deciding(Some(&remembered), Some(&agreeing)),
            Knowing::Reuse {
                target: Some(_),
                ..
            }
        ));
        // Not in the listing, no workers up: absent, without a read.
        assert_eq!(deciding(None, Some(&listing(&[]))), Knowing::Absent);
        // Nothing says it is unchanged: read, at the moving priority (nothing at rest known).
        assert_eq!(deciding(None, None), Knowing::Read(Priority::Moving));
        let never = Remembered {
            reuse: Reuse::Never,
            ..remembered.clone()
        };
        assert_eq!(
            deciding(Some(&never), Some(&agreeing)),
            Knowing::Read(Priority::Moving)
        );
        assert!(!Knowing::Read(Priority::Steady).stands_in() && Knowing::Absent.stands_in());
        // A listing taken before the read that found it (its target's workers just scaled to
        // zero, so the state is not reused): not absent, read again.
        let found_after = Remembered {
            read_at: at(15),
            target_up: true,
            ..remembered.clone()
        };
        assert!(matches!(
            deciding(Some(&found_after), Some(&listing(&[]))),
            Knowing::Read(_)
        ));
        // A listing taken after it: absent (it was deleted since).
        let found_before = Remembered {
            read_at: at(5),
            ..found_after
        };
        assert_eq!(
            deciding(Some(&found_before), Some(&listing(&[]))),
            Knowing::Absent
        );
    }
}
