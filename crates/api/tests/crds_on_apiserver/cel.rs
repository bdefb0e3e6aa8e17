//! Every CEL rule rejects what it should with its message and accepts valid input.

use kube::ResourceExt;
use serde_json::{Value, json};

use crate::{TestResult, api, assert_rejected, create, minimal_connection, minimal_wd, set, setup};

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
    let strategy = |s: Value| set(minimal_wd("s"), "spec/deploymentStrategy", s);
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
        (
            "spec.deployment beside spec.template",
            set(
                minimal_wd("d"),
                "spec/deployment",
                json!({"replicas": 2, "template": {"spec": {"containers": []}}}),
            ),
            "exactly one of deployment or template must be set",
        ),
        (
            "no template at all",
            {
                let mut v = minimal_wd("t0");
                if let Some(spec) = v["spec"].as_object_mut() {
                    spec.remove("template");
                }
                v
            },
            "one of deployment, template or workerGroups must be set",
        ),
        (
            "binary/protobuf without messageType",
            set(
                minimal_wd("e1"),
                "spec/rollout/gate",
                json!({"workflowType": "Check", "encoding": "binary/protobuf",
                    "inputFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
            ),
            "gate.messageType is required when gate.encoding is binary/protobuf",
        ),
        (
            "messageType with json/plain",
            set(
                minimal_wd("e2"),
                "spec/rollout/gate",
                json!({"workflowType": "Check", "encoding": "json/plain", "messageType": "a.B"}),
            ),
            "gate.messageType may only be set when gate.encoding is json/protobuf or binary/protobuf",
        ),
        (
            "a step gate's messageType without encoding",
            progressive(json!([{"rampPercentage": 10, "pauseDuration": "30s",
                "gate": {"workflowType": "Check", "messageType": "a.B"}}])),
            "gate.messageType may only be set when gate.encoding is json/protobuf or binary/protobuf",
        ),
        (
            "an unknown gate encoding",
            set(
                minimal_wd("e3"),
                "spec/rollout/gate",
                json!({"workflowType": "Check", "encoding": "yaml/plain"}),
            ),
            "spec.rollout.gate.encoding",
        ),
        (
            "a deploymentStrategy of an unknown type",
            strategy(json!({"type": "BlueGreen"})),
            "deploymentStrategy.type must be RollingUpdate or Recreate",
        ),
        (
            "Recreate with rollingUpdate",
            strategy(json!({"type": "Recreate", "rollingUpdate": {"maxSurge": 1}})),
            "deploymentStrategy.rollingUpdate may not be set when type is Recreate",
        ),
        (
            "maxUnavailable and maxSurge both 0",
            strategy(json!({"rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}})),
            "maxUnavailable and maxSurge cannot both be 0",
        ),
        (
            "maxSurge as a string that is not a percentage",
            strategy(json!({"rollingUpdate": {"maxSurge": "lots"}})),
            "maxUnavailable and maxSurge are a number of pods (0 or more) or a percentage such as 25%",
        ),
        (
            "a negative maxUnavailable",
            strategy(json!({"rollingUpdate": {"maxUnavailable": -1}})),
            "maxUnavailable and maxSurge are a number of pods (0 or more) or a percentage such as 25%",
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
    // Deployment strategies apps/v1 takes are kept as written (not pruned).
    for (name, s) in [
        ("recreate", json!({"type": "Recreate"})),
        (
            "rolling-int",
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
        ),
        (
            "rolling-percent",
            json!({"rollingUpdate": {"maxUnavailable": "10%"}}),
        ),
    ] {
        let created = create(&wds, set(strategy(s.clone()), "metadata/name", json!(name))).await?;
        assert_eq!(created.data["spec"]["deploymentStrategy"], s, "{name}");
    }

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

    // Who may use a ClusterConnection: a selector goes with `from: Selector`, and only then.
    let ccs = api(&client, &ns, "ClusterConnection");
    let cc = format!("shared-{ns}");
    assert_rejected(
        &ccs,
        "ClusterConnection with from: Selector and no selector",
        set(
            minimal_connection("ClusterConnection", &cc),
            "spec/allowedNamespaces",
            json!({"from": "Selector"}),
        ),
        "selector is required when from is Selector",
    )
    .await;
    assert_rejected(
        &ccs,
        "ClusterConnection with a selector and from left at All",
        set(
            minimal_connection("ClusterConnection", &cc),
            "spec/allowedNamespaces",
            json!({"selector": {"matchLabels": {"team": "a"}}}),
        ),
        "selector may only be set when from is Selector",
    )
    .await;
    // A selector the controller could not evaluate is refused when written (an embedded
    // LabelSelector is not checked by the apiserver otherwise): `NotIn: []` would allow every
    // namespace at admission and none at the controller.
    for (what, expression) in [
        (
            "NotIn without values",
            json!({"key": "team", "operator": "NotIn", "values": []}),
        ),
        (
            "In without values",
            json!({"key": "team", "operator": "In"}),
        ),
        (
            "Exists with values",
            json!({"key": "team", "operator": "Exists", "values": ["a"]}),
        ),
        (
            "an unknown operator",
            json!({"key": "team", "operator": "Equals", "values": ["a"]}),
        ),
    ] {
        assert_rejected(
            &ccs,
            &format!("ClusterConnection with a selector of {what}"),
            set(
                minimal_connection("ClusterConnection", &cc),
                "spec/allowedNamespaces",
                json!({"from": "Selector", "selector": {"matchExpressions": [expression]}}),
            ),
            "selector.matchExpressions: In and NotIn need at least one value",
        )
        .await;
    }
    let shared = create(
        &ccs,
        set(
            set(
                minimal_connection("ClusterConnection", &cc),
                "spec/allowedNamespaces",
                json!({"from": "Selector", "selector": {
                    "matchLabels": {"team": "a"},
                    "matchExpressions": [
                        {"key": "tier", "operator": "NotIn", "values": ["prod"]},
                        {"key": "frozen", "operator": "DoesNotExist"}
                    ]
                }}),
            ),
            "spec/allowedTemporalNamespaces",
            json!(["payments", "team-a-*"]),
        ),
    )
    .await?;
    ccs.delete(&shared.name_any(), &Default::default()).await?;

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
    assert_rejected(
        &wrts,
        "WRT with a worker group that is not a DNS label",
        set(
            set(
                wrt.clone(),
                "spec/workerDeploymentRef",
                json!({"name": "a"}),
            ),
            "spec/workerGroup",
            json!("GPU"),
        ),
        "spec.workerGroup",
    )
    .await;
    create(
        &wrts,
        set(
            set(wrt, "spec/workerDeploymentRef", json!({"name": "a"})),
            "spec/workerGroup",
            json!("activities"),
        ),
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

    // TWC's first ClusterConnection spelling: `kind` beside `name`. The apiserver keeps it (it
    // is not pruned into a reference to a namespaced Connection of the same name).
    let spelled = create(
        &wds,
        with_ref(
            "kind-beside-name",
            json!({"name": "shared", "kind": "ClusterConnection"}),
        ),
    )
    .await?;
    assert_eq!(
        spelled.data["spec"]["workerOptions"]["connectionRef"],
        json!({"name": "shared", "kind": "ClusterConnection"})
    );
    let typed: twc_api::WorkerDeployment = serde_json::from_value(serde_json::to_value(&spelled)?)?;
    assert_eq!(
        typed.spec.worker_options.connection_ref.target(),
        Some((twc_api::ConnectionKind::ClusterConnection, "shared"))
    );
    assert_rejected(
        &wds,
        "kind with objectRef",
        with_ref(
            "kind-and-objectref",
            json!({"kind": "ClusterConnection", "objectRef": {"kind": "Connection", "name": "c"}}),
        ),
        "connectionRef.kind goes with connectionRef.name; objectRef carries its own kind",
    )
    .await;
    assert_rejected(
        &wds,
        "kind naming a Secret",
        with_ref("kind-secret", json!({"name": "s", "kind": "Secret"})),
        "connectionRef.kind must be Connection or ClusterConnection",
    )
    .await;
    assert_rejected(
        &wds,
        "both name and objectRef",
        with_ref(
            "both",
            json!({"name": "conn", "objectRef": {"kind": "Connection", "name": "conn"}}),
        ),
        "exactly one of name or objectRef must be set",
    )
    .await;
    assert_rejected(
        &wds,
        "neither name nor objectRef",
        with_ref("neither", json!({})),
        "exactly one of name or objectRef must be set",
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
        "objectRef with a namespace",
        with_ref(
            "objectref-namespace",
            json!({"objectRef": {"kind": "Connection", "name": "c", "namespace": "other"}}),
        ),
        "objectRef.namespace is not supported yet",
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
