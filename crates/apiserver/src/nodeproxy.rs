//! The API server's kubelet client: `pods/log` served by the node the pod
//! runs on, as kube-apiserver's `LogREST` does — the container checked
//! against the pod, the node's address and port read from its status
//! (`InternalIP`, `daemonEndpoints.kubeletEndpoint.Port`), an HTTPS
//! request with the kubelet client certificate, and the answer streamed
//! back (a refusal becomes a `Status` with the node's words).
//!
//! Differences from kube-apiserver, on purpose: only nodes on a loopback
//! address are dialled (kubeforge's nodes run on this machine; a
//! simulated node's address leads nowhere, so its pods' logs are refused
//! without sending anything), and the node's serving certificate is not
//! verified, as kube-apiserver without `--kubelet-certificate-authority`.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::body::ApiBody;
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult};

/// The client configuration the server calls kubelets with.
#[derive(Clone)]
pub struct KubeletClient {
    tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for KubeletClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeletClient")
    }
}

/// Accepts the kubelet's certificate without a CA (kube's default without
/// `--kubelet-certificate-authority`), still checking the handshake's
/// signatures.
#[derive(Debug)]
struct UnverifiedKubelet(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for UnverifiedKubelet {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Why a kubelet client certificate was refused.
#[derive(Debug, thiserror::Error)]
#[error("kubelet client certificate: {0}")]
pub struct KubeletClientError(String);

impl KubeletClient {
    /// A client presenting `cert_pem` (chain) with `key_pem`.
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<KubeletClient, KubeletClientError> {
        let bad = |e: &dyn std::fmt::Display| KubeletClientError(e.to_string());
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| bad(&e))?;
        if chain.is_empty() {
            return Err(KubeletClientError("no certificate in the PEM".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| bad(&e))?;
        let provider = crate::tls::provider();
        let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(&e))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(UnverifiedKubelet(provider)))
            .with_client_auth_cert(chain, key)
            .map_err(|e| bad(&e))?;
        Ok(KubeletClient { tls: Arc::new(tls) })
    }
}

/// kube's `validateContainer`: the named container, or the only one.
fn pick_container(pod: &Value, name: &str, requested: Option<&str>) -> ApiResult<String> {
    let names = |key: &str| -> Vec<String> {
        pod["spec"][key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    };
    let (main, init, ephemeral) = (
        names("containers"),
        names("initContainers"),
        names("ephemeralContainers"),
    );
    match requested.filter(|c| !c.is_empty()) {
        Some(c) => {
            if main.iter().chain(&init).chain(&ephemeral).any(|n| n == c) {
                Ok(c.to_string())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )))
            }
        }
        None if main.len() == 1 => Ok(main[0].clone()),
        None => {
            let mut msg = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                main.join(" ")
            );
            if !init.is_empty() {
                msg.push_str(&format!(
                    " or one of the init containers: [{}]",
                    init.join(" ")
                ));
            }
            if !ephemeral.is_empty() {
                msg.push_str(&format!(
                    " or one of the ephemeral containers: [{}]",
                    ephemeral.join(" ")
                ));
            }
            Err(ApiError::bad_request(msg))
        }
    }
}

/// Where a node's kubelet API is: its InternalIP and daemon port.
fn kubelet_address(node: &Value) -> Option<(IpAddr, u16)> {
    let ip = node["status"]["addresses"]
        .as_array()?
        .iter()
        .find(|a| a["type"] == "InternalIP")?["address"]
        .as_str()?
        .parse()
        .ok()?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64()?;
    Some((ip, u16::try_from(port).ok()?))
}

/// The PodLogOptions the kubelet takes, from the request's query.
const LOG_PARAMS: &[&str] = &[
    "follow",
    "previous",
    "sinceSeconds",
    "sinceTime",
    "timestamps",
    "tailLines",
    "limitBytes",
];

