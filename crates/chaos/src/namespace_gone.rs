//! The fault "watched namespace deleted" (namespace-scoped install only): the run's namespace is
//! deleted with everything in it, the controller's own Role and RoleBinding there included,
//! while versions drain pinned workflows; once it is gone it is created again as a GitOps tool
//! would: the same Secrets, Connection, WorkerResourceTemplates and WorkerDeployments, and the
//! install's RBAC there.
//!
//! What is judged:
//! - I3: the namespace is gone within the bound (the controller keeps its rights there until
//!   its WorkerDeployments' cleanup is done, so it never stays Terminating), and Temporal keeps
//!   no worker deployment of them, but for those the controller named as left as they are
//!   (`CleanupSkipped`; a namespace being deleted refuses Events, so in its log): noted;
//! - I4: created again, every WorkerDeployment reaches its spec's target within the bound.
//!
//! Meanwhile I1 and I2 are not judged: the workers went with the namespace, as any Deployment's
//! do (docs/safety.md), and the pinned workflows they served lost them. Those still open once
//! it is gone are terminated, as a person would, and counted, not judged.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use std::sync::atomic::Ordering;
use temporalio_client::tonic;
use twc_api::{Connection, WorkerDeployment, WorkerResourceTemplate};
use twc_controller::plan::build_id;

use crate::auth_switch::API_KEY_SECRET;
use crate::deletions::{read_for_i3, temporal_forgot};
use crate::rollouts::wait_converged;
use crate::{CALL_TIMEOUT, CONNECTION, IDENTITY, MTLS_SECRET, Run};

/// One deletion of the namespace, for the report.
pub(crate) struct Deletion {
    /// From the delete until the namespace was gone.
    pub(crate) gone_after: Duration,
    /// From its creation again until every WorkerDeployment was at its spec's target.
    pub(crate) converged_after: Option<Duration>,
    /// Pinned workflows still open when it was gone (terminated).
    pub(crate) lost_pinned: usize,
}

/// What is created again: as read before the deletion, without what the servers wrote.
struct Saved {
    secrets: Vec<Secret>,
    connection: Connection,
    templates: Vec<WorkerResourceTemplate>,
    wds: Vec<WorkerDeployment>,
}

impl Saved {
    async fn read(run: &Run<'_>) -> anyhow::Result<Self> {
        let secrets = Api::<Secret>::namespaced(run.client.clone(), &run.ns);
        let mut saved = Vec::new();
        for name in [MTLS_SECRET, API_KEY_SECRET] {
            saved.push(fresh(&secrets.get(name).await?)?);
        }
        let connection = Api::<Connection>::namespaced(run.client.clone(), &run.ns)
            .get(CONNECTION)
            .await?;
        let templates = Api::<WorkerResourceTemplate>::namespaced(run.client.clone(), &run.ns)
            .list(&ListParams::default())
            .await?;
        let wds = run.wds().list(&ListParams::default()).await?;
        if wds.items.len() != run.names.len() {
            bail!(
                "{} of {} WorkerDeployments are there",
                wds.items.len(),
                run.names.len()
            );
        }
        Ok(Self {
            secrets: saved,
            connection: fresh(&connection)?,
            templates: templates
                .items
                .iter()
                .map(fresh)
                .collect::<Result<_, _>>()?,
            wds: wds.items.iter().map(fresh).collect::<Result<_, _>>()?,
        })
    }

    async fn create(&self, run: &Run<'_>) -> anyhow::Result<()> {
        let pp = PostParams::default();
        let secrets = Api::<Secret>::namespaced(run.client.clone(), &run.ns);
        for s in &self.secrets {
            secrets.create(&pp, s).await?;
        }
        Api::<Connection>::namespaced(run.client.clone(), &run.ns)
            .create(&pp, &self.connection)
            .await?;
        let templates = Api::<WorkerResourceTemplate>::namespaced(run.client.clone(), &run.ns);
        for t in &self.templates {
            templates.create(&pp, t).await?;
        }
        for wd in &self.wds {
            run.wds().create(&pp, wd).await?;
        }
        Ok(())
    }
}

