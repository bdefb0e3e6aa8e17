//! Rollouts by strategy (TWC's manual, all-at-once and progressive test tables, without the
//! gate, version-limit and manager-identity cases, which have their own files).

use serde_json::{Value, json};
use twc_api::VersionStatus::{Current, Drained, Inactive, Ramping};
use twc_testenv::LocalImage;

use crate::common::World;
use crate::harness::*;

/// `manual-rollout-expect-no-change`: Manual never promotes, even the first version.
pub async fn manual_rollout_expect_no_change(w: &'static World) {
    // TWC's image name, with characters a build ID cannot carry (`/`, `:`); the pod runner
    // runs the example worker for it.
    let worker = twc_testenv::paths::workspace_binary("twc-example-worker", "twc-example-worker")
        .unwrap_or_else(|e| panic!("{e}"));
    w.env
        .pod_runner
        .register_image("my.app/test/foo_bar", LocalImage::new(worker));
    let mut s = Scenario::new(w, "manual-no-change").await;
    s.create(s.spec(manual(), "my.app/test/foo_bar:v1.0")).await;
    let target = s.target_build_id();
    assert!(
        !target.contains('/') && !target.contains(':') && target.starts_with("v1.0-"),
        "build ID {target}"
    );
    s.connect().await;
    s.settle(&Expect::target(&target, Inactive)).await;
}

/// `manual-rollout-expect-deployments-scaled-up`: the target runs `spec.replicas` workers.
pub async fn manual_rollout_expect_deployments_scaled_up(w: &'static World) {
    let mut s = Scenario::new(w, "manual-scaled-up").await;
    let mut spec = s.spec(manual(), &image("v1.0"));
    spec["replicas"] = json!(2);
    s.create(spec).await;
    let target = s.target_build_id();
    s.connect().await;
    s.wait_status(&Expect::target(&target, Inactive)).await;
    s.wait_replicas(&target, 2).await;
}

