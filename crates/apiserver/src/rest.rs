//! The REST verbs over the registry and the store: get, list, create,
//! update, patch, delete, deletecollection (watch lives in [`crate::watch`]).
//!
//! Objects travel as `serde_json::Value`; what is stored is the JSON bytes
//! with `metadata.resourceVersion` set to the store revision of the write, so
//! reads answer with the stored bytes as they are.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use kubeforge_apimachinery::{fields::FieldSelector, labels::Selector};
use kubeforge_store::{KeyValue, StoreError};
use serde_json::{Map, Value, json};

use crate::body::ApiBody;
use crate::codec::{self, Accept, BodyType};
use crate::context::{Ctx, Sub, partial_metadata};
use crate::error::{ApiError, ApiResult, Cause};
use crate::object::{self, meta_mut, meta_str};
use crate::registry::{ResourceDef, Strategy};
use crate::request::{Query, ResourcePath};
use crate::server::ApiServer;
use crate::table::{self, IncludeObject};

/// Dispatch a resource request to its verb.
pub async fn serve(
    server: &ApiServer,
    p: ResourcePath,
    method: Method,
    headers: HeaderMap,
    query: Query,
    body: Bytes,
    user: Arc<kubeforge_authz::UserInfo>,
) -> ApiResult<Response<ApiBody>> {
    let def = server
        .registry()
        .get(&p.group, &p.version, &p.plural)
        .ok_or_else(ApiError::no_route)?;
    if def.namespaced && p.name.is_some() && p.namespace.is_none() {
        return Err(ApiError::no_route());
    }
    let accept = codec::accept(&headers);
    let mut ctx = Ctx {
        server,
        ns: if def.namespaced {
            p.namespace.clone()
        } else {
            None
        },
        name: p.name.clone(),
        def,
        query,
        headers,
        accept,
        warnings: Vec::new(),
        user: user.clone(),
    };
    if !ctx.def.namespaced && p.namespace.is_some() {
        return Err(ApiError::no_route());
    }
    let resp = match (p.subresource.as_deref(), p.name.is_some(), &method) {
        // Served read-only and computed, not stored.
        _ if crate::componentstatus::serves(&ctx.def) => {
            crate::componentstatus::serve(&mut ctx, &method, p.subresource.as_deref())
        }
        // Served read-only and computed: the Metrics API.
        _ if crate::resource_metrics::serves(&ctx.def) => {
            crate::resource_metrics::serve(&mut ctx, &method, p.subresource.as_deref())
        }
        // Create-only and computed: the access and identity reviews.
        _ if crate::reviews::serves(&ctx.def) => {
            crate::reviews::serve(&mut ctx, &method, p.subresource.as_deref(), &body, &user).await
        }
        (None, false, &Method::GET) => {
            if ctx.query.flag("watch") {
                crate::watch::watch(&ctx).await
            } else {
                list(&ctx).await
            }
        }
        (None, false, &Method::POST) => create(&mut ctx, &body).await,
        (None, false, &Method::DELETE) => delete_collection(&mut ctx, &body).await,
        (None, true, &Method::GET) => get(&ctx),
        (None, true, &Method::PUT) => update(&mut ctx, &body, Sub::Main).await,
        (None, true, &Method::PATCH) => crate::patch::patch(&mut ctx, &body, Sub::Main).await,
        (None, true, &Method::DELETE) => delete(&mut ctx, &body).await,
        (Some("status"), true, m) if ctx.def.status => match *m {
            Method::GET => get(&ctx),
            Method::PUT => update(&mut ctx, &body, Sub::Status).await,
            Method::PATCH => crate::patch::patch(&mut ctx, &body, Sub::Status).await,
            _ => Err(ApiError::method_not_supported(ctx.def.gr(), m.as_str())),
        },
        (Some("scale"), true, m) if ctx.def.scale.is_some() => {
            crate::scale::serve(&mut ctx, m, &body).await
        }
        (Some("token"), true, &Method::POST)
            if ctx.def.group.is_empty() && ctx.def.plural == "serviceaccounts" =>
        {
            crate::satokens::create(&mut ctx, &body).await
        }
        (Some("binding"), true, &Method::POST) if ctx.def.binding => {
            crate::scale::bind(&mut ctx, &body).await
        }
        (Some("ephemeralcontainers"), true, m) if ctx.def.ephemeral_containers => match *m {
            Method::GET => get(&ctx),
            Method::PUT => update(&mut ctx, &body, Sub::EphemeralContainers).await,
            Method::PATCH => crate::patch::patch(&mut ctx, &body, Sub::EphemeralContainers).await,
            _ => Err(ApiError::method_not_supported(ctx.def.gr(), m.as_str())),
        },
        (Some("log"), true, &Method::GET) if ctx.def.eviction => crate::nodeproxy::log(&ctx).await,
        (Some("eviction"), true, &Method::POST) if ctx.def.eviction => {
            crate::eviction::evict(&mut ctx, &body).await
        }
        (Some("finalize"), true, &Method::PUT) if ctx.def.strategy == Strategy::Namespace => {
            update(&mut ctx, &body, Sub::Finalize).await
        }
        (Some("approval"), true, m) if crate::csr::is_csr(&ctx.def) => match *m {
            Method::GET => get(&ctx),
            Method::PUT => update(&mut ctx, &body, Sub::Approval).await,
            Method::PATCH => crate::patch::patch(&mut ctx, &body, Sub::Approval).await,
            _ => Err(ApiError::method_not_supported(ctx.def.gr(), m.as_str())),
        },
        (Some(_), _, _) => Err(ApiError::no_route()),
        (None, _, m) => Err(ApiError::method_not_supported(ctx.def.gr(), m.as_str())),
    };
    resp.map(|mut r| {
        for w in &ctx.warnings {
            if let Ok(v) = HeaderValue::from_bytes(warning_header(w).as_bytes()) {
                r.headers_mut().append(http::header::WARNING, v);
            }
        }
        r
    })
}

/// A `Warning` header value as kube's `NewWarningHeader` writes it:
/// `299 - "text"`, quotes and backslashes escaped (clients unescape them),
/// control characters, which a header cannot hold, as spaces.
fn warning_header(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str("299 - \"");
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether an object of `def` passes label and field selectors (field
/// values as [`ResourceDef::field_value`] renders them).
pub(crate) fn matches(
    def: &ResourceDef,
    obj: &Value,
    labels: &Selector,
    fields: &FieldSelector,
) -> bool {
    if !labels.is_everything() && !labels.matches(&obj.pointer("/metadata/labels")) {
        return false;
    }
    fields.is_everything() || fields.matches(|f| def.field_value(obj, f))
}

fn get(ctx: &Ctx<'_>) -> ApiResult<Response<ApiBody>> {
    let name = ctx.path_name()?;
    let kv = ctx
        .server
        .store()
        .get(&ctx.key(name))
        .ok_or_else(|| ApiError::not_found(ctx.def.gr(), name))?;
    ctx.respond_object(StatusCode::OK, &kv.value)
}

/// Continue token: where the next page starts.
fn encode_continue(key: &str, rev: u64) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"k": key, "rv": rev}).to_string())
}

