//! Safety invariants of the planner over random observed states.

use super::*;
use proptest::prelude::*;

const STATUSES: [VersionStatus; 6] = [
    VersionStatus::NotRegistered,
    VersionStatus::Inactive,
    VersionStatus::Ramping,
    VersionStatus::Current,
    VersionStatus::Draining,
    VersionStatus::Drained,
];

#[derive(Debug, Clone)]
struct Case {
    strategy: &'static str,
    replicas: Option<i32>,
    /// Per other build: (status index, has deployment, replicas, available, drained secs ago)
    others: Vec<(usize, bool, Option<i32>, bool, u64)>,
    target: (usize, bool, bool),
    current: Option<usize>,
    ramping: Option<usize>,
    manager: usize,
    now: u64,
    /// 0: nothing, 1: the target is marked failed, 2: paused, 3: an abort asked for.
    guard: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec!["Manual", "AllAtOnce", "Progressive"]),
        prop::option::of(0..4i32),
        prop::collection::vec(
            (
                0..6usize,
                any::<bool>(),
                prop::option::of(0..3i32),
                any::<bool>(),
                0..200_000u64,
            ),
            0..5,
        ),
        (0..6usize, any::<bool>(), any::<bool>()),
        prop::option::of(0..6usize),
        prop::option::of(0..6usize),
        0..3usize,
        0..100_000u64,
        0..4usize,
    )
        .prop_map(
            |(strategy, replicas, others, target, current, ramping, manager, now, guard)| Case {
                strategy,
                replicas,
                others,
                target,
                current,
                ramping,
                manager,
                now,
                guard,
            },
        )
}

fn build(i: usize) -> String {
    format!("old-{i}")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn the_planner_never_breaks_safety(c in case()) {
        let mut w = wd(c.strategy, "w:v9");
        w.spec.replicas = c.replicas;
        let target = target_of(&w);
        match c.guard {
            1 => w = failed(w, &target, twc_api::conditions::PROGRESS_DEADLINE_EXCEEDED),
            2 => w = annotated(w, twc_api::controls::PAUSED, "true"),
            3 => w = annotated(w, twc_api::controls::ABORT, "now"),
            _ => {}
        }
        let now = t(300_000 + c.now);
        let mut scene = world(&w).at(now).manager(["", ME_ID, "someone-else"][c.manager]);
        let (t_status, t_has_dep, t_available) = c.target;
        let mut builds = vec![target.clone()];
        if t_status > 0 {
            scene = scene.version(&target, STATUSES[t_status]);
        }
        if t_has_dep {
            scene = scene.deployment(&target, c.replicas);
            if !t_available { scene = scene.unavailable(&target); }
        }
        for (i, (s, has_dep, replicas, available, ago)) in c.others.iter().enumerate() {
            let b = build(i);
            builds.push(b.clone());
            if *s > 0 {
                let changed = now.checked_sub(Duration::from_secs(*ago)).unwrap_or(now);
                scene = scene.version(&b, STATUSES[*s]).drainage_changed(&b, changed);
            }
            if *has_dep {
                scene = scene.deployment(&b, *replicas);
                if !available { scene = scene.unavailable(&b); }
            }
        }
        if let Some(b) = c.current.and_then(|i| builds.get(i)) {
            scene = scene.current(b);
        }
        if let Some(b) = c.ramping.and_then(|i| builds.get(i)) {
            scene = scene.ramping(b);
        }
        let o = scene.build();

        let p = plan(&w, &conn(), &me(), &o);
        let status = |b: &str| o.temporal.versions.get(b).map(|v| v.status).unwrap_or(VersionStatus::NotRegistered);
        let build_of = |name: &str| o.deployments.values().find(|d| d.name == name).map(|d| d.build_id.clone()).unwrap_or_default();

        // Never route to a version with no pollers, no ready workers or an unavailable
        // Deployment.
        if let Some(Routing::SetCurrent(b) | Routing::SetRamp(b, _)) = &p.routing {
            prop_assert_ne!(status(b), VersionStatus::NotRegistered);
            prop_assert!(
                o.deployments.get(b).is_some_and(|d| d.available_since.is_some()
                    && d.ready_replicas > 0
                    && d.spec_replicas != Some(0)),
                "routed to {} with no ready workers: {:?}", b, o.deployments.get(b)
            );
        }
        // A failed or aborted build never gets new work; a pause only clears a stale ramp
        // (or takes work away).
        if c.guard == 1 || c.guard == 3 {
            let to_target = matches!(&p.routing, Some(Routing::SetCurrent(b) | Routing::SetRamp(b, _)) if *b == target);
            prop_assert!(!to_target, "routed to failed {}: {:?}", target, p.routing);
            prop_assert!(p.start_gates.is_empty());
            prop_assert!(p.failure.is_some());
        }
        if c.guard == 2 {
            prop_assert!(matches!(p.routing, None | Some(Routing::ClearRamp)), "{:?}", p.routing);
        }
        // Never take routing from a foreign manager; Manual never routes.
        if c.manager == 2 || (c.strategy == "Manual" && c.guard != 3) {
            prop_assert!(p.routing.is_none());
            prop_assert!(!p.claim_manager);
        }
        // Never scale to zero or delete a Draining, Current or Ramping version, nor the target.
        let protected = |b: &str| {
            matches!(status(b), VersionStatus::Draining | VersionStatus::Current | VersionStatus::Ramping)
                || o.temporal.current_build_id.as_deref() == Some(b)
                || o.temporal.ramping_build_id.as_deref() == Some(b)
                || b == target
        };
        for (name, replicas) in &p.scale {
            let b = build_of(name);
            if *replicas == 0 {
                prop_assert!(!protected(&b) || c.replicas == Some(0), "scaled {} ({:?}) to 0", b, status(&b));
            }
        }
        for name in &p.delete_deployments {
            let b = build_of(name);
            prop_assert!(!protected(&b), "deleted {} ({:?})", b, status(&b));
            // What Temporal does not list is deleted only with no worker up.
            if status(&b) == VersionStatus::NotRegistered {
                prop_assert!(
                    o.deployments.get(&b).is_some_and(|d| d.ready_replicas == 0),
                    "deleted {} (not listed) with ready workers", b
                );
            }
        }
        for b in &p.delete_versions {
            prop_assert!(!protected(b), "deleted version {} ({:?})", b, status(b));
            prop_assert_eq!(status(b), VersionStatus::Drained);
        }
    }
}
