//! The versions' Deployments: created, scaled, sunset, reconnected, or kept as they are.

use super::*;

#[test]
fn sunset_scales_drained_versions_down_then_deletes_them_and_never_touches_draining_ones() {
    use VersionStatus::{Current, Draining, Inactive};
    let wd = wd("AllAtOnce", "w:v3");
    let target = target_of(&wd);
    let ago = |secs: u64| t(100_000 - secs);
    let o = world(&wd)
        .at(t(100_000))
        .deployment(&target, None)
        .version(&target, Current)
        .current(&target)
        .deployment("draining", Some(2))
        .version("draining", Draining)
        .deployment("drained-recent", Some(2))
        .drained_since("drained-recent", ago(600))
        .deployment("drained-old", Some(2))
        .drained_since("drained-old", ago(2 * 3600))
        .deployment("drained-ancient", Some(0))
        .drained_since("drained-ancient", ago(26 * 3600))
        .deployment("inactive", Some(2))
        .version("inactive", Inactive)
        .deployment("gone-from-temporal", Some(1))
        .no_ready_pods("gone-from-temporal")
        .deployment("unlisted-but-up", Some(1))
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    let name = |b: &str| build_id::deployment_name("w", b);
    let mut scaled = p.scale.clone();
    scaled.sort();
    assert_eq!(
        scaled,
        vec![(name("drained-old"), 0), (name("inactive"), 0)]
    );
    let mut deleted = p.delete_deployments.clone();
    deleted.sort();
    assert_eq!(
        deleted,
        vec![name("drained-ancient"), name("gone-from-temporal")]
    );
    assert_eq!(p.delete_versions, vec!["drained-ancient".to_string()]);
    assert!(!p.scale.iter().any(|(n, _)| *n == name("draining")));
    assert_eq!(
        p.kept,
        vec![Kept {
            build_id: "unlisted-but-up".into(),
            why: Unaccounted::NotListed { ready: 1 }
        }]
    );
}

/// What the planner touches of the Deployment of `build`: scaled, deleted, reconnected.
fn touched(p: &Plan, build: &str) -> Vec<&'static str> {
    let name = build_id::deployment_name("w", build);
    let mut out = Vec::new();
    if p.scale.iter().any(|(n, _)| *n == name) {
        out.push("scaled");
    }
    if p.delete_deployments.contains(&name) {
        out.push("deleted");
    }
    if p.reconnect.iter().any(|b| b == build) {
        out.push("reconnected");
    }
    out
}

#[test]
fn a_temporal_namespace_change_moves_the_target_and_keeps_the_older_versions_where_they_are() {
    use VersionStatus::NotRegistered;
    let mut wd = wd("AllAtOnce", "w:v2");
    wd.spec.worker_options.temporal_namespace = "elsewhere".into();
    let target = target_of(&wd);
    // v1 drains pinned workflows in "default", v2 is current there; the new namespace has
    // never seen this worker deployment.
    let o = world(&wd)
        .deployment("v1", Some(1))
        .polls_namespace("v1", "default")
        .deployment("v1-scaled-down", Some(0))
        .polls_namespace("v1-scaled-down", "default")
        .deployment(&target, Some(1))
        .polls_namespace(&target, "default")
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(p.apply.len(), 1, "the target moves to the new namespace");
    assert_eq!(touched(&p, "v1"), Vec::<&str>::new());
    assert_eq!(touched(&p, "v1-scaled-down"), Vec::<&str>::new());
    let other = || Unaccounted::OtherNamespace("default".into());
    assert_eq!(
        p.kept,
        vec![
            Kept {
                build_id: "v1".into(),
                why: other()
            },
            Kept {
                build_id: "v1-scaled-down".into(),
                why: other()
            },
        ]
    );
    assert_eq!(status_of(&o.temporal, &target), NotRegistered);
    assert_eq!(p.routing, None);
}

#[test]
fn a_worker_deployment_temporal_does_not_find_deletes_no_worker_that_is_up() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    // Deleted in Temporal, or a NotFound of another cause: nothing is listed.
    let o = world(&wd)
        .deployment(&target, Some(1))
        .deployment("was-current", Some(2))
        .deployment("never-polled", Some(1))
        .no_ready_pods("never-polled")
        .build();
    assert!(!o.temporal.exists);
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(touched(&p, "was-current"), Vec::<&str>::new());
    assert_eq!(
        p.kept,
        vec![Kept {
            build_id: "was-current".into(),
            why: Unaccounted::DeploymentNotFound
        }]
    );
    // A first rollout that crash-looped and was replaced: nothing can be pinned to it.
    assert_eq!(touched(&p, "never-polled"), vec!["deleted"]);
}

