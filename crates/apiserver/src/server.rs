//! The server: shared state, request dispatch, the loopback listener and the
//! in-process transport.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kubeforge_store::Store;
use serde_json::json;

use crate::body::ApiBody;
use crate::codec::{self, MAX_BODY};
use crate::error::{ApiError, ApiResult};
use crate::registry::Registry;
use crate::request::{Query, Route, route};
use kubeforge_authz::UserInfo;

/// The Kubernetes version this server reports in `/version`.
pub const KUBERNETES_VERSION: (&str, &str, &str) = ("1", "33", "v1.33.0");

/// A running API server's shared state; cheap to clone.
#[derive(Clone)]
pub struct ApiServer {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub store: Store,
    pub registry: Registry,
    pub openapi: crate::discovery::OpenApiCache,
    /// Address advertised in `/api` (serverAddressByClientCIDRs).
    pub advertise: std::sync::RwLock<String>,
    /// Whether the advertised address was given ([`ApiServer::advertise_at`]),
    /// so listeners do not replace it with theirs.
    advertise_pinned: std::sync::atomic::AtomicBool,
    /// Whether a garbage collector runs (Foreground/Orphan deletion then
    /// waits for it through finalizers).
    pub gc: std::sync::atomic::AtomicBool,
    /// Whether a namespace controller runs (deleting a namespace then marks
    /// it Terminating and waits for `PUT namespaces/{name}/finalize`).
    pub namespace_controller: std::sync::atomic::AtomicBool,
    /// Whether something finishes graceful pod deletion (a kubelet or a
    /// node simulator): bound pods are then deleted gracefully.
    pub graceful_pods: std::sync::atomic::AtomicBool,
    /// Whether the ServiceAccount admission mounts API credentials in pods.
    service_account_tokens: std::sync::atomic::AtomicBool,
    /// The admission chain (webhook configurations, clients, service map).
    pub admission: crate::admission::Admission,
    /// The `default/kubernetes` Service and APIService loop, and what
    /// `componentstatuses` reports.
    pub bootstrap: crate::bootstrap::State,
    /// Authentication settings and the authorizers.
    pub access: crate::authz::Access,
    /// What `/metrics` serves.
    pub metrics: crate::metrics::ApiMetrics,
    /// How `pods/log` reaches kubelets (none: such requests fail).
    pub kubelet: std::sync::RwLock<Option<crate::nodeproxy::KubeletClient>>,
    /// What serves `metrics.k8s.io` (none: the group is not served).
    pub metrics_provider:
        std::sync::RwLock<Option<std::sync::Arc<dyn crate::resource_metrics::MetricsProvider>>>,
}

