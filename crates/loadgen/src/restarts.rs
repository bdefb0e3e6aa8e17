//! Restarts onto renewed credentials, seen from outside: one watch of the versioned
//! Deployments (the harness's only read while a storm is measured, and not counted as the
//! controller's), each event applied at once, so a peak that lasts one event is counted.
//!
//! A Deployment has restarted when its pod template carries the digest its metadata records
//! (`temporal.io/credentials-digest`, the controller writes both with the restart) and that
//! digest is not the one recorded before the renewal. It is rolled out by the controller's own
//! definition (`plan::credentials::rolled_out`): the Deployment controller has seen its
//! generation, every replica is updated and available, and no older one is left. Restarting
//! means restarted and not rolled out yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;
use twc_api::labels::{BUILD_ID, CREDENTIALS_DIGEST};

/// One versioned Deployment as last seen.
#[derive(Clone, Debug, Default)]
struct Seen {
    /// The digest its metadata records.
    digest: Option<String>,
    /// The digest on its pod template.
    template_digest: Option<String>,
    rolled_out: bool,
    /// `spec.replicas` above 0.
    running: bool,
}

impl Seen {
    fn of(d: &Deployment) -> Self {
        let spec = d.spec.as_ref();
        let (digest, template_digest) =
            twc_testenv::deployments::annotation_and_template(d, CREDENTIALS_DIGEST);
        Self {
            digest,
            template_digest,
            rolled_out: twc_testenv::deployments::rolled_out(d),
            running: spec.and_then(|s| s.replicas).unwrap_or(1) > 0,
        }
    }

    /// Restarted onto a digest other than `before`.
    fn restarted(&self, before: Option<&String>) -> bool {
        self.template_digest.is_some()
            && self.template_digest == self.digest
            && self.digest.as_ref() != before
    }
}

/// One renewal being measured.
struct Round {
    started: Instant,
    /// The Deployments that must restart, with the digest each recorded before.
    before: HashMap<String, Option<String>>,
    /// When each was first seen restarted, and then rolled out.
    restarted: HashMap<String, Instant>,
    done: HashMap<String, Instant>,
    /// (since `started`, how many restart) at every change of that count.
    series: Vec<(Duration, usize)>,
}

impl Round {
    /// Notes the state of `key` and of the count now.
    fn note(&mut self, key: &str, deployments: &HashMap<String, Seen>) {
        let now = Instant::now();
        if let (Some(before), Some(s)) = (self.before.get(key), deployments.get(key))
            && s.restarted(before.as_ref())
        {
            self.restarted.entry(key.to_string()).or_insert(now);
            if s.rolled_out {
                self.done.entry(key.to_string()).or_insert(now);
            }
        }
        let restarting = self
            .before
            .iter()
            .filter(|(k, before)| {
                deployments
                    .get(*k)
                    .is_some_and(|s| s.restarted(before.as_ref()) && !s.rolled_out)
            })
            .count();
        if self.series.last().is_none_or(|(_, n)| *n != restarting) {
            self.series
                .push((now.duration_since(self.started), restarting));
        }
    }
}

#[derive(Default)]
struct Inner {
    /// The watch has listed every Deployment once.
    synced: bool,
    deployments: HashMap<String, Seen>,
    round: Option<Round>,
}

/// The figures of one renewal, every time from the renewal's first write.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Deployments that had to restart.
    pub of: usize,
    /// Those that restarted, and that rolled out after.
    pub restarted: usize,
    pub done: usize,
    /// The most restarting at once, and when first reached.
    pub peak: usize,
    pub peak_at: Duration,
    /// Restarting at once, averaged over the time until the last one rolled out.
    pub mean: f64,
    pub first_restart: Option<Duration>,
    pub last_restart: Option<Duration>,
    /// Until every one restarted and rolled out (None: not all did).
    pub all_done: Option<Duration>,
    /// Each restart, from restarted to rolled out, fastest first.
    pub each: Vec<Duration>,
}

/// What a round reached so far: (restarted, rolled out after, restarting now, of).
pub type Progress = (usize, usize, usize, usize);

