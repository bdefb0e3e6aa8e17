//! Table tests of the WorkerResourceTemplate planner and status.

use std::time::{Duration, SystemTime};

use serde_json::json;
use twc_api::WorkerResourceTemplateVersionStatus as Entry;

use super::*;
use crate::wrt::reason;

fn wrt(template: Value) -> WorkerResourceTemplate {
    serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
        "metadata": {"name": "hpa", "namespace": "team-a", "uid": "wrt-uid", "generation": 3,
                     "resourceVersion": "7"},
        "spec": {"workerDeploymentRef": {"name": "hello"}, "template": template}
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn hpa() -> Value {
    json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "spec": {"scaleTargetRef": {}, "minReplicas": 1, "maxReplicas": 3}})
}

fn wd_owner() -> OwnerReference {
    OwnerReference {
        api_version: "temporal.io/v1alpha1".into(),
        kind: "WorkerDeployment".into(),
        name: "hello".into(),
        uid: "wd-uid".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn observed(builds: &[&str]) -> Observed {
    Observed {
        worker_deployment: Some(ObservedWorkerDeployment {
            name: "hello".into(),
            temporal_namespace: "orders".into(),
            groups: vec![twc_api::DEFAULT_GROUP.into()],
            owner: wd_owner(),
        }),
        versions: builds
            .iter()
            .map(|b| (b.to_string(), format!("hello-{b}")))
            .collect(),
        kind_problem: None,
        allowed_kinds: vec!["HorizontalPodAutoscaler".into()],
        ..Default::default()
    }
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

/// Plans, "executes" with `errors` (build ID -> apply error) and every delete confirmed, and
/// returns the template with the new status.
fn cycle(
    mut t: WorkerResourceTemplate,
    o: &Observed,
    errors: &[(&str, &str)],
    now: SystemTime,
) -> (Plan, WorkerResourceTemplate) {
    let p = plan(&t, o);
    let outcome = Outcome {
        apply_errors: errors
            .iter()
            .map(|(b, e)| (b.to_string(), e.to_string()))
            .collect(),
        // As the apiserver answers them: 403 and 422 are refusals, anything else may pass.
        refused: errors
            .iter()
            .filter(|(_, e)| e.starts_with("forbidden") || e.starts_with("invalid"))
            .map(|(b, _)| b.to_string())
            .collect(),
        deleted: p.deletes.iter().map(|(b, _)| b.clone()).collect(),
    };
    t.status = Some(status(&t, o, &p, &outcome, now));
    (p, t)
}

fn ready(t: &WorkerResourceTemplate) -> (String, String, String) {
    t.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY))
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

/// (Stalled, Reconciling) statuses, and the template's top-level observed generation.
fn kstatus(t: &WorkerResourceTemplate) -> (String, String, Option<i64>) {
    let status = t.status.clone().unwrap_or_default();
    let of = |type_: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
            .unwrap_or_default()
    };
    (of("Stalled"), of("Reconciling"), status.observed_generation)
}

fn kstat(stalled: &str, reconciling: &str) -> (String, String, Option<i64>) {
    (stalled.into(), reconciling.into(), Some(3))
}

fn builds(t: &WorkerResourceTemplate) -> Vec<String> {
    t.status
        .iter()
        .flat_map(|s| s.versions.iter())
        .map(|v| v.build_id.clone())
        .collect()
}

#[test]
fn applies_one_copy_per_live_build_then_skips_unchanged() {
    let (p, t) = cycle(wrt(hpa()), &observed(&["v2", "v1"]), &[], at(0));
    let names: Vec<_> = p.applies.iter().map(|a| a.build_id.as_str()).collect();
    assert_eq!(names, ["v1", "v2"]);
    assert_eq!(
        p.applies[0].object["spec"]["scaleTargetRef"]["name"],
        json!("hello-v1")
    );
    assert_eq!(p.owner_references, Some(vec![wd_owner()]));
    assert_eq!(builds(&t), ["v1", "v2"]);
    let v1 = &t
        .status
        .as_ref()
        .map(|s| s.versions[0].clone())
        .unwrap_or_default();
    assert_eq!(v1.last_applied_generation, 3);
    assert_eq!(
        v1.last_applied_hash.as_deref(),
        Some(p.applies[0].hash.as_str())
    );
    assert_eq!(
        v1.resource_name.as_deref(),
        Some(p.applies[0].name.as_str())
    );
    assert_eq!(ready(&t).1, reason::ALL_VERSIONS_APPLIED);

    // Nothing changed: nothing applied, the status stays byte for byte (no write).
    let (p2, t2) = cycle(t.clone(), &observed(&["v1", "v2"]), &[], at(60));
    assert!(p2.applies.is_empty() && p2.deletes.is_empty(), "{p2:?}");
    assert_eq!(t2.status, t.status);
}

#[test]
fn a_template_change_reapplies_and_a_new_uid_too() {
    let (_, t) = cycle(wrt(hpa()), &observed(&["v1"]), &[], at(0));
    let mut changed = t.clone();
    changed.spec.template["spec"]["maxReplicas"] = json!(9);
    changed.metadata.generation = Some(4);
    let (p, t2) = cycle(changed, &observed(&["v1"]), &[], at(10));
    assert_eq!(p.applies.len(), 1);
    let entry = &t2
        .status
        .as_ref()
        .map(|s| s.versions[0].clone())
        .unwrap_or_default();
    assert_eq!(entry.last_applied_generation, 4);
    assert_eq!(entry.last_transition_time, plan_time(10));
    let mut recreated = t.clone();
    recreated.metadata.uid = Some("wrt-uid-2".into());
    assert_eq!(plan(&recreated, &observed(&["v1"])).applies.len(), 1);
}

fn plan_time(secs: u64) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    time(at(secs))
}

