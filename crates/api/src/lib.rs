//! `temporal.io/v1alpha1`: the API of the Temporal Worker Controller, wire-compatible with TWC,
//! plus the cluster-scoped `ClusterConnection` and the typed `connectionRef.objectRef`.
//!
//! Types only, and the CRDs generated from them ([`crd`]); no IO.

pub mod connection;
pub mod crd;
pub mod duration;
mod schema;
pub mod sharing;
pub mod worker_deployment;
pub mod worker_resource_template;

pub use connection::{
    AuthMode, ClusterConnection, ClusterConnectionSpec, Connection, ConnectionSpec,
    ConnectionStatus, ConnectionTls, SecretReference,
};
pub use sharing::{AllowedNamespaces, FromNamespaces, Sharing};
pub use worker_deployment::*;
pub use worker_resource_template::*;

/// API group of every kind here.
pub const GROUP: &str = "temporal.io";
/// API version of every kind here.
pub const VERSION: &str = "v1alpha1";
/// `group/version`.
pub const API_VERSION: &str = "temporal.io/v1alpha1";

/// Finalizer on WorkerDeployments (cleanup in Temporal) and on Connections and
/// ClusterConnections (kept while any WorkerDeployment uses them). Same name as TWC.
pub const FINALIZER: &str = "temporal.io/delete-protection";

/// Not in TWC: set to `"true"` on a WorkerDeployment being deleted, its deletion stops
/// waiting for versions with open pinned workflows (they lose their workers) and for versions
/// another manager still routes new work to.
pub const SKIP_DRAINAGE_ANNOTATION: &str = "temporal.io/skip-drainage";

/// Not in TWC: set to `"true"` on a WorkerDeployment being deleted whose cleanup in Temporal
/// cannot run (`CleanupBlocked`: its connection is gone or refuses it, its Secret is unusable,
/// Temporal cannot be reached), its deletion goes on without it: the versioned Deployments are
/// deleted and Temporal's worker deployment and versions are left as they are. A person's
/// choice; the controller never skips the cleanup on its own.
pub const SKIP_TEMPORAL_CLEANUP_ANNOTATION: &str = "temporal.io/skip-temporal-cleanup";

/// Not in TWC: set to `"false"` on a WorkerDeployment whose workers reload their credentials
/// themselves, the controller does not restart them when a credential Secret's content changes
/// (it restarts them by default: workers read their certificate or API key once, at start).
pub const RESTART_ON_SECRET_CHANGE_ANNOTATION: &str = "temporal.io/restart-on-secret-change";

/// The rollout controls: annotations on a WorkerDeployment that a person (`kubectl annotate`,
/// `twc pause|resume|promote|abort|retry`) or a GitOps tool sets. The controller reads them and
/// never writes them; what it acted on is in `status.controls`.
pub mod controls {
    /// `"true"`: routing changes are held (no ramp step, no promotion). Remove it, or set any
    /// other value, to resume. A failing build is still rolled back while paused, and the
    /// progress deadline does not run.
    pub const PAUSED: &str = "temporal.io/rollout-paused";
    /// A build ID: promote that build as soon as it is the target with its workers up, skipping
    /// the remaining ramp steps and a gate still running. Acted on once per build; ignored if
    /// it names another build.
    pub const PROMOTE: &str = "temporal.io/promote";
    /// Any new value (`twc abort` writes the time): roll the target back now and mark it
    /// failed, as an automatic rollback does. Acted on once per value.
    pub const ABORT: &str = "temporal.io/abort";
    /// Any new value (`twc retry` writes the time): clear the target's failed mark; its
    /// progress deadline starts again. Acted on once per value.
    pub const RETRY: &str = "temporal.io/retry";
}

/// Labels and annotations the controller sets, as TWC does.
pub mod labels {
    /// On versioned Deployments and their pods: the build ID.
    pub const BUILD_ID: &str = "temporal.io/build-id";
    /// On versioned Deployments and their pods: the WorkerDeployment's name.
    pub const DEPLOYMENT_NAME: &str = "temporal.io/deployment-name";
    /// On a grouped version's Deployments and their pods: the worker group's name (upstream's
    /// `WorkerGroupLabel`); a Deployment without it is the `default` group.
    pub const WORKER_GROUP: &str = "temporal.io/worker-group";
    /// Pod annotation: hash of the connection settings the pods were built with.
    pub const CONNECTION_SPEC_HASH: &str = "temporal.io/connection-spec-hash";
    /// Pod annotation: hash of the user's pod template.
    pub const POD_TEMPLATE_SPEC_HASH: &str = "temporal.io/pod-template-spec-hash";
    /// Not in TWC. On a versioned Deployment: the digest of the credential Secrets' content
    /// its pods started with. On its pod template, set only when the content changed, to
    /// restart the pods with the new content (same build ID).
    pub const CREDENTIALS_DIGEST: &str = "temporal.io/credentials-digest";
    /// Not in TWC. On a versioned Deployment: when the controller last restarted its pods for
    /// changed credential Secrets (RFC 3339). A restart holds its place in the pace
    /// (`--restart-pace`) until the Deployment is available again, at most 10 minutes.
    pub const CREDENTIALS_RESTARTED_AT: &str = "temporal.io/credentials-restarted-at";
    /// Not in TWC. On a versioned Deployment: when the client certificate its pods started
    /// with expires (RFC 3339), recorded with [`CREDENTIALS_DIGEST`] for mutual TLS. A restart
    /// onto renewed Secrets never waits for the pace past it.
    pub const CREDENTIALS_NOT_AFTER: &str = "temporal.io/credentials-not-after";
}