/// `obj` as a manifest would give it: its name, labels, annotations and content; no status,
/// nothing else the servers wrote.
fn fresh<K: Serialize + DeserializeOwned>(obj: &K) -> anyhow::Result<K> {
    let mut v = serde_json::to_value(obj)?;
    let meta = &v["metadata"];
    let meta = json!({
        "name": meta["name"],
        "labels": meta["labels"],
        "annotations": meta["annotations"],
    });
    v["metadata"] = meta;
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    Ok(serde_json::from_value(v)?)
}

/// The fault: deletes the run's namespace, judges what it left, creates it again and waits
/// until every WorkerDeployment is at its spec's target again.
pub(crate) async fn delete_and_recreate(run: &Run<'_>) -> anyhow::Result<()> {
    // No deletion of the driver's and no spec change meanwhile.
    let _whole = run.namespace_lock.lock().await;
    let _specs = run.spec_lock.lock().await;
    let saved = Saved::read(run).await?;
    let namespaces: Api<Namespace> = Api::all(run.client.clone());
    run.away.store(true, Ordering::SeqCst);
    let at = Instant::now();
    if let Err(e) = namespaces.delete(&run.ns, &DeleteParams::default()).await {
        run.away.store(false, Ordering::SeqCst);
        return Err(e.into());
    }
    println!("   deleting namespace {}", run.ns);
    let gone_after = loop {
        if matches!(namespaces.get_opt(&run.ns).await, Ok(None)) {
            break at.elapsed();
        }
        if at.elapsed() > run.converge {
            let held = what_holds(run).await;
            run.report().violate(
                "I3",
                format!(
                    "namespace {} is still Terminating {} s after its deletion: {held}",
                    run.ns,
                    run.converge.as_secs()
                ),
            );
            // Nothing can be created there again: the run goes on without it, judged.
            bail!("namespace {} was not deleted", run.ns);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "   namespace {} gone after {:.1} s",
        run.ns,
        gone_after.as_secs_f64()
    );
    for name in &run.names {
        let target = saved
            .wds
            .iter()
            .find(|wd| wd.metadata.name.as_deref() == Some(name.as_str()))
            .map(twc_controller::plan::target_build_id)
            .unwrap_or_default();
        forgotten_or_named(run, name, &target).await;
        for place in run.left_places_of(name) {
            temporal_forgot(run, name, &place, true).await;
        }
    }
    let lost_pinned = end_lost_pinned(run).await;
    {
        // Nothing of the places moved away from runs any more, nor any scaler's replicas.
        let mut report = run.report();
        for places in report.places.values_mut() {
            let now = places.pop();
            places.clear();
            places.extend(now);
        }
        report.scaled.clear();
    }

    let created = Instant::now();
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": run.ns}}))?,
        )
        .await
        .context("create the namespace again")?;
    crate::scoped::grant(&run.client, &run.ns).await?;
    saved.create(run).await?;
    let mut converged_after = Some(Duration::ZERO);
    for name in &run.names {
        match wait_converged(run, name, run.converge).await {
            Ok(_) => converged_after = converged_after.map(|_| created.elapsed()),
            Err(e) => {
                converged_after = None;
                run.report().violate(
                    "I4",
                    format!("after namespace {} was created again: {e}", run.ns),
                );
            }
        }
    }
    run.away.store(false, Ordering::SeqCst);
    println!(
        "   namespace {} created again; {}; {lost_pinned} pinned workflows lost their workers with it (terminated)",
        run.ns,
        match converged_after {
            Some(t) => format!(
                "every WorkerDeployment at its target after {:.1} s",
                t.as_secs_f64()
            ),
            None => "not every WorkerDeployment reached its target".into(),
        }
    );
    run.report().namespace_deletions.push(Deletion {
        gone_after,
        converged_after,
        lost_pinned,
    });
    Ok(())
}

/// Why the namespace is still there: its conditions, and the WorkerDeployments left with
/// their finalizers.
async fn what_holds(run: &Run<'_>) -> String {
    let conditions = Api::<Namespace>::all(run.client.clone())
        .get_opt(&run.ns)
        .await
        .ok()
        .flatten()
        .and_then(|n| n.status)
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.status == "True")
        .map(|c| format!("{}: {}", c.type_, c.message.unwrap_or_default()))
        .collect::<Vec<_>>();
    let wds = run
        .wds()
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|wd| {
                    format!(
                        "{} {:?}",
                        wd.metadata.name.clone().unwrap_or_default(),
                        wd.metadata.finalizers
                    )
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    format!(
        "{}; WorkerDeployments left: {}",
        conditions.join("; "),
        wds.join(", ")
    )
}

