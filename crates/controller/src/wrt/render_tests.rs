//! Tests of rendering a WorkerResourceTemplate: pinned names, injection, the hash and the checks.

use super::*;

fn inputs() -> Inputs<'static> {
    Inputs {
        worker_group: None,
        namespace: "team-a",
        worker_deployment: "hello",
        temporal_namespace: "orders",
        owner: OwnerReference {
            api_version: "temporal.io/v1alpha1".into(),
            kind: "WorkerResourceTemplate".into(),
            name: "hpa".into(),
            uid: "wrt-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    }
}

fn allowed() -> Vec<String> {
    vec![
        "HorizontalPodAutoscaler".into(),
        "PodDisruptionBudget".into(),
    ]
}

/// Golden names: a rendered object keeps its name across controller versions and across
/// TWC and this controller (SHA-256 of `wd + wrt + buildID`, TWC's formula).
#[test]
fn names_are_pinned() {
    let cases = [
        ("hello", "hpa", "v1-d975", "hello-hpa-v1-d975-"),
        (
            "my-worker",
            "my-hpa",
            "image-abc123",
            "my-worker-my-hpa-image-abc123-",
        ),
        (
            "my_worker",
            "my/hpa",
            "image:latest",
            "my-worker-my-hpa-image-latest-",
        ),
        ("Big", "HPA", "V1", "big-hpa-v1-"),
    ];
    for (wd, wrt, build, prefix) in cases {
        let name = resource_name(wd, wrt, build);
        let digest = hex(&Sha256::digest(format!("{wd}{wrt}{build}").as_bytes()));
        assert_eq!(name, format!("{prefix}{}", &digest[..8]));
    }
    assert_eq!(
        resource_name("hello", "hpa", "v1-d975"),
        "hello-hpa-v1-d975-985ea0f9"
    );
    let long = resource_name(&"w".repeat(30), "autoscaler", "release-2026.11.30_1-abcd");
    assert_eq!(long.len(), MAX_NAME, "{long}");
    assert!(
        long.starts_with(&format!("{}-autosca-", "w".repeat(30))),
        "{long}"
    );
    // A cut on a separator does not leave `--`.
    let cut = resource_name(&"w".repeat(37), "x", "b");
    assert!(!cut.contains("--"), "{cut}");
    assert_eq!(cut.len(), 37 + 1 + 8);
    // Names differ by build ID even when the readable part is cut before it.
    assert_ne!(
        resource_name(&"w".repeat(40), "hpa", "v1"),
        resource_name(&"w".repeat(40), "hpa", "v2")
    );
}

fn hpa() -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"labels": {"team": "a"}},
        "spec": {"scaleTargetRef": {}, "minReplicas": 1, "maxReplicas": 3, "metrics": [
            {"type": "External", "external": {
                "metric": {"name": "backlog", "selector": {"matchLabels": {"task_type": "Activity"}}},
                "target": {"type": "AverageValue", "averageValue": "1"}}},
            {"type": "External", "external": {
                "metric": {"name": "slots", "selector": {"matchLabels": {}}},
                "target": {"type": "Value", "value": "1"}}},
            {"type": "External", "external": {
                "metric": {"name": "other", "selector": {"matchExpressions": []}},
                "target": {"type": "Value", "value": "1"}}}
        ]}
    })
}

#[test]
fn renders_an_hpa() {
    let out = render(&hpa(), &inputs(), "v1-d975", "hello-v1-d975").unwrap_or_default();
    assert_eq!(
        out["spec"]["scaleTargetRef"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "hello-v1-d975"})
    );
    let metric = json!({
        "temporal_worker_deployment_name": "team-a_hello",
        "temporal_worker_build_id": "v1-d975",
        "temporal_namespace": "orders",
    });
    let mut with_user = metric.clone();
    with_user["task_type"] = json!("Activity");
    let metrics = &out["spec"]["metrics"];
    assert_eq!(
        metrics[0]["external"]["metric"]["selector"]["matchLabels"],
        with_user
    );
    assert_eq!(
        metrics[1]["external"]["metric"]["selector"]["matchLabels"],
        metric
    );
    // No matchLabels key: nothing injected.
    assert_eq!(
        metrics[2]["external"]["metric"]["selector"],
        json!({"matchExpressions": []})
    );
    assert_eq!(out["metadata"]["name"], json!("hello-hpa-v1-d975-985ea0f9"));
    assert_eq!(out["metadata"]["namespace"], json!("team-a"));
    assert_eq!(
        out["metadata"]["labels"],
        json!({"team": "a", "temporal.io/build-id": "v1-d975", "temporal.io/deployment-name": "hello"})
    );
    assert_eq!(
        out["metadata"]["ownerReferences"],
        json!([{"apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
            "name": "hpa", "uid": "wrt-uid", "controller": true, "blockOwnerDeletion": true}])
    );
}

