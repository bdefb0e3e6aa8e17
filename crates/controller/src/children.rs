//! The versioned Deployments a WorkerDeployment owns, read from the watch cache into the
//! planner's view. Shared by the WorkerDeployment and WorkerResourceTemplate reconcilers; no
//! client calls.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use twc_api::WorkerDeployment;

use crate::plan::{ObservedDeployment, deployment::is_owned_by};
use crate::scoped::Scoped;

/// The versioned Deployments `wd` controls (not being deleted), by build ID.
pub fn owned(
    wd: &WorkerDeployment,
    store: &Scoped<Deployment>,
) -> BTreeMap<String, ObservedDeployment> {
    owned_in(
        wd,
        store
            .in_namespace(&wd.namespace().unwrap_or_default())
            .iter()
            .map(AsRef::as_ref),
    )
}

/// [`owned`], from any list of Deployments (those of `wd`'s namespace are picked).
pub fn owned_in<'a>(
    wd: &WorkerDeployment,
    deployments: impl IntoIterator<Item = &'a Deployment>,
) -> BTreeMap<String, ObservedDeployment> {
    let ns = wd.namespace();
    deployments
        .into_iter()
        .filter(|d| d.namespace() == ns)
        .filter(|d| is_owned_by(d, wd))
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .filter_map(observe)
        .map(|d| (d.build_id.clone(), d))
        .collect()
}

/// The observed view of an owned Deployment.
pub fn observe(d: &Deployment) -> Option<ObservedDeployment> {
    let build_id = d.labels().get(twc_api::labels::BUILD_ID)?.clone();
    let spec = d.spec.as_ref();
    let status = d.status.as_ref();
    let annotations = spec
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    let available_since = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "Available" && c.status == "True")
        })
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map(|t| SystemTime::from(t.0))
                .unwrap_or(SystemTime::UNIX_EPOCH)
        });
    Some(ObservedDeployment {
        name: d.name_any(),
        build_id,
        spec_replicas: spec.and_then(|s| s.replicas),
        replicas: status.and_then(|s| s.replicas).unwrap_or(0),
        ready_replicas: status.and_then(|s| s.ready_replicas).unwrap_or(0),
        available_since,
        connection_hash: annotations
            .get(twc_api::labels::CONNECTION_SPEC_HASH)
            .cloned(),
        template_digest: annotations
            .get(twc_api::labels::POD_TEMPLATE_SPEC_HASH)
            .cloned(),
        temporal_namespace: spec.and_then(|s| injected_namespace(&s.template)),
    })
}

/// The Temporal namespace the workers of `template` poll: the `TEMPORAL_NAMESPACE` the
/// controller injected (into every container; the first that has it is read). None when no
/// container has it (not rendered by a controller).
fn injected_namespace(template: &k8s_openapi::api::core::v1::PodTemplateSpec) -> Option<String> {
    template
        .spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == "TEMPORAL_NAMESPACE")
        .and_then(|e| e.value.clone())
}
