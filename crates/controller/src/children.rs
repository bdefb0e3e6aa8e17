//! The versioned Deployments a WorkerDeployment owns, read from the watch cache into the
//! planner's view. Shared by the WorkerDeployment and WorkerResourceTemplate reconcilers; no
//! client calls.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use twc_api::WorkerDeployment;

use crate::plan::{ObservedDeployment, deployment::is_owned_by};
use crate::scoped::Scoped;

/// A versioned Deployment as the watch cache keeps it: its metadata and the planner's view of
/// it ([`ObservedDeployment`]), parsed straight from the watch's JSON (the rest is skipped,
/// never built). A whole `Deployment` is a few KiB in memory even for a small pod template,
/// most of it empty fields; thousands of them were most of the controller's memory. What needs
/// the whole object (moving an older version to a new connection) reads it from the apiserver.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(from = "wire::Deployment")]
pub struct CachedDeployment {
    pub metadata: ObjectMeta,
    /// What the planner reads of it (`build_id` empty when it has no build ID label).
    pub view: ObservedDeployment,
}

impl Resource for CachedDeployment {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Deployment".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "apps".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "deployments".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The shape of the JSON [`CachedDeployment`] is read from: only the fields it keeps (serde
/// skips every other).
mod wire {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub struct Deployment {
        #[serde(default)]
        pub metadata: ObjectMeta,
        pub spec: Option<Spec>,
        pub status: Option<Status>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Spec {
        pub replicas: Option<i32>,
        pub strategy: Option<k8s_openapi::api::apps::v1::DeploymentStrategy>,
        pub min_ready_seconds: Option<i32>,
        pub progress_deadline_seconds: Option<i32>,
        pub revision_history_limit: Option<i32>,
        #[serde(default)]
        pub template: Template,
    }

    #[derive(Default, Deserialize)]
    pub struct Template {
        pub metadata: Option<Meta>,
        pub spec: Option<Pod>,
    }

    #[derive(Deserialize)]
    pub struct Meta {
        pub annotations: Option<BTreeMap<String, String>>,
    }

    #[derive(Deserialize)]
    pub struct Pod {
        #[serde(default)]
        pub containers: Vec<Container>,
        #[serde(default)]
        pub volumes: Vec<Volume>,
    }

