//! Deleting a WorkerDeployment (TWC's `deletion-*` cases).

use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use twc_api::VersionStatus::{Current, Ramping};
use twc_api::conditions::{
    CLEANUP_BLOCKED, READY, ROUTED_BY_ANOTHER_MANAGER, WAITING_FOR_DRAINAGE,
};
use twc_api::{ClusterConnection, Connection, SKIP_DRAINAGE_ANNOTATION};

use crate::common::{self, World, from_json};
use crate::harness::*;

/// `deletion-sets-current-to-unversioned`: (st) v1.0 current and v2.0 ramping at 50%, set by
/// someone else; deleting the WorkerDeployment routes Temporal back to unversioned (here the
/// controller then deletes the versions and the worker deployment too).
pub async fn deletion_sets_current_to_unversioned(w: &'static World) {
    let mut s = Scenario::new(w, "deletion-unversioned").await;
    let (v1, v2) = s.v1_current_v2_ramping().await;
    s.connect().await;
    s.wait_status(
        &Expect::target(&v1, Current)
            .current(&v1)
            .deprecated(&v2, Ramping),
    )
    .await;

    common::delete_wd(&s.client, &s.ns, &s.name).await;
    common::wait_wd_gone(&s.client, &s.ns, &s.name, WAIT).await;
    let state = s.describe().await;
    assert!(
        !state.exists || (state.current_build_id.is_none() && state.ramping_build_id.is_none()),
        "Temporal still routes to versions of a deleted WorkerDeployment: {state:?}"
    );
    for b in [&v1, &v2] {
        s.wait_gone(b).await;
    }
}

