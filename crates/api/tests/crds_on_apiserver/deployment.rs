//! `spec.deployment` (TWC's newer form, its PR #564) on a real apiserver: each rule refuses
//! what it should with its message, and a DeploymentSpec copied whole is taken as written.

use serde_json::{Value, json};

use crate::{TestResult, api, assert_rejected, create, minimal_wd, set, setup};

#[tokio::test]
async fn spec_deployment_is_refused_only_where_a_rule_says_why() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("deploy").await?;
    let wds = api(&client, &ns, "WorkerDeployment");
    // TWC's newer form: `spec.deployment` in place of `spec.template`.
    let deployment = |d: Value| {
        let mut v = set(minimal_wd("dd"), "spec/deployment", d);
        if let Some(spec) = v["spec"].as_object_mut() {
            spec.remove("template");
        }
        v
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "spec.deployment without a template",
            deployment(json!({"replicas": 1})),
            "spec.deployment.template: Required value",
        ),
        (
            "spec.deployment with deploymentStrategy",
            set(
                deployment(json!({"template": {}})),
                "spec/deploymentStrategy",
                json!({"type": "Recreate"}),
            ),
            "deploymentStrategy cannot be combined with deployment: set deployment.strategy",
        ),
        (
            "spec.deployment paused",
            deployment(json!({"template": {}, "paused": true})),
            "deployment.paused is not supported",
        ),
        (
            "a progress deadline not past minReadySeconds",
            deployment(
                json!({"template": {}, "minReadySeconds": 30, "progressDeadlineSeconds": 30}),
            ),
            "deployment.progressDeadlineSeconds must be greater than deployment.minReadySeconds",
        ),
        (
            "spec.deployment with an unknown strategy",
            deployment(json!({"template": {}, "strategy": {"type": "BlueGreen"}})),
            "deployment.strategy.type must be RollingUpdate or Recreate",
        ),
        (
            "spec.deployment: Recreate with rollingUpdate",
            deployment(json!({"template": {}, "strategy": {"type": "Recreate",
                "rollingUpdate": {"maxSurge": 1}}})),
            "deployment.strategy.rollingUpdate may not be set when type is Recreate",
        ),
        (
            "spec.deployment: both 0",
            deployment(json!({"template": {}, "strategy": {
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}})),
            "deployment.strategy: maxUnavailable and maxSurge cannot both be 0",
        ),
        (
            "spec.deployment: not an amount",
            deployment(json!({"template": {}, "strategy": {
                "rollingUpdate": {"maxSurge": "lots"}}})),
            "deployment.strategy: maxUnavailable and maxSurge are a number of pods",
        ),
        (
            "spec.deployment: negative replicas",
            deployment(json!({"template": {}, "replicas": -1})),
            "spec.deployment.replicas",
        ),
    ];
    for (case, v, expected) in cases {
        assert_rejected(&wds, case, v, expected).await;
    }
    // A DeploymentSpec copied whole from a Deployment is taken as written (its selector is
    // ignored by the controller, not refused), and the deprecated fields beside it are let be.
    let whole = json!({
        "replicas": 2, "minReadySeconds": 5, "progressDeadlineSeconds": 120,
        "revisionHistoryLimit": 3, "paused": false,
        "selector": {"matchLabels": {"app": "orders"}},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "template": {"metadata": {"labels": {"app": "orders"}},
            "spec": {"containers": [{"name": "worker", "image": "orders:1"}]}}
    });
    let created = create(
        &wds,
        set(
            set(deployment(whole.clone()), "metadata/name", json!("whole")),
            "spec/replicas",
            json!(7),
        ),
    )
    .await?;
    assert_eq!(created.data["spec"]["deployment"], whole);
    assert!(created.data["spec"].get("template").is_none());

    Ok(())
}
