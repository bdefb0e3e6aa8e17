//! A ClusterConnection a platform team hands out: only the namespaces its selector allows, and
//! only the Temporal namespaces it lists. Refused tenants are told why, nothing of theirs is
//! read (the apiserver's audit log says so), and their running workers are left alone.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::{QUICK, ROLLOUT};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use twc_api::ClusterConnection;
use twc_api::conditions::CONNECTION_NOT_ALLOWED;
use twc_testenv::wait_for;

const LABEL: &str = "twc-test/tenant-of";

async fn label(client: &kube::Client, ns: &str, value: Option<&str>) {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL: value}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("label namespace {ns}: {e}"));
}

fn refused(wd: &twc_api::WorkerDeployment) -> bool {
    ["Ready", "Progressing"].iter().all(|t| {
        condition(wd, t)
            .is_some_and(|(st, reason, _)| st == "False" && reason == CONNECTION_NOT_ALLOWED)
    })
}

async fn warnings(client: &kube::Client, ns: &str, reason: &str) -> Vec<String> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| {
                    e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason)
                })
                .map(|e| e.note.unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// (refused count, refused users) of the ClusterConnection.
async fn refusals(client: &kube::Client, cc: &str) -> (Option<i32>, Vec<String>, Option<i32>) {
    let c = Api::<ClusterConnection>::all(client.clone())
        .get(cc)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let s = c.status.unwrap_or_default();
    (s.refused, s.refused_users, s.used_by)
}

/// Waits until the ClusterConnection's (refused, refused users, usedBy) satisfy `pred`.
async fn wait_refusals(
    client: &kube::Client,
    cc: &str,
    what: &str,
    pred: impl Fn(&(Option<i32>, Vec<String>, Option<i32>)) -> bool,
) -> Result<(), twc_testenv::Error> {
    wait_for(what, QUICK, || async {
        let got = refusals(client, cc).await;
        if pred(&got) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_connection_serves_only_the_namespaces_and_temporal_namespaces_it_allows()
-> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let cc = unique("tenancy");
    let allowed_temporal = w.env.temporal_namespace().await?;
    let forbidden_temporal = w.env.temporal_namespace().await?;
    let mut spec = w.mtls_connection_spec();
    spec["allowedNamespaces"] =
        json!({"from": "Selector", "selector": {"matchLabels": {LABEL: cc}}});
    spec["allowedTemporalNamespaces"] = json!([allowed_temporal]);
    let obj: ClusterConnection = from_json(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
        "metadata": {"name": cc}, "spec": spec,
    }));
    Api::<ClusterConnection>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await?;

    // a: labelled. b: not labelled. c: labelled, but its Temporal namespace is not listed.
    let (a, b, c) = (
        w.tenant("ten-a").await,
        w.tenant("ten-b").await,
        w.tenant("ten-c").await,
    );
    label(&client, &a, Some(&cc)).await;
    label(&client, &c, Some(&cc)).await;
    for (ns, temporal) in [
        (&a, &allowed_temporal),
        (&b, &allowed_temporal),
        (&c, &forbidden_temporal),
    ] {
        w.worker_deployment_in(ns, "w", cluster_ref(&cc), "v1", temporal)
            .await;
    }
    wait_wd(&client, &a, "w", "rolled out", ROLLOUT, rolled_out).await;
    let wd_b = wait_wd(&client, &b, "w", "refused", QUICK, refused).await;
    let (_, _, why) = condition(&wd_b, "Ready").unwrap_or_default();
    assert!(
        why.contains(&format!(
            "does not match spec.allowedNamespaces.selector ({LABEL}={cc})"
        )),
        "{why}"
    );
    let wd_c = wait_wd(&client, &c, "w", "refused", QUICK, refused).await;
    let (_, _, why) = condition(&wd_c, "Ready").unwrap_or_default();
    assert!(
        why.contains(&format!(
            "Temporal namespace \"{forbidden_temporal}\" is not in spec.allowedTemporalNamespaces"
        )),
        "{why}"
    );
    // One Warning each, and the refused take no hold on the connection: only a counts.
    for ns in [&b, &c] {
        let notes = wait_for(
            &format!("{ns}: the ConnectionNotAllowed warning"),
            QUICK,
            || async {
                let notes = warnings(&client, ns, CONNECTION_NOT_ALLOWED).await;
                if notes.is_empty() {
                    Err("none yet".to_string())
                } else {
                    Ok(notes)
                }
            },
        )
        .await?;
        assert_eq!(notes.len(), 1, "{notes:?}");
    }
    let mut want_refused = vec![format!("{b}/w"), format!("{c}/w")];
    want_refused.sort();
    wait_refusals(
        &client,
        &cc,
        "the ClusterConnection counts 1 user and 2 refused",
        |got| *got == (Some(2), want_refused.clone(), Some(1)),
    )
    .await?;
    let table = table(&client, "/apis/temporal.io/v1alpha1/clusterconnections").await;
    let row = row_of(&table, &cc);
    assert_eq!(
        row.get("Refused").map(String::as_str),
        Some("2"),
        "{table:?}"
    );
    assert_eq!(row.get("Users").map(String::as_str), Some("1"), "{table:?}");
    // Nothing of the refused tenants was read: no Secret of theirs, no versioned Deployment.
    for ns in [&b, &c] {
        assert_eq!(
            w.env.control_plane.secret_reads(ns),
            Vec::new(),
            "Secrets read in {ns}"
        );
        let deployments = Api::<Deployment>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await?;
        assert!(
            deployments.items.is_empty(),
            "{ns}: {:?}",
            deployments.items.len()
        );
    }
    // The audit log does see the allowed tenant's reads (the check can fail).
    assert!(
        !w.env.control_plane.secret_reads(&a).is_empty(),
        "no Secret read seen in {a}"
    );

    // Labelled, b proceeds at once (the Namespace watch), in both directions.
    let labelled = Instant::now();
    label(&client, &b, Some(&cc)).await;
    wait_wd(
        &client,
        &b,
        "w",
        "rolled out once labelled",
        ROLLOUT,
        rolled_out,
    )
    .await;
    println!(
        "tenancy: rolled out {:.1}s after its namespace was labelled",
        labelled.elapsed().as_secs_f64()
    );
    let mut want_refused = vec![format!("{c}/w")];
    want_refused.sort();
    wait_refusals(
        &client,
        &cc,
        "the ClusterConnection counts 2 users and 1 refused",
        |got| *got == (Some(1), want_refused.clone(), Some(2)),
    )
    .await?;
    let running = |ns: String| {
        let client = client.clone();
        async move {
            Api::<Deployment>::namespaced(client, &ns)
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .map(|d| {
                            (
                                kube::ResourceExt::name_any(d),
                                d.spec.as_ref().and_then(|s| s.replicas),
                                d.metadata.deletion_timestamp.is_some(),
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        }
    };
    let before = running(b.clone()).await;
    assert_eq!(before.len(), 1, "{before:?}");
    let unlabelled = Instant::now();
    label(&client, &b, None).await;
    wait_wd(&client, &b, "w", "refused again", QUICK, refused).await;
    println!(
        "tenancy: refused {:.1}s after its label was removed",
        unlabelled.elapsed().as_secs_f64()
    );
    // Its workers keep running: nothing scaled, nothing deleted, Temporal's routing as it was.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(running(b.clone()).await, before);
    let wd_b = wait_wd(&client, &b, "w", "still current", QUICK, |wd| {
        wd.status
            .as_ref()
            .is_some_and(|s| s.current_version.is_some())
    })
    .await;
    assert!(refused(&wd_b));
    wait_refusals(
        &client,
        &cc,
        "the ClusterConnection counts b refused again",
        |got| got.0 == Some(2),
    )
    .await?;

    // The platform team lists c's Temporal namespace: c proceeds (the ClusterConnection's own
    // change re-queues its users).
    let both =
        json!({"spec": {"allowedTemporalNamespaces": [allowed_temporal, forbidden_temporal]}});
    Api::<ClusterConnection>::all(client.clone())
        .patch(&cc, &PatchParams::default(), &Patch::Merge(both))
        .await?;
    wait_wd(
        &client,
        &c,
        "w",
        "rolled out once allowed",
        ROLLOUT,
        rolled_out,
    )
    .await;
    Ok(())
}
