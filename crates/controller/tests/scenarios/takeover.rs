//! Taking over from TWC (#12): what TWC leaves behind (its versioned Deployments, running
//! workers, a Temporal worker deployment with a Current and a Draining version under TWC's
//! manager identity, a pinned workflow open) is adopted as it is. Nothing rolls: no new
//! version, no new ReplicaSet, no pod restarted, routing untouched; the status is filled in
//! and the Draining version sunsets as usual.
//!
//! TWC's Deployments are made here the way TWC makes them: a plain create (not server-side
//! apply) by another field manager, of the Deployment TWC renders. That this is field for
//! field what TWC renders is the unit test `renders_the_deployment_twc_renders` (every case
//! of `shared/reference/twc-build-ids.json`, computed by TWC's own code).

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use twc_api::ConnectionSpec;
use twc_api::VersionStatus::{Current, Draining};
use twc_controller::plan::{build_id, deployment};

use crate::common::{self, World, from_json};
use crate::harness::*;

/// The manager identity of a TWC release named otherwise than ours, which the scenarios'
/// controller is told to take over (`--take-over-identity`).
pub const TWC_RELEASE_IDENTITY: &str = common::TAKE_OVER_IDENTITY;

/// How long the pinned workflow on the Draining version runs: long enough to outlast the
/// setup and the takeover on a loaded 2-core machine (at 25 s it once ended first, so v1
/// drained and sunset before the controller looked).
const PINNED_SECONDS: u64 = 45;

/// The Deployment TWC would have created for the template with `image`: created, not applied,
/// by TWC's field manager; running real workers. Returns its build ID.
async fn twc_version(s: &Scenario, image: &str) -> String {
    let wd = s.variant(image, 1);
    let build = build_id::build_id(&wd.spec.template, None);
    let conn: ConnectionSpec = from_json(s.connection_spec());
    let mut d = deployment::versioned_deployment(&wd, &build, &conn);
    // Ours records what it injected; TWC's Deployment has no such annotation.
    d.annotations_mut().remove(deployment::INJECTED_ENV);
    s.deployments()
        .create(
            &PostParams {
                field_manager: Some("manager".into()),
                ..Default::default()
            },
            &d,
        )
        .await
        .unwrap_or_else(|e| panic!("create TWC's Deployment for {build}: {e}"));
    build
}

/// What must not change through a takeover: each ReplicaSet (name, pod-template-hash) and
/// each running pod.
async fn workloads(s: &Scenario) -> (BTreeSet<String>, BTreeSet<String>) {
    let rs: Api<ReplicaSet> = Api::namespaced(s.client.clone(), &s.ns);
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    let sets = rs
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .iter()
        .map(|r| format!("{} {}", r.name_any(), r.uid().unwrap_or_default()))
        .collect();
    let running = pods
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| format!("{} {}", p.name_any(), p.uid().unwrap_or_default()))
        .collect();
    (sets, running)
}

/// Waits until every ReplicaSet has the pods it wants, so the pods can be compared.
async fn wait_pods_settled(s: &Scenario, builds: &[&str]) {
    for b in builds {
        s.wait_replicas(b, 1).await;
    }
}

