//! Shared harness of the fuzz targets: an in-process [`ApiServer`] driven
//! through its tower service on a single-threaded tokio runtime, the
//! fixtures the request targets work on, and the check every answer must
//! pass (no panic, no 500).
//!
//! A panic anywhere in a request's handling unwinds through
//! [`Harness::send`] into libFuzzer, which records the input as a crash.

use std::sync::OnceLock;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use kubeforge_apiserver::ApiServer;
use kubeforge_apiserver::body::ApiBody;
use serde_json::{Value, json};

/// The current-thread runtime every target's requests run on.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

/// One request as a target builds it.
pub struct Req<'a> {
    /// HTTP method.
    pub method: Method,
    /// Path and query (`/api/v1/namespaces/default/pods?limit=1`).
    pub uri: &'a str,
    /// Content-Type header, if any.
    pub content_type: Option<&'a str>,
    /// Extra headers (Accept, ...).
    pub headers: &'a [(&'a str, &'a str)],
    /// Request body.
    pub body: Bytes,
}

/// What a request's answer was, as far as the targets look at it.
pub struct Answer {
    /// Status code.
    pub status: StatusCode,
    /// The body (at most one frame for streaming answers such as watches).
    pub body: Bytes,
}

/// Sends `req` to `server` in-process and reads the answer (a streaming
/// answer, a watch, only as far as it is ready without waiting). `None`
/// when the request cannot even be built (an invalid URI or header: hyper
/// would have refused it before the server saw it).
pub async fn send(server: &ApiServer, req: Req<'_>) -> Option<Answer> {
    let mut b = Request::builder().method(req.method).uri(req.uri);
    if let Some(ct) = req.content_type {
        b = b.header(http::header::CONTENT_TYPE, ct);
    }
    for (k, v) in req.headers {
        b = b.header(*k, *v);
    }
    let request = b.body(Full::new(req.body)).ok()?;
    let resp: Response<ApiBody> = server.handle(request).await;
    let status = resp.status();
    let mut body = resp.into_body();
    let mut out = Vec::new();
    // Full bodies are one frame; a watch yields its initial events and then
    // pends: take what is ready, never wait.
    for _ in 0..64 {
        match futures::FutureExt::now_or_never(body.frame()) {
            Some(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    out.extend_from_slice(d);
                }
            }
            _ => break,
        }
    }
    let answer = Answer {
        status,
        body: Bytes::from(out),
    };
    check(&answer);
    Some(answer)
}

/// Every answer must be a proper one: a 500 is an unhandled error (or a
/// caught panic) and counts as a crash of the target.
pub fn check(a: &Answer) {
    if a.status == StatusCode::INTERNAL_SERVER_ERROR {
        panic!(
            "500 Internal Server Error: {}",
            String::from_utf8_lossy(&a.body)
        );
    }
}

/// The CRD the request targets create (`widgets.fuzz.example.com`): defaults,
/// int-or-string, CEL rules including a transition rule, a `set` list, a
/// `map` list, and the status and scale subresources.
pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.fuzz.example.com" },
        "spec": {
            "group": "fuzz.example.com",
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"] },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": widget_schema() },
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "additionalPrinterColumns": [
                    { "name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas" },
                    { "name": "Surge", "type": "string", "jsonPath": ".spec.maxSurge" },
                    { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
                ],
            }],
        },
    })
}

/// The Widget CRD's `openAPIV3Schema`.
pub fn widget_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    { "rule": "self.minReplicas <= self.replicas", "message": "minReplicas must not exceed replicas" },
                ],
                "properties": {
                    "replicas": { "type": "integer", "default": 1, "minimum": 0 },
                    "minReplicas": { "type": "integer", "default": 0 },
                    "maxSurge": { "x-kubernetes-int-or-string": true, "default": "25%" },
                    "image": { "type": "string", "maxLength": 64 },
                    "class": {
                        "type": "string",
                        "x-kubernetes-validations": [{ "rule": "self == oldSelf", "message": "class is immutable" }],
                    },
                    "tags": { "type": "array", "x-kubernetes-list-type": "set", "items": { "type": "string" } },
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["port", "protocol"],
                        "items": {
                            "type": "object",
                            "required": ["port"],
                            "properties": {
                                "port": { "type": "integer", "format": "int32" },
                                "protocol": { "type": "string", "default": "TCP" },
                                "name": { "type": "string" },
                            },
                        },
                    },
                    "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                    "extra": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "replicas": { "type": "integer" },
                    "selector": { "type": "string" },
                },
            },
        },
    })
}

