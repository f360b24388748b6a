//! Admission webhook servers: controller-runtime's `webhook` package for
//! kube-rs types.
//!
//! A [`WebhookServer`] serves HTTPS (rustls, HTTP/1.1) on `:9443` by
//! default. Each path is one webhook: a [`Validator<K>`] answers allowed or
//! denied (with warnings), a [`Defaulter<K>`] changes a typed object and the
//! server computes the JSONPatch, a [`ReviewHandler`] sees the raw
//! `AdmissionReview` bytes. Requests and answers are kube-core's
//! `kube::core::admission` types. Serving certificates come from a
//! directory (`tls.crt`, `tls.key`) and are reloaded when the files
//! change; [`DevCerts`] makes a CA and a certificate for development and
//! writes the CA bundle for the webhook configuration. Metrics follow
//! controller-runtime: `controller_runtime_webhook_requests_total{webhook,
//! code}`, `controller_runtime_webhook_latency_seconds{webhook}` and
//! `controller_runtime_webhook_requests_in_flight{webhook}`.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Pod;
//! use kube::core::admission::AdmissionRequest;
//! use kubeforge_runtime::webhook::{Verdict, WebhookServer};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = WebhookServer::builder()
//!     .cert_dir("certs".into())
//!     .validator("/validate-pods", |req: &AdmissionRequest<Pod>| {
//!         match req.object.as_ref().and_then(|p| p.metadata.labels.as_ref()) {
//!             Some(l) if l.contains_key("team") => Verdict::allow(),
//!             _ => Verdict::deny("every pod needs a team label"),
//!         }
//!     })
//!     .bind()
//!     .await?;
//! println!("caBundle: {}", server.ca_bundle());
//! server.run(std::future::pending()).await?;
//! # Ok(()) }
//! ```

mod certs;
mod config;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use certs::{CA_FILE, CERT_FILE, DevCerts, KEY_FILE};
pub use config::{
    Target, inject_ca_bundle, mutating_configuration, mutating_configuration_with,
    service_client_config, validating_configuration, validating_configuration_with,
};

/// The default listen address (controller-runtime's port).
pub const DEFAULT_ADDR: &str = "0.0.0.0:9443";
/// Largest AdmissionReview accepted (kube-apiserver sends objects up to ~3 MiB).
pub const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;

/// Why the webhook server could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A certificate or key could not be made or loaded.
    #[error("webhook certificate: {0}")]
    Certificate(String),
    /// The listen address could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What went wrong.
        source: std::io::Error,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Tls(String),
}

impl WebhookError {
    fn io(path: &Path, source: std::io::Error) -> WebhookError {
        WebhookError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A webhook's answer: allowed or denied, with warnings for the user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Why it was denied (shown as `admission webhook "x" denied the request: …`).
    pub message: String,
    /// Warnings, shown by kubectl as `Warning: …`.
    pub warnings: Vec<String>,
}

impl Verdict {
    /// Allowed.
    pub fn allow() -> Verdict {
        Verdict {
            allowed: true,
            ..Verdict::default()
        }
    }

    /// Denied with a message.
    pub fn deny(message: impl Into<String>) -> Verdict {
        Verdict {
            allowed: false,
            message: message.into(),
            warnings: Vec::new(),
        }
    }

    /// Add a warning.
    #[must_use]
    pub fn warn(mut self, warning: impl Into<String>) -> Verdict {
        self.warnings.push(warning.into());
        self
    }
}

/// A validating webhook for objects of type `K`.
pub trait Validator<K: Resource>: Send + Sync + 'static {
    /// Decide on one request (`req.object` is absent on DELETE;
    /// `req.old_object` is set on UPDATE and DELETE).
    fn validate(&self, req: &AdmissionRequest<K>) -> Verdict;
}

impl<K: Resource, F> Validator<K> for F
where
    F: Fn(&AdmissionRequest<K>) -> Verdict + Send + Sync + 'static,
{
    fn validate(&self, req: &AdmissionRequest<K>) -> Verdict {
        self(req)
    }
}

