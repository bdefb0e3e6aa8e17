//! A manifest written for TWC must not lose a field here: the apiserver prunes, in silence, any
//! field a structural schema does not know. Every spec field of TWC's published CRDs
//! (`tests/data/twc-crd-fields.txt`, with the command that made it) must be in ours: either
//! supported, or known and refused with a message.
//! Status fields are the controller's own; the ones TWC writes and this controller does not
//! are listed here, and the list must stay exact.

use serde_json::Value;

/// TWC status fields this controller does not write (it records the connection it acted on as
/// `{kind, name}`).
const STATUS_NOT_WRITTEN: &[&str] = &["status.observedConnectionRef.objectRef"];

/// Our CRDs' `openAPIV3Schema`, by kind.
fn ours() -> Vec<(String, Value)> {
    twc_api::crd::all()
        .into_iter()
        .map(|crd| {
            let kind = crd.spec.names.kind.clone();
            let schema = serde_json::to_value(&crd.spec.versions[0].schema)
                .ok()
                .map(|s| s["openAPIV3Schema"].clone())
                .unwrap_or(Value::Null);
            (kind, schema)
        })
        .collect()
}

/// Whether `path` (`spec.a.b[].c`) is kept by `schema`: every step is a known property or
/// array item, or a step on the way keeps unknown fields (nothing below it is pruned).
fn kept(schema: &Value, path: &str) -> bool {
    let mut at = schema;
    for step in path.split('.') {
        if at["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
            return true;
        }
        let (name, items) = match step.find("[]") {
            Some(i) => (&step[..i], step[i..].matches("[]").count()),
            None => (step, 0),
        };
        at = &at["properties"][name];
        if at.is_null() {
            return false;
        }
        for _ in 0..items {
            if at["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
                return true;
            }
            at = &at["items"];
            if at.is_null() {
                return false;
            }
        }
    }
    true
}

#[test]
fn no_field_of_a_twc_manifest_is_pruned() {
    let ours = ours();
    let list = include_str!("data/twc-crd-fields.txt");
    let mut pruned = Vec::new();
    let mut not_written = Vec::new();
    let mut kinds = std::collections::BTreeSet::new();
    for line in list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut parts = line.splitn(3, ' ');
        let (kind, _version, path) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        kinds.insert(kind);
        let Some((_, schema)) = ours.iter().find(|(k, _)| k == kind) else {
            pruned.push(format!("{kind}: the whole kind"));
            continue;
        };
        if kept(schema, path) {
            continue;
        }
        if path.starts_with("status.") {
            not_written.push(path);
        } else {
            pruned.push(format!("{kind} {path}"));
        }
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "ClusterConnection",
            "Connection",
            "WorkerDeployment",
            "WorkerResourceTemplate"
        ]
    );
    assert!(pruned.is_empty(), "pruned from TWC manifests: {pruned:#?}");
    // Only the roots of what is not written are listed (their children follow).
    let roots: std::collections::BTreeSet<&str> = not_written
        .iter()
        .filter(|p| {
            !not_written
                .iter()
                .any(|q| p.starts_with(&format!("{q}.")) || p.starts_with(&format!("{q}[]")))
        })
        .copied()
        .collect();
    let mut expected: Vec<&str> = STATUS_NOT_WRITTEN.to_vec();
    expected.sort();
    assert_eq!(roots.into_iter().collect::<Vec<_>>(), expected);
}

/// The check itself: a field missing from our schema is caught, one under an object that keeps
/// unknown fields is not.
#[test]
fn the_check_catches_a_missing_field() {
    let schema = serde_json::json!({"properties": {"spec": {"properties": {
        "a": {"type": "array", "items": {"properties": {"b": {"type": "string"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    }}}});
    assert!(kept(&schema, "spec.a[].b"));
    assert!(!kept(&schema, "spec.a[].c"));
    assert!(!kept(&schema, "spec.missing"));
    assert!(kept(&schema, "spec.free.anything.below"));
}
