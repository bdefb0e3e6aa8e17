//! Build IDs, Deployment names and selector labels of a version with worker groups, exactly as
//! upstream's worker-groups proposal computes them (TWC #330, `internal/k8s/deployments.go` at
//! de55e322, not released): a WorkerDeployment written for upstream's groups keeps its
//! versions here, and one without groups keeps today's ([`super::build_id`]).
//!
//! The build ID is `<image prefix>-<hash>`: the hash is the first 10 hex characters of the
//! SHA-256 of Go's `encoding/json` of `[{"name", "template"}]` over the groups sorted by name;
//! the prefix is [`super::build_id`]'s, of the first container of the first group by name; the
//! whole cleaned and cut to 63 characters. Replicas, strategy and order do not change it; a
//! template change, a rename, an added or removed group do. A group's Deployment is
//! `<wd>-<group>-<build ID>` made DNS-safe and cut to 38 characters, then `-` and 8 hex
//! characters of the SHA-256 of `<wd>/<group>/<build ID>`, so names never collide. A golden
//! test pins all of it to upstream's own results for 16 WorkerDeployments.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use sha2::{Digest, Sha256};

use super::build_id::{custom_build_id, first_image, hash_input, hex, prefixed, truncate};

pub use twc_api::DEFAULT_GROUP;
pub use twc_api::labels::WORKER_GROUP;
/// How much of `<wd>-<group>-<build ID>` a group's Deployment name keeps before its hash.
const NAME_PREFIX: usize = 38;

/// The build ID of a version made of `groups` (name, pod template; any order), or the cleaned
/// custom build ID if one is set. `collision_count` (not upstream's: 0 leaves its result) is
/// mixed into the hash when a different template set already has the ID.
pub fn build_id(
    groups: &[(&str, &PodTemplateSpec)],
    custom: Option<&str>,
    collision_count: u32,
) -> String {
    if let Some(custom) = custom_build_id(custom) {
        return custom;
    }
    let mut sorted = groups.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut json = String::from("[");
    for (i, (name, template)) in sorted.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        let name = serde_json::to_string(name).unwrap_or_default();
        json.push_str(&format!(
            "{{\"name\":{name},\"template\":{}}}",
            hash_input(template)
        ));
    }
    json.push(']');
    if collision_count > 0 {
        json.push_str(&collision_count.to_string());
    }
    let hash = &hex(&Sha256::digest(json.as_bytes()))[..10];
    let image = sorted
        .first()
        .map(|(_, t)| first_image(t))
        .unwrap_or_default();
    if image.is_empty() {
        return hash.to_string();
    }
    prefixed(&image, hash)
}

/// The name of group `group`'s Deployment in version `build_id` of WorkerDeployment `wd`.
pub fn deployment_name(wd: &str, group: &str, build_id: &str) -> String {
    let safe: String = format!("{wd}-{group}-{build_id}")
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let digest = hex(&Sha256::digest(
        format!("{wd}/{group}/{build_id}").as_bytes(),
    ));
    format!(
        "{}-{}",
        truncate(&safe, NAME_PREFIX).trim_end_matches('-'),
        &digest[..8]
    )
}

/// The selector (and pod) labels of group `group`'s Deployment: each group's own, so the
/// selectors of one version never overlap.
pub fn selector_labels(wd: &str, group: &str, build_id: &str) -> BTreeMap<String, String> {
    [
        (twc_api::labels::DEPLOYMENT_NAME, wd),
        (twc_api::labels::BUILD_ID, build_id),
        (WORKER_GROUP, group),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::build_id;
    use serde_json::{Value, json};

    fn template(v: &Value) -> PodTemplateSpec {
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
    }

    /// Upstream's own results for 16 WorkerDeployments (`twc-group-build-ids.json`, computed
    /// by its functions at de55e322): build IDs, group Deployment names, selector labels and
    /// the pod template digest; without groups, today's build ID and name stay.
    #[test]
    fn group_build_ids_and_names_are_upstreams() {
        let golden: Value = serde_json::from_str(include_str!(
            "../../../gocompat/tests/data/twc-group-build-ids.json"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let cases = golden["cases"].as_array().cloned().unwrap_or_default();
        assert_eq!(cases.len(), 16);
        for case in cases {
            let input = &case["input"];
            let name = input["name"].as_str().unwrap_or_default();
            let wd = input["wdName"].as_str().unwrap_or_default();
            let spec = &input["spec"];
            let custom = spec["workerOptions"]["unsafeCustomBuildID"].as_str();
            let expected = case["buildID"].as_str().unwrap_or_default();
            let groups: Vec<(String, PodTemplateSpec)> = spec["workerGroups"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|g| {
                    let n = g["name"].as_str().unwrap_or_default().to_string();
                    (n, template(&g["deployment"]["template"]))
                })
                .collect();
            if groups.is_empty() {
                assert_eq!(case["hasWorkerGroups"], false, "{name}");
                let t = spec
                    .get("template")
                    .unwrap_or(&spec["deployment"]["template"]);
                let t = template(t);
                assert_eq!(build_id::build_id(&t, custom), expected, "{name}");
                let only = &case["groups"][0];
                assert_eq!(only["group"], DEFAULT_GROUP, "{name}");
                assert_eq!(
                    build_id::deployment_name(wd, expected),
                    only["deploymentName"].as_str().unwrap_or_default(),
                    "{name}"
                );
                continue;
            }
            let refs: Vec<(&str, &PodTemplateSpec)> =
                groups.iter().map(|(n, t)| (n.as_str(), t)).collect();
            assert_eq!(build_id(&refs, custom, 0), expected, "{name}");
            for g in case["groups"].as_array().into_iter().flatten() {
                let group = g["group"].as_str().unwrap_or_default();
                assert_eq!(
                    deployment_name(wd, group, expected),
                    g["deploymentName"].as_str().unwrap_or_default(),
                    "{name} {group}"
                );
                let labels =
                    serde_json::to_value(selector_labels(wd, group, expected)).unwrap_or_default();
                assert_eq!(labels, g["selectorLabels"], "{name} {group}");
                let (_, t) = refs
                    .iter()
                    .find(|(n, _)| *n == group)
                    .copied()
                    .unwrap_or_else(|| panic!("{name}: no group {group} in the input"));
                assert_eq!(
                    Some(build_id::template_digest(t).as_str()),
                    g["renderedPodTemplateSpecHashAnnotation"].as_str(),
                    "{name} {group}"
                );
            }
        }
    }

    fn worker(image: &str) -> PodTemplateSpec {
        template(&json!({"spec": {"containers": [{"name": "worker", "image": image}]}}))
    }

    #[test]
    fn order_does_not_matter_a_rename_or_a_collision_does() {
        let (a, b) = (worker("acme/w:1"), worker("acme/w:2"));
        let id = build_id(&[("x", &a), ("y", &b)], None, 0);
        assert_eq!(build_id(&[("y", &b), ("x", &a)], None, 0), id);
        assert!(
            id.starts_with("1-"),
            "the first group by name gives the prefix: {id}"
        );
        assert_ne!(build_id(&[("x", &a), ("z", &b)], None, 0), id);
        assert_ne!(build_id(&[("x", &a), ("y", &b)], None, 1), id);
        assert_ne!(build_id(&[("x", &a)], None, 0), id);
    }
}
