//! A real Prometheus (built by `hack/provision.sh`): it scrapes what its configuration names,
//! evaluates rule files, and answers PromQL and the alerts' state over its HTTP API, which is
//! all the tests ask of it.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::error::Error;
use crate::paths;
use crate::process::{ChildProcess, Spec, free_port};

/// A running Prometheus, stopped when dropped.
pub struct Prometheus {
    _process: ChildProcess,
    port: u16,
    http: Client<HttpConnector, Empty<Bytes>>,
}

impl Prometheus {
    /// Starts Prometheus with `config` (a `prometheus.yml`) in `dir`, its data and log there;
    /// returns once it answers ready.
    pub async fn start(dir: &Path, config: &str) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("prometheus", dir, e))?;
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config)
            .map_err(|e| Error::io("prometheus", &config_path, e))?;
        let port = free_port()?;
        let spec = Spec::new(
            "prometheus",
            paths::prometheus(),
            dir.join("prometheus.log"),
        )
        .args([
            format!("--config.file={}", config_path.display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
        ]);
        let mut process = ChildProcess::start(&spec)?;
        let http = Client::builder(TokioExecutor::new()).build_http();
        let started = Instant::now();
        loop {
            process.check_running()?;
            if matches!(get(&http, port, "/-/ready").await, Ok((200, _))) {
                break;
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(Error::Other(format!(
                    "prometheus not ready after 60 s; log: {}",
                    crate::process::log_tail(&dir.join("prometheus.log"), 20)
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(Self {
            _process: process,
            port,
            http,
        })
    }

    /// The result of instant query `expr` (`data.result`: one element per series).
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>, Error> {
        let data = self
            .api(&format!("/api/v1/query?query={}", encode(expr)))
            .await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The alerts pending or firing now (`data.alerts`), as the rule manager holds them.
    pub async fn alerts(&self) -> Result<Vec<Value>, Error> {
        let data = self.api("/api/v1/alerts").await?;
        Ok(data["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// The scrape targets (`data.activeTargets`), with their health and last error.
    pub async fn targets(&self) -> Result<Vec<Value>, Error> {
        let data = self.api("/api/v1/targets").await?;
        Ok(data["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// `data` of an API answer with status "success".
    async fn api(&self, path: &str) -> Result<Value, Error> {
        let (status, body) = self.get(path).await?;
        let answer: Value = serde_json::from_str(&body)
            .map_err(|e| Error::Other(format!("prometheus {path}: {e}: {body}")))?;
        if status != 200 || answer["status"] != "success" {
            return Err(Error::Other(format!(
                "prometheus {path}: HTTP {status}: {body}"
            )));
        }
        Ok(answer["data"].clone())
    }

    async fn get(&self, path: &str) -> Result<(u16, String), Error> {
        get(&self.http, self.port, path).await
    }
}

/// GET `path` of the Prometheus on `port`: (HTTP status, body).
async fn get(
    http: &Client<HttpConnector, Empty<Bytes>>,
    port: u16,
    path: &str,
) -> Result<(u16, String), Error> {
    let uri: http::Uri = format!("http://127.0.0.1:{port}{path}")
        .parse()
        .map_err(|e| Error::Other(format!("prometheus {path}: {e}")))?;
    let response = http
        .get(uri)
        .await
        .map_err(|e| Error::Other(format!("prometheus {path}: {e}")))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| Error::Other(format!("prometheus {path}: {e}")))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// `s` percent-encoded for a query string (every byte but the unreserved ones).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            super::encode(r#"sum by (a) (x{b="c d"}[5m])"#),
            "sum%20by%20%28a%29%20%28x%7Bb%3D%22c%20d%22%7D%5B5m%5D%29"
        );
    }
}