/// `GET pods/{name}/log`.
pub(crate) async fn log(ctx: &Ctx<'_>) -> ApiResult<Response<ApiBody>> {
    let name = ctx.path_name()?;
    let kv = ctx
        .server
        .store()
        .get(&ctx.key(name))
        .ok_or_else(|| ApiError::not_found(ctx.def.gr(), name))?;
    let pod: Value =
        serde_json::from_slice(&kv.value).map_err(|e| ApiError::internal(e.to_string()))?;
    let container = pick_container(&pod, name, ctx.query.get("container"))?;
    let Some(node_name) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
        // kube answers an unscheduled pod's log with nothing.
        return Ok(text_response(StatusCode::OK, ApiBody::empty()));
    };
    let (ip, port) = node_address(ctx.server, node_name, name)?;
    let client = ctx
        .server
        .kubelet_client()
        .ok_or_else(|| ApiError::internal("this server has no kubelet client certificate"))?;
    let ns = ctx.ns.as_deref().unwrap_or("default");
    let query = {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for key in LOG_PARAMS {
            if let Some(v) = ctx.query.get(key) {
                q.append_pair(key, v);
            }
        }
        q.finish()
    };
    let path = format!(
        "/containerLogs/{ns}/{name}/{container}{}{query}",
        if query.is_empty() { "" } else { "?" }
    );
    let (status, body) = get(&client, ip, port, &path).await?;
    if !status.is_success() {
        let mut text = Vec::new();
        let mut rx = body;
        while let Some(chunk) = rx.recv().await {
            text.extend_from_slice(&chunk);
            if text.len() > 4096 {
                break;
            }
        }
        let message = String::from_utf8_lossy(&text).trim().to_string();
        return Err(node_error(status, &message));
    }
    Ok(text_response(StatusCode::OK, ApiBody::Stream(body)))
}

/// The streaming subresources a node serves: `exec`, `attach`,
/// `portforward`.
pub(crate) fn is_stream(subresource: Option<&str>) -> bool {
    matches!(subresource, Some("exec" | "attach" | "portforward"))
}

/// The request headers an upgrade carries to the node.
const UPGRADE_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "x-stream-protocol-version",
    "sec-websocket-protocol",
    "sec-websocket-key",
    "sec-websocket-version",
];

/// The WebSocket subprotocols the runtimes' streaming servers speak
/// (containerd 1.6's, as every kubelet before 1.30): the channel protocols
/// up to v4, for exec, attach and port-forward alike.
const LEGACY_WEBSOCKET_PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
];

/// The subprotocols of a WebSocket stream request that the node's runtime
/// speaks, in the client's order, joined for the upstream request (empty
/// when the client named none, which the runtime takes as
/// `channel.k8s.io`). Offers this server translates (v5 exec and attach,
/// tunnelled port-forward) are handled before; a request offering only
/// other protocols (v5 for port-forward, say) is refused before any
/// switch: kubectl takes that refusal as an upgrade failure and retries
/// over SPDY/3.1.
fn legacy_websocket_protocols(headers: &http::HeaderMap) -> ApiResult<String> {
    let offered = crate::streamtranslator::offered(headers);
    let spoken: Vec<&str> = offered
        .iter()
        .copied()
        .filter(|p| LEGACY_WEBSOCKET_PROTOCOLS.contains(p))
        .collect();
    if !offered.is_empty() && spoken.is_empty() {
        return Err(ApiError::bad_request(format!(
            "the node's streaming server speaks WebSocket subprotocols {} or SPDY/3.1, not {}; retry over SPDY/3.1",
            LEGACY_WEBSOCKET_PROTOCOLS.join(", "),
            offered.join(", ")
        )));
    }
    Ok(spoken.join(", "))
}

