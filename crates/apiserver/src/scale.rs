//! The `/scale` subresource (autoscaling/v1 Scale) and `pods/binding`.

use http::{Method, Response, StatusCode};
use serde_json::{Value, json};

use crate::body::ApiBody;
use crate::codec::{self, BodyType};
use crate::context::{Ctx, Sub};
use crate::error::{ApiError, ApiResult};
use crate::fieldset;
use crate::object;
use crate::rest;
use crate::ssa::{self, scale::SCALE_API_VERSION};

fn scale_of(ctx: &Ctx<'_>, obj: &Value) -> ApiResult<Value> {
    let paths = ctx.def.scale.as_ref().ok_or_else(ApiError::no_route)?;
    let spec = object::get_path(obj, &paths.spec_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status = object::get_path(obj, &paths.status_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(|p| object::get_path(obj, p))
        .map(|v| {
            use kubeforge_apimachinery::labels::Selector;
            match v {
                Value::String(s) => s.clone(),
                other if paths.selector_is_set => Selector::from_set(other)
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
                other => Selector::from_label_selector(other)
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
            }
        });
    let meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut scale = json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": spec},
        "status": {"replicas": status},
    });
    if let Some(sel) = selector.filter(|s| !s.is_empty()) {
        scale["status"]["selector"] = json!(sel);
    }
    if let Some(m) = scale["metadata"].as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    Ok(scale)
}

/// GET, PUT or PATCH `…/{name}/scale`.
pub async fn serve(
    ctx: &mut Ctx<'_>,
    method: &Method,
    body: &[u8],
) -> ApiResult<Response<ApiBody>> {
    let name = ctx.path_name()?.to_string();
    let key = ctx.key(&name);
    let spec_path = ctx
        .def
        .scale
        .as_ref()
        .map(|s| s.spec_replicas.clone())
        .unwrap_or_default();
    for _ in 0..16 {
        let current = ctx
            .server
            .store()
            .get(&key)
            .ok_or_else(|| ApiError::not_found(ctx.def.gr(), &name))?;
        let obj: Value = serde_json::from_slice(&current.value)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let scale = scale_of(ctx, &obj)?;
        if *method == Method::GET {
            return Ok(codec::respond_value(StatusCode::OK, &scale));
        }
        // kube's ScaleHandler: the write is an Update or Apply on the Scale,
        // whose managers are the parent's managers of the replicas field.
        let replicas_path = ssa::scale::field_path(&spec_path);
        let mut live_scale = scale.clone();
        ssa::scale::to_subresource(&obj, &mut live_scale, &replicas_path);
        let new_scale = match *method {
            Method::PUT => {
                let mut s = codec::decode(body, BodyType::Json)?;
                if !s.is_object() {
                    return Err(ApiError::bad_request(
                        "the request body must be a JSON object",
                    ));
                }
                fieldset::track_scale(ctx, &live_scale, &mut s)?;
                s
            }
            Method::PATCH => {
                let ty = codec::body_type(&ctx.headers)?;
                let patch = codec::decode(body, ty)?;
                let mut doc = scale.clone();
                match ty {
                    BodyType::JsonPatch => {
                        crate::jsonpatch::apply(&mut doc, &patch).map_err(ApiError::bad_request)?;
                    }
                    BodyType::MergePatch | BodyType::StrategicMergePatch => {
                        json_patch::merge(&mut doc, &patch)
                    }
                    BodyType::ApplyPatch => {
                        let manager = crate::patch::field_manager(ctx, true)?;
                        let version = patch.get("apiVersion").and_then(Value::as_str);
                        if version != Some(SCALE_API_VERSION) {
                            return Err(ApiError::bad_request(format!(
                                "Incorrect version specified in apply patch. Specified patch version: {}, expected: {SCALE_API_VERSION}",
                                version.unwrap_or_default()
                            )));
                        }
                        doc = fieldset::apply_scale(
                            &live_scale,
                            &patch,
                            &manager,
                            ctx.query.flag("force"),
                        )
                        .map_err(|e| crate::patch::apply_error(ctx, &name, e))?;
                    }
                    _ => return Err(ApiError::unsupported_media_type("application/json")),
                }
                // A merge patch that is not an object replaces the whole
                // document (RFC 7386), and a JSON patch can do the same.
                if !doc.is_object() {
                    return Err(ApiError::bad_request(
                        "the patched Scale is not a JSON object",
                    ));
                }
                if ty != BodyType::ApplyPatch {
                    fieldset::track_scale(ctx, &live_scale, &mut doc)?;
                }
                doc
            }
            _ => {
                return Err(ApiError::method_not_supported(
                    ctx.def.gr(),
                    method.as_str(),
                ));
            }
        };
        if let Some(rv) = new_scale
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            && rv != current.mod_revision.to_string()
        {
            return Err(ApiError::stale(ctx.def.gr(), &name));
        }
        let Some(replicas) = new_scale.pointer("/spec/replicas").and_then(Value::as_i64) else {
            return Err(ApiError::bad_request("spec.replicas must be an integer"));
        };
        if replicas < 0 {
            return Err(ApiError::invalid(
                "autoscaling",
                "Scale",
                &name,
                vec![crate::error::Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!(
                        "Invalid value: {replicas}: must be greater than or equal to 0"
                    ),
                    field: "spec.replicas".into(),
                }],
            ));
        }
        let mut updated = obj.clone();
        object::set_path(&mut updated, &spec_path, json!(replicas));
        ssa::scale::to_parent(
            &mut updated,
            &new_scale,
            &replicas_path,
            &ctx.def.api_version(),
        );
        match rest::update_object(ctx, &name, updated, current, None, Sub::Scale).await {
            Ok((_, bytes)) => {
                let v: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                return Ok(codec::respond_value(StatusCode::OK, &scale_of(ctx, &v)?));
            }
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::stale(ctx.def.gr(), &name))
}

