//! The CustomResourceDefinitions, generated from the types. `twc crd` prints them and
//! `hack/generate.sh` writes them into the repository (checked for drift in CI).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

use crate::{ClusterConnection, Connection, Sharing, WorkerDeployment, WorkerResourceTemplate};

/// Every CRD of the `temporal.io` group this controller serves, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        worker_deployment(),
        Connection::crd(),
        cluster_connection(),
        WorkerResourceTemplate::crd(),
    ];
    for crd in &mut crds {
        status_read_as_not_observed(crd);
    }
    crds
}

/// An object the controller has not written a status for yet reads with
/// `status: {observedGeneration: 0}` (a schema default, applied when the apiserver reads it):
/// kstatus, which Helm 4's `--wait` and Flux use, reads an object without any status as done
/// ("Current"), so `helm install --wait` returned before the controller had even seen a
/// WorkerDeployment, and a spec that can never work passed. Generation 1 observed as 0 reads
/// "in progress" until the first status write.
fn status_read_as_not_observed(crd: &mut CustomResourceDefinition) {
    let roots = crd
        .spec
        .versions
        .iter_mut()
        .filter_map(|v| v.schema.as_mut()?.open_api_v3_schema.as_mut());
    for root in roots {
        if let Some(status) = root.properties.as_mut().and_then(|p| p.get_mut("status")) {
            status.default = Some(
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSON(
                    serde_json::json!({"observedGeneration": 0}),
                ),
            );
        }
    }
}

/// The WorkerDeployment CRD. Descriptions inside each pod template (`spec.template`,
/// `spec.deployment.template` and each worker group's: the core Pod schema, which
/// `kubectl explain pod` already documents) are dropped: with them one copy alone would make the
/// CRD about 540 KB, too large for a client-side `kubectl apply`.
pub fn worker_deployment() -> CustomResourceDefinition {
    let mut crd = WorkerDeployment::crd();
    for version in &mut crd.spec.versions {
        let Some(spec) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|root| root.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            .and_then(|spec| spec.properties.as_mut())
        else {
            continue;
        };
        // A DeploymentSpec's (`spec.deployment`, each worker group's) pod template and strategy.
        let deployment_spec = |deployment: &mut JSONSchemaProps| {
            for (name, field) in deployment.properties.iter_mut().flatten() {
                match name.as_str() {
                    "template" => strip_pod_template(field),
                    "strategy" => bound_amounts(field),
                    _ => {}
                }
            }
        };
        if let Some(deployment) = spec.get_mut("deployment") {
            deployment_spec(deployment);
        }
        let group = spec
            .get_mut("workerGroups")
            .and_then(|g| match g.items.as_mut() {
                Some(JSONSchemaPropsOrArray::Schema(item)) => item.properties.as_mut(),
                _ => None,
            })
            .and_then(|p| p.get_mut("deployment"));
        if let Some(deployment) = group {
            deployment_spec(deployment);
        }
        if let Some(template) = spec.get_mut("template") {
            strip_pod_template(template);
            // Exclusive with `deployment` by a rule, never filled in: a default `{}` would
            // make "no template" pass it.
            template.default = None;
        }
    }
    crd
}

/// `maxUnavailable` and `maxSurge` of a strategy get a length bound (`100%` is 4 characters):
/// the apiserver estimates a CEL rule's cost from the longest string it could see, and the
/// strategy's rules on an unbounded string, once per worker group, went over its budget.
fn bound_amounts(strategy: &mut JSONSchemaProps) {
    let rolling = strategy
        .properties
        .as_mut()
        .and_then(|p| p.get_mut("rollingUpdate"))
        .and_then(|r| r.properties.as_mut());
    for (name, amount) in rolling.into_iter().flatten() {
        if name == "maxUnavailable" || name == "maxSurge" {
            amount.max_length = Some(MAX_AMOUNT_LENGTH);
        }
    }
}

/// The longest `maxUnavailable`/`maxSurge` a strategy in `spec.deployment` or a worker group
/// takes, in characters (a count of pods or a percentage).
pub const MAX_AMOUNT_LENGTH: i64 = 10;

/// A pod template's schema without the descriptions below it (its own stays).
fn strip_pod_template(template: &mut JSONSchemaProps) {
    for child in template.properties.iter_mut().flat_map(|p| p.values_mut()) {
        strip_descriptions(child);
    }
}

