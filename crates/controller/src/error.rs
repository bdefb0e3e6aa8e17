//! The reconcilers' error type. Each variant knows the condition reason it is reported with
//! (the same strings as TWC) and whether retrying can help.

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
            Error::PlanExecutionFailed(_) | Error::Kube(_) => reason::PLAN_EXECUTION_FAILED,
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

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A Kubernetes error as a person reads it: the apiserver's message, not a debug dump.
pub fn kube_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}
