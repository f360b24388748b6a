//! `componentstatuses` (core/v1, deprecated since 1.19 and still served):
//! read-only, computed on each request rather than stored, with the
//! deprecation `Warning` kube sends.
//!
//! kube-apiserver probes kube-scheduler, kube-controller-manager and each
//! etcd server; kubeforge's equivalents run in-process, so the answer comes
//! from what was declared ([`crate::ApiServer::set_scheduler_running`],
//! [`crate::ApiServer::set_controllers_running`]) and from the store
//! answering.

use http::{Method, Response, StatusCode};
use serde_json::{Value, json};

use crate::body::ApiBody;
use crate::codec;
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult, GroupResource};
use crate::table::{self, IncludeObject};

/// The resource's plural.
pub(crate) const PLURAL: &str = "componentstatuses";

/// The warning kube attaches to every componentstatuses response.
const DEPRECATED: &str = "v1 ComponentStatus is deprecated in v1.19+";

/// Whether a row is this virtual resource.
pub(crate) fn serves(def: &crate::registry::ResourceDef) -> bool {
    def.group.is_empty() && def.plural == PLURAL
}

/// GET (list or one); every other verb is refused with 405.
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
    ctx.warnings.push(DEPRECATED.to_string());
    let items = statuses(ctx);
    if let Some(name) = ctx.name.clone() {
        let item = items
            .into_iter()
            .find(|i| i.pointer("/metadata/name").and_then(Value::as_str) == Some(&name))
            .ok_or_else(|| {
                ApiError::not_found(
                    GroupResource {
                        group: "",
                        resource: PLURAL,
                    },
                    &name,
                )
            })?;
        return Ok(respond_one(ctx, &item));
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
        "kind": "ComponentStatusList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    });
    Ok(codec::respond(
        StatusCode::OK,
        bytes::Bytes::from(list.to_string()),
        ctx.accept.yaml,
    ))
}

fn respond_one(ctx: &Ctx<'_>, item: &Value) -> Response<ApiBody> {
    if ctx.accept.table {
        let include = IncludeObject::parse(ctx.query.get("includeObject"));
        let body = table::table(
            &ctx.def.columns,
            std::slice::from_ref(item),
            include,
            json!({}),
        );
        return codec::respond_value(StatusCode::OK, &body);
    }
    codec::respond(
        StatusCode::OK,
        bytes::Bytes::from(item.to_string()),
        ctx.accept.yaml,
    )
}

/// The three components kube reports, in kube's order.
fn statuses(ctx: &Ctx<'_>) -> Vec<Value> {
    let server = ctx.server;
    let scheduler = if server.scheduler_running() {
        Ok(())
    } else {
        Err("no scheduler is running against this server (kubeforge up runs one)")
    };
    let controllers = if server.gc_enabled() || server.namespace_controller_enabled() {
        Ok(())
    } else {
        Err("the built-in controllers are not running against this server (kubeforge up runs them)")
    };
    vec![
        status("scheduler", scheduler),
        status("controller-manager", controllers),
        // The store answered this request's registry lookup: it is up.
        status("etcd-0", Ok(())),
    ]
}

fn status(name: &str, health: Result<(), &str>) -> Value {
    let condition = match health {
        Ok(()) => json!({"type": "Healthy", "status": "True", "message": "ok"}),
        Err(e) => json!({"type": "Healthy", "status": "False", "error": e}),
    };
    json!({
        "kind": "ComponentStatus",
        "apiVersion": "v1",
        "metadata": {"name": name, "creationTimestamp": null},
        "conditions": [condition],
    })
}
