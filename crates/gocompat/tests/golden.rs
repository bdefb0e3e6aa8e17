//! TWC's own outputs (tests/data/twc-build-ids.json, made by TWC's Go code): the template bytes
//! Go hashes, from the WorkerDeployment JSON directly and after a k8s-openapi round trip.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;
use twc_gocompat::{ImageRef, parse_reference, pod_template_spec};

fn cases() -> Vec<Value> {
    let data: Value =
        serde_json::from_str(include_str!("data/twc-build-ids.json")).expect("valid JSON");
    data["cases"].as_array().expect("cases").clone()
}

#[test]
fn template_bytes_match_go() {
    let cases = cases();
    assert_eq!(cases.len(), 30);
    for case in &cases {
        let name = case["name"].as_str().expect("name");
        let template = &case["workerDeployment"]["spec"]["template"];
        let want = case["templateGoJSON"].as_str().expect("templateGoJSON");
        assert_eq!(
            pod_template_spec(template).as_deref(),
            Ok(want),
            "case {name}"
        );

        let typed: PodTemplateSpec =
            serde_json::from_value(template.clone()).expect("k8s-openapi reads it");
        let again = serde_json::to_value(&typed).expect("k8s-openapi writes it");
        assert_eq!(
            pod_template_spec(&again).as_deref(),
            Ok(want),
            "case {name} via k8s-openapi"
        );
    }
}

#[test]
fn image_prefixes_match_go() {
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        let spec = &case["workerDeployment"]["spec"];
        let image = spec["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or("");
        let build_id = case["buildID"].as_str().expect("buildID");
        if image.is_empty() || spec["workerOptions"].get("unsafeCustomBuildID").is_some() {
            continue;
        }
        let prefix = parse_reference(image).prefix(image);
        assert_ne!(parse_reference(image), ImageRef::Invalid, "case {name}");
        // TWC keeps at most 58 characters of the prefix, then "-" and the 4-character hash.
        let cut: String = prefix.chars().take(58).collect();
        assert!(
            build_id.starts_with(&format!("{cut}-")),
            "case {name}: {build_id} vs {cut}"
        );
    }
}
