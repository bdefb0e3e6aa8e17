//! The WorkerDeployments, their connections and the client certificate Secret; the images
//! tagged on a real node.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use twc_api::{ClusterConnection, Connection, WorkerDeployment};
use twc_testenv::node::Node;

use crate::rollouts::wait_converged;
use crate::{
    BLIPS, CLUSTER_CONNECTION, CLUSTER_CONNECTION_B, CONNECTION, IMAGE, MTLS_SECRET, Run,
    SERVER_NAME, WORKER_IMAGE,
};

pub(crate) fn connection_ref(i: usize) -> Value {
    if i.is_multiple_of(2) {
        json!({"objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": CLUSTER_CONNECTION}})
    } else {
        json!({"objectRef": {"apiGroup": "temporal.io", "kind": "Connection", "name": CONNECTION}})
    }
}

/// The ClusterConnection, the Connection and the WorkerDeployments at image `r0`; waits
/// until they converge.
pub(crate) async fn setup(run: &Run<'_>) -> anyhow::Result<()> {
    Api::<Secret>::namespaced(run.client.clone(), &run.ns)
        .create(&PostParams::default(), &run.tls.client_secret()?)
        .await?;
    crate::auth_switch::create_secret(run).await?;
    let spec = json!({
        "hostPort": run.tls_address,
        // The proxy's CA is in the same Secret; naming it passes it to the workers too.
        "tls": {"serverName": SERVER_NAME, "caCertSecretRef": {"name": MTLS_SECRET}},
        "mutualTLSSecretRef": {"name": MTLS_SECRET}
    });
    // One per server, each through its own proxy; the same Secret (the same CA).
    // A namespace-scoped install cannot use them.
    let ccs = [
        (CLUSTER_CONNECTION, &run.tls_address),
        (CLUSTER_CONNECTION_B, &run.tls_address_b),
    ];
    for (cc_name, address) in ccs.into_iter().filter(|_| !run.namespace_scoped) {
        let mut cc_spec = spec.clone();
        cc_spec["hostPort"] = json!(address);
        let cc: ClusterConnection = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
            "metadata": {"name": cc_name},
            "spec": cc_spec
        }))?;
        Api::<ClusterConnection>::all(run.client.clone())
            .create(&PostParams::default(), &cc)
            .await?;
    }
    let c: Connection = serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "Connection",
        "metadata": {"name": CONNECTION, "namespace": run.ns},
        "spec": spec
    }))?;
    Api::<Connection>::namespaced(run.client.clone(), &run.ns)
        .create(&PostParams::default(), &c)
        .await?;
    for i in 0..run.names.len() {
        run.wds()
            .create(
                &PostParams::default(),
                &worker_deployment(run, i, &format!("{IMAGE}:r0"))?,
            )
            .await?;
    }
    for name in &run.names {
        wait_converged(run, name, run.converge).await?;
    }
    Ok(())
}

/// WorkerDeployment `i` of the run at `image`, where it was moved to if it was (server and
/// namespace): the even ones AllAtOnce on the ClusterConnection, the odd ones Progressive on the
/// Connection (in a namespace-scoped install, every one on the Connection); the second in two
/// worker groups ([`crate::groups`]).
pub(crate) fn worker_deployment(
    run: &Run<'_>,
    i: usize,
    image: &str,
) -> anyhow::Result<WorkerDeployment> {
    let place = run.place_of(&run.names[i]);
    let connection = if run.namespace_scoped {
        crate::scoped::connection_ref(i)
    } else if place.server == 0 {
        connection_ref(i)
    } else {
        json!({"objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": CLUSTER_CONNECTION_B}})
    };
    let rollout = if i.is_multiple_of(2) {
        json!({"strategy": "AllAtOnce"})
    } else {
        json!({"strategy": "Progressive", "steps": [{"rampPercentage": 50, "pauseDuration": "30s"}]})
    };
    let mut spec = json!({
        "workerOptions": {"connectionRef": connection, "temporalNamespace": place.namespace},
        "rollout": rollout,
        "sunset": {"scaledownDelay": "3s", "deleteDelay": "5s"},
    });
    if let (Some(spec), Value::Object(workers)) =
        (spec.as_object_mut(), run.workers_spec(&run.names[i], image))
    {
        spec.extend(workers);
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
        "metadata": {"name": run.names[i]},
        "spec": spec
    }))?)
}

/// Tags the example worker's image on the node as every image the run will set: `r0` to
/// `r<rounds>` and the blips (no registry serves them).
pub(crate) fn tag_images(node: &Node, rounds: usize) -> anyhow::Result<()> {
    let tags = (0..=rounds)
        .map(|r| format!("r{r}"))
        .chain((0..BLIPS).map(|b| format!("blip-{b}")));
    for tag in tags {
        node.ctr(&[
            "images",
            "tag",
            "--force",
            WORKER_IMAGE,
            &format!("{IMAGE}:{tag}"),
        ])?;
    }
    Ok(())
}
