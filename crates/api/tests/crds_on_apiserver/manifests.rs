//! TWC manifests apply unchanged and round-trip, defaults are applied, unknown fields are
//! pruned, `kubectl explain` shows our descriptions, the typed API round-trips.

use std::path::PathBuf;

use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use twc_api::{ClusterConnection, Connection, WorkerDeployment, WorkerResourceTemplate};

use crate::{TestResult, api, create, minimal_wd, set, setup};

fn fixtures() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/twc");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{e}"));
            let v: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
            (
                p.file_name().unwrap_or_default().to_string_lossy().into(),
                v,
            )
        })
        .collect()
}

/// Every leaf of `want` is in `got` with the same value; returns the paths that differ.
fn missing(want: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                match g.get(k) {
                    Some(gv) => missing(wv, gv, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k} (absent)")),
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                missing(wv, gv, &format!("{path}[{i}]"), out);
            }
        }
        (w, g) if w == g => {}
        (w, g) => out.push(format!("{path}: {w} became {g}")),
    }
}

#[tokio::test]
async fn twc_manifests_apply_unchanged_and_round_trip() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("twc-compat").await?;
    for (file, manifest) in fixtures() {
        let kind = manifest["kind"].as_str().unwrap_or_default().to_string();
        let api = api(&client, &ns, &kind);
        let created = create(&api, manifest.clone())
            .await
            .map_err(|e| format!("{file}: rejected: {e}"))?;
        let stored = serde_json::to_value(&created)?;
        let mut lost = Vec::new();
        missing(&manifest["spec"], &stored["spec"], "spec", &mut lost);
        assert!(lost.is_empty(), "{file}: the apiserver lost {lost:?}");

        // Our types read the stored object and write it back without losing anything either.
        let through_types = match kind.as_str() {
            "WorkerDeployment" => {
                serde_json::to_value(serde_json::from_value::<WorkerDeployment>(stored.clone())?)?
            }
            "Connection" => {
                serde_json::to_value(serde_json::from_value::<Connection>(stored.clone())?)?
            }
            _ => serde_json::to_value(serde_json::from_value::<WorkerResourceTemplate>(
                stored.clone(),
            )?)?,
        };
        let mut lost = Vec::new();
        missing(&stored["spec"], &through_types["spec"], "spec", &mut lost);
        assert!(lost.is_empty(), "{file}: the Rust types lost {lost:?}");
    }
    Ok(())
}

#[tokio::test]
async fn defaults_are_applied_by_the_apiserver() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("defaults").await?;
    let wds = api(&client, &ns, "WorkerDeployment");
    // No sunset at all, as a newcomer might write it.
    let created = create(&wds, minimal_wd("defaults")).await?;
    let spec = &created.data["spec"];
    assert_eq!(spec["sunset"]["scaledownDelay"], json!("1h"), "{spec}");
    assert_eq!(spec["sunset"]["deleteDelay"], json!("24h"), "{spec}");
    assert_eq!(spec["minReadySeconds"], json!(0), "{spec}");
    assert_eq!(spec["progressDeadlineSeconds"], json!(600), "{spec}");
    assert_eq!(
        spec.get("replicas"),
        None,
        "replicas must stay unset for HPAs"
    );

    // An empty sunset, as TWC's docs write it, gets the same defaults.
    let created = create(
        &wds,
        set(minimal_wd("empty-sunset"), "spec/sunset", json!({})),
    )
    .await?;
    assert_eq!(
        created.data["spec"]["sunset"]["scaledownDelay"],
        json!("1h")
    );
    assert_eq!(created.data["spec"]["sunset"]["deleteDelay"], json!("24h"));

    // What the user set is kept.
    let created = create(
        &wds,
        set(
            minimal_wd("set-sunset"),
            "spec/sunset",
            json!({"scaledownDelay": "5m"}),
        ),
    )
    .await?;
    assert_eq!(
        created.data["spec"]["sunset"]["scaledownDelay"],
        json!("5m")
    );
    assert_eq!(created.data["spec"]["sunset"]["deleteDelay"], json!("24h"));

    // The typed object reads back through our types.
    let typed: Api<WorkerDeployment> = Api::namespaced(client.clone(), &ns);
    let wd = typed.get("defaults").await?;
    assert_eq!(wd.spec.sunset.delete_delay.as_deref(), Some("24h"));
    Ok(())
}

#[tokio::test]
async fn unknown_fields_are_pruned_and_nothing_else_is_lost() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("prune").await?;
    let wds = api(&client, &ns, "WorkerDeployment");
    let v = set(
        set(minimal_wd("prune"), "spec/notAField", json!(1)),
        "spec/rollout/alsoNot",
        json!("x"),
    );
    let created = create(&wds, v).await?;
    assert_eq!(created.data["spec"].get("notAField"), None);
    assert_eq!(created.data["spec"]["rollout"].get("alsoNot"), None);
    assert_eq!(
        created.data["spec"]["rollout"]["strategy"],
        json!("AllAtOnce")
    );
    // Free-form gate input is kept whole.
    let input = json!({"nested": {"deep": [1, {"x": null}]}, "n": 1.5});
    let created = create(
        &wds,
        set(
            minimal_wd("gate-input"),
            "spec/rollout/gate",
            json!({"workflowType": "Gate", "input": input}),
        ),
    )
    .await?;
    assert_eq!(created.data["spec"]["rollout"]["gate"]["input"], input);
    Ok(())
}