/// The objects [`fixture_server`] holds, as (collection path, object).
pub fn fixtures() -> Vec<(&'static str, Value)> {
    vec![
        (
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            widget_crd(),
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm", "labels": {"app": "web"}, "annotations": {"a": "b"}},
                   "data": {"k": "v", "x": "y"}}),
        ),
        (
            "/api/v1/namespaces/default/services",
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "svc", "labels": {"app": "web"}},
                   "spec": {"selector": {"app": "web"},
                            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                                      {"name": "dns", "port": 53, "protocol": "UDP"}]}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "dep", "labels": {"app": "web"}},
                   "spec": {"replicas": 2,
                            "selector": {"matchLabels": {"app": "web"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [{"name": "c", "image": "nginx:1",
                                                  "ports": [{"containerPort": 80}],
                                                  "env": [{"name": "A", "value": "1"}],
                                                  "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}}}),
        ),
        (
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "pod", "labels": {"app": "web"}},
                   "spec": {"containers": [{"name": "c", "image": "nginx:1",
                            "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                            "initContainers": [{"name": "i", "image": "busybox"}],
                            "tolerations": [{"key": "k", "operator": "Exists"}]}}),
        ),
        (
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
                   "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
                   "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}),
        ),
        (
            "/apis/fuzz.example.com/v1/namespaces/default/widgets",
            json!({"apiVersion": "fuzz.example.com/v1", "kind": "Widget",
                   "metadata": {"name": "w"},
                   "spec": {"replicas": 3, "minReplicas": 1, "class": "gold", "tags": ["a", "b"],
                            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"}],
                            "labels": {"x": "y"}, "extra": {"any": [1, 2]}}}),
        ),
    ]
}

/// A fresh in-memory server holding [`fixtures`] (created with
/// server-side apply, so they carry managedFields of the manager `fixture`).
pub async fn fixture_server() -> ApiServer {
    let server = ApiServer::in_memory().await;
    for (collection, obj) in fixtures() {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let uri = format!("{collection}/{name}?fieldManager=fixture");
        let body = Bytes::from(obj.to_string());
        let a = send(
            &server,
            Req {
                method: Method::PATCH,
                uri: &uri,
                content_type: Some("application/apply-patch+yaml"),
                headers: &[],
                body,
            },
        )
        .await
        .expect("fixture request");
        assert!(
            a.status.is_success(),
            "fixture {uri}: {} {}",
            a.status,
            String::from_utf8_lossy(&a.body)
        );
    }
    server
}

/// The fixture server shared by the targets that only read or dry-run.
pub fn shared_server() -> &'static ApiServer {
    static SERVER: OnceLock<ApiServer> = OnceLock::new();
    SERVER.get_or_init(|| runtime().block_on(fixture_server()))
}

/// A request written as text, HTTP/1.1 style: `METHOD /path?query`, then
/// `Name: value` header lines, an empty line, and the body (bytes). What
/// [`parse_request`] reads; the seed corpora are written this way.
pub struct TextRequest {
    /// HTTP method.
    pub method: Method,
    /// Path and query.
    pub uri: String,
    /// Headers in order.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Bytes,
}

/// Parses one [`TextRequest`]; `None` if the first line is not
/// `METHOD URI` or a header line has no colon.
pub fn parse_request(data: &[u8]) -> Option<TextRequest> {
    let (head, body) = match find(data, b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.split('\n');
    let (method, uri) = lines.next()?.split_once(' ')?;
    let method = Method::from_bytes(method.as_bytes()).ok()?;
    let mut headers = Vec::new();
    for l in lines {
        let (k, v) = l.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    Some(TextRequest {
        method,
        uri: uri.to_string(),
        headers,
        body: Bytes::copy_from_slice(body),
    })
}

/// Sends a [`TextRequest`] (see [`send`]).
pub async fn send_text(server: &ApiServer, r: &TextRequest) -> Option<Answer> {
    let headers: Vec<(&str, &str)> = r
        .headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("content-type"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let content_type = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.as_str());
    send(
        server,
        Req {
            method: r.method.clone(),
            uri: &r.uri,
            content_type,
            headers: &headers,
            body: r.body.clone(),
        },
    )
    .await
}

/// Position of `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Splits `data` at each `sep`.
pub fn split<'a>(data: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(i) = find(rest, sep) {
        out.push(&rest[..i]);
        rest = &rest[i + sep.len()..];
    }
    out.push(rest);
    out
}
