//! What went wrong in a reconcile, said precisely (which call, on what, with which answer), and
//! separately what that means: [`Error::verdict`] decides the condition reason (the same
//! strings as TWC), whether a person is told (a Warning), and when to try again ([`Retry`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use temporalio_client::tonic;
use twc_api::conditions as reason;

use crate::config::Intervals;
use crate::temporal::server::MINIMUM_SERVER_VERSION;

/// A Temporal call the controller makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rpc {
    DescribeWorkerDeployment,
    DescribeWorkerDeploymentVersion,
    DescribeWorkflowExecution,
    CountWorkflowExecutions,
    SetWorkerDeploymentManager,
    SetWorkerDeploymentCurrentVersion,
    SetWorkerDeploymentRampingVersion,
    DeleteWorkerDeploymentVersion,
    DeleteWorkerDeployment,
}

impl Rpc {
    /// The RPC's name, as Temporal's API calls it.
    pub fn name(self) -> &'static str {
        match self {
            Rpc::DescribeWorkerDeployment => "DescribeWorkerDeployment",
            Rpc::DescribeWorkerDeploymentVersion => "DescribeWorkerDeploymentVersion",
            Rpc::DescribeWorkflowExecution => "DescribeWorkflowExecution",
            Rpc::CountWorkflowExecutions => "CountWorkflowExecutions",
            Rpc::SetWorkerDeploymentManager => "SetWorkerDeploymentManager",
            Rpc::SetWorkerDeploymentCurrentVersion => "SetWorkerDeploymentCurrentVersion",
            Rpc::SetWorkerDeploymentRampingVersion => "SetWorkerDeploymentRampingVersion",
            Rpc::DeleteWorkerDeploymentVersion => "DeleteWorkerDeploymentVersion",
            Rpc::DeleteWorkerDeployment => "DeleteWorkerDeployment",
        }
    }

    /// Whether the call only reads (its failure is a failure to observe, not to execute).
    pub fn reads(self) -> bool {
        matches!(
            self,
            Rpc::DescribeWorkerDeployment
                | Rpc::DescribeWorkerDeploymentVersion
                | Rpc::DescribeWorkflowExecution
                | Rpc::CountWorkflowExecutions
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec has a problem the CRD validation could not catch.
    #[error("{0}")]
    InvalidSpec(String),

    /// The referenced Connection or ClusterConnection does not exist (or cannot be used).
    #[error("{0}")]
    ConnectionNotFound(String),

    /// A ClusterConnection is referenced but this install of the controller cannot read
    /// ClusterConnections (namespace-scoped, or not granted them when it started).
    #[error("{0}")]
    ClusterConnectionUnsupported(String),

    /// The referenced ClusterConnection does not allow this WorkerDeployment (its namespace or
    /// its Temporal namespace), or cannot tell yet; the message names the rule.
    #[error("{0}")]
    ConnectionNotAllowed(String),

    /// The credential Secret is missing or unusable.
    #[error("{0}")]
    AuthSecretInvalid(String),

    /// No Temporal client could be created (dial, TLS, unreachable server).
    #[error("{0}")]
    TemporalDial(String),

    /// A Temporal call failed. `subject` says on what ("for buildID x", "d in Temporal
    /// namespace n").
    #[error("{}", temporal_message(*.rpc, .subject, *.code, .message))]
    Temporal {
        rpc: Rpc,
        subject: String,
        code: tonic::Code,
        message: String,
    },

    /// The Temporal server is too old for this controller: a Worker Deployment call answered
    /// `Unimplemented` (`rpc`), or the server reports a version older than
    /// [`MINIMUM_SERVER_VERSION`] (`rpc` None). `server_version` as `GetSystemInfo` said, if known.
    #[error("{}", unsupported_message(*.rpc, .server_version.as_deref()))]
    TemporalServerUnsupported {
        rpc: Option<Rpc>,
        server_version: Option<String>,
    },

    /// The gate's input (from the spec, a ConfigMap or a Secret) could not be read.
    #[error("{0}")]
    GateInput(String),

    /// A Kubernetes write of the plan failed: `what` names the verb and the object.
    #[error("{what}: {message}")]
    KubeWrite { what: String, message: String },

    /// Another Kubernetes API call failed.
    #[error("kubernetes: {}", kube_message(.0))]
    Kube(#[from] kube::Error),
}

/// A Temporal answer that means the routing changed since it was read.
fn is_conflict(code: tonic::Code, message: &str) -> bool {
    code == tonic::Code::FailedPrecondition && message.contains("conflict token mismatch")
}

fn temporal_message(rpc: Rpc, subject: &str, code: tonic::Code, message: &str) -> String {
    let call = format!("{} {subject}", rpc.name());
    if code == tonic::Code::ResourceExhausted {
        format!("Rate limited by Temporal (ResourceExhausted): {call}; retrying in a while")
    } else if is_conflict(code, message) {
        format!("the routing changed concurrently ({call}); re-reading")
    } else {
        format!("{call}: {message}")
    }
}

/// What a person reads when the server is too old: which server, what it lacks, what is needed.
/// The same words every time for the same server, so it is said once (one Warning event).
fn unsupported_message(rpc: Option<Rpc>, server_version: Option<&str>) -> String {
    let server = match server_version {
        Some(v) if !v.is_empty() => format!("The Temporal server (version {v})"),
        _ => "The Temporal server".to_string(),
    };
    let what = match rpc {
        Some(rpc) => format!("does not implement {} (Unimplemented)", rpc.name()),
        None => "is too old".to_string(),
    };
    format!(
        "{server} {what}: this controller needs the Worker Deployment APIs of Temporal Server \
         {MINIMUM_SERVER_VERSION} or newer; upgrade the server (checked again every few minutes)"
    )
}

impl Error {
    /// A failed Temporal call. `Unimplemented` means the server is too old for the controller.
    pub fn temporal(rpc: Rpc, subject: impl Into<String>, status: &tonic::Status) -> Error {
        if status.code() == tonic::Code::Unimplemented {
            return Error::TemporalServerUnsupported {
                rpc: Some(rpc),
                server_version: None,
            };
        }
        Error::Temporal {
            rpc,
            subject: subject.into(),
            code: status.code(),
            message: status.message().to_string(),
        }
    }

    /// This error, naming the server's version when it is one about the server (`version` as
    /// `GetSystemInfo` reported it).
    pub fn on_server(self, version: Option<&str>) -> Error {
        match self {
            Error::TemporalServerUnsupported {
                rpc,
                server_version,
            } => Error::TemporalServerUnsupported {
                rpc,
                server_version: server_version.or_else(|| version.map(str::to_string)),
            },
            other => other,
        }
    }

    /// A failed Kubernetes write of `what` ("apply Deployment ns/name").
    pub fn kube_write(what: impl Into<String>, e: &kube::Error) -> Error {
        Error::KubeWrite {
            what: what.into(),
            message: kube_message(e),
        }
    }

    /// An error that stays while the WorkerDeployment's namespace is being deleted: its
    /// Connection or credential Secret is gone (deleted with the namespace), or it is refused.
    pub fn is_permanent_in_dying_namespace(&self) -> bool {
        matches!(
            self,
            Error::ConnectionNotFound(_)
                | Error::ClusterConnectionUnsupported(_)
                | Error::ConnectionNotAllowed(_)
                | Error::AuthSecretInvalid(_)
        )
    }

    /// Temporal refused the credentials of a call (`Unauthenticated`, `PermissionDenied`).
    pub fn is_refused_credentials(&self) -> bool {
        matches!(self, Error::Temporal { code, .. }
            if matches!(code, tonic::Code::Unauthenticated | tonic::Code::PermissionDenied))
    }

    /// Temporal refused a call for its rate limits (`ResourceExhausted`).
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, Error::Temporal { code, .. } if *code == tonic::Code::ResourceExhausted)
    }

    /// The condition reason and Warning event reason (`verdict` with no repeats).
    pub fn reason(&self) -> &'static str {
        self.verdict(0).reason
    }

    /// What this error means for the reconcile. `repeats` counts the consecutive reconciles of
    /// this object that were rate limited, this one included: Temporal answers
    /// `ResourceExhausted` ("too many requests issued to Worker Deployment") also for a moment
    /// right after a routing change, so the first [`QUIET_RATE_LIMITS`] are retried quietly.
    pub fn verdict(&self, repeats: u32) -> Verdict {
        let (reason, retry, warning) = match self {
            Error::InvalidSpec(_) => (reason::INVALID_SPEC, Retry::Steady, true),
            Error::ConnectionNotFound(_) => (reason::CONNECTION_NOT_FOUND, Retry::Steady, true),
            Error::ConnectionNotAllowed(_) => (reason::CONNECTION_NOT_ALLOWED, Retry::Steady, true),
            Error::ClusterConnectionUnsupported(_) => {
                (reason::CLUSTER_CONNECTION_UNSUPPORTED, Retry::Steady, true)
            }
            Error::AuthSecretInvalid(_) => (reason::AUTH_SECRET_INVALID, Retry::Steady, true),
            Error::GateInput(_) => (reason::PLAN_GENERATION_FAILED, Retry::Steady, true),
            Error::TemporalServerUnsupported { .. } => {
                (reason::TEMPORAL_SERVER_UNSUPPORTED, Retry::Slow, true)
            }
            Error::TemporalDial(_) => (
                reason::TEMPORAL_CLIENT_CREATION_FAILED,
                Retry::Backoff,
                true,
            ),
            Error::Temporal {
                rpc, code, message, ..
            } => {
                let reason = if rpc.reads() {
                    reason::TEMPORAL_STATE_FETCH_FAILED
                } else {
                    reason::PLAN_EXECUTION_FAILED
                };
                if *code == tonic::Code::ResourceExhausted {
                    if repeats <= QUIET_RATE_LIMITS {
                        (reason, Retry::Fast, false)
                    } else {
                        (reason, Retry::Throttled, true)
                    }
                } else if is_conflict(*code, message) {
                    // Someone changed the routing since it was read: re-read, quietly.
                    (reason, Retry::Fast, false)
                } else {
                    (reason, Retry::Backoff, true)
                }
            }
            Error::KubeWrite { .. } | Error::Kube(_) => {
                (reason::PLAN_EXECUTION_FAILED, Retry::Backoff, true)
            }
        };
        Verdict {
            reason,
            retry,
            warning,
        }
    }
}

