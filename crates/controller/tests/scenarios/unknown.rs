//! Not TWC subtests: what Temporal cannot account for is kept as it is, never taken for
//! what is not there (#11 path 2); a template never silently takes another's build ID (path 8).

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use twc_api::VersionStatus::{Current, Draining, NotRegistered};
use twc_api::conditions::{VERSIONS_KEPT, VERSIONS_KNOWN};

use twc_controller::plan::build_id;

use crate::common::World;
use crate::harness::*;

/// The `TEMPORAL_NAMESPACE` the first container of `d` is given.
fn namespace_of(d: &Deployment) -> Option<String> {
    twc_testenv::deployments::worker_env_value(d, "TEMPORAL_NAMESPACE")
}

/// v1 was current and now drains in the old Temporal namespace, v2 is current there; then
/// `temporalNamespace` changes. v1 keeps its workers where its pinned workflows are (named in
/// `VersionsKnown=False` and a Warning); the target v2 follows the spec to the new namespace
/// and is promoted there. Before: v1's Deployment was deleted within seconds (not listed in
/// the new namespace) and v2 kept polling the old one, waiting for pollers forever.
pub async fn a_temporal_namespace_change_moves_the_target_and_keeps_older_versions(
    w: &'static World,
) {
    let mut s = Scenario::new(w, "namespace-change").await;
    s.create(s.spec(all_at_once(), &image("v2"))).await;
    let v1 = s.existing_version(&image("v1"), 1).await;
    s.wait_registered(&[&v1]).await;
    s.set_current(&v1).await;
    s.connect().await;
    let v2 = s.target_build_id();
    s.wait_temporal("v2 current in the old namespace", |t| {
        t.current_build_id.as_deref() == Some(v2.as_str())
    })
    .await;

    let old_ns = s.temporal_ns.clone();
    let new_ns = w
        .env
        .temporal_namespace()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    s.wds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workerOptions": {"temporalNamespace": new_ns}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    s.temporal_ns = new_ns.clone();

    // The target moved and is current in the new namespace; v1 is still listed, with its
    // Deployment.
    s.wait_status(
        &Expect::target(&v2, Current)
            .current(&v2)
            .deprecated(&v1, NotRegistered),
    )
    .await;
    let target = s
        .deployments()
        .get(&s.deployment_of(&v2))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(namespace_of(&target).as_deref(), Some(new_ns.as_str()));

    let message = s
        .wait_condition(VERSIONS_KNOWN, "False", VERSIONS_KEPT)
        .await;
    assert!(
        message.contains(&v1) && message.contains(&old_ns),
        "the condition names neither the version nor its namespace: {message}"
    );
    let warning = s.wait_warning(VERSIONS_KEPT).await;
    assert!(warning.contains(&v1), "{warning}");

    // Left as it is: not scaled, not deleted, still polling the old namespace.
    tokio::time::sleep(SETTLE).await;
    s.wait_replicas(&v1, 1).await;
    let old = s
        .deployments()
        .get(&s.deployment_of(&v1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(namespace_of(&old).as_deref(), Some(old_ns.as_str()));
}

/// Two values of env var `FLAVOUR` whose templates (as `spec` renders them) get the same
/// build ID: found by hashing until two meet (about a hundred tries, by the birthday bound).
fn colliding_flavours(spec: &serde_json::Value) -> (String, String) {
    let mut seen = std::collections::HashMap::new();
    for i in 0..100_000 {
        let flavour = format!("f{i}");
        let template =
            crate::common::from_json(with_flavour(spec.clone(), &flavour)["template"].clone());
        let build = build_id::build_id(&template, None);
        if let Some(first) = seen.insert(build, flavour.clone()) {
            return (first, flavour);
        }
    }
    panic!("no two templates met in 100,000 tries");
}

fn with_flavour(mut spec: serde_json::Value, flavour: &str) -> serde_json::Value {
    spec["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "FLAVOUR", "value": flavour}]);
    spec
}

/// Not a TWC subtest (#11 path 8): a changed template that hashes to the build ID of the
/// template already running gets a build ID of its own (collision count 1, a Warning) and is
/// rolled out. Before: the change was silently ignored, the old template kept running.
pub async fn a_template_whose_build_id_is_taken_gets_its_own(w: &'static World) {
    let mut s = Scenario::new(w, "collision").await;
    let spec = s.spec(all_at_once(), &image("v1"));
    let (a, b) = colliding_flavours(&spec);
    s.create(with_flavour(spec.clone(), &a)).await;
    s.connect().await;
    let taken = s.target_build_id();
    s.wait_status(&Expect::target(&taken, Current).current(&taken))
        .await;

    let changed = with_flavour(spec, &b);
    let template = crate::common::from_json(changed["template"].clone());
    assert_eq!(build_id::build_id(&template, None), taken);
    let own = build_id::build_id_with(&template, None, 1);
    s.wds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": changed["template"]}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let wd = crate::common::wait_wd(
        &s.client,
        &s.ns,
        &s.name,
        "the new template current",
        WAIT,
        |wd| {
            wd.status.as_ref().is_some_and(|st| {
                st.current_version
                    .as_ref()
                    .is_some_and(|c| c.base.build_id == own)
            })
        },
    )
    .await;
    assert_eq!(wd.status.and_then(|st| st.collision_count), Some(1));
    let warning = s.wait_warning("BuildIDCollision").await;
    assert!(warning.contains(&own), "{warning}");
    let deployment = s
        .deployments()
        .get(&s.deployment_of(&own))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let env = deployment
        .spec
        .and_then(|d| d.template.spec)
        .and_then(|p| p.containers.first().cloned())
        .and_then(|c| c.env)
        .unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e.name == "FLAVOUR" && e.value.as_deref() == Some(b.as_str())),
        "{env:?}"
    );
}

/// A version that ramped (never current) and stops ramping while a workflow pinned to it
/// runs: every read from the moment it is demoted says Draining, never Inactive (an Inactive
/// version with nothing routed to it is one the controller may scale down and delete).
pub async fn a_version_demoted_from_ramping_is_never_inactive(w: &'static World) {
    let mut s = Scenario::new(w, "demoted-ramp").await;
    let (_, v2) = s.v1_current_v2_ramping().await;
    twc_testenv::temporal::start_workflow_pinned(
        &s.temporal,
        &s.temporal_ns,
        &s.name,
        "Sleep",
        "pinned-on-ramp",
        Some("60"),
        Some((&s.deployment_name, &v2)),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    // Its first workflow task runs on v2.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    s.set_ramping("", 0.0).await;
    let mut seen = Vec::new();
    for _ in 0..20 {
        let state =
            twc_controller::temporal::describe(&s.temporal, &s.temporal_ns, &s.deployment_name)
                .await;
        if let Ok(state) = state {
            seen.push(state.versions.get(&v2).map(|v| v.status));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert!(
        !seen.is_empty() && seen.iter().all(|s| *s == Some(Draining)),
        "v2 after its ramp ended, read by read: {seen:?}"
    );
}