fn decode_continue(token: &str, prefix: &str) -> ApiResult<(String, u64)> {
    use base64::Engine;
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let key = v.get("k").and_then(Value::as_str).ok_or_else(bad)?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    if !key.starts_with(prefix) {
        return Err(bad());
    }
    Ok((key.to_string(), rv))
}

/// The objects a list returns, with the revision and continue token.
pub(crate) struct ListPage {
    pub items: Vec<KeyValue>,
    pub revision: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.";

/// Which revision a list reads: `None` = the latest.
fn list_revision(ctx: &Ctx<'_>, token_rv: Option<u64>) -> ApiResult<Option<u64>> {
    let store = ctx.server.store();
    let rv = match ctx.query.get("resourceVersion").filter(|s| !s.is_empty()) {
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?,
        ),
        None => None,
    };
    let matching = ctx
        .query
        .get("resourceVersionMatch")
        .filter(|s| !s.is_empty());
    match (matching, rv) {
        (Some(_), None) => {
            return Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        (Some("Exact" | "NotOlderThan") | None, _) => {}
        (Some(m), _) => {
            return Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
            )));
        }
    }
    if token_rv.is_some() {
        if rv.is_some_and(|r| r != 0) {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        return Ok(token_rv);
    }
    let current = store.current_revision();
    if let Some(rv) = rv.filter(|r| *r > current) {
        return Err(ApiError::too_large_resource_version(rv, current));
    }
    match (matching, rv) {
        (Some("Exact"), Some(0)) => Err(ApiError::bad_request(
            "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
        )),
        (Some("Exact"), Some(rv)) => Ok(Some(rv)),
        _ => Ok(None),
    }
}

/// Read a page at `at` (MVCC, within the watch history) or the latest.
async fn fetch(
    ctx: &Ctx<'_>,
    prefix: &str,
    start: Option<&str>,
    limit: usize,
    at: Option<u64>,
    continuing: bool,
) -> ApiResult<kubeforge_store::RangeResult> {
    let store = ctx.server.store();
    match at {
        None => Ok(store.range(prefix, start, limit)),
        Some(at) => match store.range_at(prefix, start, limit, at).await {
            Ok(r) => Ok(r),
            Err(StoreError::Compacted { .. }) if continuing => {
                Err(ApiError::expired(EXPIRED_CONTINUE))
            }
            Err(StoreError::Compacted {
                requested,
                compacted,
            }) => Err(ApiError::expired(format!(
                "The resourceVersion for the provided list is too old: {requested} (oldest available {compacted})"
            ))),
            Err(e) => Err(e.into()),
        },
    }
}

pub(crate) async fn list_page(
    ctx: &Ctx<'_>,
    labels: &Selector,
    fields: &FieldSelector,
) -> ApiResult<ListPage> {
    let store = ctx.server.store();
    let prefix = ctx.def.collection_prefix(ctx.ns.as_deref());
    let limit = ctx
        .query
        .int("limit")?
        .filter(|l| *l > 0)
        .map(|l| l as usize);
    let (mut start, token_rv) = match ctx.query.get("continue") {
        Some(t) if !t.is_empty() => {
            let (k, rv) = decode_continue(t, &prefix)?;
            (Some(k), Some(rv))
        }
        _ => (None, None),
    };
    let at = list_revision(ctx, token_rv)?;
    let continuing = token_rv.is_some();
    let filtering = !labels.is_everything() || !fields.is_everything();
    if !filtering {
        let r = fetch(
            ctx,
            &prefix,
            start.as_deref(),
            limit.unwrap_or(0),
            at,
            continuing,
        )
        .await?;
        let token = if r.more {
            r.kvs.last().map(|kv| encode_continue(&kv.key, r.revision))
        } else {
            None
        };
        let remaining = if r.more && at.is_none() {
            Some(store.count(&prefix).saturating_sub(r.kvs.len()))
        } else {
            None
        };
        return Ok(ListPage {
            items: r.kvs,
            revision: r.revision,
            continue_token: token,
            remaining,
        });
    }
    let mut items = Vec::new();
    let want = limit.unwrap_or(usize::MAX);
    // A past revision is read whole once; the latest in batches.
    let batch = if at.is_some() { 0 } else { 1024 };
    let mut revision = at.unwrap_or_else(|| store.current_revision());
    loop {
        let r = fetch(ctx, &prefix, start.as_deref(), batch, at, continuing).await?;
        revision = revision.max(r.revision);
        let n = r.kvs.len();
        let batch_last = r.kvs.last().map(|kv| kv.key.to_string());
        for (i, kv) in r.kvs.into_iter().enumerate() {
            let Some(obj) = ctx.def.decode_stored(&kv.value) else {
                continue;
            };
            if !matches(&ctx.def, &obj, labels, fields) {
                continue;
            }
            let key = kv.key.to_string();
            items.push(kv);
            if items.len() == want {
                // More may follow: hand out a token after this key.
                let more = i + 1 < n || r.more;
                let token = more.then(|| encode_continue(&key, revision));
                return Ok(ListPage {
                    items,
                    revision,
                    continue_token: token,
                    remaining: None,
                });
            }
        }
        if !r.more || batch_last.is_none() {
            return Ok(ListPage {
                items,
                revision,
                continue_token: None,
                remaining: None,
            });
        }
        start = batch_last;
    }
}