/// (st) TWC managed v1 (then v2): v2 Current, v1 Draining with a pinned workflow open, both
/// with running workers, the manager identity `manager`. Returns the scenario, v1 and v2.
async fn left_by_twc(
    w: &'static World,
    prefix: &str,
    manager: &str,
    target_image: &str,
) -> (Scenario, String, String) {
    let mut s = Scenario::new(w, prefix).await;
    let mut spec = s.spec(all_at_once(), &image(target_image));
    spec["sunset"] = json!({"scaledownDelay": "2s", "deleteDelay": "2s"});
    s.create(spec).await;
    let v1 = twc_version(&s, &image("v1")).await;
    let v2 = twc_version(&s, &image("v2")).await;
    s.wait_registered(&[&v1, &v2]).await;
    s.set_current(&v1).await;
    twc_testenv::temporal::start_workflow(
        &s.temporal,
        &s.temporal_ns,
        &s.name,
        "Sleep",
        "pinned-on-v1",
        Some(&PINNED_SECONDS.to_string()),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    // Its first workflow task pins it to v1.
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.set_current(&v2).await;
    s.set_manager(manager, SETUP_IDENTITY).await;
    s.wait_temporal("v2 current under TWC's identity", |st| {
        st.manager_identity == manager && st.current_build_id.as_deref() == Some(v2.as_str())
    })
    .await;
    s.wait_quiet().await;
    wait_pods_settled(&s, &[&v1, &v2]).await;
    (s, v1, v2)
}

/// Same identity (a release of TWC's name and namespace): nothing rolls, the status is filled
/// in, and v1 sunsets once its pinned workflow is done.
pub async fn taking_over_from_twc_restarts_nothing(w: &'static World) {
    let me = common::test_config().identity;
    let (s, v1, v2) = left_by_twc(w, "takeover-same", &me, "v2").await;
    assert_eq!(
        s.target_build_id(),
        v2,
        "TWC's build ID for the template is ours"
    );
    let before = workloads(&s).await;
    let temporal_before = s.describe().await;

    s.connect().await;
    s.wait_status(
        &Expect::target(&v2, Current)
            .current(&v2)
            .deprecated(&v1, Draining),
    )
    .await;
    tokio::time::sleep(SETTLE).await;
    let after = workloads(&s).await;
    assert_eq!(before.0, after.0, "a ReplicaSet was added or replaced");
    assert_eq!(before.1, after.1, "a pod was restarted");
    let temporal_after = s.describe().await;
    assert_eq!(
        temporal_before.versions.keys().collect::<Vec<_>>(),
        temporal_after.versions.keys().collect::<Vec<_>>(),
        "a new version was registered"
    );
    assert_eq!(
        temporal_after.current_build_id.as_deref(),
        Some(v2.as_str())
    );
    assert_eq!(temporal_after.ramping_build_id, None);
    assert_eq!(temporal_after.manager_identity, me);
    assert_eq!(
        temporal_after.last_modifier_identity, temporal_before.last_modifier_identity,
        "the routing was written"
    );
    let wd = s.get().await;
    let status = wd.status.unwrap_or_default();
    assert_eq!(status.manager_identity.as_deref(), Some(me.as_str()));

    // The Draining version keeps its workers while the pinned workflow runs, then sunsets.
    s.wait_replicas(&v1, 1).await;
    s.wait_completed("pinned-on-v1", Duration::from_secs(PINNED_SECONDS) + WAIT)
        .await
        .unwrap_or_else(|e| panic!("the pinned workflow did not finish on v1: {e}"));
    s.wait_gone(&v1).await;
    let left: Vec<String> = s
        .deployments()
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .iter()
        .map(|d: &Deployment| d.name_any())
        .collect();
    assert_eq!(left, vec![s.deployment_of(&v2)]);
}

/// Another TWC release's identity, named with `--take-over-identity`: adopted the same way,
/// and the next rollout claims the routing and goes on as usual.
pub async fn taking_over_another_identity_needs_the_flag(w: &'static World) {
    let (s, v1, v2) = left_by_twc(w, "takeover-flag", TWC_RELEASE_IDENTITY, "v3").await;
    let before = workloads(&s).await;
    s.connect().await;
    let v3 = s.target_build_id();
    assert!(v3 != v1 && v3 != v2);
    // v3 is new: rolled out under the claimed identity; v1 and v2 were adopted unchanged.
    s.wait_status(&Expect::target(&v3, Current).current(&v3))
        .await;
    let me = common::test_config().identity;
    assert_eq!(s.describe().await.manager_identity, me, "not claimed");
    let after = workloads(&s).await;
    for rs in &before.0 {
        let kept = after.0.contains(rs)
            || !after
                .0
                .iter()
                .any(|a| a.split(' ').next() == rs.split(' ').next());
        assert!(kept, "ReplicaSet {rs} was replaced");
    }
}
