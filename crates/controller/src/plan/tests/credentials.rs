//! A credential Secret's content changed: the versions' pods restart with it; a digest not
//! recorded yet is recorded without a restart.

use super::*;

impl World {
    /// The connection's Secrets hold content of digest `digest` now.
    fn secrets(mut self, digest: &str) -> Self {
        self.observed.secrets_digest = Some(digest.into());
        self
    }

    /// The Secrets' content was last written at `at`.
    fn written(mut self, at: SystemTime) -> Self {
        self.observed.secrets_written_at = Some(at);
        self
    }

    /// `build`'s oldest pod was created at `at`.
    fn pods_since(self, build: &str, at: SystemTime) -> Self {
        self.edit_deployment(build, |d| d.oldest_pod = Some(at))
    }

    /// `build`'s pods started with Secrets of digest `digest`.
    fn started_with(self, build: &str, digest: &str) -> Self {
        self.edit_deployment(build, |d| d.credentials_digest = Some(digest.into()))
    }
}

/// (build, restart) of each credentials write.
fn writes(p: &Plan) -> Vec<(String, bool)> {
    let mut w: Vec<_> = p
        .credentials
        .iter()
        .map(|c| {
            assert_eq!(c.digest, "s.new");
            assert_eq!(c.deployment, build_id::deployment_name("w", &c.build));
            (c.build.clone(), c.restart)
        })
        .collect();
    w.sort();
    w
}

#[test]
fn changed_secrets_restart_every_running_version_on_the_connection() {
    use VersionStatus::{Current, Draining};
    let kept = |p: &Plan| p.kept.iter().any(|k| k.build_id == "kept-other-connection");
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let o = world(&wd)
        .at(t(600))
        .deployment(&target, None)
        .version(&target, Current)
        .current(&target)
        .started_with(&target, "s.old")
        .deployment("draining", Some(2))
        .version("draining", Draining)
        .started_with("draining", "s.old")
        .deployment("up-to-date", Some(1))
        .version("up-to-date", Draining)
        .started_with("up-to-date", "s.new")
        .deployment("scaled-down", Some(0))
        .drained_since("scaled-down", t(500))
        .started_with("scaled-down", "s.old")
        // TWC's (no digest), its pods created well after the content was written.
        .deployment("adopted", Some(1))
        .version("adopted", Draining)
        .pods_since("adopted", t(400))
        // TWC's, its pods older than the content: they hold the previous certificate.
        .deployment("adopted-stale", Some(1))
        .version("adopted-stale", Draining)
        .pods_since("adopted-stale", t(150))
        // TWC's, when its pods started not known: restarted (paced), never assumed fresh.
        .deployment("adopted-unknown", Some(1))
        .version("adopted-unknown", Draining)
        .written(t(200))
        // Another server's version: Temporal here does not list it, so it is kept.
        .deployment("kept-other-connection", Some(1))
        .stale_connection("kept-other-connection")
        .edit_deployment("kept-other-connection", |d| {
            d.temporal_address = Some("old-server:7233".into())
        })
        .started_with("kept-other-connection", "s.old")
        .deployment("other-secrets", Some(1))
        .version("other-secrets", Draining)
        .stale_connection("other-secrets")
        .started_with("other-secrets", "t.old")
        .deployment("other-unrecorded", Some(1))
        .version("other-unrecorded", Draining)
        .stale_connection("other-unrecorded")
        .secrets("s.new")
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert!(kept(&p), "{:?}", p.kept);
    assert_eq!(
        writes(&p),
        vec![
            // TWC's or an older controller's: recorded, nothing restarts, only when its pods
            // provably read the content.
            ("adopted".into(), false),
            ("adopted-stale".into(), true),
            ("adopted-unknown".into(), true),
            ("draining".into(), true),
            // An older connection's, on the same Secrets: its workers need them too.
            ("kept-other-connection".into(), true),
            // No pods to restart; the next start mounts the Secret as it is.
            ("scaled-down".into(), false),
        ]
    );
    // Only the version whose workers poll another server is checked there first.
    let verified: Vec<&str> = p
        .credentials
        .iter()
        .filter(|c| c.verify)
        .map(|c| c.build.as_str())
        .collect();
    assert_eq!(verified, ["kept-other-connection"]);
    // The current version restarts last, once the others are done.
    assert_eq!(
        p.restarts_held
            .iter()
            .map(|h| (h.build.as_str(), h.why.as_str()))
            .collect::<Vec<_>>(),
        vec![(
            target.as_str(),
            "restarts after the older versions of its WorkerDeployment"
        )]
    );

    // The same Secrets again: nothing to write.
    let o = world(&wd)
        .deployment(&target, None)
        .version(&target, Current)
        .current(&target)
        .started_with(&target, "s.new")
        .secrets("s.new")
        .build();
    assert!(plan(&wd, &conn(), &me(), &o).credentials.is_empty());

    // A connection without Secrets: nothing is recorded at all.
    let mut o = o;
    o.secrets_digest = None;
    assert!(plan(&wd, &conn(), &me(), &o).credentials.is_empty());
}