/// `pods/{name}/exec|attach|portforward`: the client's upgrade carried to
/// the node's kubelet API, and once both sides switched protocols, the
/// bytes copied both ways (kube-apiserver's `UpgradeAwareHandler`). SPDY
/// and WebSocket channel protocols up to v4 (kube-rs, the Python client)
/// pass through; see [`legacy_websocket_protocols`] for v5.
pub(crate) async fn stream(
    server: &crate::server::ApiServer,
    p: &crate::request::ResourcePath,
    parts: &mut http::request::Parts,
) -> ApiResult<Response<ApiBody>> {
    let sub = p.subresource.as_deref().unwrap_or_default();
    let name = p.name.as_deref().ok_or_else(ApiError::no_route)?;
    let ns = p.namespace.as_deref().unwrap_or("default");
    let upgrade = parts
        .headers
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if upgrade.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Upgrade request required: {sub} streams over SPDY/3.1"
        )));
    }
    // Some WebSocket clients are answered here, which then speaks SPDY to
    // the node: a v5 client of exec or attach (kube-apiserver's
    // StreamTranslator) and kubectl >= 1.31's port-forward, which tunnels
    // SPDY inside WebSocket (its bytes go to the node as they are). Other
    // WebSocket clients pass through with the protocols the runtime speaks.
    // Answered here: (the SPDY protocol asked of the node, the WebSocket
    // subprotocol answered).
    use crate::streamtranslator::{PORT_FORWARD, SPDY_TUNNEL, SPDY_V4, V5};
    let offered = crate::streamtranslator::offered(&parts.headers);
    let answered_here = match (upgrade.as_str(), sub) {
        ("websocket", "portforward") if offered.contains(&SPDY_TUNNEL) => {
            Some((PORT_FORWARD, SPDY_TUNNEL))
        }
        ("websocket", "exec" | "attach") if offered.contains(&V5) => Some((SPDY_V4, V5)),
        _ => None,
    };
    let translate = answered_here.is_some();
    let tunnel = answered_here.is_some_and(|(_, ws)| ws == SPDY_TUNNEL);
    let websocket_protocols = if upgrade == "websocket" && !translate {
        Some(legacy_websocket_protocols(&parts.headers)?)
    } else {
        None
    };
    let client_key = parts
        .headers
        .get(http::header::SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec());
    if translate && client_key.is_none() {
        return Err(ApiError::bad_request(
            "a WebSocket upgrade needs Sec-WebSocket-Key",
        ));
    }
    let on_upgrade = parts
        .extensions
        .remove::<hyper::upgrade::OnUpgrade>()
        .ok_or_else(|| ApiError::bad_request("this connection cannot be upgraded"))?;
    let def = server
        .registry()
        .get("", "v1", "pods")
        .ok_or_else(ApiError::no_route)?;
    let kv = server
        .store()
        .get(&def.key(Some(ns), name))
        .ok_or_else(|| ApiError::not_found(def.gr(), name))?;
    let pod: Value =
        serde_json::from_slice(&kv.value).map_err(|e| ApiError::internal(e.to_string()))?;
    let query = crate::request::Query::parse(parts.uri.query());
    let node_name = pod["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(format!("pod {name} does not have a host assigned"))
        })?;
    if let Some(phase @ ("Succeeded" | "Failed")) = pod["status"]["phase"].as_str() {
        return Err(ApiError::bad_request(format!(
            "cannot {sub} into a container in a completed pod; current phase is {phase}"
        )));
    }
    let path = if sub == "portforward" {
        format!("/portForward/{ns}/{name}")
    } else {
        let container = pick_container(&pod, name, query.get("container"))?;
        format!("/{sub}/{ns}/{name}/{container}")
    };
    let raw_query = parts.uri.query().unwrap_or_default();
    let path = if raw_query.is_empty() {
        path
    } else {
        format!("{path}?{raw_query}")
    };
    let (ip, port) = node_address(server, node_name, name)?;
    let client = server
        .kubelet_client()
        .ok_or_else(|| ApiError::internal("this server has no kubelet client certificate"))?;
    let sender = connect(&client, ip, port, true).await?;
    let mut req = http::Request::builder()
        .method(if translate {
            http::Method::POST
        } else {
            parts.method.clone()
        })
        .uri(&path)
        .header(http::header::HOST, format!("{ip}:{port}"));
    if let Some((spdy_protocol, _)) = answered_here {
        req = req
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, "SPDY/3.1")
            .header("x-stream-protocol-version", spdy_protocol);
    }
    for h in UPGRADE_HEADERS.iter().filter(|_| !translate) {
        if *h == "sec-websocket-protocol" && websocket_protocols.is_some() {
            continue;
        }
        for v in parts.headers.get_all(*h) {
            req = req.header(*h, v);
        }
    }
    if let Some(protocols) = websocket_protocols.filter(|p| !p.is_empty()) {
        req = req.header("sec-websocket-protocol", protocols);
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut sender = sender;
    let mut resp = sender.send_request(req).await.map_err(|e| {
        ApiError::internal(format!(
            "{} \"https://{ip}:{port}{path}\": {e}",
            parts.method
        ))
    })?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(node_error(status, String::from_utf8_lossy(&body).trim()));
    }
    let upstream = hyper::upgrade::on(&mut resp);
    let mut out = Response::new(ApiBody::empty());
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    if let (Some((_, ws_protocol)), Some(key)) = (answered_here, client_key) {
        let h = out.headers_mut();
        h.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("Upgrade"),
        );
        h.insert(
            http::header::UPGRADE,
            http::HeaderValue::from_static("websocket"),
        );
        h.insert(
            http::header::SEC_WEBSOCKET_PROTOCOL,
            http::HeaderValue::from_static(ws_protocol),
        );
        h.insert(
            http::header::SEC_WEBSOCKET_ACCEPT,
            http::HeaderValue::from_str(&crate::streamtranslator::accept_key(&key))
                .map_err(|e| ApiError::internal(e.to_string()))?,
        );
        let streams = crate::streamtranslator::Streams::from_query(&query);
        tokio::spawn(async move {
            let (Ok(client_io), Ok(node_io)) = (on_upgrade.await, upstream.await) else {
                return;
            };
            let (client_io, node_io) = (TokioIo::new(client_io), TokioIo::new(node_io));
            if tunnel {
                crate::streamtranslator::tunnel(client_io, node_io).await;
            } else {
                crate::streamtranslator::run(client_io, node_io, streams).await;
            }
            drop(sender);
        });
        return Ok(out);
    }
    for (k, v) in resp.headers() {
        if UPGRADE_HEADERS.contains(&k.as_str()) || k.as_str() == "sec-websocket-accept" {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    tokio::spawn(async move {
        let (Ok(client_io), Ok(node_io)) = (on_upgrade.await, upstream.await) else {
            return;
        };
        let mut a = TokioIo::new(client_io);
        let mut b = TokioIo::new(node_io);
        let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
        drop(sender);
    });
    Ok(out)
}

/// Whether a request is `nodes/{name}/proxy/…`.
pub(crate) fn is_node_proxy(p: &crate::request::ResourcePath) -> bool {
    p.group.is_empty() && p.plural == "nodes" && p.subresource.as_deref() == Some("proxy")
}

/// `GET nodes/{name}/proxy/{path}`: the node's kubelet API at `path`
/// (`/stats/summary`, `/pods`, `/healthz`, …), answered as the kubelet
/// answers, as kube-apiserver's node proxy does. Only reads (GET) go
/// through; other verbs are 405.
pub(crate) async fn node_proxy(
    server: &crate::server::ApiServer,
    p: &crate::request::ResourcePath,
    parts: &http::request::Parts,
) -> ApiResult<Response<ApiBody>> {
    let name = p.name.as_deref().ok_or_else(ApiError::no_route)?;
    if parts.method != http::Method::GET {
        return Err(ApiError::method_not_supported(
            crate::error::GroupResource {
                group: "",
                resource: "nodes/proxy",
            },
            parts.method.as_str(),
        ));
    }
    let prefix = format!("/api/v1/nodes/{name}/proxy");
    let rest = parts
        .uri
        .path()
        .strip_prefix(&prefix)
        .filter(|r| !r.is_empty())
        .unwrap_or("/");
    let path = match parts.uri.query() {
        Some(q) if !q.is_empty() => format!("{rest}?{q}"),
        _ => rest.to_string(),
    };
    let (ip, port) = node_address(server, name, name)?;
    let client = server
        .kubelet_client()
        .ok_or_else(|| ApiError::internal("this server has no kubelet client certificate"))?;
    let (status, content_type, body) = get_typed(&client, ip, port, &path).await?;
    let mut r = Response::new(ApiBody::Stream(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        content_type.unwrap_or(http::HeaderValue::from_static("text/plain")),
    );
    Ok(r)
}

/// A node's kubelet address, if this server dials it (loopback only).
fn node_address(
    server: &crate::server::ApiServer,
    node_name: &str,
    pod: &str,
) -> ApiResult<(IpAddr, u16)> {
    let node: Value = server
        .store()
        .get(&format!("/registry/core/nodes/{node_name}"))
        .and_then(|kv| serde_json::from_slice(&kv.value).ok())
        .ok_or_else(|| {
            ApiError::not_found(
                crate::error::GroupResource {
                    group: "",
                    resource: "nodes",
                },
                node_name,
            )
        })?;
    let Some((ip, port)) = kubelet_address(&node) else {
        return Err(ApiError::internal(format!(
            "node {node_name:?} has no kubelet address in its status"
        )));
    };
    if !ip.is_loopback() {
        return Err(ApiError::bad_request(format!(
            "pod {pod:?} runs on node {node_name:?}, whose kubelet at {ip}:{port} this server does not dial (only nodes on loopback addresses run containers here)"
        )));
    }
    Ok((ip, port))
}

fn text_response(status: StatusCode, body: ApiBody) -> Response<ApiBody> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}

/// A node's refusal as kube's `NewGenericServerResponse` makes it.
fn node_error(status: StatusCode, message: &str) -> ApiError {
    // A Status from the node keeps its own message.
    let message = serde_json::from_str::<Value>(message)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| message.to_string());
    match status {
        StatusCode::BAD_REQUEST => ApiError::bad_request(message),
        StatusCode::NOT_FOUND => ApiError::new(404, "NotFound", message),
        StatusCode::FORBIDDEN => ApiError::new(403, "Forbidden", message),
        StatusCode::UNAUTHORIZED => ApiError::new(401, "Unauthorized", message),
        _ => ApiError::internal(message),
    }
}

