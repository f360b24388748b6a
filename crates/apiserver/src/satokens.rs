//! ServiceAccount tokens in the server: the TokenRequest subresource
//! (`POST …/serviceaccounts/{name}/token`, what `kubectl create token`
//! calls), TokenReview's check, and the bearer-token authenticator's
//! lookups — kube's `pkg/registry/core/serviceaccount/storage/token.go` and
//! the validation half of `pkg/serviceaccount/claims.go`.
//!
//! A token names its ServiceAccount (and bound Pod, Secret or Node) by name
//! and UID. It stops authenticating when that ServiceAccount is gone or
//! recreated, or when its bound object is gone or was deleted more than 60
//! s ago: "service account token has been invalidated".
//!
//! Legacy tokens — those the tokens controller writes into
//! `kubernetes.io/service-account-token` Secrets — authenticate while their
//! Secret holds them and their ServiceAccount stands (kube's
//! `legacyValidator`, with the last-used and invalid-since labels).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{Response, StatusCode};
use kubeforge_authz::UserInfo;
use kubeforge_authz::satoken::legacy;
use kubeforge_authz::satoken::{Claims, KubernetesClaims, ObjectRef, TokenError, TokenIssuer};
use serde_json::{Value, json};

use crate::body::ApiBody;
use crate::codec::{self, BodyType};
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult, Cause};
use crate::server::ApiServer;

/// kube's default `--service-account-issuer` for kubeadm clusters.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// kube's default and bounds for `spec.expirationSeconds`.
const DEFAULT_EXPIRATION: i64 = 3600;
const MIN_EXPIRATION: i64 = 600;
const MAX_EXPIRATION: i64 = 1 << 32;

fn stored(server: &ApiServer, plural: &str, ns: Option<&str>, name: &str) -> Option<Value> {
    let def = server.registry().get("", "v1", plural)?;
    let kv = server.store().get(&def.key(ns, name))?;
    serde_json::from_slice(&kv.value).ok()
}

fn uid(v: &Value) -> &str {
    v.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn invalid(ctx: &Ctx<'_>, field: &str, message: String) -> ApiError {
    ApiError::invalid(
        "authentication.k8s.io",
        "TokenRequest",
        ctx.name.as_deref().unwrap_or_default(),
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: field.into(),
        }],
    )
}

