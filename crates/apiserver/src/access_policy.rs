//! kubeforge's own access policies in the embedded server
//! (`kubeforge_authz::access`): the four CRDs of `authz.kubeforge.dev`
//! installed at start from `config/authz/crds.yaml` (the manifest real
//! clusters apply), the checks a write must pass (every field error, and a
//! role whose parents would form a cycle, is a 422 naming the field), and
//! the policy snapshot loaded from the store beside RBAC's.

use kubeforge_apimachinery::names::Cause;
use kubeforge_authz::access::{
    AccessPolicy, BindingObject, GROUP, RoleKind, RoleObject, VERSION, spec::causes_text,
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
    let namespaced = ctx.def.namespaced;
    let result = match ctx.def.plural.as_str() {
        "accessroles" | "clusteraccessroles" => {
            RoleObject::from_value(obj, namespaced).map(|role| cycle(ctx.server, &role, causes))
        }
        "accessbindings" | "clusteraccessbindings" => {
            BindingObject::from_value(obj, namespaced).map(|_| ())
        }
        _ => Ok(()),
    };
    if let Err(errs) = result {
        causes.extend(errs.into_iter().map(Into::into));
    }
}

/// Refuse `role` when its parents, with the roles now stored, lead back to
/// it: `spec.parents[i]: Invalid value: "p": would form a cycle: …`.
fn cycle(server: &ApiServer, role: &RoleObject, causes: &mut Vec<crate::error::Cause>) {
    let (roles, _) = load_roles(server);
    let key = |kind: RoleKind, ns: &str, name: &str| (kind, ns.to_string(), name.to_string());
    let me = key(role.kind, &role.namespace, &role.name);
    let parents_of = |k: &(RoleKind, String, String)| -> Vec<(RoleKind, String, String)> {
        let parents = if *k == me {
            &role.parents
        } else {
            match roles
                .iter()
                .find(|r| key(r.kind, &r.namespace, &r.name) == *k)
            {
                Some(r) => &r.parents,
                None => return Vec::new(),
            }
        };
        parents
            .iter()
            .filter(|p| matches!(p.kind, RoleKind::AccessRole | RoleKind::ClusterAccessRole))
            .map(|p| {
                let ns = if p.kind.namespaced() {
                    k.1.as_str()
                } else {
                    ""
                };
                key(p.kind, ns, &p.name)
            })
            .collect()
    };
    for (i, p) in role.parents.iter().enumerate() {
        let ns = if p.kind.namespaced() {
            role.namespace.as_str()
        } else {
            ""
        };
        let start = key(p.kind, ns, &p.name);
        // Depth first from the parent, remembering the path; reaching the
        // role itself is the cycle.
        let mut stack = vec![(start.clone(), vec![start])];
        let mut seen = std::collections::HashSet::new();
        while let Some((k, path)) = stack.pop() {
            if k == me {
                let mut names = vec![label(&me)];
                names.extend(path.iter().map(label));
                causes.push(
                    Cause::invalid(
                        &format!("spec.parents[{i}]"),
                        &p.name,
                        &format!("would form a cycle: {}", names.join(" → ")),
                    )
                    .into(),
                );
                return;
            }
            if !seen.insert(k.clone()) {
                continue;
            }
            for next in parents_of(&k) {
                let mut path = path.clone();
                path.push(next.clone());
                stack.push((next, path));
            }
        }
    }
}

fn label((kind, ns, name): &(RoleKind, String, String)) -> String {
    let q = kubeforge_apimachinery::gofmt::quote;
    if ns.is_empty() {
        format!("{} {}", kind.as_str(), q(name))
    } else {
        format!("{} {}", kind.as_str(), q(&format!("{ns}/{name}")))
    }
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
