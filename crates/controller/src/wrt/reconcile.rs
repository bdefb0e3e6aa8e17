//! The WorkerResourceTemplate reconciler: observe (watch caches of WorkerDeployments and
//! versioned Deployments, API discovery of the template's kind), plan (pure), execute
//! (owner reference, deletes, server-side applies; every failure recorded, none fatal), and
//! the status, written once with server-side apply and only when it changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::events::{EventType, Recorder};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use twc_api::WorkerResourceTemplate;
use twc_api::conditions::READY;

use super::plan::{self, Observed, ObservedWorkerDeployment, Outcome, Plan};
use super::{reason, render};
use crate::error::{Error, Result, kube_message};
use crate::metrics;
use crate::writes::{self, MANAGER, OwnWrites, Swap};

/// The controller label of this reconciler's metrics.
pub(crate) const CONTROLLER: &str = "WorkerResourceTemplate";
/// A retry after a failure (apply refused, kind not served, delete failed).
const RETRY: Duration = Duration::from_secs(30);
/// How long a discovered kind is trusted, and how long a missing one is.
const SERVED_TTL: Duration = Duration::from_secs(300);
const MISSING_TTL: Duration = Duration::from_secs(10);

/// API discovery of template kinds, cached: one request per kind and TTL, not per reconcile.
#[derive(Clone, Default)]
pub struct Discovery(Arc<Mutex<HashMap<Gvk, (Instant, Resolved)>>>);

/// (group, version, kind).
type Gvk = (String, String, String);
type Resolved = std::result::Result<ApiResource, plan::Problem>;

impl Discovery {
    /// The API resource of (group, version, kind) if it is served and namespaced.
    pub async fn resolve(&self, client: &Client, gvk: &Gvk) -> Resolved {
        if let Ok(cache) = self.0.lock()
            && let Some((at, r)) = cache.get(gvk)
        {
            let ttl = if r.is_ok() { SERVED_TTL } else { MISSING_TTL };
            if at.elapsed() < ttl {
                return r.clone();
            }
        }
        let (group, version, kind) = gvk;
        let api_version = if group.is_empty() {
            version.clone()
        } else {
            format!("{group}/{version}")
        };
        let resolved = match kube::discovery::pinned_kind(
            client,
            &GroupVersionKind::gvk(group, version, kind),
        )
        .await
        {
            Ok((ar, caps)) if caps.scope == Scope::Namespaced => Ok(ar),
            Ok(_) => Err(plan::Problem {
                reason: reason::APPLY_FAILED,
                message: format!(
                    "{api_version} {kind} is cluster-scoped; a WorkerResourceTemplate renders only namespaced objects"
                ),
                terminal: true,
            }),
            // Its CRD may be on its way (installed with the release, or by another team).
            Err(e) => Err(plan::Problem {
                reason: reason::APPLY_FAILED,
                message: format!(
                    "{api_version} {kind} is not served by the apiserver: {}",
                    kube_message(&e)
                ),
                terminal: false,
            }),
        };
        if let Ok(mut cache) = self.0.lock() {
            cache.insert(gvk.clone(), (Instant::now(), resolved.clone()));
        }
        resolved
    }
}

/// What the reconciler needs (one per watched scope: its caches are the scope's).
pub struct Context {
    pub client: Client,
    /// Open once the WorkerDeployment and Deployment caches below have been filled.
    pub synced: crate::scoped::Synced,
    pub worker_deployments: Store<crate::cached::CachedWorkerDeployment>,
    /// The scope's versioned Deployments, found by namespace.
    pub deployments: crate::scoped::Scoped<crate::children::CachedDeployment>,
    pub recorder: Recorder,
    pub discovery: Discovery,
    pub allowed_kinds: Vec<String>,
    /// Reconcile again after this long when all is well.
    pub resync: Duration,
    /// Writes the watch cache has not shown yet.
    pub own: OwnWrites<WorkerResourceTemplate>,
}

impl Context {
    async fn event(
        &self,
        wrt: &WorkerResourceTemplate,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        writes::publish(&self.recorder, wrt, type_, reason, note).await;
    }
}

