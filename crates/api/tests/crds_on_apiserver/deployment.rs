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
            "spec.deployment: an amount longer than any count or percentage",
            deployment(json!({"template": {}, "strategy": {
                "rollingUpdate": {"maxSurge": "12345678901%"}}})),
            "spec.deployment.strategy.rollingUpdate.maxSurge: Too long",
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
    // Worker groups: upstream's rules and limits.
    let group = |name: &str| json!({"name": name, "deployment": {"template": {}}});
    let groups = |list: Value| {
        let mut v = minimal_wd("groups");
        if let Some(spec) = v["spec"].as_object_mut() {
            spec.remove("template");
            spec.insert("workerGroups".into(), list);
        }
        v
    };
    let group_cases: Vec<(&str, Value, &str)> = vec![
        (
            "a group named default",
            groups(json!([group("default")])),
            "group name default is reserved",
        ),
        (
            "groups beside a template",
            set(groups(json!([group("a")])), "spec/template", json!({})),
            "workerGroups cannot be combined with deployment or template",
        ),
        (
            "eleven groups",
            groups(Value::Array(
                (0..11).map(|i| group(&format!("g{i}"))).collect(),
            )),
            "spec.workerGroups: Too many",
        ),
        (
            "two groups of one name",
            groups(json!([group("a"), group("a")])),
            "spec.workerGroups[1]: Duplicate value",
        ),
        (
            "a group name that is not a DNS label",
            groups(json!([group("Workflows")])),
            "spec.workerGroups[0].name",
        ),
        (
            "a group name longer than 24",
            groups(json!([group(&"g".repeat(25))])),
            "spec.workerGroups[0].name",
        ),
        (
            "a group without its deployment",
            groups(json!([{"name": "a"}])),
            "spec.workerGroups[0].deployment: Required value",
        ),
    ];
    for (case, v, expected) in group_cases {
        assert_rejected(&wds, case, v, expected).await;
    }
    let two = create(
        &wds,
        groups(json!([
            {"name": "workflows", "deployment": {"replicas": 1, "template": {"spec":
                {"containers": [{"name": "w", "image": "orders:1"}]}}}},
            {"name": "gpu-activities", "deployment": {"template": {"spec":
                {"containers": [{"name": "a", "image": "orders:1"}]}},
                "strategy": {"type": "Recreate"}}},
        ])),
    )
    .await?;
    assert_eq!(
        two.data["spec"]["workerGroups"][1]["name"],
        "gpu-activities"
    );
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

/// `config/admission/workerdeployment-field-warnings.yaml`: `kubectl apply` warns (never
/// refuses) where TWC's webhook warns: a deprecated field set, a field ignored beside
/// `spec.deployment`, the selector the controller computes. A value at its default is not warned
/// about, and a manifest in the new form alone hears nothing.
#[tokio::test]
async fn kubectl_apply_warns_about_deprecated_and_ignored_fields() -> TestResult {
    let (env, admin) = setup().await?;
    crate::admission::apply_admission_policies(&admin).await?;
    let ns = env.namespace("warnings").await?;
    let kubeconfig = env.control_plane.kubeconfig_path.clone();
    // kubectl apply's stderr (its warnings); the object must be accepted.
    let apply = |name: &str, spec: Value| -> Result<String, Box<dyn std::error::Error>> {
        let mut wd = minimal_wd(name);
        wd["metadata"]["namespace"] = json!(ns);
        wd["spec"] = spec;
        let mut child = std::process::Command::new(twc_testenv::paths::kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            std::io::Write::write_all(&mut stdin, &serde_json::to_vec(&wd)?)?;
        }
        let out = child.wait_with_output()?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(format!("kubectl apply {name}: {stderr}").into());
        }
        Ok(stderr)
    };
    let base = minimal_wd("x")["spec"].clone();
    let pod = base["template"].clone();
    let mut old = base.clone();
    old["replicas"] = json!(2);
    old["minReadySeconds"] = json!(5);
    // The policy takes a moment to be enforced after it is created.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let warned = loop {
        let out = apply("old", old.clone())?;
        if out.contains("Warning") || std::time::Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert!(
        warned.contains("spec.replicas is deprecated; use spec.deployment.replicas instead"),
        "{warned}"
    );
    assert!(
        warned.contains(
            "spec.minReadySeconds is deprecated; use spec.deployment.minReadySeconds instead"
        ),
        "{warned}"
    );
    assert!(
        !warned.contains("progressDeadlineSeconds"),
        "the default: {warned}"
    );

    let mut new = base.clone();
    if let Some(spec) = new.as_object_mut() {
        spec.remove("template");
        spec.remove("replicas");
    }
    new["deployment"] = json!({"replicas": 2, "template": pod});
    let quiet = apply("new", new.clone())?;
    assert!(!quiet.contains("Warning"), "{quiet}");

    new["replicas"] = json!(3);
    new["deployment"]["selector"] = json!({"matchLabels": {"app": "x"}});
    let mixed = apply("mixed", new)?;
    for expected in [
        "spec.replicas is ignored with spec.deployment; set spec.deployment.replicas instead",
        "spec.deployment.selector is ignored; the controller computes each versioned Deployment's selector",
    ] {
        assert!(mixed.contains(expected), "{expected}: {mixed}");
    }
    Ok(())
}
