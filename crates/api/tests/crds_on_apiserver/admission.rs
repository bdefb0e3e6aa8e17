//! The admission policies of `config/admission/`: templates the user may not create, and
//! TWC's webhook check of a gate's input.

use std::path::PathBuf;

use kube::api::{DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::{TestResult, api, minimal_wd, object, setup};

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
pub(crate) async fn apply_admission_policies(admin: &Client) -> TestResult {
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

/// `config/admission/workerdeployment-cluster-connection.yaml`: a WorkerDeployment that names a
/// ClusterConnection which does not allow its namespace (by label) or its Temporal namespace is
/// refused at `kubectl apply`, with a message naming the rule; one it allows, or one naming
/// another connection, goes through; an update that leaves workerOptions alone is not checked.
#[tokio::test]
async fn a_cluster_connection_that_does_not_allow_a_worker_deployment_refuses_it_at_admission()
-> TestResult {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Patch, PatchParams};
    let (env, admin) = setup().await?;
    apply_admission_policies(&admin).await?;
    let cc = format!("shared-{}", env.namespace("cc-name").await?);
    let ccs = api(&admin, "", "ClusterConnection");
    let mut shared = crate::minimal_connection("ClusterConnection", &cc);
    shared["spec"]["allowedNamespaces"] = json!({"from": "Selector", "selector": {
        "matchLabels": {"team": "a"},
        "matchExpressions": [{"key": "frozen", "operator": "DoesNotExist"}]}});
    shared["spec"]["allowedTemporalNamespaces"] = json!(["payments", "team-a-*"]);
    ccs.create(&PostParams::default(), &object(shared)).await?;
    let (allowed, other) = (env.namespace("cc-a").await?, env.namespace("cc-b").await?);
    Api::<Namespace>::all(admin.clone())
        .patch(
            &allowed,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await?;
    let wd = |name: &str, conn: &str, temporal: &str| {
        let mut wd = minimal_wd(name);
        wd["spec"]["workerOptions"] = json!({"temporalNamespace": temporal, "connectionRef":
            {"objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": conn}}});
        object(wd)
    };
    // The policy and its params reach the apiserver's admission a moment after they are stored.
    let refusal = |ns: &str, w: DynamicObject| {
        let wds = api(&admin, ns, "WorkerDeployment");
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                match wds.create(&PostParams::default(), &w).await {
                    Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => {
                        return Ok::<_, Box<dyn std::error::Error>>(s.message);
                    }
                    Err(e) => return Err(e.into()),
                    Ok(created) => {
                        wds.delete(
                            &created.metadata.name.unwrap_or_default(),
                            &Default::default(),
                        )
                        .await?;
                        if std::time::Instant::now() > deadline {
                            return Err("never refused".into());
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                    }
                }
            }
        }
    };
    let message = refusal(&other, wd("w", &cc, "payments")).await?;
    assert!(
        message.contains(&format!(
            "ClusterConnection {cc} does not allow WorkerDeployments in namespace {other} (spec.allowedNamespaces.selector)"
        )),
        "{message}"
    );
    let message = refusal(&allowed, wd("w", &cc, "orders")).await?;
    assert!(
        message.contains(&format!(
            "ClusterConnection {cc} does not allow Temporal namespace orders (spec.allowedTemporalNamespaces)"
        )),
        "{message}"
    );
    // TWC's first spelling of the same reference (`kind` beside `name`) is checked the same.
    let mut spelled = minimal_wd("w2");
    spelled["spec"]["workerOptions"] = json!({"temporalNamespace": "payments",
        "connectionRef": {"name": cc, "kind": "ClusterConnection"}});
    let message = refusal(&other, object(spelled)).await?;
    assert!(
        message.contains(&format!(
            "ClusterConnection {cc} does not allow WorkerDeployments in namespace {other}"
        )),
        "{message}"
    );
    let wds = api(&admin, &allowed, "WorkerDeployment");
    wds.create(&PostParams::default(), &wd("ok", &cc, "team-a-dev"))
        .await?;
    api(&admin, &other, "WorkerDeployment")
        .create(
            &PostParams::default(),
            &wd("elsewhere", "another", "orders"),
        )
        .await?;
    // Frozen later: the stored WorkerDeployment still takes a finalizer and can be deleted.
    Api::<Namespace>::all(admin.clone())
        .patch(
            &allowed,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"frozen": "yes"}}})),
        )
        .await?;
    let message = refusal(&allowed, wd("new", &cc, "payments")).await?;
    assert!(
        message.contains("spec.allowedNamespaces.selector"),
        "{message}"
    );
    wds.patch(
        "ok",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["temporal.io/delete-protection"]}})),
    )
    .await?;
    wds.patch(
        "ok",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    wds.delete("ok", &Default::default()).await?;
    ccs.delete(&cc, &Default::default()).await?;
    Ok(())
}

/// `config/admission/workerdeployment-foreground-deletion.yaml`: `--cascade=foreground` on a
/// WorkerDeployment with a running version is refused (the garbage collector would delete its
/// workers before the controller drains them), unless it is annotated skip-drainage; a
/// background deletion, and a foreground one of a WorkerDeployment that runs nothing, go
/// through.
#[tokio::test]
async fn a_foreground_cascade_is_refused_while_a_version_runs() -> TestResult {
    use kube::api::{DeleteParams, Patch, PatchParams};
    let (env, admin) = setup().await?;
    apply_admission_policies(&admin).await?;
    let ns = env.namespace("foreground").await?;
    let wds = api(&admin, &ns, "WorkerDeployment");
    let running = |name: &'static str| {
        let wds = wds.clone();
        async move {
            wds.create(&PostParams::default(), &object(minimal_wd(name)))
                .await?;
            let status =
                json!({"status": {"currentVersion": {"buildID": "v1", "status": "Current"}}});
            wds.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
                .await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        }
    };
    running("a").await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let message = loop {
        match wds.delete("a", &DeleteParams::foreground()).await {
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => break s.message,
            Err(e) => return Err(e.into()),
            Ok(_) => {
                assert!(std::time::Instant::now() < deadline, "never enforced");
                running("a").await?;
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
        }
    };
    assert!(
        message.contains("a foreground cascade deletes the workers of every version of WorkerDeployment a at once"),
        "{message}"
    );
    // Annotated: the person accepts it.
    wds.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"temporal.io/skip-drainage": "true"}}})),
    )
    .await?;
    wds.delete("a", &DeleteParams::foreground()).await?;
    // Background: the controller drains first.
    running("b").await?;
    wds.delete("b", &DeleteParams::background()).await?;
    // Nothing running: nothing to lose.
    wds.create(&PostParams::default(), &object(minimal_wd("c")))
        .await?;
    wds.delete("c", &DeleteParams::foreground()).await?;
    Ok(())
}