/// Condition types and reasons, the same strings as TWC.
pub mod conditions {
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    /// kstatus (Helm 4's `--wait`, Flux, `kubectl wait`-style tools): True when reconciling
    /// cannot go on until someone changes something (the spec, the controller's install, the
    /// server); those tools report the object as failed at once. Written on every kind.
    pub const STALLED: &str = "Stalled";
    /// kstatus: True while the controller is working towards the spec or waiting for
    /// something that may still come (a Connection, a Secret, Temporal, the workers); those tools
    /// keep waiting. False once the rollout is complete. At most one of the two is True.
    pub const RECONCILING: &str = "Reconciling";
    /// `Stalled=False` after a reconcile that went through.
    pub const RECONCILE_SUCCEEDED: &str = "ReconcileSucceeded";

    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    /// `Progressing=True`: the target's workers have not polled yet (not registered), or,
    /// once it is current, some of its task queues have no active poller (TWC #448).
    pub const WAITING_FOR_POLLERS: &str = "WaitingForPollers";
    /// `Progressing=False` once the target is current: every task queue it is known to poll
    /// has an active poller.
    pub const ACTIVE_POLLERS: &str = "ActivePollers";
    /// `Progressing=False` once the target is current: whether its task queues have pollers
    /// could not be told (never "no pollers").
    pub const POLLER_STATUS_UNKNOWN: &str = "PollerStatusUnknown";
    pub const WAITING_FOR_PROMOTION: &str = "WaitingForPromotion";
    pub const RAMPING: &str = "Ramping";
    pub const CONNECTION_NOT_FOUND: &str = "ConnectionNotFound";
    pub const AUTH_SECRET_INVALID: &str = "AuthSecretInvalid";
    pub const TEMPORAL_CLIENT_CREATION_FAILED: &str = "TemporalClientCreationFailed";
    pub const TEMPORAL_STATE_FETCH_FAILED: &str = "TemporalStateFetchFailed";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const PLAN_GENERATION_FAILED: &str = "PlanGenerationFailed";
    pub const PLAN_EXECUTION_FAILED: &str = "PlanExecutionFailed";
    /// A ClusterConnection referenced while the controller watches only some namespaces (it
    /// cannot read cluster-scoped kinds then). `Stalled=True`.
    pub const CLUSTER_CONNECTION_UNSUPPORTED: &str = "ClusterConnectionUnsupported";

    /// Not in TWC: the target failed its rollout. `Ready` and `Progressing` are False with one
    /// of these reasons, and `RolledBack` is True with it when new workflows had reached the
    /// build and were routed back.
    pub const ROLLED_BACK: &str = "RolledBack";
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    pub const WORKERS_CRASH_LOOPING: &str = "WorkersCrashLooping";
    pub const ANALYSIS_FAILED: &str = "AnalysisFailed";
    pub const ABORTED: &str = "Aborted";
    /// A ramp step's gate workflow (`steps[].gate`) did not complete.
    pub const STEP_GATE_FAILED: &str = "StepGateFailed";
    /// `RolledBack=False`: the target is not (or no longer) rolled back.
    pub const NOT_ROLLED_BACK: &str = "NotRolledBack";
    /// `Progressing=False` while `temporal.io/rollout-paused` holds routing.
    pub const PAUSED: &str = "Paused";

    /// Not in TWC: whether Temporal accounts for every version that has a Deployment. False
    /// names the versions left exactly as they are (not scaled, not deleted) and why; the
    /// condition appears the first time that happens.
    pub const VERSIONS_KNOWN: &str = "VersionsKnown";
    pub const ALL_VERSIONS_KNOWN: &str = "AllVersionsKnown";
    pub const VERSIONS_KEPT: &str = "VersionsKept";

    /// Not in TWC: `Ready`/`Progressing` False because the Temporal server is older than the
    /// controller supports (its Worker Deployment APIs answer `Unimplemented`, or it reports an
    /// older version); the message names the server's version and the minimum.
    pub const TEMPORAL_SERVER_UNSUPPORTED: &str = "TemporalServerUnsupported";

    /// Not in TWC: `Ready=False` reasons while a deletion keeps workers Temporal still needs.
    pub const WAITING_FOR_DRAINAGE: &str = "WaitingForDrainage";
    pub const ROUTED_BY_ANOTHER_MANAGER: &str = "RoutedByAnotherManager";
    /// `Ready=False` while a deletion cannot clean Temporal up (the message says why and how
    /// to go on); the finalizer stays.
    pub const CLEANUP_BLOCKED: &str = "CleanupBlocked";

    /// Not in TWC: `Ready` reasons of a Connection or ClusterConnection (False carries the
    /// failing user's own reason).
    pub const CONNECTION_REACHABLE: &str = "Reachable";
    pub const CONNECTION_NOT_USED: &str = "NotUsed";
    pub const CONNECTION_PENDING: &str = "Pending";

    /// Not in TWC: `Ready`/`Progressing` False because the referenced ClusterConnection does not
    /// allow this WorkerDeployment (its namespace, or its Temporal namespace); the message names
    /// the rule. Nothing of it is read or changed until it is allowed.
    pub const CONNECTION_NOT_ALLOWED: &str = "ConnectionNotAllowed";
}
