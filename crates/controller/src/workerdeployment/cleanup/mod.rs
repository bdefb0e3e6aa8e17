//! Deletion: route Temporal back to unversioned workers, stop the versioned Deployments,
//! delete the versions and the Temporal worker deployment, then drop the finalizer (and with
//! it the WorkerDeployment's hold on its connection). A cleanup that cannot run waits, with a
//! Warning saying how to get out; one that has nothing to clean says so and lets go.

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PropagationPolicy};
use kube::runtime::controller::Action;
use std::collections::BTreeSet;
use std::time::SystemTime;

use twc_api::conditions::{CLEANUP_BLOCKED, READY, ROUTED_BY_ANOTHER_MANAGER};
use twc_api::{
    FINALIZER, SKIP_DRAINAGE_ANNOTATION, SKIP_TEMPORAL_CLEANUP_ANNOTATION, WorkerDeployment,
};

mod keeping;

use keeping::{Keeping, Kept};

use super::{Context, STALE_RETRY};
use crate::conditions::set_condition;
use crate::config::Manager;
use crate::connections;
use crate::error::{Error, Result, Rpc};
use crate::events::EventType;
use crate::plan::{self, ObservedDeployment, build_id};
use crate::temporal::pool::PoolKey;
use crate::temporal::{Code, DeploymentState, Status, WorkerDeploymentRef};
use crate::writes::{self, Swap};
use temporalio_client::Connection as TemporalConnection;

/// Deletion: route Temporal back to unversioned, stop the versioned Deployments, delete the
/// versions and the Temporal deployment, then let the WorkerDeployment go (and with it, its
/// hold on the connection).
pub async fn cleanup(wd: &WorkerDeployment, ctx: &Context) -> Result<Action> {
    if !wd.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let mut dialled_before = None;
    match clean(wd, ctx, &mut dialled_before).await {
        // The namespace is being deleted and Temporal now refuses the credentials the
        // controller had before its Secrets went: as when it had none, what is left is said.
        Err(e) if e.is_refused_credentials() && dialled_before.is_some() => {
            let ns = wd.namespace().unwrap_or_default();
            let deployment_name = build_id::temporal_deployment_name(&ns, &wd.name_any());
            let temporal_ns = &wd.spec.worker_options.temporal_namespace;
            let why = dialled_before.unwrap_or_default();
            ctx.event(
                wd,
                EventType::Warning,
                "CleanupSkipped",
                format!(
                    "{why}; namespace {ns} is being deleted and Temporal refuses the credentials the controller had before ({e}): Temporal worker deployment {deployment_name} in Temporal namespace {temporal_ns} is left as it is"
                ),
            )
            .await;
            let_go(wd, ctx).await
        }
        other => other,
    }
}

