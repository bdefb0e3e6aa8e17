//! The credentials writes of a plan, carried out: digests recorded, and restarts onto renewed
//! credential Secrets, each restart through the controller's restart pace
//! ([`crate::restarts`]); and the events and status entries that tell people about them.

use std::time::SystemTime;

use crate::connections::Resolved;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use twc_api::labels::{CREDENTIALS_DIGEST, CREDENTIALS_NOT_AFTER, CREDENTIALS_RESTARTED_AT};
use twc_api::{WaitingRestart, WorkerDeployment};

use super::Context;
use crate::error::{Error, Result};
use crate::events::{EventType, Note};
use crate::plan::credentials::{HeldRestart, Place, place_of};
use crate::plan::{CredentialsWrite, Plan};
use crate::restarts::{Admission, Seen};
use crate::temporal::credentials::rfc3339;

/// The reason of the event for a restart held back by the pace.
pub const RESTART_WAITING: &str = "CredentialsRestartWaiting";
/// The reason of the event for a restart held because the new content was refused where the
/// version's workers poll.
pub const RESTART_REFUSED: &str = "CredentialsNotAcceptedThere";
/// The reason of the event for a restart that went ahead of the pace.
pub const RESTART_UNPACED: &str = "CredentialsRestartedBeforeExpiry";

/// The digest of the credential Secrets' content recorded on a Deployment; with `restarted`,
/// on its pod template too: its pods restart with the new content.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub deployment: String,
    pub build: String,
    pub restarted: bool,
    /// Restarted ahead of the restart pace: the pods' certificate expires then.
    pub urgent: Option<SystemTime>,
}

/// What [`write`] did.
#[derive(Debug, Default)]
pub struct Written {
    pub recorded: Vec<Recorded>,
    /// Restarts the pace holds back.
    pub held: Vec<HeldRestart>,
}

/// Records each credentials digest of `writes` on its Deployment (through `deployments`, in
/// `wd`'s namespace); a restart (the digest on the pod template too, which rolls its pods)
/// only when the pace admits it, recording when it started. What went through and what waits,
/// and the error that stopped it.
///
/// A restart of a version whose workers poll elsewhere than `conn` reaches (kept on a previous
/// connection or Temporal namespace) goes only once the new content was accepted there
/// ([`accepted_at`]); else it keeps what it has, and says why.
pub async fn write(
    ctx: &Context,
    wd: &WorkerDeployment,
    deployments: &Api<Deployment>,
    writes: &[CredentialsWrite],
    conn: &Resolved,
    now: SystemTime,
) -> (Written, Result<()>) {
    let ns = wd.namespace().unwrap_or_default();
    let wd_key = format!("{ns}/{}", wd.name_any());
    let mut written = Written::default();
    let mut waiting_at: Vec<&Place> = Vec::new();
    for write in writes {
        let mut annotations = json!({CREDENTIALS_DIGEST: write.digest});
        if let Some(t) = write.not_after {
            annotations[CREDENTIALS_NOT_AFTER] = json!(rfc3339(t));
        }
        let mut body = json!({"metadata": {"annotations": annotations}});
        let deployment = format!("{ns}/{}", write.deployment);
        let mut urgent = None;
        if write.restart && write.verify {
            let server_name = server_name_of(ctx, &ns, &write.deployment);
            let accepted = accepted_at(ctx, wd, conn, write, server_name.as_deref()).await;
            if let Err(why) = accepted {
                written.held.push(HeldRestart {
                    deployment: write.deployment.clone(),
                    build: write.build.clone(),
                    why: format!(
                        "keeps the credentials its workers started with: the credential Secrets' new content was not accepted at {}, where they poll: {why}",
                        write.place
                    ),
                    refused: true,
                });
                continue;
            }
        }
        if write.restart {
            let seen = seen_at(ctx, &write.place, now);
            let admission = ctx.restarts.admit(
                &wd_key,
                &deployment,
                &write.place,
                write.expires,
                now,
                &seen,
            );
            tracing::debug!(
                deployment,
                place = %write.place,
                restarting = seen.iter().filter(|s| s.restarting).count(),
                "restart onto renewed credentials: {admission:?}"
            );
            match admission {
                Admission::Wait { limit, .. } => {
                    written.held.push(HeldRestart {
                        deployment: write.deployment.clone(),
                        build: write.build.clone(),
                        why: format!(
                            "waits for its turn: at most {limit} versioned Deployments of {} restart at once (--restart-pace)",
                            write.place
                        ),
                        refused: false,
                    });
                    waiting_at.push(&write.place);
                    continue;
                }
                Admission::Urgent { expires } => urgent = Some(expires),
                Admission::Go => {}
            }
            body["metadata"]["annotations"][CREDENTIALS_RESTARTED_AT] = json!(rfc3339(now));
            body["spec"] = json!({"template": {"metadata": {"annotations": {CREDENTIALS_DIGEST: write.digest}}}});
        }
        let patched = deployments
            .patch(
                &write.deployment,
                &PatchParams::default(),
                &Patch::Merge(body),
            )
            .await;
        if write.restart && patched.is_err() {
            ctx.restarts.release(&write.place, &deployment);
        }
        match patched {
            Ok(_) => {
                if write.restart {
                    crate::metrics::global().restarted(urgent.is_some());
                }
                written.recorded.push(Recorded {
                    deployment: write.deployment.clone(),
                    build: write.build.clone(),
                    restarted: write.restart,
                    urgent,
                })
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                let what = format!(
                    "record the credentials of Deployment {ns}/{}",
                    write.deployment
                );
                return (written, Err(Error::kube_write(what, &e)));
            }
        }
    }
    for w in writes.iter().filter(|w| w.restart) {
        if !waiting_at.contains(&&w.place) {
            ctx.restarts.done(&wd_key, &w.place);
        }
    }
    (written, Ok(()))
}

