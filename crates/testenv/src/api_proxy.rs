//! A fault-injecting proxy in front of the kube-apiserver: plain HTTP on loopback for the
//! client, TLS to the apiserver. At rest it forwards every request unchanged (watches stream
//! through). With faults on, it answers some writes `409 Conflict` without forwarding them (the
//! write did not happen), and some requests `500 Internal Server Error` *after* forwarding them
//! (the write happened, the answer was lost), as an apiserver under load or behind a flaky
//! load balancer does. Watches are never failed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::net::TcpListener;

use crate::Error;

type Upstream = Client<hyper_rustls::HttpsConnector<HttpConnector>, Incoming>;
type Body = BoxBody<Bytes, hyper::Error>;

/// How often the proxy fails requests while faults are on (0: never).
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// One write in this many is answered 409 Conflict, not forwarded.
    pub conflict_every: u32,
    /// One request (not a watch) in this many is forwarded, then answered 500.
    pub error_every: u32,
}

struct Shared {
    upstream: Upstream,
    upstream_url: String,
    conflict_every: AtomicU32,
    error_every: AtomicU32,
    requests: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
}

/// A running proxy. Dropping it stops accepting connections.
pub struct ApiProxy {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn proxy_err(e: impl std::fmt::Display) -> Error {
    Error::Other(format!("apiserver proxy: {e}"))
}

impl ApiProxy {
    /// Serves on a free loopback port, forwarding to `upstream` (`https://...`), whose
    /// certificate `ca_pem` signed.
    pub async fn start(upstream: &str, ca_pem: &str) -> Result<Self, Error> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.map_err(proxy_err)?).map_err(proxy_err)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(proxy_err)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .build();
        let shared = Arc::new(Shared {
            upstream: Client::builder(TokioExecutor::new()).build(connector),
            upstream_url: upstream.trim_end_matches('/').to_string(),
            conflict_every: AtomicU32::new(0),
            error_every: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(proxy_err)?;
        let url = format!("http://{}", listener.local_addr().map_err(proxy_err)?);
        let serving = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, hyper::Error>(handle(&shared, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self { url, shared, task })
    }

    /// Writes to `path` the kubeconfig `through` (the admin one, [`ControlPlane::kubeconfig`])
    /// with this proxy in place of the apiserver's URL.
    ///
    /// [`ControlPlane::kubeconfig`]: crate::control_plane::ControlPlane::kubeconfig
    pub fn write_kubeconfig(
        &self,
        mut through: serde_json::Value,
        path: &std::path::Path,
    ) -> Result<(), Error> {
        if let Some(clusters) = through["clusters"].as_array_mut() {
            for c in clusters {
                c["cluster"]["server"] = serde_json::json!(self.url);
            }
        }
        std::fs::write(path, through.to_string()).map_err(|e| Error::io("api proxy", path, e))
    }

    /// Turns faults on (or off, with the default) from the next request on.
    pub fn set_faults(&self, faults: Faults) {
        self.shared
            .conflict_every
            .store(faults.conflict_every, Ordering::SeqCst);
        self.shared
            .error_every
            .store(faults.error_every, Ordering::SeqCst);
    }

    /// Requests forwarded or failed so far, 409s answered, 500s answered.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.shared.requests.load(Ordering::SeqCst),
            self.shared.conflicts.load(Ordering::SeqCst),
            self.shared.errors.load(Ordering::SeqCst),
        )
    }
}

fn is_watch(req: &Request<Incoming>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()
    });
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let n = shared.requests.fetch_add(1, Ordering::SeqCst);
    let write = matches!(
        *req.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let watch = is_watch(&req);
    let conflict_every = u64::from(shared.conflict_every.load(Ordering::SeqCst));
    let error_every = u64::from(shared.error_every.load(Ordering::SeqCst));
    if write && conflict_every > 0 && n.is_multiple_of(conflict_every) {
        shared.conflicts.fetch_add(1, Ordering::SeqCst);
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            "injected by the test proxy: the object has been modified; please apply your changes to the latest version and try again",
        );
    }
    let fail_after = !watch && error_every > 0 && n % error_every == 1 % error_every;
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    parts.uri = match format!("{}{path}", shared.upstream_url).parse() {
        Ok(uri) => uri,
        Err(e) => return status(StatusCode::BAD_GATEWAY, "BadGateway", &e.to_string()),
    };
    parts.headers.remove(hyper::header::HOST);
    let answer = match shared
        .upstream
        .request(Request::from_parts(parts, body))
        .await
    {
        Ok(answer) => answer,
        // The apiserver restarting.
        Err(e) => {
            return status(
                StatusCode::BAD_GATEWAY,
                "ServiceUnavailable",
                &format!("apiserver unreachable: {e}"),
            );
        }
    };
    if fail_after {
        // Read the answer through (the request was served), then lose it.
        let _ = answer.into_body().collect().await;
        shared.errors.fetch_add(1, Ordering::SeqCst);
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "injected by the test proxy: the request was served, its answer lost",
        );
    }
    answer.map(|b| b.boxed())
}
