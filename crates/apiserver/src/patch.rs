//! PATCH: JSON patch (RFC 6902), merge patch (RFC 7386), strategic merge
//! patch for built-in kinds, and server-side apply.

use http::Response;
use serde_json::Value;

use crate::body::ApiBody;
use crate::codec::{self, BodyType};
use crate::context::{Ctx, Sub};
use crate::error::{ApiError, ApiResult, Cause};
use crate::rest;
use crate::ssa::ApplyError;

/// Serve a PATCH on an object or its status.
pub async fn patch(ctx: &mut Ctx<'_>, body: &[u8], sub: Sub) -> ApiResult<Response<ApiBody>> {
    let ty = codec::body_type(&ctx.headers)?;
    let name = ctx.path_name()?.to_string();
    let key = ctx.key(&name);
    let patch_doc = match ty {
        BodyType::Json | BodyType::Yaml | BodyType::Protobuf => {
            return Err(ApiError::unsupported_media_type(
                ctx.headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(""),
            ));
        }
        BodyType::StrategicMergePatch
            if ctx.def.custom.is_some()
                || !kubeforge_apimachinery::strategic::supports_strategic_merge(
                    &ctx.def.group,
                    &ctx.def.kind,
                ) =>
        {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json",
            ));
        }
        _ => codec::decode(body, ty)?,
    };
    let explicit_rv = patch_doc.pointer("/metadata/resourceVersion").is_some();
    for _attempt in 0..16 {
        let current = ctx.server.store().get(&key);
        let (code, bytes) = match (ty, current) {
            (BodyType::ApplyPatch, None) if sub == Sub::Main => {
                let manager = field_manager(ctx, true)?;
                let mut applied = patch_doc.clone();
                rest::check_type_meta(ctx, &mut applied)?;
                require_type_meta(&patch_doc)?;
                let created = apply(ctx, &name, None, applied, &manager, sub)?;
                match rest::create_object(ctx, created).await {
                    // Created concurrently: apply to it.
                    Err(e) if e.code == 409 && e.reason == "AlreadyExists" => continue,
                    other => other?,
                }
            }
            (_, None) => return Err(ApiError::not_found(ctx.def.gr(), &name)),
            (ty, Some(current)) => {
                let live: Value = ctx
                    .def
                    .decode_stored(&current.value)
                    .ok_or_else(|| ApiError::internal("the stored object is not valid JSON"))?;
                let patched = match ty {
                    BodyType::JsonPatch => {
                        if !patch_doc.is_array() {
                            return Err(ApiError::bad_request(
                                "the JSON patch is not valid: expected an array of operations",
                            ));
                        }
                        let mut doc = live.clone();
                        crate::jsonpatch::apply(&mut doc, &patch_doc).map_err(|e| {
                            ApiError::invalid(
                                &ctx.def.group,
                                &ctx.def.kind,
                                &name,
                                vec![Cause {
                                    reason: "FieldValueInvalid".into(),
                                    message: format!("the JSON patch could not be applied: {e}"),
                                    field: String::new(),
                                }],
                            )
                        })?;
                        doc
                    }
                    BodyType::MergePatch => {
                        if !patch_doc.is_object() {
                            return Err(ApiError::bad_request(
                                "a merge patch must be a JSON object",
                            ));
                        }
                        let mut doc = live.clone();
                        json_patch::merge(&mut doc, &patch_doc);
                        doc
                    }
                    BodyType::StrategicMergePatch => {
                        kubeforge_apimachinery::strategic::strategic_merge_patch(
                            &live,
                            &patch_doc,
                            &ctx.def.group,
                            &ctx.def.kind,
                        )
                        .map_err(|e| match e.status_code() {
                            400 => ApiError::bad_request(e.to_string()),
                            415 => ApiError::unsupported_media_type(
                                "application/strategic-merge-patch+json",
                            ),
                            _ => ApiError::invalid(
                                &ctx.def.group,
                                &ctx.def.kind,
                                &name,
                                vec![Cause {
                                    reason: "FieldValueInvalid".into(),
                                    message: e.to_string(),
                                    field: String::new(),
                                }],
                            ),
                        })?
                    }
                    BodyType::ApplyPatch => {
                        require_type_meta(&patch_doc)?;
                        let manager = field_manager(ctx, true)?;
                        let mut applied = patch_doc.clone();
                        rest::check_type_meta(ctx, &mut applied)?;
                        apply(ctx, &name, Some(&live), applied, &manager, sub)?
                    }
                    BodyType::Json | BodyType::Yaml | BodyType::Protobuf => {
                        unreachable!("rejected above")
                    }
                };
                if !patched.is_object() {
                    return Err(ApiError::bad_request(
                        "the patched object is not a JSON object",
                    ));
                }
                let mut patched = patched;
                rest::check_type_meta(ctx, &mut patched)?;
                match rest::update_object(ctx, &name, patched, current, Some(live), sub).await {
                    Err(e) if e.code == 409 && e.reason == "Conflict" && !explicit_rv => continue,
                    other => other?,
                }
            }
        };
        return ctx.respond_object(code, &bytes);
    }
    Err(ApiError::stale(ctx.def.gr(), &name))
}

