//! Aggregated discovery: `/api` and `/apis` answered with one
//! `APIGroupDiscoveryList` (`apidiscovery.k8s.io/v2` or `v2beta1`) when the
//! Accept header asks for it, as kube-apiserver's
//! `endpoints/discovery/aggregated` handler does.
//!
//! client-go (kubectl ≥ 1.26) and kube-rs `Discovery::run_aggregated` send
//! `Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,…`
//! and read the format from the response's Content-Type, so the reply names
//! the type it carries. One round-trip per document replaces the legacy
//! `/api/v1` plus one `/apis/{group}/{version}` per group-version.
//!
//! The documents come from the same registry rows and subresource list
//! ([`crate::discovery::subresources`]) as the legacy ones, so both forms
//! always agree; they are cached per registry generation and carry an ETag
//! (`If-None-Match` gets 304), with `Vary: Accept` and
//! `Cache-Control: public` as kube sends.

use std::hash::{Hash, Hasher};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::body::ApiBody;
use crate::codec;
use crate::registry::ResourceDef;
use crate::server::ApiServer;

/// The group every aggregated discovery type belongs to.
const GROUP: &str = "apidiscovery.k8s.io";
/// The list kind clients ask for with `as=`.
const KIND: &str = "APIGroupDiscoveryList";

/// Which discovery document a request asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// `APIVersions` / `APIGroupList`.
    Legacy,
    /// `APIGroupDiscoveryList` in this version (`v2` or `v2beta1`).
    Aggregated(&'static str),
}

/// Pick the form from the Accept header: the acceptable entry with the
/// highest `q` (the first among equals). Aggregated entries must be JSON
/// with `g=apidiscovery.k8s.io;as=APIGroupDiscoveryList` and a known `v`;
/// a plain JSON entry means legacy; anything else (protobuf, Table) is
/// skipped. No acceptable entry at all is answered with the legacy form.
pub(crate) fn negotiate(headers: &HeaderMap) -> Form {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Form::Legacy;
    };
    let mut best: Option<(f32, Form)> = None;
    for entry in accept.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        if !matches!(media.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        let (mut g, mut v, mut as_, mut q) = (None, None, None, 1.0f32);
        for p in parts {
            let Some((k, val)) = p.split_once('=') else {
                continue;
            };
            let val = val.trim();
            match k.trim() {
                "g" => g = Some(val),
                "v" => v = Some(val),
                "as" => as_ = Some(val),
                "q" => q = val.parse().unwrap_or(0.0),
                _ => {}
            }
        }
        let form = match (g, v, as_) {
            (_, _, None) => Form::Legacy,
            (Some(GROUP), Some("v2"), Some(KIND)) => Form::Aggregated("v2"),
            (Some(GROUP), Some("v2beta1"), Some(KIND)) => Form::Aggregated("v2beta1"),
            _ => continue,
        };
        if q > 0.0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, form));
        }
    }
    best.map_or(Form::Legacy, |(_, f)| f)
}

/// `/api` (`core`) or `/apis` in the form the request asked for.
pub(crate) fn serve(server: &ApiServer, headers: &HeaderMap, core: bool) -> Response<ApiBody> {
    let version = match negotiate(headers) {
        Form::Legacy => {
            let doc = if core {
                crate::discovery::core_versions(server)
            } else {
                crate::discovery::groups(server)
            };
            return codec::respond_value(StatusCode::OK, &doc);
        }
        Form::Aggregated(v) => v,
    };
    let key = format!("aggregated/{}/{version}", if core { "api" } else { "apis" });
    let body = server
        .inner
        .openapi
        .get_or(&key, server.registry().generation(), || {
            Bytes::from(document(server, core, version).to_string())
        });
    let etag = format!("\"{}\"", etag_of(&body));
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    let mut r = if not_modified {
        let mut r = Response::new(ApiBody::full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(ApiBody::full(body));
        if let Ok(ct) =
            HeaderValue::from_str(&format!("application/json;g={GROUP};v={version};as={KIND}"))
        {
            r.headers_mut().insert(header::CONTENT_TYPE, ct);
        }
        r
    };
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    r
}

/// An opaque tag of a document's bytes (kube uses a SHA-512 of the JSON;
/// clients only compare it).
fn etag_of(body: &[u8]) -> String {
    let mut h = std::hash::DefaultHasher::new();
    body.hash(&mut h);
    format!("{:016X}", h.finish())
}

/// The `APIGroupDiscoveryList`: the core group alone for `/api`, every
/// other group for `/apis`, in the order of the legacy documents
/// (`Registry::groups`: built-in groups by kube's priority, then custom
/// groups by name; versions by preference).
pub(crate) fn document(server: &ApiServer, core: bool, version: &str) -> Value {
    let registry = server.registry();
    let groups: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        registry.groups()
    };
    let items: Vec<Value> = groups
        .iter()
        .filter_map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .filter_map(|v| {
                    let defs = registry.group_version(group, v);
                    (!defs.is_empty()).then(|| {
                        json!({
                            "version": v,
                            "resources": defs.iter().map(|d| resource(d)).collect::<Vec<_>>(),
                            "freshness": "Current",
                        })
                    })
                })
                .collect();
            if versions.is_empty() {
                return None;
            }
            let mut metadata = json!({"creationTimestamp": null});
            if !group.is_empty() {
                metadata["name"] = json!(group);
            }
            Some(json!({"metadata": metadata, "versions": versions}))
        })
        .collect();
    json!({
        "kind": KIND,
        "apiVersion": format!("{GROUP}/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// One `APIResourceDiscovery`.
fn resource(d: &ResourceDef) -> Value {
    let mut r = json!({
        "resource": d.plural,
        "responseKind": {"group": d.group, "version": d.version, "kind": d.kind},
        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": d.singular,
        "verbs": d.verbs,
    });
    if !d.short_names.is_empty() {
        r["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        r["categories"] = json!(d.categories);
    }
    let subs: Vec<Value> = crate::discovery::subresources(d)
        .into_iter()
        .map(|s| {
            json!({
                "subresource": s.name,
                "responseKind": {"group": s.group, "version": s.version, "kind": s.kind},
                "verbs": s.verbs,
            })
        })
        .collect();
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_str(v).expect("header value"),
        );
        h
    }

    #[test]
    fn client_go_gets_v2() {
        let h = accept(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
        );
        assert_eq!(negotiate(&h), Form::Aggregated("v2"));
    }

    #[test]
    fn protobuf_first_is_skipped_and_q_is_honoured() {
        let h = accept(
            "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList;q=0.9,application/json;q=0.8",
        );
        assert_eq!(negotiate(&h), Form::Aggregated("v2beta1"));
        let h = accept(
            "application/json;q=0.9,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.5",
        );
        assert_eq!(negotiate(&h), Form::Legacy);
    }

    #[test]
    fn plain_or_unknown_is_legacy() {
        assert_eq!(negotiate(&HeaderMap::new()), Form::Legacy);
        assert_eq!(negotiate(&accept("application/json")), Form::Legacy);
        assert_eq!(
            negotiate(&accept(
                "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"
            )),
            Form::Legacy
        );
    }
}
