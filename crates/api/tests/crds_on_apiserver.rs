//! The generated CRDs on a real kube-apiserver: every CEL rule rejects what it should with its
//! message and accepts valid input, TWC manifests apply unchanged and round-trip, defaults are
//! applied, unknown fields are pruned, and `kubectl explain` shows our descriptions.

use std::path::PathBuf;

use kube::api::{DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use twc_api::{ClusterConnection, Connection, WorkerDeployment, WorkerResourceTemplate};
use twc_testenv::TestEnv;

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn setup() -> Result<(&'static TestEnv, Client), twc_testenv::Error> {
    let env = twc_testenv::shared().await?;
    let client = env.client().await?;
    twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;
    Ok((env, client))
}

fn api(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("temporal.io", "v1alpha1", kind);
    let plural = match kind {
        "WorkerDeployment" => "workerdeployments",
        "Connection" => "connections",
        "ClusterConnection" => "clusterconnections",
        _ => "workerresourcetemplates",
    };
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    if kind == "ClusterConnection" {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), ns, &ar)
    }
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture does not parse: {e}"))
}

fn minimal_wd(name: &str) -> Value {
    json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"containers": [{"name": "worker", "image": "worker:v1"}]}},
            "rollout": {"strategy": "AllAtOnce"},
            "workerOptions": {"connectionRef": {"name": "conn"}, "temporalNamespace": "default"}
        }
    })
}

fn minimal_connection(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": kind,
        "metadata": {"name": name},
        "spec": {"hostPort": "temporal.example.com:7233"}
    })
}

/// Sets `value` at the `/`-separated `path` (numeric segments index arrays).
fn set(mut v: Value, path: &str, value: Value) -> Value {
    let mut cur = &mut v;
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i == parts.len() - 1;
        if let Ok(idx) = part.parse::<usize>() {
            let arr = cur
                .as_array_mut()
                .unwrap_or_else(|| panic!("{path}: not an array"));
            if last {
                arr[idx] = value;
                return v;
            }
            cur = &mut arr[idx];
        } else {
            let obj = cur
                .as_object_mut()
                .unwrap_or_else(|| panic!("{path}: not an object"));
            if last {
                obj.insert(part.to_string(), value);
                return v;
            }
            cur = obj.entry(part.to_string()).or_insert_with(|| json!({}));
        }
    }
    v
}

async fn create(api: &Api<DynamicObject>, v: Value) -> Result<DynamicObject, kube::Error> {
    api.create(&PostParams::default(), &object(v)).await
}

/// Creates `v` and asserts the apiserver rejects it with a message containing `expected`.
async fn assert_rejected(api: &Api<DynamicObject>, case: &str, v: Value, expected: &str) {
    match create(api, v).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{case}: {s:?}");
            assert!(
                s.message.contains(expected),
                "{case}: expected a message containing {expected:?}, got {:?}",
                s.message
            );
        }
        Ok(_) => panic!("{case}: the apiserver accepted an invalid object"),
        Err(e) => panic!("{case}: unexpected error {e}"),
    }
}