/// What an error means for the reconcile that met it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The condition reason and the Warning event's reason.
    pub reason: &'static str,
    pub retry: Retry,
    /// Worth a condition and a Warning event (else retried quietly, conditions kept).
    pub warning: bool,
}

/// Consecutive failed reconciles of one object, by kind; any other outcome resets both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streak {
    /// Rate limited by Temporal, this one included.
    pub rate_limited: u32,
    /// Failed in a way that backs off ([`Retry::Backoff`]), this one included.
    pub failed: u32,
}

impl Streak {
    /// The streak after a reconcile that ended with `error` (None: it did not fail).
    pub fn next(self, error: Option<&Error>) -> Streak {
        match error {
            None => Streak::default(),
            Some(e) if e.is_rate_limited() => Streak {
                rate_limited: self.rate_limited.saturating_add(1),
                failed: 0,
            },
            Some(e) if e.verdict(0).retry == Retry::Backoff => Streak {
                rate_limited: 0,
                failed: self.failed.saturating_add(1),
            },
            Some(_) => Streak::default(),
        }
    }
}

/// The longest wait between retries of a failing object.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Exponential backoff: `base` after the first failure, doubling with each further one, at most
/// [`MAX_BACKOFF`], plus up to a tenth of it as jitter (`jitter` in 0..1000 ‰) so that many
/// objects failing together do not retry together.
pub fn backoff(base: Duration, failures: u32, jitter: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let delay = base.saturating_mul(1 << doublings).min(MAX_BACKOFF);
    delay + delay / 10 * jitter.min(1000) / 1000
}

