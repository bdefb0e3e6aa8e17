//! The Deployment watch: every change of a versioned Deployment is seen, so that a scale to 0
//! and back (or a deletion) between two of the observer's looks is still judged.
//!
//! For each change that takes a version's workers away (the Deployment deleted, being
//! deleted, or scaled to 0), Temporal is read right after it: a version that is still
//! routed to (I1) or Draining (I2) was so when its workers were taken away, since a version
//! only loses those statuses forwards (Draining to Drained) or by a promotion, which needs
//! workers first.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt as _;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::Run;
use crate::invariants::needs_workers;

/// What a change of a versioned Deployment did to its workers, if it took them away (the
/// observer's look asks the same of the Deployment it reads).
pub(crate) fn taken_away(d: &Deployment, deleted: bool) -> Option<&'static str> {
    if deleted {
        return Some("its Deployment was deleted");
    }
    if d.metadata.deletion_timestamp.is_some() {
        return Some("its Deployment is being deleted");
    }
    (d.spec.as_ref().and_then(|s| s.replicas) == Some(0)).then_some("its Deployment is scaled to 0")
}

/// Watches the run's Deployments until the driver is done; judges every change that takes
/// workers away against what Temporal says right after it.
pub(crate) async fn watch_deployments(run: &Run<'_>) {
    let stream = watcher::watcher(run.deployments(), watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    // One judgement per Deployment and problem (a deletion is several changes).
    let mut judged = BTreeSet::new();
    while !run.done.load(Ordering::SeqCst) {
        let event = match tokio::time::timeout(Duration::from_millis(200), stream.next()).await {
            Ok(Some(Ok(event))) => event,
            // The apiserver restarting: the watcher lists again after its backoff.
            Ok(Some(Err(_))) => {
                run.report().watch_errors += 1;
                continue;
            }
            Ok(None) => return,
            Err(_) => continue,
        };
        let (d, deleted) = match event {
            Event::Apply(d) | Event::InitApply(d) => (d, false),
            Event::Delete(d) => (d, true),
            Event::Init | Event::InitDone => continue,
        };
        run.report().watched += 1;
        // The namespace is being deleted and created again: its workers went with it, and
        // the same names come back.
        if run.away.load(Ordering::SeqCst) {
            judged.clear();
            continue;
        }
        let Some(problem) = taken_away(&d, deleted) else {
            continue;
        };
        let Some(build) = d.labels().get(twc_api::labels::BUILD_ID).cloned() else {
            continue;
        };
        let Some(name) = run.owner_of(&build, &d.name_any()) else {
            continue;
        };
        if run
            .report()
            .gone_with_namespace
            .contains(&(name.clone(), build.clone()))
            || !judged.insert((d.name_any(), problem))
        {
            continue;
        }
        // Read Temporal right after the change, where the spec points and (its Draining
        // versions only) where it moved from; unreadable for two seconds is not known.
        let mut places = vec![(run.place_of(name), false)];
        places.extend(run.left_places_of(name).into_iter().map(|p| (p, true)));
        for (place, draining_only) in places {
            let mut state = None;
            for _ in 0..10 {
                state = run.describe_at(name, &place).await;
                if state.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let Some(state) = state else {
                run.report().read_errors += 1;
                continue;
            };
            let found = needs_workers(&state)
                .into_iter()
                .filter(|(_, why)| !draining_only || *why == "draining")
                .find(|(b, _)| *b == build);
            if let Some((_, why)) = found {
                if why == "draining" && !run.still_draining(name, &build, &place).await {
                    continue;
                }
                let invariant = if why == "draining" { "I2" } else { "I1" };
                run.report().violate(
                    invariant,
                    format!(
                        "{name}: {build} is {why} at {place} but {problem} (seen by the watch)"
                    ),
                );
            }
        }
    }
}
