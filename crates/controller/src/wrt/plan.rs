//! The WorkerResourceTemplate planner and status: from the template, what was observed (its
//! WorkerDeployment, the live versioned Deployments, whether the kind is served) and `now`,
//! which copies to apply, which to delete, and the status to write. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};
use serde_json::Value;
use twc_api::conditions::READY;
use twc_api::{
    WorkerResourceTemplate, WorkerResourceTemplateStatus, WorkerResourceTemplateVersionStatus,
};

use super::reason;
use super::render::{self, Inputs};
use crate::conditions::{set_condition, set_kstatus};

/// The referenced WorkerDeployment as the planner needs it.
#[derive(Clone, Debug)]
pub struct ObservedWorkerDeployment {
    pub name: String,
    pub temporal_namespace: String,
    /// Its worker groups by name (`default` alone without `spec.workerGroups`).
    pub groups: Vec<String>,
    /// Its controller owner reference (to put on the template).
    pub owner: OwnerReference,
}

impl ObservedWorkerDeployment {
    /// Whether it has `spec.workerGroups` (`default`, its one group otherwise, is a name no
    /// group may have).
    pub fn grouped(&self) -> bool {
        self.groups.iter().all(|g| g != twc_api::DEFAULT_GROUP)
    }
}

/// Everything the planner looks at besides the template.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// None: the WorkerDeployment does not exist.
    pub worker_deployment: Option<ObservedWorkerDeployment>,
    /// Live (not deleting) versioned Deployments of the template's worker group: build ID ->
    /// Deployment name.
    pub versions: BTreeMap<String, String>,
    /// The worker groups live versioned Deployments belong to (a group gone from the spec
    /// may still run in older versions).
    pub version_groups: BTreeSet<String>,
    /// Why the template's kind cannot be applied (not served, or cluster-scoped), from API
    /// discovery; None when it can, or when the pure checks failed and discovery was not asked.
    pub kind_problem: Option<Problem>,
    /// The kinds a template may name.
    pub allowed_kinds: Vec<String>,
    /// Build IDs scaled down at sunset ([`super::sunset`]): a template that scales its version
    /// has no copy for them.
    pub sunset: BTreeSet<String>,
    /// When the next version reaches its sunset scale-down.
    pub next_sunset: Option<SystemTime>,
}

/// One rendered copy to server-side apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Apply {
    pub build_id: String,
    pub name: String,
    pub object: Value,
    pub hash: String,
}

/// A template-level problem: nothing is applied, every version entry says why.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
    /// Only a change of the template (or of the cluster) can help: kstatus `Stalled`.
    pub terminal: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The template's new owner references, when the WorkerDeployment is not yet its
    /// controller.
    pub owner_references: Option<Vec<OwnerReference>>,
    pub applies: Vec<Apply>,
    /// Build IDs whose copy could not be rendered: (build ID, name, error).
    pub render_failures: Vec<(String, String, String)>,
    /// Copies of build IDs without a live Deployment: (build ID, name).
    pub deletes: Vec<(String, String)>,
    pub problem: Option<Problem>,
    /// The WorkerDeployment does not exist.
    pub worker_deployment_missing: bool,
}

/// The owner references of `wrt` with `owner` as its controller, unless it already is, or
/// another object is (then nothing changes: two controllers are refused by the apiserver).
fn owner_references(
    wrt: &WorkerResourceTemplate,
    owner: &OwnerReference,
) -> Option<Vec<OwnerReference>> {
    let refs = wrt.owner_references();
    if refs.iter().any(|r| r.controller == Some(true)) {
        return None;
    }
    let mut out: Vec<OwnerReference> = refs
        .iter()
        .filter(|r| r.uid != owner.uid)
        .cloned()
        .collect();
    out.push(owner.clone());
    Some(out)
}

/// The controller owner reference every copy of `wrt` carries.
pub fn template_owner(wrt: &WorkerResourceTemplate) -> Option<OwnerReference> {
    wrt.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = Some(true);
        o
    })
}