async fn list(ctx: &Ctx<'_>) -> ApiResult<Response<ApiBody>> {
    let (labels, fields) = ctx.selectors()?;
    let page = list_page(ctx, &labels, &fields).await?;
    let mut meta = json!({"resourceVersion": page.revision.to_string()});
    if let Some(t) = &page.continue_token {
        meta["continue"] = json!(t);
    }
    if let Some(r) = page.remaining {
        meta["remainingItemCount"] = json!(r);
    }
    if ctx.accept.table || ctx.accept.metadata_only {
        let objs: Vec<Value> = page
            .items
            .iter()
            .filter_map(|kv| ctx.def.decode_stored(&kv.value))
            .collect();
        let body = if ctx.accept.table {
            table::table(
                &ctx.def.columns,
                &objs,
                IncludeObject::parse(ctx.query.get("includeObject")),
                meta,
            )
        } else {
            json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
                "items": objs.iter().map(partial_metadata).collect::<Vec<_>>(),
            })
        };
        return Ok(codec::respond_value(StatusCode::OK, &body));
    }
    // Splice the stored bytes into the list without re-encoding or copying them.
    let head = format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
        ctx.def.kind,
        ctx.def.api_version(),
        meta
    );
    if ctx.accept.yaml {
        let mut out = head.into_bytes();
        for (i, kv) in page.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&ctx.output(&kv.value));
        }
        out.extend_from_slice(b"]}");
        return Ok(codec::respond(StatusCode::OK, Bytes::from(out), true));
    }
    let mut chunks = std::collections::VecDeque::with_capacity(page.items.len() * 2 + 2);
    let mut len = head.len() as u64 + 2;
    chunks.push_back(Bytes::from(head));
    for (i, kv) in page.items.iter().enumerate() {
        if i > 0 {
            chunks.push_back(Bytes::from_static(b","));
            len += 1;
        }
        let b = ctx.output(&kv.value);
        len += b.len() as u64;
        chunks.push_back(b);
    }
    chunks.push_back(Bytes::from_static(b"]}"));
    let mut r = Response::new(ApiBody::Chunks(chunks, len));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

/// Parse a body that must be an object of this resource's kind.
pub(crate) fn decode_object(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<Value> {
    let ty = codec::body_type(&ctx.headers)?;
    let ty = match ty {
        BodyType::Yaml | BodyType::Protobuf => ty,
        _ => BodyType::Json,
    };
    let mut obj = codec::decode(body, ty)?;
    check_type_meta(ctx, &mut obj)?;
    Ok(obj)
}

/// Check (and fill in) apiVersion and kind.
pub(crate) fn check_type_meta(ctx: &Ctx<'_>, obj: &mut Value) -> ApiResult<()> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    let want_av = ctx.def.api_version();
    match map.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("kind".into(), json!(ctx.def.kind));
        }
        Some(k) if k == ctx.def.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                ctx.def.kind
            )));
        }
    }
    match map.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("apiVersion".into(), json!(want_av));
        }
        Some(av) if av == want_av => {}
        Some(av) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
    }
    if map
        .get("metadata")
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    Ok(())
}

/// Validate the object: metadata names, and the schema (pruning and
/// defaulting custom resources; unknown fields per `fieldValidation`).
pub(crate) fn validate(
    ctx: &mut Ctx<'_>,
    obj: &mut Value,
    name: &str,
    old: Option<&Value>,
) -> ApiResult<()> {
    validate_parts(ctx, obj, name, old, true)
}

/// A status write to a built-in kind, validated as kube-apiserver's status
/// strategies do: metadata and status only. Everything else is the stored
/// object's ([`status_update`] copied it), validated when it was written;
/// re-walking a pod's whole spec on each status write was most of the
/// write's validation cost. The other fields are set aside meanwhile.
fn validate_status_write(
    ctx: &mut Ctx<'_>,
    obj: &mut Value,
    name: &str,
    old: &Value,
) -> ApiResult<()> {
    let Some(map) = obj.as_object_mut() else {
        return validate(ctx, obj, name, Some(old));
    };
    let (kept, aside): (Map<String, Value>, Map<String, Value>) = std::mem::take(map)
        .into_iter()
        .partition(|(k, _)| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"));
    *map = kept;
    let res = validate_parts(ctx, obj, name, Some(old), false);
    if let Some(map) = obj.as_object_mut() {
        map.extend(aside);
    }
    res
}

/// [`validate`]; `whole`: the object is complete (else only its metadata
/// and status are present, and the kind-specific checks of the spec and
/// priority class are skipped).
fn validate_parts(
    ctx: &mut Ctx<'_>,
    obj: &mut Value,
    name: &str,
    old: Option<&Value>,
    whole: bool,
) -> ApiResult<()> {
    if ctx.def.custom.is_none() {
        object::strip_nulls(obj);
    }
    if whole {
        crate::priority::admit_class(ctx, obj)?;
    }
    let empty = Value::Object(serde_json::Map::new());
    let meta = obj.get("metadata").unwrap_or(&empty);
    let mut causes: Vec<Cause> = kubeforge_apimachinery::names::validate_object_meta(
        meta,
        ctx.def.name_rule,
        ctx.def.namespaced,
    )
    .into_iter()
    .map(Cause::from)
    .collect();
    if let Some(v) = ctx.def.validator.clone() {
        let unknown = v.unknown_fields(obj);
        if !unknown.is_empty() {
            match ctx.query.get("fieldValidation") {
                Some("Strict") => {
                    let list: Vec<String> = unknown
                        .iter()
                        .map(|u| format!("unknown field \"{}\"", u.trim_start_matches('.')))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "strict decoding error: {}",
                        list.join(", ")
                    )));
                }
                Some("Ignore") => {}
                _ => {
                    for u in &unknown {
                        ctx.warnings
                            .push(format!("unknown field \"{}\"", u.trim_start_matches('.')));
                    }
                }
            }
        }
        if ctx.def.custom.is_some() {
            v.prune(obj);
            v.apply_defaults(obj);
        }
        let errors = match old {
            Some(o) => v.validate_update(obj, o),
            None => v.validate(obj),
        };
        for e in errors {
            causes.push(Cause {
                reason: e.reason.to_string(),
                message: e.message,
                field: e.field,
            });
        }
    }
    if whole {
        crate::strategy::validate(ctx, obj, &mut causes);
        causes.extend(
            crate::rbac_validation::validate(&ctx.def, obj, old)
                .into_iter()
                .map(Cause::from),
        );
        crate::priority::validate_class(ctx, obj, old, &mut causes);
        match ctx.def.strategy {
            Strategy::Secret => crate::secrets::validate_secret(obj, old, &mut causes),
            Strategy::ConfigMap => crate::secrets::validate_config_map(obj, old, &mut causes),
            _ => {}
        }
    }
    ctx.def.check_causes(name, causes)
}