#[tokio::test]
async fn every_cel_rule_rejects_bad_input_and_accepts_good_input() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("cel").await?;
    let wds = api(&client, &ns, "WorkerDeployment");
    let step = |ramp: i64, pause: &str| json!({"rampPercentage": ramp, "pauseDuration": pause});
    let progressive = |steps: Value| {
        set(
            minimal_wd("p"),
            "spec/rollout",
            json!({"strategy": "Progressive", "steps": steps}),
        )
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "a name longer than 63 characters",
            minimal_wd(&"w".repeat(64)),
            "name cannot be more than 63 characters",
        ),
        (
            "Progressive without steps",
            set(
                minimal_wd("p"),
                "spec/rollout/strategy",
                json!("Progressive"),
            ),
            "steps are required for Progressive rollout",
        ),
        (
            "gate inputFrom with both sources",
            set(
                minimal_wd("g"),
                "spec/rollout/gate",
                json!({"workflowType": "Gate", "inputFrom": {
                    "configMapKeyRef": {"name": "a", "key": "k"},
                    "secretKeyRef": {"name": "b", "key": "k"}}}),
            ),
            "exactly one of configMapKeyRef or secretKeyRef must be set",
        ),
        (
            "gate inputFrom with no source",
            set(
                minimal_wd("g"),
                "spec/rollout/gate",
                json!({"workflowType": "Gate", "inputFrom": {}}),
            ),
            "exactly one of configMapKeyRef or secretKeyRef must be set",
        ),
        (
            "a pause shorter than 30s",
            progressive(json!([step(10, "10s")])),
            "pause duration must be at least 30s",
        ),
        (
            "decreasing ramps",
            progressive(json!([step(50, "1m"), step(20, "1m")])),
            "steps[].rampPercentage must be strictly increasing from one step to the next",
        ),
        (
            "repeated ramps",
            progressive(json!([step(20, "1m"), step(20, "1m")])),
            "steps[].rampPercentage must be strictly increasing from one step to the next",
        ),
        (
            "more than 20 steps",
            progressive(Value::Array((1..=21).map(|i| step(i, "1m")).collect())),
            "must have at most 20 items",
        ),
        (
            "a ramp of 100",
            progressive(json!([step(100, "1m")])),
            "should be less than or equal to 99",
        ),
        (
            "a ramp of 0",
            progressive(json!([step(0, "1m")])),
            "should be greater than or equal to 1",
        ),
        (
            "a scaledownDelay that is not a duration",
            set(minimal_wd("s"), "spec/sunset/scaledownDelay", json!("soon")),
            "scaledownDelay",
        ),
        (
            "a negative deleteDelay",
            set(minimal_wd("s"), "spec/sunset/deleteDelay", json!("-1h")),
            "deleteDelay must be a non-negative duration such as 1h or 24h",
        ),
        (
            "an unknown strategy",
            set(minimal_wd("s"), "spec/rollout/strategy", json!("Sometimes")),
            "supported values: \"Manual\", \"AllAtOnce\", \"Progressive\"",
        ),
        (
            "an empty temporalNamespace",
            set(
                minimal_wd("t"),
                "spec/workerOptions/temporalNamespace",
                json!(""),
            ),
            "spec.workerOptions.temporalNamespace",
        ),
        (
            "a custom build ID with a leading dash",
            set(
                minimal_wd("b"),
                "spec/workerOptions/unsafeCustomBuildID",
                json!("-build"),
            ),
            "spec.workerOptions.unsafeCustomBuildID",
        ),
    ];
    for (case, v, expected) in cases {
        assert_rejected(&wds, case, v, expected).await;
    }
    // The minimal valid object and a valid Progressive rollout are accepted.
    create(&wds, minimal_wd("valid")).await?;
    create(
        &wds,
        set(
            progressive(json!([step(1, "30s"), step(50, "1h"), step(99, "24h")])),
            "metadata/name",
            json!("valid-progressive"),
        ),
    )
    .await?;
    create(
        &wds,
        set(minimal_wd(&"w".repeat(63)), "spec/replicas", json!(3)),
    )
    .await?;

    // Connection and ClusterConnection share the spec rules.
    for kind in ["Connection", "ClusterConnection"] {
        let conns = api(&client, &ns, kind);
        let name = format!("{}-{}", kind.to_lowercase(), &ns);
        assert_rejected(
            &conns,
            &format!("{kind} with both secrets"),
            set(
                set(
                    minimal_connection(kind, &name),
                    "spec/mutualTLSSecretRef",
                    json!({"name": "m"}),
                ),
                "spec/apiKeySecretRef",
                json!({"name": "k", "key": "api-key"}),
            ),
            "Only one of mutualTLSSecretRef or apiKeySecretRef may be set",
        )
        .await;
        // mTLS with a CA Secret (the way to tell the workers about a private CA) is accepted.
        let with_ca = create(
            &conns,
            set(
                set(
                    minimal_connection(kind, &format!("{name}-ca")),
                    "spec/mutualTLSSecretRef",
                    json!({"name": "m"}),
                ),
                "spec/tls/caCertSecretRef",
                json!({"name": "m"}),
            ),
        )
        .await?;
        conns
            .delete(&with_ca.name_any(), &Default::default())
            .await?;
        assert_rejected(
            &conns,
            &format!("{kind} with a hostPort without port"),
            set(
                minimal_connection(kind, &name),
                "spec/hostPort",
                json!("temporal.example.com"),
            ),
            "spec.hostPort",
        )
        .await;
        let created = create(&conns, minimal_connection(kind, &name)).await?;
        if kind == "ClusterConnection" {
            // Cluster-scoped: stored without a namespace.
            assert_eq!(created.metadata.namespace, None);
            conns.delete(&name, &Default::default()).await?;
        }
    }

    let wrts = api(&client, &ns, "WorkerResourceTemplate");
    let wrt = json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
        "metadata": {"name": "hpa"},
        "spec": {"template": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler"}}
    });
    assert_rejected(
        &wrts,
        "WRT without a reference",
        wrt.clone(),
        "workerDeploymentRef is required",
    )
    .await;
    assert_rejected(
        &wrts,
        "WRT with both references",
        set(
            set(
                wrt.clone(),
                "spec/workerDeploymentRef",
                json!({"name": "a"}),
            ),
            "spec/temporalWorkerDeploymentRef",
            json!({"name": "a"}),
        ),
        "set only one of workerDeploymentRef and the deprecated temporalWorkerDeploymentRef",
    )
    .await;
    create(
        &wrts,
        set(wrt, "spec/workerDeploymentRef", json!({"name": "a"})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn connection_ref_takes_exactly_one_of_name_and_object_ref() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("connref").await?;
    let wds = api(&client, &ns, "WorkerDeployment");
    let with_ref =
        |name: &str, r: Value| set(minimal_wd(name), "spec/workerOptions/connectionRef", r);

    create(&wds, with_ref("by-name", json!({"name": "conn"}))).await?;
    let cluster = create(
        &wds,
        with_ref(
            "to-cluster",
            json!({"objectRef": {"kind": "ClusterConnection", "name": "shared"}}),
        ),
    )
    .await?;
    // apiGroup defaults to temporal.io.
    assert_eq!(
        cluster.data["spec"]["workerOptions"]["connectionRef"]["objectRef"]["apiGroup"],
        json!("temporal.io")
    );
    create(
        &wds,
        with_ref(
            "to-connection",
            json!({"objectRef": {"apiGroup": "temporal.io", "kind": "Connection", "name": "c"}}),
        ),
    )
    .await?;

    assert_rejected(
        &wds,
        "both name and objectRef",
        with_ref(
            "both",
            json!({"name": "conn", "objectRef": {"kind": "Connection", "name": "conn"}}),
        ),
        "connectionRef.name and connectionRef.objectRef are mutually exclusive: set only one",
    )
    .await;
    assert_rejected(
        &wds,
        "neither name nor objectRef",
        with_ref("neither", json!({})),
        "connectionRef needs either name (a Connection in this namespace) or objectRef (a Connection or ClusterConnection)",
    )
    .await;
    assert_rejected(
        &wds,
        "objectRef to a Secret",
        with_ref(
            "secret",
            json!({"objectRef": {"kind": "Secret", "name": "s"}}),
        ),
        "objectRef.kind must be Connection or ClusterConnection",
    )
    .await;
    assert_rejected(
        &wds,
        "objectRef in another group",
        with_ref(
            "group",
            json!({"objectRef": {"apiGroup": "v1", "kind": "Connection", "name": "s"}}),
        ),
        "objectRef.apiGroup must be temporal.io",
    )
    .await;
    assert_rejected(
        &wds,
        "objectRef with an invalid name",
        with_ref(
            "badname",
            json!({"objectRef": {"kind": "Connection", "name": "Not_A_Name"}}),
        ),
        "spec.workerOptions.connectionRef.objectRef.name",
    )
    .await;
    // The rejection names the field.
    match create(
        &wds,
        with_ref(
            "field",
            json!({"objectRef": {"kind": "Secret", "name": "s"}}),
        ),
    )
    .await
    {
        Err(kube::Error::Api(s)) => assert!(
            s.message
                .contains("spec.workerOptions.connectionRef.objectRef.kind"),
            "{}",
            s.message
        ),
        other => panic!("expected a rejection, got {other:?}"),
    }
    Ok(())
}

fn fixtures() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/twc");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{e}"));
            let v: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
            (
                p.file_name().unwrap_or_default().to_string_lossy().into(),
                v,
            )
        })
        .collect()
}

