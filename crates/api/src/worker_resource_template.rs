//! `WorkerResourceTemplate`: one namespaced object (an HPA, a PDB, a KEDA ScaledObject, ...)
//! stamped out per active build ID of a WorkerDeployment.

// Several `printcolumn(type_ = "string", ..)` entries look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a WorkerResourceTemplate.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "temporal.io",
    version = "v1alpha1",
    kind = "WorkerResourceTemplate",
    namespaced,
    status = "WorkerResourceTemplateStatus",
    derive = "Default",
    derive = "PartialEq",
    shortname = "wrt",
    doc = "WorkerResourceTemplate attaches a namespaced Kubernetes object (an HPA, a PDB, a KEDA ScaledObject, ...) to each versioned Deployment of a WorkerDeployment: one copy per active build ID, owned by the template.",
    printcolumn(
        name = "Worker",
        type_ = "string",
        json_path = ".spec.workerDeploymentRef.name",
        description = "Referenced WorkerDeployment"
    ),
    printcolumn(
        name = "Kind",
        type_ = "string",
        json_path = ".spec.template.kind",
        description = "Kind of owned resource"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Age"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.workerDeploymentRef) || has(self.temporalWorkerDeploymentRef)")
        .message("workerDeploymentRef is required"),
    validation = Rule::new("!(has(self.workerDeploymentRef) && has(self.temporalWorkerDeploymentRef))")
        .message("set only one of workerDeploymentRef and the deprecated temporalWorkerDeploymentRef")
)]
pub struct WorkerResourceTemplateSpec {
    /// The WorkerDeployment, in the same namespace, whose versions get a copy of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_deployment_ref: Option<WorkerDeploymentReference>,

    /// Deprecated: use `workerDeploymentRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporal_worker_deployment_ref: Option<WorkerDeploymentReference>,

    /// The worker group whose Deployment in each version gets a copy (upstream's worker
    /// groups): required when the WorkerDeployment has `workerGroups`; empty means `default`,
    /// the one group of a WorkerDeployment without groups. A group the WorkerDeployment does
    /// not have gives `Ready=False`, reason `WorkerGroupNotFound`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 24),
        regex(pattern = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
    )]
    pub worker_group: Option<String>,

    /// The object to create per active build ID: `apiVersion`, `kind` and `spec`; the
    /// controller sets `metadata.name` and `metadata.namespace`. An empty `scaleTargetRef: {}`
    /// is filled with the versioned Deployment, an empty `matchLabels: {}` with its selector
    /// labels.
    #[schemars(schema_with = "crate::schema::any_object")]
    pub template: serde_json::Value,
}

impl WorkerResourceTemplateSpec {
    /// The worker group the copies are for (`default` when not set).
    pub fn effective_worker_group(&self) -> &str {
        self.worker_group
            .as_deref()
            .filter(|g| !g.is_empty())
            .unwrap_or(crate::DEFAULT_GROUP)
    }

    /// The referenced WorkerDeployment's name, preferring the current field.
    pub fn worker_deployment_name(&self) -> Option<&str> {
        self.worker_deployment_ref
            .as_ref()
            .or(self.temporal_worker_deployment_ref.as_ref())
            .map(|r| r.name.as_str())
    }
}

/// A reference to a WorkerDeployment in the same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerDeploymentReference {
    /// Name of the WorkerDeployment.
    #[schemars(regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
}

/// Apply state of the object for one build ID.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerResourceTemplateVersionStatus {
    /// The build ID of the versioned Deployment.
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// Name of the applied object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// The template's `metadata.generation` at the last successful apply; 0 means never.
    #[serde(default)]
    pub last_applied_generation: i64,
    /// Why the last apply failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_error: Option<String>,
    /// Hash of the object as last applied (16 hex characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_hash: Option<String>,
    /// When this entry last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// The observed state of a WorkerResourceTemplate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerResourceTemplateStatus {
    /// Apply state per build ID.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<WorkerResourceTemplateVersionStatus>,
    /// The `metadata.generation` the controller last acted on, whatever the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// `Ready` is True when every active build ID's object is applied at the current
    /// generation. `Stalled` is True when nothing will apply until the template changes (it
    /// does not render, or the apiserver refuses it outright); `Reconciling` is True while an
    /// apply is retried or the WorkerDeployment is not there yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
