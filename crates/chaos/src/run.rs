//! What the run's tasks share: the seeded choices, where a WorkerDeployment's versions are
//! registered, what the run saw, where the pods run, and the run itself.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::Api;
use temporalio_client::Connection as TemporalConnection;
use twc_api::WorkerDeployment;
use twc_controller::plan::build_id;
use twc_testenv::api_proxy::ApiProxy;
use twc_testenv::control_plane::ControlPlane;
use twc_testenv::node::{Node, NodeEnv};
use twc_testenv::{TemporalServer, TestEnv};

use crate::faults::Fault;
use crate::temporal_view::View;
use crate::{CALL_TIMEOUT, restarts, temporal_view, tls};

/// SplitMix64: small, seedable, good enough to pick faults.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// Where a WorkerDeployment's versions are registered: a Temporal server of the run (0 or 1)
/// and a namespace on it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Place {
    pub(crate) server: usize,
    pub(crate) namespace: String,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "server {} namespace {}", self.server, self.namespace)
    }
}

/// What the run saw.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) violations: BTreeMap<&'static str, Vec<String>>,
    /// When each violation was seen, to tell which fault it followed.
    pub(crate) violated_at: Vec<(&'static str, Instant)>,
    /// When the driver was done and the faults stopped.
    pub(crate) faults_ended: Option<Instant>,
    /// Each fault, when it was injected, and how long until everything converged after it.
    pub(crate) faults: Vec<(Fault, Instant, Option<Duration>)>,
    pub(crate) rollouts: usize,
    pub(crate) observations: u64,
    /// Changes of Deployments the watch saw, and its errors (an apiserver restarting).
    pub(crate) watched: u64,
    pub(crate) watch_errors: u64,
    /// Reads that failed (a server restarting): skipped, not judged.
    pub(crate) read_errors: u64,
    /// Rollouts that did not converge within the bound while faults went on.
    pub(crate) slow: usize,
    /// Pinned workflows started (ID, where), with the build ID they were pinned
    /// to at their first workflow task (None when that was not seen in time).
    pub(crate) pinned: Vec<(String, Place, Option<String>)>,
    /// When Temporal last restarted (its worker list is empty until the next heartbeats).
    pub(crate) temporal_restarted: Option<Instant>,
    /// Where each WorkerDeployment's versions have been registered, oldest first (absent: only
    /// [`Run::home`]); the last is where its spec points now.
    pub(crate) places: BTreeMap<String, Vec<Place>>,
    /// Deployments of versions left on a server moved away from, deleted by the run as
    /// docs/safety.md asks a person to (`operator.rs`).
    pub(crate) deleted_by_hand: u64,
    /// Worker deployments a deleted WorkerDeployment left where it had moved away from.
    pub(crate) left_behind: std::collections::BTreeSet<String>,
    /// (WorkerDeployment, build ID) whose Deployment a scaler set to [`SCALED`] replicas.
    pub(crate) scaled: Vec<(String, String)>,
    /// WorkerDeployments a scaler's WorkerResourceTemplate was created for: the scaler owns
    /// their replicas from then on (the controller leaves a new version's unset).
    pub(crate) autoscaled: std::collections::BTreeSet<String>,
    /// The deletions of the watched namespace (a namespace-scoped install).
    pub(crate) namespace_deletions: Vec<crate::namespace_gone::Deletion>,
    /// (WorkerDeployment, build ID) of versions left in Temporal whose workers went with the
    /// deleted namespace: no longer judged by I1 and I2.
    pub(crate) gone_with_namespace: std::collections::BTreeSet<(String, String)>,
}

impl Report {
    pub(crate) fn violate(&mut self, invariant: &'static str, what: String) {
        eprintln!("!! {invariant}: {what}");
        self.violated_at.push((invariant, Instant::now()));
        self.violations.entry(invariant).or_default().push(what);
    }
}

/// Where the pods run: the pod runner, or a real node.
#[allow(clippy::large_enum_variant)] // one value per run, never moved after the start
pub(crate) enum Env {
    Runner(TestEnv),
    Node(NodeEnv),
}

impl Env {
    pub(crate) fn control_plane(&self) -> &ControlPlane {
        match self {
            Env::Runner(e) => &e.control_plane,
            Env::Node(e) => &e.control_plane,
        }
    }

    pub(crate) fn temporal(&self) -> &TemporalServer {
        match self {
            Env::Runner(e) => &e.temporal,
            Env::Node(e) => &e.temporal,
        }
    }

    pub(crate) fn node(&self) -> Option<&Node> {
        match self {
            Env::Runner(_) => None,
            Env::Node(e) => Some(&e.node),
        }
    }
}

