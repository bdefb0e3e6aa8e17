//! Whether the current version's workers poll: its task queues, and for a grouped version
//! each group (a group whose pods poll nothing, or another namespace, leaves its own task
//! queue without the version's workers, which no task queue of the version can show); and the
//! target's task queues its plan went without (see [`after_pass`]).

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use twc_api::WorkerDeployment;

use super::Context;
use super::execute::Applied;
use super::observe::Temporal;
use crate::observed::Pollers;
use crate::plan::{self, Observed};
use crate::temporal::gates::TaskQueueRef;
use crate::temporal::reads::Priority;

/// After a pass that did what it planned: the target's task queues if its plan went without
/// them and it was not promoted (an AllAtOnce target held back, see `plan::needs`), for the
/// status; and once it is current (this pass's promotion counted), whether its task queues
/// have active pollers: the status says so (TWC #448). Whether the pollers were judged.
pub async fn after_pass(
    wd: &WorkerDeployment,
    ctx: &Context,
    temporal: &Temporal,
    observed: &mut Observed,
    applied: &Applied,
    target: &str,
) -> bool {
    let promoted = applied.promoted(target);
    if !promoted && observed.temporal.current_build_id.as_deref() != Some(target) {
        if observed.target.task_queues.is_empty()
            && plan::needs(wd, target, &observed.temporal).task_queues_after
            && let Err(s) = read_queues(wd, ctx, temporal, observed, target).await
        {
            tracing::debug!(target, "task queues of the target: {}", s.message());
        }
        return false;
    }
    observed.pollers = Some(pollers(wd, ctx, temporal, observed, target).await);
    true
}

/// Reads `build`'s task queues (the version's describe, at the steady priority) into what
/// was observed and into the remembered read, so that later passes do not read them again.
async fn read_queues(
    wd: &WorkerDeployment,
    ctx: &Context,
    temporal: &Temporal,
    observed: &mut Observed,
    build: &str,
) -> Result<(), crate::temporal::Status> {
    ctx.reads.take(&temporal.pool_key, Priority::Steady).await;
    let qs = temporal
        .target(wd, ctx.identity())
        .task_queues(build)
        .await?;
    ctx.memories.update(&super::key(wd), |m| {
        if let Some(r) = m.read.as_mut().filter(|r| r.target_build == build) {
            r.target.task_queues = qs.clone();
        }
    });
    observed.target.task_queues = qs;
    Ok(())
}

/// Whether `build`, the current version, has active pollers: every task queue known to be its
/// (TWC #448), then every worker group with ready pods (named when the worker list shows none
/// of its pods among the version's workers).
async fn pollers(
    wd: &WorkerDeployment,
    ctx: &Context,
    temporal: &Temporal,
    observed: &mut Observed,
    build: &str,
) -> Pollers {
    let queues = queue_pollers(wd, ctx, temporal, observed, build).await;
    if matches!(queues, Pollers::Missing(_)) {
        return queues;
    }
    match silent_groups(wd, ctx, temporal, observed, build).await {
        Some(groups) if !groups.is_empty() => Pollers::SilentGroups(groups),
        _ => queues,
    }
}

/// The groups of grouped version `build` whose pods, ready and up for longer than the list's
/// grace, are none of them among its running workers in the namespace's shared worker list
/// (no read of its own: the list is the one [`queue_pollers`] read). None when it cannot tell.
async fn silent_groups(
    wd: &WorkerDeployment,
    ctx: &Context,
    temporal: &Temporal,
    observed: &Observed,
    build: &str,
) -> Option<Vec<String>> {
    let groups = observed.deployments.get(build)?.members.len();
    if groups < 2 {
        return None;
    }
    let presence = ctx
        .reads
        .presence(&temporal.conn, &temporal.pool_key)
        .await?;
    let up_by = presence.at.checked_sub(LIST_GRACE)?;
    let ns = wd.namespace().unwrap_or_default();
    let ready: BTreeMap<String, Vec<String>> = crate::worker_pods::ready_pods_by_group(
        &ctx.worker_pods,
        &ns,
        &wd.name_any(),
        build,
        up_by,
    );
    let listed = plan::pollers::Listed {
        settled: true,
        heartbeats: presence.heartbeats(&temporal.deployment_name),
        queues: BTreeSet::new(),
        hosts: presence
            .hosts(&temporal.deployment_name, build)
            .into_iter()
            .map(str::to_string)
            .collect(),
    };
    plan::pollers::silent_groups(&listed, &ready)
}

/// How long after a version's workers came up the worker list may be trusted to show them:
/// the SDKs heartbeat every 60 s, and the first one may come a full interval after the worker
/// started (seen with the Rust SDK). Before that, a version missing from the list is "not
/// known" until a later list.
const LIST_GRACE: std::time::Duration = std::time::Duration::from_secs(90);