#[test]
fn failures_are_recorded_per_build_and_retried() {
    let (_, t) = cycle(
        wrt(hpa()),
        &observed(&["v1", "v2"]),
        &[("v2", "forbidden")],
        at(0),
    );
    let versions = t.status.clone().unwrap_or_default().versions;
    assert_eq!(versions[0].apply_error, None);
    assert_eq!(
        versions[1],
        Entry {
            build_id: "v2".into(),
            resource_name: Some(render::resource_name("hello", "hpa", "v2")),
            last_applied_generation: 0,
            apply_error: Some("forbidden".into()),
            last_applied_hash: None,
            last_transition_time: plan_time(0),
        }
    );
    assert_eq!(
        ready(&t),
        (
            "False".into(),
            reason::APPLY_FAILED.into(),
            "buildID v2: forbidden".into()
        )
    );
    // Refused outright: sending it again cannot help.
    assert_eq!(kstatus(&t), kstat("True", "False"));
    // The failed one is retried, the applied one skipped; the same failure again keeps its
    // transition time.
    let (p, t2) = cycle(
        t.clone(),
        &observed(&["v1", "v2"]),
        &[("v2", "forbidden")],
        at(30),
    );
    assert_eq!(p.applies.len(), 1);
    assert_eq!(p.applies[0].build_id, "v2");
    assert_eq!(t2.status, t.status);
    // A conflict may pass next time: still reconciling.
    let (_, t_conflict) = cycle(
        t2.clone(),
        &observed(&["v1", "v2"]),
        &[("v2", "conflict")],
        at(45),
    );
    assert_eq!(kstatus(&t_conflict), kstat("False", "True"));
    // Fixed: Ready again.
    let (_, t3) = cycle(t2, &observed(&["v1", "v2"]), &[], at(60));
    assert_eq!(ready(&t3).0, "True");
    assert_eq!(kstatus(&t3), kstat("False", "False"));
    assert_eq!(
        t3.status.unwrap_or_default().versions[1].last_applied_generation,
        3
    );
}

#[test]
fn copies_of_gone_builds_are_deleted_and_pruned_only_when_confirmed() {
    let (_, t) = cycle(wrt(hpa()), &observed(&["v1", "v2"]), &[], at(0));
    let p = plan(&t, &observed(&["v2"]));
    assert_eq!(
        p.deletes,
        vec![(
            "v1".to_string(),
            render::resource_name("hello", "hpa", "v1")
        )]
    );
    // The delete failed: the entry stays (and the delete is planned again next time).
    let kept = status(&t, &observed(&["v2"]), &p, &Outcome::default(), at(5));
    assert_eq!(kept.versions.len(), 2);
    // Confirmed: pruned. Redeploying v1 applies it again (the rollback case).
    let (_, t2) = cycle(t, &observed(&["v2"]), &[], at(10));
    assert_eq!(builds(&t2), ["v2"]);
    let (p3, _) = cycle(t2, &observed(&["v1", "v2"]), &[], at(20));
    assert_eq!(p3.applies.len(), 1);
    assert_eq!(p3.applies[0].build_id, "v1");
}

