//! The rounds of rollouts, and what converged means.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::bail;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use twc_controller::plan::target_build_id;

use crate::deletions::delete_and_recreate;
use crate::replicas::Replica;
use crate::temporal_view::{Status, View};

use crate::{CALL_TIMEOUT, IMAGE, Rng, Run};

/// Whether `name` is at its spec's target, judged from the spec and what the servers say,
/// never from the controller's status: the build ID of the spec's template is current in
/// Temporal, nothing ramps, and its Deployment (each group's) has every replica ready (the
/// spec's, or the scaler's once one took over).
pub(crate) async fn converged(run: &Run<'_>, name: &str) -> Option<bool> {
    let state = run.describe(name).await?;
    converged_with(run, name, &state).await
}

/// [`converged`], with Temporal's `state` already read.
pub(crate) async fn converged_with(run: &Run<'_>, name: &str, state: &View) -> Option<bool> {
    let wd = run.wds().get(name).await.ok()?;
    // The wanted build, from the spec alone (the build ID is a pure function of the template).
    let want = target_build_id(&wd);
    if state.current.as_deref() != Some(&want) || state.ramping.is_some() {
        return Some(false);
    }
    let autoscaled = run.report().autoscaled.contains(name);
    for member in run.members(name, &want) {
        let d = run.deployments().get_opt(&member.name).await.ok()??;
        let ready = d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        // A scaler owns the replicas of the Deployment it took over (a new version starts
        // with the Deployment's default, 1, until the scaler acts; no HPA controller runs
        // here).
        let scaled = autoscaled
            && member
                .group
                .is_none_or(|g| g == crate::groups::SCALED_GROUP);
        let wanted = if scaled {
            d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1).max(1)
        } else {
            run.replicas
        };
        if d.metadata.deletion_timestamp.is_some() || ready < wanted {
            return Some(false);
        }
    }
    Some(true)
}

pub(crate) async fn wait_converged(
    run: &Run<'_>,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        if converged(run, name).await == Some(true) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!("{name} did not reach its spec's target within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The rounds: a pinned workflow and a new image for every WorkerDeployment, then waits for
/// each to converge (I4).
pub(crate) async fn drive(
    run: &Run<'_>,
    controllers: &Mutex<[Replica; 2]>,
    rng: &mut Rng,
    rounds: usize,
) -> anyhow::Result<()> {
    for round in 1..=rounds {
        // One round in three, one WorkerDeployment is deleted mid-rollout and created again
        // (not in the self-test, whose broken variants may never drain).
        let deleted = (!run.self_test && rng.between(0, 2) == 0)
            .then(|| rng.between(0, run.names.len() as u64 - 1) as usize);
        if let Some(i) = deleted {
            delete_and_recreate(run, controllers, rng, i, round).await?;
        }
        for (i, name) in run.names.iter().enumerate() {
            if deleted == Some(i) {
                continue;
            }
            let id = format!("pinned-{name}-r{round}");
            // The self-test's pinned workflows outlast a rollout, so that the old version is
            // still Draining when it is promoted away from.
            let seconds = rng.between(2, 12) + if run.self_test { 30 } else { 0 };
            let seconds = seconds.to_string();
            let _moving = run.spec_lock.lock().await;
            pin(run, name, &id, &seconds).await;
            set_image(run, name, &format!("{IMAGE}:r{round}")).await;
        }
        for name in &run.names {
            match wait_converged(run, name, run.converge).await {
                Ok(_) => run.report().rollouts += 1,
                // Faults keep coming: judged once they stop (I4), counted meanwhile.
                Err(e) => {
                    println!("   round {round}: {e} (faults go on)");
                    run.report().slow += 1;
                }
            }
        }
        let (rollouts, faults) = {
            let report = run.report();
            (report.rollouts, report.faults.len())
        };
        println!("   round {round}/{rounds}: {rollouts} rollouts done, {faults} faults so far");
    }
    Ok(())
}

/// Makes `name`'s current version Draining: a pinned workflow `id` of 60-75 s on it (long
/// enough to outlast a rollout, a Progressive one pausing 30 s at 50 %), then `image`; waits
/// until that version is Draining and the new one is the spec's target, converged. The
/// version, or None (printed why) when there was no current version to read, it drained
/// before it was seen Draining, or the rollout did not converge within the bound.
pub(crate) async fn make_current_drain(
    run: &Run<'_>,
    rng: &mut Rng,
    name: &str,
    id: &str,
    image: &str,
) -> Option<String> {
    let mut current = None;
    for _ in 0..20 {
        if let Some(state) = run.describe(name).await {
            current = state.current;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let seconds = rng.between(60, 75).to_string();
    let Some(old) = current else {
        println!("   {name} has no current version to drain now");
        set_image(run, name, image).await;
        return None;
    };
    pin(run, name, id, &seconds).await;
    set_image(run, name, image).await;
    let deadline = Instant::now() + run.converge;
    loop {
        let status = run
            .describe(name)
            .await
            .and_then(|s| s.versions.get(&old).copied());
        if status == Some(Status::Draining) && converged(run, name).await == Some(true) {
            return Some(old);
        }
        if matches!(status, Some(Status::Drained | Status::Inactive)) {
            println!("   {old} of {name} drained before it was seen Draining");
            return None;
        }
        if Instant::now() > deadline {
            println!("   {old} of {name} was not seen Draining with its successor converged");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Starts pinned workflow `id` on `name`'s current version, sleeping `seconds`, and records
/// the version its first workflow task completed on (I2 checks it completes there).
pub(crate) async fn pin(run: &Run<'_>, name: &str, id: &str, seconds: &str) {
    let place = run.place_of(name);
    let temporal = run.temporal_of(place.server);
    let mut started = false;
    for _ in 0..20 {
        let start = twc_testenv::temporal::start_workflow(
            temporal,
            &place.namespace,
            name,
            "Sleep",
            id,
            Some(seconds),
        );
        if matches!(tokio::time::timeout(CALL_TIMEOUT, start).await, Ok(Ok(()))) {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if started {
        // Its own version: where its first workflow task completes, before the image
        // changes (a few seconds at most; not seen in time, only completion is judged).
        let mut pinned = None;
        for _ in 0..20 {
            let read = crate::temporal_view::workflow(temporal, &place.namespace, id);
            if let Ok(Ok((_, Some(build)))) = tokio::time::timeout(CALL_TIMEOUT, read).await {
                pinned = Some(build);
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        run.report()
            .pinned
            .push((id.to_string(), place.clone(), pinned));
    }
}

/// Sets the image of `name`, retrying while the apiserver restarts.
pub(crate) async fn set_image(run: &Run<'_>, name: &str, image: &str) {
    let ops: Vec<serde_json::Value> = run
        .image_paths(name)
        .iter()
        .map(|path| json!({"op": "replace", "path": path, "value": image}))
        .collect();
    let patch = json!(ops);
    for _ in 0..60 {
        let Ok(p) = serde_json::from_value(patch.clone()) else {
            return;
        };
        if run
            .wds()
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(p))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    run.report().violate(
        "I4",
        format!("could not set the image of {name} for a minute"),
    );
}
