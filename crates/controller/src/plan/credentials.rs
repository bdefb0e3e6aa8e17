//! Workers read their credentials once, at start: a client certificate or CA from the mounted
//! Secret, an API key from an environment variable. When a credential Secret's content
//! changes (a renewal, a rotation to a new CA, a new API key), the versions' pods restart with
//! the new content, as a rolling update of the same pod template (same build ID, pinned
//! workflows keep their version).
//!
//! Each versioned Deployment records the digest of the content its pods started with
//! (`temporal.io/credentials-digest` on the Deployment). A Deployment without one (TWC made
//! it, or an older controller) gets the current digest recorded, and nothing restarts, when
//! its pods provably started with that content (created after the apiserver recorded its last
//! write): a takeover of fresh pods restarts no pod. Otherwise its pods may hold an older
//! certificate, about to expire: they restart, paced like any other. One whose digest differs
//! gets the new digest on its pod template too, which rolls its pods.
//!
//! Restarts are paced: across WorkerDeployments by the controller's restart pace
//! (`crate::restarts`, per Temporal connection), and within one here: its current and target
//! versions restart last, once its other versions' restarts are over. Neither ever delays a
//! restart past the moment the old client certificate expires ([`urgent`]).

use std::time::{Duration, SystemTime};

use twc_api::labels::{CREDENTIALS_DIGEST, CREDENTIALS_NOT_AFTER};
use twc_api::{RESTART_ON_SECRET_CHANGE_ANNOTATION, WorkerDeployment};

use super::{Observed, ObservedDeployment, Plan};
use crate::temporal::credentials::rfc3339;

/// A digest to record on a versioned Deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialsWrite {
    pub deployment: String,
    pub build: String,
    pub digest: String,
    /// Restart its pods (the digest goes on its pod template too); else only record it.
    pub restart: bool,
    /// Where its workers poll: the restart pace counts per place.
    pub place: Place,
    /// When the client certificate its pods hold now expires, if known: the restart never
    /// waits for the pace past [`urgent`] of it.
    pub expires: Option<SystemTime>,
    /// When the client certificate of the new content expires (recorded with the digest).
    pub not_after: Option<SystemTime>,
    /// Its workers poll another place than the connection's (a version kept on a previous
    /// connection or Temporal namespace): the new content must be accepted there, checked with
    /// a client of that place, before its workers restart onto it.
    pub verify: bool,
}

/// A Temporal connection as the pace counts it: the address and namespace the workers poll.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    pub address: String,
    pub namespace: String,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} namespace {}", self.address, self.namespace)
    }
}

/// A restart held back by this plan, for the status and an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldRestart {
    pub deployment: String,
    pub build: String,
    pub why: String,
    /// It waits because something is wrong (the new content was not accepted where its
    /// workers poll), not for its turn: a Warning.
    pub refused: bool,
}

/// A restart the controller started holds its place this long at most, available again or
/// not: a version that never becomes available (its image gone, a node short) must not hold
/// every other restart of its connection for ever.
pub const RESTART_HOLD: Duration = Duration::from_secs(600);

/// A restart whose pods' certificate expires within this goes at once, whatever the pace:
/// the longest a restart may take ([`RESTART_HOLD`]) and five minutes to spare.
pub const URGENT_BEFORE_EXPIRY: Duration = Duration::from_secs(900);

/// Whether a restart of pods whose certificate expires at `expires` must go at `now`, paced
/// or not.
pub fn urgent(expires: Option<SystemTime>, now: SystemTime) -> bool {
    expires.is_some_and(|e| e <= now + URGENT_BEFORE_EXPIRY)
}

/// Whether `d` runs its current pod template everywhere: every pod updated and available,
/// none of an older template left, and the Deployment controller has seen the latest spec.
pub fn rolled_out(d: &ObservedDeployment) -> bool {
    let want = d.spec_replicas.unwrap_or(d.replicas);
    let seen = match (d.generation, d.observed_generation) {
        (Some(g), Some(o)) => o >= g,
        (Some(_), None) => false,
        (None, _) => true,
    };
    seen && d.updated_replicas >= want
        && d.replicas <= d.updated_replicas
        && d.available_replicas >= want
}