#[test]
fn injection_rules_table() {
    // (what, template spec, pointer, expected value at the pointer after rendering)
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"});
    let sel = json!({"temporal.io/build-id": "b", "temporal.io/deployment-name": "hello"});
    let cases: Vec<(&str, Value, &str, Value)> = vec![
        (
            "nested scaleTargetRef",
            json!({"a": [{"scaleTargetRef": {}}]}),
            "/spec/a/0/scaleTargetRef",
            dep.clone(),
        ),
        (
            "deep scaleTargetRef",
            json!({"x": {"y": {"scaleTargetRef": {}}}}),
            "/spec/x/y/scaleTargetRef",
            dep.clone(),
        ),
        (
            "filled scaleTargetRef kept",
            json!({"scaleTargetRef": {"name": "mine"}}),
            "/spec/scaleTargetRef",
            json!({"name": "mine"}),
        ),
        (
            "null scaleTargetRef kept",
            json!({"scaleTargetRef": null}),
            "/spec/scaleTargetRef",
            Value::Null,
        ),
        (
            "selector {}",
            json!({"selector": {"matchLabels": {}}}),
            "/spec/selector/matchLabels",
            sel,
        ),
        (
            "selector kept",
            json!({"selector": {"matchLabels": {"a": "b"}}}),
            "/spec/selector/matchLabels",
            json!({"a": "b"}),
        ),
        (
            "nested selector untouched",
            json!({"x": {"selector": {"matchLabels": {}}}}),
            "/spec/x/selector/matchLabels",
            json!({}),
        ),
        (
            "keda filled",
            json!({"triggers": [{"type": "temporal", "metadata": {
            "workerDeploymentName": "", "workerDeploymentBuildId": "", "namespace": "", "taskQueue": "q"}}]}),
            "/spec/triggers/0/metadata",
            json!({"workerDeploymentName": "team-a/hello", "workerDeploymentBuildId": "b", "namespace": "orders", "taskQueue": "q"}),
        ),
        (
            "keda absent keys stay absent",
            json!({"triggers": [{"type": "temporal", "metadata": {"taskQueue": "q"}}]}),
            "/spec/triggers/0/metadata",
            json!({"taskQueue": "q"}),
        ),
        (
            "other trigger untouched",
            json!({"triggers": [{"type": "cpu", "metadata": {"namespace": ""}}]}),
            "/spec/triggers/0/metadata",
            json!({"namespace": ""}),
        ),
    ];
    for (what, spec, pointer, want) in cases {
        let template = json!({"apiVersion": "x/v1", "kind": "K", "spec": spec});
        let out = render(&template, &inputs(), "b", "d").unwrap_or_default();
        assert_eq!(out.pointer(pointer), Some(&want), "{what}: {out}");
    }
    // Outside spec, nothing is injected.
    let template = json!({"kind": "K", "other": {"scaleTargetRef": {}}});
    let out = render(&template, &inputs(), "b", "d").unwrap_or_default();
    assert_eq!(out["other"]["scaleTargetRef"], json!({}));
    assert!(render(&json!("text"), &inputs(), "b", "d").is_err());
}

#[test]
fn the_hash_follows_content_not_key_order() {
    let a = render(&hpa(), &inputs(), "v1", "d").unwrap_or_default();
    let mut reordered: Map<String, Value> = Map::new();
    for (k, v) in a.as_object().cloned().unwrap_or_default().into_iter().rev() {
        reordered.insert(k, v);
    }
    assert_eq!(rendered_hash(&a), rendered_hash(&Value::Object(reordered)));
    assert_eq!(rendered_hash(&a).len(), HASH_LEN);
    let b = render(&hpa(), &inputs(), "v2", "d2").unwrap_or_default();
    assert_ne!(rendered_hash(&a), rendered_hash(&b));
}

#[test]
fn checks_table() {
    let ok = |spec: Value| json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "spec": spec});
    let cases: Vec<(&str, Value, Option<&str>)> = vec![
        ("good hpa", hpa(), None),
        (
            "kind case-insensitive",
            json!({"apiVersion": "policy/v1", "kind": "poddisruptionbudget"}),
            None,
        ),
        ("not an object", json!([1]), Some("must be an object")),
        (
            "no apiVersion",
            json!({"kind": "HorizontalPodAutoscaler"}),
            Some("apiVersion is required"),
        ),
        (
            "no kind",
            json!({"apiVersion": "v1"}),
            Some("kind is required"),
        ),
        (
            "kind not allowed",
            json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
            Some("kind apps/Deployment is not allowed"),
        ),
        (
            "name set",
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "x"}}),
            Some("metadata.name must not be set"),
        ),
        (
            "namespace set",
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"namespace": "x"}}),
            Some("metadata.namespace must not be set"),
        ),
        (
            "minReplicas 0",
            ok(json!({"minReplicas": 0, "scaleTargetRef": {}})),
            Some("minReplicas must not be 0"),
        ),
        (
            "filled scaleTargetRef",
            ok(json!({"scaleTargetRef": {"name": "d"}})),
            Some("scaleTargetRef must be {}"),
        ),
        (
            "nested filled scaleTargetRef",
            ok(json!({"x": [{"scaleTargetRef": {"name": "d"}}]})),
            Some("scaleTargetRef must be {}"),
        ),
        (
            "filled matchLabels",
            ok(json!({"selector": {"matchLabels": {"a": "b"}}})),
            Some("selector.matchLabels must be {}"),
        ),
        (
            "owned metric label",
            ok(
                json!({"metrics": [{"external": {"metric": {"selector": {"matchLabels": {"temporal_namespace": "x"}}}}}]}),
            ),
            Some("metrics[0].external.metric.selector.matchLabels must not set temporal_namespace"),
        ),
        (
            "keda key set",
            ok(json!({"triggers": [{"type": "temporal", "metadata": {"namespace": "x"}}]})),
            Some("triggers[0].metadata.namespace must be \"\""),
        ),
        (
            "keda other trigger",
            ok(json!({"triggers": [{"type": "cpu", "metadata": {"namespace": "x"}}]})),
            None,
        ),
    ];
    for (what, template, want) in cases {
        let problems = check(&template, &allowed());
        match want {
            None => assert!(problems.is_empty(), "{what}: {problems:?}"),
            Some(text) => assert!(
                problems.iter().any(|p| p.contains(text)),
                "{what}: {problems:?}"
            ),
        }
    }
    // An empty allow list rejects every kind.
    assert!(!check(&hpa(), &[]).is_empty());
    // The defaults, with their groups, take the same and refuse the same.
    let defaults: Vec<String> = crate::wrt::DEFAULT_ALLOWED_KINDS
        .iter()
        .map(|k| k.to_string())
        .collect();
    assert!(check(&hpa(), &defaults).is_empty());
}

