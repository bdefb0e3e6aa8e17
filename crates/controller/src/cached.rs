//! A WorkerDeployment as the watch cache keeps it: its metadata, the few fields the watches
//! read on every event, and its spec and status as JSON, parsed back only when a reconcile
//! needs the whole object.
//!
//! A WorkerDeployment built as Rust types is 3.7 KiB before any string or list is filled (the
//! pod template alone is 1.8 KiB of empty fields, a `Container` another 2 KiB); as JSON, a
//! typical spec and status are well under one. At 1,000 WorkerDeployments the typed cache was
//! the largest part of the controller's heap (a heap profile: 4.9 MB).

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::Resource;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use twc_api::{
    ConnectionReference, WorkerDeployment, WorkerDeploymentSpec, WorkerDeploymentStatus,
    WorkerOptions,
};

/// A cached WorkerDeployment. [`Self::full`] gives the whole object back; [`Self::watched`]
/// the part the indexes and triggers read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedWorkerDeployment {
    pub metadata: ObjectMeta,
    connection_ref: ConnectionReference,
    temporal_namespace: String,
    /// `status.observedConnectionRef`.
    observed_connection_ref: Option<twc_api::ObservedConnectionRef>,
    /// The `Ready` condition.
    ready: Option<Condition>,
    /// [`routing_fingerprint`] of the status.
    routing: u64,
    /// `spec` and `status` as JSON.
    spec: Box<str>,
    status: Option<Box<str>>,
}

impl CachedWorkerDeployment {
    /// Keeps `wd` in the cached form.
    pub fn new(wd: WorkerDeployment) -> Self {
        Self {
            connection_ref: wd.spec.worker_options.connection_ref.clone(),
            temporal_namespace: wd.spec.worker_options.temporal_namespace.clone(),
            observed_connection_ref: wd
                .status
                .as_ref()
                .and_then(|s| s.observed_connection_ref.clone()),
            ready: wd.status.as_ref().and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == twc_api::conditions::READY)
                    .cloned()
            }),
            routing: routing_fingerprint(wd.status.as_ref()),
            spec: json(&wd.spec),
            status: wd.status.as_ref().map(json),
            metadata: wd.metadata,
        }
    }

    /// The whole WorkerDeployment. The JSON was written from the same types, so it parses;
    /// should it not, the spec comes back empty with what was wrong, and that WorkerDeployment
    /// fails with `InvalidSpec` (the others go on).
    pub fn full(&self) -> (WorkerDeployment, Option<String>) {
        let mut problem = None;
        let spec = serde_json::from_str::<WorkerDeploymentSpec>(&self.spec).unwrap_or_else(|e| {
            problem = Some(format!("spec could not be read back from the cache: {e}"));
            WorkerDeploymentSpec::default()
        });
        let status = self
            .status
            .as_deref()
            .and_then(|s| serde_json::from_str::<WorkerDeploymentStatus>(s).ok());
        let wd = WorkerDeployment {
            metadata: self.metadata.clone(),
            spec,
            status,
        };
        (wd, problem)
    }

    /// What the usage index, the triggers and the predicates read: the metadata, the
    /// connection reference, the Temporal namespace, `status.observedConnectionRef` and the
    /// `Ready` condition. Every other field is empty.
    pub fn watched(&self) -> WorkerDeployment {
        let status = (self.observed_connection_ref.is_some() || self.ready.is_some()).then(|| {
            WorkerDeploymentStatus {
                observed_connection_ref: self.observed_connection_ref.clone(),
                conditions: self.ready.iter().cloned().collect(),
                ..Default::default()
            }
        });
        WorkerDeployment {
            metadata: self.metadata.clone(),
            spec: WorkerDeploymentSpec {
                worker_options: WorkerOptions {
                    connection_ref: self.connection_ref.clone(),
                    temporal_namespace: self.temporal_namespace.clone(),
                    ..Default::default()
                },
                ..Default::default()
            },
            status,
        }
    }
}

fn json<T: serde::Serialize>(value: &T) -> Box<str> {
    serde_json::to_string(value)
        .unwrap_or_default()
        .into_boxed_str()
}

/// A WorkerDeployment as a watch event carries it, whole or cached: what the indexes and
/// triggers read of it ([`CachedWorkerDeployment::watched`]).
pub trait AsWorkerDeployment {
    fn worker_deployment(&self) -> Cow<'_, WorkerDeployment>;
    /// [`routing_fingerprint`] of its status.
    fn routing(&self) -> u64;
}

