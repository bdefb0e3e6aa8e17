//! `twc build-id`: which version a WorkerDeployment manifest makes, without a cluster. Users run
//! it in CI to know whether a change creates a new version (and with it a rollout).

use std::io::Read;
use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use twc_controller::plan::{build_id, group_ids};

/// One WorkerDeployment's version, as the controller computes it.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    pub namespace: String,
    pub name: String,
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// The version's Deployment (without worker groups; with them, each group's is in
    /// `workerGroups`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versioned_deployment_name: Option<String>,
    pub temporal_worker_deployment_name: String,
    /// With `spec.workerGroups`: each group's Deployment, by group name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub worker_groups: Vec<GroupVersion>,
}

/// A worker group's Deployment in a version.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersion {
    pub name: String,
    pub versioned_deployment_name: String,
}

/// Reads `path` (`-`: standard input).
pub fn read(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading standard input")?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// The documents of a YAML stream or a JSON value, each with its label for errors: its index
/// in the stream (from 0), and the item's index for a JSON array or a `List`.
fn documents(input: &str) -> anyhow::Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(input).enumerate() {
        let value = Value::deserialize(doc).with_context(|| format!("document {i}"))?;
        let items = match value {
            Value::Null => continue,
            Value::Array(items) => items,
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str) == Some("List") => o
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            other => {
                out.push((format!("document {i}"), other));
                continue;
            }
        };
        for (j, item) in items.into_iter().enumerate() {
            out.push((format!("document {i} item {j}"), item));
        }
    }
    Ok(out)
}

/// The version of every WorkerDeployment in `input`, in input order; other kinds are passed
/// over. `namespace` is used where a manifest names none. An error names the document (its
/// index among the documents, from 0) and the field.
pub fn versions(input: &str, namespace: &str) -> anyhow::Result<Vec<Version>> {
    let mut out = Vec::new();
    for (at, doc) in &documents(input)? {
        let fail = |field: &str, what: String| anyhow::anyhow!("{at}: {field}: {what}");
        let kind = doc.get("kind").and_then(Value::as_str);
        match kind {
            Some("WorkerDeployment") => {}
            Some(_) => continue,
            None => return Err(fail("kind", "missing".into())),
        }
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| fail("metadata.name", "missing".into()))?;
        let ns = doc
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .unwrap_or(namespace);
        let custom = match doc.pointer("/spec/workerOptions/unsafeCustomBuildID") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                return Err(fail(
                    "spec.workerOptions.unsafeCustomBuildID",
                    format!("expected a string, got {other}"),
                ));
            }
        };
        // A WorkerDeployment read back from the cluster carries its collision count.
        let collisions = doc
            .pointer("/status/collisionCount")
            .and_then(Value::as_u64)
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(0);
        let parse = |field: &str, raw: &Value| -> anyhow::Result<PodTemplateSpec> {
            let template: PodTemplateSpec =
                serde_json::from_value(raw.clone()).map_err(|e| fail(field, e.to_string()))?;
            build_id::go_json(&template)
                .map_err(|e| fail(&format!("{field}.{}", e.path), e.message))?;
            Ok(template)
        };
        let version = |build: String, deployment: Option<String>, groups| Version {
            namespace: ns.to_string(),
            name: name.to_string(),
            versioned_deployment_name: deployment,
            temporal_worker_deployment_name: build_id::temporal_deployment_name(ns, name),
            build_id: build,
            worker_groups: groups,
        };
        if let Some(list) = doc.pointer("/spec/workerGroups").and_then(Value::as_array) {
            let mut groups = Vec::new();
            for (i, g) in list.iter().enumerate() {
                let field = format!("spec.workerGroups[{i}]");
                let group = g
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| fail(&format!("{field}.name"), "missing".into()))?;
                let raw = g.pointer("/deployment/template").ok_or_else(|| {
                    fail(&format!("{field}.deployment.template"), "missing".into())
                })?;
                groups.push((group, parse(&format!("{field}.deployment.template"), raw)?));
            }
            let refs: Vec<(&str, &PodTemplateSpec)> = groups.iter().map(|(n, t)| (*n, t)).collect();
            let build = group_ids::build_id(&refs, custom, collisions);
            let mut names: Vec<&str> = groups.iter().map(|(n, _)| *n).collect();
            names.sort();
            let each = names
                .into_iter()
                .map(|g| GroupVersion {
                    name: g.to_string(),
                    versioned_deployment_name: group_ids::deployment_name(name, g, &build),
                })
                .collect();
            out.push(version(build, None, each));
            continue;
        }
        // `spec.deployment.template` (TWC's newer form) or the deprecated `spec.template`:
        // the same pod makes the same build ID in both.
        let (field, raw) = match doc.pointer("/spec/deployment/template") {
            Some(raw) => ("spec.deployment.template", raw),
            None => (
                "spec.template",
                doc.pointer("/spec/template").ok_or_else(|| {
                    fail(
                        "spec",
                        "one of deployment, template or workerGroups must be set".into(),
                    )
                })?,
            ),
        };
        let template = parse(field, raw)?;
        let build = build_id::build_id_with(&template, custom, collisions);
        let deployment = build_id::deployment_name(name, &build);
        out.push(version(build, Some(deployment), Vec::new()));
    }
    Ok(out)
}

