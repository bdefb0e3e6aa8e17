//! Status conditions, shared by every kind's status: set one, moving `lastTransitionTime` only
//! when its status changes. Pure.

use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use twc_api::conditions::READY;

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
}
