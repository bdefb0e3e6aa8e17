//! Rendering one WorkerResourceTemplate for one build ID, exactly as TWC does: the name, the
//! injected fields, the labels and owner reference, and the hash that lets an unchanged object
//! skip its apply. Also the checks TWC's validating webhook makes without the API. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::plan::deployment::selector_labels;

/// Longest rendered-object name (as a versioned Deployment's, so any kind fits).
pub const MAX_NAME: usize = 47;
/// Hex characters of the name's uniqueness suffix.
const NAME_HASH_LEN: usize = 8;
/// Hex characters of the rendered-object hash kept in the status.
pub const HASH_LEN: usize = 16;

/// The metric selector labels the controller owns.
pub const METRIC_DEPLOYMENT_LABEL: &str = "temporal_worker_deployment_name";
pub const METRIC_BUILD_ID_LABEL: &str = "temporal_worker_build_id";
pub const METRIC_NAMESPACE_LABEL: &str = "temporal_namespace";
/// The KEDA `temporal` trigger metadata keys the controller fills.
const KEDA_KEYS: [&str; 3] = [
    "workerDeploymentName",
    "workerDeploymentBuildId",
    "namespace",
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs of characters outside `[a-zA-Z0-9-]` become one `-`; lowercased (TWC's
/// `CleanStringForDNS`).
fn clean_dns(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_run = false;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c.to_ascii_lowercase());
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out
}

/// The rendered object's name for (WorkerDeployment, template, build ID): the readable
/// `<wd>-<wrt>-<build>` cut to 38 characters, then `-` and 8 hex of the SHA-256 of the
/// untruncated triple, so at most 47 characters and distinct per triple (TWC's
/// `ComputeWorkerResourceTemplateName`).
pub fn resource_name(wd: &str, wrt: &str, build_id: &str) -> String {
    let digest = hex(&Sha256::digest(format!("{wd}{wrt}{build_id}").as_bytes()));
    let raw = clean_dns(&format!("{wd}-{wrt}-{build_id}"));
    let keep = MAX_NAME - 1 - NAME_HASH_LEN;
    let prefix: String = raw.chars().take(keep).collect();
    format!(
        "{}-{}",
        prefix.trim_end_matches('-'),
        &digest[..NAME_HASH_LEN]
    )
}

/// SHA-256 of the rendered object's JSON as Go's `encoding/json` writes a map (keys sorted at
/// every level, Go's string escapes), 16 hex characters: TWC's `lastAppliedHash`, so a
/// takeover does not re-apply what TWC applied.
pub fn rendered_hash(object: &Value) -> String {
    let mut json = String::new();
    twc_gocompat::json::write_any(object, &mut json);
    hex(&Sha256::digest(json.as_bytes()))[..HASH_LEN].to_string()
}

/// What a render needs besides the template and the build.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// The Kubernetes namespace of the template and its WorkerDeployment.
    pub namespace: &'a str,
    pub worker_deployment: &'a str,
    /// The WorkerDeployment's Temporal namespace.
    pub temporal_namespace: &'a str,
    /// The controller owner reference of every rendered object: the template.
    pub owner: OwnerReference,
}

impl Inputs<'_> {
    /// `<namespace>/<worker deployment>`, the Temporal worker deployment name.
    fn temporal_deployment(&self) -> String {
        crate::plan::build_id::temporal_deployment_name(self.namespace, self.worker_deployment)
    }
}

fn is_empty_object(v: Option<&Value>) -> bool {
    v.and_then(Value::as_object).is_some_and(Map::is_empty)
}

fn string_map(m: &BTreeMap<String, String>) -> Value {
    Value::Object(m.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

/// Fills every `scaleTargetRef: {}` under `v` (maps and arrays) with the Deployment.
fn inject_scale_target_ref(v: &mut Value, deployment: &str) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if k == "scaleTargetRef" {
                    if is_empty_object(Some(child)) {
                        *child = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment});
                    }
                } else {
                    inject_scale_target_ref(child, deployment);
                }
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut().filter(|i| i.is_object()) {
                inject_scale_target_ref(item, deployment);
            }
        }
        _ => {}
    }
}

