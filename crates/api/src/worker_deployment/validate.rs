//! The spec checks the CRD schema cannot make ([`WorkerDeploymentSpec::validate`]), reported as
//! the `InvalidSpec` condition.

use super::{RolloutStrategyKind, WorkerDeploymentSpec};

/// A spec problem the CRD schema cannot catch; reported as the `InvalidSpec` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The offending field, e.g. `spec.rollout.gate`.
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl WorkerDeploymentSpec {
    /// Checks what the CRD validation cannot (or what an apiserver without our CRD rules, or an
    /// object stored before them, may have let through). Empty when the spec is valid.
    pub fn validate(&self) -> Vec<SpecError> {
        let mut errors = Vec::new();
        let mut err = |field: &str, message: String| {
            errors.push(SpecError {
                field: field.into(),
                message,
            })
        };
        // Each pod template and Deployment the spec makes, in whichever form it is written.
        match &self.deployment {
            Some(d) => deployment_problems(d, "spec.deployment", &mut err),
            None => {
                template_problems(&self.template, "spec.template", &mut err);
                for (field, message) in self
                    .deployment_strategy
                    .iter()
                    .flat_map(super::deployment_strategy::problems)
                {
                    err(&format!("spec.deploymentStrategy.{field}"), message);
                }
            }
        }
        for g in self.worker_groups.iter().flatten() {
            let field = format!("spec.workerGroups[{}]", g.name);
            deployment_problems(&g.deployment, &format!("{field}.deployment"), &mut err);
            if g.name == super::DEFAULT_GROUP {
                err(
                    &format!("{field}.name"),
                    "group name default is reserved".into(),
                );
            }
        }
        let step_gates = self.rollout.steps.iter().enumerate().filter_map(|(i, s)| {
            s.gate
                .as_ref()
                .map(|g| (format!("spec.rollout.steps[{i}].gate"), g))
        });
        let gates = self
            .rollout
            .gate
            .as_ref()
            .map(|g| ("spec.rollout.gate".to_string(), g))
            .into_iter()
            .chain(step_gates);
        for (field, gate) in gates {
            if gate.input.is_some() && gate.input_from.is_some() {
                err(&field, "only one of input or inputFrom may be set".into());
            }
            if let Some(encoding) = gate.encoding.filter(|e| e.is_binary()) {
                if gate.input.is_some() {
                    err(
                        &format!("{field}.encoding"),
                        format!(
                            "{} cannot be used with inline input: use inputFrom",
                            encoding.as_str()
                        ),
                    );
                } else if gate.input_from.is_none() {
                    err(
                        &format!("{field}.encoding"),
                        format!("{} requires inputFrom", encoding.as_str()),
                    );
                }
            }
            if let Some(from) = &gate.input_from
                && from.config_map_key_ref.is_some() == from.secret_key_ref.is_some()
            {
                err(
                    &format!("{field}.inputFrom"),
                    "exactly one of configMapKeyRef or secretKeyRef must be set".into(),
                );
            }
        }
        if self.rollout.strategy == RolloutStrategyKind::Progressive
            && self.rollout.steps.is_empty()
        {
            err(
                "spec.rollout.steps",
                "steps are required for Progressive rollout".into(),
            );
        }
        let mut previous = 0;
        for (i, step) in self.rollout.steps.iter().enumerate() {
            if !(1..=99).contains(&step.ramp_percentage) {
                err(
                    &format!("spec.rollout.steps[{i}].rampPercentage"),
                    format!("must be from 1 to 99, got {}", step.ramp_percentage),
                );
            } else if step.ramp_percentage <= previous {
                err(
                    &format!("spec.rollout.steps[{i}].rampPercentage"),
                    format!(
                        "must be greater than the previous step's {previous}, got {}",
                        step.ramp_percentage
                    ),
                );
            }
            previous = previous.max(step.ramp_percentage);
            match crate::duration::parse(&step.pause_duration) {
                Ok(d) if d >= std::time::Duration::from_secs(30) => {}
                Ok(_) => err(
                    &format!("spec.rollout.steps[{i}].pauseDuration"),
                    "pause duration must be at least 30s".into(),
                ),
                Err(e) => err(&format!("spec.rollout.steps[{i}].pauseDuration"), e),
            }
        }
        if self.rollout.steps.len() > 20 {
            err("spec.rollout.steps", "at most 20 steps are allowed".into());
        }
        let after_promotion = self
            .rollout
            .analysis
            .as_ref()
            .and_then(|a| a.after_promotion.clone());
        for (field, value) in [
            ("spec.sunset.scaledownDelay", &self.sunset.scaledown_delay),
            ("spec.sunset.deleteDelay", &self.sunset.delete_delay),
            ("spec.rollout.analysis.afterPromotion", &after_promotion),
        ] {
            if let Some(Err(e)) = value.as_deref().map(crate::duration::parse) {
                err(field, e);
            }
        }
        // The CRD's rules between the forms, for objects stored before them.
        if self.deployment.is_some() {
            if !super::deployment_spec::is_empty_template(&self.template) {
                err(
                    "spec.template",
                    "exactly one of deployment or template must be set".into(),
                );
            }
            if self.deployment_strategy.is_some() {
                err(
                    "spec.deploymentStrategy",
                    "deploymentStrategy cannot be combined with deployment: set deployment.strategy".into(),
                );
            }
        }
        if self.has_worker_groups()
            && (self.deployment.is_some()
                || !super::deployment_spec::is_empty_template(&self.template))
        {
            err(
                "spec.workerGroups",
                "workerGroups cannot be combined with deployment or template".into(),
            );
        }
        if self.worker_options.connection_ref.target().is_none() {
            err(
                "spec.workerOptions.connectionRef",
                "set either name, or objectRef with kind Connection or ClusterConnection".into(),
            );
        }
        errors
    }
}

