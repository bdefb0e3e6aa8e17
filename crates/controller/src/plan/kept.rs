//! Versions the planner leaves exactly as they are, because Temporal cannot account for them
//! here, and why.

/// A version left as it is, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub build_id: String,
    pub why: Unaccounted,
}

/// Why Temporal cannot account for a version that has a Deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unaccounted {
    /// Its workers poll another Temporal namespace (`temporalNamespace` changed since): its
    /// pinned workflows live there, where this controller no longer looks.
    OtherNamespace(String),
    /// The worker deployment is not found where the controller looks (deleted in Temporal,
    /// or `hostPort` now names another server).
    DeploymentNotFound,
    /// Its workers were started with another connection (`hostPort`, TLS or credentials) and
    /// Temporal, reached through the new one, does not list it.
    OtherConnection,
    /// Temporal does not list the version although its workers are up (they poll somewhere
    /// else, or have not polled yet).
    NotListed { ready: i32 },
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.build_id;
        match &self.why {
            Unaccounted::OtherNamespace(ns) => {
                write!(f, "{b} (its workers poll Temporal namespace {ns:?})")
            }
            Unaccounted::DeploymentNotFound => {
                write!(f, "{b} (the worker deployment is not found in Temporal)")
            }
            Unaccounted::OtherConnection => write!(
                f,
                "{b} (its workers use a previous connection, and Temporal reached through the current one does not list it)"
            ),
            Unaccounted::NotListed { .. } => {
                write!(f, "{b} (Temporal does not list it, yet its pods are ready)")
            }
        }
    }
}
