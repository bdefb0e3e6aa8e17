//! Workers read their credentials once, at start: a client certificate or CA from the mounted
//! Secret, an API key from an environment variable. When a credential Secret's content
//! changes (a renewal, a rotation to a new CA, a new API key), the versions' pods restart with
//! the new content, as a rolling update of the same pod template (same build ID, pinned
//! workflows keep their version).
//!
//! Each versioned Deployment records the digest of the content its pods started with
//! (`temporal.io/credentials-digest` on the Deployment). A Deployment without one (TWC made
//! it, or an older controller) gets the current digest recorded, and nothing restarts: a
//! takeover restarts no pod. One whose digest differs gets the new digest on its pod template
//! too, which rolls its pods.

use twc_api::labels::CREDENTIALS_DIGEST;
use twc_api::{RESTART_ON_SECRET_CHANGE_ANNOTATION, WorkerDeployment};

use super::{Observed, ObservedDeployment, Plan};

/// A digest to record on a versioned Deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialsWrite {
    pub deployment: String,
    pub build: String,
    pub digest: String,
    /// Restart its pods (the digest goes on its pod template too); else only record it.
    pub restart: bool,
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
pub(super) fn plan_credentials(
    wd: &WorkerDeployment,
    observed: &Observed,
    desired_conn_hash: &str,
    plan: &mut Plan,
) {
    let Some(digest) = observed.secrets_digest.as_deref() else {
        return;
    };
    stamp(plan, digest);
    let opted_out = opted_out(wd);
    for (build, d) in &observed.deployments {
        let written = plan
            .apply
            .iter()
            .any(|a| a.metadata.name.as_deref() == Some(&d.name))
            || plan.reconnect.contains(build)
            || plan.retire.contains(build)
            || plan.delete_deployments.contains(&d.name);
        let current_connection = d.connection_hash.as_deref() == Some(desired_conn_hash);
        let stopping = plan.scale.iter().any(|(n, r)| *n == d.name && *r == 0);
        if !written {
            plan.credentials.extend(write_for(
                d,
                digest,
                current_connection,
                stopping,
                opted_out,
            ));
        }
    }
}

/// What to write on `d` for Secrets of digest `digest` now: nothing when its pods started with
/// it or mount other Secrets (a digest not recorded is taken as the current connection's when
/// `current_connection`); a restart when it runs (not `stopping`, not scaled to 0) and its
/// WorkerDeployment did not opt out; else the digest recorded.
fn write_for(
    d: &ObservedDeployment,
    digest: &str,
    current_connection: bool,
    stopping: bool,
    opted_out: bool,
) -> Option<CredentialsWrite> {
    let same_secrets = match d.credentials_digest.as_deref() {
        Some(recorded) => recorded != digest && secrets_of(recorded) == secrets_of(digest),
        None => current_connection,
    };
    let stopping = stopping || d.spec_replicas == Some(0);
    same_secrets.then(|| CredentialsWrite {
        deployment: d.name.clone(),
        build: d.build_id.clone(),
        digest: digest.to_string(),
        restart: d.credentials_digest.is_some() && !stopping && !opted_out,
    })
}

/// While `wd` is being deleted: the restarts of the versions `kept` for their pinned
/// workflows whose Secrets (of digest `digest`) changed; they must reach Temporal to finish.
pub fn while_deleting<'a>(
    wd: &WorkerDeployment,
    kept: impl IntoIterator<Item = &'a ObservedDeployment>,
    digest: Option<&str>,
) -> Vec<CredentialsWrite> {
    let Some(digest) = digest else {
        return Vec::new();
    };
    kept.into_iter()
        .filter_map(|d| write_for(d, digest, false, false, opted_out(wd)))
        .filter(|w| w.restart)
        .collect()
}

/// Records `digest` on every Deployment the plan applies (each starts pods that mount the
/// Secrets as they are now).
fn stamp(plan: &mut Plan, digest: &str) {
    for d in &mut plan.apply {
        d.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(CREDENTIALS_DIGEST.into(), digest.into());
    }
}