impl AsWorkerDeployment for WorkerDeployment {
    fn worker_deployment(&self) -> Cow<'_, WorkerDeployment> {
        Cow::Borrowed(self)
    }
    fn routing(&self) -> u64 {
        routing_fingerprint(self.status.as_ref())
    }
}

impl AsWorkerDeployment for CachedWorkerDeployment {
    fn worker_deployment(&self) -> Cow<'_, WorkerDeployment> {
        Cow::Owned(self.watched())
    }
    fn routing(&self) -> u64 {
        self.routing
    }
}

/// Which versions a status routes to (target, current) and which it deprecates, with their
/// state and `drainedSince`: what decides a version's sunset scale-down, for the triggers of
/// WorkerResourceTemplates (an autoscaler's copy leaves a version scaled down at sunset).
pub fn routing_fingerprint(status: Option<&WorkerDeploymentStatus>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if let Some(s) = status {
        s.target_version
            .as_ref()
            .map(|t| &t.base.build_id)
            .hash(&mut h);
        s.current_version
            .as_ref()
            .map(|c| &c.base.build_id)
            .hash(&mut h);
        for v in &s.deprecated_versions {
            let since = v.drained_since.as_ref().map(|t| t.0.as_second());
            (&v.base.build_id, v.base.status as u8, since).hash(&mut h);
        }
    }
    h.finish()
}

impl<'de> Deserialize<'de> for CachedWorkerDeployment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wd = WorkerDeployment::deserialize(d).map_err(D::Error::custom)?;
        Ok(Self::new(wd))
    }
}

impl Resource for CachedWorkerDeployment {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        WorkerDeployment::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        WorkerDeployment::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        WorkerDeployment::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        WorkerDeployment::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sent() -> serde_json::Value {
        json!({
            "apiVersion": "temporal.io/v1alpha1",
            "kind": "WorkerDeployment",
            "metadata": {"name": "w", "namespace": "ns", "generation": 3,
                "finalizers": [twc_api::FINALIZER]},
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": "w"}},
                    "spec": {"containers": [{
                        "name": "worker",
                        "image": "worker:1",
                        "env": [{"name": "A", "value": "1"}],
                        "resources": {"limits": {"memory": "64Mi", "cpu": 1}}
                    }]}
                },
                "rollout": {"strategy": "Progressive", "steps": [{"rampPercentage": 10, "pauseDuration": "30s"}]},
                "workerOptions": {
                    "connectionRef": {"objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": "shared"}},
                    "temporalNamespace": "default"
                }
            },
            "status": {
                "observedGeneration": 3,
                "observedConnectionRef": {"kind": "ClusterConnection", "name": "shared"},
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ConnectionNotFound",
                     "message": "no ClusterConnection shared", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Progressing", "status": "True", "reason": "WaitingForPollers",
                     "message": "waiting", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ],
                "targetVersion": {"buildID": "b1", "status": "NotRegistered"}
            }
        })
    }

    #[test]
    fn the_whole_object_comes_back_as_it_was_sent() {
        let whole: WorkerDeployment =
            serde_json::from_value(sent()).unwrap_or_else(|e| panic!("{e}"));
        let cached: CachedWorkerDeployment =
            serde_json::from_value(sent()).unwrap_or_else(|e| panic!("{e}"));
        let (full, problem) = cached.full();
        assert_eq!(problem, None);
        assert_eq!(full, whole);
        assert_eq!(CachedWorkerDeployment::new(whole), cached);
    }

    #[test]
    fn what_the_watches_read_is_kept_typed() {
        let whole: WorkerDeployment =
            serde_json::from_value(sent()).unwrap_or_else(|e| panic!("{e}"));
        let cached: CachedWorkerDeployment =
            serde_json::from_value(sent()).unwrap_or_else(|e| panic!("{e}"));
        let watched = cached.worker_deployment();
        // The usage index reads the same from it as from the whole object.
        assert_eq!(
            crate::connections::ConnKey::of(&watched),
            crate::connections::ConnKey::of(&whole)
        );
        assert_eq!(
            crate::connections::index::Standing::of(&watched),
            crate::connections::index::Standing::of(&whole)
        );
        let reach = |wd: &WorkerDeployment| {
            let standing = crate::connections::index::Standing::of(wd);
            crate::connections::index::Reach::of(wd, &standing)
        };
        assert_eq!(reach(&watched), reach(&whole));
        assert_eq!(watched.metadata, whole.metadata);
        assert_eq!(
            watched.spec.worker_options.temporal_namespace,
            whole.spec.worker_options.temporal_namespace
        );
        // Nothing else is.
        assert_eq!(watched.spec.template, Default::default());
    }
}
