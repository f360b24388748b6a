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
    let node_key = format!("/registry/core/nodes/{node_name}");
    let node: Value = ctx
        .server
        .store()
        .get(&node_key)
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
            "pod {name:?} runs on node {node_name:?}, whose kubelet at {ip}:{port} this server does not dial (only nodes on loopback addresses run containers here)"
        )));
    }
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
    let (status, body) = get(&client, ip, port, node_name, &path).await?;
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

/// GET `path` from the kubelet at `ip:port`; the body is streamed.
async fn get(
    client: &KubeletClient,
    ip: IpAddr,
    port: u16,
    node: &str,
    path: &str,
) -> ApiResult<(StatusCode, mpsc::Receiver<Bytes>)> {
    let unreachable = |e: &dyn std::fmt::Display| {
        ApiError::internal(format!("Get \"https://{ip}:{port}{path}\": {e}"))
    };
    let tcp = tokio::net::TcpStream::connect((ip, port))
        .await
        .map_err(|e| unreachable(&e))?;
    let connector = tokio_rustls::TlsConnector::from(client.tls.clone());
    let server_name = ServerName::IpAddress(ip.into());
    let tls = connector
        .connect(server_name, tcp)
        .await
        .map_err(|e| unreachable(&e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| unreachable(&e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::get(path)
        .header(http::header::HOST, format!("{ip}:{port}"))
        .header("X-Kubeforge-Node", node)
        .body(Empty::<Bytes>::new())
        .map_err(|e| unreachable(&e))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| unreachable(&e))?;
    let status = resp.status();
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
    Ok((status, rx))
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
