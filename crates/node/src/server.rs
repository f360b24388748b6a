//! The agent's HTTPS API, in the kubelet port's role: `/healthz`, `/pods`
//! and `/containerLogs/{ns}/{pod}/{container}`. Callers present a client
//! certificate from the configured CA (the API server's kubelet client);
//! each request is then authorized with a SubjectAccessReview on the node
//! (`nodes/proxy`, `nodes/log` for logs), as the kubelet's webhook
//! authorizer does. The serving certificate is self-signed at start, as a
//! kubelet without `--tls-cert-file` makes one.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::{Api, PostParams};
use kubeforge_authz::UserInfo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::agent::Shared;
use crate::cri::api;
use crate::error::NodeError;
use crate::logs::LogOptions;

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()).boxed_unsync())
        .unwrap_or_default()
}

/// A `Status` error as the kubelet's API answers one.
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16()});
    full(code, "application/json", body.to_string())
}

fn tls_config(shared: &Shared) -> Result<rustls::ServerConfig, NodeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let bad = |e: String| NodeError::Build {
        image: "the agent's serving certificate".into(),
        reason: e,
    };
    let mut params =
        rcgen::CertificateParams::new(vec![shared.cfg.node_name.clone(), shared.host_ip.clone()])
            .map_err(|e| bad(e.to_string()))?;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("{}@kubeforge-node", shared.cfg.node_name),
    );
    let key = rcgen::KeyPair::generate().map_err(|e| bad(e.to_string()))?;
    let cert = params.self_signed(&key).map_err(|e| bad(e.to_string()))?;
    let chain = vec![cert.der().clone()];
    let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())
        .map_err(|e| bad(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(
        shared
            .cfg
            .client_ca_pem
            .as_deref()
            .unwrap_or_default()
            .as_bytes(),
    ) {
        let c = c.map_err(|e| bad(format!("the client CA: {e}")))?;
        roots
            .add(c)
            .map_err(|e| bad(format!("the client CA: {e}")))?;
    }
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?;
    let builder = if roots.is_empty() {
        // No CA: no caller can authenticate, so every request is refused.
        builder.with_no_client_auth()
    } else {
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| bad(e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut cfg = builder
        .with_single_cert(chain, key)
        .map_err(|e| bad(e.to_string()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Serve the agent's API on `listener` until the agent stops.
pub(crate) fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, NodeError> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls_config(&shared)?));
    Ok(async move {
        loop {
            let (tcp, _) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(_) => continue,
                },
                _ = shared.stop.cancelled() => return,
            };
            let acceptor = acceptor.clone();
            let shared = shared.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let user = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|leaf| {
                        kubeforge_authz::x509::user_from_certificate(leaf)
                            .ok()
                            .flatten()
                    })
                    .map(Arc::new);
                let svc = hyper::service::service_fn(move |req| {
                    let shared = shared.clone();
                    let user = user.clone();
                    async move { Ok::<_, Infallible>(handle(&shared, user.as_deref(), req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .with_upgrades()
                    .await;
            });
        }
    })
}

/// Whether `user` may use `subresource` of this node.
async fn authorize(
    shared: &Shared,
    user: &UserInfo,
    verb: &str,
    subresource: &str,
) -> Result<bool, String> {
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user.name, "uid": user.uid, "groups": user.groups, "extra": user.extra,
            "resourceAttributes": {"verb": verb, "resource": "nodes", "subresource": subresource,
                "name": shared.cfg.node_name}}});
    let sar: SubjectAccessReview = serde_json::from_value(sar).map_err(|e| e.to_string())?;
    let api: Api<SubjectAccessReview> = Api::all(shared.client.clone());
    let answer = api
        .create(&PostParams::default(), &sar)
        .await
        .map_err(|e| e.to_string())?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

async fn handle(
    shared: &Shared,
    user: Option<&UserInfo>,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(user) = user else {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
    };
    let path = req.uri().path().to_string();
    let verb = match *req.method() {
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    };
    let subresource = if path.starts_with("/containerLogs/") || path.starts_with("/logs") {
        "log"
    } else if path.starts_with("/stats") {
        "stats"
    } else {
        "proxy"
    };
    match authorize(shared, user, verb, subresource).await {
        Ok(true) => {}
        Ok(false) => {
            let msg = format!(
                "Forbidden (user={}, verb={verb}, resource=nodes, subresource={subresource})",
                user.name
            );
            return full(StatusCode::FORBIDDEN, "text/plain; charset=utf-8", msg);
        }
        Err(e) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!("authorization failed: {e}"),
            );
        }
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (req.method(), parts.as_slice()) {
        (&Method::GET, ["healthz"]) => full(StatusCode::OK, "text/plain; charset=utf-8", "ok"),
        (&Method::GET, ["pods"]) => {
            let items: Vec<serde_json::Value> = shared
                .pods
                .lock()
                .map(|p| {
                    p.values()
                        .filter_map(|p| serde_json::to_value(&**p).ok())
                        .collect()
                })
                .unwrap_or_default();
            let list =
                json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items});
            full(StatusCode::OK, "application/json", list.to_string())
        }
        (&Method::GET, ["containerLogs", ns, pod, container]) => {
            let query: Vec<(String, String)> =
                form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
                    .into_owned()
                    .collect();
            container_logs(shared, ns, pod, container, &query).await
        }
        _ => full(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "404 page not found",
        ),
    }
}