/// Every leaf of `want` is in `got` with the same value; returns the paths that differ.
fn missing(want: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                match g.get(k) {
                    Some(gv) => missing(wv, gv, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k} (absent)")),
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                missing(wv, gv, &format!("{path}[{i}]"), out);
            }
        }
        (w, g) if w == g => {}
        (w, g) => out.push(format!("{path}: {w} became {g}")),
    }
}

#[tokio::test]
async fn twc_manifests_apply_unchanged_and_round_trip() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("twc-compat").await?;
    for (file, manifest) in fixtures() {
        let kind = manifest["kind"].as_str().unwrap_or_default().to_string();
        let api = api(&client, &ns, &kind);
        let created = create(&api, manifest.clone())
            .await
            .map_err(|e| format!("{file}: rejected: {e}"))?;
        let stored = serde_json::to_value(&created)?;
        let mut lost = Vec::new();
        missing(&manifest["spec"], &stored["spec"], "spec", &mut lost);
        assert!(lost.is_empty(), "{file}: the apiserver lost {lost:?}");

        // Our types read the stored object and write it back without losing anything either.
        let through_types = match kind.as_str() {
            "WorkerDeployment" => {
                serde_json::to_value(serde_json::from_value::<WorkerDeployment>(stored.clone())?)?
            }
            "Connection" => {
                serde_json::to_value(serde_json::from_value::<Connection>(stored.clone())?)?
            }
            _ => serde_json::to_value(serde_json::from_value::<WorkerResourceTemplate>(
                stored.clone(),
            )?)?,
        };
        let mut lost = Vec::new();
        missing(&stored["spec"], &through_types["spec"], "spec", &mut lost);
        assert!(lost.is_empty(), "{file}: the Rust types lost {lost:?}");
    }
    Ok(())
}