/// A pod template must be one Go decodes: its Go JSON is what the build ID hashes.
fn template_problems(
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
    field: &str,
    err: &mut impl FnMut(&str, String),
) {
    match serde_json::to_value(template) {
        Ok(v) => {
            if let Err(e) = twc_gocompat::pod_template_spec(&v) {
                err(&format!("{field}.{}", e.path), e.message);
            }
        }
        Err(e) => err(field, e.to_string()),
    }
}

/// What the CRD's rules refuse in a DeploymentSpec (`spec.deployment` or a worker group's, at
/// `field`), and its template.
fn deployment_problems(
    d: &super::VersionedDeploymentSpec,
    field: &str,
    err: &mut impl FnMut(&str, String),
) {
    template_problems(&d.template, &format!("{field}.template"), err);
    if d.paused == Some(true) {
        err(
            &format!("{field}.paused"),
            "not supported: a paused Deployment never starts a version's pods; pause a rollout with the temporal.io/rollout-paused annotation".into(),
        );
    }
    let min_ready = d.min_ready_seconds.unwrap_or(0);
    if d.progress_deadline_seconds.is_some_and(|s| s <= min_ready) {
        err(
            &format!("{field}.progressDeadlineSeconds"),
            format!("must be greater than deployment.minReadySeconds ({min_ready})"),
        );
    }
    for (f, message) in d
        .strategy
        .iter()
        .flat_map(super::deployment_strategy::problems)
    {
        err(&format!("{field}.strategy.{f}"), message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker_deployment::{
        ConnectionReference, GateInputSource, GateWorkflowConfig, RolloutStep, RolloutStrategy,
        WorkerOptions,
    };

    fn spec() -> WorkerDeploymentSpec {
        WorkerDeploymentSpec {
            rollout: RolloutStrategy {
                strategy: RolloutStrategyKind::AllAtOnce,
                ..Default::default()
            },
            worker_options: WorkerOptions {
                connection_ref: ConnectionReference {
                    name: Some("c".into()),
                    kind: None,
                    object_ref: None,
                },
                temporal_namespace: "default".into(),
                unsafe_custom_build_id: None,
            },
            ..Default::default()
        }
    }

    fn step(ramp: i32, pause: &str) -> RolloutStep {
        RolloutStep {
            ramp_percentage: ramp,
            pause_duration: pause.into(),
            gate: None,
        }
    }

    #[test]
    fn a_valid_spec_has_no_errors() {
        let mut s = spec();
        s.rollout.strategy = RolloutStrategyKind::Progressive;
        s.rollout.steps = vec![step(10, "30s"), step(50, "1h")];
        assert_eq!(s.validate(), vec![]);
    }

    #[test]
    fn a_template_go_cannot_decode_is_refused_naming_the_field() {
        let mut s = spec();
        s.template = serde_json::from_value(serde_json::json!({"spec": {"containers": [
            {"name": "w", "image": "w:1", "resources": {"requests": {"memory": "1 GB"}}}]}}))
        .unwrap_or_else(|e| panic!("{e}"));
        let errors = s.validate();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            errors[0].field,
            "spec.template.spec.containers[0].resources.requests.memory"
        );
    }

    #[test]
    fn gate_input_and_input_from_are_exclusive() {
        let mut s = spec();
        s.rollout.gate = Some(GateWorkflowConfig {
            workflow_type: "G".into(),
            input: Some(serde_json::json!({"a": 1})),
            input_from: Some(GateInputSource {
                secret_key_ref: Some(Default::default()),
                config_map_key_ref: None,
            }),
            ..Default::default()
        });
        let errors = s.validate();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "spec.rollout.gate");
        assert_eq!(
            errors[0].message,
            "only one of input or inputFrom may be set"
        );
        // A ramp step's gate is checked the same way, and named by its step.
        let gate = s.rollout.gate.take();
        s.rollout.strategy = RolloutStrategyKind::Progressive;
        s.rollout.steps = vec![step(10, "1m"), step(50, "1m")];
        s.rollout.steps[1].gate = gate;
        let errors = s.validate();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "spec.rollout.steps[1].gate");
    }

    #[test]
    fn ramps_must_increase_and_pauses_must_parse() {
        let mut s = spec();
        s.rollout.strategy = RolloutStrategyKind::Progressive;
        s.rollout.steps = vec![
            step(50, "1m"),
            step(20, "1m"),
            step(60, "5 minutes"),
            step(70, "10s"),
        ];
        let fields: Vec<String> = s.validate().into_iter().map(|e| e.to_string()).collect();
        assert_eq!(fields.len(), 3, "{fields:?}");
        assert!(fields[0].starts_with(
            "spec.rollout.steps[1].rampPercentage: must be greater than the previous step's 50"
        ));
        assert!(
            fields[1].starts_with(
                "spec.rollout.steps[2].pauseDuration: \"5 minutes\" is not a duration"
            )
        );
        assert!(fields[2].starts_with(
            "spec.rollout.steps[3].pauseDuration: pause duration must be at least 30s"
        ));
    }

    /// What the CRD's rules refuse in `spec.deployment`, the controller refuses too (an object
    /// stored before the rules), each naming its field.
    #[test]
    fn spec_deployment_is_checked_as_the_crd_checks_it() {
        use crate::worker_deployment::VersionedDeploymentSpec;
        use k8s_openapi::api::apps::v1::DeploymentStrategy;
        let template = |image: &str| {
            serde_json::from_value(serde_json::json!({"spec": {"containers": [
                {"name": "w", "image": image}]}}))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut s = spec();
        s.deployment = Some(VersionedDeploymentSpec {
            template: template("w:1"),
            replicas: Some(2),
            progress_deadline_seconds: Some(60),
            ..Default::default()
        });
        assert_eq!(s.validate(), vec![]);
        s.template = template("w:1");
        s.deployment_strategy = Some(DeploymentStrategy::default());
        if let Some(d) = s.deployment.as_mut() {
            d.paused = Some(true);
            d.min_ready_seconds = Some(60);
            d.strategy = Some(DeploymentStrategy {
                type_: Some("BlueGreen".into()),
                rolling_update: None,
            });
            d.template = serde_json::from_value(serde_json::json!({"spec": {"containers": [
                {"name": "w", "image": "w:1", "resources": {"limits": {"cpu": "lots"}}}]}}))
            .unwrap_or_else(|e| panic!("{e}"));
        }
        let fields: Vec<String> = s.validate().into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.deployment.template.spec.containers[0].resources.limits.cpu",
                "spec.deployment.paused",
                "spec.deployment.progressDeadlineSeconds",
                "spec.deployment.strategy.type",
                "spec.template",
                "spec.deploymentStrategy",
            ]
        );
    }

    /// Each group is checked as `spec.deployment` is, named by its group.
    #[test]
    fn each_worker_group_is_checked_and_named() {
        let mut s = spec();
        s.worker_groups = serde_json::from_value(serde_json::json!([
            {"name": "workflows", "deployment": {"template": {"spec": {"containers": [
                {"name": "w", "image": "w:1"}]}}}},
            {"name": "default", "deployment": {"paused": true, "progressDeadlineSeconds": 5,
                "minReadySeconds": 5, "template": {"spec": {"containers": [
                {"name": "w", "image": "w:1", "resources": {"limits": {"cpu": "lots"}}}]}}}},
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        let fields: Vec<String> = s.validate().into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.workerGroups[default].deployment.template.spec.containers[0].resources.limits.cpu",
                "spec.workerGroups[default].deployment.paused",
                "spec.workerGroups[default].deployment.progressDeadlineSeconds",
                "spec.workerGroups[default].name",
            ]
        );
    }

    #[test]
    fn a_sunset_delay_that_is_not_a_duration_is_reported() {
        let mut s = spec();
        s.sunset.delete_delay = Some("tomorrow".into());
        let errors = s.validate();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.sunset.deleteDelay");
    }

    /// TWC's webhook rules CEL cannot make (the inline input is free-form): binary bytes
    /// come from a ConfigMap or Secret, never from the inline JSON.
    #[test]
    fn a_binary_gate_input_must_come_from_a_configmap_or_secret() {
        use crate::worker_deployment::{GateEncoding, GateWorkflowConfig};
        let mut s = spec();
        s.rollout.gate = Some(GateWorkflowConfig {
            workflow_type: "Check".into(),
            input: Some(serde_json::json!({"a": 1})),
            encoding: Some(GateEncoding::BinaryPlain),
            ..Default::default()
        });
        let messages: Vec<String> = s.validate().iter().map(|e| e.to_string()).collect();
        assert_eq!(
            messages,
            [
                "spec.rollout.gate.encoding: binary/plain cannot be used with inline input: use inputFrom"
            ]
        );
        if let Some(g) = s.rollout.gate.as_mut() {
            g.input = None;
            g.encoding = Some(GateEncoding::BinaryProtobuf);
        }
        let messages: Vec<String> = s.validate().iter().map(|e| e.to_string()).collect();
        assert_eq!(
            messages,
            ["spec.rollout.gate.encoding: binary/protobuf requires inputFrom"]
        );
        if let Some(g) = s.rollout.gate.as_mut() {
            g.encoding = Some(GateEncoding::JsonProtobuf);
            g.input = Some(serde_json::json!({"a": 1}));
        }
        assert!(s.validate().is_empty());
    }
}
