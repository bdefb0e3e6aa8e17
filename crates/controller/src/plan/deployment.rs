//! The versioned Deployment of one build ID: the user's pod template plus what the worker
//! needs to reach Temporal as that version, exactly the variables and mounts TWC injects.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, PodTemplateSpec, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};
use twc_api::{AuthMode, ConnectionSpec, GroupView, WorkerDeployment, labels};

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

/// What a worker pod sees of a connection beside [`connection_hash`] (which is TWC's and
/// leaves these out): how it authenticates, and from which Secret and key. `mtls:<Secret>`,
/// `api-key:<Secret>:<key>`, both joined by `+` (a Deployment TWC left with both after an
/// auth-mode change), or `none`. Read from the Deployment itself ([`pod_auth`]) and compared
/// with the connection's ([`auth_of`]): a difference rolls the Deployment like any other
/// connection change.
pub fn auth_fingerprint(mtls_secret: Option<&str>, api_key: Option<(&str, &str)>) -> String {
    let mut parts = Vec::new();
    if let Some(secret) = mtls_secret {
        parts.push(format!("mtls:{secret}"));
    }
    if let Some((name, key)) = api_key {
        parts.push(format!("api-key:{name}:{key}"));
    }
    if parts.is_empty() {
        return "none".into();
    }
    parts.join("+")
}

/// [`auth_fingerprint`] of what the connection `conn` makes the pods mount and read.
pub fn auth_of(conn: &ConnectionSpec) -> String {
    match conn.auth_mode() {
        AuthMode::MutualTls => auth_fingerprint(Some(conn.secret_name().unwrap_or_default()), None),
        AuthMode::ApiKey => {
            let selector = conn.api_key_secret_ref.clone().unwrap_or_default();
            auth_fingerprint(None, Some((&selector.name, &selector.key)))
        }
        AuthMode::None => auth_fingerprint(None, None),
    }
}

/// [`auth_fingerprint`] of a pod template as rendered: the mTLS Secret volume, the
/// `TEMPORAL_API_KEY` variable's Secret and key.
pub fn pod_auth<'a>(
    volumes: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    api_key_env: Option<(&'a str, &'a str)>,
) -> String {
    let mtls = volumes
        .into_iter()
        .find(|(name, _)| *name == TLS_VOLUME)
        .map(|(_, secret)| secret.unwrap_or_default());
    auth_fingerprint(mtls, api_key_env)
}

/// What the pods of a version must see of the connection: TWC's [`connection_hash`] and the
/// [`auth_of`] it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodConnection {
    pub hash: String,
    pub auth: String,
}

impl PodConnection {
    pub fn of(conn: &ConnectionSpec) -> Self {
        Self {
            hash: connection_hash(conn),
            auth: auth_of(conn),
        }
    }

