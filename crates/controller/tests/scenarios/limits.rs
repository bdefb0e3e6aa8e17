//! The version cap (TWC's `*-blocked-at-max-*` and `6th-/7th-rollout-*` cases). The controller
//! of this binary refuses a new version while [`MAX_UNDELETABLE`] (5) versions cannot be
//! deleted.
//!
//! We count every version Temporal could not delete to make room: not Drained, or Drained with
//! running workers, the current one included (the server's `maxVersionsInDeployment` counts
//! it too). TWC's snapshot counted only the deprecated ones, so under TWC v0-v3 Drained with
//! pollers plus v4 current (4 deprecated) would not block, and the blocked cases only passed
//! there because envtest runs no pods for the new version. Here the new version's workers
//! would really poll, so the cap must count the current version for the blocked cases to hold.

use twc_api::VersionStatus::{Current, Drained, NotRegistered};

use crate::common::World;
use crate::harness::*;

/// Versions v0..v{n-1} with one worker each, made current in turn, so that all but the last
/// are Drained (with pollers) and the last is current. Returns their build IDs.
async fn drained_chain(s: &Scenario, n: usize) -> Vec<String> {
    // v0 registers first: it is the oldest version, the one a server at its cap deletes.
    let mut builds = vec![s.existing_version(&image("v0"), 1).await];
    s.wait_registered(&[&builds[0]]).await;
    for i in 1..n {
        builds.push(s.existing_version(&image(&format!("v{i}")), 1).await);
    }
    let refs: Vec<&str> = builds.iter().map(String::as_str).collect();
    s.wait_registered(&refs).await;
    // One at a time: each demoted version drains before the next promotion (the dev server
    // sometimes leaves a version Draining when promotions follow each other within a second).
    for (i, b) in builds.iter().enumerate() {
        s.set_current(b).await;
        if i > 0 {
            s.wait_versions(&refs[i - 1..i], Drained).await;
        }
    }
    builds
}

/// (st) current v4; v0-v3 Drained with pollers; target v5: not created.
async fn blocked_at_max(w: &'static World, prefix: &str, rollout: serde_json::Value) {
    let mut s = Scenario::new(w, prefix).await;
    s.create(s.spec(rollout, &image("v5"))).await;
    let olds = drained_chain(&s, 5).await;
    s.connect().await;
    let target = s.target_build_id();
    let mut expect = Expect::target(&target, NotRegistered).current(&olds[4]);
    for b in &olds[..4] {
        expect = expect.deprecated(b, Drained);
    }
    let wd = s.settle(&expect).await;
    assert!(
        s.deployments()
            .get_opt(&s.deployment_of(&target))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none(),
        "the Deployment of {target} was created past the version cap"
    );
    assert!(
        eligible_for_deletion(&wd).iter().all(|(_, e)| !e),
        "Drained versions with pollers are not eligible for deletion: {:?}",
        eligible_for_deletion(&wd)
    );
    for b in &olds {
        s.wait_replicas(b, 1).await;
    }
    // The condition says why.
    let (reason, _) = s
        .wait_progressing_says(&[
            &format!("not creating buildID {target}"),
            &format!("(limit {MAX_UNDELETABLE})"),
        ])
        .await;
    assert_eq!(reason, "WaitingForPollers");
}

pub async fn manual_rollout_blocked_at_max_versions_ineligible_for_deletion(w: &'static World) {
    blocked_at_max(w, "manual-max", manual()).await
}

pub async fn all_at_once_blocked_at_max_versions_ineligible_for_deletion(w: &'static World) {
    blocked_at_max(w, "aao-max", all_at_once()).await
}

pub async fn progressive_rollout_blocked_at_ctrlr_max_versions(w: &'static World) {
    blocked_at_max(w, "prog-max", progressive(5, "1h")).await
}

/// `6th-rollout-unblocked-after-pollers-die-max-ctrlr-versions`: (st) v0 Drained with no
/// workers, v1-v3 Drained with workers, v4 current; target v5 is created (4 versions cannot
/// be deleted) and promoted; v4 drains.
pub async fn sixth_rollout_unblocked_after_pollers_die_max_ctrlr_versions(w: &'static World) {
    let mut s = Scenario::new(w, "sixth-rollout").await;
    s.create(s.spec(all_at_once(), &image("v5"))).await;
    let olds = drained_chain(&s, 5).await;
    // v0's workers stop; the dev server forgets pollers after 1s (`matching.PollerHistoryTTL`).
    s.scale(&olds[0], 0).await;
    s.connect().await;
    let target = s.target_build_id();
    let mut expect = Expect::target(&target, Current).current(&target);
    for b in &olds {
        expect = expect.deprecated(b, Drained);
    }
    let wd = s.wait_status(&expect).await;
    // Drained without workers (v0) is eligible for deletion; Drained with workers is not.
    let mut eligible = vec![(olds[0].clone(), true)];
    eligible.extend(olds[1..].iter().map(|b| (b.clone(), false)));
    eligible.sort();
    assert_eq!(eligible_for_deletion(&wd), eligible);
    s.wait_replicas(&olds[0], 0).await;
    for b in &olds[1..] {
        s.wait_replicas(b, 1).await;
    }
}

/// `7th-rollout-unblocked-after-pollers-die-version-deleted`, on a dev server that keeps at
/// most 6 versions (as TWC's): (st) v0 Drained with no workers, v1-v4 Drained with workers,
/// v5 current; target v6.
///
/// Differs from TWC on purpose: we count the current v5 among the versions that cannot be
/// deleted (see the module doc), so v1-v5 make 5 and v6 waits, where TWC (counting 4
/// deprecated ones) created it at once. Here the rollout is unblocked when the pollers of one
/// more version die (v1 scaled to 0). Then, as in TWC, v6's workers register, the server (at
/// its cap) deletes the oldest deletable version, v0, which becomes NotRegistered, and the
/// controller deletes v0's Deployment; v6 is promoted.
pub async fn seventh_rollout_unblocked_after_pollers_die_version_deleted(w: &'static World) {
    let mut s = Scenario::on(w, capped_server().await, "seventh-rollout").await;
    s.create(s.spec(all_at_once(), &image("v6"))).await;
    let olds = drained_chain(&s, 6).await;
    s.scale(&olds[0], 0).await;
    s.connect().await;
    let target = s.target_build_id();
    let mut blocked = Expect::target(&target, NotRegistered).current(&olds[5]);
    for b in &olds[..5] {
        blocked = blocked.deprecated(b, Drained);
    }
    s.settle(&blocked).await;
    s.wait_progressing_says(&[&format!("not creating buildID {target}")])
        .await;

    s.scale(&olds[1], 0).await;
    let mut expect = Expect::target(&target, Current).current(&target);
    for b in &olds[1..] {
        expect = expect.deprecated(b, Drained);
    }
    s.wait_status(&expect).await;
    assert!(
        !s.describe().await.versions.contains_key(&olds[0]),
        "the server did not delete v0 to make room"
    );
    s.wait_gone(&olds[0]).await;
    s.wait_replicas(&olds[1], 0).await;
    for b in &olds[2..] {
        s.wait_replicas(b, 1).await;
    }
}
