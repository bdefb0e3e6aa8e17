//! The pod status the runner reports: exits and restarts per `restartPolicy`, Running/Ready
//! from the processes, and the waiting reason of a pod that cannot start yet.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{PodRunner, Waiting, now};
use crate::process::ChildProcess;

impl PodRunner {
    /// Looks at every running container: reports exits and restarts per `restartPolicy`.
    pub(super) async fn check_processes(&self) {
        let keys: Vec<String> = match self.inner.pods.lock() {
            Ok(mut pods) => {
                let mut changed = Vec::new();
                for (key, pod) in pods.iter_mut() {
                    let policy = pod.restart_policy.clone();
                    for c in pod.containers.iter_mut() {
                        if c.exited.is_none() {
                            if let Some(status) = c.process.as_mut().and_then(|p| p.try_wait()) {
                                let code = status.code().unwrap_or(137);
                                c.exited = Some((code, now()));
                                let restart =
                                    policy == "Always" || (policy == "OnFailure" && code != 0);
                                if restart {
                                    c.restart_after = Some(std::time::Instant::now() + c.backoff());
                                }
                                changed.push(key.clone());
                            }
                        } else if c
                            .restart_after
                            .is_some_and(|t| std::time::Instant::now() >= t)
                        {
                            c.restart_after = None;
                            if let Ok(p) = ChildProcess::start(&c.spec) {
                                c.process = Some(p);
                                c.exited = None;
                                c.restart_count += 1;
                                c.started_at = now();
                            }
                            changed.push(key.clone());
                        }
                    }
                }
                changed
            }
            Err(_) => return,
        };
        for key in keys {
            self.write_status(&key).await;
        }
    }

    /// Computes the pod's status from its processes and writes it if it changed.
    pub(super) async fn write_status(&self, key: &str) {
        let (ns, name, uid, status) = {
            let Ok(mut pods) = self.inner.pods.lock() else {
                return;
            };
            let Some(pod) = pods.get_mut(key) else {
                return;
            };
            let all_ready = pod.containers.iter().all(|c| c.exited.is_none());
            if all_ready && pod.ready_since.is_none() {
                pod.ready_since = Some(now());
            } else if !all_ready {
                pod.ready_since = None;
            }
            let ready_time = pod.ready_since.clone().unwrap_or_else(now);
            let done = pod
                .containers
                .iter()
                .all(|c| c.exited.is_some() && c.restart_after.is_none());
            let phase = if !done {
                "Running"
            } else if pod
                .containers
                .iter()
                .all(|c| c.exited.as_ref().is_some_and(|(code, _)| *code == 0))
            {
                "Succeeded"
            } else {
                "Failed"
            };
            let ready = if all_ready { "True" } else { "False" };
            let container_statuses: Vec<serde_json::Value> = pod
                .containers
                .iter()
                .map(|c| {
                    let terminated = |code: &i32, finished: &Time| {
                        json!({"terminated": {
                            "exitCode": code,
                            "reason": if *code == 0 { "Completed" } else { "Error" },
                            "startedAt": c.started_at,
                            "finishedAt": finished,
                        }})
                    };
                    let (state, last) = match &c.exited {
                        None => (json!({"running": {"startedAt": c.started_at}}), None),
                        // Waiting to be restarted: the kubelet's CrashLoopBackOff.
                        Some((code, finished)) if c.restart_after.is_some() => (
                            json!({"waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": format!(
                                    "back-off restarting failed container {} in pod {}",
                                    c.name, pod.name
                                ),
                            }}),
                            Some(terminated(code, finished)),
                        ),
                        Some((code, finished)) => (terminated(code, finished), None),
                    };
                    json!({
                        "name": c.name,
                        "image": c.image,
                        "imageID": format!("local://{}", c.spec.program.display()),
                        "containerID": format!("local://{}", c.process.as_ref().map(|p| p.pid()).unwrap_or_default()),
                        "ready": c.exited.is_none(),
                        "started": c.exited.is_none(),
                        "restartCount": c.restart_count,
                        "state": state,
                        "lastState": last.unwrap_or_else(|| json!({})),
                    })
                })
                .collect();
            let status = json!({
                "phase": phase,
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": pod.started_at,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": pod.started_at},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": pod.started_at},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": ready_time},
                    {"type": "Ready", "status": ready, "lastTransitionTime": ready_time},
                ],
                "containerStatuses": container_statuses,
            });
            if pod.last_status.as_ref() == Some(&status) {
                return;
            }
            pod.last_status = Some(status.clone());
            (
                pod.namespace.clone(),
                pod.name.clone(),
                pod.uid.clone(),
                status,
            )
        };
        let pods: Api<Pod> = Api::namespaced(self.inner.client.clone(), &ns);
        let patch = json!({"metadata": {"uid": uid}, "status": status});
        if let Err(e) = pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!("pod status {ns}/{name}: {e}");
        }
    }

    pub(super) async fn report_waiting(&self, pod: &Pod, waiting: &Waiting) {
        let ns = pod.namespace().unwrap_or_default();
        let statuses: Vec<serde_json::Value> = pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "image": c.image.clone().unwrap_or_default(),
                    "imageID": "",
                    "ready": false,
                    "started": false,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": waiting.reason, "message": waiting.message}},
                })
            })
            .collect();
        let unchanged = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .is_some_and(|w| w.message.as_deref() == Some(waiting.message.as_str()));
        if unchanged {
            return;
        }
        let patch = json!({"status": {
            "phase": "Pending",
            "hostIP": "127.0.0.1",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            ],
            "containerStatuses": statuses,
        }});
        let pods: Api<Pod> = Api::namespaced(self.inner.client.clone(), &ns);
        let _ = pods
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
    }
}