#[tokio::test]
async fn kubectl_explain_shows_our_descriptions() -> TestResult {
    let (env, _client) = setup().await?;
    let kubeconfig = env.control_plane.kubeconfig_path.clone();
    let explain = |path: &str| {
        let out = std::process::Command::new(twc_testenv::paths::kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["explain", path])
            .output()
            .unwrap_or_else(|e| panic!("kubectl: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl explain {path} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    // kubectl caches discovery; the CRDs were installed moments ago, so retry briefly.
    let mut text = String::new();
    for _ in 0..50 {
        let out = std::process::Command::new(twc_testenv::paths::kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "explain",
                "workerdeployment.spec.workerOptions.connectionRef.objectRef",
            ])
            .output()?;
        if out.status.success() {
            text = String::from_utf8_lossy(&out.stdout).into_owned();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        text.contains("A typed reference to a Connection"),
        "objectRef description missing: {text}"
    );
    assert!(text.contains("ClusterConnection"), "{text}");
    let kind = explain("workerdeployment.spec.workerOptions.connectionRef.objectRef.kind");
    assert!(
        kind.contains("`ClusterConnection` (cluster-scoped)"),
        "{kind}"
    );
    let cc = explain("clusterconnection.spec.mutualTLSSecretRef");
    // kubectl wraps lines: compare words.
    let words = cc.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("each WorkerDeployment's own namespace"),
        "{cc}"
    );
    let root = explain("clusterconnection");
    assert!(root.contains("cluster-scoped Connection"), "{root}");
    Ok(())
}

#[tokio::test]
async fn cluster_connection_round_trips_through_the_typed_api() -> TestResult {
    let (_env, client) = setup().await?;
    let api: Api<ClusterConnection> = Api::all(client);
    let name = format!(
        "typed-{}",
        twc_testenv::control_plane::random_token()[..6].to_owned()
    );
    let spec = twc_api::ConnectionSpec {
        host_port: "temporal.example.com:7233".into(),
        mutual_tls_secret_ref: Some(twc_api::SecretReference {
            name: "mtls".into(),
        }),
        ..Default::default()
    };
    // Who may use it survives the round trip too (a field the CRD did not know would be
    // pruned in silence).
    let sharing = twc_api::Sharing {
        allowed_namespaces: Some(twc_api::AllowedNamespaces {
            from: twc_api::FromNamespaces::Selector,
            selector: Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_labels: Some([("team".to_string(), "a".to_string())].into()),
                    ..Default::default()
                },
            ),
        }),
        allowed_temporal_namespaces: vec!["payments".into(), "team-a-*".into()],
    };
    let created = api
        .create(
            &PostParams::default(),
            &ClusterConnection::shared(&name, spec.clone(), sharing.clone()),
        )
        .await?;
    assert_eq!(created.spec.connection, spec);
    assert_eq!(created.spec.sharing, sharing);
    assert_eq!(api.get(&name).await?.spec.connection, spec);
    api.delete(&name, &Default::default()).await?;
    Ok(())
}

/// Before the controller writes a status, every kind reads as generation 1 observed as 0, so
/// kstatus (Helm 4's `--wait`, Flux) says "in progress" instead of "current" for an object
/// nobody has looked at yet; a status write replaces it.
#[tokio::test]
async fn an_object_without_a_status_reads_as_not_yet_observed() -> TestResult {
    let (env, client) = setup().await?;
    let ns = env.namespace("unobserved").await?;
    let wd = create(&api(&client, &ns, "WorkerDeployment"), minimal_wd("fresh")).await?;
    let conn = create(
        &api(&client, &ns, "Connection"),
        crate::minimal_connection("Connection", "fresh"),
    )
    .await?;
    let wrt = create(
        &api(&client, &ns, "WorkerResourceTemplate"),
        json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
            "metadata": {"name": "fresh"},
            "spec": {"workerDeploymentRef": {"name": "fresh"}, "template": {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "spec": {"minAvailable": 1}}}
        }),
    )
    .await?;
    for created in [&wd, &conn, &wrt] {
        assert_eq!(created.data["status"], json!({"observedGeneration": 0}));
        let mut object = serde_json::to_value(created)?;
        object["apiVersion"] = json!("temporal.io/v1alpha1");
        let verdict = twc_testenv::kstatus::of(&object)?;
        assert_eq!(verdict.status, "InProgress", "{verdict:?}");
    }
    // Read back through a list (what a watcher starts from), too.
    let listed = api(&client, &ns, "WorkerDeployment")
        .list(&Default::default())
        .await?;
    assert_eq!(
        listed.items[0].data["status"]["observedGeneration"],
        json!(0)
    );
    Ok(())
}
