//! The chart's Grafana dashboard asks only for what exists: every metric a panel or variable
//! query names is registered here (read from the exposition of this registry) and listed in
//! `docs/metrics.md`, and every label it groups or filters by is one of that metric's labels.
//! There is no Grafana to load it into here; this keeps the queries honest instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::*;

const DASHBOARD: &str = "../../charts/temporal-worker-controller/files/grafana/dashboard.json";

/// PromQL functions and aggregations the dashboard may call (and Grafana's `label_values`).
const FUNCTIONS: &[&str] = &[
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "increase",
    "irate",
    "histogram_quantile",
    "vector",
    "topk",
    "clamp_min",
    "label_values",
];
/// PromQL keywords that are neither metrics nor labels.
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset"];
/// Keywords followed by a parenthesised list of labels.
const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring"];

fn read(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The series names this registry exposes once every family has a sample, with its labels.
fn registered() -> BTreeMap<String, BTreeSet<String>> {
    let m = Metrics::new();
    m.reconciled("WorkerDeployment", Duration::from_millis(1));
    m.reconcile_failed("WorkerDeployment", "InvalidSpec");
    let _running = m.in_flight("WorkerDeployment");
    m.rpc(
        "DescribeWorkerDeployment",
        temporalio_client::tonic::Code::Ok,
        Duration::ZERO,
    );
    m.dialed(true);
    m.worker_deployment("ns", "wd", &[VersionStatus::Current], 0.0, &[]);
    m.set_leader(true);
    m.set_build_info("0", "c", "r");
    m.queue_depth
        .get_or_create(&ControllerLabels {
            controller: "WorkerDeployment",
        })
        .set(0);
    let text = m.encode();
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = line[name_end..]
            .strip_prefix('{')
            .and_then(|l| l.split_once('}'))
            .map(|(l, _)| l)
            .unwrap_or_default();
        let entry = series.entry(line[..name_end].to_string()).or_default();
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            if let Some((k, _)) = pair.split_once('=') {
                entry.insert(k.to_string());
            }
        }
    }
    assert!(series.len() >= 12, "{text}");
    series
}

/// The metrics `docs/metrics.md` lists, with their labels.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    read("../../docs/metrics.md")
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix("`twc_")?.strip_suffix('`')?;
            let labels = cells
                .get(3)?
                .split(',')
                .map(|s| s.trim().trim_matches('`').to_string())
                .filter(|s| !s.is_empty())
                .collect();
            Some((format!("twc_{name}"), labels))
        })
        .collect()
}

/// A histogram's series are documented under the histogram's name.
fn documented_as(series: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| series.strip_suffix(s))
        .filter(|base| base.ends_with("_seconds"))
        .unwrap_or(series)
}

/// What a query names: (metrics, labels).
#[derive(Debug, Default)]
struct Names {
    metrics: BTreeSet<String>,
    labels: BTreeSet<String>,
}

