//! The reconcilers' error type. Each variant knows the condition reason it is reported with
//! (the same strings as TWC) and whether retrying can help.

use temporalio_client::tonic;
use twc_api::conditions as reason;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The referenced Connection or ClusterConnection does not exist (or cannot be read).
    #[error("{0}")]
    ConnectionNotFound(String),

    /// The credential Secret is missing or unusable.
    #[error("{0}")]
    AuthSecretInvalid(String),

    /// The Temporal client could not be created (dial, TLS, unreachable server).
    #[error("{0}")]
    TemporalClientCreationFailed(String),

    /// Reading the worker deployment's state from Temporal failed.
    #[error("{0}")]
    TemporalStateFetchFailed(String),

    /// The spec has a problem the CRD validation could not catch.
    #[error("{0}")]
    InvalidSpec(String),

    /// An input of the plan could not be read (the gate's input from a ConfigMap or Secret).
    #[error("{0}")]
    PlanGenerationFailed(String),

    /// Carrying out the plan failed (a Kubernetes write or a Temporal routing change).
    #[error("{0}")]
    PlanExecutionFailed(String),

    /// Temporal refused a call for its rate limits (`ResourceExhausted`): a state to wait out
    /// with a long backoff, reported under the reason of what it interrupted.
    #[error("Rate limited by Temporal (ResourceExhausted): {1}; retrying in a while")]
    RateLimited(&'static str, String),

    /// The routing changed since it was read (conflict token mismatch): re-read and re-plan
    /// soon, quietly.
    #[error("the routing changed concurrently ({0}); re-reading")]
    Conflict(String),

    /// A Kubernetes API call failed.
    #[error("kubernetes: {}", kube_message(.0))]
    Kube(#[from] kube::Error),
}

impl Error {
    /// The condition reason and Warning event reason for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ConnectionNotFound(_) => reason::CONNECTION_NOT_FOUND,
            Error::AuthSecretInvalid(_) => reason::AUTH_SECRET_INVALID,
            Error::TemporalClientCreationFailed(_) => reason::TEMPORAL_CLIENT_CREATION_FAILED,
            Error::TemporalStateFetchFailed(_) => reason::TEMPORAL_STATE_FETCH_FAILED,
            Error::InvalidSpec(_) => reason::INVALID_SPEC,
            Error::PlanGenerationFailed(_) => reason::PLAN_GENERATION_FAILED,
            Error::RateLimited(reason, _) => reason,
            Error::PlanExecutionFailed(_) | Error::Conflict(_) | Error::Kube(_) => {
                reason::PLAN_EXECUTION_FAILED
            }
        }
    }

    /// Waiting for the user (a spec or a Secret to be fixed) rather than for a retry.
    pub fn waits_for_user(&self) -> bool {
        matches!(
            self,
            Error::InvalidSpec(_)
                | Error::ConnectionNotFound(_)
                | Error::AuthSecretInvalid(_)
                | Error::PlanGenerationFailed(_)
        )
    }
}

impl Error {
    /// A Temporal error of a call, classified: `ResourceExhausted` is a rate limit and a
    /// conflict-token mismatch a concurrent change; anything else becomes `other`.
    pub fn temporal(status: &tonic::Status, what: String, other: fn(String) -> Error) -> Error {
        let reason = other(String::new()).reason();
        match status.code() {
            tonic::Code::ResourceExhausted => Error::RateLimited(reason, what),
            tonic::Code::FailedPrecondition
                if status.message().contains("conflict token mismatch") =>
            {
                Error::Conflict(what)
            }
            _ => other(format!("{what}: {}", status.message())),
        }
    }

    /// Worth a condition and a Warning event. `repeats` counts the consecutive reconciles of
    /// this object that were rate limited, this one included: Temporal answers
    /// `ResourceExhausted` ("too many requests issued to Worker Deployment") also for a moment
    /// right after a routing change, so the first [`QUIET_RATE_LIMITS`] are retried quietly.
    /// A concurrent change is never worth one.
    pub fn is_warning(&self, repeats: u32) -> bool {
        match self {
            Error::Conflict(_) => false,
            Error::RateLimited(..) => repeats > QUIET_RATE_LIMITS,
            _ => true,
        }
    }

    /// When to try again: at the fast poll after a conflict or a first rate limit; after a
    /// jittered half-minute or more when rate limiting persists; after the steady poll when
    /// waiting for the user; else after five fast polls.
    pub fn retry_after(
        &self,
        intervals: &crate::reconcile::Intervals,
        repeats: u32,
    ) -> std::time::Duration {
        use std::time::Duration;
        let (fast, steady) = (intervals.moving, intervals.steady);
        match self {
            Error::Conflict(_) => fast,
            Error::RateLimited(..) if repeats <= QUIET_RATE_LIMITS => fast,
            Error::RateLimited(..) => {
                let jitter = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| u64::from(d.subsec_millis()) * 15)
                    .unwrap_or_default();
                Duration::from_secs(30).max(steady / 2) + Duration::from_millis(jitter)
            }
            e if e.waits_for_user() => steady,
            _ => fast * 5,
        }
    }
}

/// Consecutive rate-limited reconciles retried quickly and quietly before it is reported.
pub const QUIET_RATE_LIMITS: u32 = 2;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A Kubernetes error as a person reads it: the apiserver's message, not a debug dump.
pub fn kube_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::Intervals;
    use std::time::Duration;

    #[test]
    fn temporal_errors_are_classified_into_states() {
        let limited = tonic::Status::resource_exhausted(
            "too many requests issued to Worker Deployment 'a/b'. Please try again later",
        );
        let e = Error::temporal(
            &limited,
            "DescribeWorkerDeployment a/b".into(),
            Error::TemporalStateFetchFailed,
        );
        assert_eq!(e.reason(), reason::TEMPORAL_STATE_FETCH_FAILED);
        assert!(e.to_string().contains("Rate limited"), "{e}");
        let intervals = Intervals {
            moving: Duration::from_secs(2),
            steady: Duration::from_secs(60),
        };
        // Right after a routing change this is Temporal catching up: quick and quiet, twice.
        for repeats in 1..=QUIET_RATE_LIMITS {
            assert!(!e.is_warning(repeats));
            assert_eq!(e.retry_after(&intervals, repeats), Duration::from_secs(2));
        }
        // Then it is a rate limit: reported, and backed off.
        assert!(e.is_warning(QUIET_RATE_LIMITS + 1));
        let wait = e.retry_after(&intervals, QUIET_RATE_LIMITS + 1);
        assert!(
            wait >= Duration::from_secs(30) && wait < Duration::from_secs(46),
            "{wait:?}"
        );

        let conflict = tonic::Status::failed_precondition("conflict token mismatch");
        let e = Error::temporal(
            &conflict,
            "SetWorkerDeploymentCurrentVersion".into(),
            Error::PlanExecutionFailed,
        );
        assert!(matches!(e, Error::Conflict(_)));
        assert!(!e.is_warning(0));
        assert_eq!(e.retry_after(&intervals, 0), Duration::from_secs(2));

        let refused = tonic::Status::failed_precondition("ManagerIdentity 'x' is set");
        let e = Error::temporal(
            &refused,
            "SetWorkerDeploymentCurrentVersion".into(),
            Error::PlanExecutionFailed,
        );
        assert_eq!(e.reason(), reason::PLAN_EXECUTION_FAILED);
        assert!(
            e.is_warning(0) && e.to_string().contains("ManagerIdentity"),
            "{e}"
        );
        assert_eq!(e.retry_after(&intervals, 0), Duration::from_secs(10));
    }
}
