//! When the controller asked Temporal for each promotion, and the read that came before it in
//! the same pass, from its own debug events (`read Temporal's state`, `promoting`): with the
//! times Temporal recorded and the Deployment's availability, they split "registered ->
//! Current" into Kubernetes', the controller's and the server's parts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer};

/// One promotion as the controller made it.
#[derive(Clone, Copy, Debug)]
pub struct Promotion {
    /// When the pass that promoted began.
    pub pass_began: SystemTime,
    /// How long that pass's read of the worker deployment took (none: it reused a state).
    pub read_took: Option<Duration>,
    /// When it sent `SetWorkerDeploymentCurrentVersion`.
    pub asked: SystemTime,
}

#[derive(Clone, Copy)]
struct Read {
    pass_began: SystemTime,
    took: Duration,
    /// When it answered.
    at: SystemTime,
}

/// A promotion asked this soon after a read that found its target registered is in that
/// read's pass (a first version's manager claim comes between them).
const SAME_PASS: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Book {
    /// (Kubernetes namespace, build) -> the last read of a pass for that target.
    reads: BTreeMap<(String, String), Read>,
    /// (Kubernetes namespace, build) -> the first promotion asked for it.
    promotions: BTreeMap<(String, String), Promotion>,
}

/// A tracing layer that keeps the controller's promotions; clones share the book.
#[derive(Clone, Default)]
pub struct Asked(Arc<Mutex<Book>>);

/// The one the benchmark installs.
pub fn global() -> &'static Asked {
    static ASKED: std::sync::OnceLock<Asked> = std::sync::OnceLock::new();
    ASKED.get_or_init(Asked::default)
}

impl Asked {
    pub fn promotion(&self, namespace: &str, build: &str) -> Option<Promotion> {
        let book = self.0.lock().unwrap_or_else(|e| e.into_inner());
        book.promotions
            .get(&(namespace.to_string(), build.to_string()))
            .copied()
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    namespace: String,
    build: String,
    deployment: String,
    status: String,
    since_pass_ms: u64,
    took_ms: u64,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "namespace" => self.namespace = value.to_string(),
            "target_build" | "build" => self.build = value.to_string(),
            "deployment" => self.deployment = value.to_string(),
            "status" => self.status = value.to_string(),
            "message" => self.message = value.to_string(),
            _ => {}
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "since_pass_ms" => self.since_pass_ms = value,
            "took_ms" => self.took_ms = value,
            _ => {}
        }
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        self.record_u64(field, u64::try_from(value).unwrap_or(u64::MAX));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            let shown = format!("{value:?}");
            self.record_str(field, shown.trim_matches('"'));
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Asked {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !event
            .metadata()
            .target()
            .starts_with("twc_controller::workerdeployment")
        {
            return;
        }
        let now = SystemTime::now();
        let mut f = Fields::default();
        event.record(&mut f);
        let mut book = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match f.message.as_str() {
            // The read that found the target registered (one before it found nothing to
            // promote).
            "read Temporal's state" if f.status != "NotRegistered" => {
                let read = Read {
                    pass_began: now - Duration::from_millis(f.since_pass_ms),
                    took: Duration::from_millis(f.took_ms),
                    at: now,
                };
                book.reads.insert((f.namespace, f.build), read);
            }
            "promoting" => {
                // The Temporal worker deployment is named "<namespace>/<name>".
                let ns = f
                    .deployment
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let key = (ns, f.build);
                let read = book
                    .reads
                    .get(&key)
                    .copied()
                    .filter(|r| now.duration_since(r.at).is_ok_and(|d| d < SAME_PASS));
                let promotion = Promotion {
                    pass_began: read.map_or(now, |r| r.pass_began),
                    read_took: read.map(|r| r.took),
                    asked: now,
                };
                book.promotions.entry(key).or_insert(promotion);
            }
            _ => {}
        }
    }
}