#[test]
fn after_a_connection_change_only_the_versions_temporal_lists_follow_it() {
    use VersionStatus::{Current, Draining};
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let o = world(&wd)
        .deployment(&target, None)
        .version(&target, Current)
        .current(&target)
        .deployment("listed", Some(1))
        .version("listed", Draining)
        .stale_connection("listed")
        // Another server behind the new hostPort: v0 drains on the old one.
        .deployment("unlisted", Some(1))
        .stale_connection("unlisted")
        .deployment("unlisted-down", Some(0))
        .stale_connection("unlisted-down")
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(touched(&p, "listed"), vec!["reconnected"]);
    assert_eq!(touched(&p, "unlisted"), Vec::<&str>::new());
    assert_eq!(touched(&p, "unlisted-down"), Vec::<&str>::new());
    assert_eq!(
        p.kept.iter().map(|k| k.to_string()).collect::<Vec<_>>(),
        vec![
            "unlisted (its workers use a previous connection, and Temporal reached through the current one does not list it)",
            "unlisted-down (its workers use a previous connection, and Temporal reached through the current one does not list it)",
        ]
    );
}

#[test]
fn replicas_follow_the_spec_for_active_versions_only() {
    let mut wd = wd("AllAtOnce", "w:v1");
    wd.spec.replicas = Some(3);
    let target = target_of(&wd);
    let current = world(&wd)
        .version(&target, VersionStatus::Current)
        .current(&target);
    let running = current.clone().deployment(&target, Some(1));
    let p = plan(&wd, &conn(), &me(), &running.clone().build());
    assert_eq!(p.scale, vec![(build_id::deployment_name("w", &target), 3)]);
    // A WorkerResourceTemplate scaling the versions (an HPA) owns them, whatever the spec.
    let o = running.clone().autoscaled().build();
    assert!(plan(&wd, &conn(), &me(), &o).scale.is_empty());
    let p = plan(&wd, &conn(), &me(), &current.autoscaled().build());
    assert_eq!(p.apply.len(), 1);
    assert_eq!(
        p.apply[0].spec.as_ref().and_then(|s| s.replicas),
        None,
        "not applied"
    );
    // Without spec.replicas an autoscaler owns them: no scaling.
    wd.spec.replicas = None;
    assert!(plan(&wd, &conn(), &me(), &running.build()).scale.is_empty());
}

#[test]
fn a_connection_change_re_applies_the_target() {
    use VersionStatus::{Current, Drained, Draining};
    let wd = wd("AllAtOnce", "w:v1");
    let target = target_of(&wd);
    let stale = world(&wd)
        .deployment(&target, None)
        .stale_connection(&target);
    assert_eq!(
        plan(&wd, &conn(), &me(), &stale.clone().build())
            .apply
            .len(),
        1
    );

    // Older versions that still run follow the connection too; scaled-down ones do not.
    let o = stale
        .deployment("draining", Some(1))
        .stale_connection("draining")
        .version("draining", Draining)
        .deployment("current", Some(1))
        .stale_connection("current")
        .version("current", Current)
        .current("current")
        .deployment("asleep", Some(0))
        .stale_connection("asleep")
        .version("asleep", Drained)
        .deployment("fresh", Some(1))
        .version("fresh", Draining)
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!(p.reconnect, ["current", "draining"]);
    assert!(
        p.apply.iter().any(|d| d.metadata.name.as_deref()
            == Some(build_id::deployment_name("w", &target).as_str()))
    );
}

#[test]
fn no_new_version_while_too_many_cannot_be_deleted() {
    use VersionStatus::{Current, Drained, Draining, Inactive};
    let wd = wd("AllAtOnce", "w:v9");
    let versions = world(&wd)
        .version("v0", Drained)
        .version("v1", Drained)
        .version("v2", Draining)
        .version("v3", Inactive)
        .version("v4", Current)
        .current("v4");
    // v1 is drained but its workers still run, so the server cannot delete it.
    let o = versions.clone().deployment("v1", Some(1)).build();
    let limits = Limits {
        max_undeletable_versions: 4,
        ..Default::default()
    };
    let p = plan_with(&wd, &conn(), &me(), &o, &limits);
    assert!(p.apply.is_empty(), "must not create the new version");
    let why = p.blocked.unwrap_or_default();
    assert!(
        why.contains("4 versions cannot be deleted yet (limit 4)"),
        "{why}"
    );
    assert!(
        why.contains("v1, v2, v3, v4"),
        "names the blocking versions: {why}"
    );
    // One more drained and stopped version frees a slot.
    assert_eq!(
        plan_with(&wd, &conn(), &me(), &versions.build(), &limits)
            .apply
            .len(),
        1
    );
}