/// A mutating webhook for objects of type `K`: change `obj` in place and
/// the server answers with the JSONPatch from the request's object to it.
pub trait Defaulter<K: Resource>: Send + Sync + 'static {
    /// Change `obj` (a copy of `req.object`); a denying verdict refuses the
    /// request instead.
    fn default(&self, req: &AdmissionRequest<K>, obj: &mut K) -> Verdict;
}

impl<K: Resource, F> Defaulter<K> for F
where
    F: Fn(&AdmissionRequest<K>, &mut K) -> Verdict + Send + Sync + 'static,
{
    fn default(&self, req: &AdmissionRequest<K>, obj: &mut K) -> Verdict {
        self(req, obj)
    }
}

/// What a [`ReviewHandler`] returns: the response, or a message for a 400.
pub type ReviewFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<AdmissionResponse, String>> + Send + 'a>,
>;

/// The untyped layer: one `AdmissionReview` body in, a response out, or a
/// message for a 400 when the body is not a usable AdmissionReview. May
/// await (to read the cluster, for instance).
pub trait ReviewHandler: Send + Sync + 'static {
    /// Answer one review.
    fn review<'a>(&'a self, body: &'a [u8]) -> ReviewFuture<'a>;
}

/// What a [`JsonHandler`] returns: the JSON answer, or a message for a 400.
pub type JsonFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<serde_json::Value, String>> + Send + 'a>,
>;

/// A webhook that is not admission: one JSON body in (an authorization
/// webhook's SubjectAccessReview, say), one JSON document out, or a message
/// for a 400. Served with the same TLS, limits and metrics.
pub trait JsonHandler: Send + Sync + 'static {
    /// Answer one request body.
    fn answer<'a>(&'a self, body: &'a [u8]) -> JsonFuture<'a>;
}

/// A route's handler.
#[derive(Clone)]
enum Handler {
    Admission(Arc<dyn ReviewHandler>),
    Json(Arc<dyn JsonHandler>),
}

/// Parse and check an AdmissionReview v1 request body.
pub fn parse_review<K>(body: &[u8]) -> Result<AdmissionRequest<K>, String>
where
    K: Resource + DeserializeOwned,
{
    let review: AdmissionReview<K> =
        serde_json::from_slice(body).map_err(|e| format!("malformed AdmissionReview: {e}"))?;
    if review.types.kind != "AdmissionReview" {
        return Err(format!(
            "expected kind AdmissionReview, got {:?}",
            review.types.kind
        ));
    }
    if review.types.api_version != "admission.k8s.io/v1" {
        return Err(format!(
            "expected apiVersion admission.k8s.io/v1, got {:?}",
            review.types.api_version
        ));
    }
    let req: AdmissionRequest<K> = review
        .try_into()
        .map_err(|_| "the AdmissionReview has no request".to_string())?;
    if req.uid.is_empty() {
        return Err("request.uid is missing".into());
    }
    Ok(req)
}

/// Turn a verdict into kube-core's response for `req`.
pub fn respond<K: Resource>(req: &AdmissionRequest<K>, v: Verdict) -> AdmissionResponse {
    let mut r = AdmissionResponse::from(req);
    if !v.allowed {
        r = r.deny(v.message);
        r.result.code = 403;
        r.result.reason = "Forbidden".into();
    }
    if !v.warnings.is_empty() {
        r.warnings = Some(v.warnings);
    }
    r
}

struct ValidatorHandler<K, V>(V, PhantomData<fn() -> K>);

impl<K, V> ReviewHandler for ValidatorHandler<K, V>
where
    K: Resource + DeserializeOwned + 'static,
    V: Validator<K>,
{
    fn review<'a>(&'a self, body: &'a [u8]) -> ReviewFuture<'a> {
        let out = parse_review::<K>(body).map(|req| {
            let v = self.0.validate(&req);
            respond(&req, v)
        });
        Box::pin(std::future::ready(out))
    }
}

struct DefaulterHandler<K, D>(D, PhantomData<fn() -> K>);

