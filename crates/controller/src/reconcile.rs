//! The WorkerDeployment reconciler: observe -> plan -> execute -> status (written once, on
//! failure paths too), and the deletion cleanup behind the finalizer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PartialObjectMeta, Patch, PatchParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use twc_api::conditions::{PROGRESSING, READY};
use twc_api::{API_VERSION, FINALIZER, VersionStatus, WorkerDeployment, WorkerDeploymentStatus};

use crate::connections::{self, ConnKey, ConnectionStores};
use crate::error::{Error, Result, kube_message};
use crate::metrics;
use crate::plan::{self, Observed, Plan, Routing, build_id};
use crate::scoped::Scoped;
use crate::status;
use crate::target;
use crate::temporal::{self, Code, DeploymentState, WorkerDeploymentRef, pool::ClientPool};

/// The field manager of every write.
pub const MANAGER: &str = "temporal-worker-controller";

/// How often Temporal is polled: fast while a rollout moves, slowly when steady.
#[derive(Clone, Copy, Debug)]
pub struct Intervals {
    pub moving: Duration,
    pub steady: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Self {
            moving: Duration::from_secs(2),
            steady: Duration::from_secs(60),
        }
    }
}

/// What the WorkerDeployment reconciler needs.
pub struct Context {
    pub client: Client,
    pub pool: ClientPool,
    pub stores: ConnectionStores,
    pub deployments: Scoped<Deployment>,
    pub secret_meta: Scoped<PartialObjectMeta<Secret>>,
    /// WorkerResourceTemplates (one scaling the versions takes `replicas` over).
    pub templates: Scoped<twc_api::WorkerResourceTemplate>,
    pub recorder: Recorder,
    pub intervals: Intervals,
    pub limits: plan::Limits,
    /// WorkerDeployments triggered and waiting for their reconcile (a metric).
    pub queue: metrics::WorkQueue,
    /// Consecutive rate-limited reconciles per WorkerDeployment (`namespace/name`).
    pub throttled: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

impl Context {
    fn identity(&self) -> &str {
        self.pool.identity()
    }

    /// Counts consecutive rate-limited reconciles of `wd` (reset by any other outcome).
    fn throttled(&self, wd: &WorkerDeployment, limited: bool) -> u32 {
        let key = format!("{}/{}", wd.namespace().unwrap_or_default(), wd.name_any());
        let Ok(mut counts) = self.throttled.lock() else {
            return u32::MAX;
        };
        if limited {
            let n = counts.entry(key).or_default();
            *n = n.saturating_add(1);
            *n
        } else {
            counts.remove(&key);
            0
        }
    }

    pub(crate) async fn event(
        &self,
        wd: &WorkerDeployment,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        publish(&self.recorder, wd, type_, reason, note).await;
    }
}

struct Outcome {
    status: WorkerDeploymentStatus,
    plan: Plan,
}

/// Reconciles one WorkerDeployment.
/// Publishes an event about `obj` (a failure to publish is only logged: events are for
/// people, never a reason to fail a reconcile).
pub(crate) async fn publish<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &obj.object_ref(&())).await {
        tracing::debug!("cannot publish event: {e}");
    }
}

/// Reconciles one WorkerDeployment, counted in the metrics.
pub async fn reconcile(wd: Arc<WorkerDeployment>, ctx: Arc<Context>) -> Result<Action> {
    ctx.queue.started(&format!(
        "{}/{}",
        wd.namespace().unwrap_or_default(),
        wd.name_any()
    ));
    metrics::counted(
        CONTROLLER,
        reconcile_worker_deployment(wd, ctx),
        Error::reason,
    )
    .await
}

/// The controller label of the WorkerDeployment reconciler's metrics.
const CONTROLLER: &str = "WorkerDeployment";