fn strip_descriptions(schema: &mut JSONSchemaProps) {
    schema.description = None;
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        strip_descriptions(child);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = schema.items.as_mut() {
        strip_descriptions(items);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(extra)) = schema.additional_properties.as_mut() {
        strip_descriptions(extra);
    }
}

/// The schema of `T` as kube's derive makes one for a CRD (inlined, structural).
fn crd_schema<T: schemars::JsonSchema>() -> JSONSchemaProps {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>())
        .and_then(serde_json::from_value)
        .unwrap_or_default()
}

/// The ClusterConnection CRD: Connection's schema, cluster-scoped, with the fields of
/// [`Sharing`] in its spec and the refused users in a column.
pub fn cluster_connection() -> CustomResourceDefinition {
    let mut crd = Connection::crd();
    let sharing = crd_schema::<Sharing>();
    crd.metadata.name = Some(format!("{}.{}", ClusterConnection::PLURAL, crate::GROUP));
    crd.spec.scope = "Cluster".into();
    crd.spec.names.kind = ClusterConnection::KIND.into();
    crd.spec.names.plural = ClusterConnection::PLURAL.into();
    crd.spec.names.singular = Some("clusterconnection".into());
    crd.spec.names.list_kind = Some("ClusterConnectionList".into());
    for version in &mut crd.spec.versions {
        let columns = version
            .additional_printer_columns
            .get_or_insert_with(Vec::new);
        let at = columns.len().saturating_sub(2);
        columns.insert(
            at,
            CustomResourceColumnDefinition {
                name: "Refused".into(),
                type_: "integer".into(),
                json_path: ".status.refused".into(),
                description: Some(
                    "WorkerDeployments refused by spec.allowedNamespaces or spec.allowedTemporalNamespaces"
                        .into(),
                ),
                ..Default::default()
            },
        );
        if let Some(spec) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|root| root.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
        {
            let properties = spec.properties.get_or_insert_with(Default::default);
            for (name, schema) in sharing.properties.clone().into_iter().flatten() {
                properties.insert(name, schema);
            }
        }
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            schema.description = Some(
                "ClusterConnection is a cluster-scoped Connection: defined once, it can be \
                 referenced from WorkerDeployments in any namespace with \
                 connectionRef.objectRef {kind: ClusterConnection}. Secret names in its spec are \
                 resolved in the namespace of each WorkerDeployment that uses it, so every \
                 tenant brings its own credentials."
                    .into(),
            );
        }
    }
    crd
}

/// The file name a CRD is written to: `temporal.io_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// A CRD as YAML, with a header saying it is generated.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    Ok(format!(
        "# Generated by `hack/generate.sh` (twc crd) from crates/api; do not edit.\n{}",
        serde_yaml::to_string(crd)?
    ))
}