/// `POST serviceaccounts/{name}/token`.
pub(crate) async fn create(ctx: &mut Ctx<'_>, body: &[u8]) -> ApiResult<Response<ApiBody>> {
    let ty = match codec::body_type(&ctx.headers)? {
        t @ (BodyType::Yaml | BodyType::Protobuf) => t,
        _ => BodyType::Json,
    };
    let mut req = codec::decode(body, ty)?;
    if !req.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    match req.get("kind").and_then(Value::as_str) {
        None | Some("" | "TokenRequest") => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind (TokenRequest)"
            )));
        }
    }
    let ns = ctx.ns.clone().unwrap_or_default();
    let name = ctx.path_name()?.to_string();
    crate::admission::admit_token_request(ctx, &name, &req)?;
    let server = ctx.server;
    let Some(issuer) = server.inner.access.token_issuer() else {
        return Err(ApiError::internal(
            "no service account token issuer is configured",
        ));
    };
    let sa = stored(server, "serviceaccounts", Some(&ns), &name).ok_or_else(|| {
        ApiError::not_found(
            crate::error::GroupResource {
                group: "",
                resource: "serviceaccounts",
            },
            &name,
        )
    })?;
    // Go clients send `"expirationSeconds":null,"boundObjectRef":null`.
    let spec = req.get("spec").cloned().unwrap_or(Value::Null);
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION,
        Some(v) => v.as_i64().ok_or_else(|| {
            invalid(
                ctx,
                "spec.expirationSeconds",
                format!("Invalid value: {v}: must be an integer"),
            )
        })?,
    };
    if seconds < MIN_EXPIRATION {
        return Err(invalid(
            ctx,
            "spec.expirationSeconds",
            format!("Invalid value: {seconds}: may not specify a duration less than 10 minutes"),
        ));
    }
    if seconds > MAX_EXPIRATION {
        return Err(invalid(
            ctx,
            "spec.expirationSeconds",
            format!(
                "Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds"
            ),
        ));
    }
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| issuer.api_audiences().to_vec());

    let mut private = KubernetesClaims {
        namespace: ns.clone(),
        serviceaccount: ObjectRef {
            name: name.clone(),
            uid: uid(&sa).to_string(),
        },
        ..KubernetesClaims::default()
    };
    if let Some(bound) = spec.get("boundObjectRef").filter(|b| !b.is_null()) {
        let kind = bound
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let bname = bound
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let buid = bound.get("uid").and_then(Value::as_str).unwrap_or_default();
        let (plural, scoped) = match kind {
            "Pod" => ("pods", true),
            "Secret" => ("secrets", true),
            "Node" => ("nodes", false),
            other => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for object of type {other:?}"
                )));
            }
        };
        let obj =
            stored(server, plural, scoped.then_some(ns.as_str()), bname).ok_or_else(|| {
                ApiError::not_found(
                    crate::error::GroupResource {
                        group: "",
                        resource: plural,
                    },
                    bname,
                )
            })?;
        if !buid.is_empty() && buid != uid(&obj) {
            return Err(ApiError::conflict(
                crate::error::GroupResource {
                    group: "",
                    resource: plural,
                },
                bname,
                &format!(
                    "the UID in the bound object reference ({buid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        let r = ObjectRef {
            name: bname.to_string(),
            uid: uid(&obj).to_string(),
        };
        match kind {
            "Pod" => {
                let sa_of_pod = obj
                    .pointer("/spec/serviceAccountName")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                if sa_of_pod != name {
                    return Err(ApiError::bad_request(format!(
                        "cannot issue token for service account {name:?}: pod {bname:?} runs as {sa_of_pod:?}"
                    )));
                }
                if let Some(node) = obj.pointer("/spec/nodeName").and_then(Value::as_str)
                    && let Some(n) = stored(server, "nodes", None, node)
                {
                    private.node = Some(ObjectRef {
                        name: node.to_string(),
                        uid: uid(&n).to_string(),
                    });
                }
                private.pod = Some(r);
            }
            "Secret" => private.secret = Some(r),
            _ => private.node = Some(r),
        }
    }
    let now = jiff::Timestamp::now();
    let iat = now.as_second();
    let claims = Claims {
        iss: issuer.issuer().to_string(),
        sub: kubeforge_authz::user::service_account_username(&ns, &name),
        aud: audiences.clone(),
        exp: iat.saturating_add(seconds),
        iat,
        nbf: iat,
        jti: uuid::Uuid::new_v4().to_string(),
        kubernetes: private,
    };
    let token = issuer
        .sign(&claims)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let expires = jiff::Timestamp::from_second(claims.exp)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let mut spec = if spec.is_object() { spec } else { json!({}) };
    spec["expirationSeconds"] = json!(seconds);
    spec["audiences"] = json!(audiences);
    if spec.get("boundObjectRef").is_some_and(Value::is_null) {
        spec.as_object_mut().map(|m| m.remove("boundObjectRef"));
    }
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["kind"] = json!("TokenRequest");
    req["metadata"] = json!({"name": name, "namespace": ns, "creationTimestamp": now.to_string()});
    req["spec"] = spec;
    req["status"] = json!({"token": token, "expirationTimestamp": expires});
    Ok(codec::respond_value(StatusCode::CREATED, &req))
}

/// Why a ServiceAccount token does not (or no longer does) authenticate.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Rejected {
    /// Signature, time, audience.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The ServiceAccount or its bound object is gone or recreated.
    #[error("service account token has been invalidated")]
    Invalidated,
    /// A legacy token's check failed (kube's text).
    #[error("{0}")]
    Legacy(String),
    /// The ServiceAccount was recreated.
    #[error("service account UID ({stored}) does not match claim ({claimed})")]
    Uid {
        /// The stored ServiceAccount's.
        stored: String,
        /// The token's.
        claimed: String,
    },
}

/// Whether the bound object `r` of kind `plural` still stands (or was
/// deleted less than 60 s ago).
fn still_bound(server: &ApiServer, plural: &str, ns: Option<&str>, r: &ObjectRef) -> bool {
    let Some(obj) = stored(server, plural, ns, &r.name) else {
        return false;
    };
    if uid(&obj) != r.uid {
        return false;
    }
    match obj
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    {
        Some(at) => jiff::Timestamp::now().as_second() - at.as_second() <= 60,
        None => true,
    }
}

