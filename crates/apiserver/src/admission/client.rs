//! The HTTPS client the chain calls webhooks with: rustls verifying the
//! webhook's certificate against its `caBundle`, hyper-util's pooled client
//! (one per distinct bundle, so connections are kept alive between
//! requests), and `clientConfig.service` hosts (`name.namespace.svc`)
//! resolved through the server's service → address map.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// Boxed error.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `clientConfig.service` (namespace, name, port) → where it listens.
pub(crate) type ServiceMap = Arc<RwLock<HashMap<(String, String, u16), SocketAddr>>>;

/// A TLS connection hyper can use.
pub(crate) struct TlsIo(TokioIo<tokio_rustls::client::TlsStream<TcpStream>>);

impl hyper::rt::Read for TlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TlsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl Connection for TlsIo {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

/// Connects `https://host:port` URIs: service hosts through the map, others
/// through DNS; the TLS server name is always the URI's host.
#[derive(Clone)]
pub(crate) struct Connector {
    tls: tokio_rustls::TlsConnector,
    services: ServiceMap,
}

impl tower::Service<http::Uri> for Connector {
    type Response = TlsIo;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TlsIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let host = uri.host().ok_or("the webhook URL has no host")?;
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().unwrap_or(443);
            let addr = match service_of(&host) {
                Some((name, ns)) => {
                    let key = (ns.to_string(), name.to_string(), port);
                    let found = this.services.read().ok().and_then(|m| m.get(&key).copied());
                    found.ok_or_else(|| {
                        format!(
                            "service \"{ns}/{name}\" port {port} has no address (map it with `kubeforge up --webhook-service {ns}/{name}:{port}=HOST:PORT` or ApiServer::set_service_address)"
                        )
                    })?
                }
                None => tokio::net::lookup_host((host.as_str(), port))
                    .await?
                    .next()
                    .ok_or_else(|| format!("no address for {host}"))?,
            };
            let tcp = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("dial tcp {addr}: {e}"))?;
            let _ = tcp.set_nodelay(true);
            let name = rustls::pki_types::ServerName::try_from(host)
                .map_err(|e| format!("invalid server name: {e}"))?;
            let tls = this.tls.connect(name, tcp).await?;
            Ok(TlsIo(TokioIo::new(tls)))
        })
    }
}

/// `name.namespace.svc` → (name, namespace).
fn service_of(host: &str) -> Option<(&str, &str)> {
    let rest = host
        .strip_suffix(".svc")
        .or_else(|| host.strip_suffix(".svc.cluster.local"))?;
    let (name, ns) = rest.split_once('.')?;
    (!ns.contains('.')).then_some((name, ns))
}

/// A pooled HTTPS client.
pub(crate) type HttpsClient = Client<Connector, Full<Bytes>>;

/// Clients by CA bundle.
#[derive(Default)]
pub(crate) struct Clients {
    by_bundle: Mutex<HashMap<Vec<u8>, HttpsClient>>,
}

impl Clients {
    /// The client trusting `ca_bundle` (PEM); an error when it holds no
    /// usable certificate.
    pub fn get(&self, ca_bundle: &[u8], services: &ServiceMap) -> Result<HttpsClient, String> {
        if let Ok(m) = self.by_bundle.lock()
            && let Some(c) = m.get(ca_bundle)
        {
            return Ok(c.clone());
        }
        let client = build(ca_bundle, services.clone())?;
        if let Ok(mut m) = self.by_bundle.lock() {
            m.insert(ca_bundle.to_vec(), client.clone());
        }
        Ok(client)
    }
}

fn build(ca_bundle: &[u8], services: ServiceMap) -> Result<HttpsClient, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle) {
        let cert = cert.map_err(|e| format!("clientConfig.caBundle: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("clientConfig.caBundle: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = Connector {
        tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        services,
    };
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .build(connector))
}

/// The error chain of a failed call, innermost causes included.
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn service_hosts() {
        assert_eq!(super::service_of("hook.ns.svc"), Some(("hook", "ns")));
        assert_eq!(super::service_of("127.0.0.1"), None);
        assert_eq!(super::service_of("a.b.c.svc"), None);
    }
}
