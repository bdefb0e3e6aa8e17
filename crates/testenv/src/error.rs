//! One error type for the test environment; every variant names the component at fault.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{component}: binary not found at {path}. Run `hack/provision.sh` (it installs every \
         pinned version into the cache; `TWC_TEMPORAL_VERSION=X hack/provision.sh` for another \
         Temporal CLI), or point the matching TWC_* variable at a binary"
    )]
    MissingBinary { component: String, path: PathBuf },

    #[error("{component} exited early ({status}); log: {log}\n--- last lines ---\n{tail}")]
    ExitedEarly {
        component: String,
        status: String,
        log: PathBuf,
        tail: String,
    },

    #[error(
        "{component} was not ready after {waited:?}: {last}; log: {log}\n--- last lines ---\n{tail}"
    )]
    NotReady {
        component: String,
        waited: std::time::Duration,
        last: String,
        log: PathBuf,
        tail: String,
    },

    #[error("{component}: {path}: {source}")]
    Io {
        component: String,
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("timed out after {waited:?} waiting for {what}; last observed: {observed}")]
    Timeout {
        what: String,
        waited: std::time::Duration,
        observed: String,
    },

    #[error(
        "the real node cannot start on this machine:\n  - {}\n(tests that need the real node \
         fail until then; docs/testing.md)",
        .0.join("\n  - ")
    )]
    NodeUnavailable(Vec<String>),

    #[error(
        "image archive {0} not found: build the images with `hack/image.sh --profile dev` \
         (hack/test.sh does), or point TWC_IMAGES_DIR at their directory"
    )]
    MissingImage(PathBuf),

    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),

    #[error("temporal: {0}")]
    Temporal(String),

    #[error("{0}")]
    Other(String),
}

impl Error {
    pub fn io(component: &str, path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            component: component.to_string(),
            path: path.to_path_buf(),
            source,
        }
    }
}