/// Ensure the request's namespace exists and is not terminating.
pub(crate) fn check_namespace(ctx: &Ctx<'_>, name: &str) -> ApiResult<()> {
    let Some(ns) = ctx.ns.as_deref() else {
        return Ok(());
    };
    let key = format!("/registry/core/namespaces/{ns}");
    let kv = ctx.server.store().get(&key).ok_or_else(|| {
        ApiError::not_found(
            crate::error::GroupResource {
                group: "",
                resource: "namespaces",
            },
            ns,
        )
    })?;
    // Only two fields matter; reading them without building the whole
    // tree keeps this per-create check cheap.
    #[derive(serde::Deserialize, Default)]
    #[serde(default, rename_all = "camelCase")]
    struct Meta {
        deletion_timestamp: Option<serde::de::IgnoredAny>,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Status {
        phase: Option<String>,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Ns {
        metadata: Meta,
        status: Status,
    }
    // Stored objects are compact JSON: a namespace neither being deleted
    // nor terminating names neither field, so most creates parse nothing.
    let text = std::str::from_utf8(&kv.value).unwrap_or_default();
    if !text.contains("\"deletionTimestamp\"") && !text.contains("\"Terminating\"") {
        return Ok(());
    }
    let ns_obj: Ns = serde_json::from_slice(&kv.value).unwrap_or_default();
    if ns_obj.metadata.deletion_timestamp.is_some()
        || ns_obj.status.phase.as_deref() == Some("Terminating")
    {
        return Err(ApiError::namespace_terminating(ctx.def.gr(), name, ns));
    }
    Ok(())
}

async fn create(ctx: &mut Ctx<'_>, body: &[u8]) -> ApiResult<Response<ApiBody>> {
    let obj = decode_object(ctx, body)?;
    let (code, bytes) = create_object(ctx, obj).await?;
    ctx.respond_object(code, &bytes)
}

/// The create path shared by POST and server-side apply.
pub(crate) async fn create_object(
    ctx: &mut Ctx<'_>,
    mut obj: Value,
) -> ApiResult<(StatusCode, Bytes)> {
    // Namespace from the path wins; a different one in the body is an error.
    if ctx.def.namespaced {
        let path_ns = ctx.ns.clone().unwrap_or_default();
        match meta_str(&obj, "namespace") {
            Some(ns) if !ns.is_empty() && ns != path_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                meta_mut(&mut obj).insert("namespace".into(), json!(path_ns));
            }
        }
    } else {
        meta_mut(&mut obj).remove("namespace");
    }
    let generate = meta_str(&obj, "generateName").map(str::to_string);
    let mut name = meta_str(&obj, "name").unwrap_or_default().to_string();
    let generated = name.is_empty();
    if name.is_empty() {
        match generate.as_deref() {
            Some(g) if !g.is_empty() => {
                name = format!("{g}{}", object::random_suffix());
                meta_mut(&mut obj).insert("name".into(), json!(name));
            }
            _ => {
                return Err(ApiError::invalid(
                    &ctx.def.group,
                    &ctx.def.kind,
                    "",
                    vec![Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value: name or generateName is required".into(),
                        field: "metadata.name".into(),
                    }],
                ));
            }
        }
    }
    if let Some(path_name) = &ctx.name
        && *path_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({path_name})"
        )));
    }
    check_namespace(ctx, &name)?;
    // The field manager records the request before admission, as kube's.
    let before_admission = crate::fieldset::before_admission(ctx, &obj);
    if ctx.def.strategy == Strategy::Pod {
        if ctx.server.service_account_tokens() {
            crate::serviceaccount::admit_pod(ctx, &mut obj);
        }
        crate::priority::admit_pod(ctx, &name, &mut obj)?;
    }
    // --- admission (crate::admission): mutating webhooks ---
    let admission = crate::admission::Request {
        operation: crate::admission::Operation::Create,
        subresource: "",
        name: &name,
        old: None,
        dry_run: ctx.dry_run(),
    };
    let warnings = crate::admission::mutate(ctx, &admission, &mut obj).await?;
    ctx.warnings.extend(warnings);
    // --- end admission ---
    let admitted = crate::fieldset::admitted(ctx, before_admission, &obj);
    crate::strategy::prepare_create(ctx, &mut obj);
    crate::csr::prepare_create(ctx, &mut obj, &name)?;
    crate::rbac_escalation::check(ctx, &obj, None)?;
    validate(ctx, &mut obj, &name, None)?;
    if ctx.def.ephemeral_containers {
        crate::ephemeral::validate_create(ctx, &obj, &name)?;
    }
    {
        let m = meta_mut(&mut obj);
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(object::now_rfc3339()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("resourceVersion");
        m.remove("selfLink");
        if ctx.def.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    crate::crd::before_create(ctx, &mut obj)?;
    crate::fieldset::track_create(ctx, &mut obj, admitted.as_ref())?;
    // --- admission (crate::admission): validating webhooks ---
    let admission = crate::admission::Request {
        operation: crate::admission::Operation::Create,
        subresource: "",
        name: &name,
        old: None,
        dry_run: ctx.dry_run(),
    };
    let warnings = crate::admission::validate(ctx, &admission, Some(&obj)).await?;
    ctx.warnings.extend(warnings);
    // --- end admission ---
    if ctx.dry_run() {
        // A dry run stores nothing but answers as the write would: a name
        // taken is 409 (kube's DryRunnableStorage.Create).
        if ctx.server.store().get(&ctx.key(&name)).is_some() {
            return Err(ApiError::already_exists(ctx.def.gr(), &name));
        }
        return Ok((StatusCode::CREATED, Bytes::from(object::to_json(&obj))));
    }
    let mut encoded = object::Encoded::new(ctx.def.to_storage(obj));
    let mut retries = 0;
    let kv = loop {
        let key = ctx.key(&name);
        match ctx
            .server
            .store()
            .create(&key, |rev| encoded.with_rv(rev))
            .await
        {
            Ok(kv) => break kv,
            // A generated name that is taken is generated again, up to
            // seven times, as kube-apiserver does since 1.32
            // (RetryGenerateName): five random characters collide within
            // a few thousand pods of one ReplicaSet.
            Err(StoreError::AlreadyExists { .. }) if generated && retries < 7 => {
                retries += 1;
                let prefix = generate.as_deref().unwrap_or_default();
                name = format!("{prefix}{}", object::random_suffix());
                let mut obj = encoded.into_value();
                meta_mut(&mut obj).insert("name".into(), json!(name));
                encoded = object::Encoded::new(obj);
            }
            Err(StoreError::AlreadyExists { .. }) => {
                return Err(ApiError::already_exists(ctx.def.gr(), &name));
            }
            Err(e) => return Err(e.into()),
        }
    };
    crate::authz::changed(ctx.server, &ctx.def);
    crate::crd::after_write(ctx, &kv.value)?;
    Ok((StatusCode::CREATED, kv.value))
}

async fn update(ctx: &mut Ctx<'_>, body: &[u8], sub: Sub) -> ApiResult<Response<ApiBody>> {
    let obj = decode_object(ctx, body)?;
    let name = ctx.path_name()?.to_string();
    let current = ctx
        .server
        .store()
        .get(&ctx.key(&name))
        .ok_or_else(|| ApiError::not_found(ctx.def.gr(), &name))?;
    let rv = meta_str(&obj, "resourceVersion")
        .unwrap_or_default()
        .to_string();
    if rv.is_empty() && ctx.def.custom.is_some() {
        return Err(ApiError::invalid(
            &ctx.def.group,
            &ctx.def.kind,
            &name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: 0x0: must be specified for an update".into(),
                field: "metadata.resourceVersion".into(),
            }],
        ));
    }
    let (code, bytes) = update_object(ctx, &name, obj, current, None, sub).await?;
    ctx.respond_object(code, &bytes)
}