/// `deletion-removes-connection-finalizer`: a Connection deleted while a WorkerDeployment
/// uses it stays (Terminating) until that WorkerDeployment is gone, then goes.
pub async fn deletion_removes_connection_finalizer(w: &'static World) {
    let mut s = Scenario::new(w, "deletion-finalizer").await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    s.connect().await;
    let target = s.target_build_id();
    let wd = s
        .wait_status(&Expect::target(&target, Current).current(&target))
        .await;
    assert!(
        common::has_finalizer(&wd),
        "no finalizer on the WorkerDeployment"
    );
    // Events tell the story in order: the version registered before it was promoted.
    let reasons = s.event_reasons().await;
    let at = |r: &str| reasons.iter().position(|x| x == r);
    assert!(
        at("VersionRegistered").is_some() && at("VersionRegistered") < at("VersionPromoted"),
        "{reasons:?}"
    );
    common::wait_connection(&s.client, &s.ns, CONNECTION, "protected", WAIT).await;

    let connections: Api<Connection> = Api::namespaced(s.client.clone(), &s.ns);
    connections
        .delete(CONNECTION, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let terminating = connections
        .get(CONNECTION)
        .await
        .unwrap_or_else(|e| panic!("the Connection went while in use: {e}"));
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert!(common::has_finalizer(&terminating));

    common::delete_wd(&s.client, &s.ns, &s.name).await;
    common::wait_wd_gone(&s.client, &s.ns, &s.name, WAIT).await;
    common::wait_connection(&s.client, &s.ns, CONNECTION, "gone", WAIT).await;
}

/// How long the pinned workflow of [`deletion_waits_for_pinned_workflows`] sleeps.
const PINNED_SECONDS: u64 = 20;

/// How long the pinned workflow of
/// [`deletion_waits_for_pinned_workflows_where_they_were_registered`] sleeps: it must outlive
/// a move to another Temporal namespace and a new version becoming Current there, which took
/// more than 20 s on a busy 2-core machine.
const PINNED_THROUGH_A_MOVE_SECONDS: u64 = 60;

/// Starts workflow `pinned-on-v1` (sleeping `seconds`) in the scenario's Temporal namespace,
/// and waits for its first workflow task to pin it to the current version.
async fn start_pinned(s: &Scenario, seconds: u64) {
    let seconds = seconds.to_string();
    twc_testenv::temporal::start_workflow(
        &s.temporal,
        &s.temporal_ns,
        &s.name,
        "Sleep",
        "pinned-on-v1",
        Some(&seconds),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Not a TWC subtest (#11 path 5). TWC deletes every worker at once and every version with
/// `skipDrainage`, so pinned workflows lose their workers. Here deleting routes new work to
/// unversioned workers and then keeps the workers of a version with an open pinned workflow
/// (`Ready=False WaitingForDrainage`, naming it) until the workflow is done; then everything
/// goes. Before: the Deployment was deleted at once and the workflow never completed.
pub async fn deletion_waits_for_pinned_workflows(w: &'static World) {
    let mut s = Scenario::new(w, "deletion-drains").await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    s.connect().await;
    let v1 = s.target_build_id();
    s.wait_status(&Expect::target(&v1, Current).current(&v1))
        .await;
    start_pinned(&s, PINNED_SECONDS).await;

    common::delete_wd(&s.client, &s.ns, &s.name).await;
    let message = s.wait_condition(READY, "False", WAITING_FOR_DRAINAGE).await;
    assert!(message.contains(&v1), "{message}");
    assert!(message.contains(SKIP_DRAINAGE_ANNOTATION), "{message}");
    let state = s.describe().await;
    assert_eq!(state.current_build_id, None, "new work still goes to v1");
    s.wait_replicas(&v1, 1).await;

    s.wait_completed("pinned-on-v1", Duration::from_secs(PINNED_SECONDS) + WAIT)
        .await
        .unwrap_or_else(|e| panic!("the pinned workflow did not finish on its version: {e}"));
    common::wait_wd_gone(&s.client, &s.ns, &s.name, WAIT).await;
    s.wait_gone(&v1).await;
}

/// A version left draining in the Temporal namespace it was registered in, after
/// `temporalNamespace` moved the WorkerDeployment (and a new template) elsewhere: deleting the
/// WorkerDeployment routes that namespace back to unversioned too and keeps the version's
/// workers (`WaitingForDrainage`, naming it and its namespace) until its pinned workflow is
/// done; then everything goes. Before: the cleanup read only the spec's namespace, found
/// nothing pinned there and deleted the old version's workers under its workflow.
pub async fn deletion_waits_for_pinned_workflows_where_they_were_registered(w: &'static World) {
    let mut s = Scenario::new(w, "deletion-moved").await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    s.connect().await;
    let v1 = s.target_build_id();
    s.wait_status(&Expect::target(&v1, Current).current(&v1))
        .await;
    let old_ns = s.temporal_ns.clone();
    start_pinned(&s, PINNED_THROUGH_A_MOVE_SECONDS).await;

    // Moved, with a new build: v2 goes to the new namespace, v1 stays with its workflow.
    let new_ns = w
        .env
        .temporal_namespace()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut spec = s.spec(all_at_once(), &image("v2"));
    spec["workerOptions"]["temporalNamespace"] = json!(new_ns);
    s.wds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    s.temporal_ns = new_ns;
    s.wait_temporal("v2 current in the new namespace", |t| {
        t.current_build_id.as_ref().is_some_and(|c| *c != v1)
    })
    .await;
    // What the deletion must wait for is still there (else this test proves nothing).
    let status = twc_testenv::temporal::workflow_status(&s.temporal, &old_ns, "pinned-on-v1")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        status, "Running",
        "the pinned workflow ended before the deletion"
    );

    common::delete_wd(&s.client, &s.ns, &s.name).await;
    let message = s.wait_condition(READY, "False", WAITING_FOR_DRAINAGE).await;
    assert!(
        message.contains(&v1) && message.contains(&old_ns),
        "the condition names neither the version nor where it drains: {message}"
    );
    s.wait_replicas(&v1, 1).await;
    s.temporal_ns = old_ns;
    assert_eq!(
        s.describe().await.current_build_id,
        None,
        "new work still goes to v1 in its namespace"
    );
    s.wait_completed(
        "pinned-on-v1",
        Duration::from_secs(PINNED_THROUGH_A_MOVE_SECONDS) + WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("the pinned workflow did not finish on its version: {e}"));
    common::wait_wd_gone(&s.client, &s.ns, &s.name, WAIT).await;
    s.wait_gone(&v1).await;
}

/// Not a TWC subtest (#11 path 5): when another manager owns the routing (Temporal is left
/// as it is) and still routes new work to a version, its workers stay and the deletion waits
/// with a Warning saying so and how to get out; the annotation
/// `temporal.io/skip-drainage=true` lets it go. Before: every worker was deleted and Temporal
/// kept routing new work to a version without workers.
pub async fn deletion_waits_while_another_manager_routes_to_a_version(w: &'static World) {
    let mut s = Scenario::new(w, "deletion-foreign").await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    s.connect().await;
    let v1 = s.target_build_id();
    s.wait_status(&Expect::target(&v1, Current).current(&v1))
        .await;
    s.set_manager("someone-else", SETUP_IDENTITY).await;

    common::delete_wd(&s.client, &s.ns, &s.name).await;
    let message = s
        .wait_condition(READY, "False", ROUTED_BY_ANOTHER_MANAGER)
        .await;
    assert!(
        message.contains(&v1) && message.contains("someone-else"),
        "{message}"
    );
    s.wait_warning(ROUTED_BY_ANOTHER_MANAGER).await;
    tokio::time::sleep(SETTLE).await;
    s.wait_replicas(&v1, 1).await;

    s.wds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {SKIP_DRAINAGE_ANNOTATION: "true"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    common::wait_wd_gone(&s.client, &s.ns, &s.name, WAIT).await;
    s.wait_gone(&v1).await;
    // Routing is the other manager's: left as it is.
    assert_eq!(
        s.describe().await.current_build_id.as_deref(),
        Some(v1.as_str())
    );
}

/// Not a TWC subtest (#37): a version left in a Temporal namespace that its ClusterConnection
/// no longer allows is not touched there by the deletion. Its workers stay, the deletion waits
/// naming it and the rule, and `temporal.io/skip-drainage=true` lets it go with that Temporal
/// namespace left as it is. Before: the cleanup routed that namespace back to unversioned and
/// deleted its versions, through a connection that forbids it.
pub async fn deletion_acts_only_where_the_cluster_connection_allows(w: &'static World) {
    let mut s = Scenario::new(w, "deletion-allowed").await;
    let old_ns = s.temporal_ns.clone();
    let new_ns = w
        .env
        .temporal_namespace()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Named after the Kubernetes namespace: unique, as the scenarios share the cluster.
    let cc_name = s.ns.clone();
    let ccs: Api<ClusterConnection> = Api::all(s.client.clone());
    let cc: ClusterConnection = from_json(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
        "metadata": {"name": cc_name},
        "spec": {"hostPort": s.address, "allowedTemporalNamespaces": [old_ns, new_ns]},
    }));
    ccs.create(&Default::default(), &cc)
        .await
        .unwrap_or_else(|e| panic!("create ClusterConnection {cc_name}: {e}"));
    let reference = json!({"objectRef": {
        "apiGroup": "temporal.io", "kind": "ClusterConnection", "name": cc_name
    }});
    let mut spec = s.spec(all_at_once(), &image("v1"));
    spec["workerOptions"]["connectionRef"] = reference.clone();
    s.create(spec).await;
    let v1 = s.target_build_id();
    s.wait_status(&Expect::target(&v1, Current).current(&v1))
        .await;

    // Moved, with a new build: v2 goes to the new namespace, v1 stays current in the old one.
    let mut spec = s.spec(all_at_once(), &image("v2"));
    spec["workerOptions"]["connectionRef"] = reference;
    spec["workerOptions"]["temporalNamespace"] = json!(new_ns);
    let merge = |body| Patch::Merge(body);
    s.wds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &merge(json!({"spec": spec})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    s.temporal_ns = new_ns.clone();
    s.wait_temporal("v2 current in the new namespace", |t| {
        t.current_build_id.as_ref().is_some_and(|c| *c != v1)
    })
    .await;
    s.wait_replicas(&v1, 1).await;
    // The platform team narrows the ClusterConnection to the new namespace.
    let narrowed = json!({"spec": {"allowedTemporalNamespaces": [new_ns]}});
    ccs.patch(&cc_name, &PatchParams::default(), &merge(narrowed))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(SETTLE).await;

    common::delete_wd(&s.client, &s.ns, &s.name).await;
    let message = s.wait_condition(READY, "False", WAITING_FOR_DRAINAGE).await;
    assert!(
        message.contains(&v1) && message.contains("does not allow Temporal namespace"),
        "the condition names neither the version nor the rule: {message}"
    );
    tokio::time::sleep(SETTLE).await;
    s.wait_replicas(&v1, 1).await;
    s.temporal_ns = old_ns;
    let untouched = |what| {
        let s = &s;
        let v1 = v1.clone();
        async move {
            let state = s.describe().await;
            assert_eq!(
                state.current_build_id.as_deref(),
                Some(v1.as_str()),
                "{what}: the deletion acted in a Temporal namespace the ClusterConnection does not allow: {state:?}"
            );
            assert!(state.versions.contains_key(&v1), "{what}: {state:?}");
        }
    };
    untouched("while the deletion waits").await;

    let skip = json!({"metadata": {"annotations": {SKIP_DRAINAGE_ANNOTATION: "true"}}});
    s.wds()
        .patch(&s.name, &PatchParams::default(), &merge(skip))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    common::wait_wd_gone(&s.client, &s.ns, &s.name, WAIT).await;
    s.wait_gone(&v1).await;
    untouched("after the deletion").await;
    let _ = ccs.delete(&cc_name, &DeleteParams::default()).await;
}

/// Not a TWC subtest (#37): a WorkerDeployment whose status says it never reached Temporal
/// (lost, or never written) but which runs workers of its own is not let go without its
/// cleanup when its connection fails: the deletion waits (`CleanupBlocked`), its workers stay,
/// and once the connection works again the cleanup runs. Before: the "never connected"
/// shortcut trusted the status alone, deleted the workers and left Temporal routing to them.
pub async fn deletion_with_workers_is_not_skipped_for_a_lost_status(w: &'static World) {
    let mut s = Scenario::new(w, "deletion-status-lost").await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    s.connect().await;
    let v1 = s.target_build_id();
    s.wait_status(&Expect::target(&v1, Current).current(&v1))
        .await;
    let to = |name: &str| {
        let mut spec = s.spec(all_at_once(), &image("v1"));
        spec["workerOptions"]["connectionRef"] = json!({"name": name});
        Patch::Merge(json!({"spec": spec}))
    };
    s.wds()
        .patch(&s.name, &PatchParams::default(), &to("missing"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    s.wait_condition(READY, "False", "ConnectionNotFound").await;
    // The status is lost (restored from a backup without it, or cleared by hand).
    let cleared = json!({"status": {"versionCount": null, "currentVersion": null}});
    s.wds()
        .patch_status(&s.name, &PatchParams::default(), &Patch::Merge(cleared))
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    common::delete_wd(&s.client, &s.ns, &s.name).await;
    let message = s.wait_condition(READY, "False", CLEANUP_BLOCKED).await;
    assert!(message.contains("missing"), "{message}");
    tokio::time::sleep(SETTLE).await;
    s.wait_replicas(&v1, 1).await;
    assert_eq!(
        s.describe().await.current_build_id.as_deref(),
        Some(v1.as_str()),
        "Temporal was changed without a connection"
    );

    s.wds()
        .patch(&s.name, &PatchParams::default(), &to(CONNECTION))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    common::wait_wd_gone(&s.client, &s.ns, &s.name, WAIT).await;
    s.wait_gone(&v1).await;
    let state = s.describe().await;
    assert!(
        !state.exists || state.current_build_id.is_none(),
        "the cleanup did not run once the connection worked: {state:?}"
    );
}