/// A jitter in 0..1000 from the clock (no random source needed for this).
fn jitter() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_millis())
        .unwrap_or_default()
}

/// When to reconcile again after an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// At the fast poll: a concurrent change, or Temporal catching up.
    Fast,
    /// At the steady poll: waiting for a person to fix a spec, a Secret or a connection.
    Steady,
    /// After five fast polls, doubling with each consecutive failure of the object up to
    /// [`MAX_BACKOFF`], jittered: a failure that may pass.
    Backoff,
    /// After a jittered half-minute or more: Temporal's rate limit.
    Throttled,
    /// After [`MAX_BACKOFF`] (or the steady poll, if longer): the server is too old, and an
    /// upgrade takes a while.
    Slow,
}

impl Retry {
    /// The delay under `intervals`, for an object with `streak` (this failure included).
    pub fn after(self, intervals: &Intervals, streak: Streak) -> Duration {
        match self {
            Retry::Fast => intervals.moving,
            Retry::Steady => intervals.steady,
            Retry::Backoff => backoff(intervals.moving * 5, streak.failed, jitter()),
            Retry::Throttled => {
                let jitter = u64::from(jitter()) * 15;
                Duration::from_secs(30).max(intervals.steady / 2) + Duration::from_millis(jitter)
            }
            Retry::Slow => MAX_BACKOFF.max(intervals.steady),
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

    fn intervals() -> Intervals {
        Intervals {
            moving: Duration::from_secs(2),
            steady: Duration::from_secs(60),
            drainage: Duration::from_secs(180),
        }
    }

    #[test]
    fn a_rate_limit_is_quiet_twice_then_reported_and_backed_off() {
        let limited = tonic::Status::resource_exhausted(
            "too many requests issued to Worker Deployment 'a/b'. Please try again later",
        );
        let e = Error::temporal(Rpc::DescribeWorkerDeployment, "a/b", &limited);
        assert!(e.is_rate_limited());
        assert_eq!(e.reason(), reason::TEMPORAL_STATE_FETCH_FAILED);
        assert!(e.to_string().contains("Rate limited"), "{e}");
        // Right after a routing change this is Temporal catching up: quick and quiet, twice.
        for repeats in 1..=QUIET_RATE_LIMITS {
            let v = e.verdict(repeats);
            assert!(!v.warning);
            assert_eq!(
                v.retry.after(&intervals(), Streak::default()),
                Duration::from_secs(2)
            );
        }
        // Then it is a rate limit: reported, and backed off.
        let v = e.verdict(QUIET_RATE_LIMITS + 1);
        assert!(v.warning);
        let wait = v.retry.after(&intervals(), Streak::default());
        assert!(
            wait >= Duration::from_secs(30) && wait < Duration::from_secs(46),
            "{wait:?}"
        );
        // A rate-limited write keeps the reason of what it interrupted.
        let e = Error::temporal(Rpc::SetWorkerDeploymentCurrentVersion, "for d", &limited);
        assert_eq!(e.reason(), reason::PLAN_EXECUTION_FAILED);
    }

    #[test]
    fn a_conflict_is_re_read_quietly_and_a_refusal_is_reported() {
        let conflict = tonic::Status::failed_precondition("conflict token mismatch");
        let e = Error::temporal(Rpc::SetWorkerDeploymentCurrentVersion, "for d", &conflict);
        let v = e.verdict(0);
        assert!(!v.warning);
        assert_eq!(v.retry, Retry::Fast);
        assert!(e.to_string().contains("changed concurrently"), "{e}");

        let refused = tonic::Status::failed_precondition("ManagerIdentity 'x' is set");
        let e = Error::temporal(Rpc::SetWorkerDeploymentCurrentVersion, "for d", &refused);
        let v = e.verdict(0);
        assert_eq!(v.reason, reason::PLAN_EXECUTION_FAILED);
        assert!(v.warning);
        assert_eq!(
            e.to_string(),
            "SetWorkerDeploymentCurrentVersion for d: ManagerIdentity 'x' is set"
        );
        // A first failure waits five fast polls (plus at most a tenth as jitter).
        let first = Streak::default().next(Some(&e));
        let wait = v.retry.after(&intervals(), first);
        assert!(
            wait >= Duration::from_secs(10) && wait <= Duration::from_secs(11),
            "{wait:?}"
        );
    }

    #[test]
    fn a_server_too_old_is_said_once_in_the_same_words_and_retried_slowly() {
        let unimplemented = tonic::Status::unimplemented("unknown method DescribeWorkerDeployment");
        let e = Error::temporal(
            Rpc::DescribeWorkerDeployment,
            "ns/wd in default",
            &unimplemented,
        )
        .on_server(Some("1.26.2"));
        let v = e.verdict(0);
        assert_eq!(v.reason, "TemporalServerUnsupported");
        assert!(v.warning);
        assert_eq!(v.retry, Retry::Slow);
        assert_eq!(
            v.retry
                .after(&intervals(), Streak::default().next(Some(&e))),
            MAX_BACKOFF
        );
        assert_eq!(
            e.to_string(),
            "The Temporal server (version 1.26.2) does not implement DescribeWorkerDeployment \
             (Unimplemented): this controller needs the Worker Deployment APIs of Temporal \
             Server 1.29.1 or newer; upgrade the server (checked again every few minutes)"
        );
        // Stable words, so the Warning is not repeated each time it is retried.
        let again = Error::temporal(Rpc::DescribeWorkerDeployment, "other", &unimplemented)
            .on_server(Some("1.26.2"));
        assert_eq!(again.to_string(), e.to_string());
        // A write answering Unimplemented, with the version unknown.
        let w = Error::temporal(Rpc::SetWorkerDeploymentManager, "for d", &unimplemented);
        assert_eq!(w.reason(), "TemporalServerUnsupported");
        assert!(
            w.to_string()
                .starts_with("The Temporal server does not implement SetWorkerDeploymentManager")
        );
        // Known too old by its version alone.
        let old = Error::TemporalServerUnsupported {
            rpc: None,
            server_version: Some("1.28.0".into()),
        };
        assert!(
            old.to_string()
                .starts_with("The Temporal server (version 1.28.0) is too old: "),
            "{old}"
        );
        // Other errors are not about the server.
        let refused = tonic::Status::failed_precondition("no");
        let e =
            Error::temporal(Rpc::DescribeWorkerDeployment, "d", &refused).on_server(Some("1.0.0"));
        assert_eq!(e.reason(), reason::TEMPORAL_STATE_FETCH_FAILED);
    }

    #[test]
    fn waiting_for_a_person_retries_at_the_steady_poll() {
        for e in [
            Error::InvalidSpec("x".into()),
            Error::ConnectionNotFound("x".into()),
            Error::AuthSecretInvalid("x".into()),
            Error::GateInput("x".into()),
        ] {
            assert_eq!(e.verdict(0).retry, Retry::Steady, "{e:?}");
        }
        assert_eq!(
            Error::TemporalDial("x".into()).reason(),
            reason::TEMPORAL_CLIENT_CREATION_FAILED
        );
    }

    #[test]
    fn failures_back_off_exponentially_up_to_a_cap_and_reset_on_success() {
        let base = Duration::from_secs(10);
        let waits: Vec<u64> = (1..=8).map(|n| backoff(base, n, 0).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(
            backoff(base, 3, 999).as_millis(),
            43_996,
            "at most a tenth more"
        );
        assert_eq!(backoff(base, u32::MAX, 0), MAX_BACKOFF);

        let refused = Error::temporal(
            Rpc::SetWorkerDeploymentCurrentVersion,
            "for d",
            &tonic::Status::failed_precondition("ManagerIdentity 'x' is set"),
        );
        let limited = Error::temporal(
            Rpc::DescribeWorkerDeployment,
            "d",
            &tonic::Status::resource_exhausted("slow down"),
        );
        let mut s = Streak::default();
        for _ in 0..3 {
            s = s.next(Some(&refused));
        }
        assert_eq!(s.failed, 3);
        let third = Retry::Backoff.after(&intervals(), s);
        assert!(third >= Duration::from_secs(40), "{third:?}");
        // A rate limit is its own streak; a success or a wait for a person resets both.
        s = s.next(Some(&limited));
        assert_eq!(
            s,
            Streak {
                rate_limited: 1,
                failed: 0
            }
        );
        assert_eq!(s.next(None), Streak::default());
        let s = Streak::default().next(Some(&refused));
        assert_eq!(
            s.next(Some(&Error::InvalidSpec("x".into()))),
            Streak::default()
        );
    }
}