/// Reconciles one WorkerResourceTemplate, counted in the metrics.
pub async fn reconcile(wrt: Arc<WorkerResourceTemplate>, ctx: Arc<Context>) -> Result<Action> {
    // The copy from before our own last write, if the cache has not caught up.
    let wrt = ctx.own.freshest(wrt);
    metrics::counted(CONTROLLER, sync(wrt, ctx), Error::reason).await
}

/// The error policy: only a failed status write gets here.
pub fn error_policy(_: Arc<WorkerResourceTemplate>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!("WorkerResourceTemplate reconcile failed: {error}");
    Action::requeue(Duration::from_secs(5))
}

async fn sync(wrt: Arc<WorkerResourceTemplate>, ctx: Arc<Context>) -> Result<Action> {
    if wrt.meta().deletion_timestamp.is_some() {
        // Its copies are owned by it: the garbage collector removes them.
        ctx.own.forget(&wrt);
        let ns = wrt.namespace().unwrap_or_default();
        metrics::global().forget_conditions(CONTROLLER, &ns, &wrt.name_any());
        return Ok(Action::await_change());
    }
    // A WorkerDeployment not yet in a cache that is still filling is not "not found".
    ctx.synced.wait().await;
    let (observed, resource) = observe(&wrt, &ctx).await;
    let plan = plan::plan(&wrt, &observed);
    let outcome = execute(&wrt, &ctx, &plan, resource.as_ref()).await;
    let status = plan::status(&wrt, &observed, &plan, &outcome, SystemTime::now());

    let ready = |s: Option<&twc_api::WorkerResourceTemplateStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == READY))
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let (before, after) = (ready(wrt.status.as_ref()), ready(Some(&status)));
    if let Some((st, why, message)) = &after
        && st == "False"
        && before != after
    {
        tracing::info!(
            namespace = wrt.namespace().unwrap_or_default(),
            name = wrt.name_any(),
            reason = why,
            "{message}"
        );
        ctx.event(&wrt, EventType::Warning, why, message.clone())
            .await;
    }
    let failed = after.as_ref().is_some_and(|(st, _, _)| st == "False")
        || outcome.deleted.len() < plan.deletes.len();
    let previous = wrt.status.clone().unwrap_or_default();
    if previous != status
        && let Some(written) = write_status(&ctx.client, &wrt, &status).await?
    {
        ctx.own.wrote(&wrt, written);
    }
    let ns = wrt.namespace().unwrap_or_default();
    metrics::global().conditions(CONTROLLER, &ns, &wrt.name_any(), &status.conditions);
    Ok(if plan.worker_deployment_missing {
        Action::await_change()
    } else if failed {
        Action::requeue(RETRY)
    } else {
        // Back at the next version's sunset scale-down, when it comes before the resync.
        let until_sunset = observed
            .next_sunset
            .and_then(|t| t.duration_since(SystemTime::now()).ok())
            .map(|d| d + Duration::from_millis(500));
        Action::requeue(until_sunset.map_or(ctx.resync, |d| d.min(ctx.resync)))
    })
}

