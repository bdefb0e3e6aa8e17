//! Status conditions, shared by every kind's status: set one, moving `lastTransitionTime` only
//! when its status changes, and derive kstatus' `Stalled` and `Reconciling` from `Ready`. Pure.

use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use twc_api::conditions::{READY, RECONCILE_SUCCEEDED, RECONCILING, STALLED};

/// `t` as a Kubernetes timestamp (None if it cannot be one).
pub fn time(t: SystemTime) -> Option<Time> {
    Timestamp::try_from(t).ok().map(Time)
}

/// Sets a condition, keeping `lastTransitionTime` when the status did not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: SystemTime,
) {
    let now = time(now).unwrap_or(Time(Timestamp::UNIX_EPOCH));
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
}

/// Sets kstatus' `Stalled` and `Reconciling` from `Ready` as it now stands (nothing when there
/// is no `Ready` yet), the contract Helm 4's `--wait`, Flux and the cli-utils status poller read:
/// - `Ready=True`: both False (`Stalled` says `ReconcileSucceeded`, `Reconciling` carries
///   `Ready`'s reason);
/// - otherwise, when `terminal` (waiting cannot help: only a change by someone can), `Stalled`
///   is True with `Ready`'s reason and message, and `Reconciling` False;
/// - otherwise `Reconciling` is True with them, and `Stalled` False (`ReconcileSucceeded` when
///   this reconcile went through, else `Ready`'s reason).
///
/// At most one of the two is ever True.
pub fn set_kstatus(
    conditions: &mut Vec<Condition>,
    terminal: bool,
    reconciled: bool,
    generation: Option<i64>,
    now: SystemTime,
) {
    let Some(ready) = conditions.iter().find(|c| c.type_ == READY).cloned() else {
        return;
    };
    let (reason, message) = (ready.reason.as_str(), ready.message.as_str());
    let succeeded = (RECONCILE_SUCCEEDED, "Reconcile succeeded");
    let (stalled, reconciling, not_stalled) = if ready.status == "True" {
        ("False", "False", succeeded)
    } else if terminal {
        ("True", "False", (reason, message))
    } else if reconciled {
        ("False", "True", succeeded)
    } else {
        ("False", "True", (reason, message))
    };
    let (stalled_reason, stalled_message) = if stalled == "True" {
        (reason, message)
    } else {
        not_stalled
    };
    set_condition(
        conditions,
        STALLED,
        stalled,
        stalled_reason,
        stalled_message,
        generation,
        now,
    );
    set_condition(
        conditions,
        RECONCILING,
        reconciling,
        reason,
        message,
        generation,
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn last_transition_time_moves_only_when_the_status_changes() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let t1 = t0 + Duration::from_secs(60);
        let mut cs = Vec::new();
        set_condition(
            &mut cs,
            READY,
            "False",
            "WaitingForPollers",
            "m",
            Some(1),
            t0,
        );
        set_condition(
            &mut cs,
            READY,
            "False",
            "WaitingForPromotion",
            "m2",
            Some(2),
            t1,
        );
        assert_eq!(
            cs[0].last_transition_time,
            Time(Timestamp::try_from(t0).unwrap_or(Timestamp::UNIX_EPOCH))
        );
        assert_eq!(cs[0].reason, "WaitingForPromotion");
        assert_eq!(cs[0].observed_generation, Some(2));
        set_condition(&mut cs, READY, "True", "RolloutComplete", "m3", Some(2), t1);
        assert_eq!(
            cs[0].last_transition_time,
            Time(Timestamp::try_from(t1).unwrap_or(Timestamp::UNIX_EPOCH))
        );
    }

    fn status_of(cs: &[Condition], type_: &str) -> (String, String) {
        cs.iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone()))
            .unwrap_or_default()
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    #[test]
    fn stalled_and_reconciling_follow_ready_and_are_never_both_true() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut cs = Vec::new();
        // No Ready yet: nothing is said.
        set_kstatus(&mut cs, false, true, Some(1), now);
        assert!(cs.is_empty());
        set_condition(&mut cs, READY, "False", "Ramping", "at 10%", Some(1), now);
        set_kstatus(&mut cs, false, true, Some(1), now);
        assert_eq!(status_of(&cs, STALLED), pair("False", "ReconcileSucceeded"));
        assert_eq!(status_of(&cs, RECONCILING), pair("True", "Ramping"));
        set_condition(
            &mut cs,
            READY,
            "False",
            "ConnectionNotFound",
            "m",
            Some(1),
            now,
        );
        set_kstatus(&mut cs, false, false, Some(1), now);
        assert_eq!(status_of(&cs, STALLED), pair("False", "ConnectionNotFound"));
        assert_eq!(
            status_of(&cs, RECONCILING),
            pair("True", "ConnectionNotFound")
        );
        set_condition(&mut cs, READY, "False", "InvalidSpec", "bad", Some(2), now);
        set_kstatus(&mut cs, true, false, Some(2), now);
        assert_eq!(status_of(&cs, STALLED), pair("True", "InvalidSpec"));
        assert_eq!(status_of(&cs, RECONCILING), pair("False", "InvalidSpec"));
        set_condition(
            &mut cs,
            READY,
            "True",
            "RolloutComplete",
            "done",
            Some(3),
            now,
        );
        // Ready=True wins over a terminal verdict.
        set_kstatus(&mut cs, true, true, Some(3), now);
        assert_eq!(status_of(&cs, STALLED), pair("False", "ReconcileSucceeded"));
        assert_eq!(
            status_of(&cs, RECONCILING),
            pair("False", "RolloutComplete")
        );
        assert!(cs.iter().all(|c| c.observed_generation == Some(3)));
    }
}
