//! The versioned Deployment of one build ID: the user's pod template plus what the worker
//! needs to reach Temporal as that version, exactly the variables and mounts TWC injects.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, PodTemplateSpec, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};
use twc_api::{AuthMode, ConnectionSpec, WorkerDeployment, labels};

use super::build_id::{deployment_name, template_digest, temporal_deployment_name};

/// Where the mTLS Secret is mounted in worker containers.
pub const TLS_MOUNT: &str = "/etc/temporal/tls";
/// Where a `tls.caCertSecretRef` Secret is mounted.
pub const CA_MOUNT: &str = "/etc/temporal/ca";
const TLS_VOLUME: &str = "temporal-tls";
const CA_VOLUME: &str = "temporal-ca";

/// Hash of the connection settings that reach the pods (address, server name, Secret names).
/// A change rolls the versioned Deployments. Identical specs hash the same whatever the kind,
/// so moving from a Connection to an equal ClusterConnection restarts nothing.
pub fn connection_hash(spec: &ConnectionSpec) -> String {
    if spec.host_port.is_empty() {
        return String::new();
    }
    let mut h = Sha256::new();
    h.update(spec.host_port.as_bytes());
    h.update(spec.tls_server_name().unwrap_or_default().as_bytes());
    h.update(spec.secret_name().unwrap_or_default().as_bytes());
    if let Some(ca) = spec
        .tls
        .as_ref()
        .and_then(|t| t.ca_cert_secret_ref.as_ref())
    {
        h.update(b"\0ca\0");
        h.update(ca.name.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Label values are at most 63 characters of `[a-zA-Z0-9-_.]`.
fn label_value(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    cleaned
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// The selector labels of a version's Deployment and pods.
pub fn selector_labels(wd_name: &str, build_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::DEPLOYMENT_NAME.to_string(), label_value(wd_name)),
        (labels::BUILD_ID.to_string(), label_value(build_id)),
    ])
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// The environment variables, volumes and mounts the controller adds.
fn injections(
    wd: &WorkerDeployment,
    build_id: &str,
    conn: &ConnectionSpec,
) -> (Vec<EnvVar>, Vec<Volume>, Vec<VolumeMount>) {
    let ns = wd.namespace().unwrap_or_default();
    let mut vars = vec![
        env("TEMPORAL_ADDRESS", &conn.host_port),
        env(
            "TEMPORAL_NAMESPACE",
            &wd.spec.worker_options.temporal_namespace,
        ),
        env(
            "TEMPORAL_DEPLOYMENT_NAME",
            &temporal_deployment_name(&ns, &wd.name_any()),
        ),
        env("TEMPORAL_WORKER_BUILD_ID", build_id),
    ];
    if let Some(server_name) = conn.tls_server_name() {
        vars.push(env("TEMPORAL_TLS_SERVER_NAME", server_name));
    }
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    let secret_volume = |name: &str, secret: &str| Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    // Secret volumes are read-only whatever the mount says; TWC's mount sets no `readOnly`,
    // and a pod template that differs from TWC's in one field would restart its workers.
    let mount = |name: &str, path: &str| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    };
    match conn.auth_mode() {
        AuthMode::MutualTls => {
            let secret = conn.secret_name().unwrap_or_default();
            vars.push(env("TEMPORAL_TLS", "true"));
            vars.push(env(
                "TEMPORAL_TLS_CLIENT_KEY_PATH",
                &format!("{TLS_MOUNT}/tls.key"),
            ));
            vars.push(env(
                "TEMPORAL_TLS_CLIENT_CERT_PATH",
                &format!("{TLS_MOUNT}/tls.crt"),
            ));
            volumes.push(secret_volume(TLS_VOLUME, secret));
            mounts.push(mount(TLS_VOLUME, TLS_MOUNT));
        }
        AuthMode::ApiKey => {
            vars.push(EnvVar {
                name: "TEMPORAL_API_KEY".into(),
                value_from: Some(EnvVarSource {
                    // As the Connection gives it, as TWC does (the key itself never).
                    secret_key_ref: conn.api_key_secret_ref.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        AuthMode::None => {}
    }
    if let Some(ca) = conn
        .tls
        .as_ref()
        .and_then(|t| t.ca_cert_secret_ref.as_ref())
    {
        if conn.auth_mode() == AuthMode::None {
            vars.push(env("TEMPORAL_TLS", "true"));
        }
        vars.push(env(
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
            &format!("{CA_MOUNT}/ca.crt"),
        ));
        volumes.push(secret_volume(CA_VOLUME, &ca.name));
        mounts.push(mount(CA_VOLUME, CA_MOUNT));
    }
    (vars, volumes, mounts)
}

/// Deployment annotation listing the environment variables the controller injected, so a
/// connection change can replace exactly those in an older version's Deployment. It is on the
/// Deployment, not on its pod template: the pod template stays exactly TWC's, so a Deployment
/// TWC created is adopted without restarting a pod.
pub const INJECTED_ENV: &str = "temporal.io/injected-env";

/// What TWC injects (and so what a Deployment without [`INJECTED_ENV`], one TWC created, holds
/// of ours): the variables of every connection kind.
const TWC_INJECTED_ENV: [&str; 9] = [
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_DEPLOYMENT_NAME",
    "TEMPORAL_WORKER_BUILD_ID",
    "TEMPORAL_TLS_SERVER_NAME",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_API_KEY",
];

/// The pod template of a version (the user's template with the injections, labels and hash
/// annotations, field for field what TWC renders) and the [`INJECTED_ENV`] record of it.
fn pod_template(
    wd: &WorkerDeployment,
    build_id: &str,
    conn: &ConnectionSpec,
) -> (PodTemplateSpec, String) {
    let mut template = wd.spec.template.clone();
    let meta = template.metadata.get_or_insert_with(Default::default);
    let labels = meta.labels.get_or_insert_with(Default::default);
    labels.extend(selector_labels(&wd.name_any(), build_id));
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(
            labels::POD_TEMPLATE_SPEC_HASH.into(),
            template_digest(&wd.spec.template),
        );
    let record = inject(&mut template, wd, build_id, conn);
    (template, record)
}

/// Adds the connection's variables, volumes and mounts and the connection hash; returns the
/// names of the variables added (for [`INJECTED_ENV`]).
fn inject(
    template: &mut PodTemplateSpec,
    wd: &WorkerDeployment,
    build_id: &str,
    conn: &ConnectionSpec,
) -> String {
    let (vars, volumes, mounts) = injections(wd, build_id, conn);
    let meta = template.metadata.get_or_insert_with(Default::default);
    let annotations = meta.annotations.get_or_insert_with(Default::default);
    annotations.insert(labels::CONNECTION_SPEC_HASH.into(), connection_hash(conn));
    let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
    let record = names.join(",");
    if let Some(spec) = template.spec.as_mut() {
        for c in spec.containers.iter_mut() {
            c.env
                .get_or_insert_with(Vec::new)
                .extend(vars.iter().cloned());
            if !mounts.is_empty() {
                c.volume_mounts
                    .get_or_insert_with(Vec::new)
                    .extend(mounts.iter().cloned());
            }
        }
        if !volumes.is_empty() {
            spec.volumes.get_or_insert_with(Vec::new).extend(volumes);
        }
    }
    record
}

/// An existing version's Deployment moved to a changed connection: the variables, volumes and
/// mounts injected for the old connection are replaced by the new ones; the rest of its
/// template (the user's template of that version) is kept. The variables replaced are the
/// ones its [`INJECTED_ENV`] names, or, on a Deployment TWC created, the ones TWC injects.
pub fn reconnected(
    existing: &Deployment,
    wd: &WorkerDeployment,
    build_id: &str,
    conn: &ConnectionSpec,
) -> Option<Deployment> {
    let spec = existing.spec.as_ref()?;
    let mut template = spec.template.clone();
    let injected: Vec<String> = match existing.annotations().get(INJECTED_ENV) {
        Some(record) => record.split(',').map(str::to_string).collect(),
        None => TWC_INJECTED_ENV.iter().map(|s| s.to_string()).collect(),
    };
    let ours = |name: &str| name == TLS_VOLUME || name == CA_VOLUME;
    if let Some(pod) = template.spec.as_mut() {
        for c in pod.containers.iter_mut() {
            if let Some(env) = c.env.as_mut() {
                env.retain(|e| !injected.contains(&e.name));
            }
            if let Some(mounts) = c.volume_mounts.as_mut() {
                mounts.retain(|m| !ours(&m.name));
            }
        }
        if let Some(volumes) = pod.volumes.as_mut() {
            volumes.retain(|v| !ours(&v.name));
        }
    }
    inject(&mut template, wd, build_id, conn);
    let mut d = versioned_deployment(wd, build_id, conn);
    if let Some(new_spec) = d.spec.as_mut() {
        new_spec.replicas = spec.replicas;
        new_spec.min_ready_seconds = spec.min_ready_seconds;
        new_spec.template = template;
    }
    Some(d)
}

/// The full versioned Deployment for server-side apply.
pub fn versioned_deployment(
    wd: &WorkerDeployment,
    build_id: &str,
    conn: &ConnectionSpec,
) -> Deployment {
    let name = deployment_name(&wd.name_any(), build_id);
    let selector = selector_labels(&wd.name_any(), build_id);
    let owner = wd.controller_owner_ref(&()).map(|mut o: OwnerReference| {
        o.block_owner_deletion = Some(true);
        o
    });
    let (template, record) = pod_template(wd, build_id, conn);
    // TWC's Deployment annotations are the template's; ours adds the record of what was
    // injected (metadata only: it never rolls a pod).
    let mut annotations = wd
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    annotations.insert(INJECTED_ENV.into(), record);
    Deployment {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: wd.namespace(),
            labels: Some(selector.clone()),
            annotations: Some(annotations),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: wd.spec.replicas,
            min_ready_seconds: Some(wd.spec.min_ready_seconds),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            },
            template,
            ..Default::default()
        }),
        status: None,
    }
}

/// The same Deployment with replicas set (for scaling through the same field manager).
pub fn with_replicas(mut d: Deployment, replicas: i32) -> Deployment {
    if let Some(spec) = d.spec.as_mut() {
        spec.replicas = Some(replicas);
    }
    d
}

/// A build ID's Deployment can be addressed by these.
pub fn is_owned_by<K: Resource>(d: &K, wd: &WorkerDeployment) -> bool {
    let uid = wd.meta().uid.clone();
    d.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::SecretKeySelector;
    use serde_json::json;
    use twc_api::{ConnectionTls, SecretReference};

    fn wd() -> WorkerDeployment {
        let mut wd: WorkerDeployment = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": "hello", "namespace": "team-a", "uid": "u-1"},
            "spec": {
                "replicas": 2,
                "template": {"metadata": {"labels": {"app": "hello"}},
                             "spec": {"containers": [{"name": "worker", "image": "w:v1",
                                 "env": [{"name": "USER_VAR", "value": "x"}]}]}},
                "rollout": {"strategy": "AllAtOnce"},
                "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "orders"}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        wd.metadata.uid = Some("u-1".into());
        wd
    }

    fn env_of(d: &Deployment) -> BTreeMap<String, EnvVar> {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map(|s| {
                s.containers[0]
                    .env
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|e| (e.name.clone(), e))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn injects_what_twc_injects_for_mtls() {
        let conn = ConnectionSpec {
            host_port: "t.example.com:7233".into(),
            tls: Some(ConnectionTls {
                server_name: Some("t.example.com".into()),
                ca_cert_secret_ref: None,
            }),
            mutual_tls_secret_ref: Some(SecretReference {
                name: "mtls".into(),
            }),
            api_key_secret_ref: None,
        };
        let d = versioned_deployment(&wd(), "v1-d975", &conn);
        assert_eq!(d.metadata.name.as_deref(), Some("hello-v1-d975"));
        let env = env_of(&d);
        let value = |k: &str| env.get(k).and_then(|e| e.value.clone()).unwrap_or_default();
        assert_eq!(value("USER_VAR"), "x");
        assert_eq!(value("TEMPORAL_ADDRESS"), "t.example.com:7233");
        assert_eq!(value("TEMPORAL_NAMESPACE"), "orders");
        assert_eq!(value("TEMPORAL_DEPLOYMENT_NAME"), "team-a/hello");
        assert_eq!(value("TEMPORAL_WORKER_BUILD_ID"), "v1-d975");
        assert_eq!(value("TEMPORAL_TLS_SERVER_NAME"), "t.example.com");
        assert_eq!(value("TEMPORAL_TLS"), "true");
        assert_eq!(
            value("TEMPORAL_TLS_CLIENT_CERT_PATH"),
            "/etc/temporal/tls/tls.crt"
        );
        assert_eq!(
            value("TEMPORAL_TLS_CLIENT_KEY_PATH"),
            "/etc/temporal/tls/tls.key"
        );
        let pod = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .unwrap_or_default();
        let volume = pod.volumes.unwrap_or_default();
        assert_eq!(volume.len(), 1);
        // The Secret volume names only a Secret; a pod can only mount its own namespace's.
        assert_eq!(
            volume[0]
                .secret
                .as_ref()
                .and_then(|s| s.secret_name.as_deref()),
            Some("mtls")
        );
        let labels = d
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.clone())
            .and_then(|m| m.labels)
            .unwrap_or_default();
        assert_eq!(labels.get("app").map(String::as_str), Some("hello"));
        assert_eq!(
            labels.get("temporal.io/build-id").map(String::as_str),
            Some("v1-d975")
        );
        assert_eq!(
            labels
                .get("temporal.io/deployment-name")
                .map(String::as_str),
            Some("hello")
        );
        let owner = &d.metadata.owner_references.unwrap_or_default()[0];
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert_eq!(d.spec.and_then(|s| s.replicas), Some(2));
    }

    /// A private CA reaches the workers through `tls.caCertSecretRef`, also with mutual TLS
    /// (it may be the client certificate's own Secret); without it the pod template stays
    /// TWC's (see `renders_the_deployment_twc_renders`).
    #[test]
    fn a_ca_secret_is_passed_to_the_workers_also_with_mtls() {
        let conn: ConnectionSpec = serde_json::from_value(json!({
            "hostPort": "t:7233",
            "mutualTLSSecretRef": {"name": "cert"},
            "tls": {"caCertSecretRef": {"name": "cert"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let d = versioned_deployment(&wd(), "b", &conn);
        let env = env_of(&d);
        assert_eq!(
            env["TEMPORAL_TLS_SERVER_CA_CERT_PATH"].value.as_deref(),
            Some("/etc/temporal/ca/ca.crt")
        );
        assert_eq!(env["TEMPORAL_TLS"].value.as_deref(), Some("true"));
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            names.iter().filter(|n| **n == "TEMPORAL_TLS").count(),
            1,
            "{names:?}"
        );
        let pod = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .unwrap_or_default();
        let volumes: Vec<(String, Option<String>)> = pod
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| (v.name, v.secret.and_then(|s| s.secret_name)))
            .collect();
        assert_eq!(
            volumes,
            vec![
                ("temporal-tls".to_string(), Some("cert".to_string())),
                ("temporal-ca".to_string(), Some("cert".to_string()))
            ]
        );
    }

    #[test]
    fn injects_the_api_key_by_reference_only() {
        let conn = ConnectionSpec {
            host_port: "t:7233".into(),
            api_key_secret_ref: Some(SecretKeySelector {
                name: "key".into(),
                key: "api-key".into(),
                optional: None,
            }),
            ..Default::default()
        };
        let d = versioned_deployment(&wd(), "b", &conn);
        let env = env_of(&d);
        let api_key = env.get("TEMPORAL_API_KEY").cloned().unwrap_or_default();
        assert_eq!(
            api_key.value, None,
            "the key itself must never be in the pod spec"
        );
        let selector = api_key
            .value_from
            .and_then(|v| v.secret_key_ref)
            .unwrap_or_default();
        assert_eq!(
            (selector.name.as_str(), selector.key.as_str()),
            ("key", "api-key")
        );
    }

    #[test]
    fn equal_connection_specs_hash_equal_whatever_their_kind() {
        let a = ConnectionSpec {
            host_port: "t:7233".into(),
            ..Default::default()
        };
        assert_eq!(connection_hash(&a), connection_hash(&a.clone()));
        let b = ConnectionSpec {
            host_port: "u:7233".into(),
            ..Default::default()
        };
        assert_ne!(connection_hash(&a), connection_hash(&b));
    }

    #[test]
    fn a_connection_change_replaces_only_what_was_injected() {
        let wd = wd();
        let mtls: ConnectionSpec = serde_json::from_value(json!({
            "hostPort": "old:7233", "mutualTLSSecretRef": {"name": "old-cert"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let api_key: ConnectionSpec = serde_json::from_value(json!({
            "hostPort": "new:7233", "apiKeySecretRef": {"name": "key", "key": "k"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        // The old version's own template had its own user variable.
        let mut old_wd = wd.clone();
        if let Some(spec) = old_wd.spec.template.spec.as_mut() {
            spec.containers[0].env = Some(vec![env("OLD_USER_VAR", "kept")]);
        }
        let existing = with_replicas(versioned_deployment(&old_wd, "b1", &mtls), 3);
        let moved = reconnected(&existing, &wd, "b1", &api_key).unwrap_or_else(|| panic!("none"));
        let env = env_of(&moved);
        assert_eq!(env["OLD_USER_VAR"].value.as_deref(), Some("kept"));
        assert!(
            !env.contains_key("USER_VAR"),
            "the current template is not mixed in"
        );
        assert_eq!(env["TEMPORAL_ADDRESS"].value.as_deref(), Some("new:7233"));
        assert!(env.contains_key("TEMPORAL_API_KEY"));
        assert!(!env.contains_key("TEMPORAL_TLS_CLIENT_CERT_PATH"));
        let pod = moved
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .unwrap_or_default();
        assert!(
            pod.volumes.unwrap_or_default().is_empty(),
            "the TLS volume is gone"
        );
        assert_eq!(
            moved.spec.as_ref().and_then(|s| s.replicas),
            Some(3),
            "replicas kept"
        );
        let ann = moved
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.clone())
            .and_then(|m| m.annotations)
            .unwrap_or_default();
        assert_eq!(ann[labels::CONNECTION_SPEC_HASH], connection_hash(&api_key));
        // A Deployment TWC created has no record: what TWC injects is replaced, the user's
        // own variables are kept.
        let mut from_twc = existing.clone();
        from_twc.annotations_mut().remove(INJECTED_ENV);
        let moved = reconnected(&from_twc, &wd, "b1", &api_key).unwrap_or_else(|| panic!("none"));
        let env = env_of(&moved);
        assert_eq!(env["OLD_USER_VAR"].value.as_deref(), Some("kept"));
        assert_eq!(env["TEMPORAL_ADDRESS"].value.as_deref(), Some("new:7233"));
        assert!(!env.contains_key("TEMPORAL_TLS_CLIENT_CERT_PATH"));
        assert_eq!(
            moved.annotations().get(INJECTED_ENV).map(String::as_str),
            Some(
                "TEMPORAL_ADDRESS,TEMPORAL_NAMESPACE,TEMPORAL_DEPLOYMENT_NAME,TEMPORAL_WORKER_BUILD_ID,TEMPORAL_API_KEY"
            ),
            "the moved Deployment records what it now holds"
        );
    }

    /// The reference cases: what TWC's own code renders for 30 WorkerDeployments and four
    /// connection kinds (`shared/reference/twc-build-ids.json`).
    fn twc_cases() -> serde_json::Value {
        serde_json::from_str(include_str!(
            "../../../gocompat/tests/data/twc-build-ids.json"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A Deployment TWC created is adopted only if its pod template is exactly what this
    /// controller would apply: one field more or less is a new ReplicaSet, and every worker
    /// restarts. So each rendered field is compared with TWC's, for every case and connection.
    #[test]
    fn renders_the_deployment_twc_renders() {
        let cases = twc_cases();
        let connections = cases["connections"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut compared = 0;
        for case in cases["cases"].as_array().cloned().unwrap_or_default() {
            let name = case["name"].as_str().unwrap_or_default().to_string();
            let mut raw = case["workerDeployment"].clone();
            if raw["spec"].get("rollout").is_none() {
                raw["spec"]["rollout"] = json!({"strategy": "AllAtOnce"});
            }
            raw["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000001");
            let wd: WorkerDeployment =
                serde_json::from_value(raw).unwrap_or_else(|e| panic!("{name}: {e}"));
            let build = case["buildID"].as_str().unwrap_or_default();
            for (kind, conn) in &connections {
                let conn: ConnectionSpec = serde_json::from_value(conn.clone())
                    .unwrap_or_else(|e| panic!("{name}/{kind}: {e}"));
                let ours = versioned_deployment(&wd, build, &conn);
                let theirs: Deployment =
                    serde_json::from_value(case["renderedDeployments"][kind].clone())
                        .unwrap_or_else(|e| panic!("{name}/{kind}: {e}"));
                let at = format!("{name}/{kind}");
                assert_eq!(ours.metadata.name, theirs.metadata.name, "{at}: name");
                assert_eq!(ours.metadata.namespace, theirs.metadata.namespace, "{at}");
                assert_eq!(ours.metadata.labels, theirs.metadata.labels, "{at}: labels");
                let mut annotations = ours.annotations().clone();
                annotations.remove(INJECTED_ENV);
                assert_eq!(
                    annotations,
                    theirs.annotations().clone(),
                    "{at}: annotations (besides the record of what was injected)"
                );
                // TWC then makes its owner reference the controller reference.
                let mut owner = theirs.metadata.owner_references.clone().unwrap_or_default();
                for o in owner.iter_mut() {
                    o.controller = Some(true);
                }
                assert_eq!(
                    ours.metadata.owner_references.clone().unwrap_or_default(),
                    owner,
                    "{at}: owner"
                );
                let (ours, theirs) = (
                    ours.spec.unwrap_or_default(),
                    theirs.spec.unwrap_or_default(),
                );
                assert_eq!(ours.replicas, theirs.replicas, "{at}: replicas");
                assert_eq!(ours.selector, theirs.selector, "{at}: selector");
                assert_eq!(
                    ours.min_ready_seconds.unwrap_or(0),
                    theirs.min_ready_seconds.unwrap_or(0),
                    "{at}: minReadySeconds"
                );
                assert_eq!(
                    ours.strategy,
                    theirs.strategy.filter(|s| s != &Default::default()),
                    "{at}: strategy"
                );
                // Compared as the apiserver stores them (Go's JSON of the Go types: an empty
                // `resources` is `{}` in both), byte for byte.
                let stored = |t: &PodTemplateSpec| {
                    twc_gocompat::pod_template_spec(&serde_json::to_value(t).unwrap_or_default())
                        .unwrap_or_else(|e| panic!("{at}: {e}"))
                };
                assert_eq!(
                    stored(&ours.template),
                    stored(&theirs.template),
                    "{at}: pod template"
                );
                compared += 1;
            }
        }
        assert_eq!(compared, 30 * 4);
    }
}