/// The update path shared by PUT, PATCH and apply: `obj` is the complete
/// new object; `current` what it replaces. A non-empty resourceVersion in
/// `obj` must match.
pub(crate) async fn update_object(
    ctx: &mut Ctx<'_>,
    name: &str,
    mut obj: Value,
    current: KeyValue,
    decoded: Option<Value>,
    sub: Sub,
) -> ApiResult<(StatusCode, Bytes)> {
    if meta_str(&obj, "name").is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta_str(&obj, "name").unwrap_or_default()
        )));
    }
    if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty())
        && rv != current.mod_revision.to_string()
    {
        return Err(ApiError::stale(ctx.def.gr(), name));
    }
    // The caller may have decoded the stored object already (a patch does).
    let old: Value = match decoded {
        Some(v) => v,
        None => ctx
            .def
            .decode_stored(&current.value)
            .ok_or_else(|| ApiError::internal("the stored object is not valid JSON"))?,
    };
    if ctx.def.namespaced {
        let ns = ctx.ns.clone().unwrap_or_default();
        if meta_str(&obj, "namespace").is_some_and(|n| !n.is_empty() && n != ns) {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta_mut(&mut obj).insert("namespace".into(), json!(ns));
    }
    meta_mut(&mut obj).insert("name".into(), json!(name));
    obj = match sub {
        Sub::Main | Sub::Scale => {
            if ctx.def.status {
                let mut o = obj;
                match old.get("status") {
                    Some(s) => o["status"] = s.clone(),
                    None => {
                        if let Some(m) = o.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                o
            } else {
                obj
            }
        }
        Sub::Status => status_update(obj, &old),
        Sub::EphemeralContainers => crate::ephemeral::prepare(obj, &old),
        Sub::Finalize => {
            let mut o = old.clone();
            let fins = obj
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or(json!([]));
            object::set_path(&mut o, "spec.finalizers", fins);
            o
        }
        Sub::Approval => crate::csr::approval_object(obj, &old),
    };
    // The field manager records the request before admission, as kube's.
    let before_admission = crate::fieldset::before_admission(ctx, &obj);
    // --- admission (crate::admission): mutating webhooks ---
    let admission = crate::admission::Request {
        operation: crate::admission::Operation::Update,
        subresource: sub.subresource(),
        name,
        old: Some(&old),
        dry_run: ctx.dry_run(),
    };
    let warnings = crate::admission::mutate(ctx, &admission, &mut obj).await?;
    ctx.warnings.extend(warnings);
    // --- end admission ---
    let admitted = crate::fieldset::admitted(ctx, before_admission, &obj);
    // Fields the server owns.
    {
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let m = meta_mut(&mut obj);
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_meta.get(k) {
                Some(v) => {
                    m.insert(k.into(), v.clone());
                }
                None => {
                    m.remove(k);
                }
            }
        }
        m.remove("selfLink");
    }
    // No new finalizers once deletion has started.
    if old.pointer("/metadata/deletionTimestamp").is_some() {
        let old_f: Vec<Value> = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let new_f: Vec<Value> = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if new_f.iter().any(|f| !old_f.contains(f)) {
            return Err(ApiError::forbidden(
                ctx.def.gr(),
                name,
                "no new finalizers can be added if the object is being deleted",
            ));
        }
    }
    crate::strategy::prepare_update(ctx, &mut obj, &old);
    crate::csr::prepare_update(ctx, sub, &mut obj, &old, name)?;
    // A CSR's schema requires `spec`, and its status rules read it.
    if sub == Sub::Status && ctx.def.custom.is_none() && !crate::csr::is_csr(&ctx.def) {
        validate_status_write(ctx, &mut obj, name, &old)?;
    } else {
        validate(ctx, &mut obj, name, Some(&old))?;
    }
    if ctx.def.ephemeral_containers {
        match sub {
            Sub::EphemeralContainers => crate::ephemeral::validate_update(ctx, &obj, &old, name)?,
            _ => crate::ephemeral::validate_main_update(ctx, &obj, &old, name)?,
        }
    }
    if ctx.def.generation && object::spec_part(&obj) != object::spec_part(&old) {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .saturating_add(1);
        meta_mut(&mut obj).insert("generation".into(), json!(g));
    }
    crate::rbac_escalation::check(ctx, &obj, Some(&old))?;
    crate::crd::before_update(ctx, &mut obj, &old)?;
    // --- admission (crate::admission): validating webhooks ---
    let admission = crate::admission::Request {
        operation: crate::admission::Operation::Update,
        subresource: sub.subresource(),
        name,
        old: Some(&old),
        dry_run: ctx.dry_run(),
    };
    let warnings = crate::admission::validate(ctx, &admission, Some(&obj)).await?;
    ctx.warnings.extend(warnings);
    // --- end admission ---
    let finished = finalized_and_deleting(&obj);
    if crate::fieldset::track_update(ctx, &old, &mut obj, sub, admitted.as_ref())? {
        return Ok((StatusCode::OK, current.value));
    }
    if ctx.dry_run() {
        return Ok((StatusCode::OK, Bytes::from(object::to_json(&obj))));
    }
    let key = ctx.key(name);
    let obj = ctx.def.to_storage(obj);
    if finished {
        // The last finalizer is gone from an object being deleted: delete it.
        let deleted = delete_now(ctx, &key, name, Some(current.mod_revision), obj).await?;
        return Ok((StatusCode::OK, deleted));
    }
    let encoded = object::Encoded::new(obj);
    let kv = match ctx
        .server
        .store()
        .update(&key, Some(current.mod_revision), move |rev| {
            encoded.with_rv(rev)
        })
        .await
    {
        Ok(kv) => kv,
        Err(StoreError::Conflict { .. }) => return Err(ApiError::stale(ctx.def.gr(), name)),
        Err(StoreError::NotFound { .. }) => return Err(ApiError::not_found(ctx.def.gr(), name)),
        Err(e) => return Err(e.into()),
    };
    crate::authz::changed(ctx.server, &ctx.def);
    crate::crd::after_write(ctx, &kv.value)?;
    Ok((StatusCode::OK, kv.value))
}

/// What a write to the status subresource stores: the stored object with
/// the request's `status` (and managedFields, which the field tracking
/// reads). Built from the request's own fields where they equal the stored
/// ones — a status patch carries the rest unchanged — so the usual case
/// copies nothing but what differs.
fn status_update(mut obj: Value, old: &Value) -> Value {
    let managed = obj.pointer_mut("/metadata/managedFields").map(Value::take);
    let status = obj.as_object_mut().and_then(|m| m.remove("status"));
    let mut req = match obj {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let mut out = Map::new();
    if let Some(old) = old.as_object() {
        for (k, v) in old {
            if k == "status" {
                continue;
            }
            let kept = match (k.as_str(), req.remove(k)) {
                // metadata: the stored one; managedFields are set below.
                ("metadata", Some(Value::Object(m)))
                    if v.as_object().is_some_and(|stored| {
                        crate::fieldset::map_eq_ignoring(&m, stored, &["managedFields"])
                    }) =>
                {
                    Value::Object(m)
                }
                (_, Some(mine)) if mine == *v => mine,
                _ => v.clone(),
            };
            out.insert(k.clone(), kept);
        }
    }
    let mut o = Value::Object(out);
    match managed {
        Some(m) => {
            object::meta_mut(&mut o).insert("managedFields".into(), m);
        }
        None => {
            if let Some(m) = old.pointer("/metadata/managedFields") {
                object::meta_mut(&mut o).insert("managedFields".into(), m.clone());
            }
        }
    }
    if let Some(s) = status {
        o["status"] = s;
    }
    o
}

/// Whether an object being deleted has nothing left holding it: no
/// `metadata.finalizers`, and for a namespace no `spec.finalizers` either
/// (kube's `ShouldDeleteNamespaceDuringUpdate`).
fn finalized_and_deleting(obj: &Value) -> bool {
    let empty = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
    };
    let namespace = obj.get("kind").and_then(Value::as_str) == Some("Namespace")
        && obj.get("apiVersion").and_then(Value::as_str) == Some("v1");
    obj.pointer("/metadata/deletionTimestamp").is_some()
        && empty("/metadata/finalizers")
        && (!namespace || empty("/spec/finalizers"))
}

/// Remove an object from the store; the DELETED event carries `last` with
/// the deletion's resourceVersion.
pub(crate) async fn delete_now(
    ctx: &Ctx<'_>,
    key: &str,
    name: &str,
    expected: Option<u64>,
    last: Value,
) -> ApiResult<Bytes> {
    let prev_last = last;
    let result = ctx
        .server
        .store()
        .delete(key, expected, move |rev, _prev| {
            object::encode_with_rv(prev_last, rev)
        })
        .await;
    match result {
        Ok(prev) => {
            crate::authz::changed(ctx.server, &ctx.def);
            crate::crd::after_delete(ctx, &prev.value).await?;
            Ok(prev.value)
        }
        Err(StoreError::Conflict { .. }) => Err(ApiError::stale(ctx.def.gr(), name)),
        Err(StoreError::NotFound { .. }) => Err(ApiError::not_found(ctx.def.gr(), name)),
        Err(e) => Err(e.into()),
    }
}

/// DeleteOptions from the body and the query.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOptions {
    /// `propagationPolicy`: Background, Foreground or Orphan.
    pub propagation: Option<String>,
    /// The deprecated `orphanDependents`.
    pub orphan_dependents: Option<bool>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `gracePeriodSeconds`.
    pub grace: Option<i64>,
    /// `dryRun: ["All"]` in the body (the query's `dryRun` is in `Ctx`).
    pub dry_run: bool,
}

