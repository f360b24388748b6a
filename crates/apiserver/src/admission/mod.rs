//! The admission chain: what happens to a write between decoding and
//! storage, as in kube-apiserver.
//!
//! 1. Mutating webhooks (`MutatingWebhookConfiguration`) are called one
//!    after another in name order; each `JSONPatch` answer is applied
//!    before the next call. When a later webhook changed the object, the
//!    earlier ones with `reinvocationPolicy: IfNeeded` are called once more.
//! 2. The object is validated against its schema (in [`crate::rest`]).
//! 3. The built-in validating plugins ([`noderestriction`]: what nodes may
//!    write; [`podsecurity`]: Pod Security admission; [`certificates`]:
//!    kube's CertificateSubjectRestriction,
//!    CertificateApproval and CertificateSigning), then the validating webhooks
//!    (`ValidatingWebhookConfiguration`), called in parallel; any denial
//!    fails the request.
//!
//! Matching follows the configuration's `rules` (operations, apiGroups,
//! apiVersions, resources with `*`, `*/*` and subresources, scope),
//! `namespaceSelector` (namespaces carry `kubernetes.io/metadata.name`),
//! `objectSelector` (old or new object) and `matchPolicy`. A selector that
//! does not parse, or a namespace that cannot be read for a
//! `namespaceSelector`, fails the request (500, or the namespace's 404) for
//! any webhook whose rules match, whatever its `failurePolicy` — kube's
//! `ShouldCallHook`. A call that
//! cannot be made or answers nonsense honours `failurePolicy`: `Fail` fails
//! the request with `Internal error occurred: failed calling webhook "x":
//! …`, `Ignore` goes on. A denial reads `admission webhook "x" denied the
//! request: …`. Answers' `warnings` become `Warning` headers.
//!
//! Never sent to webhooks: the webhook configurations themselves (as in
//! kube-apiserver, so a broken webhook can always be removed) and requests
//! in the exempt namespaces (`kube-system` unless changed with
//! [`ApiServer::set_admission_exempt_namespaces`]).

mod certificates;
mod client;
mod config;
mod noderestriction;
mod podsecurity;

pub(crate) use noderestriction::{admit_pod_removal, admit_token_request};

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::context::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::server::ApiServer;
use config::{ConfigCache, RequestInfo, SideEffects, Webhook};

/// Largest webhook answer read.
const MAX_RESPONSE: usize = 3 * 1024 * 1024;

/// The chain's state, one per server.
pub(crate) struct Admission {
    mutating: ConfigCache,
    validating: ConfigCache,
    clients: client::Clients,
    services: client::ServiceMap,
    exempt: RwLock<Vec<String>>,
    pod_security: RwLock<Arc<kubeforge_podsecurity::config::Config>>,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            mutating: ConfigCache::new(config::MUTATING_PREFIX, true),
            validating: ConfigCache::new(config::VALIDATING_PREFIX, false),
            clients: client::Clients::default(),
            services: Default::default(),
            exempt: RwLock::new(vec!["kube-system".into()]),
            pod_security: RwLock::default(),
        }
    }
}

impl ApiServer {
    /// Where webhooks whose `clientConfig.service` is
    /// `namespace/name:port` are reached: the embedded cluster has no
    /// service network, so a webhook server registers its address here.
    /// The TLS server name stays `name.namespace.svc`.
    pub fn set_service_address(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        if let Ok(mut m) = self.inner.admission.services.write() {
            m.insert((namespace.to_string(), name.to_string(), port), addr);
        }
    }

    /// Namespaces whose requests are never sent to admission webhooks
    /// (default: `kube-system`), so a webhook that is down cannot stop the
    /// cluster from repairing itself.
    pub fn set_admission_exempt_namespaces(&self, namespaces: Vec<String>) {
        if let Ok(mut e) = self.inner.admission.exempt.write() {
            *e = namespaces;
        }
    }
}

/// The operation being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    /// A create (POST, or apply creating).
    Create,
    /// An update (PUT, PATCH, apply, /status, /scale, /finalize).
    Update,
    /// A delete.
    Delete,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// One request to admit.
