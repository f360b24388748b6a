//! Escalation prevention on RBAC writes (kube's policy-based Role,
//! ClusterRole, RoleBinding and ClusterRoleBinding storage): with RBAC on,
//! nobody grants what they do not hold.
//!
//! - A Role or ClusterRole write passes for `system:masters`, for a user
//!   allowed `escalate` on it, when only GC fields change, or when the
//!   writer's own rules (cluster-wide plus the role's namespace) cover every
//!   rule it grants. Writing a ClusterRole that has or had an
//!   `aggregationRule` needs every permission (or `escalate`).
//! - A binding write passes for `system:masters`, for a user allowed `bind`
//!   on the referenced role (in the binding's namespace, "" for a
//!   ClusterRoleBinding), when only GC fields change, or when the writer
//!   covers the referenced role's rules; a missing role is refused.
//!
//! - "Own rules" is the full decision: RBAC's and those of unconditional
//!   Allow access bindings; and a grant overlapping a rule of a Deny access
//!   binding naming the writer is refused whatever RBAC holds (in any
//!   namespace for a ClusterRoleBinding), so nobody hands on what they are
//!   denied — a binding written with `bind` on its role included.
//!
//! Refusals are kube's 403: `roles.rbac.authorization.k8s.io "r" is
//! forbidden: user "x" (groups=[…]) is attempting to grant RBAC
//! permissions not currently held:\n{APIGroups:[""], …}`.

use kubeforge_apimachinery::gofmt::quote;
use kubeforge_authz::rbac::Rule;
use kubeforge_authz::rbac::escalation::{
    breakdown, compact, compact_string, confirm_no_escalation, quote_list,
};
use kubeforge_authz::user::SYSTEM_MASTERS;
use kubeforge_authz::{Attributes, UserInfo};
use serde_json::Value;

use crate::authz::Snapshot;
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult};

const GROUP: &str = "rbac.authorization.k8s.io";

/// The fields of an RBAC object that grant something: everything but the
/// metadata the server or the garbage collector writes.
fn granting(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "finalizers",
            "ownerReferences",
            "resourceVersion",
            "managedFields",
            "generation",
            "creationTimestamp",
            "uid",
            "selfLink",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            m.remove(k);
        }
    }
    v
}

fn rules_of(obj: &Value) -> Vec<Rule> {
    obj.get("rules")
        .cloned()
        .and_then(|r| serde_json::from_value::<Vec<k8s_openapi::api::rbac::v1::PolicyRule>>(r).ok())
        .unwrap_or_default()
        .iter()
        .map(Rule::from)
        .collect()
}

/// Whether a ClusterRole aggregates: an `aggregationRule` with at least
/// one selector (kube's `hasAggregationRule`).
fn has_aggregation_rule(obj: &Value) -> bool {
    obj.pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty())
}