/// `finalizer orphan`: the garbage collector orphans the dependents, then
/// removes it.
const FINALIZER_ORPHAN: &str = "orphan";
/// `foregroundDeletion`: the garbage collector deletes the blocking
/// dependents first, then removes it.
const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

impl DeleteOptions {
    /// The finalizers the object should carry for this deletion when a
    /// garbage collector runs (kube's `deletionFinalizersForGarbageCollection`):
    /// `orphan` and `foregroundDeletion` follow the options, else whichever
    /// the object already has. `None` when nothing changes.
    fn gc_finalizers(&self, current: &[Value]) -> Option<Vec<Value>> {
        let has = |f: &str| current.iter().any(|x| x == f);
        let first_of = || {
            current.iter().find_map(|x| match x.as_str() {
                Some(FINALIZER_ORPHAN) => Some(true),
                Some(FINALIZER_FOREGROUND) => Some(false),
                _ => None,
            })
        };
        let orphan = match (self.orphan_dependents, self.propagation.as_deref()) {
            (Some(o), _) => o,
            (None, Some("Orphan")) => true,
            (None, Some(_)) => false,
            (None, None) => first_of() == Some(true),
        };
        let foreground = match (self.orphan_dependents, self.propagation.as_deref()) {
            (Some(_), _) => false,
            (None, Some("Foreground")) => true,
            (None, Some(_)) => false,
            (None, None) => has(FINALIZER_FOREGROUND),
        };
        let mut out: Vec<Value> = current
            .iter()
            .filter(|f| *f != FINALIZER_ORPHAN && *f != FINALIZER_FOREGROUND)
            .cloned()
            .collect();
        if orphan {
            out.push(json!(FINALIZER_ORPHAN));
        }
        if foreground {
            out.push(json!(FINALIZER_FOREGROUND));
        }
        let same = out.len() == current.len() && out.iter().all(|f| current.contains(f));
        (!same).then_some(out)
    }
}

fn delete_options(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<DeleteOptions> {
    let mut o = DeleteOptions::default();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let ty = match codec::body_type(&ctx.headers)? {
            t @ (BodyType::Protobuf | BodyType::Yaml) => t,
            _ => BodyType::Json,
        };
        o = DeleteOptions::from_value(&codec::decode(body, ty)?);
    }
    if let Some(p) = ctx.query.get("propagationPolicy") {
        o.propagation = Some(p.to_string());
    }
    if let Some(g) = ctx.query.int("gracePeriodSeconds")? {
        o.grace = Some(g);
    }
    if let Some(od) = ctx.query.get("orphanDependents") {
        o.orphan_dependents = Some(od == "true");
    }
    o.checked()
}

