//! kstatus on live objects: what Helm 4's `--wait`, Flux and the cli-utils status poller
//! conclude of each kind we own, by their own library (`hack/kstatus`), on objects as the
//! apiserver holds them: Current when done or when nothing waits, InProgress while work goes on
//! or a dependency may still come, Failed at once when waiting cannot help.

use std::time::Duration;

use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use twc_api::{ClusterConnection, Connection, WorkerDeployment, WorkerResourceTemplate};

use crate::common::*;
use crate::{QUICK, ROLLOUT};

/// [`example_worker_deployment`] on `connection_ref`, `edit` applied to its JSON.
async fn create_wd(
    w: &World,
    ns: &str,
    name: &str,
    connection_ref: Value,
    edit: impl Fn(&mut Value),
) {
    let temporal_ns = w
        .env
        .temporal_namespace()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut wd = example_worker_deployment(ns, name, connection_ref, "v1", &temporal_ns);
    edit(&mut wd);
    Api::<WorkerDeployment>::namespaced(w.client().await, ns)
        .create(&PostParams::default(), &from_json(wd))
        .await
        .unwrap_or_else(|e| panic!("create WorkerDeployment {ns}/{name}: {e}"));
}

/// Waits until kstatus says `want` of the object `get` reads, with a message containing
/// `saying`; returns the message.
async fn wait_kstatus<K, F, Fut>(
    what: &str,
    (want, saying): (&str, &str),
    timeout: Duration,
    get: F,
) -> String
where
    K: serde::Serialize,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<K, kube::Error>>,
{
    let result = twc_testenv::wait_for(&format!("kstatus {want} for {what}"), timeout, || {
        let read = get();
        async move {
            let object = read.await.map_err(|e| e.to_string())?;
            let verdict = kstatus_of(&object);
            if verdict.status == want && verdict.message.contains(saying) {
                Ok(verdict.message)
            } else {
                Err(format!("{verdict:?}"))
            }
        }
    })
    .await;
    result.unwrap_or_else(|e| panic!("{e}"))
}

