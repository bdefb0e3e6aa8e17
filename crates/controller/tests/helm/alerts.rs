//! The alert rules (`files/prometheus/alerts.yaml`): valid and unit-tested by promtool, every
//! alert covered by a firing case, and put in a PrometheusRule (`prometheusRule`) as they are.

use std::path::Path;

use serde_json::Value;

use crate::render::{CHART, FULLNAME_SUFFIX, helm_template, of_kind, one};

const RULES: &str = "files/prometheus/alerts.yaml";
const RULE_TESTS: &str = "hack/prometheus/alerts_test.yaml";

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `promtool <args>` in the repository's root; its output when it fails.
fn promtool(args: &[&str]) -> Result<String, String> {
    let promtool = twc_testenv::paths::promtool();
    let out = std::process::Command::new(&promtool)
        .args(args)
        .current_dir(twc_testenv::paths::workspace())
        .output()
        .map_err(|e| format!("{}: {e} (run hack/provision.sh)", promtool.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

#[test]
fn the_alert_rules_pass_promtool_and_every_alert_has_a_firing_case() {
    let rules = format!("{CHART}/{RULES}");
    let checked = promtool(&["check", "rules", &rules]).unwrap_or_else(|e| panic!("{e}"));
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", RULE_TESTS]).unwrap_or_else(|e| panic!("{e}"));
    assert!(tested.contains("SUCCESS"), "{tested}");

    // promtool passes a rule no test names: each alert must fire in some case, with its
    // annotations checked there.
    let alerts: Vec<String> = yaml(&twc_testenv::paths::workspace().join(&rules))["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect();
    assert!(alerts.len() >= 6, "{alerts:?}");
    let tests = yaml(&twc_testenv::paths::workspace().join(RULE_TESTS));
    let firing: Vec<&Value> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .filter(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .collect();
    for alert in &alerts {
        let case = firing
            .iter()
            .find(|c| c["alertname"] == alert.as_str())
            .unwrap_or_else(|| panic!("{alert}: no case of {RULE_TESTS} fires it"));
        assert!(
            case["exp_alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|a| a["exp_annotations"]["summary"].is_string()),
            "{alert}: the firing case checks no annotations"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alert_rules_are_a_prometheus_rule_when_asked() {
    let off = helm_template("p", CHART, "twc", &[]).await;
    assert_eq!(of_kind(&off, "PrometheusRule").count(), 0, "off by default");

    let on = helm_template(
        "p",
        CHART,
        "twc",
        &[
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.labels.release=kube-prometheus-stack",
            "--set",
            "prometheusRule.additionalLabels.team=platform",
        ],
    )
    .await;
    let rule = one(&on, "PrometheusRule", &format!("p{FULLNAME_SUFFIX}"));
    assert_eq!(rule["metadata"]["namespace"], "twc");
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    // The file's groups, with the additional labels on every alert.
    let mut expected =
        yaml(&twc_testenv::paths::workspace().join(CHART).join(RULES))["groups"].clone();
    for group in expected.as_array_mut().into_iter().flatten() {
        for r in group["rules"].as_array_mut().into_iter().flatten() {
            r["labels"]["team"] = "platform".into();
        }
    }
    assert_eq!(rule["spec"]["groups"], expected);
}