pub(crate) struct Request<'a> {
    pub operation: Operation,
    /// Subresource (`status`, `scale`, …) or "".
    pub subresource: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The old object on UPDATE and DELETE.
    pub old: Option<&'a Value>,
    /// A dry run.
    pub dry_run: bool,
}

fn info<'a>(ctx: &'a Ctx<'_>, r: &'a Request<'_>) -> RequestInfo<'a> {
    RequestInfo {
        operation: r.operation.as_str(),
        group: &ctx.def.group,
        version: &ctx.def.version,
        resource: &ctx.def.plural,
        subresource: r.subresource,
        namespaced: ctx.def.namespaced,
    }
}

fn exempt(ctx: &Ctx<'_>, r: &Request<'_>) -> bool {
    if ctx.def.group == "admissionregistration.k8s.io"
        && matches!(
            ctx.def.plural.as_str(),
            "mutatingwebhookconfigurations" | "validatingwebhookconfigurations"
        )
    {
        return true;
    }
    let Ok(list) = ctx.server.inner.admission.exempt.read() else {
        return false;
    };
    let ns = match ctx.ns.as_deref() {
        Some(ns) => ns,
        None if ctx.def.group.is_empty() && ctx.def.plural == "namespaces" => r.name,
        None => return false,
    };
    list.iter().any(|e| e == ns)
}

/// An object's `metadata.labels` as a map (`None` when absent or not a
/// map of strings).
fn labels_of(v: &Value) -> Option<std::collections::BTreeMap<String, String>> {
    v.pointer("/metadata/labels")
        .and_then(|l| serde::Deserialize::deserialize(l).ok())
}

/// Labels of the request's namespace (or of the namespace being written),
/// as kube's namespace matcher reads them: a namespace being created or
/// updated from the object itself (its `kubernetes.io/metadata.name`
/// label is the name, as kube's decoding defaults it), any other request
/// from the stored namespace, which must exist.
fn namespace_labels(ctx: &Ctx<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<Value> {
    if ctx.def.group.is_empty() && ctx.def.plural == "namespaces" {
        let Some(o) = obj.or(old) else {
            return Ok(Value::Null);
        };
        let mut labels = o
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or(Value::Null);
        if labels.is_null() {
            labels = json!({});
        }
        if let (Some(l), Some(name)) = (labels.as_object_mut(), o.pointer("/metadata/name")) {
            l.insert(crate::strategy::NAMESPACE_NAME_LABEL.into(), name.clone());
        }
        return Ok(labels);
    }
    let Some(ns) = ctx.ns.as_deref() else {
        return Ok(Value::Null);
    };
    let gr = crate::error::GroupResource {
        group: "",
        resource: "namespaces",
    };
    let kv = ctx
        .server
        .store()
        .get(&format!("/registry/core/namespaces/{ns}"))
        .ok_or_else(|| ApiError::not_found(gr, ns))?;
    let v: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::internal(format!("reading namespace {ns:?}: {e}")))?;
    Ok(v.pointer("/metadata/labels")
        .cloned()
        .unwrap_or(Value::Null))
}

/// Whether `wh` applies to this request; an error when a selector that
/// must be evaluated cannot be (an unparsable selector, an unreadable
/// namespace). As in kube's `ShouldCallHook`, the error fails the request
/// whatever `failurePolicy` says, and only when the rules match and no
/// selector already excluded the request.
fn applies(
    ctx: &Ctx<'_>,
    wh: &Webhook,
    ri: &RequestInfo<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    ns_labels: &mut Option<Value>,
) -> ApiResult<bool> {
    if !wh.matches_rules(ri) {
        return Ok(false);
    }
    // Cluster-scoped objects other than namespaces ignore namespaceSelector.
    let ns_scoped =
        ctx.def.namespaced || (ctx.def.group.is_empty() && ctx.def.plural == "namespaces");
    let ns_match = match &wh.namespace_selector {
        _ if !ns_scoped => Ok(true),
        Err(e) => Err(ApiError::internal(e.clone())),
        Ok(sel) if sel.is_everything() => Ok(true),
        Ok(sel) => {
            if ns_labels.is_none() {
                *ns_labels = Some(namespace_labels(ctx, obj, old)?);
            }
            let labels = ns_labels.as_ref().filter(|l| l.is_object());
            Ok(sel.matches(&labels))
        }
    };
    if matches!(ns_match, Ok(false)) {
        return Ok(false);
    }
    let obj_match = match &wh.object_selector {
        Err(e) => Err(ApiError::internal(e.clone())),
        Ok(sel) if sel.is_everything() => Ok(true),
        Ok(sel) => {
            let m =
                |o: Option<&Value>| o.is_some_and(|o| sel.matches(&o.pointer("/metadata/labels")));
            Ok(m(obj) || m(old))
        }
    };
    if matches!(obj_match, Ok(false)) {
        return Ok(false);
    }
    ns_match?;
    obj_match?;
    Ok(true)
}