#[test]
fn a_missing_worker_deployment_is_a_condition_and_nothing_else() {
    let (_, t) = cycle(wrt(hpa()), &observed(&["v1"]), &[], at(0));
    let missing = Observed {
        worker_deployment: None,
        ..observed(&[])
    };
    let (p, t2) = cycle(t.clone(), &missing, &[], at(10));
    assert!(p.worker_deployment_missing && p.applies.is_empty() && p.deletes.is_empty());
    assert_eq!(
        ready(&t2),
        (
            "False".into(),
            reason::WORKER_DEPLOYMENT_NOT_FOUND.into(),
            "WorkerDeployment hello not found".into()
        )
    );
    // It may be on its way: reconciling, not stalled.
    assert_eq!(kstatus(&t2), kstat("False", "True"));
    assert_eq!(builds(&t2), ["v1"]);
}

#[test]
fn template_problems_block_every_apply() {
    // (template, observed kind, expected reason, message fragment, Stalled)
    let mut zero = hpa();
    zero["spec"]["minReplicas"] = json!(0);
    let kind = |message: &str, terminal| {
        Some(Problem {
            reason: reason::APPLY_FAILED,
            message: message.into(),
            terminal,
        })
    };
    let cases = [
        (
            zero,
            None,
            reason::INVALID_TEMPLATE,
            "minReplicas must not be 0",
            "True",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            None,
            reason::INVALID_TEMPLATE,
            "kind ConfigMap is not allowed",
            "True",
        ),
        (
            hpa(),
            kind(
                "autoscaling/v2 HorizontalPodAutoscaler is not served",
                false,
            ),
            reason::APPLY_FAILED,
            "is not served",
            // Its CRD may come: reconciling.
            "False",
        ),
        (
            hpa(),
            kind(
                "autoscaling/v2 HorizontalPodAutoscaler is cluster-scoped",
                true,
            ),
            reason::APPLY_FAILED,
            "is cluster-scoped",
            "True",
        ),
    ];
    for (template, kind, want_reason, fragment, stalled) in cases {
        let o = Observed {
            kind_problem: kind,
            ..observed(&["v1"])
        };
        let (p, t) = cycle(wrt(template), &o, &[], at(0));
        assert!(p.applies.is_empty(), "{fragment}");
        let (st, why, message) = ready(&t);
        assert_eq!((st.as_str(), why.as_str()), ("False", want_reason));
        assert!(message.contains(fragment), "{message}");
        let reconciling = if stalled == "True" { "False" } else { "True" };
        assert_eq!(kstatus(&t), kstat(stalled, reconciling), "{fragment}");
        let entry = t.status.unwrap_or_default().versions[0].clone();
        assert_eq!(entry.last_applied_generation, 0);
        assert!(entry.apply_error.is_some_and(|e| e.contains(fragment)));
    }
}

#[test]
fn owner_reference_is_added_once_and_never_steals_a_controller() {
    let mut t = wrt(hpa());
    t.metadata.owner_references = Some(vec![wd_owner()]);
    assert_eq!(plan(&t, &observed(&["v1"])).owner_references, None);
    let other = OwnerReference {
        uid: "someone".into(),
        ..wd_owner()
    };
    t.metadata.owner_references = Some(vec![other]);
    assert_eq!(plan(&t, &observed(&["v1"])).owner_references, None);
    let mut not_controller = wd_owner();
    not_controller.uid = "cm".into();
    not_controller.controller = None;
    t.metadata.owner_references = Some(vec![not_controller.clone()]);
    assert_eq!(
        plan(&t, &observed(&["v1"])).owner_references,
        Some(vec![not_controller, wd_owner()])
    );
}

