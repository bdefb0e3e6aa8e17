//! Kubernetes Events (`events.k8s.io/v1`) of every reconciler.
//!
//! The same event about the same object within [`SERIES_WINDOW`] is not created again: the
//! first one's `series` (count, last time seen) is patched, as client-go's recorder does, so a
//! reconcile that repeats a Warning every few seconds leaves one Event with a count.
//!
//! To know what it published, this recorder keeps, per event, a 64-bit hash of what makes
//! the event the same (type, reason, action, note, the object) with the Event's name and
//! count: about a hundred bytes. kube-runtime's recorder, which it replaces, keeps a whole
//! copy of each Event (several KiB) until its next publish; with a thousand WorkerDeployments
//! after a rollout, that was megabytes held at rest.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;

/// An event to publish about an object: its type, reason and note.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
}

/// Repeats of an event within this time of its last sighting join its series (client-go
/// and kube-runtime use six minutes too).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How often the memory of published events is swept of those past [`SERIES_WINDOW`].
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// One event to publish.
#[derive(Clone, Debug)]
pub struct Event {
    pub type_: EventType,
    /// CamelCase, machine-readable (`DeploymentCreated`).
    pub reason: String,
    /// What the controller did (`Reconcile`).
    pub action: String,
    /// For people.
    pub note: Option<String>,
}

/// Publishes Events as one controller (`reportingController`), folding repeats into series.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    seen: Arc<Mutex<Seen>>,
}

/// What was published lately, by the hash of what makes an event the same.
struct Seen {
    events: HashMap<u64, Published>,
    swept: Instant,
}

/// The Event that a repeat patches.
struct Published {
    name: String,
    count: i32,
    last: Instant,
}

impl Recorder {
    /// A recorder for `controller`; its `reportingInstance` is `instance`, or the controller's
    /// name again.
    pub fn new(client: Client, controller: impl Into<String>, instance: Option<String>) -> Self {
        let controller = controller.into();
        Self {
            client,
            instance: instance.unwrap_or_else(|| controller.clone()),
            controller,
            seen: Arc::new(Mutex::new(Seen::new(Instant::now()))),
        }
    }

    /// Publishes `ev` about `regarding`, in the object's namespace (`default` for a
    /// cluster-scoped object): a new Event, or the next count of the same one's series.
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let key = key(ev, regarding);
        let now = Instant::now();
        if let Some((name, count)) = self.repeat(key, now) {
            let patch = serde_json::json!({
                "series": EventSeries {
                    count,
                    last_observed_time: MicroTime(Timestamp::now()),
                }
            });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // The apiserver let the Event expire: start a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => self.forget(key),
                Err(e) => return Err(e),
            }
        }
        let event = self.generate(ev, regarding, namespace);
        let name = event.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &event).await?;
        if let Ok(mut seen) = self.seen.lock() {
            seen.published(key, name, now);
        }
        Ok(())
    }

    /// The client it publishes with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn repeat(&self, key: u64, now: Instant) -> Option<(String, i32)> {
        self.seen.lock().ok()?.repeat(key, now)
    }

    fn forget(&self, key: u64) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.events.remove(&key);
        }
    }

    fn generate(&self, ev: &Event, regarding: &ObjectReference, namespace: String) -> K8sEvent {
        let now = Timestamp::now();
        K8sEvent {
            metadata: ObjectMeta {
                // client-go's form: the object's name and the time in hex nanoseconds.
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                namespace: Some(namespace),
                ..Default::default()
            },
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            ..Default::default()
        }
    }
}

impl Seen {
    fn new(now: Instant) -> Self {
        Self {
            events: HashMap::new(),
            swept: now,
        }
    }

    /// The name and next count of the Event that `key` repeats, if it was last seen within
    /// the series window (count and time are taken at once, so concurrent repeats count up).
    /// Every [`SWEEP_EVERY`], events past the window are forgotten.
    fn repeat(&mut self, key: u64, now: Instant) -> Option<(String, i32)> {
        if now.duration_since(self.swept) >= SWEEP_EVERY {
            self.events
                .retain(|_, p| now.duration_since(p.last) < SERIES_WINDOW);
            self.swept = now;
        }
        let published = self.events.get_mut(&key)?;
        if now.duration_since(published.last) >= SERIES_WINDOW {
            return None;
        }
        published.count = published.count.saturating_add(1);
        published.last = now;
        Some((published.name.clone(), published.count))
    }

    /// A new Event `name` was created for `key`.
    fn published(&mut self, key: u64, name: String, now: Instant) {
        self.events.insert(
            key,
            Published {
                name,
                count: 1,
                last: now,
            },
        );
    }
}

/// What makes two events the same: their type, reason, action and note, about the same
/// object (by kind, namespace, name and uid).
fn key(ev: &Event, regarding: &ObjectReference) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    matches!(ev.type_, EventType::Warning).hash(&mut h);
    ev.reason.hash(&mut h);
    ev.action.hash(&mut h);
    ev.note.hash(&mut h);
    regarding.api_version.hash(&mut h);
    regarding.kind.hash(&mut h);
    regarding.namespace.hash(&mut h);
    regarding.name.hash(&mut h);
    regarding.uid.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: "DeploymentCreated".into(),
            action: "Reconcile".into(),
            note: Some(note.into()),
        }
    }

    fn object(name: &str, uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("temporal.io/v1alpha1".into()),
            kind: Some("WorkerDeployment".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_same_event_about_the_same_object_is_the_same_key() {
        let a = key(&event("created v1"), &object("wd", "u1"));
        assert_eq!(a, key(&event("created v1"), &object("wd", "u1")));
        assert_ne!(a, key(&event("created v2"), &object("wd", "u1")));
        assert_ne!(a, key(&event("created v1"), &object("other", "u1")));
        // A WorkerDeployment deleted and made again under its name is another object.
        assert_ne!(a, key(&event("created v1"), &object("wd", "u2")));
        let mut warning = event("created v1");
        warning.type_ = EventType::Warning;
        assert_ne!(a, key(&warning, &object("wd", "u1")));
    }

    #[test]
    fn repeats_count_up_within_the_window_and_start_over_after_it() {
        let t0 = Instant::now();
        let mut seen = Seen::new(t0);
        assert_eq!(seen.repeat(1, t0), None, "never published");
        seen.published(1, "wd.17".into(), t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(seen.repeat(1, at(10)), Some(("wd.17".into(), 2)));
        // The window runs from the last sighting, as a series goes on while it repeats.
        assert_eq!(seen.repeat(1, at(300)), Some(("wd.17".into(), 3)));
        assert_eq!(seen.repeat(1, at(600)), Some(("wd.17".into(), 4)));
        assert_eq!(seen.repeat(2, at(600)), None, "another event");
        assert_eq!(
            seen.repeat(1, at(600 + 360)),
            None,
            "six minutes without it"
        );
        assert!(seen.events.is_empty(), "the sweep forgot it");
    }

    #[test]
    fn the_sweep_forgets_only_what_left_the_window() {
        let t0 = Instant::now();
        let mut seen = Seen::new(t0);
        seen.published(1, "a".into(), t0);
        seen.published(2, "b".into(), t0 + Duration::from_secs(200));
        assert_eq!(seen.repeat(3, t0 + Duration::from_secs(400)), None);
        assert_eq!(seen.events.len(), 1);
        assert!(seen.events.contains_key(&2));
    }
}
