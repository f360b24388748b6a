//! kubeforge's own access policies in the embedded server
//! (`kubeforge_authz::access`): the four CRDs of `authz.kubeforge.dev`
//! installed at start from `config/authz/crds.yaml` (the manifest real
//! clusters apply), the checks a write must pass (every field error, and a
//! role whose parents would form a cycle, is a 422 naming the field), and
//! the policy snapshot loaded from the store beside RBAC's.

use kubeforge_authz::access::{
    AccessPolicy, BindingObject, GROUP, RoleObject, VERSION, spec::causes_text,
};
use kubeforge_authz::rbac::RbacPolicy;
use serde_json::{Value, json};

use crate::context::Ctx;
use crate::error::ApiResult;
use crate::server::ApiServer;

/// The CRDs, as shipped for real clusters.
pub(crate) const CRDS: &str = include_str!("../../../config/authz/crds.yaml");

/// `(plural, kind, namespaced)` of the policy kinds.
const KINDS: [(&str, &str, bool); 4] = [
    ("accessroles", "AccessRole", true),
    ("clusteraccessroles", "ClusterAccessRole", false),
    ("accessbindings", "AccessBinding", true),
    ("clusteraccessbindings", "ClusterAccessBinding", false),
];

/// The CRD objects of [`CRDS`].
pub(crate) fn crds() -> Vec<Value> {
    CRDS.split("\n---\n")
        .skip(1)
        .filter_map(|doc| match serde_saphyr::from_str::<Value>(doc) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(error = %e, "config/authz/crds.yaml does not parse");
                None
            }
        })
        .collect()
}

/// Install the policy CRDs when missing.
pub(crate) async fn ensure_crds(server: &ApiServer) -> ApiResult<()> {
    for crd in crds() {
        crate::rest::ensure_object(
            server,
            ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            crd,
        )
        .await?;
    }
    Ok(())
}

/// Check a policy object about to be written.
pub(crate) fn validate(ctx: &Ctx<'_>, obj: &Value, causes: &mut Vec<crate::error::Cause>) {
    if ctx.def.group != GROUP {
        return;
    }
    // Only a role's parents can form a cycle.
    let roles = if ctx.def.kind.ends_with("Role") {
        load_roles(ctx.server).0
    } else {
        Vec::new()
    };
    causes.extend(
        kubeforge_authz::access::check::check(&ctx.def.kind, obj, &roles)
            .into_iter()
            .map(Into::into),
    );
}

fn stored(server: &ApiServer, plural: &str) -> Vec<Value> {
    let Some(def) = server.registry().get(GROUP, VERSION, plural) else {
        return Vec::new();
    };
    server
        .store()
        .range(&def.key_prefix(), None, 0)
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
        .collect()
}

pub(crate) fn load_roles(server: &ApiServer) -> (Vec<RoleObject>, usize) {
    let mut roles = Vec::new();
    let mut bad = 0;
    for (plural, _, namespaced) in &KINDS[..2] {
        for obj in stored(server, plural) {
            match RoleObject::from_value(&obj, *namespaced) {
                Ok(r) => roles.push(r),
                Err(_) => bad += 1,
            }
        }
    }
    (roles, bad)
}

/// The policy as stored now; RBAC roles named in it come from `rbac`.
pub(crate) fn load(server: &ApiServer, rbac: &RbacPolicy) -> AccessPolicy {
    let objects: Vec<(&str, Value)> = KINDS
        .iter()
        .flat_map(|(plural, kind, _)| stored(server, plural).into_iter().map(move |o| (*kind, o)))
        .collect();
    let (policy, bad) =
        kubeforge_authz::access::policy::from_objects(objects.iter().map(|(k, o)| (*k, o)), rbac);
    for i in bad {
        tracing::warn!(kind = %i.kind, name = %i.name, namespace = %i.namespace, reason = %i.reason,
            "stored access policy no longer passes its checks; it grants nothing");
    }
    policy
}

