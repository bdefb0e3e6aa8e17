//! `spec.rollout` and `spec.sunset`: how new workflows move to a new version (strategy, ramp
//! steps, gates, analysis) and how drained versions are retired.

use k8s_openapi::api::core::v1::{ConfigMapKeySelector, SecretKeySelector};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The strategies for routing new workflows to a new version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutStrategyKind {
    #[default]
    Manual,
    AllAtOnce,
    Progressive,
}

/// How to roll out new workflow executions to the target version.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.strategy != 'Progressive' || (has(self.steps) && size(self.steps) > 0)")
        .message("steps are required for Progressive rollout"),
    validation = Rule::new("!has(self.gate) || !has(self.gate.encoding) || self.gate.encoding != 'binary/protobuf' || has(self.gate.messageType)")
        .message("gate.messageType is required when gate.encoding is binary/protobuf"),
    validation = Rule::new("!has(self.gate) || !has(self.gate.messageType) || (has(self.gate.encoding) && (self.gate.encoding == 'json/protobuf' || self.gate.encoding == 'binary/protobuf'))")
        .message("gate.messageType may only be set when gate.encoding is json/protobuf or binary/protobuf"),
    validation = Rule::new("!has(self.gate) || !has(self.gate.inputFrom) || (has(self.gate.inputFrom.configMapKeyRef) != has(self.gate.inputFrom.secretKeyRef))")
        .message("exactly one of configMapKeyRef or secretKeyRef must be set"),
    validation = Rule::new("!has(self.steps) || self.steps.map(s, s.rampPercentage).isSorted() && self.steps.all(s, self.steps.exists_one(t, t.rampPercentage == s.rampPercentage))")
        .message("steps[].rampPercentage must be strictly increasing from one step to the next")
)]
pub struct RolloutStrategy {
    /// `Manual` scales versions but never changes routing (promote by hand). `AllAtOnce`
    /// sends all new workflows to the new version once it is healthy. `Progressive` ramps the
    /// share of new workflows through `steps`, then promotes; with no current version, and not
    /// every task queue served by unversioned workers, it promotes at once instead.
    pub strategy: RolloutStrategyKind,

    /// A workflow that must run to completion on the new version, pinned to it, before the
    /// version gets any traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateWorkflowConfig>,

    /// Judge the new version by its own workflows: at every step of a Progressive rollout,
    /// and after promotion for `afterPromotion`, the workflows that closed on the new build
    /// since the step began (or since it became current), counted by Temporal's visibility.
    /// Too many failed, timed out or terminated ones take new work away from it at once
    /// (reason `AnalysisFailed`) and mark it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisConfig>,

    /// The ramp steps of a Progressive rollout, at most 20, with strictly increasing
    /// percentages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub steps: Vec<RolloutStep>,
}

/// How a ramping version is judged.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisConfig {
    /// The highest share, in percent, of the workflows closed on the new version in a step
    /// that may have failed, timed out or been terminated. Default 10.
    #[serde(default = "default_max_failure_percent")]
    #[schemars(range(min = 0, max = 100))]
    pub max_failure_percent: i32,

    /// How many workflows must have closed on the new version in a step for a verdict; with
    /// fewer, the step is inconclusive and the rollout goes on. Default 10.
    #[serde(default = "default_min_samples")]
    #[schemars(range(min = 1))]
    pub min_samples: i32,

    /// How long to keep judging the build once it is current, as a duration such as `10m`,
    /// with any strategy but Manual (an AllAtOnce promotion, or a Progressive rollout's last
    /// step): too many failures in that window give new work back to the version current
    /// before it. Unset: not judged after promotion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_promotion: Option<String>,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            max_failure_percent: default_max_failure_percent(),
            min_samples: default_min_samples(),
            after_promotion: None,
        }
    }
}

fn default_max_failure_percent() -> i32 {
    10
}

fn default_min_samples() -> i32 {
    10
}

/// One step of a Progressive rollout.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("duration(self.pauseDuration) >= duration('30s')")
        .message("pause duration must be at least 30s"),
    validation = Rule::new("!has(self.gate) || !has(self.gate.encoding) || self.gate.encoding != 'binary/protobuf' || has(self.gate.messageType)")
        .message("gate.messageType is required when gate.encoding is binary/protobuf"),
    validation = Rule::new("!has(self.gate) || !has(self.gate.messageType) || (has(self.gate.encoding) && (self.gate.encoding == 'json/protobuf' || self.gate.encoding == 'binary/protobuf'))")
        .message("gate.messageType may only be set when gate.encoding is json/protobuf or binary/protobuf"),
    validation = Rule::new("!has(self.gate) || !has(self.gate.inputFrom) || (has(self.gate.inputFrom.configMapKeyRef) != has(self.gate.inputFrom.secretKeyRef))")
        .message("exactly one of configMapKeyRef or secretKeyRef must be set")
)]
pub struct RolloutStep {
    /// Percentage of new workflow executions routed to the new version during this step,
    /// from 1 to 99.
    #[schemars(range(min = 1, max = 99))]
    pub ramp_percentage: i32,