/// `spec.deploymentStrategy` reaches every version's Deployment, old ones included, and only
/// those whose strategy differs once `apps/v1`'s defaults are filled; none when it is omitted,
/// none being deleted.
#[test]
fn the_deployment_strategy_is_set_on_every_version_that_differs() {
    use k8s_openapi::api::apps::v1::{DeploymentStrategy, RollingUpdateDeployment};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let mut wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let world = |wd: &WorkerDeployment| {
        world(wd)
            .current_beside_draining(&target)
            .deployment("gone", Some(1))
            .no_ready_pods("gone")
            .build()
    };
    let names = |p: &Plan| {
        let mut n: Vec<String> = p.settings.iter().map(|(n, _)| n.clone()).collect();
        n.sort();
        n
    };
    assert!(plan(&wd, &conn(), &me(), &world(&wd)).settings.is_empty());
    // Kubernetes' default written out is no change.
    wd.spec.deployment_strategy = Some(DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: None,
    });
    assert!(plan(&wd, &conn(), &me(), &world(&wd)).settings.is_empty());
    wd.spec.deployment_strategy = Some(DeploymentStrategy {
        type_: None,
        rolling_update: Some(RollingUpdateDeployment {
            max_unavailable: Some(IntOrString::Int(0)),
            max_surge: None,
        }),
    });
    let p = plan(&wd, &conn(), &me(), &world(&wd));
    let name = |b: &str| build_id::deployment_name("w", b);
    let mut expected = vec![name(&target), name("draining")];
    expected.sort();
    assert_eq!(names(&p), expected, "the one being deleted is left alone");
    assert!(p.delete_deployments.contains(&name("gone")));
    let (_, set) = &p.settings[0];
    assert_eq!(
        set.strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.max_surge.clone()),
        Some(IntOrString::String("25%".into())),
        "filled with the default"
    );
}

/// `spec.deployment`'s Deployment-level settings reach every version's Deployment (no pod
/// rolls); the deprecated `spec.minReadySeconds` keeps TWC's rule (set when a Deployment is
/// made, never patched after).
#[test]
fn spec_deployment_settings_reach_every_version() {
    let mut wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let world = |wd: &WorkerDeployment| world(wd).current_beside_draining(&target).build();
    wd.spec.min_ready_seconds = 9;
    assert!(plan(&wd, &conn(), &me(), &world(&wd)).settings.is_empty());
    let template = std::mem::take(&mut wd.spec.template);
    wd.spec.deployment = Some(twc_api::VersionedDeploymentSpec {
        template,
        replicas: Some(1),
        min_ready_seconds: Some(5),
        progress_deadline_seconds: Some(600),
        ..Default::default()
    });
    assert_eq!(target_of(&wd), target, "the same pods, the same version");
    let p = plan(&wd, &conn(), &me(), &world(&wd));
    let mut changes: Vec<(String, Option<i32>, Option<i32>, bool)> = p
        .settings
        .iter()
        .map(|(n, c)| {
            (
                n.clone(),
                c.min_ready_seconds,
                c.progress_deadline_seconds,
                c.strategy.is_some(),
            )
        })
        .collect();
    changes.sort();
    let name = |b: &str| build_id::deployment_name("w", b);
    let mut expected = vec![
        (name(&target), Some(5), None, false),
        (name("draining"), Some(5), None, false),
    ];
    expected.sort();
    assert_eq!(
        changes, expected,
        "only what differs: the deadline is already 600 and the strategy apps/v1's"
    );
}

