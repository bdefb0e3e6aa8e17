//! Deletion: route Temporal back to unversioned workers, stop the versioned Deployments,
//! delete the versions and the Temporal worker deployment, then drop the finalizer (and with
//! it the WorkerDeployment's hold on its connection). A cleanup that cannot run waits, with a
//! Warning saying how to get out; one that has nothing to clean says so and lets go.

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use twc_api::{FINALIZER, WorkerDeployment};

use super::{Context, STALE_RETRY};
use crate::connections;
use crate::error::{Error, Result, Rpc};
use crate::plan::{self, build_id};
use crate::temporal::{Code, Status, WorkerDeploymentRef};
use crate::writes::{self, Swap};

/// Deletion: route Temporal back to unversioned, stop the versioned Deployments, delete the
/// versions and the Temporal deployment, then let the WorkerDeployment go (and with it, its
/// hold on the connection).
pub async fn cleanup(wd: &WorkerDeployment, ctx: &Context) -> Result<Action> {
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
        let subject = format!("for {deployment_name}");
        let failed = |rpc, s: Status| Error::temporal(rpc, &subject, &s);
        let state = target
            .describe()
            .await
            .map_err(|s| failed(Rpc::DescribeWorkerDeployment, s))?;
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
                    .map_err(|s| failed(Rpc::SetWorkerDeploymentRampingVersion, s))?;
            }
            if state.current_build_id.is_some() {
                target
                    .set_current("", token, true)
                    .await
                    .map_err(|s| failed(Rpc::SetWorkerDeploymentCurrentVersion, s))?;
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
            Err(e) => {
                return Err(Error::kube_write(
                    format!("delete Deployment {ns}/{name}"),
                    &e,
                ));
            }
        }
    }

    if let (Some(target), Some(state)) = (&target, &temporal_state) {
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