/// The user a ServiceAccount token (a TokenRequest token, or a legacy
/// token Secret's) authenticates for `audiences` (the API's when empty),
/// and the audiences it matched.
pub(crate) fn authenticate(
    server: &ApiServer,
    token: &str,
    audiences: &[String],
) -> Result<(UserInfo, Vec<String>), Rejected> {
    let issuer = server
        .inner
        .access
        .token_issuer()
        .ok_or(Rejected::Token(TokenError::OtherIssuer))?;
    let claims = match issuer.verify(token, audiences) {
        Err(TokenError::OtherIssuer) => {
            return authenticate_legacy(server, &issuer, token, audiences);
        }
        other => other?,
    };
    let k = &claims.kubernetes;
    let sa = stored(
        server,
        "serviceaccounts",
        Some(&k.namespace),
        &k.serviceaccount.name,
    )
    .ok_or(Rejected::Invalidated)?;
    if uid(&sa) != k.serviceaccount.uid {
        return Err(Rejected::Uid {
            stored: uid(&sa).to_string(),
            claimed: k.serviceaccount.uid.clone(),
        });
    }
    let ns = Some(k.namespace.as_str());
    if let Some(p) = &k.pod
        && !still_bound(server, "pods", ns, p)
    {
        return Err(Rejected::Invalidated);
    }
    if let Some(s) = &k.secret
        && !still_bound(server, "secrets", ns, s)
    {
        return Err(Rejected::Invalidated);
    }
    if k.pod.is_none()
        && let Some(n) = &k.node
        && !still_bound(server, "nodes", None, n)
    {
        return Err(Rejected::Invalidated);
    }
    let target = if audiences.is_empty() {
        issuer.api_audiences().to_vec()
    } else {
        audiences.to_vec()
    };
    let matched: Vec<String> = claims
        .aud
        .iter()
        .filter(|a| target.contains(a))
        .cloned()
        .collect();
    Ok((claims.user(), matched))
}