/// The `Ready` condition `obj` should carry: `True`/`Resolved`, or
/// `False` with why it grants nothing (`Invalid`: it no longer passes its
/// checks; `Unresolved`: a role it names or inherits from is missing,
/// invalid or on a cycle).
fn ready(
    policy: &AccessPolicy,
    plural: &str,
    namespaced: bool,
    obj: &Value,
) -> (bool, &'static str, String) {
    let ns = if namespaced {
        crate::object::meta_str(obj, "namespace").unwrap_or_default()
    } else {
        ""
    };
    let name = crate::object::meta_str(obj, "name").unwrap_or_default();
    if plural.ends_with("roles") {
        match RoleObject::from_value(obj, namespaced) {
            Err(e) => (false, "Invalid", causes_text(&e)),
            Ok(r) => match policy.role_problem(r.kind, ns, name) {
                Some(why) => (false, "Unresolved", format!("grants nothing: {why}")),
                None => (true, "Resolved", "every parent resolved".into()),
            },
        }
    } else {
        match BindingObject::from_value(obj, namespaced) {
            Err(e) => (
                false,
                "Invalid",
                format!(
                    "{} (a Deny binding refuses everything its subjects ask)",
                    causes_text(&e)
                ),
            ),
            Ok(_) => match policy.binding_problem(ns, name) {
                Some(why) => (false, "Unresolved", why.to_string()),
                None => (true, "Resolved", "its role resolved".into()),
            },
        }
    }
}

/// Write each policy object's `Ready` condition when it changed; runs in
/// the server's bootstrap loop, only after RBAC or policy writes.
pub(crate) async fn reconcile_status(server: &ApiServer) -> ApiResult<()> {
    use std::sync::atomic::Ordering;
    let access = &server.inner.access;
    let generation = access.generation();
    if access.status_written.load(Ordering::Acquire) == generation + 1 {
        return Ok(());
    }
    let snap = access.snapshot(server);
    let policy = snap.access.policy();
    for (plural, _, namespaced) in KINDS {
        for obj in stored(server, plural) {
            let (ok, reason, message) = ready(policy, plural, namespaced, &obj);
            let status = if ok { "True" } else { "False" };
            let observed = obj
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let current = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                });
            let same = |k: &str, v: &Value| current.and_then(|c| c.get(k)) == Some(v);
            if same("status", &json!(status))
                && same("reason", &json!(reason))
                && same("message", &json!(message))
                && same("observedGeneration", &json!(observed))
            {
                continue;
            }
            let since = match current {
                Some(c) if c.get("status") == Some(&json!(status)) => {
                    c.get("lastTransitionTime").cloned().unwrap_or(Value::Null)
                }
                _ => json!(
                    jiff::Timestamp::now()
                        .round(jiff::Unit::Second)
                        .unwrap_or_else(|_| jiff::Timestamp::now())
                        .to_string()
                ),
            };
            let mut fixed = obj.clone();
            fixed["status"] = json!({"conditions": [{
                "type": "Ready", "status": status, "reason": reason, "message": message,
                "observedGeneration": observed, "lastTransitionTime": since,
            }]});
            let ns = crate::object::meta_str(&obj, "namespace").map(str::to_string);
            let name = crate::object::meta_str(&obj, "name")
                .unwrap_or_default()
                .to_string();
            let mut ctx = crate::bootstrap::ctx(server, (GROUP, VERSION, plural), ns.as_deref())?;
            let key = ctx.def.key(ns.as_deref(), &name);
            let Some(kv) = server.store().get(&key) else {
                continue;
            };
            match crate::rest::update_object(
                &mut ctx,
                &name,
                fixed,
                kv,
                Some(obj),
                crate::context::Sub::Status,
            )
            .await
            {
                // Changed or gone meanwhile: the next pass looks again.
                Ok(_)
                | Err(crate::error::ApiError {
                    code: 409 | 404, ..
                }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    access
        .status_written
        .store(generation + 1, Ordering::Release);
    Ok(())
}
