//! What the controller remembers of each WorkerDeployment between its reconciles, in one
//! keyed store: the failure streak, the last state read from Temporal, what its target's pods
//! showed, and when it was last warned of an expiring certificate. An entry goes when its
//! WorkerDeployment's deletion is watched (or its cleanup runs), so nothing outlives it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::error::Streak;
use crate::plan::pods::PodsSeen;
use crate::temporal::reads::Remembered;

/// The memory of one WorkerDeployment.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// Consecutive failed reconciles.
    pub streak: Streak,
    /// The last state read, and what it was read under.
    pub read: Option<Remembered>,
    /// What the last look at the target's pods found.
    pub pods: Option<PodsSeen>,
    /// When it was last warned of its client certificate's expiry.
    pub cert_warned: Option<SystemTime>,
    /// The current version's task queues asked with `DescribeTaskQueue` (where the worker
    /// list cannot tell whether they have pollers).
    pub pollers_asked: Option<crate::plan::pollers::Asked>,
}

impl Memory {
    fn is_empty(&self) -> bool {
        self.streak == Streak::default()
            && self.read.is_none()
            && self.pods.is_none()
            && self.cert_warned.is_none()
            && self.pollers_asked.is_none()
    }
}

/// Every WorkerDeployment's memory by `namespace/name`. Boxed: a map's table holds a slot per
/// entry and as many again spare, and a remembered state is most of a KiB.
#[derive(Default)]
pub struct Memories(Mutex<HashMap<String, Box<Memory>>>);

impl Memories {
    /// A copy of what is remembered of `key` (the default when nothing is).
    pub fn get(&self, key: &str) -> Memory {
        self.0
            .lock()
            .ok()
            .and_then(|m| m.get(key).map(|m| Memory::clone(m)))
            .unwrap_or_default()
    }

    /// Changes what is remembered of `key`; an entry left empty is dropped.
    pub fn update<R>(&self, key: &str, change: impl FnOnce(&mut Memory) -> R) -> Option<R> {
        let mut all = self.0.lock().ok()?;
        let memory = all.entry(key.to_string()).or_default();
        let out = change(memory);
        if memory.is_empty() {
            all.remove(key);
        }
        crate::metrics::global().remembered(all.len());
        Some(out)
    }

    /// Forgets `key` (its WorkerDeployment is gone or being deleted).
    pub fn forget(&self, key: &str) {
        if let Ok(mut all) = self.0.lock() {
            all.remove(key);
            crate::metrics::global().remembered(all.len());
        }
    }

    /// How many WorkerDeployments something is remembered of.
    pub fn len(&self) -> usize {
        self.0.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_goes_when_forgotten_or_left_empty() {
        let m = Memories::default();
        for i in 0..1000 {
            m.update(&format!("ns/wd-{i}"), |m| {
                m.cert_warned = Some(SystemTime::UNIX_EPOCH)
            });
        }
        assert_eq!(m.len(), 1000);
        for i in 0..1000 {
            m.forget(&format!("ns/wd-{i}"));
        }
        assert!(m.is_empty());
        m.update("ns/a", |m| m.cert_warned = Some(SystemTime::UNIX_EPOCH));
        m.update("ns/a", |m| m.cert_warned = None);
        assert!(m.is_empty(), "an emptied entry is dropped");
        assert!(m.get("ns/none").read.is_none());
    }
}
