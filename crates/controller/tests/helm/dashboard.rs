//! The Grafana dashboard as a labelled ConfigMap (`grafanaDashboard`).

use std::path::PathBuf;

use serde_json::Value;

use crate::render::{CHART, FULLNAME_SUFFIX, helm_template, of_kind, one};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_is_a_labelled_config_map_when_asked() {
    let off = helm_template("g", CHART, "twc", &[]).await;
    assert_eq!(of_kind(&off, "ConfigMap").count(), 0, "off by default");

    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(CHART)
        .join("files/grafana/dashboard.json");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let rendered = |cm: &Value| -> Value {
        let text = cm["data"]["temporal-worker-controller.json"]
            .as_str()
            .unwrap_or_else(|| panic!("no dashboard in {cm}"));
        serde_json::from_str(text).unwrap_or_else(|e| panic!("the rendered dashboard: {e}"))
    };

    let on = helm_template(
        "g",
        CHART,
        "twc",
        &["--set", "grafanaDashboard.enabled=true"],
    )
    .await;
    let cm = one(&on, "ConfigMap", &format!("g{FULLNAME_SUFFIX}-dashboard"));
    assert_eq!(cm["metadata"]["namespace"], "twc");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(rendered(cm), dashboard, "the file, verbatim");

    let custom = helm_template(
        "g",
        CHART,
        "twc",
        &[
            "--set",
            "grafanaDashboard.enabled=true",
            "--set",
            "grafanaDashboard.label=dashboards",
            "--set",
            "grafanaDashboard.labelValue=temporal",
            "--set",
            "grafanaDashboard.namespace=grafana",
            "--set",
            "grafanaDashboard.annotations.grafana_folder=Temporal",
        ],
    )
    .await;
    let cm = one(
        &custom,
        "ConfigMap",
        &format!("g{FULLNAME_SUFFIX}-dashboard"),
    );
    assert_eq!(cm["metadata"]["namespace"], "grafana");
    assert_eq!(cm["metadata"]["labels"]["dashboards"], "temporal");
    assert!(cm["metadata"]["labels"]["grafana_dashboard"].is_null());
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "Temporal");
    assert_eq!(rendered(cm), dashboard);
}