impl<K, D> ReviewHandler for DefaulterHandler<K, D>
where
    K: Resource + DeserializeOwned + Serialize + Clone + 'static,
    D: Defaulter<K>,
{
    fn review<'a>(&'a self, body: &'a [u8]) -> ReviewFuture<'a> {
        Box::pin(std::future::ready(self.answer(body)))
    }
}

impl<K, D> DefaulterHandler<K, D>
where
    K: Resource + DeserializeOwned + Serialize + Clone + 'static,
    D: Defaulter<K>,
{
    fn answer(&self, body: &[u8]) -> Result<AdmissionResponse, String> {
        let req = parse_review::<K>(body)?;
        let Some(original) = req.object.clone() else {
            return Ok(AdmissionResponse::from(&req));
        };
        let mut obj = original.clone();
        let v = self.0.default(&req, &mut obj);
        if !v.allowed {
            return Ok(respond(&req, v));
        }
        let patch = json_patch_between(&original, &obj)?;
        let mut r = respond(&req, v);
        if !patch.0.is_empty() {
            r = r
                .with_patch(patch)
                .map_err(|e| format!("encoding the patch: {e}"))?;
        }
        Ok(r)
    }
}

/// The JSONPatch turning `before` into `after`.
pub fn json_patch_between<K: Serialize>(
    before: &K,
    after: &K,
) -> Result<json_patch::Patch, String> {
    let b = serde_json::to_value(before).map_err(|e| e.to_string())?;
    let a = serde_json::to_value(after).map_err(|e| e.to_string())?;
    Ok(json_patch::diff(&b, &a))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    webhook: String,
    code: String,
}

/// controller-runtime's webhook metrics.
#[derive(Clone)]
struct WebhookMetrics {
    requests: Family<CodeLabels, Counter>,
    latency: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<WebhookLabels, Gauge>,
}

fn latency_histogram() -> Histogram {
    // prometheus.DefBuckets, as controller-runtime uses.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl WebhookMetrics {
    fn register(registry: &mut Registry) -> WebhookMetrics {
        let m = WebhookMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            in_flight: Family::default(),
        };
        // The encoder appends `_total` to counters.
        registry.register(
            "controller_runtime_webhook_requests",
            "Total number of admission requests by HTTP status code.",
            m.requests.clone(),
        );
        registry.register(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            m.latency.clone(),
        );
        registry.register(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            m.in_flight.clone(),
        );
        m
    }
}

/// Builds a [`WebhookServer`].
#[must_use]
pub struct WebhookServerBuilder {
    addr: SocketAddr,
    cert_dir: PathBuf,
    hosts: Vec<String>,
    routes: Vec<(String, Handler)>,
    reload_every: Duration,
}

impl WebhookServerBuilder {
    /// Listen address (default `0.0.0.0:9443`; port 0 picks a free one).
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Directory with `tls.crt` and `tls.key`; when they are missing,
    /// development certificates are made there (see [`DevCerts`]).
    pub fn cert_dir(mut self, dir: PathBuf) -> Self {
        self.cert_dir = dir;
        self
    }

    /// Names the development certificate is valid for (default
    /// `localhost` and `127.0.0.1`).
    pub fn hosts(mut self, hosts: Vec<String>) -> Self {
        self.hosts = hosts;
        self
    }

    /// How often the certificate files are checked for changes (default 1 s).
    pub fn reload_every(mut self, every: Duration) -> Self {
        self.reload_every = every;
        self
    }

    /// Serve a validating webhook at `path`.
    pub fn validator<K, V>(self, path: &str, v: V) -> Self
    where
        K: Resource + DeserializeOwned + 'static,
        V: Validator<K>,
    {
        self.handler(path, Arc::new(ValidatorHandler(v, PhantomData)))
    }

    /// Serve a mutating webhook at `path`.
    pub fn defaulter<K, D>(self, path: &str, d: D) -> Self
    where
        K: Resource + DeserializeOwned + Serialize + Clone + 'static,
        D: Defaulter<K>,
    {
        self.handler(path, Arc::new(DefaulterHandler(d, PhantomData)))
    }