/// Everything the tasks share.
pub(crate) struct Run<'a> {
    pub(crate) env: &'a Env,
    /// The fault-injecting proxy the controller replicas reach the apiserver through.
    pub(crate) api_proxy: &'a ApiProxy,
    /// Replicas of each WorkerDeployment.
    pub(crate) replicas: i32,
    /// The TLS proxies and the client certificates' CA.
    pub(crate) tls: tls::Tls,
    /// The TLS proxy in front of the dev server (mutual TLS).
    pub(crate) tls_address: String,
    /// The TLS proxy in front of the second dev server.
    pub(crate) tls_address_b: String,
    pub(crate) client: Client,
    pub(crate) temporal: TemporalConnection,
    pub(crate) ns: String,
    /// The Temporal namespace every WorkerDeployment starts in (on both servers).
    pub(crate) temporal_ns: String,
    /// The Temporal namespace the `temporalNamespace` change moves a WorkerDeployment to
    /// (once; the versions it leaves behind stay where they were).
    pub(crate) moved_ns: String,
    /// The second Temporal server, which the server change moves a WorkerDeployment to (once),
    /// through ClusterConnection [`CLUSTER_CONNECTION_B`].
    pub(crate) temporal_b: TemporalConnection,
    pub(crate) names: Vec<String>,
    pub(crate) converge: Duration,
    /// A self-test run (`--expect-violation`).
    pub(crate) self_test: bool,
    /// The controllers' `--restart-pace` (I5).
    pub(crate) restart_pace: usize,
    /// The renewals of the client certificate Secret, judged by I5.
    pub(crate) renewals: restarts::Renewals,
    pub(crate) report: Mutex<Report>,
    pub(crate) done: AtomicBool,
    /// A namespace-scoped install (`scoped.rs`).
    pub(crate) namespace_scoped: bool,
    /// The run's namespace is being deleted and created again (`namespace_gone.rs`): I1 and
    /// I2 are not judged meanwhile, nor the time to converge after a fault.
    pub(crate) away: AtomicBool,
    /// Held by the namespace's deletion and by the driver's deletions, each from start to end.
    pub(crate) namespace_lock: tokio::sync::Mutex<()>,
    /// The run's directory: the replicas' logs are `controller-<i>.log` there.
    pub(crate) dir: std::path::PathBuf,
    /// Held by the driver while it pins a workflow and changes an image, and by the
    /// `temporalNamespace` change while it judges and moves: a workflow is never pinned in the
    /// namespace being left to the version that is moving away.
    pub(crate) spec_lock: tokio::sync::Mutex<()>,
}

impl Run<'_> {
    pub(crate) fn report(&self) -> std::sync::MutexGuard<'_, Report> {
        self.report.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn wds(&self) -> Api<WorkerDeployment> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub(crate) fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Where every WorkerDeployment starts: the first server, [`Run::temporal_ns`].
    pub(crate) fn home(&self) -> Place {
        Place {
            server: 0,
            namespace: self.temporal_ns.clone(),
        }
    }

    /// Where `name`'s spec points now.
    pub(crate) fn place_of(&self, name: &str) -> Place {
        self.report()
            .places
            .get(name)
            .and_then(|p| p.last().cloned())
            .unwrap_or_else(|| self.home())
    }

    /// Where `name` moved away from, where its older versions drain.
    pub(crate) fn left_places_of(&self, name: &str) -> Vec<Place> {
        let now = self.place_of(name);
        let mut left: Vec<Place> = self
            .report()
            .places
            .get(name)
            .map(|p| p.iter().filter(|p| **p != now).cloned().collect())
            .unwrap_or_default();
        left.sort();
        left.dedup();
        left
    }

    /// Records that `name`'s spec now points at `place`.
    pub(crate) fn move_to(&self, name: &str, place: Place) {
        let home = self.home();
        self.report()
            .places
            .entry(name.to_string())
            .or_insert_with(|| vec![home])
            .push(place);
    }

    /// Undoes the last [`Run::move_to`] of `name` (its patch failed).
    pub(crate) fn move_back(&self, name: &str) {
        if let Some(p) = self.report().places.get_mut(name) {
            p.pop();
        }
    }

    /// The connection to server `server` of the run.
    pub(crate) fn temporal_of(&self, server: usize) -> &TemporalConnection {
        if server == 0 {
            &self.temporal
        } else {
            &self.temporal_b
        }
    }

    /// What Temporal says of `name` where its spec points, read by the checker's own code;
    /// None when it cannot be read now (not known: never a pass, never "absent").
    pub(crate) async fn describe(&self, name: &str) -> Option<View> {
        self.describe_at(name, &self.place_of(name)).await
    }

    /// [`Run::describe`] at `place`.
    /// Whether `name`'s version `build`, Draining in the worker deployment's summary at
    /// `place`, is still draining by its own drainage status: false only when the version
    /// says it is drained (an unreadable answer is "still draining", never a pass).
    pub(crate) async fn still_draining(&self, name: &str, build: &str, place: &Place) -> bool {
        let deployment = build_id::temporal_deployment_name(&self.ns, name);
        let read = temporal_view::drained(
            self.temporal_of(place.server),
            &place.namespace,
            &deployment,
            build,
        );
        !matches!(tokio::time::timeout(CALL_TIMEOUT, read).await, Ok(Ok(true)))
    }

    pub(crate) async fn describe_at(&self, name: &str, place: &Place) -> Option<View> {
        let deployment = build_id::temporal_deployment_name(&self.ns, name);
        let read = temporal_view::read(
            self.temporal_of(place.server),
            &place.namespace,
            &deployment,
        );
        tokio::time::timeout(CALL_TIMEOUT, read).await.ok()?.ok()
    }
}