fn deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// A legacy token (kube's `legacyValidator`): for the API's audiences
/// only; its Secret must stand, not be deleting, hold exactly this token
/// and not carry the invalid-since label; its ServiceAccount must stand
/// with the claimed UID. A use stamps the Secret's last-used label.
fn authenticate_legacy(
    server: &ApiServer,
    issuer: &TokenIssuer,
    token: &str,
    audiences: &[String],
) -> Result<(UserInfo, Vec<String>), Rejected> {
    let claims = issuer.verify_legacy(token)?;
    let api = issuer.api_audiences();
    let matched: Vec<String> = if audiences.is_empty() {
        api.to_vec()
    } else {
        audiences
            .iter()
            .filter(|a| api.contains(a))
            .cloned()
            .collect()
    };
    if matched.is_empty() {
        return Err(TokenError::Audience {
            token: api.to_vec(),
            target: audiences.to_vec(),
        }
        .into());
    }
    let (ns, sa_name, secret_name) = (
        claims.namespace.as_str(),
        claims.service_account_name.as_str(),
        claims.secret_name.as_str(),
    );
    let invalidated = || Rejected::Legacy("Token has been invalidated".into());
    let secret = stored(server, "secrets", Some(ns), secret_name).ok_or_else(invalidated)?;
    if deleting(&secret) {
        return Err(invalidated());
    }
    let held = secret
        .pointer(&format!("/data/{}", legacy::TOKEN_KEY))
        .and_then(Value::as_str)
        .and_then(|s| STANDARD.decode(s).ok())
        .unwrap_or_default();
    if !legacy::token_matches(&held, token) {
        return Err(Rejected::Legacy(
            "Token does not match server's copy".into(),
        ));
    }
    let sa = stored(server, "serviceaccounts", Some(ns), sa_name)
        .ok_or_else(|| Rejected::Legacy(format!("serviceaccounts \"{sa_name}\" not found")))?;
    if deleting(&sa) {
        return Err(Rejected::Legacy(format!(
            "ServiceAccount {ns}/{sa_name} has been deleted"
        )));
    }
    if uid(&sa) != claims.service_account_uid {
        return Err(Rejected::Legacy(format!(
            "ServiceAccount UID ({}) does not match claim ({})",
            uid(&sa),
            claims.service_account_uid
        )));
    }
    let label = |key: &str| {
        secret
            .pointer("/metadata/labels")
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    mark_used(server, ns, secret_name, &label(legacy::LAST_USED_LABEL));
    if !label(legacy::INVALID_SINCE_LABEL).is_empty() {
        return Err(Rejected::Legacy(format!(
            "the token in secret {ns}/{secret_name} for service account {ns}/{sa_name} has been \
             marked invalid. Use tokens from the TokenRequest API or manually created \
             secret-based tokens, or remove the '{}' label from the secret to temporarily allow \
             use of this token",
            legacy::INVALID_SINCE_LABEL
        )));
    }
    Ok((claims.user(), matched))
}

/// Stamp Secret `ns/name` with today's date (UTC) as its token's last use,
/// unless `last` already says today or tomorrow (kube's tolerance for
/// clock skew between servers). The write runs beside the request, as
/// the server's loopback user; a failure only delays the stamp.
fn mark_used(server: &ApiServer, ns: &str, name: &str, last: &str) {
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    let tomorrow = today.tomorrow().map(|d| d.to_string()).unwrap_or_default();
    let today = today.to_string();
    if last == today || last == tomorrow {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(server.client(), ns);
    let name = name.to_string();
    rt.spawn(async move {
        let patch = json!({"metadata": {"labels": {legacy::LAST_USED_LABEL: today}}});
        if let Err(e) = api
            .patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
            .await
        {
            tracing::warn!(secret = %name, error = %e, "could not record a legacy token's last use");
        }
    });
}

/// TokenReview's status for `spec`.
pub(crate) fn review(server: &ApiServer, spec: &Value) -> ApiResult<Value> {
    let token = spec
        .get("token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    // The token file is audience-agnostic: its tokens are for the API's
    // audiences only (kube's `WrapAudienceAgnosticToken`). The review's
    // audiences (the API's when it names none) are intersected with them,
    // in the review's order; nothing in common is not this
    // authenticator's token.
    if let Some(auth) = server.inner.access.authentication()
        && let Some(user) = auth.static_token(token)
    {
        let api = server
            .inner
            .access
            .token_issuer()
            .map(|i| i.api_audiences().to_vec())
            .unwrap_or_default();
        if audiences.is_empty() && api.is_empty() {
            return Ok(json!({"authenticated": true, "user": crate::reviews::user_info(user)}));
        }
        let target = if audiences.is_empty() {
            &api
        } else {
            &audiences
        };
        let common: Vec<&String> = target.iter().filter(|a| api.contains(a)).collect();
        if common.is_empty() {
            return Ok(json!({"user": {}, "error": "invalid bearer token"}));
        }
        return Ok(
            json!({"authenticated": true, "user": crate::reviews::user_info(user),
            "audiences": common}),
        );
    }
    Ok(match authenticate(server, token, &audiences) {
        Ok((user, matched)) => {
            json!({"authenticated": true, "user": crate::reviews::user_info(&user), "audiences": matched})
        }
        Err(e) => json!({"user": {}, "error": format!("[invalid bearer token, {e}]")}),
    })
}

/// `/.well-known/openid-configuration` and `/openid/v1/jwks` (kube's
/// ServiceAccountIssuerDiscovery), so systems outside the cluster (Vault,
/// cloud identity federation) can verify ServiceAccount tokens. Served
/// only for an `https://` issuer, as kube does; readable by
/// `system:serviceaccounts` (`system:service-account-issuer-discovery`).
pub(crate) fn discovery(
    server: &ApiServer,
    route: &crate::request::Route,
) -> ApiResult<Response<ApiBody>> {
    let issuer = server
        .inner
        .access
        .token_issuer()
        .filter(|i| i.issuer().starts_with("https://"))
        .ok_or_else(ApiError::no_route)?;
    let (body, content_type) = match route {
        crate::request::Route::Jwks => {
            (json!({"keys": [issuer.jwk()]}), "application/jwk-set+json")
        }
        _ => (
            json!({
                "issuer": issuer.issuer(),
                "jwks_uri": format!("{}/openid/v1/jwks", issuer.issuer()),
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["ES256"],
            }),
            "application/json",
        ),
    };
    let mut resp = codec::respond_value(StatusCode::OK, &body);
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("public, max-age=3600"),
    );
    Ok(resp)
}