fn require_type_meta(v: &Value) -> ApiResult<()> {
    for f in ["apiVersion", "kind"] {
        if v.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "{f} must be set in an apply patch"
            )));
        }
    }
    Ok(())
}

pub(crate) fn field_manager(ctx: &Ctx<'_>, required: bool) -> ApiResult<String> {
    match ctx.query.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(m) if m.len() > 128 => Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause {
                reason: "FieldValueTooLong".into(),
                message: "Too long: may not be longer than 128".into(),
                field: "fieldManager".into(),
            }],
        )),
        Some(m) => Ok(m.to_string()),
        None if required => Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            }],
        )),
        None => Ok(String::new()),
    }
}

/// Server-side apply of `applied` onto `live` (None: create): the merged
/// object with its managedFields, or 409 with one cause per conflicting
/// field.
fn apply(
    ctx: &Ctx<'_>,
    name: &str,
    live: Option<&Value>,
    applied: Value,
    manager: &str,
    sub: Sub,
) -> ApiResult<Value> {
    use crate::fieldset::{self, ApplyOptions};
    let req = ApplyOptions {
        manager,
        force: ctx.query.flag("force"),
        sub,
    };
    fieldset::apply(ctx, live, &applied, &req).map_err(|e| apply_error(ctx, name, e))
}

/// The `Status` of a failed apply.
pub(crate) fn apply_error(ctx: &Ctx<'_>, name: &str, e: ApplyError) -> ApiError {
    match e {
        ApplyError::Conflicts(c) => conflict_error(&c),
        ApplyError::BadRequest(m) => ApiError::bad_request(m),
        ApplyError::Internal(m) => ApiError::internal(m),
        // kube-apiserver's words for a live object SMD cannot type, as a
        // plain (reason-less) 500.
        ApplyError::Live(m) => ApiError {
            code: 500,
            reason: "",
            message: format!(
                "failed to create typed live object ({}/{name}; {}/{}, Kind={}): {m}",
                ctx.ns.as_deref().unwrap_or_default(),
                ctx.def.group,
                ctx.def.version,
                ctx.def.kind
            ),
            details: Box::default(),
        },
        ApplyError::Config(e) => ApiError::invalid(
            &ctx.def.group,
            &ctx.def.kind,
            name,
            vec![Cause {
                reason: if e.duplicate {
                    "FieldValueDuplicate"
                } else {
                    "FieldValueInvalid"
                }
                .into(),
                message: e.message,
                field: e.field,
            }],
        ),
    }
}

/// kube's apply conflict: 409 Conflict, one `FieldManagerConflict` cause per
/// field, the message listing them by manager.
fn conflict_error(conflicts: &[(String, String)]) -> ApiError {
    let causes: Vec<Cause> = conflicts
        .iter()
        .map(|(m, p)| Cause {
            reason: "FieldManagerConflict".into(),
            message: format!("conflict with {m}"),
            field: p.clone(),
        })
        .collect();
    let message = match conflicts {
        [(m, p)] => format!("Apply failed with 1 conflict: conflict with {m}: {p}"),
        _ => {
            let mut lines = Vec::new();
            let mut last: Option<&str> = None;
            for (m, p) in conflicts {
                if last != Some(m.as_str()) {
                    lines.push(format!("conflicts with {m}:"));
                    last = Some(m);
                }
                lines.push(format!("- {p}"));
            }
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        }
    };
    ApiError {
        code: 409,
        reason: "Conflict",
        message,
        details: Box::new(crate::error::Details {
            causes,
            ..Default::default()
        }),
    }
}
