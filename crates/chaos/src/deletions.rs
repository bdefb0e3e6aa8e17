//! The deletion faults, injected by the driver between its own steps: a WorkerDeployment
//! deleted while its previous version drains a pinned workflow of 60-75 s (and, every other time, while
//! both controller replicas are down), then created again under the same name.
//!
//! What is judged: the observer and the watch keep checking that the Draining version keeps
//! its workers while the WorkerDeployment is being deleted (I2); its pinned workflow completes
//! on its own version (I2, at the end); the WorkerDeployment goes away and Temporal keeps no
//! worker deployment of it (I3, right away); the same name created again rolls out (I4).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::bail;
use kube::api::{DeleteParams, PostParams};

use crate::faults::{Fault, kill};
use crate::operator::tend_left_behind;
use crate::replicas::{Replica, restart_stopped};
use crate::rollouts::make_current_drain;
use crate::setup::worker_deployment;
use crate::temporal_view::View;
use crate::{IMAGE, Place, Rng, Run};

/// Deletes WorkerDeployment `i` mid-rollout and creates it again at round `round`'s image.
/// When the old version is never seen Draining, nothing is deleted (a plain rollout). An
/// error means the WorkerDeployment could not be deleted or created again.
pub(crate) async fn delete_and_recreate(
    run: &Run<'_>,
    controllers: &Mutex<[Replica; 2]>,
    rng: &mut Rng,
    i: usize,
    round: usize,
) -> anyhow::Result<()> {
    let name = &run.names[i];
    // Never while the namespace is deleted and created again.
    let _whole = run.namespace_lock.lock().await;
    let down = rng.between(0, 1) == 1;
    let fault = if down {
        Fault::DeleteWhileControllerDown
    } else {
        Fault::DeleteWhileDraining
    };
    let image = format!("{IMAGE}:r{round}");
    let old = {
        let _moving = run.spec_lock.lock().await;
        let id = format!("pinned-{name}-r{round}-deleted");
        make_current_drain(run, rng, name, &id, &image).await
    };
    let Some(old) = old else {
        println!("   {name}: rolled out without a deletion");
        return Ok(());
    };
    if down {
        kill(controllers, 0)?;
        kill(controllers, 1)?;
    }
    let at = Instant::now();
    // A scaler's replicas belonged to the deleted object.
    run.report().scaled.retain(|(n, _)| n != name);
    let mut deleted = false;
    for _ in 0..60 {
        if run
            .wds()
            .delete(name, &DeleteParams::default())
            .await
            .is_ok()
        {
            deleted = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if !deleted {
        restart_stopped(controllers)?;
        bail!("could not delete {name} for a minute");
    }
    println!("   fault: {} ({name}, {old} draining)", fault.name());
    run.report().faults.push((fault, at, None));
    if down {
        tokio::time::sleep(Duration::from_millis(rng.between(2000, 6000))).await;
        restart_stopped(controllers)?;
    }
    // Gone once the pinned workflow is done and the versions are cleaned up; faults go on.
    let deadline = Instant::now() + run.converge + Duration::from_secs(60);
    while !matches!(run.wds().get_opt(name).await, Ok(None)) {
        tend_left_behind(run).await;
        if Instant::now() > deadline {
            run.report().violate(
                "I3",
                format!(
                    "{name}, deleted while {old} drained, is not gone after {:?}",
                    run.converge + Duration::from_secs(60)
                ),
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The finalizer went: Temporal must keep no worker deployment of it, where its spec
    // points nor where it moved from.
    temporal_forgot(run, name, &run.place_of(name), false).await;
    for place in run.left_places_of(name) {
        temporal_forgot(run, name, &place, true).await;
    }
    let wd = worker_deployment(run, i, &image)?;
    for _ in 0..60 {
        if run.wds().create(&PostParams::default(), &wd).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    bail!("could not create {name} again for a minute")
}

/// I3: Temporal keeps no worker deployment of deleted `name` at `place` (read until known, for
/// a minute). Where it moved away from (`left`), a record left is noted, not a violation:
/// nothing is cleaned up there once its versions no longer run (docs/safety.md).
pub(crate) async fn temporal_forgot(run: &Run<'_>, name: &str, place: &Place, left: bool) {
    let Some(state) = read_for_i3(run, name, place).await else {
        return;
    };
    if !state.exists {
        return;
    }
    if left {
        let note = format!(
            "{name}: {place}, moved away from, keeps its worker deployment ({} versions)",
            state.versions.len()
        );
        if run.report().left_behind.insert(note.clone()) {
            println!("   note: {note}");
        }
        return;
    }
    run.report().violate(
        "I3",
        format!(
            "{name} is deleted but Temporal ({place}) keeps its worker deployment ({} versions)",
            state.versions.len()
        ),
    );
}

/// What Temporal says of `name` at `place`, read until known for a minute; None (an I3
/// violation) when it could not be.
pub(crate) async fn read_for_i3(run: &Run<'_>, name: &str, place: &Place) -> Option<View> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match run.describe_at(name, place).await {
            Some(state) => return Some(state),
            None if Instant::now() > deadline => {
                run.report().violate(
                    "I3",
                    format!(
                        "Temporal ({place}) could not be read for a minute to check {name} is gone"
                    ),
                );
                return None;
            }
            None => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}