async fn reconcile_worker_deployment(
    wd: Arc<WorkerDeployment>,
    ctx: Arc<Context>,
) -> Result<Action> {
    if wd.metadata.deletion_timestamp.is_some() {
        metrics::global()
            .forget_worker_deployment(&wd.namespace().unwrap_or_default(), &wd.name_any());
        return match cleanup(&wd, &ctx).await {
            Ok(action) => Ok(action),
            Err(e) => {
                // Deleting now could leave Temporal routing new workflows to versions whose
                // workers are gone; wait, and say how to get out.
                ctx.event(
                    &wd,
                    EventType::Warning,
                    "CleanupBlocked",
                    format!(
                        "cannot clean up Temporal before deletion ({}: {e}); fix the connection, or remove the finalizer {FINALIZER} to delete without cleanup",
                        e.reason()
                    ),
                )
                .await;
                Ok(Action::requeue(ctx.intervals.moving * 5))
            }
        };
    }
    if !wd.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = wd.finalizers().to_vec();
        finalizers.push(FINALIZER.into());
        // The update event brings us back with the finalizer in place.
        return patch_finalizers(&ctx.client, &wd, finalizers).await;
    }

    let mut resolved_key: Option<ConnKey> = None;
    let result = pipeline(&wd, &ctx, &mut resolved_key).await;
    let now = SystemTime::now();
    let generation = wd.metadata.generation;
    let previous = wd.status.clone().unwrap_or_default();
    let repeats = ctx.throttled(&wd, matches!(result, Err(Error::RateLimited(..))));
    let (mut new_status, action) = match &result {
        Ok(outcome) => {
            let mut s = outcome.status.clone();
            s.conditions = previous.conditions.clone();
            let target = s.target_version.clone().unwrap_or_default();
            for (type_, st, why, msg) in
                status::rollout_conditions(&target, outcome.plan.blocked.as_deref())
            {
                status::set_condition(&mut s.conditions, type_, st, why, &msg, generation, now);
            }
            let after = if outcome.plan.moving {
                ctx.intervals.moving
            } else {
                ctx.intervals.steady
            };
            (s, Action::requeue(after))
        }
        Err(e) => {
            let mut s = previous.clone();
            // A concurrent routing change, or Temporal catching up, is re-read at once; the
            // conditions stay as they were.
            let types = if e.is_warning(repeats) {
                [READY, PROGRESSING].as_slice()
            } else {
                &[]
            };
            for type_ in types {
                status::set_condition(
                    &mut s.conditions,
                    type_,
                    "False",
                    e.reason(),
                    &e.to_string(),
                    generation,
                    now,
                );
            }
            (s, Action::requeue(e.retry_after(&ctx.intervals, repeats)))
        }
    };
    new_status.observed_generation = generation;
    new_status.observed_connection_ref = match &resolved_key {
        Some(k) => Some(status::observed_ref(k)),
        None => previous.observed_connection_ref.clone(),
    };
    if let Err(e) = &result {
        metrics::global().reconcile_failed(CONTROLLER, e.reason());
        let already = previous
            .conditions
            .iter()
            .any(|c| c.type_ == READY && c.reason == e.reason() && c.message == e.to_string());
        if !already && e.is_warning(repeats) {
            ctx.event(&wd, EventType::Warning, e.reason(), e.to_string())
                .await;
        }
        let (ns, name) = (wd.namespace().unwrap_or_default(), wd.name_any());
        if e.is_warning(repeats) {
            tracing::warn!(namespace = ns, name, reason = e.reason(), "{e}");
        } else {
            tracing::debug!(namespace = ns, name, "{e}");
        }
    }
    for (reason, note) in transitions(&previous, &new_status) {
        ctx.event(&wd, EventType::Normal, reason, note).await;
    }
    for note in gate_failures(&previous, &new_status) {
        ctx.event(&wd, EventType::Warning, "GateWorkflowFailed", note)
            .await;
    }
    record_metrics(&wd, &new_status);
    write_status(&ctx.client, &wd, &previous, new_status).await?;
    Ok(action)
}