/// A connection to the kubelet at `ip:port` (upgradable when `upgrades`).
async fn connect(
    client: &KubeletClient,
    ip: IpAddr,
    port: u16,
    upgrades: bool,
) -> ApiResult<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> {
    let unreachable =
        |e: &dyn std::fmt::Display| ApiError::internal(format!("dial tcp {ip}:{port}: {e}"));
    let tcp = tokio::net::TcpStream::connect((ip, port))
        .await
        .map_err(|e| unreachable(&e))?;
    let connector = tokio_rustls::TlsConnector::from(client.tls.clone());
    let tls = connector
        .connect(ServerName::IpAddress(ip.into()), tcp)
        .await
        .map_err(|e| unreachable(&e))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| unreachable(&e))?;
    tokio::spawn(async move {
        if upgrades {
            let _ = conn.with_upgrades().await;
        } else {
            let _ = conn.await;
        }
    });
    Ok(sender)
}

/// GET `path` from the kubelet at `ip:port`; the body is streamed.
async fn get(
    client: &KubeletClient,
    ip: IpAddr,
    port: u16,
    path: &str,
) -> ApiResult<(StatusCode, mpsc::Receiver<Bytes>)> {
    get_typed(client, ip, port, path)
        .await
        .map(|(status, _, body)| (status, body))
}