/// The TLS server name the pods of Deployment `ns/name` verify the server with, as the watch
/// cache shows it.
fn server_name_of(ctx: &Context, ns: &str, name: &str) -> Option<String> {
    ctx.deployments.get(ns, name)?.view.tls_server_name.clone()
}

/// Whether the credential Secrets' content of `write` (as they are now) is accepted where its
/// workers poll, `write.place`: a client of that address, dialled with that content and the
/// pods' server name, reads the worker deployment in that Temporal namespace (absent is an
/// answer too). Why not, otherwise.
async fn accepted_at(
    ctx: &Context,
    wd: &WorkerDeployment,
    conn: &Resolved,
    write: &CredentialsWrite,
    server_name: Option<&str>,
) -> std::result::Result<(), String> {
    let place = &write.place;
    // Not even read where the connection does not let the controller act.
    if !conn.allows_temporal_namespace(&place.namespace) {
        return Err(conn.refusal_in(&place.namespace));
    }
    let mut spec = conn.spec.clone();
    spec.host_port = place.address.clone();
    match server_name {
        Some(n) => spec.tls.get_or_insert_with(Default::default).server_name = Some(n.into()),
        None => {
            if let Some(t) = spec.tls.as_mut() {
                t.server_name = None;
            }
        }
    }
    let ns = wd.namespace().unwrap_or_default();
    let (client, key) = crate::connections::temporal_client(
        &ctx.client,
        &ctx.pool,
        &ctx.secret_meta,
        &spec,
        &ns,
        &place.namespace,
    )
    .await
    .map_err(|e| e.to_string())?;
    // The Secrets changed again since the plan: the next reconcile restarts onto that.
    if ctx.pool.secrets_digest(&key).as_deref() != Some(write.digest.as_str()) {
        return Err("the Secrets changed again meanwhile".into());
    }
    ctx.reads
        .take(&key, crate::temporal::reads::Priority::Moving)
        .await;
    let name = crate::plan::build_id::temporal_deployment_name(&ns, &wd.name_any());
    let target = crate::temporal::WorkerDeploymentRef {
        conn: &client,
        namespace: &place.namespace,
        name: &name,
        identity: ctx.identity(),
    };
    match target.describe().await {
        Ok(_) => Ok(()),
        Err(s) if s.code() == crate::temporal::Code::NotFound => Ok(()),
        Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
    }
}

/// Every versioned Deployment of `place` the watch cache shows, at `now`.
fn seen_at(ctx: &Context, place: &Place, now: SystemTime) -> Vec<Seen> {
    ctx.deployments
        .all()
        .iter()
        .filter(|d| place_of(&d.view).as_ref() == Some(place))
        .map(|d| Seen::of(&d.namespace().unwrap_or_default(), &d.view, now))
        .collect()
}

/// The restarts waiting after this reconcile, for the status: the plan's own (the current
/// and target after the others) and the pace's.
pub fn waiting(plan: &Plan, held: &[HeldRestart]) -> Vec<WaitingRestart> {
    let mut all: Vec<WaitingRestart> = plan
        .restarts_held
        .iter()
        .chain(held)
        .map(|h| WaitingRestart {
            deployment: h.deployment.clone(),
            build_id: h.build.clone(),
            message: h.why.clone(),
        })
        .collect();
    all.sort_by(|a, b| a.deployment.cmp(&b.deployment));
    all
}

/// The events of the credentials writes: a restart (and one ahead of the pace, which says
/// why), and a restart that starts to wait (once, when it was not waiting before: a Warning
/// when it waits because its new content was refused where its workers poll).
pub fn notes(wd: &WorkerDeployment, recorded: &[Recorded], held: &[HeldRestart]) -> Vec<Note> {
    let mut notes = Vec::new();
    for r in recorded.iter().filter(|r| r.restarted) {
        let Recorded {
            deployment,
            build,
            urgent,
            ..
        } = r;
        notes.push(Note {
            type_: EventType::Normal,
            reason: "CredentialsChanged",
            note: format!(
                "restarting the pods of Deployment {deployment} (buildID {build}): the content of a credential Secret of its connection changed, and workers read it only at start"
            ),
        });
        if let Some(expires) = urgent {
            notes.push(Note {
                type_: EventType::Warning,
                reason: RESTART_UNPACED,
                note: format!(
                    "restarted Deployment {deployment} (buildID {build}) ahead of the restart pace: the client certificate its pods hold expires at {}",
                    rfc3339(*expires)
                ),
            });
        }
    }
    let before = wd
        .status
        .as_ref()
        .map(|s| s.restarts_waiting.as_slice())
        .unwrap_or_default();
    for h in held {
        let was = before.iter().find(|b| b.deployment == h.deployment);
        if was.is_some_and(|b| b.message == h.why) {
            continue;
        }
        let (type_, reason) = match h.refused {
            true => (EventType::Warning, RESTART_REFUSED),
            false => (EventType::Normal, RESTART_WAITING),
        };
        notes.push(Note {
            type_,
            reason,
            note: format!(
                "Deployment {} (buildID {}) {}",
                h.deployment, h.build, h.why
            ),
        });
    }
    notes
}