async fn observe(wrt: &WorkerResourceTemplate, ctx: &Context) -> (Observed, Option<ApiResource>) {
    let ns = wrt.namespace().unwrap_or_default();
    let name = wrt.spec.worker_deployment_name().unwrap_or_default();
    let wd = ctx
        .worker_deployments
        .get(&ObjectRef::new(name).within(&ns));
    let mut observed = Observed {
        allowed_kinds: ctx.allowed_kinds.clone(),
        ..Default::default()
    };
    let Some(cached) = wd else {
        return (observed, None);
    };
    let wd = cached.watched();
    let wd = &wd;
    let Some(owner) = wd.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = Some(true);
        o
    }) else {
        return (observed, None);
    };
    // The spec's groups and the drained versions with their times are in the spec and the
    // status, which the cache keeps as JSON.
    let full = cached.full().0;
    observed.worker_deployment = Some(ObservedWorkerDeployment {
        name: wd.name_any(),
        temporal_namespace: wd.spec.worker_options.temporal_namespace.clone(),
        groups: full
            .spec
            .group_views()
            .iter()
            .map(|g| g.name.to_string())
            .collect(),
        owner,
    });
    let group = wrt.spec.effective_worker_group();
    for d in crate::children::owned_each(wd, &ctx.deployments) {
        observed.version_groups.insert(d.group.clone());
        if d.group == group {
            observed.versions.insert(d.build_id, d.name);
        }
    }
    let sunset = super::sunset::sunset(&full, SystemTime::now());
    observed.sunset = sunset.builds;
    observed.next_sunset = sunset.next;
    let template = &wrt.spec.template;
    if !render::check(template, &ctx.allowed_kinds).is_empty() {
        return (observed, None);
    }
    let Some(gvk) = render::gvk(template) else {
        return (observed, None);
    };
    match ctx.discovery.resolve(&ctx.client, &gvk).await {
        Ok(ar) => (observed, Some(ar)),
        Err(e) => {
            observed.kind_problem = Some(e);
            (observed, None)
        }
    }
}

/// Carries out the plan; every failure is recorded in the outcome (or logged), none stops
/// the rest.
async fn execute(
    wrt: &WorkerResourceTemplate,
    ctx: &Context,
    plan: &Plan,
    resource: Option<&ApiResource>,
) -> Outcome {
    let ns = wrt.namespace().unwrap_or_default();
    let mut outcome = Outcome::default();
    if let Some(refs) = &plan.owner_references {
        let api = writes::namespaced_api(&ctx.client, wrt);
        // A stale copy comes back with the change; anything else is retried.
        match writes::swap_metadata(&api, wrt, "ownerReferences", json!(refs)).await {
            Ok(Swap::Written(written)) => ctx.own.wrote(wrt, *written),
            Ok(Swap::Gone | Swap::Stale) => {}
            Err(e) => tracing::debug!(
                "owner reference of {ns}/{}: {}",
                wrt.name_any(),
                kube_message(&e)
            ),
        }
    }
    let Some(resource) = resource else {
        return outcome;
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, resource);
    for (build, name) in &plan.deletes {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {
                outcome.deleted.insert(build.clone());
                ctx.event(
                    wrt,
                    EventType::Normal,
                    "ResourceDeleted",
                    format!(
                        "deleted {} {name}: buildID {build} has no Deployment",
                        resource.kind
                    ),
                )
                .await;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                outcome.deleted.insert(build.clone());
            }
            Err(e) => tracing::debug!("delete {} {ns}/{name}: {}", resource.kind, kube_message(&e)),
        }
    }
    let params = PatchParams::apply(MANAGER).force();
    for apply in &plan.applies {
        match api
            .patch(&apply.name, &params, &Patch::Apply(&apply.object))
            .await
        {
            Ok(_) => {
                ctx.event(
                    wrt,
                    EventType::Normal,
                    "ResourceApplied",
                    format!(
                        "applied {} {} for buildID {}",
                        resource.kind, apply.name, apply.build_id
                    ),
                )
                .await;
            }
            Err(e) => {
                if refused_outright(&e) {
                    outcome.refused.insert(apply.build_id.clone());
                }
                outcome
                    .apply_errors
                    .insert(apply.build_id.clone(), kube_message(&e));
            }
        }
    }
    outcome
}

/// The apiserver refused the object itself (invalid, a bad request, not allowed): sending it
/// again cannot help. Conflicts, throttling, timeouts and server errors can.
fn refused_outright(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if matches!(s.code, 400 | 401 | 403 | 405 | 415 | 422))
}

async fn write_status(
    client: &Client,
    wrt: &WorkerResourceTemplate,
    status: &twc_api::WorkerResourceTemplateStatus,
) -> Result<Option<WorkerResourceTemplate>> {
    let api = writes::namespaced_api(client, wrt);
    Ok(writes::apply_status(&api, &wrt.name_any(), status).await?)
}