pub fn plan(wrt: &WorkerResourceTemplate, observed: &Observed) -> Plan {
    let mut plan = Plan::default();
    let Some(wd) = &observed.worker_deployment else {
        plan.worker_deployment_missing = true;
        return plan;
    };
    plan.owner_references = owner_references(wrt, &wd.owner);
    let template = &wrt.spec.template;
    let problems = render::check(template, &observed.allowed_kinds);
    if !problems.is_empty() {
        plan.problem = Some(Problem {
            reason: reason::INVALID_TEMPLATE,
            message: problems.join("; "),
            terminal: true,
        });
        return plan;
    }
    if let Some(problem) = &observed.kind_problem {
        plan.problem = Some(problem.clone());
        return plan;
    }
    if let Some(problem) = group_problem(wrt, wd, observed) {
        plan.problem = Some(problem);
        return plan;
    }
    let Some(owner) = template_owner(wrt) else {
        return plan;
    };
    let ns = wrt.namespace().unwrap_or_default();
    let inputs = Inputs {
        namespace: &ns,
        worker_deployment: &wd.name,
        temporal_namespace: &wd.temporal_namespace,
        worker_group: wd.grouped().then(|| wrt.spec.effective_worker_group()),
        owner,
    };
    let previous: BTreeMap<&str, &WorkerResourceTemplateVersionStatus> = wrt
        .status
        .iter()
        .flat_map(|s| s.versions.iter())
        .map(|v| (v.build_id.as_str(), v))
        .collect();
    let off = off_at_sunset(wrt, observed);
    for (build, deployment) in &observed.versions {
        if off.contains(build.as_str()) {
            continue;
        }
        let name = render::resource_name(&wd.name, &wrt.name_any(), build);
        match render::render(template, &inputs, build, deployment) {
            Ok(object) => {
                let hash = render::rendered_hash(&object);
                let unchanged = previous.get(build.as_str()).is_some_and(|v| {
                    v.last_applied_hash.as_deref() == Some(hash.as_str()) && v.apply_error.is_none()
                });
                if !unchanged {
                    plan.applies.push(Apply {
                        build_id: build.clone(),
                        name,
                        object,
                        hash,
                    });
                }
            }
            Err(e) => plan.render_failures.push((build.clone(), name, e)),
        }
    }
    plan.deletes = previous
        .keys()
        .filter(|b| !observed.versions.contains_key(**b) || off.contains(**b))
        .map(|b| {
            (
                b.to_string(),
                render::resource_name(&wd.name, &wrt.name_any(), b),
            )
        })
        .collect();
    plan
}

/// Why the template's worker group is not one of its WorkerDeployment's (upstream's
/// `WorkerGroupNotFound`, which a change of either can clear: not terminal). A group the spec no
/// longer declares is still found while a version runs it.
fn group_problem(
    wrt: &WorkerResourceTemplate,
    wd: &ObservedWorkerDeployment,
    observed: &Observed,
) -> Option<Problem> {
    let group = wrt.spec.effective_worker_group();
    let message = if wd.grouped() && wrt.spec.worker_group.as_deref().is_none_or(str::is_empty) {
        format!(
            "WorkerDeployment {:?} uses worker groups; set spec.workerGroup",
            wd.name
        )
    } else if !wd.groups.iter().any(|g| g == group) && !observed.version_groups.contains(group) {
        format!("WorkerDeployment {:?} has no group {group:?}", wd.name)
    } else {
        return None;
    };
    Some(Problem {
        reason: reason::WORKER_GROUP_NOT_FOUND,
        message,
        terminal: false,
    })
}

/// The versions this template has no copy for: those scaled down at sunset, when it scales
/// its version (an autoscaler there would scale the drained workers back up).
fn off_at_sunset<'a>(wrt: &WorkerResourceTemplate, observed: &'a Observed) -> BTreeSet<&'a str> {
    if !render::scales_target(&wrt.spec.template) {
        return BTreeSet::new();
    }
    observed
        .versions
        .keys()
        .filter(|b| observed.sunset.contains(*b))
        .map(String::as_str)
        .collect()
}

fn time(t: SystemTime) -> Option<Time> {
    Timestamp::try_from(t).ok().map(Time)
}

/// What carrying out a plan did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Apply errors by build ID (a build ID of the plan's applies without one succeeded).
    pub apply_errors: BTreeMap<String, String>,
    /// Build IDs whose apply the apiserver refused outright (invalid, forbidden, a bad
    /// request): retrying the same object cannot help.
    pub refused: BTreeSet<String>,
    /// Build IDs whose copy is confirmed gone.
    pub deleted: BTreeSet<String>,
}