/// Whether `d` is in the middle of a restart the controller started (it holds a place in the
/// pace): restarted less than [`RESTART_HOLD`] ago and not [`rolled_out`] yet.
pub fn restarting(d: &ObservedDeployment, now: SystemTime) -> bool {
    d.restarted_at
        .is_some_and(|at| now < at + RESTART_HOLD && !rolled_out(d))
}

/// The place `d`'s workers poll; None when its Deployment does not say.
pub fn place_of(d: &ObservedDeployment) -> Option<Place> {
    Some(Place {
        address: d.temporal_address.clone()?,
        namespace: d.temporal_namespace.clone()?,
    })
}

/// Whether `wd` asks not to have its workers restarted when its Secrets change (they reload
/// them themselves).
pub fn opted_out(wd: &WorkerDeployment) -> bool {
    wd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESTART_ON_SECRET_CHANGE_ANNOTATION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
}

/// The part of a credentials digest (`<names>.<content>`) that says which Secrets it is of.
pub fn secrets_of(digest: &str) -> &str {
    digest.split_once('.').map_or(digest, |(names, _)| names)
}

/// The digests to record and the restarts, for the Deployments this plan does not otherwise
/// write: a Deployment the plan applies or reconnects starts new pods anyway and gets the
/// digest with that write ([`stamp`]); one it deletes or scales to 0 needs none.
///
/// A running Deployment whose pods started with other content of the same Secrets restarts,
/// whatever its connection: an older version kept on a previous connection or Temporal
/// namespace mounts the same Secrets of the same namespace, and its pinned workflows need its
/// workers to reach Temporal too (a rolling update, nothing stops). A Deployment without a
/// digest gets the current one recorded when its pods mount the current connection's Secrets.
///
/// The current and target versions restart last: while another version of `wd` restarts (or
/// is about to), theirs wait ([`Plan::restarts_held`]), unless their certificate is about to
/// expire.
pub(super) fn plan_credentials(
    wd: &WorkerDeployment,
    observed: &Observed,
    desired_conn: &super::deployment::PodConnection,
    here: &Place,
    plan: &mut Plan,
) {
    let Some(digest) = observed.secrets_digest.as_deref() else {
        return;
    };
    stamp(plan, digest, observed.secrets_not_after);
    let opted_out = opted_out(wd);
    let now = observed.now;
    let last = |build: &str| {
        *build == plan.target_build_id
            || observed.temporal.current_build_id.as_deref() == Some(build)
    };
    let mut writes = Vec::new();
    // Each Deployment apart (a version with worker groups has one per group).
    let each = observed
        .deployments
        .iter()
        .flat_map(|(build, v)| v.each().map(move |d| (build, d)));
    for (build, d) in each {
        let written = plan
            .apply
            .iter()
            .any(|a| a.metadata.name.as_deref() == Some(&d.name))
            || plan.reconnect.contains(build)
            || plan.retire.contains(build)
            || plan.delete_deployments.contains(&d.name);
        let current_connection = desired_conn.holds(d);
        let stopping = plan.scale.iter().any(|(n, r)| *n == d.name && *r == 0);
        if !written {
            let written_at = observed.secrets_written_at;
            let w = write_for(
                d,
                digest,
                written_at,
                current_connection,
                stopping,
                opted_out,
            );
            writes.extend(w.map(|mut w| {
                w.not_after = observed.secrets_not_after;
                w.verify = w.restart && w.place != *here;
                (last(build), w)
            }));
        }
    }
    // Another version restarting now, or about to: the current and target wait for it.
    let others_restart = observed
        .deployments
        .iter()
        .any(|(b, v)| !last(b) && v.each().any(|d| restarting(d, now)))
        || writes.iter().any(|(l, w)| !l && w.restart);
    for (last, w) in writes {
        if last && w.restart && others_restart && !urgent(w.expires, now) {
            plan.restarts_held.push(HeldRestart {
                deployment: w.deployment,
                build: w.build,
                why: "restarts after the older versions of its WorkerDeployment".into(),
                refused: false,
            });
        } else {
            plan.credentials.push(w);
        }
    }
}