#[tokio::test]
async fn defaults_are_applied_by_the_apiserver() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("defaults").await?;
    let wds = api(&client, &ns, "WorkerDeployment");
    // No sunset at all, as a newcomer might write it.
    let created = create(&wds, minimal_wd("defaults")).await?;
    let spec = &created.data["spec"];
    assert_eq!(spec["sunset"]["scaledownDelay"], json!("1h"), "{spec}");
    assert_eq!(spec["sunset"]["deleteDelay"], json!("24h"), "{spec}");
    assert_eq!(spec["minReadySeconds"], json!(0), "{spec}");
    assert_eq!(spec["progressDeadlineSeconds"], json!(600), "{spec}");
    assert_eq!(
        spec.get("replicas"),
        None,
        "replicas must stay unset for HPAs"
    );

    // An empty sunset, as TWC's docs write it, gets the same defaults.
    let created = create(
        &wds,
        set(minimal_wd("empty-sunset"), "spec/sunset", json!({})),
    )
    .await?;
    assert_eq!(
        created.data["spec"]["sunset"]["scaledownDelay"],
        json!("1h")
    );
    assert_eq!(created.data["spec"]["sunset"]["deleteDelay"], json!("24h"));

    // What the user set is kept.
    let created = create(
        &wds,
        set(
            minimal_wd("set-sunset"),
            "spec/sunset",
            json!({"scaledownDelay": "5m"}),
        ),
    )
    .await?;
    assert_eq!(
        created.data["spec"]["sunset"]["scaledownDelay"],
        json!("5m")
    );
    assert_eq!(created.data["spec"]["sunset"]["deleteDelay"], json!("24h"));

    // The typed object reads back through our types.
    let typed: Api<WorkerDeployment> = Api::namespaced(client.clone(), &ns);
    let wd = typed.get("defaults").await?;
    assert_eq!(wd.spec.sunset.delete_delay.as_deref(), Some("24h"));
    Ok(())
}

#[tokio::test]
async fn unknown_fields_are_pruned_and_nothing_else_is_lost() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("prune").await?;
    let wds = api(&client, &ns, "WorkerDeployment");
    let v = set(
        set(minimal_wd("prune"), "spec/notAField", json!(1)),
        "spec/rollout/alsoNot",
        json!("x"),
    );
    let created = create(&wds, v).await?;
    assert_eq!(created.data["spec"].get("notAField"), None);
    assert_eq!(created.data["spec"]["rollout"].get("alsoNot"), None);
    assert_eq!(
        created.data["spec"]["rollout"]["strategy"],
        json!("AllAtOnce")
    );
    // Free-form gate input is kept whole.
    let input = json!({"nested": {"deep": [1, {"x": null}]}, "n": 1.5});
    let created = create(
        &wds,
        set(
            minimal_wd("gate-input"),
            "spec/rollout/gate",
            json!({"workflowType": "Gate", "input": input}),
        ),
    )
    .await?;
    assert_eq!(created.data["spec"]["rollout"]["gate"]["input"], input);
    Ok(())
}

