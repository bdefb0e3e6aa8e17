//! The scenario's WorkerDeployment: its status checked against an [`Expect`] and Temporal,
//! its conditions and its events.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use twc_api::conditions::PROGRESSING;
use twc_api::{VersionStatus, WorkerDeployment};
use twc_controller::temporal::DeploymentState;
use twc_testenv::wait_for;

use super::{Expect, SETTLE, Scenario, WAIT};
use crate::common;

impl Scenario {
    pub async fn get(&self) -> WorkerDeployment {
        self.wds()
            .get(&self.name)
            .await
            .unwrap_or_else(|e| panic!("get {}/{}: {e}", self.ns, self.name))
    }

    /// Waits until the status matches `expect` and Temporal agrees with it.
    pub async fn wait_status(&self, expect: &Expect) -> WorkerDeployment {
        let wd = common::wait_wd(
            &self.client,
            &self.ns,
            &self.name,
            &format!("status {expect:?}"),
            WAIT,
            |wd| expect.mismatch(wd).is_none(),
        )
        .await;
        self.check_temporal(expect).await;
        wd
    }

    /// Asserts the status matches `expect` now, and Temporal agrees.
    pub async fn assert_status(&self, expect: &Expect) -> WorkerDeployment {
        let wd = self.get().await;
        if let Some(m) = expect.mismatch(&wd) {
            panic!(
                "{}/{}: {m}\nstatus: {}",
                self.ns,
                self.name,
                serde_json::to_string(&wd.status).unwrap_or_default()
            );
        }
        self.check_temporal(expect).await;
        wd
    }

    /// For "expect no change" scenarios: waits for `expect`, lets the controller run for
    /// [`SETTLE`], and checks that nothing moved.
    pub async fn settle(&self, expect: &Expect) -> WorkerDeployment {
        self.wait_status(expect).await;
        tokio::time::sleep(SETTLE).await;
        self.assert_status(expect).await
    }

    /// Temporal's routing agrees with the expected status (TWC's
    /// `verifyTemporalStateMatchesStatusEventually`).
    async fn check_temporal(&self, expect: &Expect) {
        let pred = |s: &DeploymentState| -> Result<(), String> {
            if s.current_build_id != expect.current {
                return Err(format!(
                    "Temporal current {:?}, expected {:?}",
                    s.current_build_id, expect.current
                ));
            }
            let (target, status, ramp) = &expect.target;
            let want_ramping = std::iter::once((target, status))
                .chain(expect.deprecated.iter().map(|(b, s)| (b, s)))
                .find(|(_, s)| **s == VersionStatus::Ramping)
                .map(|(b, _)| b.clone());
            if s.ramping_build_id != want_ramping {
                return Err(format!(
                    "Temporal ramping {:?}, expected {want_ramping:?}",
                    s.ramping_build_id
                ));
            }
            if let Some(r) = ramp
                && (s.ramp_percentage - r).abs() > 0.01
            {
                return Err(format!(
                    "Temporal ramp {}%, expected {r}%",
                    s.ramp_percentage
                ));
            }
            let versions = std::iter::once((target, status))
                .chain(expect.deprecated.iter().map(|(b, s)| (b, s)));
            for (build, want) in versions {
                let got = s
                    .versions
                    .get(build)
                    .map(|v| v.status)
                    .unwrap_or(VersionStatus::NotRegistered);
                if got != *want {
                    return Err(format!(
                        "Temporal says {build} is {got:?}, expected {want:?}"
                    ));
                }
            }
            Ok(())
        };
        let pred = &pred;
        wait_for(
            &format!(
                "{}: Temporal agrees with the status",
                self.deployment_name.clone()
            ),
            Duration::from_secs(30),
            || async move {
                let s = self.paced_describe().await?;
                pred(&s).map_err(|e| format!("{e}; state {s:?}"))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Waits until the Progressing condition's message says all of `words`; returns its
    /// reason and message. (Waiting, not reading once: a transient Temporal error, such as
    /// `ResourceExhausted` for a deployment workflow busy with a concurrent query, replaces
    /// the message until the next good reconcile.)
    pub async fn wait_progressing_says(&self, words: &[&str]) -> (String, String) {
        let wd = common::wait_wd(
            &self.client,
            &self.ns,
            &self.name,
            &format!("Progressing says {words:?}"),
            WAIT,
            |wd| {
                common::condition(wd, PROGRESSING)
                    .is_some_and(|(_, _, m)| words.iter().all(|w| m.contains(w)))
            },
        )
        .await;
        common::condition(&wd, PROGRESSING)
            .map(|(_, r, m)| (r, m))
            .unwrap_or_default()
    }

    /// Waits until condition `type_` has `status` and `reason`.
    pub async fn wait_condition(&self, type_: &str, status: &str, reason: &str) -> String {
        let wd = common::wait_wd(
            &self.client,
            &self.ns,
            &self.name,
            &format!("{type_}={status} {reason}"),
            WAIT,
            |wd| common::condition(wd, type_).is_some_and(|(s, r, _)| s == status && r == reason),
        )
        .await;
        common::condition(&wd, type_)
            .map(|(_, _, m)| m)
            .unwrap_or_default()
    }

    /// Waits for a Warning event with `reason` about the WorkerDeployment.
    pub async fn wait_warning(&self, reason: &str) -> String {
        self.wait_warning_about("WorkerDeployment", &self.name, reason)
            .await
    }

    /// The reasons of the WorkerDeployment's events, in the order they happened.
    pub async fn event_reasons(&self) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let mut events: Vec<Event> = api
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(self.name.as_str())
            })
            .collect();
        events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        events.into_iter().filter_map(|e| e.reason).collect()
    }

    /// Waits for a Warning event with `reason` about the `kind` object `name` of the namespace.
    pub async fn wait_warning_about(&self, kind: &str, name: &str, reason: &str) -> String {
        self.wait_event_about("Warning", kind, name, reason).await
    }

    /// Waits for an event of `type_` (Normal, Warning) with `reason` about the `kind` object
    /// `name` of the namespace; returns its note.
    pub async fn wait_event_about(
        &self,
        type_: &str,
        kind: &str,
        name: &str,
        reason: &str,
    ) -> String {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        wait_for(
            &format!("{}/{name}: {type_} event {reason}", self.ns),
            WAIT,
            || {
                let api = api.clone();
                async move {
                    let events = api
                        .list(&ListParams::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    events
                        .items
                        .iter()
                        .find(|e| {
                            let regarding = e.regarding.as_ref();
                            e.type_.as_deref() == Some(type_)
                                && e.reason.as_deref() == Some(reason)
                                && regarding.and_then(|r| r.kind.as_deref()) == Some(kind)
                                && regarding.and_then(|r| r.name.as_deref()) == Some(name)
                        })
                        .map(|e| e.note.clone().unwrap_or_default())
                        .ok_or_else(|| {
                            let seen: Vec<_> = events
                                .items
                                .iter()
                                .map(|e| format!("{:?} {:?}", e.type_, e.reason))
                                .collect();
                            format!("events: {seen:?}")
                        })
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }
}
