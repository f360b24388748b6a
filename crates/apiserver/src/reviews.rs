//! The review APIs: create-only, computed, never stored — what
//! `kubectl auth can-i [--list]` and `kubectl auth whoami` call.
//!
//! - `authorization.k8s.io/v1` SelfSubjectAccessReview (may I?),
//!   SubjectAccessReview (may they?), LocalSubjectAccessReview (may they,
//!   in this namespace?), SelfSubjectRulesReview (what may I, here?);
//! - `authentication.k8s.io/v1` SelfSubjectReview (who am I?).
//!
//! Each follows kube's REST handler and validation: exactly one of
//! `resourceAttributes` / `nonResourceAttributes`, a user or a group for
//! SubjectAccessReview, the URL's namespace for the local form, a namespace
//! for the rules review, with kube's messages. Answers always carry
//! `allowed`, `incomplete`, `resourceRules` and `nonResourceRules` (the
//! Python client refuses them absent).

use std::collections::BTreeMap;
use std::sync::Arc;

use http::{Method, Response, StatusCode};
use kubeforge_authz::{Attributes, Decision, UserInfo};
use serde_json::{Value, json};

use crate::body::ApiBody;
use crate::codec;
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult, Cause};
use crate::registry::ResourceDef;

/// The review resources: `(group, plural)`.
pub(crate) const REVIEWS: &[(&str, &str)] = &[
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authentication.k8s.io", "tokenreviews"),
];

/// Whether a row is one of the review resources.
pub(crate) fn serves(def: &ResourceDef) -> bool {
    REVIEWS
        .iter()
        .any(|(g, p)| def.group == *g && def.plural == *p)
}

/// POST a review; any other verb is 405, a name in the path 404.
pub(crate) async fn serve(
    ctx: &mut Ctx<'_>,
    method: &Method,
    subresource: Option<&str>,
    body: &[u8],
    user: &Arc<UserInfo>,
) -> ApiResult<Response<ApiBody>> {
    if ctx.name.is_some() || subresource.is_some() {
        return Err(ApiError::no_route());
    }
    if *method != Method::POST {
        let verb = match *method {
            Method::GET if ctx.query.flag("watch") => "watch",
            Method::GET => "list",
            Method::DELETE => "deletecollection",
            _ => method.as_str(),
        };
        return Err(ApiError::method_not_supported(ctx.def.gr(), verb));
    }
    let mut review = crate::rest::decode_object(ctx, body)?;
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let status = match ctx.def.plural.as_str() {
        "selfsubjectaccessreviews" => {
            let a = access_attributes(ctx, &spec, (**user).clone(), false)?;
            access_status(&ctx.server.inner.access.decide(ctx.server, &a))
        }
        "subjectaccessreviews" | "localsubjectaccessreviews" => {
            let local = ctx.def.plural == "localsubjectaccessreviews";
            let subject = subject(ctx, &spec)?;
            let mut a = access_attributes(ctx, &spec, subject, local)?;
            a.source = spec
                .pointer(&format!(
                    "/extra/{}",
                    kubeforge_authz::access::SOURCE_ADDRESS_EXTRA.replace('/', "~1")
                ))
                .and_then(|v| v.get(0))
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok());
            access_status(
                &ctx.server
                    .inner
                    .access
                    .decide_explained(ctx.server, &a, true),
            )
        }
        "selfsubjectrulesreviews" => rules_status(ctx, &spec, user)?,
        "tokenreviews" => crate::satokens::review(ctx.server, &spec)?,
        _ => {
            let now = jiff::Timestamp::now().to_string();
            review["metadata"] = json!({"creationTimestamp": now});
            review["status"] = json!({"userInfo": user_info(user)});
            return Ok(codec::respond_value(StatusCode::CREATED, &review));
        }
    };
    if review.get("metadata").is_none_or(Value::is_null) {
        review["metadata"] = json!({});
    }
    review["status"] = status;
    Ok(codec::respond_value(StatusCode::CREATED, &review))
}

fn invalid(ctx: &Ctx<'_>, field: &str, message: String) -> ApiError {
    ApiError::invalid(
        &ctx.def.group,
        &ctx.def.kind,
        "",
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: field.into(),
        }],
    )
}