/// Every CEL rule the CRDs carry, with its message: (plural, rule, message). The tests check
/// each one is in the generated YAML and enforced by a real apiserver.
pub const CEL_RULES: &[(&str, &str, &str)] = &[
    (
        "workerdeployments",
        "size(self.metadata.name) <= 63",
        "name cannot be more than 63 characters",
    ),
    (
        "workerdeployments",
        "self.strategy != 'Progressive' || (has(self.steps) && size(self.steps) > 0)",
        "steps are required for Progressive rollout",
    ),
    (
        "workerdeployments",
        "!has(self.gate) || !has(self.gate.inputFrom) || (has(self.gate.inputFrom.configMapKeyRef) != has(self.gate.inputFrom.secretKeyRef))",
        "exactly one of configMapKeyRef or secretKeyRef must be set",
    ),
    (
        "workerdeployments",
        "!has(self.gate) || !has(self.gate.encoding) || self.gate.encoding != 'binary/protobuf' || has(self.gate.messageType)",
        "gate.messageType is required when gate.encoding is binary/protobuf",
    ),
    (
        "workerdeployments",
        "!has(self.gate) || !has(self.gate.messageType) || (has(self.gate.encoding) && (self.gate.encoding == 'json/protobuf' || self.gate.encoding == 'binary/protobuf'))",
        "gate.messageType may only be set when gate.encoding is json/protobuf or binary/protobuf",
    ),
    (
        "workerdeployments",
        "!has(self.steps) || self.steps.map(s, s.rampPercentage).isSorted() && self.steps.all(s, self.steps.exists_one(t, t.rampPercentage == s.rampPercentage))",
        "steps[].rampPercentage must be strictly increasing from one step to the next",
    ),
    (
        "workerdeployments",
        "duration(self.pauseDuration) >= duration('30s')",
        "pause duration must be at least 30s",
    ),
    (
        "workerdeployments",
        "!has(self.scaledownDelay) || duration(self.scaledownDelay) >= duration('0s')",
        "scaledownDelay must be a non-negative duration such as 30m or 1h",
    ),
    (
        "workerdeployments",
        "!has(self.deleteDelay) || duration(self.deleteDelay) >= duration('0s')",
        "deleteDelay must be a non-negative duration such as 1h or 24h",
    ),
    (
        "workerdeployments",
        "!has(self.type) || self.type == 'RollingUpdate' || self.type == 'Recreate'",
        "deploymentStrategy.type must be RollingUpdate or Recreate",
    ),
    (
        "workerdeployments",
        "!has(self.rollingUpdate) || !has(self.type) || self.type != 'Recreate'",
        "deploymentStrategy.rollingUpdate may not be set when type is Recreate",
    ),
    (
        "workerdeployments",
        "!has(self.rollingUpdate) || !has(self.rollingUpdate.maxUnavailable) || !has(self.rollingUpdate.maxSurge) || !(string(self.rollingUpdate.maxUnavailable) in ['0', '0%'] && string(self.rollingUpdate.maxSurge) in ['0', '0%'])",
        "maxUnavailable and maxSurge cannot both be 0",
    ),
    (
        "workerdeployments",
        "!has(self.rollingUpdate) || ((!has(self.rollingUpdate.maxUnavailable) || (type(self.rollingUpdate.maxUnavailable) == string ? self.rollingUpdate.maxUnavailable.matches('^[0-9]+%$') : self.rollingUpdate.maxUnavailable >= 0)) && (!has(self.rollingUpdate.maxSurge) || (type(self.rollingUpdate.maxSurge) == string ? self.rollingUpdate.maxSurge.matches('^[0-9]+%$') : self.rollingUpdate.maxSurge >= 0)))",
        "maxUnavailable and maxSurge are a number of pods (0 or more) or a percentage such as 25%",
    ),
    (
        "workerdeployments",
        "has(self.deployment) || has(self.template) || has(self.workerGroups)",
        "one of deployment, template or workerGroups must be set",
    ),
    (
        "workerdeployments",
        "!(has(self.deployment) && has(self.template))",
        "exactly one of deployment or template must be set",
    ),
    (
        "workerdeployments",
        "!has(self.workerGroups) || !(has(self.deployment) || has(self.template))",
        "workerGroups cannot be combined with deployment or template",
    ),
    (
        "workerdeployments",
        "!(has(self.deployment) && has(self.deploymentStrategy))",
        "deploymentStrategy cannot be combined with deployment: set deployment.strategy",
    ),
    (
        "workerdeployments",
        "!has(self.progressDeadlineSeconds) || self.progressDeadlineSeconds > (has(self.minReadySeconds) ? self.minReadySeconds : 0)",
        "deployment.progressDeadlineSeconds must be greater than deployment.minReadySeconds",
    ),
    (
        "workerdeployments",
        "!has(self.paused) || !self.paused",
        "deployment.paused is not supported: a paused Deployment never starts a version's pods; pause a rollout with the temporal.io/rollout-paused annotation",
    ),
    (
        "workerdeployments",
        "!has(self.type) || self.type == 'RollingUpdate' || self.type == 'Recreate'",
        "deployment.strategy.type must be RollingUpdate or Recreate",
    ),
    (
        "workerdeployments",
        "!has(self.rollingUpdate) || !has(self.type) || self.type != 'Recreate'",
        "deployment.strategy.rollingUpdate may not be set when type is Recreate",
    ),
    (
        "workerdeployments",
        "!has(self.rollingUpdate) || !has(self.rollingUpdate.maxUnavailable) || !has(self.rollingUpdate.maxSurge) || !(string(self.rollingUpdate.maxUnavailable) in ['0', '0%'] && string(self.rollingUpdate.maxSurge) in ['0', '0%'])",
        "deployment.strategy: maxUnavailable and maxSurge cannot both be 0",
    ),
    (
        "workerdeployments",
        "!has(self.rollingUpdate) || ((!has(self.rollingUpdate.maxUnavailable) || (type(self.rollingUpdate.maxUnavailable) == string ? self.rollingUpdate.maxUnavailable.matches('^[0-9]+%$') : self.rollingUpdate.maxUnavailable >= 0)) && (!has(self.rollingUpdate.maxSurge) || (type(self.rollingUpdate.maxSurge) == string ? self.rollingUpdate.maxSurge.matches('^[0-9]+%$') : self.rollingUpdate.maxSurge >= 0)))",
        "deployment.strategy: maxUnavailable and maxSurge are a number of pods (0 or more) or a percentage such as 25%",
    ),
    (
        "workerdeployments",
        "self != 'default'",
        "group name default is reserved",
    ),
    (
        "workerdeployments",
        "has(self.name) != has(self.objectRef)",
        "exactly one of name or objectRef must be set",
    ),
    (
        "workerdeployments",
        "!has(self.kind) || has(self.name)",
        "connectionRef.kind goes with connectionRef.name; objectRef carries its own kind",
    ),
    (
        "workerdeployments",
        "self == 'Connection' || self == 'ClusterConnection'",
        "connectionRef.kind must be Connection or ClusterConnection",
    ),
    (
        "workerdeployments",
        "!has(self.__namespace__)",
        "objectRef.namespace is not supported yet",
    ),
    (
        "workerdeployments",
        "self == 'temporal.io'",
        "objectRef.apiGroup must be temporal.io",
    ),
    (
        "workerdeployments",
        "self == 'Connection' || self == 'ClusterConnection'",
        "objectRef.kind must be Connection or ClusterConnection",
    ),
    (
        "connections",
        "!(has(self.mutualTLSSecretRef) && has(self.apiKeySecretRef))",
        "Only one of mutualTLSSecretRef or apiKeySecretRef may be set",
    ),
    (
        "clusterconnections",
        "!(has(self.mutualTLSSecretRef) && has(self.apiKeySecretRef))",
        "Only one of mutualTLSSecretRef or apiKeySecretRef may be set",
    ),
    (
        "clusterconnections",
        "self.from != 'Selector' || has(self.selector)",
        "selector is required when from is Selector",
    ),
    (
        "clusterconnections",
        "self.from == 'Selector' || !has(self.selector)",
        "selector may only be set when from is Selector",
    ),
    (
        "clusterconnections",
        "!has(self.selector) || !has(self.selector.matchExpressions) || self.selector.matchExpressions.all(e, e.operator in ['In', 'NotIn'] ? has(e.values) && size(e.values) > 0 : e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0))",
        "selector.matchExpressions: In and NotIn need at least one value, Exists and DoesNotExist take none (no other operator)",
    ),
    (
        "workerresourcetemplates",
        "has(self.workerDeploymentRef) || has(self.temporalWorkerDeploymentRef)",
        "workerDeploymentRef is required",
    ),
    (
        "workerresourcetemplates",
        "!(has(self.workerDeploymentRef) && has(self.temporalWorkerDeploymentRef))",
        "set only one of workerDeploymentRef and the deprecated temporalWorkerDeploymentRef",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `x-kubernetes-validations` entry anywhere in `v`: (rule, message).
    fn rules_in(v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Array(rules)) = map.get("x-kubernetes-validations") {
                    for r in rules {
                        out.push((
                            r["rule"].as_str().unwrap_or_default().to_string(),
                            r["message"].as_str().unwrap_or_default().to_string(),
                        ));
                    }
                }
                map.values().for_each(|c| rules_in(c, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|c| rules_in(c, out)),
            _ => {}
        }
    }

    fn generated_rules() -> Vec<(String, String, String)> {
        let mut found = Vec::new();
        for crd in all() {
            let yaml = to_yaml(&crd).unwrap_or_else(|e| panic!("{e}"));
            let parsed: serde_json::Value =
                serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("{e}"));
            let mut rules = Vec::new();
            rules_in(&parsed, &mut rules);
            let plural = crd.spec.names.plural.clone();
            found.extend(rules.into_iter().map(|(r, m)| (plural.clone(), r, m)));
        }
        found
    }

    #[test]
    fn every_cel_rule_is_in_the_generated_yaml_with_its_message() {
        let generated = generated_rules();
        for (plural, rule, message) in CEL_RULES {
            assert!(
                generated
                    .iter()
                    .any(|(p, r, m)| p == plural && r == rule && m == message),
                "{plural}: rule {rule:?} with message {message:?} missing from the YAML"
            );
        }
        // And nothing in the YAML is untested.
        for (plural, rule, message) in &generated {
            assert!(
                CEL_RULES
                    .iter()
                    .any(|(p, r, m)| p == plural && r == rule && m == message),
                "{plural}: rule {rule:?} ({message:?}) is not listed in CEL_RULES"
            );
        }
    }

    #[test]
    fn cluster_connection_is_connection_cluster_scoped() {
        let conn = Connection::crd();
        let cc = cluster_connection();
        assert_eq!(cc.spec.scope, "Cluster");
        assert_eq!(cc.spec.names.kind, "ClusterConnection");
        assert_eq!(conn.spec.scope, "Namespaced");
        let spec = |c: &CustomResourceDefinition| {
            serde_json::to_value(&c.spec.versions[0].schema)
                .map(|v| v["openAPIV3Schema"]["properties"]["spec"].clone())
                .unwrap_or_default()
        };
        // Connection's spec, plus who may use it.
        let mut shared = spec(&cc);
        for field in ["allowedNamespaces", "allowedTemporalNamespaces"] {
            let removed = shared["properties"]
                .as_object_mut()
                .and_then(|p| p.remove(field));
            assert!(removed.is_some(), "{field} missing");
        }
        assert_eq!(spec(&conn), shared);
    }

    /// Three copies of the Pod schema (`template`, `deployment.template`, each group's), all
    /// without descriptions, and still room to spare.
    #[test]
    fn the_worker_deployment_crd_fits_a_client_side_apply() {
        let json = serde_json::to_string(&worker_deployment()).unwrap_or_default();
        // kubectl's last-applied annotation (with every other annotation) is limited to
        // 256 KiB.
        assert!(json.len() < 224 * 1024, "CRD is {} bytes", json.len());
        let yaml = to_yaml(&worker_deployment()).unwrap_or_default();
        for pod_field in ["shareProcessNamespace", "hostIPC"] {
            assert_eq!(yaml.matches(pod_field).count(), 3, "{pod_field}");
        }
        assert!(
            !yaml.contains("Optional duration in seconds the pod needs to terminate gracefully"),
            "a pod template's descriptions are dropped"
        );
    }

    #[test]
    fn legacy_and_typed_references_name_the_same_target() {
        use crate::{ConnectionKind, ConnectionObjectReference, ConnectionReference};
        let legacy = ConnectionReference {
            name: Some("c".into()),
            ..Default::default()
        };
        assert_eq!(legacy.target(), Some((ConnectionKind::Connection, "c")));
        let named = |kind: &str| ConnectionReference {
            name: Some("c".into()),
            kind: Some(kind.into()),
            object_ref: None,
        };
        assert_eq!(
            named("Connection").target(),
            Some((ConnectionKind::Connection, "c"))
        );
        assert_eq!(
            named("ClusterConnection").target(),
            Some((ConnectionKind::ClusterConnection, "c"))
        );
        assert_eq!(named("Secret").target(), None);
        let typed = ConnectionReference {
            name: None,
            kind: None,
            object_ref: Some(ConnectionObjectReference {
                api_group: "temporal.io".into(),
                kind: "ClusterConnection".into(),
                name: "c".into(),
                namespace: None,
            }),
        };
        assert_eq!(
            typed.target(),
            Some((ConnectionKind::ClusterConnection, "c"))
        );
        let bad = ConnectionReference {
            name: None,
            kind: None,
            object_ref: Some(ConnectionObjectReference {
                api_group: "temporal.io".into(),
                kind: "Secret".into(),
                name: "c".into(),
                namespace: None,
            }),
        };
        assert_eq!(bad.target(), None);
    }
}