/// `manual-rollout-custom-build-expect-rolling-update`: under a stable custom build ID, a new
/// pod template updates the version's Deployment in place.
pub async fn manual_rollout_custom_build_expect_rolling_update(w: &'static World) {
    let mut s = Scenario::new(w, "manual-custom-build").await;
    let mut spec = s.spec(manual(), &image("v1.1"));
    spec["workerOptions"]["unsafeCustomBuildID"] = json!("custom-build");
    s.create(spec).await;
    // The version's Deployment as made from the previous template (image v1.0).
    let old = s.existing_version(&image("v1.0"), 1).await;
    assert_eq!(old, "custom-build");
    s.wait_registered(&["custom-build"]).await;
    let name = s.deployment_of("custom-build");
    let before = s
        .deployments()
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    s.connect().await;
    let api = s.deployments();
    twc_testenv::wait_for(&format!("{name} rolled to v1.1"), WAIT, || {
        let api = api.clone();
        let name = name.clone();
        async move {
            let d = api.get(&name).await.map_err(|e| e.to_string())?;
            let image = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone());
            let st = d.status.clone().unwrap_or_default();
            let rolled = st.observed_generation == d.metadata.generation
                && st.updated_replicas == Some(1)
                && st.ready_replicas == Some(1)
                && st.replicas == Some(1);
            if image.as_deref() == Some(&*crate::harness::image("v1.1")) && rolled {
                Ok(d)
            } else {
                Err(format!("image {image:?}, status {st:?}"))
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let after = s
        .deployments()
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        before.metadata.uid, after.metadata.uid,
        "the Deployment was replaced, not updated"
    );
    s.settle(&Expect::target("custom-build", Inactive)).await;
}

/// `manual-rollout-scale-down-deprecated-versions` and
/// `all-at-once-expect-scale-down-deprecated-versions`: (st) v1.0 registered but never
/// promoted, v0 Drained; new target v2.0. The Inactive v1.0 goes to 0 replicas at once, then
/// is retired (TWC #577: a version that never served goes once scaled down and idle, with no
/// sunset delay); the Drained v0 keeps its workers until `scaledownDelay` (1h) passes.
async fn scale_down_deprecated(w: &'static World, prefix: &str, all_at_once_: bool) {
    let mut s = Scenario::new(w, prefix).await;
    let rollout = if all_at_once_ {
        all_at_once()
    } else {
        manual()
    };
    s.create(s.spec(rollout, &image("v2.0"))).await;
    let v0 = s.existing_version(&image("v0"), 1).await;
    let v1 = s.existing_version(&image("v1.0"), 1).await;
    s.wait_registered(&[&v0, &v1]).await;
    s.set_current(&v0).await;
    s.set_current("").await;
    s.wait_versions(&[&v0], Drained).await;
    s.connect().await;
    let target = s.target_build_id();
    let expect = if all_at_once_ {
        Expect::target(&target, Current).current(&target)
    } else {
        Expect::target(&target, Inactive)
    }
    .deprecated(&v0, Drained);
    s.wait_gone(&v1).await;
    s.wait_status(&expect).await;
    assert!(
        !s.describe().await.versions.contains_key(&v1),
        "{v1} is still a version in Temporal"
    );
    s.wait_replicas(&target, 1).await;
    tokio::time::sleep(SETTLE).await;
    s.assert_status(&expect).await;
    s.wait_replicas(&v0, 1).await;
}

pub async fn manual_rollout_scale_down_deprecated_versions(w: &'static World) {
    scale_down_deprecated(w, "manual-scale-down", false).await
}

pub async fn all_at_once_expect_scale_down_deprecated_versions(w: &'static World) {
    scale_down_deprecated(w, "aao-scale-down", true).await
}

/// `manual-rollout-yes-unversioned-pollers-expect-no-current`.
pub async fn manual_rollout_yes_unversioned_pollers_expect_no_current(w: &'static World) {
    let mut s = Scenario::new(w, "manual-unversioned").await;
    s.unversioned_workers().await;
    s.create(s.spec(manual(), &image("v1"))).await;
    let target = s.target_build_id();
    s.connect().await;
    s.settle(&Expect::target(&target, Inactive)).await;
}

/// `all-at-once-yes-unversioned-pollers-expect-current`: AllAtOnce does not look at
/// unversioned pollers.
pub async fn all_at_once_yes_unversioned_pollers_expect_current(w: &'static World) {
    let mut s = Scenario::new(w, "aao-unversioned").await;
    s.unversioned_workers().await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    let target = s.target_build_id();
    s.connect().await;
    s.wait_status(&Expect::target(&target, Current).current(&target))
        .await;
}

/// `progressive-rollout-no-unversioned-pollers-expect-all-at-once`: with no current version
/// and nobody else polling, Progressive promotes the first version at once.
pub async fn progressive_rollout_no_unversioned_pollers_expect_all_at_once(w: &'static World) {
    let mut s = Scenario::new(w, "prog-first").await;
    s.create(s.spec(progressive(5, "1h"), &image("v1.0"))).await;
    let target = s.target_build_id();
    s.connect().await;
    s.wait_status(&Expect::target(&target, Current).current(&target))
        .await;
}

/// `progressive-rollout-expect-first-step`: (st) v0 current; v1.0 ramps to the first step.
pub async fn progressive_rollout_expect_first_step(w: &'static World) {
    let mut s = Scenario::new(w, "prog-first-step").await;
    s.create(s.spec(progressive(5, "1h"), &image("v1.0"))).await;
    let v0 = s.existing_version(&image("v0"), 1).await;
    s.wait_registered(&[&v0]).await;
    s.set_current(&v0).await;
    s.connect().await;
    let target = s.target_build_id();
    s.settle(&Expect::target(&target, Ramping).ramp(5.0).current(&v0))
        .await;
}

/// `all-at-once-rollback-expect-immediate-promotion`: (st) v2 current, v1 current until
/// moments ago; target v1 is restored at once, and v2 drains.
pub async fn all_at_once_rollback_expect_immediate_promotion(w: &'static World) {
    let mut s = Scenario::new(w, "aao-rollback").await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    let v1 = s.existing_version(&image("v1"), 1).await;
    let v2 = s.existing_version(&image("v2"), 1).await;
    s.wait_registered(&[&v1, &v2]).await;
    s.set_current(&v1).await;
    s.set_current(&v2).await;
    s.wait_versions(&[&v1], Drained).await;
    s.connect().await;
    assert_eq!(s.target_build_id(), v1);
    s.wait_status(
        &Expect::target(&v1, Current)
            .current(&v1)
            .deprecated(&v2, Drained),
    )
    .await;
    // The demoted v2 keeps its workers: it is never scaled down before it drained plus
    // scaledownDelay (TWC scaled a just-demoted version to 0 while its drainage was unknown).
    s.wait_replicas(&v2, 1).await;
}

/// `spec.deploymentStrategy` (TWC's field): every version's Deployment gets it, the older
/// version's too, and a change of it makes no new version (it is not in the build ID).
pub async fn deployment_strategy_reaches_every_version(w: &'static World) {
    use kube::api::{Patch, PatchParams};
    let mut s = Scenario::new(w, "deploy-strategy").await;
    let mut spec = s.spec(all_at_once(), &image("v2.0"));
    spec["deploymentStrategy"] = json!({"type": "Recreate"});
    s.create(spec).await;
    let v1 = s.existing_version(&image("v1.0"), 1).await;
    s.wait_registered(&[&v1]).await;
    s.set_current(&v1).await;
    s.connect().await;
    let target = s.target_build_id();
    let settled = Expect::target(&target, Current)
        .current(&target)
        .deprecated(&v1, Drained);
    s.wait_status(&settled).await;
    let strategies = |want: Value| {
        let api = s.deployments();
        let names = [s.deployment_of(&v1), s.deployment_of(&target)];
        async move {
            twc_testenv::wait_for(&format!("strategy {want} on both versions"), WAIT, || {
                let (api, names, want) = (api.clone(), names.clone(), want.clone());
                async move {
                    for name in &names {
                        let d = api.get(name).await.map_err(|e| e.to_string())?;
                        let have = serde_json::to_value(d.spec.and_then(|s| s.strategy))
                            .map_err(|e| e.to_string())?;
                        if have != want {
                            return Err(format!("{name}: {have}"));
                        }
                    }
                    Ok(())
                }
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        }
    };
    strategies(json!({"type": "Recreate"})).await;
    s.wds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deploymentStrategy":
                {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    strategies(json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}}))
    .await;
    // Still the same target, and no third Deployment.
    assert_eq!(s.target_build_id(), target);
    s.wait_status(&settled).await;
    let mine = kube::api::ListParams::default().labels(&format!(
        "{}={}",
        twc_api::labels::DEPLOYMENT_NAME,
        s.name
    ));
    let owned = s
        .deployments()
        .list(&mine)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .len();
    assert_eq!(owned, 2, "a strategy change makes no new version");
}

/// TWC's newer form (`spec.deployment`, its PR #564): a WorkerDeployment moved from
/// `spec.template` to `spec.deployment` with the same pod keeps its version and its pods (the
/// Deployment gets the new settings, its pod template stays as it was), and a new template in
/// the new form rolls out as before.
pub async fn spec_deployment_takes_over_from_spec_template_without_a_new_version(
    w: &'static World,
) {
    use crate::common::from_json;
    use kube::api::{Patch, PatchParams};
    use twc_controller::plan::build_id;
    let mut s = Scenario::new(w, "spec-deployment").await;
    let spec = s.spec(all_at_once(), &image("v1.0"));
    let template = spec["template"].clone();
    let v1 = s.start(spec).await;
    s.wait_status(&Expect::target(&v1, Current).current(&v1))
        .await;
    let name = s.deployment_of(&v1);
    let before = s
        .deployments()
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let patch = |body: Value| {
        let wds = s.wds();
        let name = s.name.clone();
        async move {
            wds.patch(&name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    };
    patch(
        json!({"spec": {"template": null, "replicas": null, "deployment": {
        "replicas": 2, "minReadySeconds": 1, "progressDeadlineSeconds": 300,
        "revisionHistoryLimit": 2, "template": template}}}),
    )
    .await;
    s.wait_replicas(&v1, 2).await;
    let api = s.deployments();
    let after = twc_testenv::wait_for(
        &format!("{name} with spec.deployment's settings"),
        WAIT,
        || {
            let (api, name) = (api.clone(), name.clone());
            async move {
                let d = api.get(&name).await.map_err(|e| e.to_string())?;
                let spec = d.spec.clone().unwrap_or_default();
                let have = (
                    spec.min_ready_seconds,
                    spec.progress_deadline_seconds,
                    spec.revision_history_limit,
                );
                if have == (Some(1), Some(300), Some(2)) {
                    Ok(d)
                } else {
                    Err(format!("{have:?}"))
                }
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        after.spec.as_ref().map(|s| &s.template),
        before.spec.as_ref().map(|s| &s.template),
        "the same pods: no pod restarted"
    );
    s.wait_status(&Expect::target(&v1, Current).current(&v1))
        .await;
    // A new pod template in the new form is a new version, rolled out as before.
    let mut v2_template = template.clone();
    v2_template["spec"]["containers"][0]["image"] = json!(image("v2.0"));
    patch(json!({"spec": {"deployment": {"template": v2_template.clone()}}})).await;
    let v2 = build_id::build_id(&from_json(v2_template), None);
    assert_ne!(v2, v1);
    s.wait_status(
        &Expect::target(&v2, Current)
            .current(&v2)
            .deprecated(&v1, Drained),
    )
    .await;
    s.wait_replicas(&v2, 2).await;
}

/// TWC #577: a version superseded before it served is retired once scaled down, but not while
/// a workflow runs on it (here one pinned to it by a versioning override). Once that workflow
/// ends, the version goes, from Kubernetes and from Temporal.
pub async fn a_version_that_never_served_waits_for_its_workflows_then_is_retired(
    w: &'static World,
) {
    let mut s = Scenario::new(w, "retire-inactive").await;
    let mut spec = s.spec(all_at_once(), &image("v2.0"));
    // Whichever way the server counts the pinned version (Inactive, or Draining once a
    // workflow is pinned to it), it is deleted once idle.
    spec["sunset"] = json!({"scaledownDelay": "0s", "deleteDelay": "0s"});
    s.create(spec).await;
    let v1 = s.existing_version(&image("v1.0"), 1).await;
    s.wait_registered(&[&v1]).await;
    // The version reaches the task queue a moment after it is listed in the deployment
    // ("Pinned version ... is not present in task queue"): asked again until it is there.
    twc_testenv::wait_for("the workflow pinned to v1 started", WAIT, || async {
        twc_testenv::temporal::start_workflow_pinned(
            &s.temporal,
            &s.temporal_ns,
            &s.name,
            "Sleep",
            "pinned-on-v1",
            Some("600"),
            Some((&s.deployment_name, &v1)),
        )
        .await
        .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    s.connect().await;
    let target = s.target_build_id();
    s.wait_temporal(&format!("{target} current"), |st| {
        st.current_build_id.as_deref() == Some(target.as_str())
    })
    .await;
    // Scaled down if the controller saw it Inactive before the server reactivated it (its
    // pollers forgotten in 1 s here), kept running if it saw it Draining: kept either way
    // while the workflow runs.
    tokio::time::sleep(SETTLE * 2).await;
    s.deployments()
        .get(&s.deployment_of(&v1))
        .await
        .unwrap_or_else(|e| panic!("{v1}'s Deployment was deleted under its workflow: {e}"));
    // The dev server reactivates a version a workflow is pinned to (Draining); a server
    // that leaves it Inactive is what the visibility count before retiring is for (the
    // planner's unit test `a_version_that_never_served_is_retired_once_scaled_down_and_idle`).
    let seen = s.describe().await;
    assert!(
        seen.versions.contains_key(&v1),
        "{v1} was deleted in Temporal under its workflow"
    );
    let mut svc = s.temporal.workflow_service();
    svc.terminate_workflow_execution(temporalio_client::tonic::Request::new(
        temporalio_common::protos::temporal::api::workflowservice::v1::TerminateWorkflowExecutionRequest {
            namespace: s.temporal_ns.clone(),
            workflow_execution: Some(
                temporalio_common::protos::temporal::api::common::v1::WorkflowExecution {
                    workflow_id: "pinned-on-v1".into(),
                    ..Default::default()
                },
            ),
            reason: "the test is done with it".into(),
            ..Default::default()
        },
    ))
    .await
    .unwrap_or_else(|e| panic!("terminate: {e}"));
    s.wait_gone(&v1).await;
    s.wait_temporal(&format!("{v1} deleted"), |st| {
        !st.versions.contains_key(&v1)
    })
    .await;
    s.wait_status(&Expect::target(&target, Current).current(&target))
        .await;
}