/// [`get`], with the answer's content type.
async fn get_typed(
    client: &KubeletClient,
    ip: IpAddr,
    port: u16,
    path: &str,
) -> ApiResult<(StatusCode, Option<http::HeaderValue>, mpsc::Receiver<Bytes>)> {
    let mut sender = connect(client, ip, port, false).await?;
    let req = http::Request::get(path)
        .header(http::header::HOST, format!("{ip}:{port}"))
        .body(Empty::<Bytes>::new())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| ApiError::internal(format!("Get \"https://{ip}:{port}{path}\": {e}")))?;
    let status = resp.status();
    let content_type = resp.headers().get(http::header::CONTENT_TYPE).cloned();
    let (tx, rx) = mpsc::channel(16);
    let mut body = resp.into_body();
    tokio::spawn(async move {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Ok(data) = frame.into_data()
                && tx.send(data).await.is_err()
            {
                break;
            }
        }
        drop(sender);
    });
    Ok((status, content_type, rx))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_container_is_checked_as_kube_does() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        assert_eq!(pick_container(&pod, "p", Some("b")).unwrap(), "b");
        assert_eq!(pick_container(&pod, "p", Some("i")).unwrap(), "i");
        let e = pick_container(&pod, "p", Some("z")).unwrap_err();
        assert_eq!(e.message, "container z is not valid for pod p");
        let e = pick_container(&pod, "p", None).unwrap_err();
        assert_eq!(
            e.message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        let one = json!({"spec": {"containers": [{"name": "only"}]}});
        assert_eq!(pick_container(&one, "p", None).unwrap(), "only");
    }

    #[test]
    fn websocket_streams_pass_with_the_runtime_s_subprotocols() {
        let offer = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(
                http::header::SEC_WEBSOCKET_PROTOCOL,
                http::HeaderValue::from_str(v).unwrap(),
            );
            legacy_websocket_protocols(&h)
        };
        // kube-rs offers v5 then v4: v4 goes on.
        assert_eq!(
            offer("v5.channel.k8s.io, v4.channel.k8s.io").unwrap(),
            "v4.channel.k8s.io"
        );
        // The Python client: v4 alone.
        assert_eq!(offer("v4.channel.k8s.io").unwrap(), "v4.channel.k8s.io");
        // Offers of nothing the runtime speaks are refused before switching
        // (the caller translates v5 exec/attach and the tunnel first).
        for only_new in ["v5.channel.k8s.io", "SPDY/3.1+portforward.k8s.io"] {
            let e = offer(only_new).unwrap_err();
            assert_eq!(e.code, 400, "{only_new}");
            assert!(e.message.contains("retry over SPDY/3.1"), "{}", e.message);
        }
        assert_eq!(
            legacy_websocket_protocols(&http::HeaderMap::new()).unwrap(),
            ""
        );
    }

    #[test]
    fn the_kubelet_address_comes_from_the_node_status() {
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "n"}, {"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}});
        assert_eq!(
            kubelet_address(&node),
            Some(("127.0.0.1".parse().unwrap(), 10250))
        );
        assert_eq!(kubelet_address(&json!({})), None);
    }
}
