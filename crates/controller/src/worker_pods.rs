//! The pods of versioned Deployments as the watch cache keeps them: who they are and what
//! keeps their containers from being ready (the kubelet's reasons), parsed straight from the
//! watch's JSON. A WorkerDeployment whose target is not ready reads its pods' troubles here,
//! with no request to the apiserver. Shared by the reconcilers; no client calls.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::PodStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use twc_api::labels;

use crate::observed::PodTrouble;
use crate::scoped::Scoped;

/// A worker pod, reduced to what the guards read.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(from = "wire::Pod")]
pub struct CachedPod {
    /// Name, namespace, the WorkerDeployment's, build ID's and worker group's labels, deletion.
    pub metadata: ObjectMeta,
    /// Its containers that are not ready, and why (empty for a ready pod).
    pub troubles: Vec<PodTrouble>,
    /// The kubelet reports it Ready.
    pub ready: bool,
}

impl Resource for CachedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

mod wire {
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::Deserialize;

    /// Only the metadata and the status are read (serde skips the spec).
    #[derive(Deserialize)]
    pub struct Pod {
        #[serde(default)]
        pub metadata: ObjectMeta,
        pub status: Option<PodStatus>,
    }
}

impl From<wire::Pod> for CachedPod {
    fn from(p: wire::Pod) -> Self {
        let m = p.metadata;
        let deleting = m.deletion_timestamp.is_some();
        let name = m.name.clone().unwrap_or_default();
        let labels = m.labels.map(|mut l| {
            l.retain(|k, _| {
                k == labels::DEPLOYMENT_NAME || k == labels::BUILD_ID || k == labels::WORKER_GROUP
            });
            l
        });
        let metadata = ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            deletion_timestamp: m.deletion_timestamp,
            // When it was created: whether its containers can have read a Secret's content.
            creation_timestamp: m.creation_timestamp,
            labels,
            ..Default::default()
        };
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        Self {
            metadata,
            troubles: troubles(name, deleting, p.status.as_ref()),
            ready,
        }
    }
}

/// The pods of `wd_name`'s version `build` in `namespace` (by the labels the versioned
/// Deployment selects its pods with), by name.
fn pods_of(
    pods: &Scoped<CachedPod>,
    namespace: &str,
    wd_name: &str,
    build: &str,
) -> Vec<std::sync::Arc<CachedPod>> {
    let selector = crate::plan::deployment::selector_labels(wd_name, build);
    let mut found: Vec<_> = pods
        .in_namespace(namespace)
        .into_iter()
        .filter(|p| {
            let l = p.metadata.labels.as_ref();
            selector
                .iter()
                .all(|(k, v)| l.and_then(|l| l.get(k)) == Some(v))
        })
        .collect();
    found.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    found
}

/// The troubles of the pods of `wd_name`'s version `build` in `namespace`.
pub fn troubles_of(
    pods: &Scoped<CachedPod>,
    namespace: &str,
    wd_name: &str,
    build: &str,
) -> Vec<PodTrouble> {
    let found = pods_of(pods, namespace, wd_name, build);
    found.iter().flat_map(|p| p.troubles.clone()).collect()
}

/// The names of the ready, live pods of `wd_name`'s version `build` in `namespace` created by
/// `up_by`, by worker group (`default` for a pod without the label).
pub fn ready_pods_by_group(
    pods: &Scoped<CachedPod>,
    namespace: &str,
    wd_name: &str,
    build: &str,
    up_by: std::time::SystemTime,
) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::<String, Vec<String>>::new();
    for p in pods_of(pods, namespace, wd_name, build) {
        let m = &p.metadata;
        let created = m
            .creation_timestamp
            .as_ref()
            .map(|t| std::time::SystemTime::from(t.0));
        let group = m.labels.as_ref().and_then(|l| l.get(labels::WORKER_GROUP));
        let entry = out
            .entry(
                group
                    .cloned()
                    .unwrap_or_else(|| twc_api::DEFAULT_GROUP.to_string()),
            )
            .or_default();
        if m.deletion_timestamp.is_none()
            && p.ready
            && created.is_some_and(|c| c <= up_by)
            && let Some(name) = &m.name
        {
            entry.push(name.clone());
        }
    }
    out
}

