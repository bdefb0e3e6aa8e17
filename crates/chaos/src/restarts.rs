//! I5: the restarts the controller starts by itself (workers restarted onto a renewed
//! credential Secret) keep the pace, and every worker reaches the new credentials before the
//! old ones expire. Judged from a watch of the versioned Deployments of its own, never from the
//! controller's status or metrics.
//!
//! A Deployment restarts for credentials when the digest it records and the one on its pod
//! template agree on a digest other than the one it last rolled out with, at the same place
//! (Temporal address and namespace, from the workers' env: a move is a spec change, not a
//! restart of the controller's own). It restarts until it is rolled out again; one restarting
//! longer than the controller's hold ([`RESTART_HOLD`], from the restart's own time stamp)
//! stops counting, as it does for the controller.
//!
//! - The pace: never more than `--restart-pace` Deployments restarting at once at one place.
//!   (The run's certificates live 90 days, so no restart is ever urgent enough to go ahead.)
//! - The deadline: each renewal of the Secret records the running Deployments and their
//!   digests; by the old certificate's expiry, and in this run by [`RENEWAL_DEADLINE`] after
//!   the renewal (the run's stand-in for an expiry: its certificates outlive it), every one
//!   still running must have restarted (a new digest recorded and on its pod template) and
//!   rolled out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt as _;
use kube::api::ListParams;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use twc_api::labels::{BUILD_ID, CREDENTIALS_DIGEST, CREDENTIALS_RESTARTED_AT};
use twc_controller::plan::credentials::RESTART_HOLD;
use twc_testenv::deployments::{annotation_and_template, rolled_out, worker_env, worker_env_value};

use crate::Run;

/// How long after a renewal every running worker must be on the new credentials.
pub(crate) const RENEWAL_DEADLINE: Duration = Duration::from_secs(600);

/// One renewal of the client certificate Secret.
struct Renewal {
    at: Instant,
    deadline: Instant,
    /// The running versioned Deployments then, with the digest each recorded.
    before: BTreeMap<String, String>,
    judged: bool,
    /// How long until every one of `before` still running was on the new credentials.
    took: Option<Duration>,
}

/// The renewals of the run (written by `tls::renew`, judged by [`watch_restarts`]).
#[derive(Default)]
pub(crate) struct Renewals(Mutex<Vec<Renewal>>);

impl Renewals {
    /// The Secret is about to be renewed; the certificate in it now expires at `expires`.
    pub(crate) async fn renewing(&self, run: &Run<'_>, expires: SystemTime) -> anyhow::Result<()> {
        let list = run
            .deployments()
            .list(&ListParams::default().labels(BUILD_ID))
            .await?;
        // Only workers that read the client certificate must restart: one on an API key reads
        // only the Secret's `ca.crt`, which a renewal leaves as it was.
        let before = list
            .items
            .iter()
            .filter(|d| running(d) && reads_client_certificate(d))
            .filter_map(|d| {
                let (digest, _) = annotation_and_template(d, CREDENTIALS_DIGEST);
                Some((d.name_any(), digest?))
            })
            .collect();
        let now = Instant::now();
        let to_expiry = expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Renewal {
                at: now,
                deadline: now + to_expiry.min(RENEWAL_DEADLINE),
                before,
                judged: false,
                took: None,
            });
        Ok(())
    }

    /// How many renewals, how many had every worker on the new credentials in time, and the
    /// longest that took.
    pub(crate) fn counts(&self) -> (usize, usize, Duration) {
        let r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let took: Vec<Duration> = r.iter().filter_map(|r| r.took).collect();
        (
            r.len(),
            took.len(),
            took.into_iter().max().unwrap_or_default(),
        )
    }

    fn all_judged(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .all(|r| r.judged)
    }
}

/// Whether the workers of `d` read the client certificate (mutual TLS; one on an API key reads
/// only the Secret's `ca.crt`, which a renewal leaves as it was).
pub(crate) fn reads_client_certificate(d: &Deployment) -> bool {
    worker_env(d)
        .iter()
        .any(|e| e.name == "TEMPORAL_TLS_CLIENT_CERT_PATH")
}

fn running(d: &Deployment) -> bool {
    d.metadata.deletion_timestamp.is_none()
        && d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1) > 0
}

/// A Temporal address and namespace, from the workers' env.
fn place(d: &Deployment) -> Option<(String, String)> {
    Some((
        worker_env_value(d, "TEMPORAL_ADDRESS")?,
        worker_env_value(d, "TEMPORAL_NAMESPACE")?,
    ))
}

/// One versioned Deployment as the watch last showed it.
#[derive(Default)]
struct Track {
    /// The digest and place it last rolled out with.
    settled: Option<(String, Option<(String, String)>)>,
    /// Restarting for credentials now, since when (its restart's own time stamp, or when
    /// first seen so).
    restarting: Option<SystemTime>,
    place: Option<(String, String)>,
}