async fn pipeline(
    wd: &WorkerDeployment,
    ctx: &Context,
    resolved_key: &mut Option<ConnKey>,
) -> Result<Outcome> {
    let ns = wd.namespace().unwrap_or_default();
    let problems = wd.spec.validate();
    if !problems.is_empty() {
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(Error::InvalidSpec(text.join("; ")));
    }
    let resolved = connections::resolve(wd, &ctx.stores)?;
    *resolved_key = Some(resolved.key.clone());
    let temporal_ns = wd.spec.worker_options.temporal_namespace.clone();
    let (conn, pool_key) = connections::temporal_client(
        &ctx.client,
        &ctx.pool,
        &ctx.secret_meta,
        &resolved,
        &ns,
        &temporal_ns,
    )
    .await?;
    let deployment_name = build_id::temporal_deployment_name(&ns, &wd.name_any());
    let target = WorkerDeploymentRef {
        conn: &conn,
        namespace: &temporal_ns,
        name: &deployment_name,
        identity: ctx.identity(),
    };
    let state = match target.describe().await {
        Ok(s) => s,
        Err(status) => {
            if temporal::is_connection_error(&status) {
                ctx.pool.evict(&pool_key);
            }
            return Err(Error::temporal(
                &status,
                format!(
                    "DescribeWorkerDeployment {deployment_name} in Temporal namespace {temporal_ns}"
                ),
                Error::TemporalStateFetchFailed,
            ));
        }
    };
    let target_build = plan::target_build_id(wd);
    let target_observed = target::observe(wd, &target, &target_build, &state).await?;
    let mut observed = Observed {
        now: Some(SystemTime::now()),
        deployments: owned_deployments(wd, &ctx.deployments),
        temporal: state,
        target: target_observed,
        autoscaled: autoscaled(wd, &ctx.templates),
    };
    let plan = plan::plan_with(wd, &resolved.spec, ctx.identity(), &observed, &ctx.limits);
    execute(wd, ctx, &target, &resolved.spec, &plan, &mut observed)
        .await
        .inspect_err(|e| {
            if let Error::PlanExecutionFailed(_) = e {
                tracing::debug!("plan execution failed: {e}");
            }
        })?;
    let status = status::versions(wd, &plan.target_build_id, &observed);
    Ok(Outcome { status, plan })
}

/// Whether a WorkerResourceTemplate of `wd` renders a scaler of its versions (an HPA or the
/// like with `scaleTargetRef`): then the scaler owns their replicas, not the spec.
fn autoscaled(wd: &WorkerDeployment, templates: &Scoped<twc_api::WorkerResourceTemplate>) -> bool {
    let name = wd.name_any();
    templates
        .in_namespace(&wd.namespace().unwrap_or_default())
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .filter(|t| t.spec.worker_deployment_name() == Some(name.as_str()))
        .any(|t| crate::wrt::render::scales_target(&t.spec.template))
}

/// The versioned Deployments `wd` controls, by build ID, from the watch cache.
fn owned_deployments(
    wd: &WorkerDeployment,
    store: &Scoped<Deployment>,
) -> BTreeMap<String, plan::ObservedDeployment> {
    store
        .in_namespace(&wd.namespace().unwrap_or_default())
        .iter()
        .filter(|d| plan::deployment::is_owned_by(d, wd))
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .filter_map(|d| plan::observe_deployment(d))
        .map(|d| (d.build_id.clone(), d))
        .collect()
}