impl ApiServer {
    /// A server over `store`, restoring CRDs already in it and creating the
    /// default namespaces (`default`, `kube-system`, `kube-public`,
    /// `kube-node-lease`) when missing, and the objects every cluster has
    /// (Service `default/kubernetes` with its endpoints, an APIService per
    /// group-version), which a background task keeps in place.
    pub async fn new(store: Store) -> Result<ApiServer, ApiError> {
        let server = ApiServer {
            inner: Arc::new(Inner {
                store,
                registry: Registry::with_builtins(),
                openapi: Default::default(),
                advertise: std::sync::RwLock::new("127.0.0.1:6443".into()),
                advertise_pinned: std::sync::atomic::AtomicBool::new(false),
                gc: std::sync::atomic::AtomicBool::new(false),
                namespace_controller: std::sync::atomic::AtomicBool::new(false),
                graceful_pods: std::sync::atomic::AtomicBool::new(false),
                service_account_tokens: std::sync::atomic::AtomicBool::new(false),
                admission: Default::default(),
                bootstrap: Default::default(),
                access: Default::default(),
                metrics: Default::default(),
                kubelet: Default::default(),
                metrics_provider: Default::default(),
            }),
        };
        let issuer =
            kubeforge_authz::satoken::TokenIssuer::generate(crate::satokens::DEFAULT_ISSUER)
                .map_err(|e| ApiError::internal(e.to_string()))?;
        server.set_token_issuer(issuer);
        crate::crd::restore(&server)?;
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            crate::rest::ensure_namespace(&server, ns).await?;
        }
        crate::priority::ensure_system_classes(&server).await?;
        crate::rbac_defaults::ensure(&server).await?;
        crate::rbac_components::ensure(&server).await?;
        crate::bootstrap::start(&server).await?;
        crate::node_authz::start(&server);
        Ok(server)
    }

    /// A server over a fresh memory store.
    pub async fn in_memory() -> ApiServer {
        match ApiServer::new(Store::memory()).await {
            Ok(s) => s,
            // Creating namespaces in an empty memory store cannot fail.
            Err(e) => unreachable!("fresh memory store: {e}"),
        }
    }

    /// Declare that a garbage collector runs against this server, so
    /// Foreground and Orphan deletions add their finalizers.
    pub fn set_gc_enabled(&self, on: bool) {
        self.inner
            .gc
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a garbage collector was declared.
    pub fn gc_enabled(&self) -> bool {
        self.inner.gc.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Declare that a namespace controller runs against this server.
    ///
    /// With one, deleting a namespace marks it `Terminating` (with a
    /// `deletionTimestamp`) and the namespace is removed once its
    /// `spec.finalizers` are emptied through `namespaces/{name}/finalize`,
    /// as on a real cluster. Without one (the default, so the server alone
    /// stays usable), deleting a namespace deletes its contents at once.
    pub fn set_namespace_controller(&self, on: bool) {
        self.inner
            .namespace_controller
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a namespace controller was declared.
    pub fn namespace_controller_enabled(&self) -> bool {
        self.inner
            .namespace_controller
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Declare the built-in controllers (garbage collector and namespace
    /// controller) running or not: both [`Self::set_gc_enabled`] and
    /// [`Self::set_namespace_controller`].
    pub fn set_controllers_running(&self, on: bool) {
        self.set_gc_enabled(on);
        self.set_namespace_controller(on);
    }

    /// Declare that something finishes graceful pod deletion (a kubelet or
    /// a node simulator). Then deleting a pod bound to a node sets
    /// `deletionTimestamp` and `deletionGracePeriodSeconds` (the request's
    /// `gracePeriodSeconds`, else the pod's
    /// `terminationGracePeriodSeconds`) and leaves the pod for it to delete
    /// with a grace period of 0. Off by default: pods are deleted at once.
    pub fn set_graceful_pod_deletion(&self, on: bool) {
        self.inner
            .graceful_pods
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Mount API credentials in pods (the ServiceAccount admission's
    /// `kube-api-access-*` volume), for a cluster whose pods can use them:
    /// its root CA published as `kube-root-ca.crt` and a kubelet that
    /// requests tokens. Off by default, as envtest's kube-apiserver runs
    /// with the ServiceAccount admission plugin disabled; `kubeforge up`
    /// turns it on.
    pub fn set_service_account_tokens(&self, on: bool) {
        self.inner
            .service_account_tokens
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether pods get API credentials mounted.
    pub fn service_account_tokens(&self) -> bool {
        self.inner
            .service_account_tokens
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether graceful pod deletion was declared.
    pub fn graceful_pod_deletion(&self) -> bool {
        self.inner
            .graceful_pods
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Compact the store every `every`, keeping the last `keep` revisions of
    /// history (watches and lists from older revisions get 410 Expired), as
    /// kube-apiserver compacts etcd every five minutes. Runs until the store
    /// closes.
    pub fn start_compaction(
        &self,
        every: std::time::Duration,
        keep: u64,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.inner.store.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let target = store.current_revision().saturating_sub(keep);
                if target <= store.compacted_revision() {
                    continue;
                }
                match store.compact(target).await {
                    Ok(()) => tracing::debug!(revision = target, "compacted"),
                    Err(kubeforge_store::StoreError::Closed) => return,
                    Err(e) => tracing::warn!(error = %e, "compaction failed"),
                }
            }
        })
    }

    pub(crate) fn metrics(&self) -> &crate::metrics::ApiMetrics {
        &self.inner.metrics
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The resource registry.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Serve one request. A handler that panics is answered with a 500
    /// `Status` (see the `recover` module), so the connection stays usable.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<ApiBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let started = std::time::Instant::now();
        let in_flight = self.inner.metrics.enter(&method);
        let mut audit: Option<crate::audit::Record> = None;
        let mut labels = None;
        let (answer, notes) = crate::audit::collecting(crate::recover::catch_unwind(
            self.dispatch(req, &mut audit, &mut labels),
        ))
        .await;
        let (mut resp, error, panicked) = match answer {
            Ok(Ok(r)) => (r, None, false),
            Ok(Err(e)) => (codec::respond_error(&e), Some(e), false),
            Err(_) => {
                let e = crate::recover::panicked(&method, &path);
                (codec::respond_error(&e), Some(e), true)
            }
        };
        if let Some(mut record) = audit.take() {
            record.annotations(notes);
            if let Ok(id) = http::HeaderValue::from_str(record.id()) {
                resp.headers_mut().insert("audit-id", id);
            }
            let body = match resp.body() {
                ApiBody::Full(Some(b)) if error.is_none() => Some(b.clone()),
                _ => None,
            };
            record.finish(
                resp.status().as_u16(),
                error.as_ref(),
                body.as_ref(),
                panicked,
            );
        }
        drop(in_flight);
        if let Some(labels) = labels {
            self.inner.metrics.observe(
                labels,
                resp.status().as_u16(),
                started.elapsed().as_secs_f64(),
            );
        }
        tracing::debug!(%method, %path, status = resp.status().as_u16(), elapsed_us = started.elapsed().as_micros() as u64, "request");
        resp
    }

    async fn dispatch<B>(
        &self,
        req: Request<B>,
        audit: &mut Option<crate::audit::Record>,
        labels: &mut Option<crate::metrics::RequestKey>,
    ) -> ApiResult<Response<ApiBody>>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (mut parts, body) = req.into_parts();
        let writes = matches!(
            parts.method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        );
        // Only writes read their body; any other request's body is read
        // and dropped first, so the connection stays usable for the next
        // request (hyper cannot reuse a connection with an unread body).
        let body = if writes {
            Some(body)
        } else {
            discard_body(body).await;
            None
        };
        let registry = &self.inner.registry;
        let r = route(parts.uri.path(), |g, v, p| {
            registry.get(g, v, p).is_some_and(|d| d.namespaced)
        });
        let query = Query::parse(parts.uri.query());
        *labels = Some(crate::metrics::labels(
            &parts.method,
            parts.uri.path(),
            &r,
            &query,
            parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            |g, v, p| registry.get(g, v, p),
        ));
        // The request path, in order: authentication (authn.rs) →
        // impersonation (impersonation.rs) → authorization (authz.rs) → the handler: decode, admission
        // (mutating), validation, admission (validating), storage (rest.rs).
        let access = &self.inner.access;
        let log = access.audit();
        let attributes_of = |user: UserInfo, parts: &http::request::Parts| {
            let mut a = crate::authz::attributes(user, &parts.method, parts.uri.path(), &r, &query);
            a.source = crate::authz::client_address(parts, &access.trusted_proxies());
            a
        };
        let uri = || {
            parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.path().to_string(), ToString::to_string)
        };
        let user_agent = || {
            parts
                .headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let requester =
            match crate::authn::authenticate(self, access.authentication().as_deref(), &parts) {
                Ok(u) => u,
                Err(e) => {
                    if let Some(log) = &log {
                        let a = attributes_of(UserInfo::default(), &parts);
                        crate::audit::unauthenticated(log, &a, &uri(), user_agent().as_deref());
                    }
                    return Err(e);
                }
            };
        // Audit sees the requester (kube's audit filter runs before
        // impersonation) and records whom it acts as.
        let mut attrs = None;
        if let Some(log) = &log {
            let a = attributes_of((*requester).clone(), &parts);
            *audit = crate::audit::Record::start(
                log,
                &a,
                &requester,
                &uri(),
                user_agent().as_deref(),
                jiff::Timestamp::now(),
            );
            attrs = Some(a);
        }
        let path = parts.uri.path().to_string();
        let user =
            crate::impersonation::impersonate(self, requester.clone(), &mut parts.headers, &path)?;
        if let Some(record) = audit.as_mut()
            && !Arc::ptr_eq(&user, &requester)
        {
            record.impersonated(&user);
        }
        if access.rbac_enabled() {
            let a = match attrs.take() {
                Some(mut a) => {
                    a.user = (*user).clone();
                    a
                }
                None => attributes_of((*user).clone(), &parts),
            };
            let d = access.decide(self, &a);
            if let Some(record) = audit.as_mut() {
                record.authorized(d.allowed(), d.reason());
            }
            if !d.allowed() {
                return Err(crate::authz::forbidden(&a, d.reason()));
            }
        }
        if !matches!(r, Route::Resource(_))
            && parts.method != Method::GET
            && parts.method != Method::HEAD
        {
            if let Some(b) = body {
                discard_body(b).await;
            }
            return Err(ApiError::method_not_supported(
                crate::error::GroupResource {
                    group: "",
                    resource: parts.uri.path(),
                },
                parts.method.as_str(),
            ));
        }
        match r {
            Route::Version => Ok(codec::respond_value(StatusCode::OK, &version_info())),
            Route::Health => {
                let mut r = Response::new(ApiBody::full("ok"));
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                Ok(r)
            }
            Route::Metrics => {
                let text = self.inner.metrics.encode(self);
                let accept = parts
                    .headers
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok());
                let (body, content_type) = if crate::metrics::wants_openmetrics(accept) {
                    (text, crate::metrics::OPENMETRICS)
                } else {
                    (
                        crate::metrics::prometheus_text(&text),
                        crate::metrics::PROMETHEUS_TEXT,
                    )
                };
                let mut r = Response::new(ApiBody::full(body));
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static(content_type),
                );
                Ok(r)
            }
            Route::OpenIdConfiguration | Route::Jwks => crate::satokens::discovery(self, &r),
            Route::CoreVersions => Ok(crate::aggregated::serve(self, &parts.headers, true)),
            Route::Groups => Ok(crate::aggregated::serve(self, &parts.headers, false)),
            Route::Group(g) => {
                crate::discovery::group(self, &g).map(|v| codec::respond_value(StatusCode::OK, &v))
            }
            Route::Resources { group, version } => {
                crate::discovery::resources(self, &group, &version)
                    .map(|v| codec::respond_value(StatusCode::OK, &v))
            }
            Route::OpenApiV2 => Ok(crate::discovery::openapi_v2(self, &parts.headers)),
            Route::OpenApiV3Root => Ok(crate::discovery::openapi_v3_root(self)),
            Route::OpenApiV3 { group, version } => {
                crate::discovery::openapi_v3(self, &group, &version)
            }
            Route::Unknown => Err(ApiError::no_route()),
            Route::Resource(p) if crate::nodeproxy::is_node_proxy(&p) => {
                drop(body);
                crate::nodeproxy::node_proxy(self, &p, &parts).await
            }
            Route::Resource(p) if crate::nodeproxy::is_stream(p.subresource.as_deref()) => {
                // Upgraded, not read: the stream goes to the node.
                drop(body);
                crate::nodeproxy::stream(self, &p, &mut parts).await
            }
            Route::Resource(p) => {
                let body = match body {
                    Some(b) => read_body(b).await?,
                    None => Bytes::new(),
                };
                if let Some(record) = audit.as_mut() {
                    record.request_body(&body);
                }
                crate::rest::serve(self, p, parts.method, parts.headers, query, body, user).await
            }
        }
    }

    /// Serve HTTP/1.1 on `listener` until `shutdown` resolves.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let service = self.service();
        self.serve_with(listener, shutdown, service).await
    }

    /// Serve HTTP/1.1 on `listener` until `shutdown` resolves, answering
    /// every request with `service`: this server's [`Self::service`]
    /// wrapped in tower layers (fault injection in tests, for instance).
    pub async fn serve_with<S, B>(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
        service: S,
    ) -> std::io::Result<()>
    where
        S: tower::Service<
                Request<hyper::body::Incoming>,
                Response = Response<B>,
                Error = Infallible,
            > + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        if let Ok(addr) = listener.local_addr() {
            self.set_advertise(addr);
        }
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (stream, addr) = tokio::select! {
                r = listener.accept() => r?,
                () = &mut shutdown => return Ok(()),
            };
            let _ = stream.set_nodelay(true);
            let service = service.clone();
            let client = crate::authz::ClientAddr(addr.ip());
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                        req.extensions_mut().insert(client);
                        tower::ServiceExt::oneshot(service.clone(), req)
                    });
                let io = hyper_util::rt::TokioIo::new(stream);
                match hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(io, svc)
                    .without_shutdown()
                    .await
                {
                    Ok(parts) => crate::linger::close(parts.io.into_inner()).await,
                    Err(e) => tracing::debug!(error = %e, "connection ended"),
                }
            });
        }
    }

    /// Serve HTTPS (HTTP/1.1 over TLS with `tls`, best made by
    /// [`crate::tls::server_config`] so client certificates are asked for)
    /// on `listener` until `shutdown` resolves. Clients send credentials
    /// over it: kubectl reads a kubeconfig's token or client certificate
    /// only for an `https://` server.
    pub async fn serve_tls(
        self,
        listener: tokio::net::TcpListener,
        tls: Arc<rustls::ServerConfig>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        if let Ok(addr) = listener.local_addr() {
            self.set_advertise(addr);
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let service = self.service();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (stream, addr) = tokio::select! {
                r = listener.accept() => r?,
                () = &mut shutdown => return Ok(()),
            };
            let _ = stream.set_nodelay(true);
            let client = crate::authz::ClientAddr(addr.ip());
            let acceptor = acceptor.clone();
            let service = service.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(stream).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                };
                let peer = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .filter(|c| !c.is_empty())
                    .map(|c| crate::tls::PeerCertificates::new(c.to_vec()));
                let svc =
                    hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                        if let Some(p) = &peer {
                            req.extensions_mut().insert(p.clone());
                        }
                        req.extensions_mut().insert(client);
                        tower::ServiceExt::oneshot(service.clone(), req)
                    });
                let io = hyper_util::rt::TokioIo::new(tls);
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(io, svc)
                    .with_upgrades()
                    .await
                {
                    tracing::debug!(error = %e, "connection ended");
                }
            });
        }
    }

    /// Advertise `addr` (kube-apiserver's `--advertise-address` and port):
    /// the address the `kubernetes` Service's endpoints and `/api` name,
    /// kept whatever listeners start later — for a listener that pods
    /// reach while the others serve loopback.
    pub fn advertise_at(&self, addr: SocketAddr) {
        self.write_advertise(addr, true);
    }

    /// A listener's address, advertised unless one was given.
    fn set_advertise(&self, addr: SocketAddr) {
        self.write_advertise(addr, false);
    }

    /// The pin is read and set under the address's lock, so a listener
    /// starting meanwhile cannot replace a given address.
    fn write_advertise(&self, addr: SocketAddr, pin: bool) {
        use std::sync::atomic::Ordering::SeqCst;
        if let Ok(mut a) = self.inner.advertise.write() {
            if pin {
                self.inner.advertise_pinned.store(true, SeqCst);
            } else if self.inner.advertise_pinned.load(SeqCst) {
                return;
            }
            *a = addr.to_string();
        }
        crate::bootstrap::advertise_changed(self);
    }

    /// The server as a tower service, as the network listener runs it:
    /// requests are authenticated from their headers (see
    /// [`Self::set_authentication`]). Wrap it in layers and hand it to
    /// [`Self::serve_with`], or to `kube::Client::new` for a client that
    /// authenticates like a remote one.
    pub fn service(&self) -> InProcess {
        InProcess(self.clone(), false, None)
    }

    /// A tower service answering in-process as `user`, whatever the
    /// request's headers say.
    pub fn service_as(&self, user: UserInfo) -> InProcess {
        InProcess(self.clone(), false, Some(crate::authz::identity(user)))
    }

    /// A tower service answering in-process as the privileged loopback
    /// user (`system:apiserver` in `system:masters`), whatever the
    /// request's headers say: what [`Self::client`] uses.
    pub fn loopback_service(&self) -> InProcess {
        InProcess(self.clone(), false, Some(crate::authz::loopback_identity()))
    }

    /// A kube-rs client talking to this server in-process as the privileged
    /// loopback user (`system:apiserver` in `system:masters`), default
    /// namespace `default`.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.loopback_service(), "default")
    }

    /// An in-process client for the built-in components (controllers,
    /// scheduler, node simulator): as [`client`](Self::client), but the
    /// objects it reads come without `metadata.managedFields` (see
    /// [`OMIT_MANAGED_FIELDS`](crate::codec::OMIT_MANAGED_FIELDS)). They
    /// drop that field anyway, and decoding it was a large share of their
    /// work on a busy cluster. Its writes are unaffected: a request without
    /// managedFields keeps the stored entries, as in kube-apiserver.
    pub fn builtin_client(&self) -> kube::Client {
        let svc = InProcess(self.clone(), true, Some(crate::authz::loopback_identity()));
        kube::Client::new(svc, "default")
    }

    /// A built-in component's in-process client (as
    /// [`builtin_client`](Self::builtin_client)) acting as `user`, so RBAC
    /// gives it exactly its bootstrap role (see
    /// [`rbac_components`](crate::rbac_components)).
    pub fn builtin_client_as(&self, user: UserInfo) -> kube::Client {
        let svc = InProcess(self.clone(), true, Some(crate::authz::identity(user)));
        kube::Client::new(svc, "default")
    }

    /// The client of the built-in controller writing as ServiceAccount
    /// `account` in `kube-system` (kube-controller-manager's
    /// `--use-service-account-credentials`).
    pub fn controller_client(&self, account: &str) -> kube::Client {
        self.builtin_client_as(crate::rbac_components::controller_user(account))
    }

    /// The built-in controllers' clients: the shared caches' as
    /// `system:kube-controller-manager`, and a function giving each
    /// controller's as its ServiceAccount (what
    /// `kubeforge_controllers::ControllerClients` is made from).
    pub fn controller_clients(
        &self,
    ) -> (
        kube::Client,
        impl Fn(&str) -> kube::Client + Send + Sync + 'static,
    ) {
        let server = self.clone();
        (
            self.component_client(crate::rbac_components::CONTROLLER_MANAGER_USER),
            move |account: &str| server.controller_client(account),
        )
    }

    /// The client of a built-in component running as user `name` (one of
    /// [`rbac_components`](crate::rbac_components)' users).
    pub fn component_client(&self, name: &str) -> kube::Client {
        self.builtin_client_as(crate::rbac_components::component_user(name))
    }

    /// An in-process client acting as `user`: its requests are authorized
    /// as that user's, so a test runs with exactly the permissions RBAC
    /// gives it (see [`Self::enable_rbac`]).
    pub fn client_as(&self, user: UserInfo) -> kube::Client {
        kube::Client::new(self.service_as(user), "default")
    }

    /// Authenticate network requests with `auth` (`None`: every request
    /// acts as the privileged loopback user, the default).
    pub fn set_authentication(&self, auth: Option<crate::authn::Authentication>) {
        *self
            .inner
            .access
            .authentication
            .write()
            .unwrap_or_else(|p| p.into_inner()) = auth.map(std::sync::Arc::new);
    }

    /// Sign and accept ServiceAccount tokens with `issuer` (a new key is
    /// made at start; give the same key across restarts so issued tokens
    /// stay valid).
    pub fn set_token_issuer(&self, issuer: kubeforge_authz::satoken::TokenIssuer) {
        *self
            .inner
            .access
            .issuer
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(issuer));
    }

    /// The ServiceAccount token issuer, whose key the tokens controller
    /// signs legacy token Secrets with.
    pub fn token_issuer(&self) -> Option<Arc<kubeforge_authz::satoken::TokenIssuer>> {
        self.inner.access.token_issuer()
    }

    /// Decide requests by RBAC (kube's `--authorization-mode=RBAC`):
    /// `system:masters` may do anything, everyone else what their Roles and
    /// ClusterRoles grant, with kubeforge's access policies
    /// (`authz.kubeforge.dev` AccessRoles and AccessBindings, whose CRDs are
    /// installed now and kept in place) decided first. Off by default
    /// (every request allowed, and no policy CRDs).
    pub async fn enable_rbac(&self, on: bool) -> Result<(), ApiError> {
        self.inner
            .access
            .rbac
            .store(on, std::sync::atomic::Ordering::Relaxed);
        if on {
            crate::access_policy::ensure_crds(self).await?;
        }
        Ok(())
    }

    /// Write audit events (kube's `--audit-policy-file` and
    /// `--audit-log-path`); `None` turns audit off (the default).
    pub fn set_audit(&self, log: Option<crate::audit::AuditLog>) {
        *self
            .inner
            .access
            .audit
            .write()
            .unwrap_or_else(|p| p.into_inner()) = log.map(Arc::new);
    }

    /// The client certificate `pods/log` presents to kubelets (kube's
    /// `--kubelet-client-certificate`); without one such requests fail.
    pub fn set_kubelet_client(&self, client: Option<crate::nodeproxy::KubeletClient>) {
        *self
            .inner
            .kubelet
            .write()
            .unwrap_or_else(|p| p.into_inner()) = client;
    }

    pub(crate) fn kubelet_client(&self) -> Option<crate::nodeproxy::KubeletClient> {
        self.inner
            .kubelet
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Proxies (by network) whose `X-Forwarded-For` header names the
    /// client address that kubeforge policies' `sourceCIDRs` check;
    /// anyone else's header is ignored. None by default.
    pub fn set_trusted_proxies(&self, proxies: Vec<kubeforge_apimachinery::net::IpNet>) {
        *self
            .inner
            .access
            .trusted_proxies
            .write()
            .unwrap_or_else(|p| p.into_inner()) = proxies.into();
    }
}