/// An entry, keeping the previous transition time if nothing else changed.
fn entry(
    previous: Option<&WorkerResourceTemplateVersionStatus>,
    mut next: WorkerResourceTemplateVersionStatus,
    now: SystemTime,
) -> WorkerResourceTemplateVersionStatus {
    next.last_transition_time = previous.and_then(|p| p.last_transition_time.clone());
    if previous != Some(&next) || next.last_transition_time.is_none() {
        next.last_transition_time = time(now);
    }
    next
}

fn failed(build: &str, name: &str, error: &str) -> WorkerResourceTemplateVersionStatus {
    WorkerResourceTemplateVersionStatus {
        build_id: build.to_string(),
        resource_name: Some(name.to_string()),
        last_applied_generation: 0,
        apply_error: Some(error.to_string()),
        last_applied_hash: None,
        last_transition_time: None,
    }
}

/// The new status: one entry per build ID (sorted), skipped entries kept verbatim, entries of
/// confirmed deletes pruned; `Ready` from this cycle's outcome.
pub fn status(
    wrt: &WorkerResourceTemplate,
    observed: &Observed,
    plan: &Plan,
    outcome: &Outcome,
    now: SystemTime,
) -> WorkerResourceTemplateStatus {
    let mut status = wrt.status.clone().unwrap_or_default();
    let generation = wrt.meta().generation;
    let mut versions: BTreeMap<String, WorkerResourceTemplateVersionStatus> = status
        .versions
        .iter()
        .map(|v| (v.build_id.clone(), v.clone()))
        .collect();
    let previous = versions.clone();
    let mut first_error: Option<String> = None;
    let mut record = |build: &str, next: WorkerResourceTemplateVersionStatus| {
        versions.insert(build.to_string(), entry(previous.get(build), next, now));
    };
    if let (Some(problem), Some(wd)) = (&plan.problem, &observed.worker_deployment) {
        for build in observed.versions.keys() {
            let name = render::resource_name(&wd.name, &wrt.name_any(), build);
            record(build, failed(build, &name, &problem.message));
        }
    }
    for (build, name, error) in &plan.render_failures {
        first_error.get_or_insert_with(|| format!("buildID {build}: {error}"));
        record(build, failed(build, name, error));
    }
    for apply in &plan.applies {
        match outcome.apply_errors.get(&apply.build_id) {
            Some(error) => {
                first_error.get_or_insert_with(|| format!("buildID {}: {error}", apply.build_id));
                record(&apply.build_id, failed(&apply.build_id, &apply.name, error));
            }
            None => record(
                &apply.build_id,
                WorkerResourceTemplateVersionStatus {
                    build_id: apply.build_id.clone(),
                    resource_name: Some(apply.name.clone()),
                    last_applied_generation: generation.unwrap_or_default(),
                    apply_error: None,
                    last_applied_hash: Some(apply.hash.clone()),
                    last_transition_time: None,
                },
            ),
        }
    }
    for build in &outcome.deleted {
        versions.remove(build);
    }
    status.versions = versions.into_values().collect();
    let terminal = plan.problem.as_ref().is_some_and(|p| p.terminal)
        || !plan.render_failures.is_empty()
        || !outcome.refused.is_empty();
    let (st, why, message) = if plan.worker_deployment_missing {
        (
            "False",
            reason::WORKER_DEPLOYMENT_NOT_FOUND,
            format!(
                "WorkerDeployment {} not found",
                wrt.spec.worker_deployment_name().unwrap_or_default()
            ),
        )
    } else if let Some(p) = &plan.problem {
        ("False", p.reason, p.message.clone())
    } else if let Some(e) = first_error {
        ("False", reason::APPLY_FAILED, e)
    } else {
        let off = off_at_sunset(wrt, observed).len();
        let mut message = format!("applied for {} build IDs", observed.versions.len() - off);
        if off > 0 {
            message.push_str(&format!(
                "; none for the {off} scaled down at sunset (it would scale them back up)"
            ));
        }
        ("True", reason::ALL_VERSIONS_APPLIED, message)
    };
    set_condition(
        &mut status.conditions,
        READY,
        st,
        why,
        &message,
        generation,
        now,
    );
    set_kstatus(&mut status.conditions, terminal, false, generation, now);
    status.observed_generation = generation;
    status
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