async fn wrt(client: &kube::Client, ns: &str, name: &str, wd: &str, template: Value) {
    let wrt: WorkerResourceTemplate = from_json(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"workerDeploymentRef": {"name": wd}, "template": template},
    }));
    Api::<WorkerResourceTemplate>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &wrt)
        .await
        .unwrap_or_else(|e| panic!("create WorkerResourceTemplate {ns}/{name}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitops_tools_read_each_kind_as_done_in_progress_or_failed() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.tenant("kstatus").await;
    let wds: Api<WorkerDeployment> = Api::namespaced(client.clone(), &ns);
    let wrts: Api<WorkerResourceTemplate> = Api::namespaced(client.clone(), &ns);

    // Nothing has looked at a new object yet: in progress (generation 1 observed as 0), never
    // "current" before the controller's first status.
    let fresh = unique("kstatus-fresh");
    let created = w.cluster_connection(&fresh).await;
    assert_eq!(
        kstatus_of(&created).status,
        "InProgress",
        "{:?}",
        kstatus_of(&created)
    );
    // A ClusterConnection nobody uses yet: nothing waits for it (a platform team's
    // `helm install --wait` of it alone must end).
    let unused = unique("kstatus-unused");
    w.cluster_connection(&unused).await;
    let ccs: Api<ClusterConnection> = Api::all(client.clone());
    wait_kstatus(
        "an unused ClusterConnection",
        ("Current", ""),
        QUICK,
        || ccs.get(&unused),
    )
    .await;

    // A Connection that is not there yet: the release may still be applying it.
    create_wd(w, &ns, "early", by_name("later"), |_| {}).await;
    let message = wait_kstatus(
        "a WorkerDeployment before its Connection",
        ("InProgress", "later"),
        QUICK,
        || wds.get_status("early"),
    )
    .await;
    assert!(message.contains("later"), "{message}");

    // A template Go cannot decode passes the CRD; the controller refuses it: Failed at once.
    create_wd(w, &ns, "bad", by_name("later"), |wd| {
        wd["spec"]["template"]["spec"]["containers"][0]["resources"] =
            json!({"limits": {"cpu": "lots"}});
    })
    .await;
    let message = wait_kstatus("an invalid template", ("Failed", ""), QUICK, || {
        wds.get_status("bad")
    })
    .await;
    assert!(message.contains("spec.template"), "{message}");

    // A ClusterConnection whose policy refuses this namespace: Failed, naming the rule.
    let strict = unique("kstatus-strict");
    let mut spec = w.mtls_connection_spec();
    spec["allowedNamespaces"] =
        json!({"from": "Selector", "selector": {"matchLabels": {"kstatus": "never"}}});
    ccs.create(
        &PostParams::default(),
        &from_json(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
            "metadata": {"name": strict}, "spec": spec,
        })),
    )
    .await?;
    create_wd(w, &ns, "refused", cluster_ref(&strict), |_| {}).await;
    let message = wait_kstatus("a refused ClusterConnection", ("Failed", ""), QUICK, || {
        wds.get_status("refused")
    })
    .await;
    assert!(message.contains("allowedNamespaces"), "{message}");

    // Templates: one whose WorkerDeployment is not there yet waits; one the apiserver refuses
    // (maxReplicas below minReplicas) fails; a good one is Current once applied.
    wrt(
        &client,
        &ns,
        "orphan",
        "not-yet",
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "spec": {"scaleTargetRef": {}, "minReplicas": 1, "maxReplicas": 2}}),
    )
    .await;
    wait_kstatus(
        "a template before its WorkerDeployment",
        ("InProgress", "not found"),
        QUICK,
        || wrts.get_status("orphan"),
    )
    .await;

    // The Connection arrives: the early WorkerDeployment rolls out and reads Current, as does
    // the Connection it uses.
    w.connection(&ns, "later").await;
    wait_wd(&client, &ns, "early", "rolled out", ROLLOUT, rolled_out).await;
    wait_kstatus(
        "a rolled-out WorkerDeployment",
        ("Current", ""),
        QUICK,
        || wds.get_status("early"),
    )
    .await;
    let connections: Api<Connection> = Api::namespaced(client.clone(), &ns);
    wait_kstatus("a Connection in use", ("Current", ""), QUICK, || {
        connections.get_status("later")
    })
    .await;

    wrt(
        &client,
        &ns,
        "refused",
        "early",
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "spec": {"scaleTargetRef": {}, "minReplicas": 3, "maxReplicas": 2}}),
    )
    .await;
    let message = wait_kstatus(
        "a template the apiserver refuses",
        ("Failed", ""),
        QUICK,
        || wrts.get_status("refused"),
    )
    .await;
    assert!(message.contains("maxReplicas"), "{message}");
    wrt(
        &client,
        &ns,
        "good",
        "early",
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "spec": {"scaleTargetRef": {}, "minReplicas": 1, "maxReplicas": 2}}),
    )
    .await;
    wait_kstatus("an applied template", ("Current", ""), QUICK, || {
        wrts.get_status("good")
    })
    .await;

    // A new image: InProgress until the new build is current, then Current again.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{
        "name": "worker", "image": format!("{WORKER_IMAGE}:v2"),
        "env": [{"name": "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "value": "/etc/temporal/tls/ca.crt"}]
    }]}}}});
    let patched = wds
        .patch(
            "early",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    // Read right after the write: the new generation is not observed yet, or the rollout runs.
    assert_eq!(
        kstatus_of(&patched).status,
        "InProgress",
        "{:?}",
        kstatus_of(&patched)
    );
    let done = wait_wd(&client, &ns, "early", "v2 rolled out", ROLLOUT, |wd| {
        rolled_out(wd)
            && wd.status.as_ref().and_then(|s| s.observed_generation) == wd.metadata.generation
    })
    .await;
    assert_eq!(
        kstatus_of(&done).status,
        "Current",
        "{:?}",
        kstatus_of(&done)
    );

    for name in ["early", "bad", "refused"] {
        delete_wd(&client, &ns, name).await;
    }
    for name in ["early", "bad", "refused"] {
        wait_wd_gone(&client, &ns, name, ROLLOUT).await;
    }
    Ok(())
}