/// [`cleanup`]; `dialled_before` is set (to why) when it cleans up with the client the
/// controller dialled before the namespace being deleted lost what it needs.
async fn clean(
    wd: &WorkerDeployment,
    ctx: &Context,
    dialled_before: &mut Option<String>,
) -> Result<Action> {
    let ns = wd.namespace().unwrap_or_default();
    let temporal_ns = wd.spec.worker_options.temporal_namespace.clone();
    let deployment_name = build_id::temporal_deployment_name(&ns, &wd.name_any());
    let identity = ctx.identity().to_string();

    // Every versioned Deployment, with the place its workers poll: the Temporal namespace it
    // was rendered for, through the connection it was rendered for.
    let owned: Vec<ObservedDeployment> = ctx
        .deployments
        .in_namespace(&ns)
        .iter()
        .filter(|d| plan::deployment::is_owned_by(d.as_ref(), wd))
        .map(|d| d.view.clone())
        .collect();
    // A WorkerDeployment that never read its state from Temporal and never ran a worker has
    // nothing there to clean up; its deletion must not wait for a connection that never
    // worked. (A status can be lost or written by someone else: workers of its own, which
    // may have registered versions, say otherwise.)
    let never_connected = owned.is_empty()
        && wd
            .status
            .as_ref()
            .is_none_or(|s| s.version_count.is_none() && s.current_version.is_none());
    // Temporal cannot be reached (no connection, not allowed, an unusable Secret, the server
    // down): the deletion waits (`CleanupBlocked`), unless there is nothing there to clean up
    // or a person chose to leave Temporal as it is. Never skipped by accident.
    let abandon = wd
        .annotations()
        .get(SKIP_TEMPORAL_CLEANUP_ANNOTATION)
        .is_some_and(|v| v == "true");
    // (The chaos self-test's broken variant leaves Temporal as if abandoned.)
    let abandon = abandon || crate::chaos_break::is("skip-cleanup");
    let client = match connect(wd, ctx, &ns, &temporal_ns).await {
        Ok(client) => Some(client),
        Err(e) if never_connected => {
            ctx.event(
                wd,
                EventType::Warning,
                "CleanupSkipped",
                format!("{e}; this WorkerDeployment never reached Temporal, so there is nothing to clean up"),
            )
            .await;
            None
        }
        // The whole namespace is being deleted: Kubernetes takes its workers and its Secrets
        // whatever the controller does, usually before the cleanup is done. The client the
        // controller dialled with those Secrets before cleans up; without one, a cleanup that
        // needs them would hold the namespace Terminating for ever: what is left in Temporal
        // is said.
        Err(e)
            if e.is_permanent_in_dying_namespace()
                && crate::rights::terminating(&ctx.client, &ns).await =>
        {
            match client_dialled_before(wd, ctx, &ns, &temporal_ns) {
                Some(client) => {
                    tracing::info!(
                        namespace = ns,
                        name = wd.name_any(),
                        "{e}; namespace {ns} is being deleted: Temporal is cleaned up with the client dialled before"
                    );
                    *dialled_before = Some(e.to_string());
                    Some(client)
                }
                None => {
                    ctx.event(
                        wd,
                        EventType::Warning,
                        "CleanupSkipped",
                        format!(
                            "{e}; namespace {ns} is being deleted, so its credentials and workers are going: Temporal worker deployment {deployment_name} in Temporal namespace {temporal_ns} is left as it is"
                        ),
                    )
                    .await;
                    None
                }
            }
        }
        Err(e) if abandon => {
            ctx.event(
                wd,
                EventType::Warning,
                "CleanupSkipped",
                format!(
                    "{e}; Temporal worker deployment {deployment_name} is left as it is, as annotation {SKIP_TEMPORAL_CLEANUP_ANNOTATION}=true asks"
                ),
            )
            .await;
            None
        }
        Err(e) => return Err(e),
    };

    let retry = |what: String| {
        tracing::info!(
            namespace = ns,
            name = wd.name_any(),
            "deletion waits: {what}"
        );
        Ok(Action::requeue(ctx.intervals.moving))
    };
    let skip_drainage = wd
        .annotations()
        .get(SKIP_DRAINAGE_ANNOTATION)
        .is_some_and(|v| v == "true");
    let place_of = |d: &ObservedDeployment| {
        d.temporal_namespace
            .clone()
            .unwrap_or_else(|| temporal_ns.clone())
    };
    // Versions whose workers stay, where they poll: Temporal still routes new work to them,
    // they hold open pinned workflows, or what they need cannot be known. The deletion waits.
    let mut keep = Keeping::default();
    // The places cleaned up in Temporal once the workers are gone.
    let mut cleaned: Vec<(String, DeploymentState)> = Vec::new();
    if let Some((conn, key, resolved)) = &client {
        ctx.reads
            .take(key, crate::temporal::reads::Priority::Moving)
            .await;
        let hash = plan::deployment::connection_hash(&resolved.spec);
        let same_connection =
            |d: &ObservedDeployment| d.connection_hash.as_deref().is_none_or(|h| h == hash);
        // The spec's namespace, and every other one a version of this connection polls (left
        // there by a `temporalNamespace` change, with its pinned workflows), where the
        // connection still allows the controller to act: what a version left in another one
        // serves cannot be read, so it is kept.
        let mut places = BTreeSet::from([temporal_ns.clone()]);
        for d in owned.iter().filter(|d| same_connection(d)) {
            let place = place_of(d);
            if resolved.allows_temporal_namespace(&place) {
                places.insert(place);
            } else if !skip_drainage {
                let why = format!("{}; its workers poll there", resolved.refusal_in(&place));
                keep.unknown.push((d.build_id.clone(), why));
            }
        }
        for place in places {
            let target = WorkerDeploymentRef {
                conn,
                namespace: &place,
                name: &deployment_name,
                identity: &identity,
            };
            match clean_routing(wd, ctx, &target, skip_drainage).await? {
                Routed::Changed => return Ok(Action::requeue(ctx.intervals.moving)),
                Routed::Kept(mut kept, state) => {
                    // Only workers that poll there can serve that place's workflows: a
                    // version whose Deployment moved on (a target that followed a
                    // `temporalNamespace` change) has nothing of ours to keep there.
                    kept.retain(|build| {
                        owned
                            .iter()
                            .any(|d| d.build_id == build && place_of(d) == place)
                    });
                    keep.places.push((place.clone(), kept));
                    cleaned.extend(state.map(|s| (place, *s)));
                }
            }
        }
        // A version rendered for another connection cannot be read through this one: what
        // it still serves is not known, so it is kept.
        if !skip_drainage {
            keep.unknown.extend(owned.iter().filter(|d| !same_connection(d)).map(|d| {
                (
                    d.build_id.clone(),
                    "its workers use a previous connection, which the controller can no longer reach".to_string(),
                )
            }));
        }
    }

    // Stop the workers nothing needs: their pollers would block version deletion.
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let mut stopping = 0;
    for d in &owned {
        if keep.contains(&place_of(d), &d.build_id) {
            continue;
        }
        stopping += 1;
        let name = &d.name;
        // Foreground: the Deployment stays (Terminating) until its pods are gone, so its
        // absence from the cache means its workers stopped polling.
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..Default::default()
        };
        match deployments.delete(name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(Error::kube_write(
                    format!("delete Deployment {ns}/{name}"),
                    &e,
                ));
            }
        }
    }
    if !keep.is_empty() {
        // The workers kept for pinned workflows restart on a renewed Secret, as before.
        let kept = owned
            .iter()
            .filter(|d| keep.contains(&place_of(d), &d.build_id));
        let client = client.as_ref().map(|c| (&c.1, &c.2));
        super::restart_kept(ctx, wd, &deployments, kept, client).await?;
        report_waiting(wd, ctx, &deployment_name, &temporal_ns, &keep).await?;
        return Ok(Action::requeue(
            ctx.intervals.moving.max(ctx.intervals.steady),
        ));
    }

    if !cleaned.is_empty() && stopping > 0 {
        // A worker still polling would register its version again right after its deletion
        // (and with it the worker deployment): delete the versions once the workers are gone.
        return retry(format!(
            "{stopping} versioned Deployments are stopping their workers"
        ));
    }

    if let Some((conn, _, _)) = &client {
        for (place, state) in &cleaned {
            let target = WorkerDeploymentRef {
                conn,
                namespace: place,
                name: &deployment_name,
                identity: &identity,
            };
            for build in state.versions.keys() {
                if let Err(s) = target.delete_version(build, true).await {
                    if s.code() == Code::FailedPrecondition {
                        return retry(format!("version {build}: {}", s.message()));
                    }
                    return Err(Error::temporal(
                        Rpc::DeleteWorkerDeploymentVersion,
                        format!("of {deployment_name}"),
                        &s,
                    ));
                }
            }
            if let Err(s) = target.delete().await {
                if s.code() == Code::FailedPrecondition {
                    return retry(s.message().to_string());
                }
                return Err(Error::temporal(
                    Rpc::DeleteWorkerDeployment,
                    deployment_name.clone(),
                    &s,
                ));
            }
        }
    }
    let_go(wd, ctx).await
}

