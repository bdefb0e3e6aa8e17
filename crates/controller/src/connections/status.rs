//! A connection's status, from its users: how many use it, the first of them by name, and
//! whether it works (`Ready`), judged by what the users' own reconciles met through it (they
//! hold the credentials; a ClusterConnection has none of its own). Pure.

use std::time::SystemTime;

use twc_api::{ConnectionStatus, conditions};

use super::index::{Reach, WdKey};
use crate::conditions::{set_condition, set_kstatus};

/// How many users `status.users` names (`status.usedBy` counts them all).
pub const LISTED_USERS: usize = 20;

/// How many failing users a `Ready` message names.
const NAMED_FAILURES: usize = 3;

/// Longest `Ready` message written (a user's error can be long).
const MAX_MESSAGE: usize = 1024;

/// The status a connection should have with `users` (in name order), given its `current`
/// status; `lastTransitionTime` moves only when `Ready`'s status does.
pub fn desired(
    current: Option<&ConnectionStatus>,
    users: &[(WdKey, Reach)],
    generation: Option<i64>,
    now: SystemTime,
) -> ConnectionStatus {
    let mut status = current.cloned().unwrap_or_default();
    status.used_by = Some(i32::try_from(users.len()).unwrap_or(i32::MAX));
    status.users = users
        .iter()
        .take(LISTED_USERS)
        .map(|((ns, name), _)| format!("{ns}/{name}"))
        .collect();
    let (ready, reason, message) = ready(users);
    set_condition(
        &mut status.conditions,
        conditions::READY,
        ready,
        reason,
        &truncate(message),
        generation,
        now,
    );
    // A connection has nothing to wait for that a change by someone would not bring: never
    // Stalled; Reconciling while a user is failing or not reconciled yet.
    set_kstatus(&mut status.conditions, false, true, generation, now);
    status.observed_generation = generation;
    status
}

/// Records the users a ClusterConnection's policy refuses (`status.refused`, and the first
/// [`LISTED_USERS`] by name); a connection that refuses nobody shows no count.
pub fn refused(status: &mut ConnectionStatus, refused: &[WdKey]) {
    status.refused =
        (!refused.is_empty()).then(|| i32::try_from(refused.len()).unwrap_or(i32::MAX));
    status.refused_users = refused
        .iter()
        .take(LISTED_USERS)
        .map(|(ns, name)| format!("{ns}/{name}"))
        .collect();
}