    /// Serve an untyped handler at `path`.
    pub fn handler(mut self, path: &str, h: Arc<dyn ReviewHandler>) -> Self {
        self.routes.push((path.to_string(), Handler::Admission(h)));
        self
    }

    /// Serve a non-admission JSON handler at `path`.
    pub fn json_handler(mut self, path: &str, h: Arc<dyn JsonHandler>) -> Self {
        self.routes.push((path.to_string(), Handler::Json(h)));
        self
    }

    /// Load (or make) the certificates and bind the listener.
    pub async fn bind(self) -> Result<WebhookServer, WebhookError> {
        let certs = DevCerts::load_or_generate(&self.cert_dir, &self.hosts)?;
        let resolver =
            certs::Reloading::new(self.cert_dir.join(CERT_FILE), self.cert_dir.join(KEY_FILE))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| WebhookError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .map_err(|source| WebhookError::Bind {
                addr: self.addr,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| WebhookError::Bind {
            addr: self.addr,
            source,
        })?;
        let mut registry = Registry::default();
        let metrics = WebhookMetrics::register(&mut registry);
        let routes: HashMap<String, Handler> = self.routes.into_iter().collect();
        Ok(WebhookServer {
            listener,
            local,
            tls: Arc::new(tls),
            resolver,
            reload_every: self.reload_every,
            ca_bundle: certs.ca_bundle,
            routes: Arc::new(routes),
            metrics,
            registry: Arc::new(registry),
        })
    }
}

/// A bound webhook server; [`WebhookServer::run`] serves it.
pub struct WebhookServer {
    listener: tokio::net::TcpListener,
    local: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    resolver: Arc<certs::Reloading>,
    reload_every: Duration,
    ca_bundle: String,
    routes: Arc<HashMap<String, Handler>>,
    metrics: WebhookMetrics,
    registry: Arc<Registry>,
}

impl WebhookServer {
    /// Start building a server.
    pub fn builder() -> WebhookServerBuilder {
        WebhookServerBuilder {
            addr: DEFAULT_ADDR
                .parse()
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 9443))),
            cert_dir: PathBuf::from("certs"),
            hosts: vec!["localhost".into(), "127.0.0.1".into()],
            routes: Vec::new(),
            reload_every: Duration::from_secs(1),
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `https://{address}{path}`: the URL of one of this server's webhooks.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.local)
    }

    /// The CA bundle (PEM) for `clientConfig.caBundle` (base64 it there).
    pub fn ca_bundle(&self) -> &str {
        &self.ca_bundle
    }

    /// A handle reading the metrics as OpenMetrics text.
    pub fn metrics(&self) -> MetricsHandle {
        MetricsHandle(self.registry.clone())
    }

    /// Serve until `shutdown` resolves.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), WebhookError> {
        let reloader = tokio::spawn(self.resolver.clone().watch(self.reload_every));
        let routes = Arc::new(routes(&self.routes, &self.metrics));
        let acceptor = tokio_rustls::TlsAcceptor::from(self.tls.clone());
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (stream, _) = tokio::select! {
                r = self.listener.accept() => match r {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a webhook connection failed");
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let _ = stream.set_nodelay(true);
            let acceptor = acceptor.clone();
            let routes = routes.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(stream).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                };
                let svc = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| {
                        let routes = routes.clone();
                        async move { Ok::<_, std::convert::Infallible>(dispatch(&routes, req).await) }
                    },
                );
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await
                {
                    tracing::debug!(error = %e, "webhook connection ended");
                }
            });
        }
        reloader.abort();
        Ok(())
    }
}

/// Reads the webhook server's metrics.
#[derive(Clone)]
pub struct MetricsHandle(Arc<Registry>);

impl MetricsHandle {
    /// The metrics as OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.0).is_err() {
            out.clear();
        }
        out
    }
}