impl DeleteOptions {
    /// The fields of a `DeleteOptions` object: a DELETE's body, or an
    /// Eviction's `deleteOptions`.
    pub(crate) fn from_value(v: &Value) -> DeleteOptions {
        let text = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        DeleteOptions {
            propagation: text("/propagationPolicy"),
            uid: text("/preconditions/uid"),
            resource_version: text("/preconditions/resourceVersion"),
            grace: v.get("gracePeriodSeconds").and_then(Value::as_i64),
            orphan_dependents: v.get("orphanDependents").and_then(Value::as_bool),
            dry_run: v
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|x| x == "All")),
        }
    }

    /// kube's checks of the options: `orphanDependents` and
    /// `propagationPolicy` exclude each other, the policy is one of three,
    /// and a negative grace period counts as 1 second (`BeforeDelete`).
    pub(crate) fn checked(mut self) -> ApiResult<DeleteOptions> {
        if let Some(g) = self.grace
            && g < 0
        {
            self.grace = Some(1);
        }
        let invalid = |reason: &str, message: String| {
            ApiError::invalid(
                "",
                "DeleteOptions",
                "",
                vec![Cause {
                    reason: reason.into(),
                    message,
                    field: "propagationPolicy".into(),
                }],
            )
        };
        if let (Some(_), Some(p)) = (self.orphan_dependents, self.propagation.as_deref()) {
            return Err(invalid(
                "FieldValueInvalid",
                format!(
                    "Invalid value: \"{p}\": orphanDependents and deletionPropagation cannot be both set"
                ),
            ));
        }
        match self.propagation.as_deref() {
            None | Some("Background" | "Foreground" | "Orphan") => Ok(self),
            Some(p) => Err(invalid(
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            )),
        }
    }
}

async fn delete(ctx: &mut Ctx<'_>, body: &[u8]) -> ApiResult<Response<ApiBody>> {
    let opts = delete_options(ctx, body)?;
    let name = ctx.path_name()?.to_string();
    let (code, bytes) = delete_object(ctx, &name, &opts).await?;
    ctx.respond_object(code, &bytes)
}

fn finalizer_list(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Delete one object, as kube's generic registry does:
///
/// - preconditions (uid, resourceVersion) are checked first (409);
/// - with a garbage collector running, `propagationPolicy` Foreground or
///   Orphan (or `orphanDependents`) adds the `foregroundDeletion` or
///   `orphan` finalizer, Background removes them;
/// - a graceful deletion (pods, when declared) sets `deletionTimestamp` in
///   the future and `deletionGracePeriodSeconds`; a second DELETE may only
///   shorten it;
/// - an object with finalizers gets `deletionTimestamp` (and
///   `deletionGracePeriodSeconds: 0`) and stays: the MODIFIED event tells
///   the finalizers' controllers; otherwise it is removed;
/// - a namespace, when a namespace controller runs, is marked Terminating
///   and stays until its `spec.finalizers` are emptied through
///   `namespaces/{name}/finalize`.
///
/// The status code is 200 unless the object stays and `orphanDependents`
/// was explicitly false (202), like kube.
pub(crate) async fn delete_object(
    ctx: &Ctx<'_>,
    name: &str,
    opts: &DeleteOptions,
) -> ApiResult<(StatusCode, Bytes)> {
    let key = ctx.key(name);
    let dry_run = ctx.dry_run() || opts.dry_run;
    let kept = if opts.orphan_dependents == Some(false) {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    // --- admission (crate::admission): NodeRestriction, then validating
    // webhooks see the deletion ---
    crate::admission::admit_pod_removal(ctx, name, false)?;
    crate::admission::validate_delete(ctx, name, &key, dry_run).await?;
    // --- end admission ---
    for _attempt in 0..16 {
        let current = ctx
            .server
            .store()
            .get(&key)
            .ok_or_else(|| ApiError::not_found(ctx.def.gr(), name))?;
        let mut obj: Value = serde_json::from_slice(&current.value)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        if let Some(uid) = &opts.uid {
            let have = meta_str(&obj, "uid").unwrap_or_default();
            if uid != have {
                return Err(ApiError::conflict(
                    ctx.def.gr(),
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {have}"
                    ),
                ));
            }
        }
        if let Some(rv) = &opts.resource_version
            && *rv != current.mod_revision.to_string()
        {
            return Err(ApiError::conflict(
                ctx.def.gr(),
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    current.mod_revision
                ),
            ));
        }
        let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
        let old_finalizers = finalizer_list(&obj);
        let new_finalizers = if ctx.server.gc_enabled() {
            opts.gc_finalizers(&old_finalizers)
        } else {
            None
        };
        let mut changed = new_finalizers.is_some();
        let finalizers = new_finalizers.unwrap_or_else(|| old_finalizers.clone());

        // A namespace is marked Terminating; the namespace controller empties
        // it and removes `kubernetes` from spec.finalizers. Without one the
        // server does that work itself, now.
        if ctx.def.strategy == Strategy::Namespace {
            let controller = ctx.server.namespace_controller_enabled();
            if !controller && !dry_run {
                crate::strategy::before_delete(ctx, &obj).await?;
                if let Some(f) = obj
                    .pointer_mut("/spec/finalizers")
                    .and_then(Value::as_array_mut)
                {
                    f.retain(|x| x != "kubernetes");
                }
            }
            let spec_finalizers = obj
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty());
            let held = spec_finalizers || !finalizers.is_empty();
            if (!deleting && (controller || held)) || (deleting && spec_finalizers) {
                let was: Value = serde_json::from_slice(&current.value)
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                crate::strategy::mark_namespace_terminating(&mut obj);
                if !finalizers.is_empty() || changed {
                    meta_mut(&mut obj).insert("finalizers".into(), Value::Array(finalizers));
                }
                if obj == was {
                    return Ok((StatusCode::OK, current.value));
                }
                if dry_run {
                    return Ok((StatusCode::OK, Bytes::from(object::to_json(&obj))));
                }
                match store_update(ctx, &key, current.mod_revision, obj).await? {
                    Some(b) => return Ok((StatusCode::OK, b)),
                    None => continue,
                }
            }
        }

        // Graceful deletion: deletionTimestamp in the future.
        let mut grace = None;
        if let Some(period) = crate::strategy::graceful_delete(ctx, &obj, opts.grace) {
            let existing = obj
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if deleting && existing > 0 {
                if period >= existing {
                    // Graceful deletion is pending: nothing to change.
                    return Ok((kept, current.value));
                }
                grace = Some(period);
            } else if !deleting && period > 0 {
                grace = Some(period);
            }
        }
        if let Some(period) = grace.filter(|p| *p > 0) {
            {
                let m = meta_mut(&mut obj);
                let at = jiff::Timestamp::now()
                    .checked_add(jiff::SignedDuration::from_secs(period))
                    .unwrap_or_else(|_| jiff::Timestamp::now());
                let at = jiff::Timestamp::from_second(at.as_second()).unwrap_or(at);
                m.insert("deletionTimestamp".into(), json!(at.to_string()));
                m.insert("deletionGracePeriodSeconds".into(), json!(period));
                if changed {
                    m.insert("finalizers".into(), Value::Array(finalizers));
                }
                if !deleting && ctx.def.generation {
                    let g = m
                        .get("generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                        .saturating_add(1);
                    m.insert("generation".into(), json!(g));
                }
            }
            if dry_run {
                return Ok((kept, Bytes::from(object::to_json(&obj))));
            }
            match store_update(ctx, &key, current.mod_revision, obj).await? {
                Some(b) => return Ok((kept, b)),
                None => continue,
            }
        }
        if grace == Some(0) {
            // Shortened to zero: the pending graceful deletion ends now.
            changed = true;
        }

        // Finalizers hold the object: mark it deleting (kube's markAsDeleting).
        if !finalizers.is_empty() {
            let grace_now = obj
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64);
            if deleting && !changed && grace_now == Some(0) {
                return Ok((kept, current.value));
            }
            {
                let now = object::now_rfc3339();
                let m = meta_mut(&mut obj);
                let later = m
                    .get("deletionTimestamp")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t > now.as_str());
                if !deleting && ctx.def.generation {
                    let g = m
                        .get("generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                        .saturating_add(1);
                    m.insert("generation".into(), json!(g));
                }
                if later {
                    m.insert("deletionTimestamp".into(), json!(now));
                }
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                m.insert("finalizers".into(), Value::Array(finalizers));
            }
            if dry_run {
                return Ok((kept, Bytes::from(object::to_json(&obj))));
            }
            match store_update(ctx, &key, current.mod_revision, obj).await? {
                Some(b) => return Ok((kept, b)),
                None => continue,
            }
        }

        // Nothing holds it: remove it.
        if dry_run {
            return Ok((StatusCode::OK, current.value));
        }
        crate::strategy::before_delete(ctx, &obj).await?;
        match delete_now(ctx, &key, name, Some(current.mod_revision), obj).await {
            Ok(b) => return Ok((StatusCode::OK, b)),
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::stale(ctx.def.gr(), name))
}