/// POST `pods/{name}/binding`: set spec.nodeName once.
pub async fn bind(ctx: &mut Ctx<'_>, body: &[u8]) -> ApiResult<Response<ApiBody>> {
    let name = ctx.path_name()?.to_string();
    let binding = codec::decode(body, BodyType::Json)?;
    let Some(node) = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Err(ApiError::invalid(
            "",
            "Binding",
            &name,
            vec![crate::error::Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "target.name".into(),
            }],
        ));
    };
    let key = ctx.key(&name);
    for _ in 0..16 {
        let current = ctx
            .server
            .store()
            .get(&key)
            .ok_or_else(|| ApiError::not_found(ctx.def.gr(), &name))?;
        let mut pod: Value = serde_json::from_slice(&current.value)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str)
            && pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid)
        {
            return Err(ApiError::conflict(
                ctx.def.gr(),
                &name,
                "the UID in the binding does not match the pod",
            ));
        }
        if let Some(existing) = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            return Err(ApiError::conflict(
                ctx.def.gr(),
                &name,
                &format!("pod {name} is already assigned to node \"{existing}\""),
            ));
        }
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::conflict(
                ctx.def.gr(),
                &name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        pod["spec"]["nodeName"] = json!(node);
        let conds = pod["status"]
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut conds: Vec<Value> = conds
            .into_iter()
            .filter(|c| c.get("type") != Some(&json!("PodScheduled")))
            .collect();
        conds.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": object::now_rfc3339()}));
        pod["status"]["conditions"] = Value::Array(conds);
        let expected = current.mod_revision;
        let encoded = object::Encoded::new(pod);
        match ctx
            .server
            .store()
            .update(&key, Some(expected), move |rev| encoded.with_rv(rev))
            .await
        {
            Ok(_) => return Ok(codec::respond_created_status()),
            Err(kubeforge_store::StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::stale(ctx.def.gr(), &name))
}