/// A pod created this long after the Secrets' content was written read that content: the
/// kubelet's copy of a Secret follows the apiserver within seconds.
pub const KUBELET_SLACK: Duration = Duration::from_secs(60);

/// Whether `d`'s pods provably started with the Secrets' content written at `written_at`:
/// all created [`KUBELET_SLACK`] after it (both known).
fn started_after(d: &ObservedDeployment, written_at: Option<SystemTime>) -> bool {
    match (d.oldest_pod, written_at) {
        (Some(pod), Some(written)) => pod >= written + KUBELET_SLACK,
        _ => false,
    }
}

/// What to write on `d` for Secrets of digest `digest`, last written at `written_at`, now:
/// nothing when its pods started with it or mount other Secrets (a digest not recorded is
/// taken as the current connection's when `current_connection`); a restart when it runs (not
/// `stopping`, not scaled to 0), its WorkerDeployment did not opt out, and its pods may hold
/// other content (a recorded digest differs, or none is recorded and its pods are not
/// provably younger than the content); else the digest recorded.
fn write_for(
    d: &ObservedDeployment,
    digest: &str,
    written_at: Option<SystemTime>,
    current_connection: bool,
    stopping: bool,
    opted_out: bool,
) -> Option<CredentialsWrite> {
    let same_secrets = match d.credentials_digest.as_deref() {
        Some(recorded) => recorded != digest && secrets_of(recorded) == secrets_of(digest),
        None => current_connection,
    };
    let stopping = stopping || d.spec_replicas == Some(0);
    // TWC's Deployment, or an earlier build's: adopted as it is only when its pods started
    // after the content they must hold was written; else they may hold older credentials.
    let stale = d.credentials_digest.is_some() || !started_after(d, written_at);
    same_secrets.then(|| CredentialsWrite {
        deployment: d.name.clone(),
        build: d.build_id.clone(),
        digest: digest.to_string(),
        restart: stale && !stopping && !opted_out,
        place: place_of(d).unwrap_or_default(),
        expires: d.credentials_not_after,
        not_after: None,
        verify: false,
    })
}

/// While `wd` is being deleted: the restarts of the versions `kept` for their pinned
/// workflows whose Secrets (of digest `digest`, as read by a client of `here`) changed; they
/// must reach Temporal to finish. One polling elsewhere than `here` is verified there first.
pub fn while_deleting<'a>(
    wd: &WorkerDeployment,
    kept: impl IntoIterator<Item = &'a ObservedDeployment>,
    digest: Option<&str>,
    here: &Place,
) -> Vec<CredentialsWrite> {
    let Some(digest) = digest else {
        return Vec::new();
    };
    kept.into_iter()
        .filter_map(|d| write_for(d, digest, None, false, false, opted_out(wd)))
        .filter(|w| w.restart)
        .map(|mut w| {
            w.verify = w.place != *here;
            w
        })
        .collect()
}

/// Records `digest` (and the certificate's expiry, `not_after`) on every Deployment the plan
/// applies (each starts pods that mount the Secrets as they are now).
fn stamp(plan: &mut Plan, digest: &str, not_after: Option<SystemTime>) {
    for d in &mut plan.apply {
        let annotations = d.metadata.annotations.get_or_insert_with(Default::default);
        annotations.insert(CREDENTIALS_DIGEST.into(), digest.into());
        if let Some(t) = not_after {
            annotations.insert(CREDENTIALS_NOT_AFTER.into(), rfc3339(t));
        }
    }
}
