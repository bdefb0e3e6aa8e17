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
    /// The worker group the copies are for, when the WorkerDeployment has groups: its label
    /// joins the selector labels, so a copy selects that group's pods only.
    pub worker_group: Option<&'a str>,
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
    // The selector of the Deployment the copy is for: its group's, with groups.
    let selector = match inputs.worker_group {
        Some(group) => {
            crate::plan::group_ids::selector_labels(inputs.worker_deployment, group, build_id)
        }
        None => selector_labels(inputs.worker_deployment, build_id),
    };
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

/// The groups of the kinds a bare entry (`Kind`, no group) means: Kubernetes' own, so that a
/// custom resource of the same kind in another group does not pass for it.
const BUILT_IN_GROUPS: &[(&str, &str)] = &[
    ("HorizontalPodAutoscaler", "autoscaling"),
    ("PodDisruptionBudget", "policy"),
];

/// Whether allowlist entry `entry` (`group/Kind`, or a bare `Kind`) allows kind `kind` of API
/// group `group`. Kinds compare case-insensitively, groups exactly. A bare built-in kind means
/// its built-in group; any other bare kind matches it in any group (TWC's reading; name the
/// group to be exact).
pub fn allows(entry: &str, group: &str, kind: &str) -> bool {
    let entry = entry.trim();
    let (want_group, want_kind) = match entry.rsplit_once('/') {
        Some((g, k)) => (Some(g), k),
        None => (
            BUILT_IN_GROUPS
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(entry))
                .map(|(_, g)| *g),
            entry,
        ),
    };
    want_kind.eq_ignore_ascii_case(kind) && want_group.is_none_or(|g| g == group)
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
    let group = text("apiVersion")
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or_default();
    if kind.is_empty() {
        problems.push("spec.template.kind is required".into());
    } else if !allowed_kinds.iter().any(|k| allows(k, group, kind)) {
        let named = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{group}/{kind}")
        };
        problems.push(format!(
            "kind {named} is not allowed (allowed: {})",
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
#[path = "render_tests.rs"]
mod tests;
