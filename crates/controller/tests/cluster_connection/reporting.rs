//! What goes wrong, said precisely: bad Secrets, a TLS mismatch, an unreachable server, a
//! certificate expiring soon.

use crate::common::*;
use crate::{QUICK, ROLLOUT};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use twc_api::Connection;
use twc_testenv::wait_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_secrets_are_reported_precisely_and_fixing_them_recovers() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.env.namespace("badsecret").await?;
    w.connection(&ns, "temporal").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let good = w.mtls_secret(MTLS_SECRET, time::Duration::days(90));
    // An Opaque Secret with the key missing (a kubernetes.io/tls one cannot lack it).
    let mut missing_key = good.clone();
    missing_key.type_ = Some("Opaque".into());
    if let Some(d) = missing_key.string_data.as_mut() {
        d.remove("tls.key");
    }
    secrets.create(&Default::default(), &missing_key).await?;
    w.worker_deployment(&ns, "w", by_name("temporal"), "v1")
        .await;

    let expect = |needle: String| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let wd = wait_wd(&client, &ns, "w", &needle, QUICK, |wd| {
                condition(wd, "Ready")
                    .is_some_and(|(_, r, m)| r == "AuthSecretInvalid" && m.contains(&needle))
            })
            .await;
            let (_, _, m) = condition(&wd, "Progressing").unwrap_or_default();
            assert!(m.contains(&format!("Secret {ns}/{MTLS_SECRET}")), "{m}");
        }
    };
    expect("has no key tls.key".into()).await;
    // Its only user cannot use it: the Connection is not Ready, for that user's reason.
    wait_for("the Connection not Ready", QUICK, || async {
        let c = Api::<Connection>::namespaced(client.clone(), &ns)
            .get("temporal")
            .await
            .map_err(|e| e.to_string())?;
        match connection_ready(c.status.as_ref()) {
            Some((s, r, m))
                if s == "False"
                    && r == "AuthSecretInvalid"
                    && m.starts_with(&format!(
                        "none of its 1 WorkerDeployment reaches Temporal through it; {ns}/w: AuthSecretInvalid: "
                    )) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await?;

    let replace = |s: Secret| {
        let secrets = secrets.clone();
        async move {
            let mut s = s;
            s.metadata.resource_version = None;
            secrets
                .delete(MTLS_SECRET, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            secrets
                .create(&Default::default(), &s)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    };
    let mut bad_pem = good.clone();
    if let Some(d) = bad_pem.string_data.as_mut() {
        d.insert(
            "tls.crt".into(),
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".into(),
        );
    }
    replace(bad_pem).await;
    expect("key tls.crt: not valid PEM".into()).await;

    replace(w.mtls_secret(MTLS_SECRET, time::Duration::hours(-1))).await;
    expect("the certificate expired at".into()).await;

    // Fixed: the rollout completes with no restart.
    replace(good).await;
    wait_wd(
        &client,
        &ns,
        "w",
        "rolled out after the fix",
        ROLLOUT,
        rolled_out,
    )
    .await;
    delete_wd(&client, &ns, "w").await;
    Ok(())
}

/// TLS spoken to the plaintext dev server, and plaintext spoken to the TLS proxy: each is
/// `TemporalClientCreationFailed` with a message saying what is probably wrong, not only the
/// transport's error (#15 bug 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_mismatch_says_what_is_probably_wrong() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.env.namespace("mismatch").await?;
    for (name, spec, says) in [
        (
            "tls-to-plaintext",
            json!({"hostPort": w.env.temporal.address, "tls": {"serverName": "temporal.test"}}),
            "probably a plaintext endpoint",
        ),
        (
            "plaintext-to-tls",
            json!({"hostPort": w.mtls_address}),
            "probably expects TLS",
        ),
    ] {
        let c: Connection = from_json(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "Connection",
            "metadata": {"name": name}, "spec": spec
        }));
        Api::<Connection>::namespaced(client.clone(), &ns)
            .create(&Default::default(), &c)
            .await?;
        w.worker_deployment(&ns, name, by_name(name), "v1").await;
        let wd = wait_wd(
            &client,
            &ns,
            name,
            "TemporalClientCreationFailed",
            QUICK,
            |wd| {
                condition(wd, "Ready").is_some_and(|(_, r, _)| r == "TemporalClientCreationFailed")
            },
        )
        .await;
        let (_, _, message) = condition(&wd, "Ready").unwrap_or_default();
        assert!(message.contains(says), "{name}: {message}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_reported_with_a_condition_and_a_warning_event() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.env.namespace("unreachable").await?;
    let c: Connection = from_json(json!({
        "apiVersion": "temporal.io/v1alpha1", "kind": "Connection",
        "metadata": {"name": "nowhere"},
        "spec": {"hostPort": "127.0.0.1:1"}
    }));
    Api::<Connection>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &c)
        .await?;
    w.worker_deployment(&ns, "w", by_name("nowhere"), "v1")
        .await;
    let wd = wait_wd(
        &client,
        &ns,
        "w",
        "TemporalClientCreationFailed",
        QUICK,
        |wd| {
            condition(wd, "Progressing")
                .is_some_and(|(s, r, _)| s == "False" && r == "TemporalClientCreationFailed")
        },
    )
    .await;
    let (_, _, message) = condition(&wd, "Ready").unwrap_or_default();
    assert!(message.contains("127.0.0.1:1"), "{message}");
    let event = wait_event(&client, &ns, "TemporalClientCreationFailed", "", QUICK).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // It never reached Temporal, so its deletion skips the cleanup and says so.
    delete_wd(&client, &ns, "w").await;
    wait_wd_gone(&client, &ns, "w", QUICK).await;
    wait_event(
        &client,
        &ns,
        "CleanupSkipped",
        "never reached Temporal",
        QUICK,
    )
    .await;

    // One that did reach Temporal waits for a cleanup it cannot do now, and says how to get out...
    let tls_spec = w.mtls_connection_spec();
    Api::<Connection>::namespaced(client.clone(), &ns)
        .patch(
            "nowhere",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": tls_spec})),
        )
        .await?;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(
            &Default::default(),
            &w.mtls_secret(MTLS_SECRET, time::Duration::days(90)),
        )
        .await?;
    w.worker_deployment(&ns, "w2", by_name("nowhere"), "v1")
        .await;
    wait_wd(&client, &ns, "w2", "rolled out", ROLLOUT, rolled_out).await;
    Api::<Connection>::namespaced(client.clone(), &ns)
        .patch(
            "nowhere",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hostPort": "127.0.0.1:1"}})),
        )
        .await?;
    delete_wd(&client, &ns, "w2").await;
    wait_event(
        &client,
        &ns,
        "CleanupBlocked",
        "temporal.io/skip-temporal-cleanup=true",
        QUICK,
    )
    .await;
    let blocked = wait_wd(&client, &ns, "w2", "CleanupBlocked", QUICK, |wd| {
        condition(wd, "Ready").is_some_and(|(s, r, _)| s == "False" && r == "CleanupBlocked")
    })
    .await;
    assert!(has_finalizer(&blocked));
    // ...and completes once the connection is fixed.
    Api::<Connection>::namespaced(client.clone(), &ns)
        .patch(
            "nowhere",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hostPort": w.mtls_address}})),
        )
        .await?;
    wait_wd_gone(&client, &ns, "w2", ROLLOUT).await;
    Ok(())
}

/// A client certificate that expires within 14 days: the WorkerDeployment using it still rolls
/// out, gets a `ClientCertificateExpiresSoon` Warning naming the Secret and the expiry, and the
/// expiry is exported as a metric (#15).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_expiring_soon_is_warned_of_and_exported() -> TestResult {
    let w = world(true).await?;
    let client = w.client().await;
    let ns = w.env.namespace("certsoon").await?;
    w.connection(&ns, "temporal").await;
    let secret = w.mtls_secret(MTLS_SECRET, time::Duration::days(3));
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &secret)
        .await?;
    w.worker_deployment(&ns, "w", by_name("temporal"), "v1")
        .await;
    wait_wd(&client, &ns, "w", "rolled out", ROLLOUT, rolled_out).await;
    let event = wait_event(
        &client,
        &ns,
        "ClientCertificateExpiresSoon",
        &format!("Secret {ns}/{MTLS_SECRET} (key tls.crt) expires at"),
        QUICK,
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.unwrap_or_default();
    assert!(note.contains("in 2 days"), "{note}");

    let series = format!(
        "twc_client_certificate_expiry_timestamp_seconds{{namespace=\"{ns}\",secret=\"{MTLS_SECRET}\"}}"
    );
    let metrics = twc_controller::metrics::global().encode();
    let expiry: f64 = metrics
        .lines()
        .find(|l| l.starts_with(&series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let left = expiry - now;
    assert!(
        (2.0 * 86400.0..=3.0 * 86400.0).contains(&left),
        "expires in {left} s"
    );
    delete_wd(&client, &ns, "w").await;
    Ok(())
}