/// Whether the task queues of `build` have active pollers (see [`plan::pollers`]): the
/// namespace's shared worker list, and `DescribeTaskQueue` (within the read budget) only
/// where the list cannot tell. The queues are the ones read for the target, else the ones the
/// status recorded; read once if neither knows any (not in the pass that promoted it).
async fn queue_pollers(
    wd: &WorkerDeployment,
    ctx: &Context,
    temporal: &Temporal,
    observed: &mut Observed,
    build: &str,
) -> Pollers {
    use plan::pollers::{Asked, Judged, Listed, judge};
    let key = super::key(wd);
    let workflow_queues = |qs: &[TaskQueueRef]| -> BTreeSet<String> {
        qs.iter()
            .filter(|q| q.workflow)
            .map(|q| q.name.clone())
            .collect()
    };
    let mut known = workflow_queues(&observed.target.task_queues);
    // Read already (an activity-only version has no workflow queue): not again.
    if observed.target.task_queues.is_empty() {
        known = recorded_queues(wd, build);
        // Kept in what was observed, so that the status goes on recording them.
        observed.target.task_queues = known
            .iter()
            .map(|name| TaskQueueRef {
                name: name.clone(),
                workflow: true,
            })
            .collect();
    }
    // Promoted in this pass without its queues read (an AllAtOnce target is, see
    // `plan::needs`): the version's describe right after the routing change would hold the
    // status back by up to a second, and the worker list is not settled yet anyway (unknown
    // either way). The next pass reads them (see `remember::pace_and_remember`).
    let promoted = observed.temporal.current_build_id.as_deref() != Some(build);
    if observed.target.task_queues.is_empty() && promoted {
        return Pollers::Unknown;
    }
    let presence = ctx.reads.presence(&temporal.conn, &temporal.pool_key).await;
    let up_since = observed
        .deployments
        .get(build)
        .and_then(|d| d.available_since);
    let listed = presence.as_ref().map(|p| Listed {
        settled: up_since.is_none_or(|t| p.at >= t + LIST_GRACE),
        heartbeats: p.heartbeats(&temporal.deployment_name),
        queues: p
            .queues(&temporal.deployment_name, build)
            .into_iter()
            .map(str::to_string)
            .collect(),
        hosts: BTreeSet::new(),
    });
    let target = temporal.target(wd, ctx.identity());
    // Neither read nor recorded: read once (the worker list's queues would do for the
    // judgement, but the status records the version's own), and remembered.
    if observed.target.task_queues.is_empty() {
        match read_queues(wd, ctx, temporal, observed, build).await {
            Ok(()) => known = workflow_queues(&observed.target.task_queues),
            Err(s) => {
                tracing::debug!(build, "task queues of the current version: {}", s.message());
                return Pollers::Unknown;
            }
        }
    }
    let asked = ctx.memories.get(&key).pollers_asked;
    let judged = judge(build, &known, listed.as_ref(), asked.as_ref(), observed.now);
    tracing::debug!(
        namespace = wd.namespace().unwrap_or_default(),
        name = wd.name_any(),
        build,
        "pollers: {judged:?} (queues {known:?}, listed {listed:?}, asked {asked:?}, up since {up_since:?})"
    );
    let queues = match judged {
        Judged::Done(p) => return p,
        Judged::Ask(queues) => queues,
    };
    let mut answer = Asked {
        build_id: build.to_string(),
        at: observed.now,
        asked: queues.clone(),
        polled: BTreeSet::new(),
        failed: BTreeSet::new(),
    };
    for q in queues {
        ctx.reads.take(&temporal.pool_key, Priority::Steady).await;
        match target.polled_by(&q, build).await {
            Ok(true) => {
                answer.polled.insert(q);
            }
            Ok(false) => {}
            Err(s) => {
                tracing::debug!(build, "DescribeTaskQueue {q}: {}", s.message());
                answer.failed.insert(q);
            }
        }
    }
    let judged = judge(build, &known, listed.as_ref(), Some(&answer), observed.now);
    ctx.memories
        .update(&key, |m| m.pollers_asked = Some(answer));
    match judged {
        Judged::Done(p) => p,
        Judged::Ask(_) => Pollers::Unknown,
    }
}

/// The task queues the status recorded for `build` as the current version.
fn recorded_queues(wd: &WorkerDeployment, build: &str) -> BTreeSet<String> {
    wd.status
        .as_ref()
        .and_then(|s| s.current_version.as_ref())
        .filter(|c| c.base.build_id == build)
        .map(|c| c.base.task_queues.iter().map(|q| q.name.clone()).collect())
        .unwrap_or_default()
}