/// `Ready`'s (status, reason, message) for a connection with `users`.
fn ready(users: &[(WdKey, Reach)]) -> (&'static str, &str, String) {
    let total = users.len();
    let reached = users.iter().filter(|(_, r)| *r == Reach::Reached).count();
    let failed: Vec<(String, &str, &str)> = users
        .iter()
        .filter_map(|((ns, name), r)| match r {
            Reach::Failed { reason, message } => {
                Some((format!("{ns}/{name}"), reason.as_str(), message.as_str()))
            }
            _ => None,
        })
        .collect();
    if total == 0 {
        // Nothing depends on it, so nothing is waiting for it: True, or `helm install --wait`
        // (kstatus) of a chart holding only a ClusterConnection would never end.
        return (
            "True",
            conditions::CONNECTION_NOT_USED,
            "no WorkerDeployment uses it; it is tried with the credentials of the first that does"
                .into(),
        );
    }
    if reached > 0 {
        let mut message = format!(
            "{reached} of {total} WorkerDeployment{} reach{} Temporal through it",
            plural(total),
            if reached == 1 { "es" } else { "" },
        );
        if !failed.is_empty() {
            let names: Vec<String> = failed
                .iter()
                .take(NAMED_FAILURES)
                .map(|(who, reason, _)| format!("{who} ({reason})"))
                .collect();
            let more = failed.len().saturating_sub(NAMED_FAILURES);
            message.push_str(&format!("; failing: {}", names.join(", ")));
            if more > 0 {
                message.push_str(&format!(" and {more} more"));
            }
        }
        return ("True", conditions::CONNECTION_REACHABLE, message);
    }
    match failed.first() {
        Some((who, reason, detail)) => {
            let others = failed.len() - 1;
            let pending = total - failed.len();
            let mut message = format!(
                "none of its {total} WorkerDeployment{} reaches Temporal through it",
                plural(total)
            );
            if pending > 0 {
                message.push_str(&format!(" ({pending} not reconciled yet)"));
            }
            message.push_str(&format!("; {who}: {reason}: {detail}"));
            if others > 0 {
                message.push_str(&format!(
                    " (and {others} more failing, see their conditions)"
                ));
            }
            ("False", reason, message)
        }
        None if users.iter().all(|(_, r)| matches!(r, Reach::Idle { .. })) => {
            // Every user stopped on its own spec before it used the connection: nothing
            // waits for it (their own conditions say why), as with no user at all.
            let names: Vec<String> = users
                .iter()
                .take(NAMED_FAILURES)
                .filter_map(|((ns, name), r)| match r {
                    Reach::Idle { reason } => Some(format!("{ns}/{name} ({reason})")),
                    _ => None,
                })
                .collect();
            (
                "True",
                conditions::CONNECTION_NOT_USED,
                format!(
                    "{total} WorkerDeployment{} reference{} it but stopped before using it: {}",
                    plural(total),
                    if total == 1 { "s" } else { "" },
                    names.join(", ")
                ),
            )
        }
        None => (
            "Unknown",
            conditions::CONNECTION_PENDING,
            format!(
                "{total} WorkerDeployment{} use{} it; none has been reconciled through it yet",
                plural(total),
                if total == 1 { "s" } else { "" },
            ),
        ),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `message` cut to [`MAX_MESSAGE`] bytes at a character boundary.
fn truncate(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - 3;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn user(ns: &str, name: &str, reach: Reach) -> (WdKey, Reach) {
        ((ns.into(), name.into()), reach)
    }

    fn failed(reason: &str, message: &str) -> Reach {
        Reach::Failed {
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn ready_of(s: &ConnectionStatus) -> (String, String, String) {
        s.conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
            .unwrap_or_default()
    }

    #[test]
    fn users_stopped_on_their_own_spec_leave_it_ready_and_pending_ones_do_not() {
        let idle = || Reach::Idle {
            reason: "InvalidSpec".into(),
        };
        let s = desired(
            None,
            &[user("a", "bad", idle())],
            Some(1),
            SystemTime::now(),
        );
        let (status, reason, message) = ready_of(&s);
        assert_eq!((status.as_str(), reason.as_str()), ("True", "NotUsed"));
        assert!(message.contains("a/bad (InvalidSpec)"), "{message}");
        let s = desired(
            None,
            &[user("a", "bad", idle()), user("b", "w", Reach::Pending)],
            Some(1),
            SystemTime::now(),
        );
        assert_eq!(ready_of(&s).1, "Pending");
    }

    #[test]
    fn unused_is_ready_and_names_nobody() {
        let s = desired(None, &[], Some(1), SystemTime::now());
        assert_eq!(s.used_by, Some(0));
        assert!(s.users.is_empty());
        let (status, reason, _) = ready_of(&s);
        assert_eq!((status.as_str(), reason.as_str()), ("True", "NotUsed"));
        assert_eq!(s.observed_generation, Some(1));
    }

    #[test]
    fn one_user_reaching_makes_it_ready_and_the_failing_are_named() {
        let users = [
            user("a", "w", Reach::Reached),
            user(
                "b",
                "w",
                failed("AuthSecretInvalid", "Secret b/tls: missing tls.key"),
            ),
            user("c", "w", Reach::Pending),
        ];
        let s = desired(None, &users, Some(2), SystemTime::now());
        assert_eq!(s.used_by, Some(3));
        assert_eq!(s.users, vec!["a/w", "b/w", "c/w"]);
        let (status, reason, message) = ready_of(&s);
        assert_eq!((status.as_str(), reason.as_str()), ("True", "Reachable"));
        assert_eq!(
            message,
            "1 of 3 WorkerDeployments reaches Temporal through it; failing: b/w (AuthSecretInvalid)"
        );
    }

    #[test]
    fn nobody_reaching_is_false_with_the_first_failure() {
        let users = [
            user(
                "a",
                "w",
                failed("TemporalClientCreationFailed", "connection refused"),
            ),
            user("b", "w", failed("AuthSecretInvalid", "expired")),
            user("c", "w", Reach::Pending),
        ];
        let s = desired(None, &users, Some(1), SystemTime::now());
        let (status, reason, message) = ready_of(&s);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "TemporalClientCreationFailed")
        );
        assert_eq!(
            message,
            "none of its 3 WorkerDeployments reaches Temporal through it (1 not reconciled yet); a/w: TemporalClientCreationFailed: connection refused (and 1 more failing, see their conditions)"
        );
    }

    #[test]
    fn users_not_reconciled_yet_are_pending() {
        let s = desired(
            None,
            &[user("a", "w", Reach::Pending)],
            None,
            SystemTime::now(),
        );
        let (status, reason, _) = ready_of(&s);
        assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "Pending"));
    }

    #[test]
    fn the_list_is_capped_the_count_is_not() {
        let users: Vec<_> = (0..50)
            .map(|i| user("ns", &format!("w{i:02}"), Reach::Reached))
            .collect();
        let s = desired(None, &users, None, SystemTime::now());
        assert_eq!(s.used_by, Some(50));
        assert_eq!(s.users.len(), LISTED_USERS);
        assert_eq!(s.users[0], "ns/w00");
    }

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let t1 = t0 + Duration::from_secs(60);
        let reached = [user("a", "w", Reach::Reached)];
        let first = desired(None, &reached, None, t0);
        let two = [
            user("a", "w", Reach::Reached),
            user("b", "w", Reach::Reached),
        ];
        let same = desired(Some(&first), &two, None, t1);
        let at = |s: &ConnectionStatus| s.conditions[0].last_transition_time.clone();
        assert_eq!(at(&same), at(&first));
        let down = [user("a", "w", failed("AuthSecretInvalid", "x"))];
        let changed = desired(Some(&same), &down, None, t1);
        assert_ne!(at(&changed), at(&first));
    }

    #[test]
    fn a_long_failure_is_cut_at_a_character_boundary() {
        let long = "é".repeat(2000);
        let users = [user("a", "w", failed("TemporalStateFetchFailed", &long))];
        let s = desired(None, &users, None, SystemTime::now());
        let (_, _, message) = ready_of(&s);
        assert!(message.len() <= MAX_MESSAGE, "{}", message.len());
        assert!(message.ends_with("..."));
    }
}
