//! The observer and the checks of the invariants (I1 to I4).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use twc_api::{ClusterConnection, Connection};
use twc_controller::plan::build_id;

use crate::deletions::temporal_forgot;
use crate::operator::tend_left_behind;
use crate::rollouts::converged_with;
use crate::temporal_view::{Status, View};
use crate::watch::taken_away;
use crate::{
    CALL_TIMEOUT, CLUSTER_CONNECTION, CLUSTER_CONNECTION_B, CONNECTION, OBSERVE_EVERY, Place, Run,
    SCALED,
};

/// Reads Temporal and the apiserver every [`OBSERVE_EVERY`] until the driver is done: I1,
/// I2 (Draining keeps its workers), and the time to converge after each fault.
pub(crate) async fn observe(run: &Run<'_>) {
    while !run.done.load(Ordering::SeqCst) {
        // The namespace is being deleted and created again: its workers went with it.
        if run.away.load(Ordering::SeqCst) {
            tokio::time::sleep(OBSERVE_EVERY).await;
            continue;
        }
        let mut all_converged = true;
        for name in &run.names {
            let Some(state) = run.describe(name).await else {
                run.report().read_errors += 1;
                all_converged = false;
                continue;
            };
            check_workers(run, name, None, &state).await;
            // Where it moved from, only its Draining versions need their workers (nothing is
            // routed there any more: docs/safety.md).
            for left in run.left_places_of(name) {
                match run.describe_at(name, &left).await {
                    Some(old) => check_workers(run, name, Some(&left), &old).await,
                    None => run.report().read_errors += 1,
                }
            }
            let scaled: Vec<String> = run
                .report()
                .scaled
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, b)| b.clone())
                .collect();
            for build in scaled {
                if state.current.as_deref() != Some(build.as_str()) {
                    continue;
                }
                let Some(deployment) = run.scaled_member(name, &build).map(|m| m.name) else {
                    continue;
                };
                if let Ok(Some(d)) = run.deployments().get_opt(&deployment).await
                    && let Some(replicas) = d.spec.and_then(|s| s.replicas)
                    && replicas < SCALED
                {
                    let mut report = run.report();
                    report.violate(
                        "I4",
                        format!("{name}: {deployment}'s replicas, set to {SCALED} by a scaler, were written to {replicas}"),
                    );
                    report.scaled.retain(|(n, b)| !(n == name && *b == build));
                }
            }
            if converged_with(run, name, &state).await != Some(true) {
                all_converged = false;
            }
        }
        // Every 2 s, the person's part after a move (operator.rs).
        if run.report().observations.is_multiple_of(10) {
            tend_left_behind(run).await;
        }
        {
            let mut report = run.report();
            report.observations += 1;
            if all_converged {
                let now = Instant::now();
                for (_, at, took) in report.faults.iter_mut() {
                    if took.is_none() {
                        *took = Some(now - *at);
                    }
                }
            }
        }
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
}

/// I1 and I2 on `state`, read in the spec's namespace (None) or in the one `name` moved away
/// from (only its Draining versions are judged there). A suspected violation is read again.
async fn check_workers(run: &Run<'_>, name: &str, left: Option<&Place>, state: &View) {
    let gone = run.report().gone_with_namespace.clone();
    let judged = |s: &View| -> Vec<(String, &'static str)> {
        needs_workers(s)
            .into_iter()
            .filter(|(_, why)| left.is_none() || *why == "draining")
            .filter(|(b, _)| !gone.contains(&(name.to_string(), b.clone())))
            .collect()
    };
    let place = left.cloned().unwrap_or_else(|| run.place_of(name));
    for (build, why) in judged(state) {
        if lacks_workers(run, name, &build, why, &place)
            .await
            .is_none()
        {
            continue;
        }
        // Read again: the two reads are not one snapshot.
        let again = match left {
            Some(p) => run.describe_at(name, p).await,
            None => run.describe(name).await,
        };
        if again.is_some_and(|s| judged(&s).contains(&(build.clone(), why)))
            && let Some(problem) = lacks_workers(run, name, &build, why, &place).await
            && (why != "draining" || run.still_draining(name, &build, &place).await)
        {
            let invariant = if why == "draining" { "I2" } else { "I1" };
            let place = left.map_or(String::new(), |p| format!(" at {p}, moved from,"));
            run.report().violate(
                invariant,
                format!("{name}: {build} is {why}{place} but {problem}"),
            );
        }
    }
}