/// One served path: its handler and its metric handles, resolved once
/// (no label strings built or family maps searched per request).
struct Route {
    path: String,
    handler: Handler,
    latency: Histogram,
    in_flight: Gauge,
    ok: Counter,
    metrics: WebhookMetrics,
}

type Routes = HashMap<String, Route>;

fn routes(handlers: &HashMap<String, Handler>, m: &WebhookMetrics) -> Routes {
    handlers
        .iter()
        .map(|(path, h)| {
            let labels = WebhookLabels {
                webhook: path.clone(),
            };
            let route = Route {
                path: path.clone(),
                handler: h.clone(),
                latency: m.latency.get_or_create(&labels).clone(),
                in_flight: m.in_flight.get_or_create(&labels).clone(),
                ok: m
                    .requests
                    .get_or_create(&CodeLabels {
                        webhook: path.clone(),
                        code: "200".into(),
                    })
                    .clone(),
                metrics: m.clone(),
            };
            (path.clone(), route)
        })
        .collect()
}

fn plain(status: http::StatusCode, msg: String) -> axum::response::Response {
    (status, msg).into_response()
}

/// Route one request: a POST to a webhook path, its body read up to
/// [`MAX_REVIEW_BYTES`]. Plain service code instead of an axum Router:
/// this is the whole routing table, and it runs for every review.
async fn dispatch(
    routes: &Routes,
    req: http::Request<hyper::body::Incoming>,
) -> axum::response::Response {
    let Some(route) = routes.get(req.uri().path()) else {
        return plain(
            http::StatusCode::NOT_FOUND,
            format!("no webhook is served at {}", req.uri().path()),
        );
    };
    if req.method() != http::Method::POST {
        let mut r = plain(
            http::StatusCode::METHOD_NOT_ALLOWED,
            "reviews are POSTed".into(),
        );
        r.headers_mut()
            .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
        return r;
    }
    // Read up to the limit (as axum's body limit does: the client has sent
    // its body by the time it reads the 413, so it sees the answer rather
    // than a reset).
    let body = axum::body::Body::new(req.into_body());
    let body = match axum::body::to_bytes(body, MAX_REVIEW_BYTES).await {
        Ok(b) => b,
        // Past the limit, or the client went away mid-body.
        Err(_) => {
            return plain(
                http::StatusCode::PAYLOAD_TOO_LARGE,
                format!("the AdmissionReview is larger than {MAX_REVIEW_BYTES} bytes"),
            );
        }
    };
    serve_review(route, &body).await
}

async fn serve_review(route: &Route, body: &[u8]) -> axum::response::Response {
    // Decremented on drop, so a request abandoned mid-way (client gone)
    // still leaves the gauge.
    struct InFlight<'a>(&'a Gauge);
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            self.0.dec();
        }
    }
    route.in_flight.inc();
    let in_flight = InFlight(&route.in_flight);
    let started = Instant::now();
    let answer = match &route.handler {
        Handler::Admission(h) => h
            .review(body)
            .await
            .and_then(|r| serde_json::to_value(r.into_review()).map_err(|e| e.to_string())),
        Handler::Json(h) => h.answer(body).await,
    };
    let (code, resp) = match answer {
        Ok(r) => match serde_json::to_vec(&r) {
            Ok(b) => (
                http::StatusCode::OK,
                ([(http::header::CONTENT_TYPE, "application/json")], b).into_response(),
            ),
            Err(e) => (
                http::StatusCode::INTERNAL_SERVER_ERROR,
                plain(http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            ),
        },
        Err(msg) => {
            tracing::debug!(webhook = %route.path, error = %msg, "bad AdmissionReview");
            (
                http::StatusCode::BAD_REQUEST,
                plain(http::StatusCode::BAD_REQUEST, msg),
            )
        }
    };
    route.latency.observe(started.elapsed().as_secs_f64());
    if code == http::StatusCode::OK {
        route.ok.inc();
    } else {
        route
            .metrics
            .requests
            .get_or_create(&CodeLabels {
                webhook: route.path.clone(),
                code: code.as_u16().to_string(),
            })
            .inc();
    }
    drop(in_flight);
    resp
}
