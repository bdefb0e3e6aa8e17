//! The expected status of a scenario's WorkerDeployment.

use twc_api::{VersionStatus, WorkerDeployment};

/// An expected status (TWC's `StatusBuilder`): the target's build ID, status and ramp, the
/// current build ID, and the exact set of deprecated versions with their statuses. Drained
/// deprecated versions must have `drainedSince`; every deprecated version must name its
/// Deployment.
#[derive(Clone, Debug)]
pub struct Expect {
    pub target: (String, VersionStatus, Option<f32>),
    /// Other statuses the target may have instead (Temporal decides between them).
    pub target_or: Vec<VersionStatus>,
    pub current: Option<String>,
    pub deprecated: Vec<(String, VersionStatus)>,
}

impl Expect {
    pub fn target(build: &str, status: VersionStatus) -> Self {
        Self {
            target: (build.to_string(), status, None),
            target_or: Vec::new(),
            current: None,
            deprecated: Vec::new(),
        }
    }

    /// The target may have `status` instead.
    pub fn or_status(mut self, status: VersionStatus) -> Self {
        self.target_or.push(status);
        self
    }

    pub fn ramp(mut self, pct: f32) -> Self {
        self.target.2 = Some(pct);
        self
    }

    pub fn current(mut self, build: &str) -> Self {
        self.current = Some(build.to_string());
        self
    }

    pub fn deprecated(mut self, build: &str, status: VersionStatus) -> Self {
        self.deprecated.push((build.to_string(), status));
        self
    }

    /// What differs, if anything.
    pub fn mismatch(&self, wd: &WorkerDeployment) -> Option<String> {
        let s = wd.status.clone().unwrap_or_default();
        let Some(t) = s.target_version else {
            return Some("no targetVersion".into());
        };
        let (build, status, ramp) = &self.target;
        if t.base.build_id != *build
            || (t.base.status != *status && !self.target_or.contains(&t.base.status))
        {
            return Some(format!(
                "target {} {:?}, expected {build} {status:?} (or {:?})",
                t.base.build_id, t.base.status, self.target_or
            ));
        }
        if *status != VersionStatus::NotRegistered && !has_deployment(&t.base) {
            return Some("target has no Deployment".into());
        }
        let got_ramp = t.ramp_percentage;
        let ramp_ok = match (ramp, got_ramp) {
            (Some(want), Some(got)) => (want - got).abs() < 0.01,
            (None, _) => *status != VersionStatus::Ramping || got_ramp.is_some(),
            (Some(_), None) => false,
        };
        if !ramp_ok {
            return Some(format!("target ramp {got_ramp:?}, expected {ramp:?}"));
        }
        let current = s.current_version.as_ref().map(|c| c.base.build_id.clone());
        if current != self.current {
            return Some(format!("current {current:?}, expected {:?}", self.current));
        }
        if let Some(c) = &s.current_version
            && (c.base.status != VersionStatus::Current || !has_deployment(&c.base))
        {
            return Some(format!(
                "current {} is {:?}",
                c.base.build_id, c.base.status
            ));
        }
        let mut got: Vec<(String, VersionStatus)> = s
            .deprecated_versions
            .iter()
            .map(|d| (d.base.build_id.clone(), d.base.status))
            .collect();
        let mut want = self.deprecated.clone();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        want.sort_by(|a, b| a.0.cmp(&b.0));
        if got != want {
            return Some(format!("deprecated {got:?}, expected {want:?}"));
        }
        for d in &s.deprecated_versions {
            if !has_deployment(&d.base) {
                return Some(format!("deprecated {} has no Deployment", d.base.build_id));
            }
            let drained = d.base.status == VersionStatus::Drained;
            if drained != d.drained_since.is_some() {
                return Some(format!(
                    "deprecated {} is {:?} with drainedSince {:?}",
                    d.base.build_id, d.base.status, d.drained_since
                ));
            }
        }
        None
    }
}

/// Whether the status names the version's Deployment (its groups', with worker groups).
fn has_deployment(v: &twc_api::BaseWorkerDeploymentVersion) -> bool {
    v.deployment.is_some() || !v.worker_groups.is_empty()
}

/// The `eligibleForDeletion` flags of the deprecated versions, by build ID.
pub fn eligible_for_deletion(wd: &WorkerDeployment) -> Vec<(String, bool)> {
    let mut v: Vec<(String, bool)> = wd
        .status
        .iter()
        .flat_map(|s| s.deprecated_versions.iter())
        .map(|d| (d.base.build_id.clone(), d.eligible_for_deletion))
        .collect();
    v.sort();
    v
}