/// I3 for `name` once its namespace is gone: Temporal keeps no worker deployment of it where
/// its spec pointed, unless the controller said it left it as it is (noted). The versions left
/// there but its spec's `target` (whose Deployment comes back with it) are no longer judged by
/// I1 and I2: their workers went with the namespace.
async fn forgotten_or_named(run: &Run<'_>, name: &str, target: &str) {
    let place = run.place_of(name);
    let Some(state) = read_for_i3(run, name, &place).await else {
        return;
    };
    if !state.exists {
        return;
    }
    run.report().gone_with_namespace.extend(
        state
            .versions
            .keys()
            .filter(|b| *b != target)
            .map(|b| (name.to_string(), b.clone())),
    );
    let deployment = build_id::temporal_deployment_name(&run.ns, name);
    if named_as_left(run, &deployment) {
        let note = format!(
            "{name}: {place} keeps its worker deployment ({} versions), named as left by the controller when namespace {} was deleted",
            state.versions.len(),
            run.ns
        );
        if run.report().left_behind.insert(note.clone()) {
            println!("   note: {note}");
        }
    } else {
        run.report().violate(
            "I3",
            format!(
                "namespace {} is gone but Temporal ({place}) keeps the worker deployment of {name} ({} versions), and the controller did not say it left it",
                run.ns,
                state.versions.len()
            ),
        );
    }
}

/// Whether a replica's log says it left Temporal worker deployment `deployment` as it is
/// (`CleanupSkipped`: the Event a namespace being deleted refuses goes to the log).
fn named_as_left(run: &Run<'_>, deployment: &str) -> bool {
    let named = format!("Temporal worker deployment {deployment} ");
    (0..2).any(|i| {
        std::fs::read_to_string(run.dir.join(format!("controller-{i}.log"))).is_ok_and(|log| {
            log.lines().any(|l| {
                l.contains("CleanupSkipped") && l.contains(&named) && l.contains("is left as it is")
            })
        })
    })
}

/// Terminates the run's pinned workflows still open (their workers went with the namespace)
/// and takes them out of I2's list; how many.
async fn end_lost_pinned(run: &Run<'_>) -> usize {
    let pinned = run.report().pinned.clone();
    let mut lost = Vec::new();
    for (id, place, _) in pinned {
        let temporal = run.temporal_of(place.server);
        let mut status = None;
        for _ in 0..20 {
            let read = crate::temporal_view::workflow(temporal, &place.namespace, &id);
            if let Ok(Ok((s, _))) = tokio::time::timeout(CALL_TIMEOUT, read).await {
                status = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // Not known: left to I2 at the end, as any other.
        if status.as_deref() != Some("Running") {
            continue;
        }
        let terminate = terminate(temporal, &place.namespace, &id, &run.ns);
        match tokio::time::timeout(CALL_TIMEOUT, terminate).await {
            Ok(Ok(())) => lost.push(id),
            _ => {
                println!("   note: pinned workflow {id} could not be terminated; judged at the end")
            }
        }
    }
    run.report().pinned.retain(|(id, _, _)| !lost.contains(id));
    lost.len()
}

/// Terminates workflow `id` in Temporal namespace `namespace`, its workers gone with
/// Kubernetes namespace `gone`.
async fn terminate(
    conn: &temporalio_client::Connection,
    namespace: &str,
    id: &str,
    gone: &str,
) -> Result<(), tonic::Status> {
    use temporalio_common::protos::temporal::api::common::v1::WorkflowExecution;
    use temporalio_common::protos::temporal::api::workflowservice::v1::TerminateWorkflowExecutionRequest;
    conn.workflow_service()
        .terminate_workflow_execution(tonic::Request::new(TerminateWorkflowExecutionRequest {
            namespace: namespace.to_string(),
            workflow_execution: Some(WorkflowExecution {
                workflow_id: id.to_string(),
                ..Default::default()
            }),
            reason: format!("its workers went with namespace {gone}"),
            identity: IDENTITY.to_string(),
            ..Default::default()
        }))
        .await?;
    Ok(())
}