/// Reads the metric and label names of a PromQL query (with Grafana's `$variables`). Fails on
/// an unknown function or unbalanced brackets.
fn names(query: &str) -> Names {
    let chars: Vec<char> = query.chars().collect();
    let mut out = Names::default();
    let mut i = 0;
    // Open brackets; `{` is a selector's matchers, `L` a label list.
    let mut stack: Vec<char> = Vec::new();
    let mut pending_label_list = false;
    let mut label_values_args: Option<usize> = None;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
            }
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    while i < chars.len() && chars[i] != '}' {
                        i += 1;
                    }
                } else {
                    while i + 1 < chars.len()
                        && (chars[i + 1].is_alphanumeric() || chars[i + 1] == '_')
                    {
                        i += 1;
                    }
                }
            }
            '[' => {
                while i < chars.len() && chars[i] != ']' {
                    i += 1;
                }
                assert!(i < chars.len(), "unclosed [ in {query}");
            }
            '(' => stack.push(if std::mem::take(&mut pending_label_list) {
                'L'
            } else {
                '('
            }),
            '{' => stack.push('{'),
            ')' => {
                let open = stack.pop();
                assert!(matches!(open, Some('(' | 'L')), "unbalanced ) in {query}");
            }
            '}' => assert_eq!(stack.pop(), Some('{'), "unbalanced }} in {query}"),
            ',' if label_values_args == Some(stack.len()) => {
                // label_values(<selector>, <label>)
                let rest: String = chars[i + 1..].iter().collect();
                let label = rest
                    .trim_start()
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
                    .unwrap_or_default();
                out.labels.insert(label.to_string());
                i += 1 + rest.find(label).unwrap_or(0) + label.len();
                label_values_args = None;
                continue;
            }
            c if c.is_ascii_digit() || c == '.' => {
                while i + 1 < chars.len()
                    && (chars[i + 1].is_ascii_alphanumeric() || chars[i + 1] == '.')
                {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i + 1 < chars.len()
                    && (chars[i + 1].is_ascii_alphanumeric() || "_:".contains(chars[i + 1]))
                {
                    i += 1;
                }
                let word: String = chars[start..=i].iter().collect();
                let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
                let inside = stack.last().copied();
                let w = word.as_str();
                if matches!(inside, Some('{' | 'L')) {
                    out.labels.insert(word);
                } else if LABEL_LISTS.contains(&w) {
                    pending_label_list = true;
                } else if next == Some(&'(') || FUNCTIONS.contains(&w) {
                    // A call, or an aggregation with its grouping first: `sum by (a) (...)`.
                    assert!(FUNCTIONS.contains(&w), "unknown function {w} in {query}");
                    if w == "label_values" {
                        label_values_args = Some(stack.len() + 1);
                    }
                } else if !KEYWORDS.contains(&w) {
                    out.metrics.insert(word);
                }
            }
            _ => {}
        }
        i += 1;
    }
    assert!(stack.is_empty(), "unclosed {stack:?} in {query}");
    out
}

#[test]
fn the_query_reader_reads_promql() {
    let n = names(
        r#"histogram_quantile(0.95, sum by (le, rpc) (rate(twc_x_seconds_bucket{code!="Ok", a=~"$v"}[$__rate_interval]))) or vector(0)"#,
    );
    assert_eq!(n.metrics, ["twc_x_seconds_bucket".to_string()].into());
    assert_eq!(
        n.labels,
        ["a", "code", "le", "rpc"].map(String::from).into()
    );
    let n = names(r#"label_values(twc_y{namespace=~"$namespace"}, worker_deployment)"#);
    assert_eq!(n.metrics, ["twc_y".to_string()].into());
    assert_eq!(
        n.labels,
        ["namespace", "worker_deployment"].map(String::from).into()
    );
}

#[test]
fn the_dashboard_names_only_registered_and_documented_metrics_and_their_labels() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"));
    let registered = registered();
    let documented = documented();
    let queries: Vec<String> = twc_testenv::grafana::queries(&dashboard)
        .into_iter()
        .map(|(_, q)| q)
        .collect();
    assert!(queries.len() >= 15, "{queries:?}");
    let mut used = BTreeSet::new();
    for q in &queries {
        let n = names(q);
        assert!(!n.metrics.is_empty(), "no metric in {q}");
        let mut labels = BTreeSet::new();
        for m in &n.metrics {
            let series = registered.get(m).unwrap_or_else(|| {
                panic!("{q}: {m} is not registered (have {:?})", registered.keys())
            });
            let doc = documented_as(m);
            let doc_labels = documented
                .get(doc)
                .unwrap_or_else(|| panic!("{q}: {doc} is not in docs/metrics.md"));
            assert!(
                doc_labels.iter().all(|l| series.contains(l)),
                "docs/metrics.md gives {doc} the labels {doc_labels:?}, the registry {series:?}"
            );
            labels.extend(series.iter().cloned());
            used.insert(doc.to_string());
        }
        for l in &n.labels {
            assert!(
                labels.contains(l),
                "{q}: no metric of it has the label {l} ({labels:?})"
            );
        }
    }
    // The panels the chart's values promise.
    for m in [
        "twc_worker_deployment_ramp_percentage",
        "twc_worker_deployment_versions",
        "twc_reconcile_errors_total",
        "twc_temporal_rpc_total",
        "twc_temporal_rpc_duration_seconds",
    ] {
        assert!(used.contains(m), "no panel shows {m}");
    }
}