/// The AdmissionReview sent for this request.
fn review(ctx: &Ctx<'_>, r: &Request<'_>, uid: &str, obj: Option<&Value>) -> Value {
    let gvk = json!({"group": ctx.def.group, "version": ctx.def.version, "kind": ctx.def.kind});
    let gvr =
        json!({"group": ctx.def.group, "version": ctx.def.version, "resource": ctx.def.plural});
    let (opts_kind, mut opts) = match r.operation {
        Operation::Create => ("CreateOptions", json!({})),
        Operation::Update => ("UpdateOptions", json!({})),
        Operation::Delete => ("DeleteOptions", json!({})),
    };
    opts["kind"] = json!(opts_kind);
    opts["apiVersion"] = json!("meta.k8s.io/v1");
    if r.dry_run {
        opts["dryRun"] = json!(["All"]);
    }
    if let Some(fm) = ctx.query.get("fieldManager") {
        opts["fieldManager"] = json!(fm);
    }
    let mut req = json!({
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": r.name,
        "operation": r.operation.as_str(),
        "userInfo": crate::reviews::user_info(&ctx.user),
        "object": obj.cloned().unwrap_or(Value::Null),
        "oldObject": r.old.cloned().unwrap_or(Value::Null),
        "dryRun": r.dry_run,
        "options": opts,
    });
    if !r.subresource.is_empty() {
        req["subResource"] = json!(r.subresource);
        req["requestSubResource"] = json!(r.subresource);
    }
    if let Some(ns) = ctx.ns.as_deref() {
        req["namespace"] = json!(ns);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// A webhook's verified answer.
struct Reply {
    allowed: bool,
    status: Value,
    patch: Option<Vec<u8>>,
    warnings: Vec<String>,
}

/// Why a call produced no usable answer (`failurePolicy` decides).
struct CallFailed(String);

async fn call(adm: &Admission, wh: &Webhook, body: Bytes, uid: &str) -> Result<Reply, CallFailed> {
    let endpoint = wh.endpoint.as_ref().map_err(|e| CallFailed(e.clone()))?;
    let url = endpoint.url();
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}timeout={}s", wh.timeout.as_secs());
    let client = adm
        .clients
        .get(&wh.ca_bundle, &adm.services)
        .map_err(CallFailed)?;
    let failed = |why: String| CallFailed(format!("failed to call webhook: Post \"{url}\": {why}"));
    let req = http::Request::post(&url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(http_body_util::Full::new(body))
        .map_err(|e| failed(e.to_string()))?;
    let exchange = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| failed(client::describe(&e)))?;
        let status = resp.status();
        let bytes = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| failed(format!("reading the response: {e}")))?
            .to_bytes();
        Ok::<_, CallFailed>((status, bytes))
    };
    let (status, bytes) = match tokio::time::timeout(wh.timeout, exchange).await {
        Ok(r) => r?,
        Err(_) => return Err(failed("context deadline exceeded".into())),
    };
    if !status.is_success() {
        return Err(failed(format!(
            "the server responded with the status code {} but did not return more information",
            status.as_u16()
        )));
    }
    verify(&bytes, uid).map_err(|e| CallFailed(format!("received invalid webhook response: {e}")))
}

