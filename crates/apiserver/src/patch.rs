//! PATCH: JSON patch (RFC 6902), merge patch (RFC 7386), strategic merge
//! patch for built-in kinds, and server-side apply.

use http::Response;
use serde_json::Value;

use crate::body::ApiBody;
use crate::codec::{self, BodyType};
use crate::error::{ApiError, ApiResult, Cause};
use crate::rest::{self, Ctx, Sub};

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
                let fields = crate::fieldset::of_object(&applied);
                crate::fieldset::set_managed(
                    &mut applied,
                    &[],
                    &manager,
                    "Apply",
                    &ctx.def.api_version(),
                    &fields,
                    sub,
                );
                rest::create_object(ctx, applied).await?
            }
            (_, None) => return Err(ApiError::not_found(ctx.def.gr(), &name)),
            (ty, Some(current)) => {
                let live: Value = serde_json::from_slice(&current.value)
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                let patched = match ty {
                    BodyType::JsonPatch => {
                        let p: json_patch::Patch = serde_json::from_value(patch_doc.clone())
                            .map_err(|e| {
                                ApiError::bad_request(format!("the JSON patch is not valid: {e}"))
                            })?;
                        let mut doc = live.clone();
                        json_patch::patch(&mut doc, &p).map_err(|e| {
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
                        apply(ctx, &name, &live, applied, &manager, sub)?
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
                match rest::update_object(ctx, &name, patched, current, sub).await {
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

fn field_manager(ctx: &Ctx<'_>, required: bool) -> ApiResult<String> {
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

/// Server-side apply onto a live object: merge, drop fields this manager
/// stopped applying (unless others own them), detect conflicts.
fn apply(
    ctx: &Ctx<'_>,
    name: &str,
    live: &Value,
    applied: Value,
    manager: &str,
    sub: Sub,
) -> ApiResult<Value> {
    use crate::fieldset::{self, FieldSet};
    let force = ctx.query.flag("force");
    let api_version = ctx.def.api_version();
    let managed = fieldset::managed_entries(live);
    let new_set = fieldset::of_object(&applied);
    let mut conflicts = Vec::new();
    let mut others: Vec<(String, String, FieldSet)> = Vec::new();
    let mut previous = FieldSet::default();
    for e in &managed {
        if e.manager == manager && e.operation == "Apply" {
            previous = e.fields.clone();
        } else {
            others.push((e.manager.clone(), e.operation.clone(), e.fields.clone()));
        }
    }
    for path in new_set.paths() {
        let want = fieldset::value_at(&applied, path);
        let have = fieldset::value_at(live, path);
        if have.is_some() && want != have {
            for (m, _, set) in &others {
                if set.contains(path) {
                    conflicts.push((m.clone(), fieldset::display_path(path)));
                }
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let causes: Vec<Cause> = conflicts
            .iter()
            .map(|(m, p)| Cause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with \"{m}\" using {api_version}"),
                field: p.clone(),
            })
            .collect();
        let n = causes.len();
        let mut e = ApiError::conflict(ctx.def.gr(), name, "");
        e.message = format!(
            "Apply failed with {n} conflict{}: {}",
            if n == 1 { "" } else { "s" },
            causes
                .iter()
                .map(|c| format!("{}: {}", c.message, c.field))
                .collect::<Vec<_>>()
                .join("\n")
        );
        e.details.causes = causes;
        return Err(e);
    }
    // Forced: the other managers lose the fields taken over.
    if force {
        for (_, _, set) in &mut others {
            for (_, p) in &conflicts {
                set.remove_display(p);
            }
        }
    }
    let mut merged = live.clone();
    fieldset::merge_applied(&mut merged, &applied);
    for path in previous.paths() {
        if !new_set.contains(path) && !others.iter().any(|(_, _, s)| s.contains(path)) {
            fieldset::remove_at(&mut merged, path);
        }
    }
    let others_entries: Vec<(String, String, FieldSet)> = others;
    fieldset::set_managed(
        &mut merged,
        &others_entries,
        manager,
        "Apply",
        &api_version,
        &new_set,
        sub,
    );
    Ok(merged)
}
