//! Build IDs and versioned Deployment names, exactly as TWC computes them, so a
//! WorkerDeployment TWC ran keeps its versions here.
//!
//! A build ID is `<image prefix>-<hash>`. The prefix is the first container's image tag, else
//! its digest's hex, else its repository path (Go's `reference.Parse`; the raw image when that
//! fails), at most 58 bytes. The hash input is the bytes of Go's `encoding/json` of the
//! `corev1.PodTemplateSpec` ([`go_json`], from `twc-gocompat`): Go's field order and omission
//! rules, not a sorted JSON. The hash is FNV-1a (32 bit) of those bytes, modulo 10000, as 4
//! decimal digits, each mapped into the alphabet `bcdfghjklmnpqrstvwxz2456789` (no vowels, so
//! no words); without an image the build ID is the same modulus as 10 digits. The whole is
//! cleaned to `[a-zA-Z0-9-._]`. Golden tests pin the results against TWC's own output for 30
//! templates, so a dependency upgrade that changed serialization fails the build instead of
//! silently creating new versions of every worker.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use sha2::{Digest, Sha256};
pub use twc_gocompat::GoJsonError;

const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Longest build ID (a label value and Temporal's limit).
pub const MAX_BUILD_ID: usize = 63;
/// Longest versioned Deployment name, so pod names stay within 63 characters.
pub const MAX_DEPLOYMENT_NAME: usize = 47;

/// The bytes TWC hashes: Go's `encoding/json` of the template. Fails only for a template Go
/// could not decode (a malformed quantity, a wrong JSON type), which
/// `WorkerDeploymentSpec::validate` refuses (`InvalidSpec`) before anything is planned.
pub fn go_json(template: &PodTemplateSpec) -> Result<String, GoJsonError> {
    let value = serde_json::to_value(template).map_err(|e| GoJsonError {
        path: String::new(),
        message: e.to_string(),
    })?;
    twc_gocompat::pod_template_spec(&value)
}

/// [`go_json`] for hashing. A template it refuses is never planned (see [`go_json`]); its
/// hash input is then the error itself, which no valid template has.
pub(super) fn hash_input(template: &PodTemplateSpec) -> String {
    go_json(template).unwrap_or_else(|e| format!("invalid template: {e}"))
}

fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// The 4-character template hash.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    template_hash_with(template, 0)
}

/// [`template_hash`] with a collision count: when not 0, its decimal digits are hashed after
/// the JSON (0 leaves the hash as TWC computes it).
pub fn template_hash_with(template: &PodTemplateSpec, collision_count: u32) -> String {
    hash_digits(template, collision_count, 4)
}

/// The template's hash modulo 10000 in `width` digits, safe-encoded.
fn hash_digits(template: &PodTemplateSpec, collision_count: u32, width: usize) -> String {
    let mut json = hash_input(template);
    if collision_count > 0 {
        json.push_str(&collision_count.to_string());
    }
    let sum = fnv1a32(json.as_bytes());
    safe_encode(&format!("{:0width$}", sum % 10_000))
}

/// The hex sha256 of the template's Go JSON (the `pod-template-spec-hash` annotation, TWC's).
pub fn template_digest(template: &PodTemplateSpec) -> String {
    hex(&Sha256::digest(hash_input(template).as_bytes()))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Replaces runs of characters outside `[a-zA-Z0-9-._]` with `-` and trims `-._` at both ends.
fn clean(s: &str) -> String {
    let mut out = String::new();
    let mut in_bad = false;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
            out.push(c);
            in_bad = false;
        } else if !in_bad {
            out.push('-');
            in_bad = true;
        }
    }
    out.trim_matches(|c| matches!(c, '-' | '.' | '_'))
        .to_string()
}

pub(super) fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The image part a build ID starts with: the tag, else the digest hex, else the repository
/// path, else the raw image; cut to `max` bytes as Go cuts a string (a character cut in two is
/// no letter, and cleaning makes it `-`).
fn image_prefix(image: &str, max: usize) -> String {
    let prefix = twc_gocompat::parse_reference(image).prefix(image);
    if prefix.len() <= max {
        return prefix.to_string();
    }
    let mut end = max;
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = prefix[..end].to_string();
    if end < max {
        cut.push('\u{fffd}');
    }
    cut
}

