//! Build IDs and versioned Deployment names.
//!
//! A build ID is `<image prefix>-<hash>`: the image tag (or digest, or repository) of the first
//! container, at most 58 characters, then a 4-character hash of the pod template. The hash
//! input is the template's **canonical JSON**: absent fields omitted, object keys sorted
//! bytewise at every level, no whitespace; the hash is FNV-1a (32 bit) of those bytes, modulo
//! 10000, as 4 decimal digits, each mapped into the alphabet `bcdfghjklmnpqrstvwxz2456789`
//! (no vowels, so no words). Golden tests pin the results for fixed templates, so a dependency
//! upgrade that changed serialization would fail the build instead of silently creating new
//! versions of every worker.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;
use sha2::{Digest, Sha256};

const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Longest build ID (a label value and Temporal's limit).
pub const MAX_BUILD_ID: usize = 63;
/// Longest image prefix in a build ID.
const MAX_PREFIX: usize = 58;
/// Longest versioned Deployment name, so pod names stay within 63 characters.
pub const MAX_DEPLOYMENT_NAME: usize = 47;

/// The canonical JSON of any serializable value (see the module documentation).
pub fn canonical_json<T: serde::Serialize>(value: &T) -> String {
    let v = serde_json::to_value(value).unwrap_or(Value::Null);
    let mut out = String::new();
    write_canonical(&v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                if let Some(child) = map.get(*k) {
                    write_canonical(child, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
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
    let mut json = canonical_json(template);
    if collision_count > 0 {
        json.push_str(&collision_count.to_string());
    }
    let sum = fnv1a32(json.as_bytes());
    safe_encode(&format!("{:04}", sum % 10_000))
}

/// The hex sha256 of the template's canonical JSON (the `pod-template-spec-hash` annotation).
pub fn template_digest(template: &PodTemplateSpec) -> String {
    hex(&Sha256::digest(canonical_json(template).as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
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

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The image part a build ID starts with: the tag, else the digest hex, else the repository.
fn image_prefix(image: &str) -> String {
    if let Some((_, digest)) = image.split_once('@') {
        let hex = digest.split_once(':').map(|(_, h)| h).unwrap_or(digest);
        return truncate(hex, MAX_PREFIX).to_string();
    }
    let last_slash = image.rfind('/').map(|i| i + 1).unwrap_or(0);
    match image[last_slash..].rfind(':') {
        Some(i) => truncate(&image[last_slash + i + 1..], MAX_PREFIX).to_string(),
        None => truncate(image, MAX_PREFIX).to_string(),
    }
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
    if let Some(custom) = custom {
        let c = clean(custom);
        if !c.is_empty() {
            return truncate(&c, MAX_BUILD_ID).to_string();
        }
    }
    let hash = template_hash_with(template, collision_count);
    let image = template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let id = if image.is_empty() {
        hash
    } else {
        clean(&format!("{}-{hash}", image_prefix(&image)))
    };
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

    /// Golden values: if one of these changes, every existing worker would get a new version
    /// on upgrade. Change them only on purpose, with a migration note.
    #[test]
    fn build_ids_are_pinned() {
        assert_eq!(build_id(&worker("example.com/worker:v1"), None), "v1-d975");
        assert_eq!(build_id(&worker("example.com/worker:v2"), None), "v2-476d");
        assert_eq!(
            build_id(
                &worker("registry:5000/team/worker@sha256:4f1d5e1bd6cfb2b6"),
                None
            ),
            "4f1d5e1bd6cfb2b6-dbdc"
        );
        assert_eq!(build_id(&worker("worker"), None), "worker-c658");
        let with_env = template(json!({
            "metadata": {"labels": {"app": "w", "team": "t"}},
            "spec": {"containers": [{"name": "worker", "image": "w:1.2.3",
                "env": [{"name": "A", "value": "1"}]}]}
        }));
        assert_eq!(build_id(&with_env, None), "1.2.3-6989");
        // The canonical form itself, spelled out.
        assert_eq!(
            canonical_json(&with_env),
            r#"{"metadata":{"labels":{"app":"w","team":"t"}},"spec":{"containers":[{"env":[{"name":"A","value":"1"}],"image":"w:1.2.3","name":"worker"}]}}"#
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
        assert_eq!(image_prefix("r:5000/a/b:tag"), "tag");
        assert_eq!(image_prefix("r:5000/a/b"), "r:5000/a/b");
        assert_eq!(image_prefix("b@sha256:abcd"), "abcd");
        assert_eq!(image_prefix(&format!("b:{}", "t".repeat(70))).len(), 58);
    }
}