/// Drops the controller's finalizer: the WorkerDeployment goes.
async fn let_go(wd: &WorkerDeployment, ctx: &Context) -> Result<Action> {
    let finalizers: Vec<String> = wd
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    let api = writes::namespaced_api(&ctx.client, wd);
    Ok(match writes::swap_finalizers(&api, wd, finalizers).await? {
        Swap::Written(_) | Swap::Gone => {
            ctx.own.forget(wd);
            Action::await_change()
        }
        Swap::Stale => Action::requeue(STALE_RETRY),
    })
}

/// The client the controller dialled for `wd`'s connection with its namespace's Secrets as
/// they were, if the pool still holds one whose certificate has not expired (the connection
/// must still resolve, and allow it).
fn client_dialled_before(
    wd: &WorkerDeployment,
    ctx: &Context,
    ns: &str,
    temporal_ns: &str,
) -> Option<(TemporalConnection, PoolKey, connections::Resolved)> {
    let resolved = connections::resolve(wd, &ctx.stores).ok()?;
    let (conn, key) = connections::dialled_before(&ctx.pool, &resolved.spec, ns, temporal_ns)?;
    Some((conn, key, resolved))
}

/// A Temporal client for `wd`'s cleanup through the connection it references now, with that
/// connection.
async fn connect(
    wd: &WorkerDeployment,
    ctx: &Context,
    ns: &str,
    temporal_ns: &str,
) -> Result<(TemporalConnection, PoolKey, connections::Resolved)> {
    crate::chaos_break::refuse("skip-cleanup")?;
    let resolved = connections::resolve(wd, &ctx.stores)?;
    let (conn, key) = connections::temporal_client(
        &ctx.client,
        &ctx.pool,
        &ctx.secret_meta,
        &resolved.spec,
        ns,
        temporal_ns,
    )
    .await?;
    Ok((conn, key, resolved))
}

/// What the routing of one place (a Temporal namespace) says for a deletion.
enum Routed {
    /// New work was just routed back to unversioned workers: look again in a moment.
    Changed,
    /// The versions whose workers stay there, and the state to clean up once every worker is
    /// gone (None: nothing of ours to delete there, or another manager's).
    Kept(Kept, Option<Box<DeploymentState>>),
}

