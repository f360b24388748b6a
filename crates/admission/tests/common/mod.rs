//! Shared test helpers: an embedded API server on loopback with a
//! kubeconfig, webhook servers on free ports, and a small HTTPS client.

#![allow(dead_code, missing_docs)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kubeforge_apiserver::ApiServer;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p =
            std::env::temp_dir().join(format!("kubeforge-adm-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An in-memory API server and an in-process kube-rs client.
pub async fn cluster() -> (ApiServer, kube::Client) {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    (server, client)
}

/// Serve `server` on a loopback port and write a kubeconfig for it.
pub async fn serve_loopback(server: &ApiServer, dir: &std::path::Path) -> (SocketAddr, PathBuf) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: k\n  context:\n    cluster: k\n    user: u\n    namespace: default\ncurrent-context: k\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .expect("kubeconfig");
    (addr, kubeconfig)
}

/// base64 of a CA bundle, for `clientConfig.caBundle`.
pub fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// One HTTPS connection to a webhook server trusting `ca`.
pub struct Https {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Https {
    pub async fn connect(addr: SocketAddr, ca: &str) -> Https {
        use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(c.expect("ca pem")).expect("add ca");
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("tls versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
            .await
            .expect("tls handshake");
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .expect("http handshake");
        tokio::spawn(conn);
        Https { sender }
    }

    /// POST `body` to `path`; status and body.
    pub async fn post(&mut self, path: &str, body: Vec<u8>) -> (u16, Bytes) {
        self.post_bytes(path, Bytes::from(body)).await
    }

    /// GET `path`; status and body.
    pub async fn get(&mut self, path: &str) -> (u16, Bytes) {
        self.sender.ready().await.expect("ready");
        let req = http::Request::get(path)
            .header("host", "127.0.0.1")
            .body(Full::new(Bytes::new()))
            .expect("request");
        let resp = self.sender.send_request(req).await.expect("send");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, body)
    }

    /// POST `body` (shared, not copied) to `path`; status and body.
    pub async fn post_bytes(&mut self, path: &str, body: Bytes) -> (u16, Bytes) {
        self.sender.ready().await.expect("ready");
        let req = http::Request::post(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(body))
            .expect("request");
        let resp = self.sender.send_request(req).await.expect("send");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, body)
    }

    /// POST `body` to `path`; status, body, when the request was handed to
    /// hyper (connection ready) and when the response headers arrived.
    pub async fn post_timed(
        &mut self,
        path: &str,
        body: Bytes,
    ) -> (u16, Bytes, std::time::Instant, std::time::Instant) {
        self.sender.ready().await.expect("ready");
        let req = http::Request::post(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(body))
            .expect("request");
        let sent = std::time::Instant::now();
        let resp = self.sender.send_request(req).await.expect("send");
        let head = std::time::Instant::now();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, body, sent, head)
    }
}

/// A free loopback port nothing listens on.
pub async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    l.local_addr().expect("addr").port()
}

/// Apply a webhook configuration (JSON with apiVersion and kind).
pub async fn apply_config(client: &kube::Client, v: serde_json::Value) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use kube::api::{Api, Patch, PatchParams};
    let name = v["metadata"]["name"].as_str().expect("name").to_string();
    let pp = PatchParams::apply("test").force();
    if v["kind"] == "MutatingWebhookConfiguration" {
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .patch(&name, &pp, &Patch::Apply(&v))
            .await
            .expect("apply mutating configuration");
    } else {
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .patch(&name, &pp, &Patch::Apply(&v))
            .await
            .expect("apply validating configuration");
    }
}

/// The Status message of a failed kube-rs call.
pub fn status_of(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("expected an API error, got {other}"),
    }
}

/// Apply a policy and wait until the server reports it (Ready with this generation).
pub async fn apply_policy(
    client: &kube::Client,
    name: &str,
    spec: serde_json::Value,
) -> (String, String) {
    use kube::api::{Api, Patch, PatchParams};
    use kubeforge_admission::AdmissionPolicy;
    let api: Api<AdmissionPolicy> = Api::all(client.clone());
    let p = serde_json::json!({"apiVersion": "policy.kubeforge.dev/v1alpha1", "kind": "AdmissionPolicy", "metadata": {"name": name}, "spec": spec});
    let applied = api
        .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&p))
        .await
        .expect("apply policy");
    let generation = applied.metadata.generation;
    for _ in 0..200 {
        let cur = api.get(name).await.expect("get policy");
        if let Some(c) = cur
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            && c.observed_generation == generation
        {
            return (c.status.clone(), c.message.clone());
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("policy {name} never reported Ready for generation {generation:?}");
}