/// The external metric selectors of an HPA spec: `metrics[*].external.metric.selector`.
fn metric_selectors(spec: &mut Map<String, Value>) -> Vec<&mut Map<String, Value>> {
    let Some(Value::Array(metrics)) = spec.get_mut("metrics") else {
        return Vec::new();
    };
    metrics
        .iter_mut()
        .filter_map(|m| {
            m.pointer_mut("/external/metric/selector")
                .and_then(Value::as_object_mut)
        })
        .collect()
}

/// The metadata maps of the KEDA triggers of type `temporal`: `triggers[*].metadata`.
fn temporal_triggers(spec: &mut Map<String, Value>) -> Vec<&mut Map<String, Value>> {
    let Some(Value::Array(triggers)) = spec.get_mut("triggers") else {
        return Vec::new();
    };
    triggers
        .iter_mut()
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("temporal"))
        .filter_map(|t| t.get_mut("metadata").and_then(Value::as_object_mut))
        .collect()
}

/// The labels merged into every external metric selector that has `matchLabels`.
pub fn metric_labels(inputs: &Inputs, build_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            METRIC_DEPLOYMENT_LABEL.to_string(),
            inputs.temporal_deployment().replace('/', "_"),
        ),
        (METRIC_BUILD_ID_LABEL.to_string(), build_id.to_string()),
        (
            METRIC_NAMESPACE_LABEL.to_string(),
            inputs.temporal_namespace.to_string(),
        ),
    ])
}

/// Renders the template for `build_id`, whose versioned Deployment is `deployment`:
/// * `scaleTargetRef: {}` anywhere in `spec` → that Deployment;
/// * `spec.selector.matchLabels: {}` → the version's selector labels;
/// * `spec.metrics[*].external.metric.selector.matchLabels` (when present, even `{}`) → the
///   three Temporal metric labels merged in, the user's kept;
/// * KEDA `spec.triggers[type=temporal].metadata` keys set to `""` → the Temporal worker
///   deployment name, the build ID and the Temporal namespace;
/// * name, namespace, the selector labels merged into the labels, and the template as the
///   controller owner.
pub fn render(
    template: &Value,
    inputs: &Inputs,
    build_id: &str,
    deployment: &str,
) -> Result<Value, String> {
    let mut object = template.clone();
    let Some(obj) = object.as_object_mut() else {
        return Err("spec.template is not an object".into());
    };
    let selector = selector_labels(inputs.worker_deployment, build_id);
    if let Some(Value::Object(spec)) = obj.get_mut("spec") {
        if let Some(Value::Object(sel)) = spec.get_mut("selector")
            && is_empty_object(sel.get("matchLabels"))
        {
            sel.insert("matchLabels".into(), string_map(&selector));
        }
        let metric = metric_labels(inputs, build_id);
        for sel in metric_selectors(spec) {
            let Some(labels) = sel.get_mut("matchLabels") else {
                continue;
            };
            if !labels.is_object() {
                *labels = json!({});
            }
            if let Some(labels) = labels.as_object_mut() {
                for (k, v) in &metric {
                    labels.insert(k.clone(), json!(v));
                }
            }
        }
        let values = [
            inputs.temporal_deployment(),
            build_id.to_string(),
            inputs.temporal_namespace.to_string(),
        ];
        for meta in temporal_triggers(spec) {
            for (key, value) in KEDA_KEYS.iter().zip(&values) {
                if meta.get(*key).and_then(Value::as_str) == Some("") {
                    meta.insert((*key).into(), json!(value));
                }
            }
        }
        let mut spec_value = Value::Object(std::mem::take(spec));
        inject_scale_target_ref(&mut spec_value, deployment);
        if let Value::Object(s) = spec_value {
            *spec = s;
        }
    }
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("spec.template.metadata is not an object")?;
    meta.insert(
        "name".into(),
        json!(resource_name(
            inputs.worker_deployment,
            &inputs.owner.name,
            build_id
        )),
    );
    meta.insert("namespace".into(), json!(inputs.namespace));
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    if let Some(labels) = labels.as_object_mut() {
        for (k, v) in &selector {
            labels.insert(k.clone(), json!(v));
        }
    }
    let owner = serde_json::to_value(&inputs.owner).map_err(|e| e.to_string())?;
    meta.insert("ownerReferences".into(), json!([owner]));
    Ok(object)
}