/// Routes new work in `target`'s namespace back to unversioned workers (when the routing is
/// ours) and says which versions keep their workers there.
async fn clean_routing(
    wd: &WorkerDeployment,
    ctx: &Context,
    target: &WorkerDeploymentRef<'_>,
    skip_drainage: bool,
) -> Result<Routed> {
    let deployment_name = target.name;
    let subject = format!("for {deployment_name} in {}", target.namespace);
    let failed = |rpc, s: Status| Error::temporal(rpc, &subject, &s);
    let state = target
        .describe()
        .await
        .map_err(|s| failed(Rpc::DescribeWorkerDeployment, s))?;
    let manager = ctx.identity.manager(&state.manager_identity);
    let mut keep = Kept::default();
    if !state.exists {
        return Ok(Routed::Kept(keep, None));
    }
    if manager == Manager::Foreign {
        if !skip_drainage {
            keep = Kept::of(&state, true);
            keep.manager = Some(state.manager_identity.clone());
            keep.confirm_draining(target)
                .await
                .map_err(|s| failed(Rpc::DescribeWorkerDeploymentVersion, s))?;
        }
        if keep.is_empty() {
            ctx.event(
                wd,
                EventType::Warning,
                "CleanupSkipped",
                format!(
                    "routing of {deployment_name} in Temporal namespace {} is managed by {:?}; Temporal is left as it is",
                    target.namespace, state.manager_identity
                ),
            )
            .await;
        }
        return Ok(Routed::Kept(keep, None));
    }
    let mut token = state.conflict_token.clone();
    if manager == Manager::Claimable && !state.manager_identity.is_empty() {
        // TWC's deprecated default or an identity named for takeover: claimed first, as
        // before any routing change.
        token = target
            .claim_manager(token)
            .await
            .map_err(|s| failed(Rpc::SetWorkerDeploymentManager, s))?;
    }
    let routed = state.ramping_build_id.is_some() || state.current_build_id.is_some();
    if state.ramping_build_id.is_some() {
        token = target
            .set_ramping("", 0.0, token)
            .await
            .map_err(|s| failed(Rpc::SetWorkerDeploymentRampingVersion, s))?;
    }
    if state.current_build_id.is_some() {
        target
            .set_current("", token, true)
            .await
            .map_err(|s| failed(Rpc::SetWorkerDeploymentCurrentVersion, s))?;
    }
    if routed && !skip_drainage {
        // New work goes to unversioned workers now; the versions routed to until now drain
        // (or are drained) at the next look.
        return Ok(Routed::Changed);
    }
    if !skip_drainage {
        keep = Kept::of(&state, false);
        keep.confirm_draining(target)
            .await
            .map_err(|s| failed(Rpc::DescribeWorkerDeploymentVersion, s))?;
    }
    Ok(Routed::Kept(keep, Some(Box::new(state))))
}

/// Says why the deletion waits: `Ready=False` with the reason, and an event when that changes.
async fn report_waiting(
    wd: &WorkerDeployment,
    ctx: &Context,
    deployment_name: &str,
    spec_ns: &str,
    keep: &Keeping,
) -> Result<()> {
    let (why, message) = keep.explain(deployment_name, spec_ns);
    let type_ = if why == ROUTED_BY_ANOTHER_MANAGER || !keep.unknown.is_empty() {
        EventType::Warning
    } else {
        EventType::Normal
    };
    report(wd, ctx, why, message, type_).await
}

/// A deletion that cannot clean Temporal up (`error`): `Ready=False CleanupBlocked` naming it
/// and the way out, a Warning when that changes; the finalizer stays.
pub async fn report_blocked(wd: &WorkerDeployment, ctx: &Context, error: &Error) -> Result<()> {
    let message = format!(
        "deletion waits: cannot clean up Temporal ({}: {error}); its versioned Deployments keep running. Fix it, or annotate the WorkerDeployment {SKIP_TEMPORAL_CLEANUP_ANNOTATION}=true to delete them and leave Temporal as it is",
        error.reason()
    );
    report(wd, ctx, CLEANUP_BLOCKED, message, EventType::Warning).await
}

/// `Ready=False` with `why` and `message` on a WorkerDeployment being deleted, and an event of
/// `type_` when that changes.
async fn report(
    wd: &WorkerDeployment,
    ctx: &Context,
    why: &str,
    message: String,
    type_: EventType,
) -> Result<()> {
    let previous = wd.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    set_condition(
        &mut status.conditions,
        READY,
        "False",
        why,
        &message,
        wd.metadata.generation,
        SystemTime::now(),
    );
    let said = previous
        .conditions
        .iter()
        .any(|c| c.type_ == READY && c.reason == why && c.message == message);
    if !said {
        ctx.event(wd, type_, why, message).await;
    }
    if status != previous {
        let api = writes::namespaced_api(&ctx.client, wd);
        if let Some(written) = writes::apply_status(&api, &wd.name_any(), &status).await? {
            ctx.own.wrote(wd, written);
        }
    }
    Ok(())
}