#[test]
fn a_new_deployment_carries_the_digest_and_an_opted_out_one_only_records_it() {
    let wd = wd("AllAtOnce", "w:v2");
    let target = target_of(&wd);
    let o = world(&wd).secrets("s.new").build();
    let p = plan(&wd, &conn(), &me(), &o);
    let created = p
        .apply
        .first()
        .and_then(|d| d.metadata.annotations.as_ref())
        .and_then(|a| a.get(twc_api::labels::CREDENTIALS_DIGEST));
    assert_eq!(created.map(String::as_str), Some("s.new"));
    // Its pod template does not: only a change restarts pods.
    let template = p
        .apply
        .first()
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref());
    assert!(template.is_some_and(|a| !a.contains_key(twc_api::labels::CREDENTIALS_DIGEST)));

    let mut opted_out = wd.clone();
    opted_out.metadata.annotations = Some(
        [(
            twc_api::RESTART_ON_SECRET_CHANGE_ANNOTATION.to_string(),
            "false".to_string(),
        )]
        .into(),
    );
    let o = world(&wd)
        .deployment(&target, None)
        .version(&target, VersionStatus::Current)
        .current(&target)
        .started_with(&target, "s.old")
        .secrets("s.new")
        .build();
    assert_eq!(
        writes(&plan(&wd, &conn(), &me(), &o)),
        vec![(target.clone(), true)]
    );
    assert_eq!(
        writes(&plan(&opted_out, &conn(), &me(), &o)),
        vec![(target, false)]
    );
}

/// A WorkerDeployment being deleted keeps the versions whose pinned workflows are open: those
/// restart on a renewed Secret too (they must reach Temporal to finish); nothing else is
/// written.
#[test]
fn a_deletion_restarts_the_versions_it_waits_for() {
    let wd = wd("AllAtOnce", "w:v2");
    let o = world(&wd)
        .deployment("draining", Some(2))
        .started_with("draining", "s.old")
        .deployment("up-to-date", Some(2))
        .started_with("up-to-date", "s.new")
        .deployment("scaled-down", Some(0))
        .started_with("scaled-down", "s.old")
        .deployment("unrecorded", Some(1))
        .build();
    let restarts = |wd: &WorkerDeployment, digest: Option<&str>| {
        let here = crate::plan::credentials::Place {
            address: conn().host_port,
            namespace: "default".into(),
        };
        crate::plan::credentials::while_deleting(wd, o.deployments.values(), digest, &here)
            .into_iter()
            .map(|w| (w.build, w.restart))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        restarts(&wd, Some("s.new")),
        vec![("draining".into(), true)]
    );
    assert!(restarts(&wd, None).is_empty());
    let mut opted_out = wd.clone();
    opted_out.metadata.annotations = Some(
        [(
            twc_api::RESTART_ON_SECRET_CHANGE_ANNOTATION.to_string(),
            "false".to_string(),
        )]
        .into(),
    );
    assert!(restarts(&opted_out, Some("s.new")).is_empty());
}

/// Within a WorkerDeployment the current and target versions restart after the others, and
/// only once their restarts are over (available again); never past their certificate's
/// expiry.
#[test]
fn the_current_and_target_restart_after_the_older_versions() {
    use VersionStatus::{Current, Draining, Inactive};
    let wd = wd("Manual", "w:v2");
    let target = target_of(&wd);
    let now = t(600);
    let base = world(&wd)
        .at(now)
        .deployment(&target, Some(1))
        .version(&target, Inactive)
        .started_with(&target, "s.old")
        .deployment("current", Some(1))
        .version("current", Current)
        .current("current")
        .started_with("current", "s.old")
        .deployment("draining", Some(1))
        .version("draining", Draining)
        .secrets("s.new");
    let held = |p: &Plan| {
        let mut h: Vec<String> = p.restarts_held.iter().map(|h| h.build.clone()).collect();
        h.sort();
        h
    };
    let mut both = vec!["current".to_string(), target.clone()];
    both.sort();

    // The draining version restarts first; the current and the target wait.
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &base.clone().started_with("draining", "s.old").build(),
    );
    assert_eq!(writes(&p), vec![("draining".into(), true)]);
    assert_eq!(held(&p), both);

    // While its restart is under way (recorded, not rolled out), they still wait.
    let rolling = base
        .clone()
        .started_with("draining", "s.new")
        .edit_deployment("draining", |d| {
            d.restarted_at = Some(t(590));
            (d.generation, d.observed_generation) = (Some(2), Some(1));
        });
    let p = plan(&wd, &conn(), &me(), &rolling.clone().build());
    assert!(writes(&p).is_empty());
    assert_eq!(held(&p), both);

    // Rolled out: their turn.
    let done = rolling
        .clone()
        .edit_deployment("draining", |d| d.observed_generation = Some(2));
    let p = plan(&wd, &conn(), &me(), &done.build());
    assert_eq!(writes(&p), {
        let mut w = vec![("current".to_string(), true), (target.clone(), true)];
        w.sort();
        w
    });
    assert!(p.restarts_held.is_empty());

    // A restart that never ends holds them for RESTART_HOLD at most.
    let stuck = rolling
        .clone()
        .at(t(590) + crate::plan::credentials::RESTART_HOLD);
    assert!(
        plan(&wd, &conn(), &me(), &stuck.build())
            .restarts_held
            .is_empty()
    );

    // A certificate about to expire does not wait.
    let expiring = rolling.edit_deployment("current", |d| {
        d.credentials_not_after = Some(now + Duration::from_secs(600));
    });
    let p = plan(&wd, &conn(), &me(), &expiring.build());
    assert_eq!(writes(&p), vec![("current".into(), true)]);
    assert_eq!(held(&p), vec![target]);
}
