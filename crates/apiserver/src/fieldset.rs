//! The adapter between requests and the server-side-apply core
//! ([`crate::ssa`]): the schema, reset-field scope, manager name and
//! subresource of a request, and the entry points the REST handlers call —
//! Update tracking for create and update, and apply.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use crate::codec::{self, BodyType};
use crate::context::{Ctx, Sub};
use crate::error::{ApiError, ApiResult, Cause};
use crate::ssa::{
    self, ApplyError, ApplyRequest, CrdSchema, ListTypes, Schema, Scope, UpdateRequest,
};

use crate::ssa::scale::SCALE_API_VERSION;
use crate::ssa::set::FieldSet;

pub(crate) use crate::ssa::{map_eq_ignoring, same_object};

/// The schema of the request's resource.
fn schema_of(ctx: &Ctx<'_>) -> Schema {
    match &ctx.def.custom {
        Some(c) => Schema::custom(crd_list_types(ctx, &c.crd_name, &c.crd_uid)),
        None => Schema::builtin(&ctx.def.group, &ctx.def.kind),
    }
}

type CrdCache = Mutex<HashMap<(String, String), (u64, Arc<dyn ListTypes>)>>;

/// The list types of a custom resource version, from its stored CRD
/// (cached per CRD uid, version and CRD revision).
fn crd_list_types(ctx: &Ctx<'_>, crd_name: &str, crd_uid: &str) -> Arc<dyn ListTypes> {
    static CACHE: OnceLock<CrdCache> = OnceLock::new();
    let key = format!("/registry/apiextensions.k8s.io/customresourcedefinitions/{crd_name}");
    let Some(kv) = ctx.server.store().get(&key) else {
        return Arc::new(|_: &[String]| None);
    };
    let cache_key = (crd_uid.to_string(), ctx.def.version.clone());
    let cache = CACHE.get_or_init(Default::default);
    if let Ok(c) = cache.lock()
        && let Some((rev, src)) = c.get(&cache_key)
        && *rev == kv.mod_revision
    {
        return src.clone();
    }
    let schema = serde_json::from_slice::<Value>(&kv.value)
        .ok()
        .and_then(|crd| {
            crd.pointer("/spec/versions")?
                .as_array()?
                .iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some(ctx.def.version.as_str()))?
                .pointer("/schema/openAPIV3Schema")
                .cloned()
        });
    let src: Arc<dyn ListTypes> = match schema {
        Some(s) => Arc::new(CrdSchema::new(Arc::new(s))),
        None => Arc::new(|_: &[String]| None),
    };
    if let Ok(mut c) = cache.lock() {
        if c.len() > 256 {
            c.clear();
        }
        c.insert(cache_key, (kv.mod_revision, src.clone()));
    }
    src
}

/// The fields a write to `sub` may own.
fn scope_of(ctx: &Ctx<'_>, sub: Sub) -> Scope {
    match sub {
        Sub::Status | Sub::Approval => Scope::OnlyStatus,
        Sub::Main if ctx.def.status => Scope::NoStatus,
        _ => Scope::All,
    }
}

fn subresource_name(sub: Sub) -> &'static str {
    sub.subresource()
}

fn check_manager(m: &str) -> ApiResult<()> {
    let bad = |reason: &str, message: &str| {
        Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause {
                reason: reason.into(),
                message: message.into(),
                field: "fieldManager".into(),
            }],
        ))
    };
    if m.len() > 128 {
        return bad("FieldValueTooLong", "Too long: may not be longer than 128");
    }
    if m.chars().any(char::is_control) {
        return bad(
            "FieldValueInvalid",
            &format!("Invalid value: {m:?}: must only contain printable characters"),
        );
    }
    Ok(())
}