/// A table for people: one line a WorkerDeployment.
pub fn table(versions: &[Version]) -> String {
    let header = [
        "NAMESPACE",
        "NAME",
        "BUILD ID",
        "DEPLOYMENT",
        "TEMPORAL DEPLOYMENT",
    ];
    // With worker groups, every group's Deployment, comma-separated.
    let deployments: Vec<String> = versions
        .iter()
        .map(|v| match &v.versioned_deployment_name {
            Some(d) => d.clone(),
            None => v
                .worker_groups
                .iter()
                .map(|g| g.versioned_deployment_name.as_str())
                .collect::<Vec<_>>()
                .join(","),
        })
        .collect();
    let rows: Vec<[&str; 5]> = versions
        .iter()
        .enumerate()
        .map(|(i, v)| {
            [
                v.namespace.as_str(),
                v.name.as_str(),
                v.build_id.as_str(),
                deployments[i].as_str(),
                v.temporal_worker_deployment_name.as_str(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"
apiVersion: temporal.io/v1alpha1
kind: Connection
metadata: {name: c}
spec: {hostPort: "t:7233"}
---
apiVersion: temporal.io/v1alpha1
kind: WorkerDeployment
metadata: {name: orders, namespace: team-a}
spec:
  workerOptions: {connectionRef: {name: c}, temporalNamespace: default}
  template:
    spec:
      containers: [{name: worker, image: "registry.example.com/orders-worker:1.4.2"}]
---
kind: WorkerDeployment
metadata: {name: billing}
spec:
  workerOptions: {unsafeCustomBuildID: "release 7"}
  template: {spec: {containers: [{name: w, image: "b:1"}]}}
"#;

    #[test]
    fn gives_each_worker_deployment_its_version_in_input_order() {
        let v = versions(TWO, "default").unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(v.len(), 2, "the Connection is passed over");
        // TWC's own build ID for this template (shared/reference, case "minimal").
        assert_eq!(v[0].build_id, "1.4.2-7d78");
        assert_eq!(
            v[0].versioned_deployment_name.as_deref(),
            Some("orders-1-4-2-7d78")
        );
        assert_eq!(v[0].temporal_worker_deployment_name, "team-a/orders");
        assert_eq!(
            (v[1].namespace.as_str(), v[1].name.as_str()),
            ("default", "billing")
        );
        assert_eq!(v[1].build_id, "release-7");
        assert_eq!(
            serde_json::to_string(&v[0]).unwrap_or_default(),
            r#"{"namespace":"team-a","name":"orders","buildID":"1.4.2-7d78","versionedDeploymentName":"orders-1-4-2-7d78","temporalWorkerDeploymentName":"team-a/orders"}"#
        );
        assert!(table(&v).starts_with("NAMESPACE   NAME"));
    }

    /// TWC's newer form gives the same version as the deprecated one for the same pod
    /// (upstream's own build ID for case "no-groups-deployment-same-pod").
    #[test]
    fn spec_deployment_gives_the_build_id_of_the_same_template() {
        let pod = "{spec: {containers: [{name: worker, image: \"registry.example.com/orders-worker:1.4.2\"}]}}";
        let old =
            format!("kind: WorkerDeployment\nmetadata: {{name: o}}\nspec: {{template: {pod}}}\n");
        let new = format!(
            "kind: WorkerDeployment\nmetadata: {{name: o}}\nspec: {{deployment: {{replicas: 2, template: {pod}}}}}\n"
        );
        let build = |input: &str| {
            versions(input, "default")
                .unwrap_or_else(|e| panic!("{e:#}"))
                .remove(0)
                .build_id
        };
        assert_eq!(build(&old), "1.4.2-7d78");
        assert_eq!(build(&new), "1.4.2-7d78");
        let e = versions(
            "kind: WorkerDeployment\nmetadata: {name: x}\nspec: {}\n",
            "d",
        )
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("document 0: spec: one of deployment, template or workerGroups must be set")
        );
    }

    /// Upstream's own build ID and Deployment names for two groups (golden case
    /// "two-groups-different-tags" of `twc-group-build-ids.json`), whatever their order.
    #[test]
    fn worker_groups_give_upstreams_build_id_and_one_deployment_per_group() {
        let golden: Value = serde_json::from_str(include_str!(
            "../crates/gocompat/tests/data/twc-group-build-ids.json"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let case = golden["cases"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["input"]["name"] == "two-groups-different-tags")
            .cloned()
            .unwrap_or_else(|| panic!("no such case"));
        let doc = serde_json::json!({
            "kind": "WorkerDeployment",
            "metadata": {"name": case["input"]["wdName"]},
            "spec": case["input"]["spec"],
        });
        let v = versions(&doc.to_string(), "default").unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(v[0].build_id, case["buildID"].as_str().unwrap_or_default());
        assert_eq!(v[0].versioned_deployment_name, None);
        let names: Vec<&str> = v[0]
            .worker_groups
            .iter()
            .map(|g| g.versioned_deployment_name.as_str())
            .collect();
        let expected: Vec<&str> = case["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g["deploymentName"].as_str())
            .collect();
        assert_eq!(names, expected);
        assert!(table(&v).contains(&expected.join(",")), "{}", table(&v));
    }

    #[test]
    fn json_lists_and_arrays_hold_several() {
        let list = r#"{"kind": "List", "items": [
            {"kind": "WorkerDeployment", "metadata": {"name": "a"},
             "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "x:1"}]}}}}]}"#;
        assert_eq!(versions(list, "ns").map(|v| v.len()).ok(), Some(1));
    }

    #[test]
    fn a_bad_document_is_named_by_index_and_field() {
        let bad = format!(
            "{TWO}---\nkind: WorkerDeployment\nmetadata: {{name: x}}\nspec: {{template: {{spec: {{containers: 7}}}}}}\n"
        );
        let e = versions(&bad, "default")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("document 3: spec.template: "), "{e}");
        let e = versions("kind: WorkerDeployment\nspec: {}\n", "default")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(e, "document 0: metadata.name: missing");
        let e = versions("metadata: {name: x}\n", "d")
            .err()
            .map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("document 0: kind: missing"));
    }
}
