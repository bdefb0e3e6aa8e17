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

/// Keeps of a versioned Deployment's pod template only what [`observe`] reads (its
/// annotations and the `TEMPORAL_NAMESPACE` of each container), before the watch cache stores
/// it: a template is most of a Deployment. What needs the whole template (moving an older
/// version to a new connection) reads the Deployment from the apiserver.
pub fn trim(d: &mut Deployment) {
    let Some(pod) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()) else {
        return;
    };
    let containers = std::mem::take(&mut pod.containers)
        .into_iter()
        .map(|c| k8s_openapi::api::core::v1::Container {
            env: c.env.map(|env| {
                env.into_iter()
                    .filter(|e| e.name == "TEMPORAL_NAMESPACE")
                    .collect()
            }),
            name: c.name,
            ..Default::default()
        })
        .collect();
    *pod = k8s_openapi::api::core::v1::PodSpec {
        containers,
        ..Default::default()
    };
}

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
    let available = |value: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "Available" && c.status == value)
            })
            .map(|c| {
                c.last_transition_time
                    .as_ref()
                    .map(|t| SystemTime::from(t.0))
                    .unwrap_or(SystemTime::UNIX_EPOCH)
            })
    };
    let available_since = available("True");
    let unavailable_since = available("False");
    Some(ObservedDeployment {
        name: d.name_any(),
        build_id,
        spec_replicas: spec.and_then(|s| s.replicas),
        replicas: status.and_then(|s| s.replicas).unwrap_or(0),
        ready_replicas: status.and_then(|s| s.ready_replicas).unwrap_or(0),
        available_since,
        unavailable_since,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_trimmed_deployment_is_observed_as_the_whole_one() {
        let wd: WorkerDeployment = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": "w", "namespace": "ns", "uid": "uid-1"},
            "spec": {
                "template": {"spec": {
                    "containers": [{"name": "worker", "image": "w:v1",
                        "env": [{"name": "A", "value": "1"}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "volumes": [{"name": "data", "emptyDir": {}}]
                }},
                "rollout": {"strategy": "AllAtOnce"},
                "sunset": {},
                "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "tns"}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let conn = twc_api::ConnectionSpec {
            host_port: "h:7233".into(),
            ..Default::default()
        };
        let whole = crate::plan::deployment::versioned_deployment(&wd, "b1", &conn);
        let mut trimmed = whole.clone();
        trim(&mut trimmed);
        let size = |d: &Deployment| serde_json::to_vec(d).map(|v| v.len()).unwrap_or(0);
        assert!(
            size(&trimmed) < size(&whole),
            "{} of {}",
            size(&trimmed),
            size(&whole)
        );
        let pod = trimmed.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        assert!(pod.is_some_and(|p| p.volumes.is_none() && p.containers[0].image.is_none()));
        let seen = observe(&trimmed);
        assert_eq!(seen, observe(&whole));
        let seen = seen.unwrap_or_else(|| panic!("not observed"));
        assert_eq!(seen.temporal_namespace.as_deref(), Some("tns"));
        assert!(seen.connection_hash.is_some() && seen.template_digest.is_some());
    }
}