/// The versions that must have workers: routed to (I1), or Draining (I2).
pub(crate) fn needs_workers(state: &View) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    out.extend(state.current.clone().map(|b| (b, "current")));
    out.extend(state.ramping.clone().map(|b| (b, "ramping")));
    for (build, status) in &state.versions {
        if *status == Status::Draining && !out.iter().any(|(b, _)| b == build) {
            out.push((build.clone(), "draining"));
        }
    }
    out
}

/// What is wrong with the workers of `build`, if anything (None also when unreadable): its
/// Deployment (a group's) gone, being deleted or scaled to 0, or (routed to) none of its pods
/// ready, or none of them polling Temporal at `place` ([`unlisted`]).
async fn lacks_workers(
    run: &Run<'_>,
    name: &str,
    build: &str,
    why: &str,
    place: &Place,
) -> Option<String> {
    for member in run.members(name, build) {
        if let Some(problem) = member_lacks_workers(run, &member.name, why).await {
            return Some(match member.group {
                Some(group) => format!("its group {group}: {problem}"),
                None => problem,
            });
        }
    }
    if why == "draining" {
        return None;
    }
    unlisted(run, name, build, place).await
}

/// [`lacks_workers`] for one Deployment of the version, but for the worker list.
async fn member_lacks_workers(run: &Run<'_>, deployment: &str, why: &str) -> Option<String> {
    let d = match run.deployments().get_opt(deployment).await {
        Ok(d) => d,
        Err(_) => {
            run.report().read_errors += 1;
            return None;
        }
    };
    let Some(d) = d else {
        return Some("its Deployment is gone".into());
    };
    // Being deleted is gone: its pods are on their way out.
    if let Some(problem) = taken_away(&d, false) {
        return Some(problem.into());
    }
    let ready = d
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    // A draining version's pods may be restarting; only routing needs ready ones.
    if why == "draining" {
        return None;
    }
    (ready == 0).then(|| "none of its pods is ready".into())
}

/// How long a worker may be up before Temporal's worker list must show it: its first
/// heartbeat may come a full interval (60 s) after it started, and a Temporal restart empties
/// the list until each worker's next heartbeat.
const LIST_GRACE: Duration = Duration::from_secs(90);

/// Routed `build` has ready pods, but are they polling? From Temporal's own worker list
/// (`ListWorkers`, fed by the workers' heartbeats): a problem when a pod of it has been ready
/// longer than [`LIST_GRACE`], Temporal has not restarted within it, and the list shows no
/// running worker of the version. None when that cannot be told now.
async fn unlisted(run: &Run<'_>, name: &str, build: &str, place: &Place) -> Option<String> {
    if run
        .report()
        .temporal_restarted
        .is_some_and(|t| t.elapsed() < LIST_GRACE)
    {
        return None;
    }
    // Both labels: two WorkerDeployments with the same template have the same build ID, and
    // one's pods say nothing about the other's workers.
    let selector = format!(
        "{}={name},{}={build}",
        twc_api::labels::DEPLOYMENT_NAME,
        twc_api::labels::BUILD_ID
    );
    let pods = Api::<Pod>::namespaced(run.client.clone(), &run.ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .ok()?;
    let now = std::time::SystemTime::now();
    let (pod, ready_for) = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let since = p
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready" && c.status == "True")?
                .last_transition_time
                .as_ref()?;
            let age = now
                .duration_since(std::time::SystemTime::from(since.0))
                .ok()?;
            Some((p.metadata.name.clone().unwrap_or_default(), age))
        })
        .max_by_key(|(_, age)| *age)?;
    if ready_for < LIST_GRACE {
        return None;
    }
    let read =
        crate::temporal_view::running_workers(run.temporal_of(place.server), &place.namespace);
    let workers = tokio::time::timeout(CALL_TIMEOUT, read).await.ok()?.ok()?;
    let deployment = build_id::temporal_deployment_name(&run.ns, name);
    let listed = workers
        .get(&(deployment, build.to_string()))
        .copied()
        .unwrap_or(0);
    (listed == 0).then(|| {
        format!(
            "Temporal ({place}) lists no running worker of it, though pod {pod} has been ready for {} s",
            ready_for.as_secs()
        )
    })
}