/// The manager of a non-apply write: `fieldManager`, else the User-Agent's
/// prefix before the first `/`, else `unknown`.
fn update_manager(ctx: &Ctx<'_>) -> ApiResult<String> {
    if let Some(m) = ctx.query.get("fieldManager").filter(|m| !m.is_empty()) {
        check_manager(m)?;
        return Ok(m.to_string());
    }
    let ua = ctx
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut out = String::new();
    for c in ua.split('/').next().unwrap_or("").chars() {
        if c.is_control() {
            continue;
        }
        if out.len() + c.len_utf8() > 128 {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        out.push_str("unknown");
    }
    Ok(out)
}

/// Whether this request is an apply (whose managed fields `patch.rs` wrote).
fn is_apply(ctx: &Ctx<'_>) -> bool {
    matches!(codec::body_type(&ctx.headers), Ok(BodyType::ApplyPatch))
}

/// A write's object as it is before mutating admission, kept for
/// [`admitted`] (None for an apply, whose fields were computed already).
pub(crate) fn before_admission(ctx: &Ctx<'_>, obj: &Value) -> Option<Value> {
    (!is_apply(ctx)).then(|| obj.clone())
}

/// The fields mutating admission (the Priority plugin, webhooks) added to
/// `after`: kube-apiserver records a write's manager before admission, so
/// they are nobody's.
pub(crate) fn admitted(ctx: &Ctx<'_>, before: Option<Value>, after: &Value) -> Option<FieldSet> {
    let before = before?;
    if before == *after {
        return None;
    }
    let schema = schema_of(ctx);
    let added = ssa::compare::compare_objects(&before, after, &schema.root(), Scope::All).added;
    (!added.is_empty()).then_some(added)
}

/// Record a create's managed fields (an Update from an empty object);
/// `unowned`: what mutating admission added.
pub(crate) fn track_create(
    ctx: &Ctx<'_>,
    obj: &mut Value,
    unowned: Option<&FieldSet>,
) -> ApiResult<()> {
    track(ctx, None, obj, Sub::Main, unowned).map(|_| ())
}

/// Record an update's managed fields (PUT, merge/JSON/strategic patch,
/// `/status`, `/scale`, `/finalize`) on `obj`, the object about to be
/// stored, and say whether it is unchanged from `old` (a no-op write:
/// equal but for resourceVersion and managedFields timestamps).
pub(crate) fn track_update(
    ctx: &Ctx<'_>,
    old: &Value,
    obj: &mut Value,
    sub: Sub,
    unowned: Option<&FieldSet>,
) -> ApiResult<bool> {
    track(ctx, Some(old), obj, sub, unowned)?;
    Ok(same_object(obj, old, true))
}

fn track(
    ctx: &Ctx<'_>,
    old: Option<&Value>,
    obj: &mut Value,
    sub: Sub,
    unowned: Option<&FieldSet>,
) -> ApiResult<()> {
    // `/scale` computed its managed fields on the Scale ([`scale_fields`]).
    if is_apply(ctx) || sub == Sub::Scale {
        return Ok(());
    }
    let manager = update_manager(ctx)?;
    let req = UpdateRequest {
        manager: &manager,
        subresource: subresource_name(sub),
        scope: scope_of(ctx, sub),
        api_version: &ctx.def.api_version(),
        unowned,
    };
    ssa::update(&schema_of(ctx), old, obj, &req);
    Ok(())
}

/// What an apply needs to know about the request.
pub struct ApplyOptions<'a> {
    /// The applier.
    pub manager: &'a str,
    /// `force=true`.
    pub force: bool,
    /// The endpoint.
    pub sub: Sub,
}

/// Server-side apply of `config` onto `live` (None: the object does not
/// exist yet). Returns the merged object with its managedFields.
pub(crate) fn apply(
    ctx: &Ctx<'_>,
    live: Option<&Value>,
    config: &Value,
    opts: &ApplyOptions<'_>,
) -> Result<Value, ApplyError> {
    let req = ApplyRequest {
        manager: opts.manager,
        force: opts.force,
        subresource: subresource_name(opts.sub),
        scope: scope_of(ctx, opts.sub),
        api_version: &ctx.def.api_version(),
    };
    ssa::apply(&schema_of(ctx), live, config, &req)
}

/// The Update of a Scale (`PUT`, merge or JSON patch of `/scale`):
/// `new_scale` gets the Scale's managedFields, to be converted back to the
/// parent's by [`ssa::scale::to_parent`].
pub(crate) fn track_scale(
    ctx: &Ctx<'_>,
    old_scale: &Value,
    new_scale: &mut Value,
) -> ApiResult<()> {
    let manager = update_manager(ctx)?;
    let req = UpdateRequest {
        manager: &manager,
        subresource: Sub::Scale.subresource(),
        scope: Scope::All,
        api_version: SCALE_API_VERSION,
        unowned: None,
    };
    ssa::update(&Schema::deduced(), Some(old_scale), new_scale, &req);
    Ok(())
}

/// Server-side apply of `config` to a Scale: the merged Scale with its
/// managedFields.
pub(crate) fn apply_scale(
    live_scale: &Value,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, ApplyError> {
    let req = ApplyRequest {
        manager,
        force,
        subresource: Sub::Scale.subresource(),
        scope: Scope::All,
        api_version: SCALE_API_VERSION,
    };
    ssa::apply(&Schema::deduced(), Some(live_scale), config, &req)
}