/// kube's `VerifyAdmissionResponse` for v1.
fn verify(bytes: &[u8], uid: &str) -> Result<Reply, String> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("decoding the AdmissionReview: {e}"))?;
    let av = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    if av != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {av}, Kind={kind}"
        ));
    }
    let r = v
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("webhook response was absent")?;
    let got = r.get("uid").and_then(Value::as_str).unwrap_or("");
    if got != uid {
        return Err(format!("expected response.uid=\"{uid}\", got \"{got}\""));
    }
    // Go decodes a []byte from a base64 string or from an array of numbers
    // (kube-rs sends the latter), so both are accepted.
    let patch = match (
        r.get("patch").filter(|p| !p.is_null()),
        r.get("patchType").and_then(Value::as_str),
    ) {
        (None, _) => None,
        (Some(_), None) => {
            return Err("webhook returned response.patch but not response.patchType".into());
        }
        (Some(p), Some("JSONPatch")) => Some(patch_bytes(p)?),
        (Some(_), Some(t)) => {
            return Err(format!(
                "webhook returned invalid response.patchType of \"{t}\""
            ));
        }
    };
    Ok(Reply {
        allowed: r.get("allowed").and_then(Value::as_bool).unwrap_or(false),
        status: r.get("status").cloned().unwrap_or(Value::Null),
        patch,
        warnings: r
            .get("warnings")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// The bytes of `response.patch`: base64 text or an array of bytes.
fn patch_bytes(p: &Value) -> Result<Vec<u8>, String> {
    let bad = || "response.patch is neither base64 nor an array of bytes".to_string();
    match p {
        Value::String(s) => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| format!("response.patch is not base64: {e}"))
        }
        Value::Array(a) => a
            .iter()
            .map(|b| {
                b.as_u64()
                    .and_then(|b| u8::try_from(b).ok())
                    .ok_or_else(bad)
            })
            .collect(),
        _ => Err(bad()),
    }
}

fn static_reason(r: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    KNOWN.iter().find(|k| **k == r).copied().unwrap_or("")
}

/// kube's `webhookerrors.ToStatusErr`.
fn denied(name: &str, status: &Value) -> ApiError {
    let by = format!("admission webhook \"{name}\" denied the request");
    let message = status.get("message").and_then(Value::as_str).unwrap_or("");
    let reason = status.get("reason").and_then(Value::as_str).unwrap_or("");
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(403);
    let message = if !message.is_empty() {
        format!("{by}: {message}")
    } else if !reason.is_empty() {
        format!("{by}: {reason}")
    } else {
        format!("{by} without explanation")
    };
    ApiError {
        code,
        reason: static_reason(reason),
        message,
        details: Box::default(),
    }
}

fn calling_failed(name: &str, why: &str) -> ApiError {
    ApiError::internal(format!("failed calling webhook \"{name}\": {why}"))
}

fn dry_run_unsupported(name: &str) -> ApiError {
    ApiError::bad_request(format!(
        "admission webhook \"{name}\" does not support dry run"
    ))
}