    #[derive(Deserialize)]
    pub struct Container {
        pub env: Option<Vec<Env>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Env {
        pub name: String,
        pub value: Option<String>,
        pub value_from: Option<EnvFrom>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct EnvFrom {
        pub secret_key_ref: Option<SecretKey>,
    }

    #[derive(Deserialize)]
    pub struct SecretKey {
        pub name: Option<String>,
        #[serde(default)]
        pub key: String,
    }

    #[derive(Deserialize)]
    pub struct Volume {
        pub name: String,
        pub secret: Option<SecretVolume>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct SecretVolume {
        pub secret_name: Option<String>,
    }

    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Status {
        pub replicas: Option<i32>,
        pub ready_replicas: Option<i32>,
        pub available_replicas: Option<i32>,
        pub updated_replicas: Option<i32>,
        pub observed_generation: Option<i64>,
        pub conditions: Option<Vec<Condition>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Condition {
        #[serde(rename = "type")]
        pub type_: String,
        pub status: String,
        pub last_transition_time: Option<Time>,
    }
}

impl From<wire::Deployment> for CachedDeployment {
    fn from(mut d: wire::Deployment) -> Self {
        let spec_replicas = d.spec.as_ref().and_then(|s| s.replicas);
        let strategy = d.spec.as_mut().and_then(|s| s.strategy.take());
        let settings = |f: fn(&wire::Spec) -> Option<i32>| d.spec.as_ref().and_then(f);
        let min_ready_seconds = settings(|s| s.min_ready_seconds);
        let progress_deadline_seconds = settings(|s| s.progress_deadline_seconds);
        let revision_history_limit = settings(|s| s.revision_history_limit);
        let template = d.spec.map(|s| s.template).unwrap_or_default();
        let mut annotations = template
            .metadata
            .and_then(|m| m.annotations)
            .unwrap_or_default();
        let pod = template.spec;
        let env = || {
            pod.iter()
                .flat_map(|p| &p.containers)
                .flat_map(|c| c.env.iter().flatten())
        };
        let value_of = |name: &str| env().find(|e| e.name == name).and_then(|e| e.value.clone());
        let temporal_namespace = value_of("TEMPORAL_NAMESPACE");
        let temporal_address = value_of("TEMPORAL_ADDRESS");
        let tls_server_name = value_of("TEMPORAL_TLS_SERVER_NAME");
        let api_key = env()
            .find(|e| e.name == "TEMPORAL_API_KEY")
            .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .map(|r| (r.name.as_deref().unwrap_or_default(), r.key.as_str()));
        let volumes = pod.iter().flat_map(|p| &p.volumes).map(|v| {
            let secret = v.secret.as_ref().and_then(|s| s.secret_name.as_deref());
            (v.name.as_str(), secret)
        });
        let auth = crate::plan::deployment::pod_auth(volumes, api_key);
        let status = d.status.unwrap_or_default();
        let available = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Available");
        // A condition without a transition time counts from the epoch (long since).
        let since = |value: &str| {
            available.filter(|c| c.status == value).map(|c| {
                c.last_transition_time
                    .as_ref()
                    .map_or(SystemTime::UNIX_EPOCH, |t| SystemTime::from(t.0))
            })
        };
        let mut metadata = d.metadata;
        let mut take = |key: &str| metadata.annotations.as_mut().and_then(|a| a.remove(key));
        let credentials_digest = take(twc_api::labels::CREDENTIALS_DIGEST);
        let restarted_at = take(twc_api::labels::CREDENTIALS_RESTARTED_AT)
            .and_then(|t| crate::temporal::credentials::parse_rfc3339(&t));
        let credentials_not_after = take(twc_api::labels::CREDENTIALS_NOT_AFTER)
            .and_then(|t| crate::temporal::credentials::parse_rfc3339(&t));
        // Of the labels only the build ID is read; the rest (the template's, copied to each
        // version) were half of what this cache held.
        if let Some(labels) = metadata.labels.as_mut() {
            labels.retain(|k, _| {
                k == twc_api::labels::BUILD_ID || k == twc_api::labels::WORKER_GROUP
            });
        }
        let build_id = metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(twc_api::labels::BUILD_ID))
            .cloned()
            .unwrap_or_default();
        let group = group_of(metadata.labels.as_ref());
        let view = ObservedDeployment {
            name: metadata.name.clone().unwrap_or_default(),
            build_id,
            group,
            spec_replicas,
            replicas: status.replicas.unwrap_or(0),
            ready_replicas: status.ready_replicas.unwrap_or(0),
            available_replicas: status.available_replicas.unwrap_or(0),
            available_since: since("True"),
            unavailable_since: since("False"),
            connection_hash: annotations.remove(twc_api::labels::CONNECTION_SPEC_HASH),
            auth: Some(auth),
            template_digest: annotations.remove(twc_api::labels::POD_TEMPLATE_SPEC_HASH),
            credentials_digest,
            temporal_namespace,
            temporal_address,
            tls_server_name,
            generation: metadata.generation,
            observed_generation: status.observed_generation,
            updated_replicas: status.updated_replicas.unwrap_or(0),
            restarted_at,
            oldest_pod: None,
            credentials_not_after,
            strategy,
            min_ready_seconds,
            progress_deadline_seconds,
            revision_history_limit,
            // Filled from the metadata when observed (not kept twice in the cache).
            uid: None,
            resource_version: None,
            members: Vec::new(),
        };
        Self { metadata, view }
    }
}

/// The worker group of a Deployment with `labels` (`default` without the group label).
fn group_of(labels: Option<&BTreeMap<String, String>>) -> String {
    labels
        .and_then(|l| l.get(twc_api::labels::WORKER_GROUP))
        .cloned()
        .unwrap_or_else(|| twc_api::DEFAULT_GROUP.to_string())
}

/// Every versioned Deployment `wd` controls (not being deleted), each worker group's apart.
pub fn owned_each(
    wd: &WorkerDeployment,
    store: &Scoped<CachedDeployment>,
) -> Vec<ObservedDeployment> {
    let here = store.in_namespace(&wd.namespace().unwrap_or_default());
    owned_each_in(wd, here.iter().map(AsRef::as_ref)).collect()
}

/// The versioned Deployments `wd` controls (not being deleted), by build ID.
pub fn owned(
    wd: &WorkerDeployment,
    store: &Scoped<CachedDeployment>,
) -> BTreeMap<String, ObservedDeployment> {
    owned_in(
        wd,
        store
            .in_namespace(&wd.namespace().unwrap_or_default())
            .iter()
            .map(AsRef::as_ref),
    )
}

/// [`owned`], from any list of cached Deployments (those of `wd`'s namespace are picked). A
/// version with worker groups is one entry, made of its groups' Deployments
/// ([`ObservedDeployment::version`]).
pub fn owned_in<'a>(
    wd: &WorkerDeployment,
    deployments: impl IntoIterator<Item = &'a CachedDeployment>,
) -> BTreeMap<String, ObservedDeployment> {
    let mut by_build: BTreeMap<String, Vec<ObservedDeployment>> = BTreeMap::new();
    for d in owned_each_in(wd, deployments) {
        by_build.entry(d.build_id.clone()).or_default().push(d);
    }
    by_build
        .into_iter()
        .map(|(build, members)| (build, ObservedDeployment::version(members)))
        .collect()
}

fn owned_each_in<'a>(
    wd: &WorkerDeployment,
    deployments: impl IntoIterator<Item = &'a CachedDeployment>,
) -> impl Iterator<Item = ObservedDeployment> {
    let ns = wd.namespace();
    deployments
        .into_iter()
        .filter(move |d| d.namespace() == ns)
        .filter(move |d| is_owned_by(*d, wd))
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .filter_map(observe)
}

/// The planner's view of an owned Deployment; None without a build ID label.
pub fn observe(d: &CachedDeployment) -> Option<ObservedDeployment> {
    (!d.view.build_id.is_empty()).then(|| ObservedDeployment {
        uid: d.metadata.uid.clone(),
        resource_version: d.metadata.resource_version.clone(),
        ..d.view.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    /// What the planner saw of a whole Deployment before the cache kept only part of it.
    fn observe_whole(d: &Deployment) -> Option<ObservedDeployment> {
        let status = d.status.as_ref();
        let since = |value: &str| {
            status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Available"))
                .filter(|c| c.status == value)
                .map(|c| {
                    c.last_transition_time
                        .as_ref()
                        .map(|t| SystemTime::from(t.0))
                        .unwrap_or(SystemTime::UNIX_EPOCH)
                })
        };
        let template = d.spec.as_ref().map(|s| &s.template);
        let annotation = |key: &str| {
            template
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(key).cloned())
        };
        let env_value = |name: &str| {
            template
                .and_then(|t| t.spec.as_ref())
                .into_iter()
                .flat_map(|p| p.containers.iter())
                .flat_map(|c| c.env.iter().flatten())
                .find(|e| e.name == name)
        };
        Some(ObservedDeployment {
            name: d.name_any(),
            build_id: d.labels().get(twc_api::labels::BUILD_ID)?.clone(),
            group: group_of(d.metadata.labels.as_ref()),
            spec_replicas: d.spec.as_ref().and_then(|s| s.replicas),
            replicas: status.and_then(|s| s.replicas).unwrap_or(0),
            ready_replicas: status.and_then(|s| s.ready_replicas).unwrap_or(0),
            available_replicas: status.and_then(|s| s.available_replicas).unwrap_or(0),
            available_since: since("True"),
            unavailable_since: since("False"),
            connection_hash: annotation(twc_api::labels::CONNECTION_SPEC_HASH),
            auth: Some(crate::plan::deployment::pod_auth(
                template
                    .and_then(|t| t.spec.as_ref())
                    .into_iter()
                    .flat_map(|p| p.volumes.iter().flatten())
                    .map(|v| {
                        let secret = v.secret.as_ref().and_then(|s| s.secret_name.as_deref());
                        (v.name.as_str(), secret)
                    }),
                env_value("TEMPORAL_API_KEY")
                    .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
                    .map(|r| (r.name.as_str(), r.key.as_str())),
            )),
            template_digest: annotation(twc_api::labels::POD_TEMPLATE_SPEC_HASH),
            credentials_digest: d
                .annotations()
                .get(twc_api::labels::CREDENTIALS_DIGEST)
                .cloned(),
            temporal_namespace: env_value("TEMPORAL_NAMESPACE").and_then(|e| e.value.clone()),
            temporal_address: env_value("TEMPORAL_ADDRESS").and_then(|e| e.value.clone()),
            tls_server_name: env_value("TEMPORAL_TLS_SERVER_NAME").and_then(|e| e.value.clone()),
            generation: d.metadata.generation,
            observed_generation: status.and_then(|s| s.observed_generation),
            updated_replicas: status.and_then(|s| s.updated_replicas).unwrap_or(0),
            restarted_at: None,
            oldest_pod: None,
            credentials_not_after: None,
            strategy: d.spec.as_ref().and_then(|s| s.strategy.clone()),
            min_ready_seconds: d.spec.as_ref().and_then(|s| s.min_ready_seconds),
            progress_deadline_seconds: d.spec.as_ref().and_then(|s| s.progress_deadline_seconds),
            revision_history_limit: d.spec.as_ref().and_then(|s| s.revision_history_limit),
            uid: d.metadata.uid.clone(),
            resource_version: d.metadata.resource_version.clone(),
            members: Vec::new(),
        })
    }

    #[test]
    fn a_cached_deployment_is_observed_as_the_whole_one() {
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
        let mut whole = crate::plan::deployment::versioned_deployment(&wd, "b1", &conn);
        whole.status = serde_json::from_value(json!({
            "replicas": 2, "readyReplicas": 1, "availableReplicas": 1,
            "conditions": [
                {"type": "Progressing", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Available", "status": "False", "lastTransitionTime": "2026-01-02T03:04:05Z"}
            ]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let json = serde_json::to_value(&whole).unwrap_or_else(|e| panic!("{e}"));
        let cached: CachedDeployment =
            serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            cached.meta().owner_references,
            whole.metadata.owner_references
        );
        assert!(is_owned_by(&cached, &wd));
        let seen = observe(&cached);
        assert_eq!(seen, observe_whole(&whole));
        let seen = seen.unwrap_or_else(|| panic!("not observed"));
        assert_eq!(seen.build_id, "b1");
        assert_eq!(seen.temporal_namespace.as_deref(), Some("tns"));
        assert!(seen.connection_hash.is_some() && seen.template_digest.is_some());
        assert_eq!((seen.replicas, seen.ready_replicas), (2, 1));
        assert!(seen.available_since.is_none() && seen.unavailable_since.is_some());
        // Of the labels (the template's and the controller's), only the build ID is kept.
        assert!(whole.metadata.labels.as_ref().is_some_and(|l| l.len() > 1));
        assert_eq!(
            cached.labels().keys().collect::<Vec<_>>(),
            [twc_api::labels::BUILD_ID]
        );
    }

    /// How the pods authenticate is read back from the Deployment as rendered (ours are TWC's
    /// field for field): equal to the connection's for every auth kind, so a takeover rolls
    /// nothing, and different when the auth mode or the API key's key changes.
    #[test]
    fn the_pods_auth_is_read_from_the_rendered_deployment() {
        use crate::plan::deployment::{auth_of, versioned_deployment};
        let wd: WorkerDeployment = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": "w", "namespace": "ns", "uid": "uid-1"},
            "spec": {
                "template": {"spec": {"containers": [{"name": "worker", "image": "w:v1"}]}},
                "rollout": {"strategy": "AllAtOnce"},
                "sunset": {},
                "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "tns"}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let spec = |v: serde_json::Value| -> twc_api::ConnectionSpec {
            serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
        };
        let kinds = [
            spec(json!({"hostPort": "h:7233"})),
            spec(json!({"hostPort": "h:7233", "mutualTLSSecretRef": {"name": "t"}})),
            spec(json!({"hostPort": "h:7233", "apiKeySecretRef": {"name": "t", "key": "k"}})),
            spec(json!({"hostPort": "h:7233", "apiKeySecretRef": {"name": "t", "key": "l"}})),
            spec(json!({"hostPort": "h:7233", "tls": {"caCertSecretRef": {"name": "ca"}}})),
        ];
        let mut seen_auths = Vec::new();
        for conn in &kinds {
            let whole = versioned_deployment(&wd, "b1", conn);
            let json = serde_json::to_value(&whole).unwrap_or_else(|e| panic!("{e}"));
            let cached: CachedDeployment =
                serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
            let seen = observe(&cached).unwrap_or_else(|| panic!("not observed"));
            assert_eq!(
                seen.auth.as_deref(),
                Some(auth_of(conn).as_str()),
                "{conn:?}"
            );
            assert_eq!(seen.temporal_address.as_deref(), Some("h:7233"));
            seen_auths.push(seen.auth);
        }
        assert_eq!(
            seen_auths,
            [
                Some("none".to_string()),
                Some("mtls:t".to_string()),
                Some("api-key:t:k".to_string()),
                Some("api-key:t:l".to_string()),
                Some("none".to_string()),
            ]
        );
    }

    #[test]
    fn a_deployment_without_spec_or_status_is_read() {
        let cached: CachedDeployment = serde_json::from_value(json!({
            "metadata": {"name": "d", "namespace": "ns",
                "labels": {(twc_api::labels::BUILD_ID): "b"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let seen = observe(&cached).unwrap_or_else(|| panic!("not observed"));
        assert_eq!((seen.spec_replicas, seen.replicas), (None, 0));
        assert_eq!(seen.temporal_namespace, None);
    }
}
