//! The person's part, as docs/safety.md asks it: a version left where its WorkerDeployment
//! moved away from (another Temporal namespace, or a previous connection the controller cannot
//! read any more) is kept as it is, its workers running and named (`VersionsKept`), until
//! someone deletes its Deployment once Temporal reports the version drained where it polls.
//! The run does that here, reading the place left with its own client.

use kube::api::DeleteParams;

use crate::Run;
use crate::temporal_view::Status;

/// Deletes the Deployment of every version left where its WorkerDeployment moved away from,
/// once Temporal there reports it Drained (or never routed to) and the place it moved to does
/// not know it.
pub(crate) async fn tend_left_behind(run: &Run<'_>) {
    for name in &run.names {
        tend_previous_connection(run, name).await;
        let left = run.left_places_of(name);
        if left.is_empty() {
            continue;
        }
        let Some(current) = run.describe(name).await else {
            continue;
        };
        for place in left {
            let Some(view) = run.describe_at(name, &place).await else {
                continue;
            };
            for (build, status) in &view.versions {
                if !matches!(status, Status::Drained | Status::Inactive)
                    || current.versions.contains_key(build)
                {
                    continue;
                }
                for member in run.members(name, build) {
                    delete_by_hand(run, &member.name, &format!("{status:?} at {place}")).await;
                }
            }
        }
    }
}

/// A WorkerDeployment being deleted that keeps versions on a previous connection (its
/// Connection's auth mode switched while it drained): the person deletes each named one's
/// Deployment once Temporal, where it polls, reports it Drained.
async fn tend_previous_connection(run: &Run<'_>, name: &str) {
    let Ok(Some(wd)) = run.wds().get_opt(name).await else {
        return;
    };
    if wd.metadata.deletion_timestamp.is_none() {
        return;
    }
    let message = wd
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    if !message.contains("(its workers use a previous connection") {
        return;
    }
    let Some(view) = run.describe(name).await else {
        return;
    };
    for (build, status) in &view.versions {
        if !matches!(status, Status::Drained)
            || !message.contains(&format!("{build} (its workers use a previous connection"))
        {
            continue;
        }
        for member in run.members(name, build) {
            delete_by_hand(run, &member.name, "kept on a previous connection, Drained").await;
        }
    }
}

/// Deletes versioned Deployment `deployment` if it is there, as a person would (`why`: what
/// made it safe), and counts it.
async fn delete_by_hand(run: &Run<'_>, deployment: &str, why: &str) {
    if matches!(run.deployments().get_opt(deployment).await, Ok(Some(_)))
        && run
            .deployments()
            .delete(deployment, &DeleteParams::default())
            .await
            .is_ok()
    {
        println!("   by hand: deleted {deployment}, {why}");
        run.report().deleted_by_hand += 1;
    }
}
