//! A real Prometheus scrapes the controller the chart installed, as a user's does: it finds the
//! controller's pod through the apiserver (Kubernetes service discovery) and sends a
//! ServiceAccount token bound to the chart's `<release>-metrics-reader` ClusterRole. After a
//! rollout and a crash-looping build, every query of the shipped Grafana dashboard returns data,
//! and the shipped alert rules, loaded as they are, fire `TemporalWorkersCrashLooping`.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use twc_api::WorkerDeployment;
use twc_testenv::node::NodeEnv;
use twc_testenv::prometheus::Prometheus;

use crate::node::cluster;
use crate::workers::{build, crash_loop_v2, rolled_out_v1, worker_deployment};
use crate::{RELEASE, ROLLOUT, SYSTEM, TestResult};

/// Scrape and rule evaluation period: short, so the test waits seconds, not minutes.
const PERIOD: &str = "2s";
/// What Grafana's `$__rate_interval` is at that period (4 scrapes at least), rounded up.
const RATE_INTERVAL: &str = "1m";

fn repo(path: &str) -> PathBuf {
    twc_testenv::paths::workspace().join(path)
}

/// Prometheus scraping the controller with a ServiceAccount bound to the metrics reader role,
/// the shipped alert rules loaded.
async fn scraping(env: &NodeEnv) -> Result<Prometheus, Box<dyn std::error::Error>> {
    let client = env.client().await?;
    let monitoring = env.namespace("monitoring").await?;
    let token = env
        .control_plane
        .service_account_token(&monitoring, "prometheus")
        .await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("prometheus-{monitoring}")},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": format!("{RELEASE}-temporal-worker-controller-metrics-reader"),
        },
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": monitoring}],
    }))?;
    Api::<ClusterRoleBinding>::all(client)
        .create(&PostParams::default(), &binding)
        .await?;
    let dir = env.dir().join("prometheus");
    std::fs::create_dir_all(&dir)?;
    let token_file = dir.join("token");
    std::fs::write(&token_file, token)?;
    let rules = repo("charts/temporal-worker-controller/files/prometheus/alerts.yaml");
    let config = json!({
        "global": {"scrape_interval": PERIOD, "evaluation_interval": PERIOD},
        "rule_files": [rules],
        "scrape_configs": [{
            "job_name": "temporal-worker-controller",
            "kubernetes_sd_configs": [{
                "role": "pod",
                "kubeconfig_file": env.control_plane.kubeconfig_path,
                "namespaces": {"names": [SYSTEM]},
            }],
            "authorization": {"credentials_file": token_file},
            "relabel_configs": [
                {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                 "regex": "temporal-worker-controller", "action": "keep"},
                {"source_labels": ["__meta_kubernetes_pod_container_port_name"],
                 "regex": "metrics", "action": "keep"},
            ],
        }],
    });
    Ok(Prometheus::start(&dir, &serde_yaml::to_string(&config)?).await?)
}

/// Every query of the shipped dashboard, with its variables set to `namespace` and
/// WorkerDeployment `w`; Grafana's `label_values(selector, label)` becomes `selector`.
fn dashboard_queries(namespace: &str) -> Vec<(String, String)> {
    let path = repo("charts/temporal-worker-controller/files/grafana/dashboard.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let dashboard: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    twc_testenv::grafana::queries(&dashboard)
        .into_iter()
        .map(|(title, q)| {
            let q = q
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map_or(q.as_str(), |(selector, _)| selector)
                .replace("$namespace", namespace)
                .replace("$worker_deployment", "w")
                .replace("$__rate_interval", RATE_INTERVAL);
            (title, q)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_sees_the_dashboard_filled_and_a_crash_loop_fire_its_alert() -> TestResult
{
    let env = cluster().await?;
    let prometheus = scraping(env).await?;
    twc_testenv::wait_for("Prometheus scraping the controller", ROLLOUT, || async {
        let targets = prometheus.targets().await.map_err(|e| e.to_string())?;
        if targets.iter().any(|t| t["health"] == "up") {
            Ok(())
        } else {
            Err(format!("{targets:?}"))
        }
    })
    .await?;

    let (client, ns, temporal_ns, v1) = rolled_out_v1(env, "node-prom").await?;
    // A reconcile error to chart: a WorkerDeployment whose Connection is missing.
    let mut orphan = serde_json::to_value(worker_deployment(&ns, &temporal_ns, "30s", json!([])))?;
    orphan["metadata"]["name"] = "orphan".into();
    orphan["spec"]["workerOptions"]["connectionRef"] = json!({"name": "missing"});
    Api::<WorkerDeployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &serde_json::from_value(orphan)?)
        .await?;
    let s = crash_loop_v2(&client, &ns).await;
    assert_eq!(build(&s, "currentVersion").as_deref(), Some(v1.as_str()));

    // The rule as shipped (`for: 1m`), on the scraped condition series.
    let ours = |a: &Value| a["labels"]["namespace"] == ns.as_str() && a["labels"]["name"] == "w";
    let alert = twc_testenv::wait_for(
        "TemporalWorkersCrashLooping firing",
        Duration::from_secs(150),
        || async {
            let alerts = prometheus.alerts().await.map_err(|e| e.to_string())?;
            alerts
                .iter()
                .find(|a| {
                    a["labels"]["alertname"] == "TemporalWorkersCrashLooping"
                        && ours(a)
                        && a["state"] == "firing"
                })
                .cloned()
                .ok_or_else(|| format!("{alerts:?}"))
        },
    )
    .await?;
    assert_eq!(alert["labels"]["severity"], "warning");
    let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains(&format!("{ns}/w")), "{summary}");
    // Nothing else about this WorkerDeployment, and a leader is seen.
    let alerts = prometheus.alerts().await?;
    let others: Vec<&Value> = alerts
        .iter()
        .filter(|a| {
            (ours(a) && a["labels"]["alertname"] != "TemporalWorkersCrashLooping")
                || a["labels"]["alertname"] == "TemporalWorkerControllerNoLeader"
        })
        .collect();
    assert!(others.is_empty(), "{others:?}");

    // Every dashboard query has data now (the panels of rare events show 0 rather than no
    // data), and the reconcile errors panel charts the missing Connection.
    let errors = prometheus
        .query(r#"twc_reconcile_errors_total{reason="ConnectionNotFound"}"#)
        .await?;
    assert!(!errors.is_empty(), "the missing Connection is not counted");
    for (title, query) in dashboard_queries(&ns) {
        let what = format!("dashboard {title:?}: {query}");
        twc_testenv::wait_for(&what, Duration::from_secs(30), || async {
            let result = prometheus.query(&query).await.map_err(|e| e.to_string())?;
            if result.is_empty() {
                Err("no data".to_string())
            } else {
                Ok(())
            }
        })
        .await?;
    }
    Ok(())
}
