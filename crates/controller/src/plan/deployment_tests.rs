//! Tests of the versioned Deployment: what is injected, the connection hash and its changes,
//! and the Deployments TWC renders.

use super::*;
use k8s_openapi::api::apps::v1::DeploymentStrategy;
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

/// `spec.deploymentStrategy` as TWC renders it (`gocompat/tests/data/twc-deployment-strategy.json`
/// says how the cases were derived): the build ID and every other field are those of the same
/// WorkerDeployment without it, and the Deployment's strategy has TWC's defaults filled.
#[test]
fn renders_the_deployment_strategy_twc_renders_and_keeps_the_build_id() {
    let twc = twc_cases();
    let strategies: serde_json::Value = serde_json::from_str(include_str!(
        "../../../gocompat/tests/data/twc-deployment-strategy.json"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let conn: ConnectionSpec = serde_json::from_value(twc["connections"]["plain"].clone())
        .unwrap_or_else(|e| panic!("{e}"));
    let cases = strategies["cases"].as_array().cloned().unwrap_or_default();
    assert_eq!(cases.len(), 5);
    for case in cases {
        let name = case["base"].as_str().unwrap_or_default();
        let base = twc["cases"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == name))
            .unwrap_or_else(|| panic!("no base case {name}"));
        let mut raw = base["workerDeployment"].clone();
        if raw["spec"].get("rollout").is_none() {
            raw["spec"]["rollout"] = json!({"strategy": "AllAtOnce"});
        }
        raw["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000001");
        let plain: WorkerDeployment =
            serde_json::from_value(raw.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        raw["spec"]["deploymentStrategy"] = case["deploymentStrategy"].clone();
        let with: WorkerDeployment =
            serde_json::from_value(raw).unwrap_or_else(|e| panic!("{name}: {e}"));
        let custom = with.spec.worker_options.unsafe_custom_build_id.as_deref();
        let build = super::super::build_id::build_id(&with.spec.template, custom);
        assert_eq!(
            build,
            base["buildID"].as_str().unwrap_or_default(),
            "{name}"
        );
        let ours = versioned_deployment(&with, &build, &conn);
        let mut without = versioned_deployment(&plain, &build, &conn);
        let wanted: DeploymentStrategy = serde_json::from_value(case["renderedStrategy"].clone())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(s) = without.spec.as_mut() {
            s.strategy = Some(wanted);
        }
        assert_eq!(ours, without, "{name}");
    }
}

/// `spec.deployment` (TWC's newer form) renders the same versioned Deployment as the
/// deprecated fields for the same pod, plus the Deployment settings it holds; the deprecated
/// top-level fields beside it are ignored, as upstream ignores them.
#[test]
fn spec_deployment_renders_the_same_pods_with_its_deployment_settings() {
    let conn = ConnectionSpec {
        host_port: "t:7233".into(),
        ..Default::default()
    };
    let old = wd();
    let mut new = wd();
    new.spec.deployment = Some(
        serde_json::from_value(json!({
            "replicas": 4, "minReadySeconds": 5, "progressDeadlineSeconds": 120,
            "revisionHistoryLimit": 3, "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"ignored": "yes"}},
            "template": serde_json::to_value(&old.spec.template).unwrap_or_default(),
        }))
        .unwrap_or_else(|e| panic!("{e}")),
    );
    new.spec.template = Default::default();
    new.spec.min_ready_seconds = 30;
    new.spec.progress_deadline_seconds = Some(0);
    let (a, b) = (
        versioned_deployment(&old, "v1-d975", &conn),
        versioned_deployment(&new, "v1-d975", &conn),
    );
    assert_eq!(a.metadata, b.metadata);
    let (a, b) = (a.spec.unwrap_or_default(), b.spec.unwrap_or_default());
    assert_eq!(a.template, b.template, "the same pods");
    assert_eq!(a.selector, b.selector, "the controller's selector");
    assert_eq!((a.replicas, b.replicas), (Some(2), Some(4)));
    assert_eq!(
        (a.min_ready_seconds, b.min_ready_seconds),
        (Some(0), Some(5))
    );
    assert_eq!(
        (a.progress_deadline_seconds, b.progress_deadline_seconds),
        (None, Some(120)),
        "only spec.deployment's deadline reaches the Deployment"
    );
    assert_eq!(
        (a.revision_history_limit, b.revision_history_limit),
        (None, Some(3))
    );
    assert_eq!(a.strategy, None, "Kubernetes' default, as before");
    assert_eq!(
        b.strategy.and_then(|s| s.type_).as_deref(),
        Some("Recreate")
    );
    assert_eq!(
        crate::plan::guard::deadline(&new),
        Some(std::time::Duration::from_secs(120)),
        "spec.deployment's deadline is also the rollout's"
    );
}

/// Upstream's own rendering (`twc-group-build-ids.json`, 16 WorkerDeployments, with and
/// without groups, in either form): the build ID, each Deployment's name, labels, selector,
/// replicas, pod labels, template digest and strategy (with the deprecated `spec.template`,
/// where we leave the strategy to Kubernetes, it fills the same one on creation).
#[test]
fn renders_upstreams_deployments() {
    let golden: serde_json::Value = serde_json::from_str(include_str!(
        "../../../gocompat/tests/data/twc-group-build-ids.json"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    fn json<T: serde::Serialize>(v: &T) -> serde_json::Value {
        serde_json::to_value(v).unwrap_or_default()
    }
    let mut seen = (0, 0);
    for case in golden["cases"].as_array().into_iter().flatten() {
        let input = &case["input"];
        let name = input["name"].as_str().unwrap_or_default();
        let mut spec = input["spec"].clone();
        spec["workerOptions"]["connectionRef"] = json!({"name": "c"});
        let wd: WorkerDeployment = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": input["wdName"], "namespace": input["namespace"], "uid": "u"},
            "spec": spec,
        }))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let build = crate::plan::target_build_id(&wd);
        assert_eq!(
            build,
            case["buildID"].as_str().unwrap_or_default(),
            "{name}"
        );
        let rendered = versioned_deployments(&wd, &build, &ConnectionSpec::default());
        let expected = case["groups"].as_array().cloned().unwrap_or_default();
        assert_eq!(rendered.len(), expected.len(), "{name}");
        let grouped = wd.spec.has_worker_groups();
        if grouped {
            seen.1 += 1;
        } else {
            seen.0 += 1;
        }
        for g in &expected {
            let group = g["group"].as_str().unwrap_or_default();
            let what = format!("{name} {group}");
            let d = rendered
                .iter()
                .find(|d| json(&d.metadata.name) == g["renderedName"])
                .unwrap_or_else(|| panic!("{what}: no Deployment {}", g["renderedName"]));
            assert_eq!(json(&d.metadata.labels), g["renderedLabels"], "{what}");
            let spec = d.spec.clone().unwrap_or_default();
            assert_eq!(json(&spec.selector), g["renderedSelector"], "{what}");
            assert_eq!(json(&spec.replicas), g["renderedReplicas"], "{what}");
            let meta = spec.template.metadata.unwrap_or_default();
            assert_eq!(json(&meta.labels), g["renderedPodLabels"], "{what}");
            assert_eq!(
                meta.annotations
                    .unwrap_or_default()
                    .get(labels::POD_TEMPLATE_SPEC_HASH)
                    .map(String::as_str),
                g["renderedPodTemplateSpecHashAnnotation"].as_str(),
                "{what}"
            );
            if wd.spec.deployment.is_some() || grouped {
                assert_eq!(json(&spec.strategy), g["renderedStrategy"], "{what}");
            }
        }
    }
    assert_eq!(seen, (3, 13));
}

/// A worker group's Deployment moved to a new connection stays that group's: its name,
/// selector and group label, its replicas, and the settings of its own group (not the first
/// group's).
#[test]
fn a_groups_deployment_is_reconnected_as_that_group() {
    let mut grouped = wd();
    grouped.spec.template = Default::default();
    grouped.spec.worker_groups = Some(
        serde_json::from_value(json!([
            {"name": "activities", "deployment": {"replicas": 3, "revisionHistoryLimit": 1,
                "template": {"spec": {"containers": [{"name": "a", "image": "a:1"}]}}}},
            {"name": "workflows", "deployment": {"replicas": 1, "revisionHistoryLimit": 7,
                "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}}},
        ]))
        .unwrap_or_else(|e| panic!("{e}")),
    );
    let old = ConnectionSpec {
        host_port: "old:7233".into(),
        ..Default::default()
    };
    let new = ConnectionSpec {
        host_port: "new:7233".into(),
        ..Default::default()
    };
    let views = grouped.spec.group_views();
    let workflows = views
        .iter()
        .find(|g| g.name == "workflows")
        .unwrap_or_else(|| panic!("no workflows group"));
    let existing = group_deployment(&grouped, workflows, "b1", &old);
    let moved = reconnected(&existing, &grouped, "b1", &new).unwrap_or_else(|| panic!("none"));
    assert_eq!(moved.metadata.name, existing.metadata.name);
    assert_eq!(
        moved.metadata.labels.clone().unwrap_or_default()[labels::WORKER_GROUP],
        "workflows"
    );
    let (was, now) = (
        existing.spec.clone().unwrap_or_default(),
        moved.spec.clone().unwrap_or_default(),
    );
    assert_eq!(now.selector, was.selector);
    assert_eq!(
        (now.replicas, now.revision_history_limit),
        (Some(1), Some(7))
    );
    assert_eq!(
        env_of(&moved)["TEMPORAL_ADDRESS"].value.as_deref(),
        Some("new:7233")
    );
}