/// Boxed error type of request bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The server as a `tower::Service`: requests are answered in-process
/// (with the second field, marked to omit managedFields in responses; with
/// the third, acting as that user whatever the headers say).
#[derive(Clone)]
pub struct InProcess(ApiServer, bool, Option<crate::authn::Identity>);

impl<B> tower::Service<Request<B>> for InProcess
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ApiBody>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<ApiBody>, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if let Some(id) = &self.2 {
            req.extensions_mut().insert(id.clone());
        }
        if self.1 {
            req.headers_mut().insert(
                crate::codec::OMIT_MANAGED_FIELDS,
                http::HeaderValue::from_static("true"),
            );
        }
        let server = self.0.clone();
        Box::pin(async move { Ok(server.handle(req).await) })
    }
}

async fn read_body<B>(body: B) -> ApiResult<Bytes>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    match http_body_util::Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(ApiError::too_large(MAX_BODY))
            } else {
                Err(ApiError::bad_request(format!(
                    "reading the request body failed: {e}"
                )))
            }
        }
    }
}

/// Read and drop a request body nothing uses, up to [`MAX_BODY`] bytes
/// (past that the connection is closed after the answer, gracefully).
async fn discard_body<B>(body: B)
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    if http_body::Body::is_end_stream(&body) {
        return;
    }
    let _ = http_body_util::Limited::new(body, MAX_BODY).collect().await;
}

pub(crate) fn version_info() -> serde_json::Value {
    let (major, minor, git) = KUBERNETES_VERSION;
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": git,
        "gitCommit": "kubeforge",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": concat!("rust (kubeforge ", env!("CARGO_PKG_VERSION"), ")"),
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a }),
    })
}