#[tokio::test]
async fn kubectl_explain_shows_our_descriptions() -> TestResult {
    let (env, _client) = setup().await?;
    let kubeconfig = env.control_plane.kubeconfig_path.clone();
    let explain = |path: &str| {
        let out = std::process::Command::new(twc_testenv::paths::kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["explain", path])
            .output()
            .unwrap_or_else(|e| panic!("kubectl: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl explain {path} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    // kubectl caches discovery; the CRDs were installed moments ago, so retry briefly.
    let mut text = String::new();
    for _ in 0..50 {
        let out = std::process::Command::new(twc_testenv::paths::kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "explain",
                "workerdeployment.spec.workerOptions.connectionRef.objectRef",
            ])
            .output()?;
        if out.status.success() {
            text = String::from_utf8_lossy(&out.stdout).into_owned();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        text.contains("A typed reference to a Connection"),
        "objectRef description missing: {text}"
    );
    assert!(text.contains("ClusterConnection"), "{text}");
    let kind = explain("workerdeployment.spec.workerOptions.connectionRef.objectRef.kind");
    assert!(
        kind.contains("`ClusterConnection` (cluster-scoped)"),
        "{kind}"
    );
    let cc = explain("clusterconnection.spec.mutualTLSSecretRef");
    // kubectl wraps lines: compare words.
    let words = cc.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("each WorkerDeployment's own namespace"),
        "{cc}"
    );
    let root = explain("clusterconnection");
    assert!(root.contains("cluster-scoped Connection"), "{root}");
    Ok(())
}

#[tokio::test]
async fn cluster_connection_round_trips_through_the_typed_api() -> TestResult {
    let (_env, client) = setup().await?;
    let api: Api<ClusterConnection> = Api::all(client);
    let name = format!(
        "typed-{}",
        twc_testenv::control_plane::random_token()[..6].to_owned()
    );
    let spec = twc_api::ConnectionSpec {
        host_port: "temporal.example.com:7233".into(),
        mutual_tls_secret_ref: Some(twc_api::SecretReference {
            name: "mtls".into(),
        }),
        ..Default::default()
    };
    let created = api
        .create(
            &PostParams::default(),
            &ClusterConnection::new(&name, spec.clone()),
        )
        .await?;
    assert_eq!(created.spec, spec);
    assert_eq!(api.get(&name).await?.spec, spec);
    api.delete(&name, &Default::default()).await?;
    Ok(())
}

/// `config/admission/workerresourcetemplate-authz.yaml` on the real apiserver: a user who may
/// create HPAs in a namespace may create a WorkerResourceTemplate of an HPA there; a user who
/// may create WorkerResourceTemplates but not HPAs is refused with a message naming what they
/// may not do (so a template cannot make the controller create it for them).
#[tokio::test]
async fn the_admission_policy_refuses_templates_the_user_may_not_create() -> TestResult {
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    let (env, admin) = setup().await?;
    apply_admission_policies(&admin).await?;
    let ns = env.namespace("wrt-authz").await?;
    let rule = |group: &str, resource: &str| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: ["create", "update", "patch", "delete", "get"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    };
    for (user, rules) in [
        (
            "may",
            vec![
                rule("temporal.io", "workerresourcetemplates"),
                rule("autoscaling", "horizontalpodautoscalers"),
            ],
        ),
        (
            "may-not",
            vec![rule("temporal.io", "workerresourcetemplates")],
        ),
    ] {
        let meta = kube::api::ObjectMeta {
            name: Some(user.into()),
            ..Default::default()
        };
        Api::<Role>::namespaced(admin.clone(), &ns)
            .create(
                &PostParams::default(),
                &Role {
                    metadata: meta.clone(),
                    rules: Some(rules),
                },
            )
            .await?;
        Api::<RoleBinding>::namespaced(admin.clone(), &ns)
            .create(
                &PostParams::default(),
                &RoleBinding {
                    metadata: meta,
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "Role".into(),
                        name: user.into(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "ServiceAccount".into(),
                        name: user.into(),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    }]),
                },
            )
            .await?;
    }
    let wrt = |name: &str| {
        object(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
            "metadata": {"name": name},
            "spec": {
                "workerDeploymentRef": {"name": "orders"},
                "template": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "spec": {"scaleTargetRef": {}, "minReplicas": 1, "maxReplicas": 3}}
            }
        }))
    };
    let may_not = env
        .control_plane
        .client_as_service_account(&ns, "may-not")
        .await?;
    let refused = api(&may_not, &ns, "WorkerResourceTemplate");
    // A new policy takes a moment to be enforced: wait until it refuses, then check both.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let message = loop {
        match refused
            .create(&PostParams::default(), &wrt("refused"))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => break s.message,
            Err(e) => return Err(e.into()),
            Ok(_) => {
                refused.delete("refused", &Default::default()).await?;
                assert!(
                    std::time::Instant::now() < deadline,
                    "the policy was never enforced"
                );
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    };
    assert!(
        message.contains(&format!(
            "system:serviceaccount:{ns}:may-not may not create horizontalpodautoscalers.autoscaling in namespace {ns}"
        )),
        "{message}"
    );
    let may = env
        .control_plane
        .client_as_service_account(&ns, "may")
        .await?;
    api(&may, &ns, "WorkerResourceTemplate")
        .create(&PostParams::default(), &wrt("allowed"))
        .await?;
    // An update that leaves the template as it is (as the controller's owner-reference patch)
    // is not checked; one that changes it is.
    use kube::api::{Patch, PatchParams};
    refused
        .patch(
            "allowed",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await?;
    let changed = refused
        .patch(
            "allowed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"maxReplicas": 5}}}})),
        )
        .await;
    match changed {
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => assert!(
            s.message
                .contains("may not update horizontalpodautoscalers"),
            "{}",
            s.message
        ),
        other => panic!("a template change by a user without HPA rights went through: {other:?}"),
    }
    Ok(())
}

