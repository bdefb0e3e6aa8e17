//! Waiting for WorkerDeployments, connections and events to reach a state.

use std::time::Duration;

use super::logs_about;
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};
use twc_api::{ClusterConnection, Connection, WorkerDeployment};
use twc_testenv::wait_for;

/// Waits until the WorkerDeployment satisfies `pred`, showing its status on timeout.
pub async fn wait_wd(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&WorkerDeployment) -> bool,
) -> WorkerDeployment {
    let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("{ns}/{name}: {what}"), timeout, || {
        let api = api.clone();
        let pred = &pred;
        async move {
            let wd = api.get(name).await.map_err(|e| e.to_string())?;
            if pred(&wd) {
                Ok(wd)
            } else {
                Err(format!(
                    "status: {}",
                    serde_json::to_string(&wd.status).unwrap_or_default()
                ))
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

pub fn condition(wd: &WorkerDeployment, type_: &str) -> Option<(String, String, String)> {
    wd.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The rollout finished: the target is current and Ready is True.
pub fn rolled_out(wd: &WorkerDeployment) -> bool {
    let s = wd.status.clone().unwrap_or_default();
    let target = s.target_version.map(|t| t.base.build_id);
    let current = s.current_version.map(|c| c.base.build_id);
    target.is_some()
        && target == current
        && condition(wd, "Ready").is_some_and(|(st, _, _)| st == "True")
}

pub fn has_finalizer<K: ResourceExt>(o: &K) -> bool {
    o.finalizers().iter().any(|f| f == twc_api::FINALIZER)
}

/// Waits until a connection is `want`: "protected" (has our finalizer), "unprotected" or "gone".
async fn wait_protection<K>(api: Api<K>, what: String, name: &str, want: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{what}: {want}"), timeout, || {
        let api = api.clone();
        async move {
            let c = api.get_opt(name).await.map_err(|e| e.to_string())?;
            let state = match &c {
                None => "gone",
                Some(c) if has_finalizer(c) => "protected",
                Some(_) => "unprotected",
            };
            if state == want {
                Ok(())
            } else {
                Err(format!("{state}: {:?}", c.map(|c| c.meta().clone())))
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontroller log about {name}:\n{}", logs_about(name)))
}

pub async fn wait_cluster_connection(client: &Client, name: &str, want: &str, timeout: Duration) {
    let api: Api<ClusterConnection> = Api::all(client.clone());
    wait_protection(
        api,
        format!("ClusterConnection {name}"),
        name,
        want,
        timeout,
    )
    .await
}

pub async fn wait_connection(client: &Client, ns: &str, name: &str, want: &str, timeout: Duration) {
    let api: Api<Connection> = Api::namespaced(client.clone(), ns);
    wait_protection(api, format!("Connection {ns}/{name}"), name, want, timeout).await
}

pub async fn delete_wd(client: &Client, ns: &str, name: &str) {
    Api::<WorkerDeployment>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete {ns}/{name}: {e}"));
}

/// Waits until the WorkerDeployment is gone; on timeout shows its events and pods.
pub async fn wait_wd_gone(client: &Client, ns: &str, name: &str, timeout: Duration) {
    let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), ns);
    let result = wait_for(&format!("{ns}/{name} to be deleted"), timeout, || {
        let api = api.clone();
        async move {
            match api.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(wd) => Err(format!("still there: {:?}", wd.metadata.finalizers)),
            }
        }
    })
    .await;
    if let Err(e) = result {
        let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .map(|e| format!("{:?} {:?}: {:?}", e.type_, e.reason, e.note))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .map(|l| l.items.iter().map(|p| p.name_any()).collect::<Vec<_>>())
            .unwrap_or_default();
        panic!(
            "{e}\nevents:\n{events}\npods: {pods:?}\ncontroller log about {ns}:\n{}",
            logs_about(ns)
        );
    }
}

/// Waits for an event with `reason` in `ns` whose note contains `needle`; returns it.
pub async fn wait_event(
    client: &Client,
    ns: &str,
    reason: &str,
    needle: &str,
    timeout: Duration,
) -> k8s_openapi::api::events::v1::Event {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    twc_testenv::wait_for(&format!("{ns}: a {reason} event"), timeout, || {
        let api = api.clone();
        async move {
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.note.as_deref().unwrap_or_default().contains(needle)
                })
                .ok_or_else(|| format!("no {reason} event yet"))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A connection's `Ready` condition as (status, reason, message).
pub fn connection_ready(
    status: Option<&twc_api::ConnectionStatus>,
) -> Option<(String, String, String)> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until namespace `ns` is gone (deleted and finalized); fails naming its conditions.
pub async fn wait_namespace_gone(
    client: &Client,
    ns: &str,
    timeout: Duration,
) -> super::TestResult {
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    wait_for(&format!("namespace {ns} gone"), timeout, || async {
        match namespaces.get_opt(ns).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(n) => Err(format!("{:?}", n.status.and_then(|s| s.conditions))),
        }
    })
    .await?;
    Ok(())
}

/// `ns/name` as the apiserver has it now.
pub async fn get_wd(client: &Client, ns: &str, name: &str) -> WorkerDeployment {
    Api::<WorkerDeployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get {ns}/{name}: {e}"))
}

/// What kstatus (cli-utils' library, as Helm 4's `--wait` and Flux use it) says of `object`.
pub fn kstatus_of<K: serde::Serialize>(object: &K) -> twc_testenv::kstatus::Verdict {
    let value = serde_json::to_value(object).unwrap_or_else(|e| panic!("{e}"));
    twc_testenv::kstatus::of(&value).unwrap_or_else(|e| panic!("kstatus: {e}"))
}
