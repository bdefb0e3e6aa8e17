//! What a test or a benchmark reads off an `apps/v1` Deployment as the apiserver has it.

use k8s_openapi::api::apps::v1::Deployment;

/// Whether `d` runs its current pod template everywhere, as the Deployment controller reports
/// it: it has seen the latest spec, every pod is updated and available, and no pod of an older
/// template is left. (The controller judges its restart pace by the same rule, on its cache.)
pub fn rolled_out(d: &Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = d.status.clone().unwrap_or_default();
    let updated = status.updated_replicas.unwrap_or(0);
    let seen = match (d.metadata.generation, status.observed_generation) {
        (Some(g), Some(o)) => o >= g,
        (Some(_), None) => false,
        (None, _) => true,
    };
    seen && updated >= want
        && status.replicas.unwrap_or(0) <= updated
        && status.available_replicas.unwrap_or(0) >= want
}

/// Annotation `key` of `d` itself and of its pod template. (The controller's credentials
/// digest: what the pods started with, and what a restart onto new content set on the
/// template; a restart is written when the two agree on a new digest.)
pub fn annotation_and_template(d: &Deployment, key: &str) -> (Option<String>, Option<String>) {
    let own = d
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned();
    let template = d
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(key))
        .cloned();
    (own, template)
}

/// The env of `d`'s first container (the worker), as its pod template gives it.
pub fn worker_env(d: &Deployment) -> &[k8s_openapi::api::core::v1::EnvVar] {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.env.as_deref())
        .unwrap_or_default()
}

/// The value of env var `name` in `d`'s first container (None when unset or from a source).
pub fn worker_env_value(d: &Deployment, name: &str) -> Option<String> {
    worker_env(d)
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}
