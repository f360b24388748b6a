//! The Metrics API (`metrics.k8s.io/v1beta1`: NodeMetrics `nodes`,
//! PodMetrics `pods`) served in-process from a [`MetricsProvider`], as
//! metrics-server serves it behind kube-aggregator: get and list only
//! (label and field selectors), no watch, computed per request and never
//! stored. The rows appear in discovery once a provider is set
//! ([`ApiServer::set_metrics_provider`]), so `kubectl top` finds the group
//! exactly when something answers it.
//!
//! The provider is a trait over JSON so the server needs no knowledge of
//! where usage comes from; `kubeforge up` plugs in
//! `kubeforge-observability`'s watch-fed provider.

use std::sync::Arc;

use http::{Method, Response, StatusCode};
use serde_json::{Value, json};

use crate::body::ApiBody;
use crate::codec;
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::server::ApiServer;
use crate::table::{self, IncludeObject};

/// The Metrics API's group.
pub(crate) const GROUP: &str = "metrics.k8s.io";

/// Where the Metrics API's objects come from: NodeMetrics and PodMetrics as
/// metrics-server writes them (JSON objects with `kind`, `apiVersion`,
/// `metadata`, `timestamp`, `window` and `usage` or `containers`).
pub trait MetricsProvider: Send + Sync + 'static {
    /// Every node's NodeMetrics.
    fn nodes(&self) -> Vec<Value>;
    /// The PodMetrics of `namespace`'s running pods (all namespaces with
    /// `None`).
    fn pods(&self, namespace: Option<&str>) -> Vec<Value>;
}

impl ApiServer {
    /// Serve `metrics.k8s.io/v1beta1` from `provider` (replacing any
    /// provider set before); the group appears in discovery from now on.
    pub fn set_metrics_provider(&self, provider: Arc<dyn MetricsProvider>) {
        *self
            .inner
            .metrics_provider
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(provider);
        for def in crate::builtin::metrics_rows() {
            self.registry().insert(def, None);
        }
    }

    fn metrics_provider(&self) -> Option<Arc<dyn MetricsProvider>> {
        self.inner
            .metrics_provider
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Whether a row is one of the Metrics API's.
pub(crate) fn serves(def: &crate::registry::ResourceDef) -> bool {
    def.group == GROUP && def.custom.is_none()
}

/// GET (one or a list); every other verb is refused with 405.
pub(crate) fn serve(
    ctx: &mut Ctx<'_>,
    method: &Method,
    subresource: Option<&str>,
) -> ApiResult<Response<ApiBody>> {
    if subresource.is_some() {
        return Err(ApiError::no_route());
    }
    let watching = ctx.name.is_none() && ctx.query.flag("watch");
    if *method != Method::GET || watching {
        let verb = if watching { "watch" } else { method.as_str() };
        return Err(ApiError::method_not_supported(ctx.def.gr(), verb));
    }
    let provider = ctx
        .server
        .metrics_provider()
        .ok_or_else(ApiError::no_route)?;
    let items = if ctx.def.namespaced {
        provider.pods(ctx.ns.as_deref())
    } else {
        provider.nodes()
    };
    if let Some(name) = ctx.name.clone() {
        let item = items
            .into_iter()
            .find(|i| i.pointer("/metadata/name").and_then(Value::as_str) == Some(&name))
            .ok_or_else(|| ApiError::not_found(ctx.def.gr(), &name))?;
        if ctx.accept.table {
            let include = IncludeObject::parse(ctx.query.get("includeObject"));
            let body = table::single(&ctx.def.columns, &item, include);
            return Ok(codec::respond_value(StatusCode::OK, &body));
        }
        return Ok(codec::respond(
            StatusCode::OK,
            bytes::Bytes::from(item.to_string()),
            ctx.accept.yaml,
        ));
    }
    let (labels, fields) = ctx.selectors()?;
    let items: Vec<Value> = items
        .into_iter()
        .filter(|i| crate::rest::matches(&ctx.def, i, &labels, &fields))
        .collect();
    if ctx.accept.table {
        let include = IncludeObject::parse(ctx.query.get("includeObject"));
        let body = table::table(&ctx.def.columns, &items, include, json!({}));
        return Ok(codec::respond_value(StatusCode::OK, &body));
    }
    let list = json!({
        "kind": format!("{}List", ctx.def.kind),
        "apiVersion": ctx.def.api_version(),
        "metadata": {},
        "items": items,
    });
    Ok(codec::respond(
        StatusCode::OK,
        bytes::Bytes::from(list.to_string()),
        ctx.accept.yaml,
    ))
}