async fn execute(
    wd: &WorkerDeployment,
    ctx: &Context,
    temporal: &WorkerDeploymentRef<'_>,
    conn: &twc_api::ConnectionSpec,
    plan: &Plan,
    observed: &mut Observed,
) -> Result<()> {
    let ns = wd.namespace().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let apply = PatchParams::apply(MANAGER).force();
    let apply_one = |d: Deployment| {
        let (deployments, apply, ns) = (&deployments, &apply, &ns);
        async move {
            let name = d.name_any();
            let mut body =
                serde_json::to_value(&d).map_err(|e| Error::PlanExecutionFailed(e.to_string()))?;
            body["apiVersion"] = json!("apps/v1");
            body["kind"] = json!("Deployment");
            deployments
                .patch(&name, apply, &Patch::Apply(&body))
                .await
                .map_err(|e| write_failed("apply", ns, &name, &e))?;
            Ok::<_, Error>(())
        }
    };
    for d in &plan.apply {
        let name = d.name_any();
        let created = !observed.deployments.values().any(|o| o.name == name);
        apply_one(d.clone()).await?;
        if created {
            ctx.event(
                wd,
                EventType::Normal,
                "DeploymentCreated",
                format!(
                    "created Deployment {name} for buildID {}",
                    plan.target_build_id
                ),
            )
            .await;
        }
    }
    for build in &plan.reconnect {
        let existing = ctx.deployments.in_namespace(&ns).into_iter().find(|d| {
            plan::deployment::is_owned_by(d, wd)
                && d.labels().get(twc_api::labels::BUILD_ID) == Some(build)
        });
        match existing.and_then(|d| plan::deployment::reconnected(&d, wd, build, conn)) {
            Some(d) => {
                let name = d.name_any();
                apply_one(d).await?;
                ctx.event(
                    wd,
                    EventType::Normal,
                    "DeploymentReconnected",
                    format!(
                        "updated Deployment {name} (buildID {build}) for the changed connection"
                    ),
                )
                .await;
            }
            None => tracing::warn!(
                build,
                "the Deployment of buildID {build} does not record what was injected; it keeps its previous connection"
            ),
        }
    }
    for (name, replicas) in &plan.scale {
        deployments
            .patch_scale(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .map_err(|e| write_failed("scale", &ns, name, &e))?;
        if *replicas == 0 {
            ctx.event(
                wd,
                EventType::Normal,
                "ScaledDown",
                format!("scaled Deployment {name} to 0"),
            )
            .await;
        }
    }
    for name in &plan.delete_deployments {
        match deployments.delete(name, &DeleteParams::background()).await {
            Ok(_) => {
                ctx.event(
                    wd,
                    EventType::Normal,
                    "DeploymentDeleted",
                    format!("deleted Deployment {name}"),
                )
                .await;
                observed.deployments.retain(|_, d| d.name != *name);
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(write_failed("delete", &ns, name, &e));
            }
        }
    }
    target::start_gates(wd, ctx, temporal, plan, observed).await?;
    let identity = ctx.identity();
    for build in &plan.delete_versions {
        // Pollers linger for the server's poller TTL after the pods are gone; that and any
        // other refusal just means "later".
        match temporal.delete_version(build, false).await {
            Ok(()) => {
                observed.temporal.versions.remove(build);
                ctx.event(
                    wd,
                    EventType::Normal,
                    "VersionDeleted",
                    format!("deleted version {build} from Temporal"),
                )
                .await;
            }
            Err(s) => tracing::debug!("version {build} not deleted yet: {}", s.message()),
        }
    }
    if let Some(routing) = &plan.routing {
        let mut token = observed.temporal.conflict_token.clone();
        let fail = |what: &str, s: temporal::Status| {
            Error::temporal(
                &s,
                format!("{what} for {}", temporal.name),
                Error::PlanExecutionFailed,
            )
        };
        if plan.claim_manager {
            token = temporal
                .claim_manager(token)
                .await
                .map_err(|s| fail("SetWorkerDeploymentManager", s))?;
            observed.temporal.manager_identity = identity.to_string();
        }
        let state = &mut observed.temporal;
        match routing {
            Routing::SetCurrent(build) => {
                temporal
                    .set_current(build, token, false)
                    .await
                    .map_err(|s| fail("SetWorkerDeploymentCurrentVersion", s))?;
                promote_locally(state, build);
                ctx.event(
                    wd,
                    EventType::Normal,
                    "VersionPromoted",
                    format!("buildID {build} is now current"),
                )
                .await;
            }
            Routing::SetRamp(build, pct) => {
                temporal
                    .set_ramping(build, *pct, token)
                    .await
                    .map_err(|s| fail("SetWorkerDeploymentRampingVersion", s))?;
                state.ramping_build_id = Some(build.clone());
                state.ramp_percentage = *pct;
                state.ramp_changed_at = Some(SystemTime::now());
                if let Some(v) = state.versions.get_mut(build) {
                    v.status = VersionStatus::Ramping;
                }
                ctx.event(
                    wd,
                    EventType::Normal,
                    "RampChanged",
                    format!("buildID {build} ramps at {pct}%"),
                )
                .await;
            }
            Routing::ClearRamp => {
                temporal
                    .set_ramping("", 0.0, token)
                    .await
                    .map_err(|s| fail("SetWorkerDeploymentRampingVersion", s))?;
                state.ramping_build_id = None;
                state.ramp_percentage = 0.0;
            }
        }
        state.last_modifier_identity = identity.to_string();
    }
    Ok(())
}

/// A failed write of a versioned Deployment, as the status reports it.
fn write_failed(verb: &str, ns: &str, name: &str, e: &kube::Error) -> Error {
    Error::PlanExecutionFailed(format!(
        "{verb} Deployment {ns}/{name}: {}",
        kube_message(e)
    ))
}

/// Gate runs that ended without success since the previous status (one event each).
pub fn gate_failures(
    before: &WorkerDeploymentStatus,
    after: &WorkerDeploymentStatus,
) -> Vec<String> {
    use twc_api::WorkflowExecutionStatus as S;
    let runs = |s: &WorkerDeploymentStatus| {
        s.target_version
            .as_ref()
            .map(|t| t.test_workflows.clone())
            .unwrap_or_default()
    };
    let old = runs(before);
    runs(after)
        .into_iter()
        .filter(|w| !matches!(w.status, S::Running | S::Completed))
        .filter(|w| {
            !old.iter()
                .any(|o| o.workflow_id == w.workflow_id && o.status == w.status)
        })
        .map(|w| {
            format!(
                "gate workflow {} (run {}) on task queue {} ended {:?}",
                w.workflow_id, w.run_id, w.task_queue, w.status
            )
        })
        .collect()
}

/// Every version in a status, by build ID.
fn versions(s: &WorkerDeploymentStatus) -> BTreeMap<String, VersionStatus> {
    s.target_version
        .iter()
        .map(|t| &t.base)
        .chain(s.current_version.iter().map(|c| &c.base))
        .chain(s.deprecated_versions.iter().map(|d| &d.base))
        .map(|b| (b.build_id.clone(), b.status))
        .collect()
}

/// Records the versions by status and the ramp of a WorkerDeployment's new status.
fn record_metrics(wd: &WorkerDeployment, status: &WorkerDeploymentStatus) {
    let statuses: Vec<VersionStatus> = versions(status).into_values().collect();
    let ramp = status
        .target_version
        .as_ref()
        .filter(|t| t.base.status == VersionStatus::Ramping)
        .and_then(|t| t.ramp_percentage)
        .unwrap_or(0.0);
    metrics::global().worker_deployment(
        &wd.namespace().unwrap_or_default(),
        &wd.name_any(),
        &statuses,
        ramp,
    );
}

/// Normal events for version transitions between two statuses: a version registered in
/// Temporal (its workers poll) and a version drained.
pub fn transitions(
    before: &WorkerDeploymentStatus,
    after: &WorkerDeploymentStatus,
) -> Vec<(&'static str, String)> {
    let (old, new) = (versions(before), versions(after));
    let mut out = Vec::new();
    for (build, status) in &new {
        let was = old
            .get(build)
            .copied()
            .unwrap_or(VersionStatus::NotRegistered);
        if was == VersionStatus::NotRegistered && *status != VersionStatus::NotRegistered {
            out.push((
                "VersionRegistered",
                format!("workers of buildID {build} poll Temporal; the version is registered"),
            ));
        }
        if *status == VersionStatus::Drained
            && was != VersionStatus::Drained
            && old.contains_key(build)
        {
            out.push((
                "VersionDrained",
                format!("buildID {build} has no open pinned workflows left"),
            ));
        }
    }
    out
}

/// Mirrors a successful SetCurrent in the observed state, so the status written now shows it.
fn promote_locally(state: &mut DeploymentState, build: &str) {
    if let Some(old) = state.current_build_id.replace(build.to_string())
        && old != build
        && let Some(v) = state.versions.get_mut(&old)
    {
        v.status = VersionStatus::Draining;
        v.last_current_at = Some(SystemTime::now());
    }
    if state.ramping_build_id.as_deref() == Some(build) {
        state.ramping_build_id = None;
        state.ramp_percentage = 0.0;
    }
    if let Some(v) = state.versions.get_mut(build) {
        v.status = VersionStatus::Current;
    }
}

async fn write_status(
    client: &Client,
    wd: &WorkerDeployment,
    previous: &WorkerDeploymentStatus,
    status: WorkerDeploymentStatus,
) -> Result<()> {
    if *previous == status {
        return Ok(());
    }
    apply_status(client, wd, &status).await
}

/// Writes the whole `status` of a namespaced object of ours with server-side apply (our field
/// manager owns it all); an object deleted meanwhile is fine.
pub(crate) async fn apply_status<K>(
    client: &Client,
    obj: &K,
    status: &impl serde::Serialize,
) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default());
    let body = json!({
        "apiVersion": API_VERSION,
        "kind": K::kind(&()),
        "status": status,
    });
    match api
        .patch_status(
            &obj.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes `finalizers` with the object's resourceVersion as a precondition. The returned
/// action waits for the resulting change, or retries at once if the object had changed (the
/// cached copy was stale): a lost update must never leave the reconciler waiting for an event
/// that will not come.
async fn patch_finalizers(
    client: &Client,
    wd: &WorkerDeployment,
    finalizers: Vec<String>,
) -> Result<Action> {
    let api: Api<WorkerDeployment> =
        Api::namespaced(client.clone(), &wd.namespace().unwrap_or_default());
    let patch = json!({"metadata": {
        "resourceVersion": wd.resource_version(),
        "finalizers": finalizers,
    }});
    match api
        .patch(
            &wd.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Ok(Action::requeue(Duration::from_millis(200)))
        }
        Err(e) => Err(e.into()),
    }
}