/// Refuse `obj` (replacing `old`, if any) when it would grant its writer
/// more than they hold.
pub(crate) fn check(ctx: &Ctx<'_>, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    let def = &ctx.def;
    if def.group == kubeforge_authz::access::GROUP {
        return check_access_policy(ctx, obj, old);
    }
    if def.group != GROUP {
        return Ok(());
    }
    let access = &ctx.server.inner.access;
    let user = &ctx.user;
    if !access.rbac_enabled() || user.in_group(SYSTEM_MASTERS) {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ns = if def.namespaced {
        ctx.ns.clone().unwrap_or_default()
    } else {
        String::new()
    };
    let forbidden = |why: &str| ApiError::forbidden(def.gr(), name, why);
    let gc_only = old.is_some_and(|o| granting(o) == granting(obj));
    let server = ctx.server;
    match def.plural.as_str() {
        "roles" | "clusterroles" => {
            let escalate = Attributes::resource(
                (**user).clone(),
                "escalate",
                &ns,
                GROUP,
                "*",
                &def.plural,
                "",
                name,
            );
            if gc_only || access.decide(server, &escalate).allowed() {
                return Ok(());
            }
            let snap = access.snapshot(server);
            let (held, errors) = held_rules(&snap, user, &ns);
            let granted = rules_of(obj);
            confirm_no_escalation(user, &held, &errors, &granted).map_err(|m| forbidden(&m))?;
            confirm_not_denied(&snap, user, &ns, false, &granted).map_err(|m| forbidden(&m))?;
            // An aggregationRule can gather anything: writing a role that
            // has one, or had one (removing it empties an aggregated role
            // such as `edit` for everyone bound to it), needs every
            // permission (kube's `fullAuthority`, checked when the old or
            // the new object has a rule).
            if def.plural == "clusterroles"
                && (has_aggregation_rule(obj) || old.is_some_and(has_aggregation_rule))
            {
                let full = [
                    Rule {
                        verbs: vec!["*".into()],
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        ..Rule::default()
                    },
                    Rule {
                        verbs: vec!["*".into()],
                        non_resource_urls: vec!["*".into()],
                        ..Rule::default()
                    },
                ];
                if confirm_no_escalation(user, &held, &errors, &full).is_err() {
                    return Err(forbidden(
                        "must have cluster-admin privileges to use the aggregationRule",
                    ));
                }
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let kind = obj
                .pointer("/roleRef/kind")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let role = obj
                .pointer("/roleRef/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let role_group = obj
                .pointer("/roleRef/apiGroup")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let resource = match kind {
                "ClusterRole" => Some("clusterroles"),
                "Role" => Some("roles"),
                _ => None,
            };
            let may_bind = resource.is_some_and(|resource| {
                let bind = Attributes::resource(
                    (**user).clone(),
                    "bind",
                    &ns,
                    role_group,
                    "",
                    resource,
                    "",
                    role,
                );
                access.decide(server, &bind).allowed()
            });
            if gc_only {
                return Ok(());
            }
            let snap = access.snapshot(server);
            let granted = snap.rbac.policy().role_ref_rules(kind, role, &ns);
            // A ClusterRoleBinding grants in every namespace.
            judge_binding(&snap, user, &ns, ns.is_empty(), granted, may_bind)
                .map_err(|m| forbidden(&m))
        }
        _ => Ok(()),
    }
}

/// The same rule for kubeforge's policy kinds: an AccessRole or
/// ClusterAccessRole write passes with `escalate` on it or when the writer
/// holds every rule it would grant, its parents' included; an Allow
/// binding passes with `bind` on the role it names or when the writer
/// holds every rule of that role. Deny bindings only take away and pass.
fn check_access_policy(ctx: &Ctx<'_>, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    use kubeforge_authz::access::{BindingObject, Effect, RoleObject, policy::effective_rules};
    let def = &ctx.def;
    let access = &ctx.server.inner.access;
    let user = &ctx.user;
    if !access.rbac_enabled() || user.in_group(SYSTEM_MASTERS) {
        return Ok(());
    }
    if old.is_some_and(|o| granting(o).get("spec") == granting(obj).get("spec")) {
        return Ok(());
    }
    let name = crate::object::meta_str(obj, "name").unwrap_or_default();
    let ns = if def.namespaced {
        ctx.ns.clone().unwrap_or_default()
    } else {
        String::new()
    };
    let forbidden = |why: &str| ApiError::forbidden(def.gr(), name, why);
    let server = ctx.server;
    let (stored, _) = crate::access_policy::load_roles(server);
    let snap = access.snapshot(server);
    let rbac = &snap.rbac;
    let may = |verb: &str, group: &str, resource: &str, object: &str| {
        let a = Attributes::resource(
            (**user).clone(),
            verb,
            &ns,
            group,
            "*",
            resource,
            "",
            object,
        );
        access.decide(server, &a).allowed()
    };
    // An Allow binding's writer may hold `bind` on its role.
    let mut may_bind = false;
    let (role_ref, roles) = if def.plural.ends_with("roles") {
        // Validation passed before this runs; an object that does not read
        // is refused there.
        let Ok(role) = RoleObject::from_value(obj, def.namespaced) else {
            return Ok(());
        };
        if may("escalate", &def.group, &def.plural, name) {
            return Ok(());
        }
        let mut roles: Vec<RoleObject> = stored
            .into_iter()
            .filter(|r| {
                !(r.kind == role.kind && r.namespace == role.namespace && r.name == role.name)
            })
            .collect();
        let role_ref = kubeforge_authz::access::RoleRef {
            kind: role.kind,
            name: role.name.clone(),
        };
        roles.push(role);
        (role_ref, roles)
    } else {
        let Ok(b) = BindingObject::from_value(obj, def.namespaced) else {
            return Ok(());
        };
        if b.effect == Effect::Deny {
            return Ok(());
        }
        may_bind = may(
            "bind",
            b.role_ref.kind.group(),
            b.role_ref.kind.resource(),
            &b.role_ref.name,
        );
        (b.role_ref, stored)
    };
    let granted = effective_rules(&roles, rbac.policy(), &role_ref, &ns);
    let binding = !def.plural.ends_with("roles");
    judge_binding(
        &snap,
        user,
        &ns,
        binding && ns.is_empty(),
        granted,
        may_bind,
    )
    .map_err(|m| forbidden(&m))
}

/// Judge a grant of `granted` (the referenced role's rules, or why they
/// cannot be resolved) by `user` in `ns`. With `bind` on the role
/// (`may_bind`) the writer need not hold it and the role need not exist
/// yet, as in kube; without, they must hold every rule. Either way nothing
/// a Deny access binding takes from them passes (a Deny is the last word
/// on what they may reach); `every_namespace` for a cluster-wide grant.
fn judge_binding(
    snap: &Snapshot,
    user: &UserInfo,
    ns: &str,
    every_namespace: bool,
    granted: Result<impl std::ops::Deref<Target = [Rule]>, String>,
    may_bind: bool,
) -> Result<(), String> {
    let granted = match granted {
        Ok(g) => g,
        Err(_) if may_bind => return Ok(()),
        Err(e) => return Err(e),
    };
    if !may_bind {
        let (held, errors) = held_rules(snap, user, ns);
        confirm_no_escalation(user, &held, &errors, &granted)?;
    }
    confirm_not_denied(snap, user, ns, every_namespace, &granted)
}

/// What `user` holds in `ns` for granting: RBAC's rules and those of
/// unconditional Allow access bindings (a conditional one may not hold
/// when the grant is used), with RBAC's resolution errors.
fn held_rules(snap: &Snapshot, user: &UserInfo, ns: &str) -> (Vec<Rule>, Vec<String>) {
    let (mut held, errors) = snap.rbac.policy().rules_for(user, ns);
    held.extend(snap.access.policy().unconditional_rules(user, ns).0);
    (held, errors)
}

/// Refuse a grant of `granted` that gives anything a Deny access binding
/// takes from `user` in `ns` (in any namespace when `every_namespace`):
/// holding a permission through RBAC is not enough to hand it on when the
/// full decision denies it. kube's escalation text, naming what is
/// denied.
fn confirm_not_denied(
    snap: &Snapshot,
    user: &UserInfo,
    ns: &str,
    every_namespace: bool,
    granted: &[Rule],
) -> Result<(), String> {
    let pieces: Vec<Rule> = granted.iter().flat_map(breakdown).collect();
    let denied = snap
        .access
        .policy()
        .denied_pieces(user, ns, every_namespace, &pieces);
    if denied.is_empty() {
        return Ok(());
    }
    let lines: std::collections::BTreeSet<String> =
        compact(denied).iter().map(compact_string).collect();
    Err(format!(
        "user {} (groups={}) is attempting to grant RBAC permissions denied to it by an access binding with effect Deny:\n{}",
        quote(&user.name),
        quote_list(&user.groups),
        lines.into_iter().collect::<Vec<_>>().join("\n")
    ))
}
