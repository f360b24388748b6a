//! Discovery (`/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`) and the
//! OpenAPI documents, all generated from the registry.
//!
//! This module serves the legacy documents and holds what both discovery
//! forms list ([`subresources`]); the aggregated form
//! (`apidiscovery.k8s.io/v2`, one document for `/api` and one for `/apis`)
//! is [`crate::aggregated`], chosen by the request's Accept header.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::body::ApiBody;
use crate::codec;
use crate::error::{ApiError, ApiResult};
use crate::registry::{ResourceDef, Strategy};
use crate::server::ApiServer;

/// Generated OpenAPI documents, rebuilt when the registry changes.
#[derive(Default)]
pub struct OpenApiCache {
    docs: Mutex<HashMap<String, (u64, Bytes)>>,
}

impl OpenApiCache {
    pub(crate) fn get_or(
        &self,
        key: &str,
        generation: u64,
        build: impl FnOnce() -> Bytes,
    ) -> Bytes {
        if let Some((_, b)) = self
            .docs
            .lock()
            .ok()
            .and_then(|docs| docs.get(key).filter(|(g, _)| *g == generation).cloned())
        {
            return b;
        }
        let b = build();
        if let Ok(mut docs) = self.docs.lock() {
            docs.insert(key.to_string(), (generation, b.clone()));
        }
        b
    }
}

/// `/api`.
pub fn core_versions(server: &ApiServer) -> Value {
    let addr = server.advertised();
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}],
    })
}

fn group_entry(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({"name": name, "versions": vs, "preferredVersion": preferred})
}

/// `/apis`.
pub fn groups(server: &ApiServer) -> Value {
    let groups: Vec<Value> = server
        .registry()
        .groups()
        .iter()
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`.
pub fn group(server: &ApiServer, name: &str) -> ApiResult<Value> {
    let groups = server.registry().groups();
    let (_, vs) = groups
        .iter()
        .find(|(g, _)| g == name)
        .ok_or_else(ApiError::no_route)?;
    let mut v = group_entry(name, vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Ok(v)
}

/// A subresource as discovery lists it.
pub(crate) struct Subresource {
    /// The path segment (`status`, `scale`, …).
    pub name: &'static str,
    /// Group of the kind it answers with.
    pub group: String,
    /// Version of the kind it answers with.
    pub version: String,
    /// The kind it answers with.
    pub kind: String,
    /// Verbs it serves.
    pub verbs: &'static [&'static str],
}

const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];

/// The subresources of a row that the server serves, by name (the order
/// kube-apiserver lists them in).
pub(crate) fn subresources(d: &ResourceDef) -> Vec<Subresource> {
    let own = |name, verbs| Subresource {
        name,
        group: d.group.clone(),
        version: d.version.clone(),
        kind: d.kind.clone(),
        verbs,
    };
    let mut out = Vec::new();
    if crate::csr::is_csr(d) {
        out.push(own("approval", GET_PATCH_UPDATE));
    }
    if d.binding {
        out.push(Subresource {
            name: "binding",
            group: String::new(),
            version: "v1".into(),
            kind: "Binding".into(),
            verbs: &["create"],
        });
    }
    if d.ephemeral_containers {
        out.push(own("ephemeralcontainers", GET_PATCH_UPDATE));
    }
    if d.group.is_empty() && d.plural == "serviceaccounts" {
        out.push(Subresource {
            name: "token",
            group: "authentication.k8s.io".into(),
            version: "v1".into(),
            kind: "TokenRequest".into(),
            verbs: &["create"],
        });
    }
    if d.eviction {
        // Pods: logs and streams are served by the node (`crate::nodeproxy`).
        out.push(own("log", &["get"]));
        for (name, kind) in [
            ("exec", "PodExecOptions"),
            ("attach", "PodAttachOptions"),
            ("portforward", "PodPortForwardOptions"),
        ] {
            out.push(Subresource {
                name,
                group: String::new(),
                version: "v1".into(),
                kind: kind.into(),
                verbs: &["create", "get"],
            });
        }
        out.push(Subresource {
            name: "eviction",
            group: "policy".into(),
            version: "v1".into(),
            kind: "Eviction".into(),
            verbs: &["create"],
        });
    }
    if d.strategy == Strategy::Namespace {
        out.push(own("finalize", &["update"]));
    }
    if d.scale.is_some() {
        out.push(Subresource {
            name: "scale",
            group: "autoscaling".into(),
            version: "v1".into(),
            kind: "Scale".into(),
            verbs: GET_PATCH_UPDATE,
        });
    }
    if d.status {
        out.push(own("status", GET_PATCH_UPDATE));
    }
    out
}

/// `/api/v1`, `/apis/{group}/{version}`.
pub fn resources(server: &ApiServer, group: &str, version: &str) -> ApiResult<Value> {
    let defs = server.registry().group_version(group, version);
    if defs.is_empty() {
        return Err(ApiError::no_route());
    }
    let mut list = Vec::new();
    for d in &defs {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": d.verbs,
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        list.push(r);
        for sub in subresources(d) {
            let mut r = json!({
                "name": format!("{}/{}", d.plural, sub.name),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": sub.kind,
                "verbs": sub.verbs,
            });
            if (sub.group.as_str(), sub.version.as_str()) != (d.group.as_str(), d.version.as_str())
            {
                r["group"] = json!(sub.group);
                r["version"] = json!(sub.version);
            }
            list.push(r);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
    )
}

/// `/openapi/v2`: protobuf when asked for (kubectl), JSON otherwise.
pub fn openapi_v2(server: &ApiServer, headers: &HeaderMap) -> Response<ApiBody> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let generation = server.registry().generation();
    let cache = &server.inner.openapi;
    if accept.contains("protobuf") {
        let body = cache.get_or("v2pb", generation, || {
            Bytes::from(kubeforge_schema::openapi_v2_protobuf(
                &server.registry().resource_infos(),
            ))
        });
        let mut r = Response::new(ApiBody::full(body));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static(
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            ),
        );
        return r;
    }
    let body = cache.get_or("v2json", generation, || {
        Bytes::from(
            kubeforge_schema::openapi_v2_json(&server.registry().resource_infos()).to_string(),
        )
    });
    codec::respond(StatusCode::OK, body, false)
}

/// `/openapi/v3`.
pub fn openapi_v3_root(server: &ApiServer) -> Response<ApiBody> {
    let body = server
        .inner
        .openapi
        .get_or("v3root", server.registry().generation(), || {
            Bytes::from(
                kubeforge_schema::openapi_v3_root(&server.registry().resource_infos()).to_string(),
            )
        });
    codec::respond(StatusCode::OK, body, false)
}

/// `/openapi/v3/apis/{group}/{version}`.
pub fn openapi_v3(server: &ApiServer, group: &str, version: &str) -> ApiResult<Response<ApiBody>> {
    let infos: Vec<_> = server
        .registry()
        .resource_infos()
        .into_iter()
        .filter(|i| i.group == group && i.version == version)
        .collect();
    if infos.is_empty() {
        return Err(ApiError::no_route());
    }
    let key = format!("v3/{group}/{version}");
    let body = server
        .inner
        .openapi
        .get_or(&key, server.registry().generation(), || {
            Bytes::from(
                kubeforge_schema::openapi_v3_group_version(group, version, &infos).to_string(),
            )
        });
    Ok(codec::respond(StatusCode::OK, body, false))
}
