//! The manager identity (TWC's `*-blocked-by-manager-identity` and
//! `*-unblocked-after-manager-identity-cleared` cases): while someone else manages the
//! routing, the controller changes nothing; once they let go, it carries on.
//!
//! TWC still sent the routing change and let the server refuse it (`VersionPromotionFailed`,
//! retried with backoff); we do not send it and say so in the Progressing condition. The
//! outcome the scenarios check is the same.

use twc_api::VersionStatus::{Current, Drained, Inactive, Ramping};

use crate::common::World;
use crate::harness::*;

const OTHER: &str = "some-other-cli-user";

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    Manual,
    AllAtOnce,
    Progressive,
}

/// (st) v0 current, the routing managed by [`OTHER`]; target v1. Returns the scenario, v0
/// and v1 once the controller has seen the state and held still for [`SETTLE`].
async fn blocked(
    w: &'static World,
    prefix: &str,
    strategy: Strategy,
) -> (Scenario, String, String) {
    let mut s = Scenario::new(w, prefix).await;
    let rollout = match strategy {
        Strategy::Manual => manual(),
        Strategy::AllAtOnce => all_at_once(),
        Strategy::Progressive => progressive(5, "1h"),
    };
    s.create(s.spec(rollout, &image("v1"))).await;
    let v0 = s.existing_version(&image("v0"), 1).await;
    s.wait_registered(&[&v0]).await;
    s.set_current(&v0).await;
    s.set_manager(OTHER, SETUP_IDENTITY).await;
    s.wait_temporal("managed by someone else", |st| st.manager_identity == OTHER)
        .await;
    s.wait_quiet().await;
    s.connect().await;
    let v1 = s.target_build_id();
    let wd = s.settle(&Expect::target(&v1, Inactive).current(&v0)).await;
    assert_eq!(
        wd.status.and_then(|st| st.manager_identity).as_deref(),
        Some(OTHER)
    );
    assert_eq!(s.describe().await.manager_identity, OTHER);
    if strategy != Strategy::Manual {
        // The condition names the manager that holds the rollout back.
        s.wait_progressing_says(&[OTHER]).await;
    }
    (s, v0, v1)
}

/// The other manager lets go; the controller carries on with its strategy.
async fn unblocked(w: &'static World, prefix: &str, strategy: Strategy) {
    let (s, v0, v1) = blocked(w, prefix, strategy).await;
    s.set_manager("", OTHER).await;
    match strategy {
        // Manual changes nothing, so it claims nothing either.
        Strategy::Manual => {
            s.settle(&Expect::target(&v1, Inactive).current(&v0)).await;
            assert_eq!(s.describe().await.manager_identity, "");
        }
        Strategy::AllAtOnce => {
            s.wait_status(
                &Expect::target(&v1, Current)
                    .current(&v1)
                    .deprecated(&v0, Drained),
            )
            .await;
            // Differs from TWC on purpose: TWC saw a version demoted moments ago, before
            // Temporal computed its drainage, as Inactive and scaled it to 0 at once; we treat
            // it as Draining and keep its workers until drained + scaledownDelay (1h here).
            s.wait_replicas(&v0, 1).await;
        }
        Strategy::Progressive => {
            s.wait_status(&Expect::target(&v1, Ramping).ramp(5.0).current(&v0))
                .await;
        }
    }
}

pub async fn manual_rollout_blocked_by_manager_identity(w: &'static World) {
    blocked(w, "manual-managed", Strategy::Manual).await;
}

pub async fn manual_rollout_unblocked_after_manager_identity_cleared(w: &'static World) {
    unblocked(w, "manual-unmanaged", Strategy::Manual).await
}

pub async fn all_at_once_rollout_blocked_by_manager_identity(w: &'static World) {
    blocked(w, "aao-managed", Strategy::AllAtOnce).await;
}

pub async fn all_at_once_unblocked_after_manager_identity_cleared(w: &'static World) {
    unblocked(w, "aao-unmanaged", Strategy::AllAtOnce).await
}

pub async fn progressive_rollout_blocked_by_manager_identity(w: &'static World) {
    blocked(w, "prog-managed", Strategy::Progressive).await;
}

pub async fn progressive_rollout_unblocked_after_manager_identity_cleared(w: &'static World) {
    unblocked(w, "prog-unmanaged", Strategy::Progressive).await
}