    /// How long to stay at this step before the next one, as a duration such as `30s`, `5m`
    /// or `1h`; at least 30s.
    pub pause_duration: String,

    /// Not in TWC: a workflow that must complete on the new version, pinned to it, before
    /// the rollout moves on from this step. It starts when the step begins, once on each of
    /// the version's workflow task queues, so it sees the traffic of the step; the step lasts
    /// until both its pause is over and the gate completed. A gate that fails, times out or
    /// is terminated takes new work away from the version at once (reason `StepGateFailed`)
    /// and marks it failed; after a retry, it runs again under a new workflow ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateWorkflowConfig>,
}

/// A gate workflow.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GateWorkflowConfig {
    /// The workflow type to start on the new version.
    #[schemars(length(min = 1))]
    pub workflow_type: String,

    /// Any JSON value, passed as the gate workflow's first argument. Use `inputFrom` with a
    /// Secret for input that must not be logged. Mutually exclusive with `inputFrom`; since a
    /// free-form value is invisible to CRD validation rules, the controller checks this and
    /// reports `InvalidSpec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_json")]
    pub input: Option<serde_json::Value>,

    /// A ConfigMap or Secret key in the WorkerDeployment's namespace whose value (a JSON
    /// document, or bytes with a binary `encoding`) is passed as the gate workflow's first
    /// argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_from: Option<GateInputSource>,

    /// How the input's bytes are labelled for the workflow's data converter (the payload's
    /// `encoding` metadata), as in TWC: `json/plain` (the default), `json/protobuf`,
    /// `binary/plain` or `binary/protobuf`. The bytes are passed as given, never re-encoded;
    /// the binary encodings need `inputFrom` (a Secret or a ConfigMap's `binaryData`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<GateEncoding>,

    /// The fully qualified protobuf message name of the input (the payload's `messageType`
    /// metadata): required with `binary/protobuf`, optional with `json/protobuf`, not allowed
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
}

/// The payload encodings a gate input may be labelled with.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum GateEncoding {
    #[serde(rename = "binary/plain")]
    BinaryPlain,
    #[serde(rename = "json/plain")]
    JsonPlain,
    #[serde(rename = "json/protobuf")]
    JsonProtobuf,
    #[serde(rename = "binary/protobuf")]
    BinaryProtobuf,
}

impl GateEncoding {
    /// The `encoding` metadata value.
    pub fn as_str(self) -> &'static str {
        match self {
            GateEncoding::BinaryPlain => "binary/plain",
            GateEncoding::JsonPlain => "json/plain",
            GateEncoding::JsonProtobuf => "json/protobuf",
            GateEncoding::BinaryProtobuf => "binary/protobuf",
        }
    }

    /// Whether the bytes are not JSON (they cannot come from the inline `input`).
    pub fn is_binary(self) -> bool {
        matches!(
            self,
            GateEncoding::BinaryPlain | GateEncoding::BinaryProtobuf
        )
    }
}

/// Where a gate workflow's input comes from; exactly one of the two.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GateInputSource {
    /// A key of a ConfigMap in the WorkerDeployment's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeySelector>,

    /// A key of a Secret in the WorkerDeployment's namespace; its value is never logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeySelector>,
}

/// How versions are retired once drained.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.scaledownDelay) || duration(self.scaledownDelay) >= duration('0s')")
        .message("scaledownDelay must be a non-negative duration such as 30m or 1h"),
    validation = Rule::new("!has(self.deleteDelay) || duration(self.deleteDelay) >= duration('0s')")
        .message("deleteDelay must be a non-negative duration such as 1h or 24h")
)]
pub struct SunsetStrategy {
    /// How long after a version is drained to scale its Deployment to zero. Default `1h`.
    #[serde(default = "default_scaledown", skip_serializing_if = "Option::is_none")]
    pub scaledown_delay: Option<String>,

    /// How long after a version is drained to delete its Deployment (counted after the
    /// scale-down delay, as TWC does). Default `24h`.
    #[serde(default = "default_delete", skip_serializing_if = "Option::is_none")]
    pub delete_delay: Option<String>,
}

impl Default for SunsetStrategy {
    fn default() -> Self {
        Self {
            scaledown_delay: default_scaledown(),
            delete_delay: default_delete(),
        }
    }
}

fn default_scaledown() -> Option<String> {
    Some("1h".into())
}

fn default_delete() -> Option<String> {
    Some("24h".into())
}