async fn container_logs(
    shared: &Shared,
    ns: &str,
    pod_name: &str,
    container: &str,
    query: &[(String, String)],
) -> Response<Body> {
    let opts = match LogOptions::from_query(query) {
        Ok(o) => o,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e.0),
    };
    let Some(pod) = shared.pod(ns, pod_name) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("pod \"{pod_name}\" in namespace \"{ns}\" not found on this node"),
        );
    };
    let id = match log_container_id(&pod, pod_name, container, opts.previous) {
        Ok(id) => id,
        Err(msg) => return full(StatusCode::BAD_REQUEST, "text/plain; charset=utf-8", msg),
    };
    let mut rt = shared.cri.runtime.clone();
    let st = match rt
        .container_status(api::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
    {
        Ok(s) => s.into_inner().status.unwrap_or_default(),
        Err(e) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                e.message(),
            );
        }
    };
    let path = std::path::PathBuf::from(&st.log_path);
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let follow_running = st.state == api::ContainerState::ContainerRunning as i32 && opts.follow;
    let cri = shared.cri.clone();
    tokio::spawn(async move {
        let alive = Arc::new(std::sync::atomic::AtomicBool::new(follow_running));
        let watcher = {
            let alive = alive.clone();
            tokio::spawn(async move {
                while alive.load(std::sync::atomic::Ordering::Relaxed) {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    let mut rt = cri.runtime.clone();
                    let up = rt
                        .container_status(api::ContainerStatusRequest {
                            container_id: id.clone(),
                            verbose: false,
                        })
                        .await
                        .ok()
                        .and_then(|s| s.into_inner().status)
                        .is_some_and(|s| s.state == api::ContainerState::ContainerRunning as i32);
                    if !up {
                        alive.store(false, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        };
        let flag = alive.clone();
        crate::logs::stream(path, opts, tx, move || {
            flag.load(std::sync::atomic::Ordering::Relaxed)
        })
        .await;
        alive.store(false, std::sync::atomic::Ordering::Relaxed);
        let _ = watcher.await;
    });
    let body = StreamBody::new(tokio_stream_from(rx).map(|b| Ok::<_, Infallible>(Frame::data(b))));
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(body.boxed_unsync())
        .unwrap_or_default()
}

/// Which run's log a request means, from the pod's status as the
/// kubelet's `validateContainerLogStatus` decides (its words on refusal).
fn log_container_id(
    pod: &k8s_openapi::api::core::v1::Pod,
    pod_name: &str,
    container: &str,
    previous: bool,
) -> Result<String, String> {
    let status = pod.status.clone().unwrap_or_default();
    let found = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten())
        .find(|s| s.name == container)
        .cloned()
        .ok_or_else(|| format!("container {container:?} in pod {pod_name:?} is not available"))?;
    let strip = |id: &str| id.split_once("://").map_or(id, |(_, i)| i).to_string();
    let last = found
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref());
    let state = found.state.clone().unwrap_or_default();
    if previous {
        return match last
            .and_then(|t| t.container_id.as_deref())
            .filter(|i| !i.is_empty())
        {
            Some(id) => Ok(strip(id)),
            None => Err(format!(
                "previous terminated container {container:?} in pod {pod_name:?} not found"
            )),
        };
    }
    if state.running.is_some() {
        return found.container_id.as_deref().map(strip).ok_or_else(|| {
            format!("container {container:?} in pod {pod_name:?} is not available")
        });
    }
    if let Some(t) = &state.terminated
        && let Some(id) = t
            .container_id
            .as_deref()
            .or(found.container_id.as_deref())
            .filter(|i| !i.is_empty())
    {
        return Ok(strip(id));
    }
    if let Some(id) = last
        .and_then(|t| t.container_id.as_deref())
        .filter(|i| !i.is_empty())
    {
        return Ok(strip(id));
    }
    let reason = state.waiting.and_then(|w| w.reason).unwrap_or_default();
    Err(match reason.as_str() {
        "ErrImagePull" => format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
        ),
        "ImagePullBackOff" => format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: trying and failing to pull image"
        ),
        r => format!("container {container:?} in pod {pod_name:?} is waiting to start: {r}"),
    })
}

fn tokio_stream_from(rx: mpsc::Receiver<Bytes>) -> impl futures::Stream<Item = Bytes> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
}