/// Compare-and-swap `obj` over revision `expected`: the stored bytes, or
/// `None` when the object changed meanwhile (the caller retries).
async fn store_update(
    ctx: &Ctx<'_>,
    key: &str,
    expected: u64,
    obj: Value,
) -> ApiResult<Option<Bytes>> {
    let encoded = object::Encoded::new(obj);
    match ctx
        .server
        .store()
        .update(key, Some(expected), move |rev| encoded.with_rv(rev))
        .await
    {
        Ok(kv) => Ok(Some(kv.value)),
        Err(StoreError::Conflict { .. }) => Ok(None),
        Err(StoreError::NotFound { .. }) => Err(ApiError::not_found(
            ctx.def.gr(),
            key.rsplit('/').next().unwrap_or_default(),
        )),
        Err(e) => Err(e.into()),
    }
}

/// How many deletions of one deletecollection run at once (kube-apiserver's
/// `--delete-collection-workers`); concurrent writes share the durable
/// store's group commit.
const DELETE_COLLECTION_WORKERS: usize = 16;

async fn delete_collection(ctx: &mut Ctx<'_>, body: &[u8]) -> ApiResult<Response<ApiBody>> {
    let opts = Arc::new(delete_options(ctx, body)?);
    let (labels, fields) = ctx.selectors()?;
    let page = list_page(ctx, &labels, &fields).await?;
    let names: Vec<String> = page
        .items
        .iter()
        .filter_map(|kv| kv.key.rsplit('/').next().map(str::to_string))
        .collect();
    let mut done: Vec<(usize, Bytes)> = Vec::with_capacity(names.len());
    let mut running = tokio::task::JoinSet::new();
    let mut failed: Option<ApiError> = None;
    for (i, name) in names.into_iter().enumerate() {
        if running.len() >= DELETE_COLLECTION_WORKERS
            && let Some(r) = running.join_next().await
        {
            collect_deleted(r, &mut done, &mut failed);
        }
        if failed.is_some() {
            break;
        }
        let server = ctx.server.clone();
        let def = ctx.def.clone();
        let ns = ctx.ns.clone();
        let query = ctx.query.clone();
        let headers = ctx.headers.clone();
        let opts = opts.clone();
        let user = ctx.user.clone();
        running.spawn(async move {
            let ctx = Ctx {
                server: &server,
                def,
                ns,
                name: None,
                query,
                headers,
                accept: Accept::default(),
                warnings: Vec::new(),
                user,
            };
            delete_object(&ctx, &name, &opts).await.map(|(_, b)| (i, b))
        });
    }
    while let Some(r) = running.join_next().await {
        collect_deleted(r, &mut done, &mut failed);
    }
    if let Some(e) = failed {
        return Err(e);
    }
    done.sort_by_key(|(i, _)| *i);
    let items: Vec<Bytes> = done.into_iter().map(|(_, b)| b).collect();
    let mut out = format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\"}},\"items\":[",
        ctx.def.kind,
        ctx.def.api_version(),
        ctx.server.store().current_revision()
    )
    .into_bytes();
    for (i, b) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b);
    }
    out.extend_from_slice(b"]}");
    Ok(codec::respond(StatusCode::OK, Bytes::from(out), false))
}

/// One finished deletion of a deletecollection: kept, skipped (already
/// gone) or the first failure.
fn collect_deleted(
    r: Result<ApiResult<(usize, Bytes)>, tokio::task::JoinError>,
    done: &mut Vec<(usize, Bytes)>,
    failed: &mut Option<ApiError>,
) {
    match r {
        Ok(Ok(item)) => done.push(item),
        Ok(Err(e)) if e.code == 404 => {}
        Ok(Err(e)) => {
            failed.get_or_insert(e);
        }
        Err(e) => {
            failed.get_or_insert(ApiError::internal(e.to_string()));
        }
    }
}

/// Create a namespace if it does not exist (server start-up).
pub(crate) async fn ensure_namespace(server: &ApiServer, name: &str) -> ApiResult<()> {
    ensure_object(
        server,
        ("", "v1", "namespaces"),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await
}

/// Create `obj` of `(group, version, plural)` (in its
/// `metadata.namespace` when namespaced) through the normal create path
/// unless an object of its name exists.
pub(crate) async fn ensure_object(
    server: &ApiServer,
    (group, version, plural): (&str, &str, &str),
    obj: Value,
) -> ApiResult<()> {
    let def = server
        .registry()
        .get(group, version, plural)
        .ok_or_else(|| ApiError::internal(format!("{plural} are not registered")))?;
    let name = meta_str(&obj, "name").unwrap_or_default().to_string();
    let ns = meta_str(&obj, "namespace")
        .filter(|_| def.namespaced)
        .map(str::to_string);
    if server.store().get(&def.key(ns.as_deref(), &name)).is_some() {
        return Ok(());
    }
    let mut ctx = Ctx {
        server,
        def,
        ns,
        name: None,
        query: Query::default(),
        headers: HeaderMap::new(),
        accept: Accept::default(),
        warnings: Vec::new(),
        user: crate::authz::loopback_identity().0,
    };
    match create_object(&mut ctx, obj).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}