/// Run the mutating webhooks on `obj`; returns their warnings.
pub(crate) async fn mutate(
    ctx: &Ctx<'_>,
    r: &Request<'_>,
    obj: &mut Value,
) -> ApiResult<Vec<String>> {
    let adm = &ctx.server.inner.admission;
    let snap = adm.mutating.current(ctx.server.store());
    if snap.webhooks.is_empty() || exempt(ctx, r) {
        return Ok(Vec::new());
    }
    let ri = info(ctx, r);
    let uid = uuid::Uuid::new_v4().to_string();
    let mut warnings = Vec::new();
    let mut ns_labels = None;
    // (index, whether it changed the object) of every call, in order.
    let mut called: Vec<(usize, bool)> = Vec::new();
    let mut reinvoking = false;
    let mut order: Vec<usize> = (0..snap.webhooks.len()).collect();
    loop {
        for &i in &order {
            let wh = &snap.webhooks[i];
            if !applies(ctx, wh, &ri, Some(obj), r.old, &mut ns_labels)? {
                continue;
            }
            if r.dry_run && wh.side_effects == SideEffects::Unsafe {
                return Err(dry_run_unsupported(&wh.name));
            }
            let body = Bytes::from(review(ctx, r, &uid, Some(obj)).to_string());
            let reply = match call(adm, wh, body, &uid).await {
                Ok(reply) => reply,
                Err(CallFailed(why)) if wh.fail_closed => {
                    return Err(calling_failed(&wh.name, &why));
                }
                Err(CallFailed(why)) => {
                    tracing::warn!(webhook = %wh.name, error = %why, "failed calling webhook, failing open per policy");
                    continue;
                }
            };
            warnings.extend(reply.warnings);
            if !reply.allowed {
                return Err(denied(&wh.name, &reply.status));
            }
            let mut changed = false;
            if let Some(p) = reply.patch {
                changed = apply_patch(&wh.name, obj, &p)?;
            }
            called.push((i, changed));
        }
        if reinvoking {
            return Ok(warnings);
        }
        // Earlier IfNeeded webhooks see the object again when a later one changed it.
        let last_change = called.iter().rposition(|(_, c)| *c);
        order = match last_change {
            Some(last) => called[..last]
                .iter()
                .map(|(i, _)| *i)
                .filter(|i| snap.webhooks[*i].reinvoke)
                .collect(),
            None => Vec::new(),
        };
        if order.is_empty() {
            return Ok(warnings);
        }
        reinvoking = true;
    }
}

/// Apply a webhook's JSONPatch; an invalid patch fails the request naming
/// the webhook, and leaves `obj` untouched.
fn apply_patch(name: &str, obj: &mut Value, patch: &[u8]) -> ApiResult<bool> {
    let bad = |why: String| {
        ApiError::internal(format!(
            "webhook \"{name}\" returned an invalid JSONPatch: {why}"
        ))
    };
    let p: json_patch::Patch = serde_json::from_slice(patch).map_err(|e| bad(e.to_string()))?;
    if p.0.is_empty() {
        return Ok(false);
    }
    let mut patched = obj.clone();
    json_patch::patch(&mut patched, &p).map_err(|e| bad(e.to_string()))?;
    for f in ["apiVersion", "kind"] {
        if patched.get(f) != obj.get(f) {
            return Err(bad(format!("the patch changes {f}")));
        }
    }
    if !patched.is_object() {
        return Err(bad("the patched object is not an object".into()));
    }
    let changed = patched != *obj;
    *obj = patched;
    Ok(changed)
}

