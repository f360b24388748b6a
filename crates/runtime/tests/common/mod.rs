//! Helpers shared by the runtime's integration tests: an embedded API
//! server with a tapped client (requests logged, optionally held back), raw
//! HTTP GETs against the manager's admin server, metric lookups.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use kube::Client;
use kubeforge_apiserver::ApiServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tower::ServiceExt;

/// A client whose requests are logged (method, URI, Accept header) and held until the
/// gate is open.
pub struct Tapped {
    pub client: Client,
    pub gate: watch::Sender<bool>,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Tapped {
    /// The logged requests whose URI contains every one of `parts`.
    pub fn count(&self, parts: &[&str]) -> usize {
        self.log
            .lock()
            .map(|l| {
                l.iter()
                    .filter(|u| parts.iter().all(|p| u.contains(p)))
                    .count()
            })
            .unwrap_or(0)
    }
}

pub fn tapped_client(server: &ApiServer, open: bool) -> Tapped {
    gated_client(server, open, "")
}

/// As [`tapped_client`], but only requests whose URI contains `held` wait
/// for the gate.
pub fn gated_client(server: &ApiServer, open: bool, held: &'static str) -> Tapped {
    let (gate, rx) = watch::channel(open);
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let svc = server.service();
    let log2 = log.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        if let Ok(mut l) = log2.lock() {
            let accept = req
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            l.push(format!("{} {} accept={accept}", req.method(), req.uri()));
        }
        let svc = svc.clone();
        let mut rx = rx.clone();
        let wait = req.uri().to_string().contains(held);
        async move {
            if wait {
                let _ = rx.wait_for(|open| *open).await;
            }
            svc.oneshot(req).await
        }
    });
    Tapped {
        client: Client::new(service, "default"),
        gate,
        log,
    }
}

/// A bound loopback listener for the admin server, and its address.
pub fn admin_listener() -> (std::net::TcpListener, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = l.local_addr().expect("local addr");
    (l, addr)
}

/// `GET path` over a plain TCP connection: (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect admin server");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write request");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read response");
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The value of the sample `series` (name with its exact label set, as
/// exposed) in OpenMetrics text.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

pub use kubeforge_testenv::eventually;