/// When the oldest live pod of `wd_name`'s version `build` in `namespace` was created; None
/// when it has none.
pub fn oldest_pod_of(
    pods: &Scoped<CachedPod>,
    namespace: &str,
    wd_name: &str,
    build: &str,
) -> Option<std::time::SystemTime> {
    pods_of(pods, namespace, wd_name, build)
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let created = p.metadata.creation_timestamp.as_ref();
            created.map_or(std::time::SystemTime::UNIX_EPOCH, |t| t.0.into())
        })
        .min()
}

/// The kubelet's reason for a container it restarts after a back-off.
const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";

/// The target's containers that are not ready, and why, as the kubelet reports them.
fn troubles(name: String, deleting: bool, status: Option<&PodStatus>) -> Vec<PodTrouble> {
    let Some(status) = status else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in containers.filter(|c| !c.ready) {
        let state = c.state.as_ref();
        let (reason, message) = if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
            (w.reason.clone(), w.message.clone())
        } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            if c.restart_count > 0 && !deleting {
                // Between two restarts the kubelet (1.35, seen on the real node) may report a
                // container that keeps exiting as `terminated` rather than `waiting:
                // CrashLoopBackOff`, while it holds the restart back: the same crash loop.
                (
                    Some(CRASH_LOOP_BACK_OFF.to_string()),
                    Some(format!(
                        "exited with code {} ({}), restarted after a back-off",
                        t.exit_code,
                        t.reason.as_deref().unwrap_or("no reason")
                    )),
                )
            } else {
                (t.reason.clone(), Some(format!("exit code {}", t.exit_code)))
            }
        } else {
            (None, None)
        };
        let Some(reason) = reason else { continue };
        out.push(PodTrouble {
            pod: name.clone(),
            container: c.name.clone(),
            reason,
            message: message.unwrap_or_default(),
            restarts: c.restart_count,
        });
    }
    if out.is_empty()
        && let Some(c) = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        out.push(PodTrouble {
            pod: name,
            container: String::new(),
            reason: c.reason.clone().unwrap_or_else(|| "Unschedulable".into()),
            message: c.message.clone().unwrap_or_default(),
            restarts: 0,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_troubles(p: &CachedPod) -> Vec<PodTrouble> {
        p.troubles.clone()
    }

    fn pod(deleting: bool, restarts: i32, state: serde_json::Value) -> CachedPod {
        let mut meta = serde_json::json!({"name": "p"});
        if deleting {
            meta["deletionTimestamp"] = "2026-12-03T10:48:19Z".into();
        }
        serde_json::from_value(serde_json::json!({
            "metadata": meta,
            "status": {"containerStatuses": [{
                "name": "worker", "image": "w", "imageID": "", "ready": false,
                "restartCount": restarts, "state": state,
            }]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_container_that_keeps_exiting_is_a_crash_loop_in_either_of_the_kubelets_shapes() {
        let waiting = serde_json::json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}});
        // As the kubelet 1.35 on the real node reports it between restarts.
        let terminated = serde_json::json!({"terminated": {
            "exitCode": 1, "reason": "Error", "finishedAt": "2026-12-03T10:48:19Z"}});
        for state in [waiting, terminated.clone()] {
            let t = pod_troubles(&pod(false, 3, state));
            assert_eq!(t.len(), 1);
            assert_eq!(t[0].reason, "CrashLoopBackOff");
            assert_eq!(t[0].restarts, 3);
        }
        let t = pod_troubles(&pod(false, 3, terminated.clone()));
        assert!(
            t[0].message.contains("exited with code 1 (Error)"),
            "{}",
            t[0].message
        );
        // Never restarted, or stopping with its pod: an exit, not a loop.
        assert_eq!(
            pod_troubles(&pod(false, 0, terminated.clone()))[0].reason,
            "Error"
        );
        assert_eq!(pod_troubles(&pod(true, 3, terminated))[0].reason, "Error");
    }
}
