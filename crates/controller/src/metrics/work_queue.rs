//! The work queue's depth and waits: kube-runtime's queue exposes neither, so the triggers and
//! the reconcile's start report them here (ours and client-go's `workqueue_*` names).

use std::collections::HashMap;
use std::time::Duration;

use super::{ControllerLabels, global};

/// The objects of one controller that were triggered and wait for their reconcile: a set, as
/// kube-runtime's queue merges triggers of the same object, so its size is the queue depth.
#[derive(Clone)]
pub struct WorkQueue {
    controller: &'static str,
    /// Each waiting `namespace/name`, with when it was first triggered.
    pending: std::sync::Arc<std::sync::Mutex<HashMap<String, std::time::Instant>>>,
}

impl WorkQueue {
    pub fn new(controller: &'static str) -> Self {
        Self {
            controller,
            pending: Default::default(),
        }
    }

    fn update<T>(
        &self,
        change: impl FnOnce(&mut HashMap<String, std::time::Instant>) -> T,
    ) -> Option<T> {
        let mut pending = self.pending.lock().ok()?;
        let out = change(&mut pending);
        let m = global();
        m.queue_depth
            .get_or_create(&ControllerLabels {
                controller: self.controller,
            })
            .set(i64::try_from(pending.len()).unwrap_or(i64::MAX));
        m.runtime.queue_depth(self.controller, pending.len());
        Some(out)
    }

    /// `namespace/name` was triggered (a trigger while it waits keeps the first one's time).
    pub fn queued(&self, key: String) {
        let added = self.update(|p| {
            let new = !p.contains_key(&key);
            p.entry(key).or_insert_with(std::time::Instant::now);
            new
        });
        // As client-go's queue: an add of an item already waiting is not counted.
        if added == Some(true) {
            global().runtime.queue_added(self.controller);
        }
    }

    /// The reconcile of `namespace/name` starts: how long it waited since it was triggered
    /// (None for a requeue after a delay, which nothing triggered).
    pub fn started(&self, key: &str) -> Option<Duration> {
        let waited = self
            .update(|p| p.remove(key).map(|at| at.elapsed()))
            .flatten();
        if let Some(w) = waited {
            global().runtime.queue_waited(self.controller, w);
        }
        waited
    }
}
