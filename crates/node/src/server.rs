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
        (&Method::GET, ["stats", "summary"]) => match crate::stats::collect(shared).await {
            Ok(s) => full(StatusCode::OK, "application/json", s.to_string()),
            Err(e) => status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!("failed to get stats: {e}"),
            ),
        },
        (&Method::GET, ["containerLogs", ns, pod, container]) => {
            let query: Vec<(String, String)> =
                form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
                    .into_owned()
                    .collect();
            container_logs(shared, ns, pod, container, &query).await
        }
        (&Method::GET | &Method::POST, [kind @ ("exec" | "attach"), ns, pod, .., container])
            if (4..=5).contains(&parts.len()) =>
        {
            let (kind, ns, pod, container) = (
                kind.to_string(),
                ns.to_string(),
                pod.to_string(),
                container.to_string(),
            );
            stream(shared, req, &kind, &ns, &pod, Some(&container)).await
        }
        (&Method::GET | &Method::POST, ["portForward", ns, pod, ..])
            if (3..=4).contains(&parts.len()) =>
        {
            let (ns, pod) = (ns.to_string(), pod.to_string());
            stream(shared, req, "portforward", &ns, &pod, None).await
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

/// The headers an upgrade carries to the runtime's streaming server and
/// back.
const UPGRADE_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "x-stream-protocol-version",
    "sec-websocket-protocol",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-accept",
];

/// `/exec`, `/attach` and `/portForward`: ask the runtime for a streaming
/// URL (CRI Exec, Attach, PortForward), carry the caller's upgrade there
/// and copy the bytes both ways once both sides switched, as the kubelet's
/// streaming proxy does.
async fn stream(
    shared: &Shared,
    mut req: Request<Incoming>,
    kind: &str,
    ns: &str,
    pod_name: &str,
    container: Option<&str>,
) -> Response<Body> {
    let text = |code, msg: String| full(code, "text/plain; charset=utf-8", msg);
    let Some(pod) = shared.pod(ns, pod_name) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod \"{pod_name}\" not found"),
        );
    };
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let flag = |k: &str| {
        pairs
            .iter()
            .any(|(key, v)| key == k && matches!(v.as_str(), "1" | "true" | "True"))
    };
    let (stdin, stdout, stderr, tty) = (
        flag("input") || flag("stdin"),
        flag("output") || flag("stdout"),
        flag("error") || flag("stderr"),
        flag("tty"),
    );
    let mut rt = shared.cri.runtime.clone();
    let url = if kind == "portforward" {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let boxes = rt
            .list_pod_sandbox(api::ListPodSandboxRequest {
                filter: Some(api::PodSandboxFilter {
                    label_selector: std::collections::HashMap::from([(
                        crate::pod::POD_UID.to_string(),
                        uid,
                    )]),
                    state: Some(api::PodSandboxStateValue {
                        state: api::PodSandboxState::SandboxReady as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .map(|r| r.into_inner().items)
            .unwrap_or_default();
        let Some(sb) = boxes.first() else {
            return text(
                StatusCode::BAD_REQUEST,
                format!("pod {pod_name:?} has no running sandbox"),
            );
        };
        // A WebSocket port-forward names its ports in the query (SPDY
        // streams carry theirs in stream headers); the runtime's WebSocket
        // server takes them from the CRI request.
        let mut ports = Vec::new();
        for (_, v) in pairs.iter().filter(|(k, _)| k == "ports") {
            for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                match p.parse::<u16>() {
                    Ok(port) if port > 0 => ports.push(i32::from(port)),
                    _ => {
                        return text(
                            StatusCode::BAD_REQUEST,
                            format!("invalid port {p:?}: ports must be numbers from 1 to 65535"),
                        );
                    }
                }
            }
        }
        rt.port_forward(api::PortForwardRequest {
            pod_sandbox_id: sb.id.clone(),
            port: ports,
        })
        .await
        .map(|r| r.into_inner().url)
    } else {
        let container = container.unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let id = status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .chain(status.ephemeral_container_statuses.iter().flatten())
            .find(|s| {
                s.name == container && s.state.as_ref().is_some_and(|st| st.running.is_some())
            })
            .and_then(|s| s.container_id.clone())
            .map(|id| {
                id.split_once("://")
                    .map_or(id.clone(), |(_, i)| i.to_string())
            });
        let Some(id) = id else {
            return text(
                StatusCode::BAD_REQUEST,
                format!("container not found ({container:?})"),
            );
        };
        if !stdin && !stdout && !stderr {
            return text(
                StatusCode::BAD_REQUEST,
                "you must specify at least 1 of stdin, stdout, stderr".into(),
            );
        }
        if kind == "exec" {
            let cmd: Vec<String> = pairs
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect();
            rt.exec(api::ExecRequest {
                container_id: id,
                cmd,
                tty,
                stdin,
                stdout,
                stderr: stderr && !tty,
            })
            .await
            .map(|r| r.into_inner().url)
        } else {
            rt.attach(api::AttachRequest {
                container_id: id,
                stdin,
                tty,
                stdout,
                stderr: stderr && !tty,
            })
            .await
            .map(|r| r.into_inner().url)
        }
    };
    let url = match url {
        Ok(u) => u,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.message().to_string()),
    };
    let Ok(uri) = url.parse::<http::Uri>() else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the runtime gave a bad streaming URL {url:?}"),
        );
    };
    let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the runtime gave a bad streaming URL {url:?}"),
        );
    };
    let tcp = match tokio::net::TcpStream::connect((host, port)).await {
        Ok(t) => t,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("dial {host}:{port}: {e}"),
            );
        }
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
        Ok(c) => c,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut up = Request::builder()
        .method(req.method().clone())
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(http::header::HOST, format!("{host}:{port}"));
    for h in UPGRADE_HEADERS {
        for v in req.headers().get_all(*h) {
            up = up.header(*h, v);
        }
    }
    let Ok(up) = up.body(http_body_util::Empty::<Bytes>::new()) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot build the upstream request".into(),
        );
    };
    let mut resp = match sender.send_request(up).await {
        Ok(r) => r,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let code = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return full(code, "text/plain; charset=utf-8", body);
    }
    let client_side = hyper::upgrade::on(&mut req);
    let runtime_side = hyper::upgrade::on(&mut resp);
    let mut out = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (k, v) in resp.headers() {
        if UPGRADE_HEADERS.contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    tokio::spawn(async move {
        let (Ok(a), Ok(b)) = (client_side.await, runtime_side.await) else {
            return;
        };
        let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(a), &mut TokioIo::new(b)).await;
        drop(sender);
    });
    out.body(Full::new(Bytes::new()).boxed_unsync())
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