/// Deletion: route Temporal back to unversioned, stop the versioned Deployments, delete the
/// versions and the Temporal deployment, then let the WorkerDeployment go (and with it, its
/// hold on the connection).
async fn cleanup(wd: &WorkerDeployment, ctx: &Context) -> Result<Action> {
    if !wd.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let ns = wd.namespace().unwrap_or_default();
    let temporal_ns = wd.spec.worker_options.temporal_namespace.clone();
    let deployment_name = build_id::temporal_deployment_name(&ns, &wd.name_any());
    let identity = ctx.identity().to_string();

    // A WorkerDeployment that never read its state from Temporal has nothing there to clean
    // up; its deletion must not wait for a connection that never worked.
    let never_connected = wd
        .status
        .as_ref()
        .is_none_or(|s| s.version_count.is_none() && s.current_version.is_none());
    let client = match connections::resolve(wd, &ctx.stores) {
        Ok(resolved) => match connections::temporal_client(
            &ctx.client,
            &ctx.pool,
            &ctx.secret_meta,
            &resolved,
            &ns,
            &temporal_ns,
        )
        .await
        {
            Ok((conn, _)) => Some(conn),
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
            Err(e) => return Err(e),
        },
        Err(Error::ConnectionNotFound(msg)) | Err(Error::InvalidSpec(msg)) => {
            ctx.event(
                wd,
                EventType::Warning,
                "CleanupSkipped",
                format!("{msg}; Temporal worker deployment {deployment_name} is left as it is"),
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
    let mut temporal_state = None;
    let target = client.as_ref().map(|conn| WorkerDeploymentRef {
        conn,
        namespace: &temporal_ns,
        name: &deployment_name,
        identity: &identity,
    });
    if let Some(target) = &target {
        let state = target
            .describe()
            .await
            .map_err(|s| Error::TemporalStateFetchFailed(s.message().to_string()))?;
        let foreign = !state.manager_identity.is_empty() && state.manager_identity != identity;
        if state.exists && foreign {
            ctx.event(
                wd,
                EventType::Warning,
                "CleanupSkipped",
                format!(
                    "routing of {deployment_name} is managed by {:?}; Temporal is left as it is",
                    state.manager_identity
                ),
            )
            .await;
        } else if state.exists {
            let mut token = state.conflict_token.clone();
            if state.ramping_build_id.is_some() {
                token = target
                    .set_ramping("", 0.0, token)
                    .await
                    .map_err(|s| Error::PlanExecutionFailed(s.message().to_string()))?;
            }
            if state.current_build_id.is_some() {
                target
                    .set_current("", token, true)
                    .await
                    .map_err(|s| Error::PlanExecutionFailed(s.message().to_string()))?;
            }
            temporal_state = Some(state);
        }
    }

    // Stop the workers: their pollers would block version deletion.
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let owned: Vec<String> = ctx
        .deployments
        .in_namespace(&ns)
        .iter()
        .filter(|d| plan::deployment::is_owned_by(d, wd))
        .map(|d| d.name_any())
        .collect();
    for name in &owned {
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match deployments.delete(name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }

    if let (Some(target), Some(state)) = (&target, &temporal_state) {
        for build in state.versions.keys() {
            if let Err(s) = target.delete_version(build, true).await {
                if s.code() == Code::FailedPrecondition {
                    return retry(format!("version {build}: {}", s.message()));
                }
                return Err(Error::PlanExecutionFailed(s.message().to_string()));
            }
        }
        if let Err(s) = target.delete().await {
            if s.code() == Code::FailedPrecondition {
                return retry(s.message().to_string());
            }
            return Err(Error::PlanExecutionFailed(s.message().to_string()));
        }
    }
    let finalizers: Vec<String> = wd
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    patch_finalizers(&ctx.client, wd, finalizers).await
}

/// The error policy: real failures back off; the status already says why.
pub fn error_policy(_wd: Arc<WorkerDeployment>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(reason = error.reason(), "reconcile failed: {error}");
    Action::requeue(ctx.intervals.moving * 5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use twc_api::{
        BaseWorkerDeploymentVersion, DeprecatedWorkerDeploymentVersion,
        TargetWorkerDeploymentVersion,
    };

    fn target(build: &str, status: VersionStatus) -> WorkerDeploymentStatus {
        WorkerDeploymentStatus {
            target_version: Some(TargetWorkerDeploymentVersion {
                base: BaseWorkerDeploymentVersion {
                    build_id: build.into(),
                    status,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn events_for_registration_and_drainage_fire_once() {
        let reasons = |a, b| {
            transitions(&a, &b)
                .into_iter()
                .map(|(r, _)| r)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            reasons(
                target("v1", VersionStatus::NotRegistered),
                target("v1", VersionStatus::Inactive)
            ),
            vec!["VersionRegistered"]
        );
        assert!(
            reasons(
                target("v1", VersionStatus::Inactive),
                target("v1", VersionStatus::Current)
            )
            .is_empty()
        );
        let mut before = target("v2", VersionStatus::Current);
        before
            .deprecated_versions
            .push(DeprecatedWorkerDeploymentVersion {
                base: BaseWorkerDeploymentVersion {
                    build_id: "v1".into(),
                    status: VersionStatus::Draining,
                    ..Default::default()
                },
                ..Default::default()
            });
        let mut after = before.clone();
        after.deprecated_versions[0].base.status = VersionStatus::Drained;
        assert_eq!(reasons(before, after.clone()), vec!["VersionDrained"]);
        assert!(reasons(after.clone(), after).is_empty());
    }
}