/// TWC #544: an autoscaler's copy leaves a version scaled down at sunset and comes back when
/// the version is routed to again; a copy that scales nothing (a PDB) stays.
#[test]
fn an_autoscaler_leaves_a_version_scaled_down_at_sunset_and_comes_back_with_it() {
    let (_, t) = cycle(wrt(hpa()), &observed(&["v1", "v2"]), &[], at(0));
    assert_eq!(builds(&t), ["v1", "v2"]);
    let at_sunset = Observed {
        sunset: ["v1".to_string()].into(),
        ..observed(&["v1", "v2"])
    };
    let (p, t2) = cycle(t, &at_sunset, &[], at(10));
    assert!(p.applies.is_empty());
    assert_eq!(
        p.deletes,
        vec![(
            "v1".to_string(),
            render::resource_name("hello", "hpa", "v1")
        )]
    );
    assert_eq!(builds(&t2), ["v2"], "pruned once the delete is confirmed");
    let (st, _, message) = ready(&t2);
    assert_eq!(st, "True");
    assert!(
        message.contains("none for the 1 scaled down at sunset"),
        "{message}"
    );
    // Nothing more to do while it stays scaled down.
    let (p, t3) = cycle(t2, &at_sunset, &[], at(20));
    assert!(p.applies.is_empty() && p.deletes.is_empty());
    // Routed to again: its copy is applied again.
    let (p, t4) = cycle(t3, &observed(&["v1", "v2"]), &[], at(30));
    assert_eq!(p.applies.len(), 1);
    assert_eq!(p.applies[0].build_id, "v1");
    assert_eq!(builds(&t4), ["v1", "v2"]);

    // A PodDisruptionBudget scales nothing: it stays until the Deployment goes.
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                     "spec": {"minAvailable": 1}});
    let kinds = vec!["PodDisruptionBudget".to_string()];
    let both = Observed {
        allowed_kinds: kinds.clone(),
        ..observed(&["v1", "v2"])
    };
    let at_sunset = Observed {
        allowed_kinds: kinds,
        ..at_sunset
    };
    let (_, t) = cycle(wrt(pdb), &both, &[], at(0));
    let (p, t2) = cycle(t, &at_sunset, &[], at(10));
    assert!(p.deletes.is_empty());
    assert_eq!(builds(&t2), ["v1", "v2"]);
    assert_eq!(ready(&t2).2, "applied for 2 build IDs");
}

/// Upstream's worker-group targeting: a template names its group (`default` when empty);
/// a group the WorkerDeployment does not have, or none for one with groups, is
/// `WorkerGroupNotFound` (not Stalled: a change of either can clear it) and nothing is applied;
/// a group gone from the spec but still run by a version is found.
#[test]
fn a_worker_group_the_worker_deployment_lacks_is_named_and_nothing_applied() {
    let ready = |t: &WorkerResourceTemplate| {
        let c = t
            .status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .find(|c| c.type_ == READY)
            .cloned()
            .unwrap_or_else(|| panic!("no Ready"));
        (c.status, c.reason, c.message)
    };
    let kstatus = |t: &WorkerResourceTemplate, type_: &str| {
        t.status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    };
    let o = observed(&["v1"]);
    let mut t = wrt(hpa());
    t.spec.worker_group = Some("default".into());
    let (p, _) = cycle(t.clone(), &o, &[], at(0));
    assert_eq!(
        p.applies.len(),
        1,
        "default is the group of a WorkerDeployment without groups"
    );
    t.spec.worker_group = Some("gpu".into());
    let (p, t2) = cycle(t.clone(), &o, &[], at(0));
    assert!(p.applies.is_empty());
    assert_eq!(
        ready(&t2),
        (
            "False".to_string(),
            reason::WORKER_GROUP_NOT_FOUND.to_string(),
            "WorkerDeployment \"hello\" has no group \"gpu\"".to_string()
        )
    );
    assert_eq!(kstatus(&t2, "Stalled").as_deref(), Some("False"));
    assert_eq!(kstatus(&t2, "Reconciling").as_deref(), Some("True"));
    // Declared by the spec, or still run by a version: found.
    let mut grouped = o.clone();
    if let Some(wd) = grouped.worker_deployment.as_mut() {
        wd.groups = vec!["gpu".into(), "workflows".into()];
    }
    assert!(plan(&t, &grouped).problem.is_none());
    let mut old = grouped.clone();
    if let Some(wd) = old.worker_deployment.as_mut() {
        wd.groups = vec!["workflows".into()];
    }
    old.version_groups.insert("gpu".into());
    assert!(plan(&t, &old).problem.is_none());
    // A WorkerDeployment with groups needs the template to name one.
    t.spec.worker_group = None;
    let problem = plan(&t, &grouped).problem.map(|p| p.message);
    assert_eq!(
        problem.as_deref(),
        Some("WorkerDeployment \"hello\" uses worker groups; set spec.workerGroup")
    );
}