/// Applies every policy of `config/admission/` (as `kubectl apply -f config/admission/` does).
async fn apply_admission_policies(admin: &Client) -> TestResult {
    use kube::api::{Patch, PatchParams};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/admission");
    for entry in std::fs::read_dir(dir)? {
        let policy = std::fs::read_to_string(entry?.path())?;
        for doc in serde_yaml::Deserializer::from_str(&policy) {
            let obj: DynamicObject = serde::Deserialize::deserialize(doc)?;
            let types = obj
                .types
                .clone()
                .ok_or("a policy document without a kind")?;
            let (group, version) = types.api_version.split_once('/').ok_or("no group")?;
            let kind = types.kind.to_lowercase();
            let plural = match kind.strip_suffix('y') {
                Some(stem) => format!("{stem}ies"),
                None => format!("{kind}s"),
            };
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, &types.kind),
                &plural,
            );
            let name = obj.metadata.name.clone().ok_or("no name")?;
            Api::<DynamicObject>::all_with(admin.clone(), &ar)
                .patch(
                    &name,
                    &PatchParams::apply("twc-test").force(),
                    &Patch::Apply(&obj),
                )
                .await?;
        }
    }
    Ok(())
}

/// TWC's webhook check that a CRD rule cannot make (`input` is schemaless):
/// `config/admission/workerdeployment-gate-input.yaml` refuses a gate with both `input` and
/// `inputFrom` with TWC's message, and lets either alone through.
#[tokio::test]
async fn a_gate_with_both_input_and_input_from_is_refused_with_twcs_message() -> TestResult {
    let (env, admin) = setup().await?;
    apply_admission_policies(&admin).await?;
    let ns = env.namespace("gate-input").await?;
    let wds = api(&admin, &ns, "WorkerDeployment");
    let with_gate = |name: &str, gate: Value| {
        let mut wd = minimal_wd(name);
        wd["spec"]["rollout"]["gate"] = gate;
        object(wd)
    };
    let both = json!({"workflowType": "Gate", "input": {"a": 1},
        "inputFrom": {"configMapKeyRef": {"name": "a", "key": "k"}}});
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let message = loop {
        match wds
            .create(&PostParams::default(), &with_gate("both", both.clone()))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 422 => break s.message,
            Err(e) => return Err(e.into()),
            Ok(_) => {
                wds.delete("both", &Default::default()).await?;
                assert!(std::time::Instant::now() < deadline, "never enforced");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    };
    assert!(
        message.contains("only one of input or inputFrom may be set"),
        "{message}"
    );
    for (name, gate) in [
        (
            "input",
            json!({"workflowType": "Gate", "input": [1, "two"]}),
        ),
        (
            "input-from",
            json!({"workflowType": "Gate",
            "inputFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
        ),
    ] {
        wds.create(&PostParams::default(), &with_gate(name, gate))
            .await?;
    }
    Ok(())
}
