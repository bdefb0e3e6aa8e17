//! What `kubectl get` and a plain HTTP client see.

use kube::Client;
use serde_json::Value;

/// What `kubectl get` shows for `path` (a list URL): the apiserver's Table, as (column names,
/// rows of cells as text; an absent cell is "").
pub async fn table(client: &Client, path: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let req = http::Request::get(path)
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let t: Value = client
        .request(req)
        .await
        .unwrap_or_else(|e| panic!("Table of {path}: {e}"));
    let columns = t["columnDefinitions"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| c["name"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let rows = t["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    r["cells"]
                        .as_array()
                        .map(|c| c.iter().map(text).collect())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default();
    (columns, rows)
}

/// The row of `name` (first cell) in a [`table`], as column name → cell.
pub fn row_of(
    (columns, rows): &(Vec<String>, Vec<Vec<String>>),
    name: &str,
) -> std::collections::BTreeMap<String, String> {
    rows.iter()
        .find(|r| r.first().map(String::as_str) == Some(name))
        .map(|r| columns.iter().cloned().zip(r.iter().cloned()).collect())
        .unwrap_or_default()
}

/// A plain HTTP/1.0 GET: (status, body).
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    http_get_as(addr, path, None).await
}

/// [`http_get`] with a bearer token.
pub async fn http_get_as(
    addr: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = String::new();
    stream
        .read_to_string(&mut raw)
        .await
        .map_err(|e| e.to_string())?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line in {raw:?}"))?;
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((status, body.to_string()))
}
