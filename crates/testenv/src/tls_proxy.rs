//! A TLS terminator in front of the plaintext Temporal dev server, so connections with TLS,
//! mutual TLS (client certificates verified against a CA) and server-name overrides are tested
//! against a real handshake. Bytes pass through unchanged (gRPC over HTTP/2).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::Error;
use crate::pki::CertPair;

/// A running TLS proxy. Dropping it stops accepting connections.
pub struct TlsProxy {
    /// `127.0.0.1:PORT`
    pub address: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn tls_err(e: impl std::fmt::Display) -> Error {
    Error::Other(format!("tls proxy: {e}"))
}

impl TlsProxy {
    /// Serves `server` (certificate and key) on a free loopback port and forwards to
    /// `upstream`. With `client_ca`, clients must present a certificate signed by it.
    pub async fn start(
        upstream: &str,
        server: &CertPair,
        client_ca: Option<&str>,
    ) -> Result<Self, Error> {
        Self::start_on("127.0.0.1", upstream, server, client_ca).await
    }

    /// [`TlsProxy::start`] on a free port of `ip` (`0.0.0.0`: every interface, so that a real
    /// node's pods reach it at [`crate::node::HOST_IP`]; `address` then says `0.0.0.0:PORT`).
    pub async fn start_on(
        ip: &str,
        upstream: &str,
        server: &CertPair,
        client_ca: Option<&str>,
    ) -> Result<Self, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(server.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(tls_err)?;
        let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).map_err(tls_err)?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?;
        let mut config = match client_ca {
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                    roots.add(c.map_err(tls_err)?).map_err(tls_err)?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(tls_err)?;
                builder
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(certs, key)
                    .map_err(tls_err)?
            }
            None => builder
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .map_err(tls_err)?,
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind((ip, 0)).await.map_err(tls_err)?;
        let address = listener.local_addr().map_err(tls_err)?.to_string();
        let upstream = upstream.to_string();
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    // A failed handshake (e.g. no or a wrong client certificate) just closes.
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        Ok(Self { address, task })
    }
}