/// The build ID of a template, or the cleaned custom build ID if one is set.
pub fn build_id(template: &PodTemplateSpec, custom: Option<&str>) -> String {
    build_id_with(template, custom, 0)
}

/// [`build_id`] with a collision count (see [`template_hash_with`]); a custom build ID does
/// not change with it.
pub fn build_id_with(
    template: &PodTemplateSpec,
    custom: Option<&str>,
    collision_count: u32,
) -> String {
    if let Some(custom) = custom_build_id(custom) {
        return custom;
    }
    let image = first_image(template);
    if image.is_empty() {
        return hash_digits(template, collision_count, 10);
    }
    prefixed(&image, &template_hash_with(template, collision_count))
}

/// A custom build ID as it is used: cleaned and cut to [`MAX_BUILD_ID`]; None when unset or
/// empty once cleaned.
pub(super) fn custom_build_id(custom: Option<&str>) -> Option<String> {
    let c = clean(custom?);
    (!c.is_empty()).then(|| truncate(&c, MAX_BUILD_ID).to_string())
}

/// The image of a template's first container ("" when it has none).
pub(super) fn first_image(template: &PodTemplateSpec) -> String {
    template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// `<image prefix>-<hash>`, cleaned and cut to [`MAX_BUILD_ID`].
pub(super) fn prefixed(image: &str, hash: &str) -> String {
    let suffix = format!("-{hash}");
    let id = clean(&format!(
        "{}{suffix}",
        image_prefix(image, MAX_BUILD_ID - suffix.len())
    ));
    truncate(&id, MAX_BUILD_ID).to_string()
}

/// The versioned Deployment's name: `<worker deployment>-<build ID>`, or, if that is longer
/// than 47 characters, `<first 10>-<first 10>-<10 hex of sha256>`; lowercased, with characters
/// outside `[a-z0-9-]` replaced.
pub fn deployment_name(worker_deployment: &str, build_id: &str) -> String {
    let full = format!("{worker_deployment}-{build_id}");
    let name = if full.len() <= MAX_DEPLOYMENT_NAME {
        full
    } else {
        let digest = hex(&Sha256::digest(full.as_bytes()));
        format!(
            "{}-{}-{}",
            truncate(worker_deployment, 10).trim_end_matches('-'),
            truncate(build_id, 10).trim_end_matches(['-', '.', '_']),
            &digest[..10]
        )
    };
    let mut out = String::new();
    for c in name.to_ascii_lowercase().chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// The Temporal worker deployment name: `<k8s namespace>/<WorkerDeployment name>`.
pub fn temporal_deployment_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(v: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn worker(image: &str) -> PodTemplateSpec {
        template(json!({"spec": {"containers": [{"name": "worker", "image": image}]}}))
    }

    /// TWC's own results for 30 WorkerDeployments (`shared/reference/twc-build-ids.json`,
    /// computed by TWC's functions): if one of these changed, every worker TWC ran would get
    /// a new version on takeover.
    #[test]
    fn build_ids_are_twcs() {
        let cases: serde_json::Value = serde_json::from_str(include_str!(
            "../../../gocompat/tests/data/twc-build-ids.json"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let cases = cases["cases"].as_array().cloned().unwrap_or_default();
        assert_eq!(cases.len(), 30);
        for case in cases {
            let name = case["name"].as_str().unwrap_or_default();
            let wd = &case["workerDeployment"];
            let tpl = template(wd["spec"]["template"].clone());
            let custom = wd["spec"]["workerOptions"]["unsafeCustomBuildID"].as_str();
            let build = build_id(&tpl, custom);
            assert_eq!(
                build,
                case["buildID"].as_str().unwrap_or_default(),
                "{name}"
            );
            assert_eq!(
                go_json(&tpl).ok().as_deref(),
                case["templateGoJSON"].as_str(),
                "{name}"
            );
            let wd_name = wd["metadata"]["name"].as_str().unwrap_or_default();
            let ns = wd["metadata"]["namespace"].as_str().unwrap_or_default();
            assert_eq!(
                deployment_name(wd_name, &build),
                case["versionedDeploymentName"].as_str().unwrap_or_default(),
                "{name}"
            );
            assert_eq!(
                temporal_deployment_name(ns, wd_name),
                case["temporalWorkerDeploymentName"]
                    .as_str()
                    .unwrap_or_default(),
                "{name}"
            );
            let annotations = &case["renderedDeployments"]["plain"]["spec"]["template"]["metadata"]
                ["annotations"];
            assert_eq!(
                Some(template_digest(&tpl).as_str()),
                annotations["temporal.io/pod-template-spec-hash"].as_str(),
                "{name}"
            );
        }
    }

    #[test]
    fn a_template_go_cannot_decode_is_an_error_naming_the_field() {
        let tpl = template(json!({"spec": {"containers": [{"name": "w", "image": "w:1",
            "resources": {"limits": {"cpu": "one"}}}]}}));
        let e = go_json(&tpl)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("spec.containers[0].resources.limits.cpu"),
            "{e}"
        );
    }

    #[test]
    fn the_hash_does_not_depend_on_key_order() {
        let a = template(json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"containers": [{"name": "w", "image": "w:1"}]}}));
        let b = template(
            json!({"spec": {"containers": [{"image": "w:1", "name": "w"}]},
            "metadata": {"labels": {"b": "2", "a": "1"}}}),
        );
        assert_eq!(build_id(&a, None), build_id(&b, None));
    }

    #[test]
    fn any_template_change_changes_the_build_id() {
        let a = worker("w:1");
        let mut b = a.clone();
        if let Some(spec) = b.spec.as_mut() {
            spec.containers[0].args = Some(vec!["--fast".into()]);
        }
        assert_ne!(build_id(&a, None), build_id(&b, None));
        assert!(build_id(&b, None).starts_with("1-"));
    }

    #[test]
    fn custom_build_ids_are_cleaned_and_win() {
        assert_eq!(
            build_id(&worker("w:1"), Some("release 2026/11")),
            "release-2026-11"
        );
        assert_eq!(
            build_id(&worker("w:1"), Some("--")),
            build_id(&worker("w:1"), None)
        );
        let long = "a".repeat(80);
        assert_eq!(build_id(&worker("w:1"), Some(&long)).len(), 63);
    }

    #[test]
    fn long_names_are_shortened_to_47() {
        assert_eq!(deployment_name("hello", "v1-d975"), "hello-v1-d975");
        let name = deployment_name(&"w".repeat(40), "release-2026.11.30_1");
        assert!(name.len() <= MAX_DEPLOYMENT_NAME, "{name}");
        assert!(name.starts_with("wwwwwwwwww-release-20-"), "{name}");
        assert_eq!(deployment_name("a", "Build.ID_1"), "a-build-id-1");
    }

    #[test]
    fn prefixes_come_from_tag_digest_or_repository() {
        assert_eq!(image_prefix("r:5000/a/b:tag", 58), "tag");
        assert_eq!(image_prefix("r:5000/a/b", 58), "a/b");
        let digest = format!("b@sha256:{}", "ab".repeat(32));
        assert_eq!(image_prefix(&digest, 58), "ab".repeat(29));
        assert_eq!(image_prefix(&format!("b:{}", "t".repeat(70)), 58).len(), 58);
        // Not a reference (upper case in the path): the raw string, cut by bytes as Go does;
        // the character cut in two becomes `-` when cleaned.
        let raw = format!("x/Wörker{}", "é".repeat(30));
        let cut = image_prefix(&raw, 10);
        assert_eq!(cut, "x/Wörker\u{fffd}");
        assert_eq!(clean(&format!("{cut}-hash")), "x-W-rker--hash");
    }
}