/// TWC's rule for versions superseded before they ever served (#577): Inactive, not the
/// target, scaled to 0 with no pod left, and no running workflow counted on it: retired
/// (version, then Deployment), with no sunset delay. Not while it still has pods, nor while
/// its count is unknown or not zero (looked at again in two minutes), never the target.
#[test]
fn a_version_that_never_served_is_retired_once_scaled_down_and_idle() {
    use VersionStatus::{Current, Inactive};
    let wd = wd("Manual", "w:v3");
    let target = target_of(&wd);
    let world = |idle: &[&str]| {
        let mut o = world(&wd)
            .at(t(1_000))
            .deployment("current", Some(1))
            .version("current", Current)
            .current("current")
            .deployment(&target, Some(1))
            .version(&target, Inactive)
            .deployment("superseded", Some(0))
            .version("superseded", Inactive)
            .deployment("stopping", Some(0))
            .edit_deployment("stopping", |d| d.replicas = 1)
            .version("stopping", Inactive)
            .build();
        o.target.idle_inactive = idle.iter().map(|b| b.to_string()).collect();
        o
    };
    let p = plan(&wd, &conn(), &me(), &world(&[]));
    assert!(p.retire.is_empty());
    assert_eq!(p.wake_at, Some(t(1_000 + 120)), "counted again later");
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &world(&["superseded", "stopping", &target]),
    );
    assert_eq!(p.retire, vec!["superseded".to_string()]);
    assert!(p.needs_fresh_state() && p.writes_temporal());
    assert!(p.delete_versions.is_empty() && p.delete_deployments.is_empty());
}

/// A version scaled to 0 and then reactivated by a workflow pinned to it (Draining again) gets
/// its workers back: the spec's replicas, or 1 when an autoscaler owns them (TWC #587).
#[test]
fn a_draining_version_at_zero_gets_its_workers_back() {
    use VersionStatus::{Current, Draining};
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let o = world(&wd)
        .deployment(&target, Some(1))
        .version(&target, Current)
        .current(&target)
        .deployment("reactivated", Some(0))
        .version("reactivated", Draining)
        .deployment("draining", Some(1))
        .version("draining", Draining)
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    let name = |b: &str| build_id::deployment_name("w", b);
    assert_eq!(p.scale, vec![(name("reactivated"), 1)]);
}

/// Everything the pods see of a connection rolls them: the auth mode and the API key's key
/// too, which TWC's `connection-spec-hash` leaves out (same host, server name and Secret name).
#[test]
fn an_auth_mode_or_api_key_key_change_rolls_the_running_versions() {
    use VersionStatus::{Current, Draining};
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let secret = |name: &str| Some(twc_api::SecretReference { name: name.into() });
    let mtls = ConnectionSpec {
        mutual_tls_secret_ref: secret("t"),
        ..conn()
    };
    let api_key = |key: &str| ConnectionSpec {
        api_key_secret_ref: Some(k8s_openapi::api::core::v1::SecretKeySelector {
            name: "t".into(),
            key: key.into(),
            optional: None,
        }),
        ..conn()
    };
    // The same Secret name: TWC's hash cannot tell these apart.
    assert_eq!(
        deployment::connection_hash(&mtls),
        deployment::connection_hash(&api_key("k"))
    );
    let running_on = |c: &ConnectionSpec| {
        let hash = deployment::connection_hash(c);
        let auth = deployment::auth_of(c);
        world(&wd)
            .deployment(&target, None)
            .version(&target, Current)
            .current(&target)
            .deployment("draining", Some(1))
            .version("draining", Draining)
            .edit_deployment(&target, |d| {
                (d.connection_hash, d.auth) = (Some(hash.clone()), Some(auth.clone()))
            })
            .edit_deployment("draining", |d| {
                (d.connection_hash, d.auth) = (Some(hash.clone()), Some(auth.clone()))
            })
            .build()
    };
    let rolled = |p: &Plan| (p.apply.len(), p.reconnect.clone());
    let both = (1, vec!["draining".to_string()]);
    // mTLS -> API key, API key -> mTLS, API key key k -> l.
    for (from, to) in [
        (&mtls, &api_key("k")),
        (&api_key("k"), &mtls),
        (&api_key("k"), &api_key("l")),
    ] {
        let p = plan(&wd, to, &me(), &running_on(from));
        assert_eq!(rolled(&p), both, "{from:?} -> {to:?}");
    }
    // Nothing of the connection changed: nothing rolls, whatever else of the spec did.
    let mut other = wd.clone();
    other.spec.replicas = Some(1);
    other.spec.rollout.strategy = twc_api::RolloutStrategyKind::Manual;
    for c in [&mtls, &api_key("k")] {
        let p = plan(&other, c, &me(), &running_on(c));
        assert_eq!(rolled(&p), (0, vec![]), "{c:?}");
    }
}

impl World {
    /// `target` running and current, beside an older version `draining` that still runs.
    fn current_beside_draining(self, target: &str) -> Self {
        use VersionStatus::{Current, Draining};
        self.deployment(target, Some(1))
            .version(target, Current)
            .current(target)
            .deployment("draining", Some(1))
            .version("draining", Draining)
    }
}