    /// Whether `d`'s pods see this connection (an auth not read, as in a test's fixture,
    /// counts as the same).
    pub fn holds(&self, d: &crate::observed::ObservedDeployment) -> bool {
        d.each().all(|m| {
            m.connection_hash.as_deref() == Some(self.hash.as_str())
                && m.auth.as_ref().is_none_or(|a| *a == self.auth)
        })
    }
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

/// The pod template of a version's group (the user's template with the injections, labels and
/// hash annotations, field for field what TWC renders) and the [`INJECTED_ENV`] record of it.
fn pod_template(
    wd: &WorkerDeployment,
    group: &GroupView,
    selector: &BTreeMap<String, String>,
    build_id: &str,
    conn: &ConnectionSpec,
) -> (PodTemplateSpec, String) {
    let mut template = group.template.clone();
    let meta = template.metadata.get_or_insert_with(Default::default);
    let labels = meta.labels.get_or_insert_with(Default::default);
    labels.extend(selector.clone());
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(
            labels::POD_TEMPLATE_SPEC_HASH.into(),
            template_digest(group.template),
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
    // Rendered as its group's (the first, for a group the spec no longer has), then its own
    // name and selector kept (immutable; a worker group's has the group label).
    let group = existing
        .labels()
        .get(labels::WORKER_GROUP)
        .map_or(twc_api::DEFAULT_GROUP, String::as_str);
    let views = wd.spec.group_views();
    let view = views.iter().find(|g| g.name == group).or(views.first())?;
    let mut d = group_deployment(wd, view, build_id, conn);
    d.metadata.name = existing.metadata.name.clone();
    d.metadata.labels = spec.selector.match_labels.clone();
    if let Some(new_spec) = d.spec.as_mut() {
        new_spec.selector = spec.selector.clone();
        new_spec.replicas = spec.replicas;
        new_spec.min_ready_seconds = spec.min_ready_seconds;
        if new_spec.strategy.is_none() {
            new_spec.strategy = spec.strategy.clone();
        }
        new_spec.template = template;
    }
    Some(d)
}

/// The full versioned Deployment for server-side apply, of a WorkerDeployment without groups
/// (with groups: the first group's; see [`versioned_deployments`]).
pub fn versioned_deployment(
    wd: &WorkerDeployment,
    build_id: &str,
    conn: &ConnectionSpec,
) -> Deployment {
    let groups = wd.spec.group_views();
    match groups.first() {
        Some(group) => group_deployment(wd, group, build_id, conn),
        None => Deployment::default(),
    }
}

/// Every Deployment of version `build_id`, one per worker group in the groups' order (one for
/// a WorkerDeployment without groups).
pub fn versioned_deployments(
    wd: &WorkerDeployment,
    build_id: &str,
    conn: &ConnectionSpec,
) -> Vec<Deployment> {
    wd.spec
        .group_views()
        .iter()
        .map(|g| group_deployment(wd, g, build_id, conn))
        .collect()
}

/// The Deployment of `group` in version `build_id`: without groups, TWC's name and selector
/// (`<wd>-<build ID>`); with them, upstream's per-group name and a selector with the group
/// label, so no two selectors of a version overlap.
pub fn group_deployment(
    wd: &WorkerDeployment,
    group: &GroupView,
    build_id: &str,
    conn: &ConnectionSpec,
) -> Deployment {
    let wd_name = wd.name_any();
    let (name, selector) = if wd.spec.has_worker_groups() {
        (
            super::group_ids::deployment_name(&wd_name, group.name, build_id),
            super::group_ids::selector_labels(&wd_name, group.name, build_id),
        )
    } else {
        (
            deployment_name(&wd_name, build_id),
            selector_labels(&wd_name, build_id),
        )
    };
    let owner = wd.controller_owner_ref(&()).map(|mut o: OwnerReference| {
        o.block_owner_deletion = Some(true);
        o
    });
    let (template, record) = pod_template(wd, group, &selector, build_id, conn);
    // TWC's Deployment annotations are the template's; ours adds the record of what was
    // injected (metadata only: it never rolls a pod).
    let mut annotations = group
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
            replicas: group.replicas,
            min_ready_seconds: Some(group.min_ready_seconds),
            // With TWC's defaults filled (RollingUpdate, 25 % / 25 %); omitted, Kubernetes'.
            strategy: group.strategy.clone(),
            // Only `spec.deployment`'s reach the Deployment (the top-level deadline is the
            // rollout's alone, as before it).
            progress_deadline_seconds: group.progress_deadline_seconds,
            revision_history_limit: group.revision_history_limit,
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

/// What an existing versioned Deployment is patched with so that its Deployment-level
/// settings are the spec's (no pod rolls): each field None is already as wanted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SettingsChange {
    /// `spec.strategy`, with `apps/v1`'s defaults filled.
    pub strategy: Option<DeploymentStrategy>,
    pub min_ready_seconds: Option<i32>,
    pub progress_deadline_seconds: Option<i32>,
    pub revision_history_limit: Option<i32>,
}

impl SettingsChange {
    fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// The spec's Deployment-level settings on every versioned Deployment, old versions included
/// (TWC's update path does the same for the strategy): (name, change) of each one that
/// differs, but none `skip` names (re-applied whole or deleted in the same plan). The strategy
/// comes from `spec.deployment.strategy` or `spec.deploymentStrategy` (without either, each
/// Deployment keeps its own); `minReadySeconds`, `progressDeadlineSeconds` and
/// `revisionHistoryLimit` only from `spec.deployment` (with the deprecated fields they are set
/// when a Deployment is made, as TWC does).
pub fn settings_changes(
    wd: &WorkerDeployment,
    observed: &crate::observed::Observed,
    skip: impl Fn(&str) -> bool,
) -> Vec<(String, SettingsChange)> {
    use twc_api::deployment_strategy::defaulted;
    // With the deprecated fields only the strategy is kept in step (TWC's rule).
    let every_setting = wd.spec.deployment.is_some() || wd.spec.has_worker_groups();
    let groups = wd.spec.group_views();
    let differs = |want: Option<i32>, have: Option<i32>| want.filter(|w| Some(*w) != have);
    observed
        .deployments
        .values()
        .flat_map(|v| v.each())
        .filter(|d| !skip(&d.name))
        .filter_map(|d| {
            // A group gone from the spec keeps what it has.
            let group = groups.iter().find(|g| g.name == d.group)?;
            let mut change = SettingsChange {
                strategy: group
                    .strategy
                    .clone()
                    .filter(|w| &defaulted(&d.strategy.clone().unwrap_or_default()) != w),
                ..Default::default()
            };
            if every_setting {
                change.min_ready_seconds = differs(
                    Some(group.min_ready_seconds),
                    Some(d.min_ready_seconds.unwrap_or(0)),
                );
                change.progress_deadline_seconds =
                    differs(group.progress_deadline_seconds, d.progress_deadline_seconds);
                change.revision_history_limit =
                    differs(group.revision_history_limit, d.revision_history_limit);
            }
            (!change.is_empty()).then(|| (d.name.clone(), change))
        })
        .collect()
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
#[path = "deployment_tests.rs"]
mod tests;
