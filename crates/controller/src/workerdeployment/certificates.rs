//! The `ClientCertificateExpiresSoon` Warning: once a day while the pooled client's
//! certificate expires within [`CERT_WARNING_WINDOW`].

use std::time::{Duration, SystemTime};

use kube::ResourceExt;
use twc_api::WorkerDeployment;

use super::{Context, key, observe};
use crate::connections;
use crate::events::EventType;

/// A client certificate expiring this soon gets a Warning on the WorkerDeployments using it.
pub const CERT_WARNING_WINDOW: Duration = Duration::from_secs(14 * 24 * 3600);

/// How often that Warning repeats (events expire from the apiserver after an hour).
const CERT_WARNING_EVERY: Duration = Duration::from_secs(24 * 3600);

/// Whether a WorkerDeployment whose client certificate expires at `not_after`, last warned at
/// `last`, is due a Warning at `now`.
pub fn certificate_warning_due(
    not_after: SystemTime,
    now: SystemTime,
    last: Option<SystemTime>,
) -> bool {
    not_after <= now + CERT_WARNING_WINDOW && last.is_none_or(|t| now >= t + CERT_WARNING_EVERY)
}

/// The `ClientCertificateExpiresSoon` Warning, once a day while the pooled client's
/// certificate expires within [`CERT_WARNING_WINDOW`].
pub(super) async fn warn_of_certificate_expiry(
    wd: &WorkerDeployment,
    ctx: &Context,
    resolved: &connections::Resolved,
    temporal: &observe::Temporal,
    now: SystemTime,
) {
    let Some(not_after) = ctx.pool.not_after(&temporal.pool_key) else {
        return;
    };
    let due = ctx.memories.update(&key(wd), |m| {
        let due = certificate_warning_due(not_after, now, m.cert_warned);
        if due {
            m.cert_warned = Some(now);
        } else if not_after > now + CERT_WARNING_WINDOW {
            m.cert_warned = None;
        }
        due
    });
    let due = due.unwrap_or(false);
    if !due {
        return;
    }
    let ns = wd.namespace().unwrap_or_default();
    let secret = resolved.spec.secret_name().unwrap_or_default();
    let note = format!(
        "the client certificate in Secret {ns}/{secret} (key tls.crt) expires at {}, {}; renew it: this controller and the workers use it",
        connections::auth::rfc3339(not_after),
        time_left(not_after, now),
    );
    ctx.event(wd, EventType::Warning, CERT_EXPIRES_SOON, note)
        .await;
}

/// "in 3 days", "in 5 hours", "in less than an hour", or "already" for a past `not_after`.
fn time_left(not_after: SystemTime, now: SystemTime) -> String {
    let Ok(left) = not_after.duration_since(now) else {
        return "already".into();
    };
    let (days, hours) = (left.as_secs() / 86400, left.as_secs() / 3600);
    let unit = |n: u64, what: &str| format!("in {n} {what}{}", if n == 1 { "" } else { "s" });
    match (days, hours) {
        (0, 0) => "in less than an hour".into(),
        (0, h) => unit(h, "hour"),
        (d, _) => unit(d, "day"),
    }
}

/// The reason of that Warning.
pub const CERT_EXPIRES_SOON: &str = "ClientCertificateExpiresSoon";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiring_certificate_is_warned_of_once_a_day() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let day = Duration::from_secs(86400);
        // Far from expiry: nothing.
        assert!(!certificate_warning_due(now + 15 * day, now, None));
        // Within 14 days: at once, then not again the same day, then again the next.
        assert!(certificate_warning_due(now + 13 * day, now, None));
        assert!(!certificate_warning_due(
            now + 13 * day,
            now + day / 2,
            Some(now)
        ));
        assert!(certificate_warning_due(
            now + 13 * day,
            now + day,
            Some(now)
        ));
        // Already expired (the dial refuses it, but a pooled client may hold one): warned.
        assert!(certificate_warning_due(now - day, now, None));
    }

    #[test]
    fn the_time_left_is_said_in_days_then_hours() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let hour = Duration::from_secs(3600);
        assert_eq!(time_left(now + 73 * hour, now), "in 3 days");
        assert_eq!(time_left(now + 25 * hour, now), "in 1 day");
        assert_eq!(time_left(now + 23 * hour, now), "in 23 hours");
        assert_eq!(time_left(now + hour, now), "in 1 hour");
        assert_eq!(time_left(now + hour / 2, now), "in less than an hour");
        assert_eq!(time_left(now - hour, now), "already");
    }
}