pub(crate) fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// I2: every pinned workflow started during the run completes, on the version it was pinned
/// to when it started.
pub(crate) async fn check_pinned(run: &Run<'_>) {
    let pinned = run.report().pinned.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    for (id, place, own) in pinned {
        loop {
            let temporal = run.temporal_of(place.server);
            let read = crate::temporal_view::workflow(temporal, &place.namespace, &id);
            // Unreadable for now: not known, asked again until the deadline.
            let read = tokio::time::timeout(CALL_TIMEOUT, read)
                .await
                .ok()
                .and_then(Result::ok);
            match read {
                Some((status, build)) if status == "Completed" => {
                    if own.is_some() && build != own {
                        run.report().violate(
                            "I2",
                            format!("pinned workflow {id} completed on {build:?}, not on its own version {own:?}"),
                        );
                    }
                    break;
                }
                Some((status, _)) if status != "Running" => {
                    run.report()
                        .violate("I2", format!("pinned workflow {id} ended {status}"));
                    break;
                }
                _ if Instant::now() > deadline => {
                    run.report().violate(
                        "I2",
                        format!("pinned workflow {id} not seen completed within 120 s"),
                    );
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
}

/// I3: every WorkerDeployment deleted, then every connection; nothing left in Temporal.
pub(crate) async fn check_deletion(run: &Run<'_>) {
    for name in &run.names {
        let _ = run.wds().delete(name, &DeleteParams::default()).await;
    }
    let deadline = Instant::now() + run.converge;
    for name in &run.names {
        // A failed read is not known, never gone: read again.
        while !matches!(run.wds().get_opt(name).await, Ok(None)) {
            if Instant::now() > deadline {
                run.report()
                    .violate("I3", format!("WorkerDeployment {name} is not deleted"));
                break;
            }
            tend_left_behind(run).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let ccs: Api<ClusterConnection> = Api::all(run.client.clone());
    let cs: Api<Connection> = Api::namespaced(run.client.clone(), &run.ns);
    for cc in [CLUSTER_CONNECTION, CLUSTER_CONNECTION_B] {
        let _ = ccs.delete(cc, &DeleteParams::default()).await;
    }
    let _ = cs.delete(CONNECTION, &DeleteParams::default()).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let cc_left = !matches!(ccs.get_opt(CLUSTER_CONNECTION).await, Ok(None))
            || !matches!(ccs.get_opt(CLUSTER_CONNECTION_B).await, Ok(None));
        let c_left = !matches!(cs.get_opt(CONNECTION).await, Ok(None));
        if !cc_left && !c_left {
            break;
        }
        if Instant::now() > deadline {
            run.report().violate(
                "I3",
                format!("connections left (ClusterConnection: {cc_left}, Connection: {c_left})"),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for name in &run.names {
        temporal_forgot(run, name, &run.place_of(name), false).await;
        for place in run.left_places_of(name) {
            temporal_forgot(run, name, &place, true).await;
        }
    }
}
