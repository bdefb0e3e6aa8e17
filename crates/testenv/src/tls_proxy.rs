//! A TLS terminator in front of the plaintext Temporal dev server, so connections with TLS,
//! mutual TLS (client certificates verified against a CA) and server-name overrides are tested
//! against a real handshake. Bytes pass through unchanged (gRPC over HTTP/2).

use std::sync::{Arc, Mutex};

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
    /// What new handshakes use; replaced by [`TlsProxy::trust_clients_of`].
    acceptor: Arc<Mutex<TlsAcceptor>>,
    server: CertPair,
    /// The client CAs trusted now, and whether a client without a certificate is let in.
    clients: Mutex<(Option<String>, bool)>,
    /// Bumped when the trust changes: every open connection closes, as a server restarted
    /// with a new trust store closes them.
    generation: tokio::sync::watch::Sender<u64>,
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

/// A TLS acceptor serving `server`, demanding client certificates of `client_ca` (a PEM
/// bundle: any of its CAs) when given; with `optional`, a client without one is let in (one
/// that presents a certificate must still present a trusted one).
fn acceptor(
    server: &CertPair,
    client_ca: Option<&str>,
    optional: bool,
) -> Result<TlsAcceptor, Error> {
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
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if optional {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier.build().map_err(tls_err)?;
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
    Ok(TlsAcceptor::from(Arc::new(config)))
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
        let acceptor = Arc::new(Mutex::new(acceptor(server, client_ca, false)?));
        let (generation, _) = tokio::sync::watch::channel(0u64);
        let listener = TcpListener::bind((ip, 0)).await.map_err(tls_err)?;
        let address = listener.local_addr().map_err(tls_err)?.to_string();
        let upstream = upstream.to_string();
        let (current, changes) = (acceptor.clone(), generation.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let Ok(acceptor) = current.lock().map(|a| a.clone()) else {
                    return;
                };
                let upstream = upstream.clone();
                let mut changed = changes.subscribe();
                tokio::spawn(async move {
                    // A failed handshake (e.g. no or a wrong client certificate) just closes.
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut tls, &mut plain) => {}
                        _ = changed.changed() => {}
                    }
                });
            }
        });
        Ok(Self {
            address,
            acceptor,
            server: server.clone(),
            clients: Mutex::new((client_ca.map(str::to_string), false)),
            generation,
            task,
        })
    }

    /// From now on clients must present a certificate of one of the CAs in `client_ca` (a
    /// PEM bundle); every open connection is closed, so a client whose certificate is no
    /// longer trusted cannot go on over a connection it opened before.
    pub fn trust_clients_of(&self, client_ca: &str) -> Result<(), Error> {
        self.set_clients(|c| c.0 = Some(client_ca.to_string()), true)
    }

    /// From now on a client without a certificate is let in too (`yes`: one authenticated
    /// otherwise, with an API key), or no longer; a client that presents one must still
    /// present a trusted one. Open connections stay open. Beware: a client whose certificate
    /// the server's CA hints do not name may leave it out and come in without one.
    pub fn let_in_clients_without_certificate(&self, yes: bool) -> Result<(), Error> {
        self.set_clients(|c| c.1 = yes, false)
    }

    fn set_clients(
        &self,
        change: impl FnOnce(&mut (Option<String>, bool)),
        close_open: bool,
    ) -> Result<(), Error> {
        let poisoned = || Error::Other("tls proxy: poisoned".into());
        let mut clients = self.clients.lock().map_err(|_| poisoned())?;
        change(&mut clients);
        let next = acceptor(&self.server, clients.0.as_deref(), clients.1)?;
        *self.acceptor.lock().map_err(|_| poisoned())? = next;
        if close_open {
            self.generation.send_modify(|g| *g += 1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{Ca, Usage};
    use rustls::ClientConfig;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::client::TlsStream;

    fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    /// An upstream that echoes what it reads.
    async fn echo() -> String {
        let listener = ok(TcpListener::bind("127.0.0.1:0").await);
        let address = ok(listener.local_addr()).to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        address
    }

    async fn connect(
        address: &str,
        server_ca: &Ca,
        client: &CertPair,
    ) -> Option<TlsStream<TcpStream>> {
        connect_as(address, server_ca, Some(client)).await
    }

    /// A client with `client`'s certificate, or none.
    async fn connect_as(
        address: &str,
        server_ca: &Ca,
        client: Option<&CertPair>,
    ) -> Option<TlsStream<TcpStream>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(server_ca.cert_pem.as_bytes()) {
            ok(roots.add(ok(c)));
        }
        let builder =
            ok(ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions())
                .with_root_certificates(roots);
        let config = match client {
            Some(client) => {
                let certs: Vec<CertificateDer<'static>> =
                    ok(CertificateDer::pem_slice_iter(client.cert_pem.as_bytes()).collect());
                let key = ok(PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes()));
                ok(builder.with_client_auth_cert(certs, key))
            }
            None => builder.with_no_client_auth(),
        };
        let socket = ok(TcpStream::connect(address).await);
        let name = ok(ServerName::try_from("127.0.0.1"));
        TlsConnector::from(Arc::new(config))
            .connect(name, socket)
            .await
            .ok()
    }

    /// Whether a round trip through `stream` works.
    async fn echoes(stream: &mut TlsStream<TcpStream>) -> bool {
        let trip = async {
            stream.write_all(b"ping").await.ok()?;
            let mut buf = [0u8; 4];
            stream.read_exact(&mut buf).await.ok()?;
            (&buf == b"ping").then_some(())
        };
        matches!(
            tokio::time::timeout(std::time::Duration::from_secs(5), trip).await,
            Ok(Some(()))
        )
    }

    async fn works(address: &str, server_ca: &Ca, client: &CertPair) -> bool {
        match connect(address, server_ca, client).await {
            Some(mut s) => echoes(&mut s).await,
            None => false,
        }
    }

    /// A rotation to a new client CA: the old certificates stop working at once, also over the
    /// connections they opened before; a bundle trusts both.
    #[tokio::test]
    async fn a_new_client_ca_closes_the_old_certificates_out() {
        let (old_ca, new_ca) = (ok(Ca::new("old")), ok(Ca::new("new")));
        let server = ok(old_ca.issue(
            "proxy",
            &["127.0.0.1"],
            Usage::Server,
            time::Duration::days(1),
        ));
        let old = ok(old_ca.issue("c", &[], Usage::Client, time::Duration::days(1)));
        let new = ok(new_ca.issue("c", &[], Usage::Client, time::Duration::days(1)));
        let proxy = ok(TlsProxy::start(&echo().await, &server, Some(&old_ca.cert_pem)).await);
        let mut open = connect(&proxy.address, &old_ca, &old)
            .await
            .unwrap_or_else(|| panic!("the old certificate's handshake failed"));
        assert!(echoes(&mut open).await);
        assert!(
            !works(&proxy.address, &old_ca, &new).await,
            "a new certificate before its CA is trusted"
        );

        ok(proxy.trust_clients_of(&new_ca.cert_pem));
        assert!(
            !echoes(&mut open).await,
            "a connection of the old certificate lived on"
        );
        assert!(!works(&proxy.address, &old_ca, &old).await);
        assert!(works(&proxy.address, &old_ca, &new).await);

        ok(proxy.trust_clients_of(&format!("{}{}", old_ca.cert_pem, new_ca.cert_pem)));
        assert!(works(&proxy.address, &old_ca, &old).await);
        assert!(works(&proxy.address, &old_ca, &new).await);
    }

    /// Clients without a certificate let in (API keys): one with an untrusted certificate is
    /// still refused.
    #[tokio::test]
    async fn clients_without_a_certificate_may_be_let_in_never_untrusted_ones() {
        let (ca, other) = (ok(Ca::new("ca")), ok(Ca::new("other")));
        let server = ok(ca.issue(
            "proxy",
            &["127.0.0.1"],
            Usage::Server,
            time::Duration::days(1),
        ));
        let trusted = ok(ca.issue("c", &[], Usage::Client, time::Duration::days(1)));
        let untrusted = ok(other.issue("c", &[], Usage::Client, time::Duration::days(1)));
        let proxy = ok(TlsProxy::start(&echo().await, &server, Some(&ca.cert_pem)).await);
        let bare = |proxy: &TlsProxy| {
            let address = proxy.address.clone();
            let ca = &ca;
            async move {
                match connect_as(&address, ca, None).await {
                    Some(mut s) => echoes(&mut s).await,
                    None => false,
                }
            }
        };
        assert!(!bare(&proxy).await, "no certificate, before");
        ok(proxy.let_in_clients_without_certificate(true));
        assert!(bare(&proxy).await, "no certificate, after");
        assert!(works(&proxy.address, &ca, &trusted).await);
        assert!(!works(&proxy.address, &ca, &untrusted).await);
        ok(proxy.let_in_clients_without_certificate(false));
        assert!(!bare(&proxy).await, "no certificate, once required again");
    }
}