/// Run the validating webhooks in parallel; returns their warnings.
pub(crate) async fn validate(
    ctx: &Ctx<'_>,
    r: &Request<'_>,
    obj: Option<&Value>,
) -> ApiResult<Vec<String>> {
    // The built-in validating plugins run before the webhooks, as
    // kube-apiserver orders them.
    noderestriction::validate(ctx, r, obj)?;
    let mut warnings = podsecurity::validate(ctx, r, obj)?;
    certificates::validate(ctx, r, obj)?;
    let adm = &ctx.server.inner.admission;
    let snap = adm.validating.current(ctx.server.store());
    if snap.webhooks.is_empty() || exempt(ctx, r) {
        return Ok(warnings);
    }
    let ri = info(ctx, r);
    let mut ns_labels = None;
    let mut matched = Vec::new();
    for wh in &snap.webhooks {
        if applies(ctx, wh, &ri, obj, r.old, &mut ns_labels)? {
            if r.dry_run && wh.side_effects == SideEffects::Unsafe {
                return Err(dry_run_unsupported(&wh.name));
            }
            matched.push(wh.clone());
        }
    }
    if matched.is_empty() {
        return Ok(warnings);
    }
    let uid = uuid::Uuid::new_v4().to_string();
    let body = Bytes::from(review(ctx, r, &uid, obj).to_string());
    let outcomes: Vec<(Arc<Webhook>, Result<Reply, CallFailed>)> = if matched.len() == 1 {
        let wh = matched.remove(0);
        let out = call(adm, &wh, body, &uid).await;
        vec![(wh, out)]
    } else {
        let server = ctx.server.clone();
        let mut set = tokio::task::JoinSet::new();
        for wh in matched {
            let (server, body, uid) = (server.clone(), body.clone(), uid.clone());
            set.spawn(async move {
                let out = call(&server.inner.admission, &wh, body, &uid).await;
                (wh, out)
            });
        }
        let mut outs = Vec::new();
        while let Some(done) = set.join_next().await {
            match done {
                Ok(o) => outs.push(o),
                Err(e) => {
                    return Err(ApiError::internal(format!(
                        "a webhook call task failed: {e}"
                    )));
                }
            }
        }
        outs
    };
    let mut first_error = None;
    for (wh, out) in outcomes {
        match out {
            Ok(reply) => {
                warnings.extend(reply.warnings);
                if !reply.allowed && first_error.is_none() {
                    first_error = Some(denied(&wh.name, &reply.status));
                }
            }
            Err(CallFailed(why)) if wh.fail_closed => {
                if first_error.is_none() {
                    first_error = Some(calling_failed(&wh.name, &why));
                }
            }
            Err(CallFailed(why)) => {
                tracing::warn!(webhook = %wh.name, error = %why, "failed calling webhook, failing open per policy");
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(warnings),
    }
}

/// Run the validating webhooks for a DELETE of the object at `key` (its
/// current state is the `oldObject`). A missing object is left to the
/// delete itself to report.
pub(crate) async fn validate_delete(
    ctx: &Ctx<'_>,
    name: &str,
    key: &str,
    dry_run: bool,
) -> ApiResult<()> {
    let adm = &ctx.server.inner.admission;
    if adm
        .validating
        .current(ctx.server.store())
        .webhooks
        .is_empty()
    {
        return Ok(());
    }
    let Some(old) = ctx
        .server
        .store()
        .get(key)
        .and_then(|kv| ctx.def.decode_stored(&kv.value))
    else {
        return Ok(());
    };
    let r = Request {
        operation: Operation::Delete,
        subresource: "",
        name,
        old: Some(&old),
        dry_run,
    };
    validate(ctx, &r, None).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_checks_the_answer() {
        let ok = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u", "allowed": true, "warnings": ["w"]}});
        let r = verify(ok.to_string().as_bytes(), "u").expect("valid");
        assert!(r.allowed);
        assert_eq!(r.warnings, vec!["w".to_string()]);
        let e = verify(ok.to_string().as_bytes(), "other")
            .err()
            .unwrap_or_default();
        assert_eq!(e, "expected response.uid=\"other\", got \"u\"");
        let e = verify(br#"{"apiVersion":"v1","kind":"Status"}"#, "u")
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("expected webhook response of admission.k8s.io/v1"),
            "{e}"
        );
        let no_type = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u", "allowed": true, "patch": "W10="}});
        assert!(verify(no_type.to_string().as_bytes(), "u").is_err());
    }

    #[test]
    fn denial_reads_like_kube() {
        let e = denied(
            "x.example.com",
            &json!({"message": "no limits", "code": 403}),
        );
        assert_eq!(
            e.message,
            "admission webhook \"x.example.com\" denied the request: no limits"
        );
        assert_eq!(e.code, 403);
        let e = denied("y", &Value::Null);
        assert_eq!(
            e.message,
            "admission webhook \"y\" denied the request without explanation"
        );
    }

    #[test]
    fn invalid_patch_names_the_webhook_and_keeps_the_object() {
        let mut obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}});
        let before = obj.clone();
        let e = apply_patch(
            "m",
            &mut obj,
            br#"[{"op":"replace","path":"/spec/missing","value":1}]"#,
        )
        .err();
        assert!(e.is_some_and(|e| {
            e.message
                .contains("webhook \"m\" returned an invalid JSONPatch")
        }));
        assert_eq!(obj, before);
        assert!(apply_patch("m", &mut obj, b"not json").is_err());
        assert!(
            apply_patch(
                "m",
                &mut obj,
                br#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#
            )
            .unwrap_or(false)
        );
    }
}