/// A custom resource named like a built-in kind, in another group, never passes for it: not
/// with the defaults, not with a bare built-in kind; a bare other kind is any group's (TWC's
/// reading), `group/Kind` only that group's.
#[test]
fn allowed_kinds_match_the_api_group_too() {
    let impostor = json!({"apiVersion": "evil.example.com/v1", "kind": "HorizontalPodAutoscaler"});
    let defaults: Vec<String> = crate::wrt::DEFAULT_ALLOWED_KINDS
        .iter()
        .map(|k| k.to_string())
        .collect();
    for list in [defaults, allowed()] {
        let problems = check(&impostor, &list);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("kind evil.example.com/HorizontalPodAutoscaler is not allowed")),
            "{list:?}: {problems:?}"
        );
    }
    assert!(allows(
        "autoscaling/HorizontalPodAutoscaler",
        "autoscaling",
        "horizontalpodautoscaler"
    ));
    assert!(allows("keda.sh/ScaledObject", "keda.sh", "ScaledObject"));
    assert!(!allows("keda.sh/ScaledObject", "other.io", "ScaledObject"));
    assert!(allows("ScaledObject", "other.io", "ScaledObject"));
    assert!(!allows(
        "policy/PodDisruptionBudget",
        "",
        "PodDisruptionBudget"
    ));
}

#[test]
fn gvk_of_core_and_grouped_kinds() {
    assert_eq!(
        gvk(&hpa()),
        Some((
            "autoscaling".into(),
            "v2".into(),
            "HorizontalPodAutoscaler".into()
        ))
    );
    assert_eq!(
        gvk(&json!({"apiVersion": "v1", "kind": "ConfigMap"})),
        Some(("".into(), "v1".into(), "ConfigMap".into()))
    );
    assert_eq!(gvk(&json!({"kind": "ConfigMap"})), None);
}

/// TWC's `HasScaleTarget`: any `scaleTargetRef` under `spec`, whatever its kind or value.
#[test]
fn only_a_scale_target_under_spec_makes_an_autoscaler() {
    let hpa = json!({"kind": "HorizontalPodAutoscaler", "spec": {"scaleTargetRef": {}}});
    let keda = json!({"kind": "ScaledObject", "spec": {"advanced": {}, "triggers": [{"x": {"scaleTargetRef": null}}]}});
    let pdb = json!({"kind": "PodDisruptionBudget", "spec": {"minAvailable": 1}});
    let vpa = json!({"kind": "VerticalPodAutoscaler", "spec": {"targetRef": {}}});
    let outside = json!({"kind": "X", "metadata": {"scaleTargetRef": {}}});
    assert!(scales_target(&hpa));
    assert!(scales_target(&keda));
    assert!(!scales_target(&pdb));
    assert!(!scales_target(&vpa));
    assert!(!scales_target(&outside));
}

/// For a WorkerDeployment with worker groups, a copy selects its group's pods only: the group
/// label joins the selector labels it fills in.
#[test]
fn a_group_copy_selects_that_groups_pods() {
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {}}}});
    let mut grouped = inputs();
    grouped.worker_group = Some("gpu");
    let out =
        render(&pdb, &grouped, "v1", "hello-gpu-v1-abcd1234").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        out["spec"]["selector"]["matchLabels"],
        json!({"temporal.io/build-id": "v1", "temporal.io/deployment-name": "hello",
               "temporal.io/worker-group": "gpu"})
    );
    let plain = render(&pdb, &inputs(), "v1", "hello-v1").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        plain["spec"]["selector"]["matchLabels"],
        json!({"temporal.io/build-id": "v1", "temporal.io/deployment-name": "hello"})
    );
}
