//! Decoding request bodies (JSON or YAML) and encoding responses.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use serde_json::Value;

use crate::body::ApiBody;
use crate::error::ApiError;

/// Largest request body accepted (kube-apiserver's limit is 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Media types a request body may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyType {
    /// application/json
    Json,
    /// application/yaml
    Yaml,
    /// application/json-patch+json
    JsonPatch,
    /// application/merge-patch+json
    MergePatch,
    /// application/strategic-merge-patch+json
    StrategicMergePatch,
    /// application/apply-patch+yaml (server-side apply)
    ApplyPatch,
    /// application/vnd.kubernetes.protobuf (kubectl 1.32+ typed creates)
    Protobuf,
}

/// Classify the Content-Type header.
pub fn body_type(headers: &HeaderMap) -> Result<BodyType, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let base = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    Ok(match base.as_str() {
        "" | "application/json" | "*/*" => BodyType::Json,
        "application/yaml" | "application/x-yaml" | "text/yaml" => BodyType::Yaml,
        "application/json-patch+json" => BodyType::JsonPatch,
        "application/merge-patch+json" => BodyType::MergePatch,
        "application/strategic-merge-patch+json" => BodyType::StrategicMergePatch,
        "application/apply-patch+yaml" | "application/apply-patch+json" => BodyType::ApplyPatch,
        "application/vnd.kubernetes.protobuf" => BodyType::Protobuf,
        _ => return Err(ApiError::unsupported_media_type(ct)),
    })
}

/// Parse a body as JSON, or YAML when the type says so (YAML is a superset,
/// so apply patches are parsed as YAML).
pub fn decode(bytes: &[u8], ty: BodyType) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    match ty {
        BodyType::Protobuf => crate::protobuf::decode(bytes).map_err(|e| {
            ApiError::bad_request(format!(
                "the object provided is unrecognized (error decoding protobuf: {e})"
            ))
        }),
        BodyType::Yaml | BodyType::ApplyPatch => {
            if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
                return Ok(v);
            }
            let text = std::str::from_utf8(bytes)
                .map_err(|_| ApiError::bad_request("the request body is not valid UTF-8"))?;
            serde_saphyr::from_str::<Value>(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
        }
        _ => serde_json::from_slice(bytes).map_err(|e| {
            ApiError::bad_request(format!(
                "the object provided is unrecognized (error decoding JSON: {e})"
            ))
        }),
    }
}

/// A request header (value `true`) asking for objects without
/// `metadata.managedFields` in responses and watch events: a kubeforge
/// extension the built-in components' in-process client sends
/// ([`ApiServer::builtin_client`](crate::ApiServer::builtin_client)).
/// kube-apiserver has no such option; other clients never see a change.
pub const OMIT_MANAGED_FIELDS: http::HeaderName =
    http::HeaderName::from_static("x-kubeforge-omit-managed-fields");

/// What the client asked for in Accept.
#[derive(Clone, Debug, Default)]
pub struct Accept {
    /// `as=Table` was requested.
    pub table: bool,
    /// `as=PartialObjectMetadata` / `PartialObjectMetadataList`.
    pub metadata_only: bool,
    /// YAML preferred over JSON.
    pub yaml: bool,
    /// Objects without `metadata.managedFields` ([`OMIT_MANAGED_FIELDS`]).
    pub omit_managed_fields: bool,
}

/// Parse the Accept header the way kube-apiserver negotiates: the first
/// acceptable entry wins; Table and PartialObjectMetadata are honoured.
/// [`OMIT_MANAGED_FIELDS`] is read too.
pub fn accept(headers: &HeaderMap) -> Accept {
    let mut a = accept_media(headers);
    a.omit_managed_fields = headers
        .get(OMIT_MANAGED_FIELDS)
        .is_some_and(|v| v.as_bytes() == b"true");
    a
}

fn accept_media(headers: &HeaderMap) -> Accept {
    let Some(a) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Accept::default();
    };
    for entry in a.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut as_ = None;
        let mut group = None;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim() {
                    "as" => as_ = Some(v.trim().to_string()),
                    "g" => group = Some(v.trim().to_string()),
                    _ => {}
                }
            }
        }
        let json_like = media == "application/json" || media == "*/*" || media == "application/*";
        let yaml = media == "application/yaml";
        if !(json_like || yaml) {
            continue;
        }
        match (as_.as_deref(), group.as_deref()) {
            (Some("Table"), Some("meta.k8s.io")) => {
                return Accept {
                    table: true,
                    metadata_only: false,
                    yaml,
                    omit_managed_fields: false,
                };
            }
            (Some("PartialObjectMetadata" | "PartialObjectMetadataList"), Some("meta.k8s.io")) => {
                return Accept {
                    table: false,
                    metadata_only: true,
                    yaml,
                    omit_managed_fields: false,
                };
            }
            (Some(_), _) => continue,
            (None, _) => {
                return Accept {
                    table: false,
                    metadata_only: false,
                    yaml,
                    omit_managed_fields: false,
                };
            }
        }
    }
    Accept::default()
}

/// A JSON (or YAML) response.
pub fn respond(code: StatusCode, body: Bytes, yaml: bool) -> Response<ApiBody> {
    let (ct, body) = if yaml {
        match serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| serde_saphyr::to_string(&v).ok())
        {
            Some(y) => ("application/yaml", Bytes::from(y)),
            None => ("application/json", body),
        }
    } else {
        ("application/json", body)
    };
    let mut r = Response::new(ApiBody::full(body));
    *r.status_mut() = code;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

/// A JSON value response, leading with `kind` and `apiVersion` (and so
/// does each of a list's `items`), as kube-apiserver writes objects.
pub fn respond_value(code: StatusCode, v: &Value) -> Response<ApiBody> {
    respond(code, Bytes::from(crate::object::to_json_list(v)), false)
}

/// kube's `Status` Success answer to a create that makes no object
/// (`pods/binding`, `pods/eviction`): 201, in Go's field order.
pub fn respond_created_status() -> Response<ApiBody> {
    const BODY: &str = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Success\",\"code\":201}\n";
    respond(
        StatusCode::CREATED,
        Bytes::from_static(BODY.as_bytes()),
        false,
    )
}

/// The `Status` response for an error.
pub fn respond_error(e: &ApiError) -> Response<ApiBody> {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = e.status_json();
    body.push(b'\n');
    let mut r = respond(code, Bytes::from(body), false);
    if let Some(v) = e
        .details
        .retry_after
        .filter(|secs| *secs > 0)
        .and_then(|secs| HeaderValue::from_str(&secs.to_string()).ok())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}
