//! A WorkerDeployment as the watch cache keeps it: the object with its pod template held as
//! the JSON the apiserver sent, parsed only when a reconcile needs it.
//!
//! A pod template built as Kubernetes types is several KiB even when small (a `Container`
//! alone is over 2 KiB of mostly empty fields); its JSON is a few hundred bytes. Everything
//! else the watches read (metadata, connection reference, status) stays typed.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use twc_api::WorkerDeployment;

/// A cached WorkerDeployment: `wd` has an empty `spec.template`; [`Self::full`] puts the
/// template back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedWorkerDeployment {
    /// The object without its pod template.
    pub wd: WorkerDeployment,
    /// `spec.template` as JSON.
    template: Box<str>,
}

impl CachedWorkerDeployment {
    /// Keeps `wd`, its template as JSON.
    pub fn new(mut wd: WorkerDeployment) -> Self {
        let template = std::mem::take(&mut wd.spec.template);
        let template = serde_json::to_string(&template).unwrap_or_default();
        Self {
            wd,
            template: template.into_boxed_str(),
        }
    }

    /// The whole WorkerDeployment. A template that does not parse as a pod template (the
    /// CRD's schema should let none through) comes back empty, with what was wrong with it:
    /// that WorkerDeployment fails with `InvalidSpec`, the others go on.
    pub fn full(&self) -> (WorkerDeployment, Option<String>) {
        let mut wd = self.wd.clone();
        match serde_json::from_str::<PodTemplateSpec>(&self.template) {
            Ok(template) => {
                wd.spec.template = template;
                (wd, None)
            }
            Err(e) => (
                wd,
                Some(format!("spec.template is not a valid pod template: {e}")),
            ),
        }
    }
}

/// A WorkerDeployment as a watch event carries it, whole or cached: what the indexes and
/// triggers read of it (never its template).
pub trait AsWorkerDeployment {
    fn worker_deployment(&self) -> &WorkerDeployment;
}

impl AsWorkerDeployment for WorkerDeployment {
    fn worker_deployment(&self) -> &WorkerDeployment {
        self
    }
}

impl AsWorkerDeployment for CachedWorkerDeployment {
    fn worker_deployment(&self) -> &WorkerDeployment {
        &self.wd
    }
}

impl<'de> Deserialize<'de> for CachedWorkerDeployment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut object = serde_json::Value::deserialize(d)?;
        // The template is taken out as it came and left empty for the typed rest.
        let template = object
            .get_mut("spec")
            .and_then(|s| s.as_object_mut())
            .and_then(|s| s.insert("template".into(), serde_json::json!({})))
            .unwrap_or_else(|| serde_json::json!({}));
        let wd: WorkerDeployment = serde_json::from_value(object).map_err(D::Error::custom)?;
        let template = serde_json::to_string(&template).map_err(D::Error::custom)?;
        Ok(Self {
            wd,
            template: template.into_boxed_str(),
        })
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
        &self.wd.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.wd.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(template: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "temporal.io/v1alpha1",
            "kind": "WorkerDeployment",
            "metadata": {"name": "w", "namespace": "ns", "generation": 3},
            "spec": {
                "template": template,
                "rollout": {"strategy": "AllAtOnce"},
                "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "default"}
            }
        })
    }

    #[test]
    fn the_template_comes_back_as_it_was_sent() {
        let sent = object(json!({
            "metadata": {"labels": {"app": "w"}},
            "spec": {"containers": [{
                "name": "worker",
                "image": "worker:1",
                "env": [{"name": "A", "value": "1"}],
                "resources": {"limits": {"memory": "64Mi"}}
            }]}
        }));
        let whole: WorkerDeployment = serde_json::from_value(sent.clone()).unwrap();
        let cached: CachedWorkerDeployment = serde_json::from_value(sent).unwrap();
        // Nothing of the template is held typed.
        assert_eq!(cached.wd.spec.template, PodTemplateSpec::default());
        assert_eq!(cached.wd.metadata, whole.metadata);
        let (full, problem) = cached.full();
        assert_eq!(problem, None);
        assert_eq!(full, whole);
        // And a cache entry made from a whole object gives the same object back.
        assert_eq!(CachedWorkerDeployment::new(whole.clone()).full().0, whole);
    }

    #[test]
    fn a_template_kubernetes_refuses_is_said_and_the_rest_kept() {
        let cached: CachedWorkerDeployment = serde_json::from_value(object(json!({
            "spec": {"containers": [{"name": "worker", "resources": {"limits": {"memory": ["64Mi"]}}}]}
        })))
        .unwrap();
        let (full, problem) = cached.full();
        assert!(
            problem
                .as_deref()
                .is_some_and(|p| p.starts_with("spec.template is not a valid pod template")),
            "{problem:?}"
        );
        assert_eq!(full.spec.template, PodTemplateSpec::default());
        assert_eq!(full.metadata.generation, Some(3));
    }
}
