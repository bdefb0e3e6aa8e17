//! Deleting a WorkerDeployment (TWC's `deletion-*` cases).

use std::time::Duration;

use kube::api::{Api, DeleteParams};
use twc_api::Connection;
use twc_api::VersionStatus::{Current, Ramping};

use crate::common::{self, World};
use crate::harness::*;

/// `deletion-sets-current-to-unversioned`: (st) v1.0 current and v2.0 ramping at 50%, set by
/// someone else; deleting the WorkerDeployment routes Temporal back to unversioned (here the
/// controller then deletes the versions and the worker deployment too).
pub async fn deletion_sets_current_to_unversioned(w: &'static World) {
    let mut s = Scenario::new(w, "deletion-unversioned").await;
    s.create(s.spec(manual(), &image("v1.0"))).await;
    let v1 = s.existing_version(&image("v1.0"), 1).await;
    let v2 = s.existing_version(&image("v2.0"), 1).await;
    s.wait_registered(&[&v1, &v2]).await;
    s.set_current(&v1).await;
    s.set_ramping(&v2, 50.0).await;
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