fn str_at<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The attributes a (self/local) SubjectAccessReview asks about.
fn access_attributes(
    ctx: &Ctx<'_>,
    spec: &Value,
    user: UserInfo,
    local: bool,
) -> ApiResult<Attributes> {
    let res = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    match (res, non) {
        (Some(_), Some(n)) if !local => Err(invalid(
            ctx,
            "spec.nonResourceAttributes",
            format!(
                "Invalid value: {}: cannot be specified in combination with resourceAttributes",
                go_struct(n, &["path", "verb"])
            ),
        )),
        (_, Some(n)) if local => Err(invalid(
            ctx,
            "spec.nonResourceAttributes",
            format!(
                "Invalid value: {}: disallowed on this kind of request",
                go_struct(n, &["path", "verb"])
            ),
        )),
        (None, None) => Err(invalid(
            ctx,
            "spec.resourceAttributes",
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
        )),
        (Some(r), _) => {
            let ns = str_at(r, "namespace");
            if local {
                let url_ns = ctx.ns.clone().unwrap_or_default();
                if url_ns.is_empty() || ns != url_ns {
                    return Err(ApiError::bad_request(format!(
                        "spec.resourceAttributes.namespace must match namespace: {url_ns}"
                    )));
                }
            }
            Ok(Attributes::resource(
                user,
                str_at(r, "verb"),
                ns,
                str_at(r, "group"),
                str_at(r, "version"),
                str_at(r, "resource"),
                str_at(r, "subresource"),
                str_at(r, "name"),
            ))
        }
        (None, Some(n)) => Ok(Attributes::non_resource(
            user,
            str_at(n, "verb"),
            str_at(n, "path"),
        )),
    }
}

/// Go's `%#v`-like rendering kube's validation prints for the attributes
/// (`&authorization.NonResourceAttributes{Path:"/x", Verb:"get"}`).
fn go_struct(v: &Value, fields: &[&str]) -> String {
    let q = kubeforge_apimachinery::gofmt::quote;
    let parts: Vec<String> = fields
        .iter()
        .map(|f| {
            let mut name = f.to_string();
            if let Some(first) = name.get_mut(0..1) {
                first.make_ascii_uppercase();
            }
            format!("{name}:{}", q(str_at(v, f)))
        })
        .collect();
    format!(
        "&authorization.NonResourceAttributes{{{}}}",
        parts.join(", ")
    )
}

/// The subject of a SubjectAccessReview, as given (no groups added).
fn subject(ctx: &Ctx<'_>, spec: &Value) -> ApiResult<UserInfo> {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let user = UserInfo {
        name: str_at(spec, "user").to_string(),
        uid: str_at(spec, "uid").to_string(),
        groups: strings(spec.get("groups")),
        extra: spec
            .get("extra")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), strings(Some(v))))
                    .collect::<BTreeMap<_, _>>()
            })
            .unwrap_or_default(),
    };
    if user.name.is_empty() && user.groups.is_empty() {
        return Err(invalid(
            ctx,
            "spec.user",
            "Invalid value: \"\": at least one of user or group must be specified".into(),
        ));
    }
    Ok(user)
}

fn access_status(d: &Decision) -> Value {
    let mut s = json!({"allowed": d.allowed()});
    if matches!(d, Decision::Deny { .. }) {
        s["denied"] = json!(true);
    }
    if !d.reason().is_empty() {
        s["reason"] = json!(d.reason());
    }
    s
}

fn rules_status(ctx: &Ctx<'_>, spec: &Value, user: &UserInfo) -> ApiResult<Value> {
    let ns = str_at(spec, "namespace");
    if ns.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let access = &ctx.server.inner.access;
    if !access.rbac_enabled() {
        // Every request is allowed: kube's AlwaysAllow rules.
        return Ok(json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }));
    }
    let snap = access.snapshot(ctx.server);
    let (mut rules, errors) = snap.rbac.policy().rules_for(user, ns);
    let (extra, incomplete) = snap.access.policy().unconditional_rules(user, ns);
    rules.extend(extra);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in rules {
        if !r.resources.is_empty() {
            let mut o =
                json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources});
            if !r.resource_names.is_empty() {
                o["resourceNames"] = json!(r.resource_names);
            }
            resource_rules.push(o);
        }
        if !r.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
    }
    let mut s = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": incomplete,
    });
    if !errors.is_empty() {
        s["evaluationError"] = json!(kubeforge_authz::rbac::aggregate(&errors));
    }
    Ok(s)
}

/// `userInfo` as the review objects carry it.
pub(crate) fn user_info(u: &UserInfo) -> Value {
    let mut o = json!({"username": u.name, "groups": u.groups});
    if !u.uid.is_empty() {
        o["uid"] = json!(u.uid);
    }
    if !u.extra.is_empty() {
        o["extra"] = json!(u.extra);
    }
    o
}