/// Applies one watch event (and notes it in the round); false when the state is poisoned.
fn apply(inner: &Mutex<Inner>, event: Event<Deployment>) -> bool {
    let Ok(mut inner) = inner.lock() else {
        return false;
    };
    let inner = &mut *inner;
    let key = |d: &Deployment| format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any());
    let key = match event {
        Event::Apply(d) | Event::InitApply(d) => {
            let key = key(&d);
            inner.deployments.insert(key.clone(), Seen::of(&d));
            key
        }
        Event::Delete(d) => {
            let key = key(&d);
            inner.deployments.remove(&key);
            key
        }
        Event::InitDone => {
            inner.synced = true;
            return true;
        }
        Event::Init => return true,
    };
    if let Some(round) = inner.round.as_mut() {
        round.note(&key, &inner.deployments);
    }
    true
}

/// The watch and the round it measures.
#[derive(Clone, Default)]
pub struct Restarts(Arc<Mutex<Inner>>);

impl Restarts {
    pub fn spawn(client: Client) -> (Self, JoinHandle<()>) {
        let this = Self::default();
        let inner = this.0.clone();
        let task = tokio::spawn(async move {
            let api: Api<Deployment> = Api::all(client);
            let config = watcher::Config::default().labels(BUILD_ID);
            let mut stream = watcher::watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => {
                        if !apply(&inner, event) {
                            return;
                        }
                    }
                    Err(e) => {
                        eprintln!("restarts: Deployment watch: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        (this, task)
    }

    /// Running versioned Deployments: (all, rolled out with a digest recorded), once the watch
    /// listed them (None before).
    pub fn at_rest(&self) -> Option<(usize, usize)> {
        let inner = self.0.lock().ok()?;
        if !inner.synced {
            return None;
        }
        let running = inner.deployments.values().filter(|s| s.running);
        let (mut all, mut ready) = (0, 0);
        for s in running {
            all += 1;
            if s.rolled_out && s.digest.is_some() {
                ready += 1;
            }
        }
        Some((all, ready))
    }

    /// Starts a round: every running versioned Deployment must restart; returns how many.
    pub fn begin(&self) -> usize {
        let Ok(mut inner) = self.0.lock() else {
            return 0;
        };
        let before: HashMap<String, Option<String>> = inner
            .deployments
            .iter()
            .filter(|(_, s)| s.running)
            .map(|(k, s)| (k.clone(), s.digest.clone()))
            .collect();
        let n = before.len();
        inner.round = Some(Round {
            started: Instant::now(),
            before,
            restarted: HashMap::new(),
            done: HashMap::new(),
            series: vec![(Duration::ZERO, 0)],
        });
        n
    }

    pub fn progress(&self) -> Progress {
        let Ok(inner) = self.0.lock() else {
            return (0, 0, 0, 0);
        };
        match &inner.round {
            Some(r) => (
                r.restarted.len(),
                r.done.len(),
                r.series.last().map_or(0, |(_, n)| *n),
                r.before.len(),
            ),
            None => (0, 0, 0, 0),
        }
    }

    /// Ends the round: its figures.
    pub fn end(&self) -> Outcome {
        let Some(r) = self.0.lock().ok().and_then(|mut i| i.round.take()) else {
            return Outcome::default();
        };
        let since = |t: &Instant| t.duration_since(r.started);
        let all_done = (r.done.len() == r.before.len())
            .then(|| r.done.values().max().map(since))
            .flatten();
        let (peak, peak_at) =
            r.series.iter().fold(
                (0, Duration::ZERO),
                |(p, at), (t, n)| {
                    if *n > p { (*n, *t) } else { (p, at) }
                },
            );
        // Time-weighted: each count holds until the next change, the last until the end.
        let end = all_done
            .or_else(|| r.series.last().map(|(t, _)| *t))
            .unwrap_or_default();
        let mut area = 0.0;
        for (i, (t, n)) in r.series.iter().enumerate() {
            let next = r.series.get(i + 1).map_or(end, |(t, _)| *t).min(end);
            area += next.saturating_sub(*t).as_secs_f64() * *n as f64;
        }
        let mut each: Vec<Duration> = r
            .done
            .iter()
            .filter_map(|(k, done)| Some(done.duration_since(*r.restarted.get(k)?)))
            .collect();
        each.sort();
        Outcome {
            of: r.before.len(),
            restarted: r.restarted.len(),
            done: r.done.len(),
            peak,
            peak_at,
            mean: area / end.as_secs_f64().max(0.001),
            first_restart: r.restarted.values().min().map(since),
            last_restart: r.restarted.values().max().map(since),
            all_done,
            each,
        }
    }
}
