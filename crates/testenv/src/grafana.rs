//! The queries of a Grafana dashboard (its JSON model), for the tests that check them: by name
//! against the registry, and by evaluation in a real Prometheus.

use serde_json::Value;

/// Every query of `dashboard`: each panel's targets (rows' panels too) with the panel's title,
/// and each query variable's query as `variable <name>`.
pub fn queries(dashboard: &Value) -> Vec<(String, String)> {
    fn panels(list: &Value, out: &mut Vec<(String, String)>) {
        for p in list.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or_default();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push((title.to_string(), expr.to_string()));
                }
            }
            panels(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if v["type"] == "query"
            && let Some(q) = v["query"]["query"].as_str()
        {
            let name = v["name"].as_str().unwrap_or_default();
            out.push((format!("variable {name}"), q.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn panels_rows_and_query_variables() {
        let dashboard = json!({
            "panels": [
                {"title": "a", "targets": [{"expr": "x"}, {"expr": "y"}]},
                {"title": "row", "panels": [{"title": "b", "targets": [{"expr": "z"}]}]},
            ],
            "templating": {"list": [
                {"name": "ds", "type": "datasource", "query": "prometheus"},
                {"name": "ns", "type": "query", "query": {"query": "label_values(x, ns)"}},
            ]},
        });
        let q: Vec<(String, String)> = super::queries(&dashboard);
        let q: Vec<(&str, &str)> = q.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(
            q,
            [
                ("a", "x"),
                ("a", "y"),
                ("b", "z"),
                ("variable ns", "label_values(x, ns)")
            ]
        );
    }
}
