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

    /// Temporal's worker deployment is still busy with a previous change (`ResourceExhausted`
    /// "too many requests issued to Worker Deployment"): retried at the next fast poll.
    #[error("Temporal is still applying a previous change ({0}); retrying")]
    Busy(String),

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
            Error::PlanExecutionFailed(_)
            | Error::Conflict(_)
            | Error::Busy(_)
            | Error::Kube(_) => reason::PLAN_EXECUTION_FAILED,
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
            tonic::Code::ResourceExhausted if status.message().contains("Worker Deployment") => {
                Error::Busy(what)
            }
            tonic::Code::ResourceExhausted => Error::RateLimited(reason, what),
            tonic::Code::FailedPrecondition
                if status.message().contains("conflict token mismatch") =>
            {
                Error::Conflict(what)
            }
            _ => other(format!("{what}: {}", status.message())),
        }
    }

    /// Worth a Warning event (a concurrent change, or Temporal finishing one, is not).
    pub fn is_warning(&self) -> bool {
        !matches!(self, Error::Conflict(_) | Error::Busy(_))
    }

    /// When to try again: at the fast poll after a conflict; after the steady poll when
    /// waiting for the user; after a jittered half-minute or more when rate limited; else
    /// after five fast polls.
    pub fn retry_after(&self, intervals: &crate::reconcile::Intervals) -> std::time::Duration {
        use std::time::Duration;
        let (fast, steady) = (intervals.moving, intervals.steady);
        match self {
            Error::Conflict(_) | Error::Busy(_) => fast,
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
        let limited = tonic::Status::resource_exhausted("namespace rate limit exceeded");
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
        let wait = e.retry_after(&intervals);
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
        assert!(!e.is_warning());
        assert_eq!(e.retry_after(&intervals), Duration::from_secs(2));

        let busy = tonic::Status::resource_exhausted(
            "too many requests issued to Worker Deployment; please retry",
        );
        let e = Error::temporal(
            &busy,
            "DescribeWorkerDeployment".into(),
            Error::TemporalStateFetchFailed,
        );
        assert!(matches!(e, Error::Busy(_)) && !e.is_warning());
        assert_eq!(e.retry_after(&intervals), Duration::from_secs(2));

        let refused = tonic::Status::failed_precondition("ManagerIdentity 'x' is set");
        let e = Error::temporal(
            &refused,
            "SetWorkerDeploymentCurrentVersion".into(),
            Error::PlanExecutionFailed,
        );
        assert_eq!(e.reason(), reason::PLAN_EXECUTION_FAILED);
        assert!(
            e.is_warning() && e.to_string().contains("ManagerIdentity"),
            "{e}"
        );
        assert_eq!(e.retry_after(&intervals), Duration::from_secs(10));
    }
}