impl Track {
    fn apply(&mut self, d: &Deployment) {
        let (digest, template) = annotation_and_template(d, CREDENTIALS_DIGEST);
        self.place = place(d);
        let done = rolled_out(d);
        let restart = running(d)
            && !done
            && digest.is_some()
            && template == digest
            && self
                .settled
                .as_ref()
                .is_some_and(|(s, p)| Some(s) != digest.as_ref() && *p == self.place);
        self.restarting = restart.then(|| {
            d.annotations()
                .get(CREDENTIALS_RESTARTED_AT)
                .and_then(|t| t.trim().parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(SystemTime::from)
                .or(self.restarting)
                .unwrap_or_else(SystemTime::now)
        });
        if done
            && running(d)
            && let Some(digest) = digest
        {
            self.settled = Some((digest, self.place.clone()));
        }
    }

    fn counts(&self, now: SystemTime) -> bool {
        self.restarting
            .is_some_and(|since| now.duration_since(since).unwrap_or_default() < RESTART_HOLD)
    }
}

/// Watches the run's versioned Deployments until the driver is done: the pace at every
/// change, each renewal at its deadline.
pub(crate) async fn watch_restarts(run: &Run<'_>) {
    let stream = watcher::watcher(
        run.deployments(),
        watcher::Config::default().labels(BUILD_ID),
    )
    .default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut tracks: HashMap<String, Track> = HashMap::new();
    let mut now_seen: HashMap<String, Deployment> = HashMap::new();
    // Each set of Deployments over the pace is reported once.
    let mut reported = BTreeSet::new();
    while !run.done.load(Ordering::SeqCst) {
        judge_renewals(run, &now_seen);
        let event = match tokio::time::timeout(Duration::from_millis(200), stream.next()).await {
            Ok(Some(Ok(event))) => event,
            Ok(Some(Err(_))) | Err(_) => continue,
            Ok(None) => return,
        };
        match event {
            Event::Apply(d) | Event::InitApply(d) => {
                let name = d.name_any();
                tracks.entry(name.clone()).or_default().apply(&d);
                now_seen.insert(name, d);
            }
            Event::Delete(d) => {
                tracks.remove(&d.name_any());
                now_seen.remove(&d.name_any());
                continue;
            }
            Event::Init | Event::InitDone => continue,
        }
        let now = SystemTime::now();
        let mut by_place: BTreeMap<&(String, String), Vec<&str>> = BTreeMap::new();
        for (name, t) in &tracks {
            if t.counts(now)
                && let Some(p) = &t.place
            {
                by_place.entry(p).or_default().push(name);
            }
        }
        for (p, mut names) in by_place {
            if names.len() > run.restart_pace {
                names.sort();
                let key = names.join(",");
                if reported.insert(key.clone()) {
                    run.report().violate(
                        "I5",
                        format!(
                            "{} Deployments restart at once for credentials at {} namespace {} (pace {}): {key}",
                            names.len(),
                            p.0,
                            p.1,
                            run.restart_pace
                        ),
                    );
                }
            }
        }
    }
}

/// After the run: the renewals not judged yet, each until its workers are on the new
/// credentials or its deadline (a self-test run looks once: its variant is caught or not).
pub(crate) async fn judge_remaining(run: &Run<'_>) {
    loop {
        let list = run
            .deployments()
            .list(&ListParams::default().labels(BUILD_ID))
            .await;
        match list {
            Ok(list) => {
                let now_seen = list.items.into_iter().map(|d| (d.name_any(), d)).collect();
                judge_renewals(run, &now_seen);
            }
            Err(e) => println!("   note: the renewals left could not be judged now: {e}"),
        }
        if run.self_test || run.renewals.all_judged() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every renewal not judged yet: passed once each Deployment running at the renewal and
/// running now has rolled out on another digest; a violation if that is not so by its
/// deadline.
fn judge_renewals(run: &Run<'_>, now_seen: &HashMap<String, Deployment>) {
    let now = Instant::now();
    let mut renewals = run.renewals.0.lock().unwrap_or_else(|e| e.into_inner());
    for r in renewals.iter_mut().filter(|r| !r.judged) {
        let late: Vec<&str> = r
            .before
            .iter()
            .filter(|(name, before)| {
                now_seen.get(*name).is_some_and(|d| {
                    // Restarted: the new digest on its pod template too (a digest recorded
                    // without a restart is what the stale-credentials variant does).
                    let (digest, template) = annotation_and_template(d, CREDENTIALS_DIGEST);
                    let restarted = digest.as_ref() != Some(*before) && template == digest;
                    running(d) && !(restarted && rolled_out(d))
                })
            })
            .map(|(name, _)| name.as_str())
            .collect();
        if late.is_empty() {
            r.judged = true;
            r.took = Some(now.duration_since(r.at));
        } else if now >= r.deadline {
            r.judged = true;
            run.report().violate(
                "I5",
                format!(
                    "{} s after the Secret's renewal, still on the credentials from before it (or not rolled out on the new ones): {}",
                    now.duration_since(r.at).as_secs(),
                    late.join(", ")
                ),
            );
        }
    }
}