/// The group, version and kind a template names (`apiVersion` `group/version` or `version`).
pub fn gvk(template: &Value) -> Option<(String, String, String)> {
    let api_version = template.get("apiVersion")?.as_str()?;
    let kind = template.get("kind")?.as_str()?;
    if api_version.is_empty() || kind.is_empty() {
        return None;
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Some((group.to_string(), version.to_string(), kind.to_string()))
}

/// Whether the template scales the versioned Deployment it is rendered for: it has a
/// `scaleTargetRef` (filled in by the controller) somewhere under `spec`.
pub fn scales_target(template: &Value) -> bool {
    fn has(v: &Value) -> bool {
        match v {
            Value::Object(map) => map.iter().any(|(k, c)| k == "scaleTargetRef" || has(c)),
            Value::Array(items) => items.iter().any(has),
            _ => false,
        }
    }
    template.get("spec").is_some_and(has)
}

/// Whether `scaleTargetRef` is set to anything but `{}` anywhere under `v`.
fn has_filled_scale_target_ref(v: &Value) -> bool {
    match v {
        Value::Object(map) => map.iter().any(|(k, child)| {
            (k == "scaleTargetRef" && !is_empty_object(Some(child)))
                || has_filled_scale_target_ref(child)
        }),
        Value::Array(items) => items.iter().any(has_filled_scale_target_ref),
        _ => false,
    }
}

/// The problems of a template that need no API call (TWC's validating webhook, which this
/// controller does not run): each one a sentence for the status and the event.
pub fn check(template: &Value, allowed_kinds: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(obj) = template.as_object() else {
        return vec!["spec.template must be an object".into()];
    };
    let text = |key: &str| obj.get(key).and_then(Value::as_str).unwrap_or_default();
    if text("apiVersion").is_empty() {
        problems.push("spec.template.apiVersion is required".into());
    }
    let kind = text("kind");
    if kind.is_empty() {
        problems.push("spec.template.kind is required".into());
    } else if !allowed_kinds.iter().any(|k| k.eq_ignore_ascii_case(kind)) {
        problems.push(format!(
            "kind {kind} is not allowed (allowed: {})",
            if allowed_kinds.is_empty() {
                "none".to_string()
            } else {
                allowed_kinds.join(", ")
            }
        ));
    }
    for field in ["name", "namespace"] {
        if obj
            .get("metadata")
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            problems.push(format!(
                "spec.template.metadata.{field} must not be set: the controller names each copy"
            ));
        }
    }
    let Some(spec) = obj.get("spec") else {
        return problems;
    };
    if spec
        .get("minReplicas")
        .and_then(Value::as_i64)
        .is_some_and(|n| n == 0)
    {
        problems.push(
            "spec.template.spec.minReplicas must not be 0: scaling a version to zero on a backlog metric can strand its workflows"
                .into(),
        );
    }
    if has_filled_scale_target_ref(spec) {
        problems.push(
            "scaleTargetRef must be {} (or absent): the controller points it at each versioned Deployment"
                .into(),
        );
    }
    if spec
        .get("selector")
        .and_then(|s| s.get("matchLabels"))
        .is_some_and(|m| !is_empty_object(Some(m)))
    {
        problems.push(
            "spec.template.spec.selector.matchLabels must be {} (or absent): the controller fills it with the version's selector labels"
                .into(),
        );
    }
    let owned = [
        METRIC_DEPLOYMENT_LABEL,
        METRIC_BUILD_ID_LABEL,
        METRIC_NAMESPACE_LABEL,
    ];
    for (i, m) in spec
        .get("metrics")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let labels = m
            .pointer("/external/metric/selector/matchLabels")
            .and_then(Value::as_object);
        for key in owned {
            if labels.is_some_and(|l| l.contains_key(key)) {
                problems.push(format!(
                    "spec.template.spec.metrics[{i}].external.metric.selector.matchLabels must not set {key}: the controller sets it"
                ));
            }
        }
    }
    for (i, t) in spec
        .get("triggers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, t)| t.get("type").and_then(Value::as_str) == Some("temporal"))
    {
        for key in KEDA_KEYS {
            if t.get("metadata")
                .and_then(|m| m.get(key))
                .is_some_and(|v| v.as_str() != Some(""))
            {
                problems.push(format!(
                    "spec.template.spec.triggers[{i}].metadata.{key} must be \"\" (or absent): the controller sets it"
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs<'static> {
        Inputs {
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
                Some("kind Deployment is not allowed"),
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
                Some(
                    "metrics[0].external.metric.selector.matchLabels must not set temporal_namespace",
                ),
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
}
