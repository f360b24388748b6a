//! kube's validation and defaulting of the RBAC kinds
//! (`pkg/apis/rbac/validation`, `pkg/apis/rbac/v1/defaults.go`): what
//! must hold before a Role, ClusterRole, RoleBinding or ClusterRoleBinding
//! is stored, so the escalation checks ([`crate::rbac_escalation`]) and the
//! authorizer only ever see references they understand.
//!
//! - Defaults: a binding's empty `roleRef.apiGroup`, and a User or Group
//!   subject's empty `apiGroup`, become `rbac.authorization.k8s.io`.
//! - Rules: verbs required; a non-resource rule neither namespaced nor
//!   mixed with resources; a resource rule names groups and resources.
//!   A ClusterRole's `aggregationRule` has at least one selector.
//! - Bindings: `roleRef.apiGroup` is `rbac.authorization.k8s.io` (checked
//!   in the group the client named, the bind check would otherwise judge a
//!   `cluster-admin` reference in a group the writer controls), `kind` is
//!   `Role` or `ClusterRole` (only `ClusterRole` for a ClusterRoleBinding),
//!   `name` a path segment; subjects as kube checks them; and `roleRef`
//!   cannot change after creation (a binding's grant is fixed: kube
//!   answers `cannot change roleRef`).
//!
//! The access-policy kinds reuse the subject and rule checks
//! (`kubeforge_authz::access::spec`); their `roleRef` is immutable here too.

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};
use kubeforge_apimachinery::gofmt::quote;
use kubeforge_apimachinery::names::{self, Cause};
use kubeforge_authz::access::spec::{validate_policy_rule, validate_subject};
use serde_json::Value;

use crate::registry::ResourceDef;

/// The RBAC API group.
pub(crate) const GROUP: &str = "rbac.authorization.k8s.io";

fn is_binding(def: &ResourceDef) -> bool {
    matches!(def.plural.as_str(), "rolebindings" | "clusterrolebindings")
}

/// kube's v1 defaults for `obj`, an object of `def`'s kind.
pub(crate) fn default(def: &ResourceDef, obj: &mut Value) {
    if def.group != GROUP || !is_binding(def) {
        return;
    }
    if let Some(r) = obj.get_mut("roleRef").and_then(Value::as_object_mut)
        && r.get("apiGroup")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        r.insert("apiGroup".into(), Value::from(GROUP));
    }
    for s in obj
        .get_mut("subjects")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(m) = s.as_object_mut() else {
            continue;
        };
        let kind = m.get("kind").and_then(Value::as_str).unwrap_or_default();
        let empty = m
            .get("apiGroup")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if empty && matches!(kind, "User" | "Group") {
            m.insert("apiGroup".into(), Value::from(GROUP));
        }
    }
}

/// The field errors refusing `obj` (replacing `old`, when set), an object
/// of `def`'s kind; empty for other kinds.
pub(crate) fn validate(def: &ResourceDef, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut out = Vec::new();
    if def.group == kubeforge_authz::access::GROUP {
        if def.kind.ends_with("Binding") {
            access_role_ref_unchanged(obj, old, def.namespaced, &mut out);
        }
        return out;
    }
    if def.group != GROUP {
        return out;
    }
    match def.plural.as_str() {
        "roles" | "clusterroles" => {
            let namespaced = def.plural == "roles";
            for (i, r) in obj
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                // The schema has refused a rule that does not read.
                if let Ok(rule) = serde_json::from_value::<PolicyRule>(r.clone()) {
                    validate_policy_rule(&rule, namespaced, &format!("rules[{i}]"), &mut out);
                }
            }
            if !namespaced
                && let Some(agg) = obj.get("aggregationRule").filter(|a| !a.is_null())
                && agg
                    .get("clusterRoleSelectors")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
            {
                out.push(Cause::required(
                    "aggregationRule.clusterRoleSelectors",
                    "at least one clusterRoleSelector required if aggregationRule is non-nil",
                ));
            }
        }
        "rolebindings" | "clusterrolebindings" => {
            let namespaced = def.plural == "rolebindings";
            let field = |k: &str| {
                obj.pointer(&format!("/roleRef/{k}"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            let group = field("apiGroup");
            if group != GROUP {
                out.push(Cause::not_supported("roleRef.apiGroup", group, &[GROUP]));
            }
            let kinds: &[&str] = if namespaced {
                &["Role", "ClusterRole"]
            } else {
                &["ClusterRole"]
            };
            let kind = field("kind");
            if !kinds.contains(&kind) {
                out.push(Cause::not_supported("roleRef.kind", kind, kinds));
            }
            let name = field("name");
            if name.is_empty() {
                out.push(Cause::required("roleRef.name", ""));
            } else {
                for m in names::is_path_segment_name(name, false) {
                    out.push(Cause::invalid("roleRef.name", name, &m));
                }
            }
            for (i, s) in obj
                .get("subjects")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if let Ok(subject) = serde_json::from_value::<Subject>(s.clone()) {
                    validate_subject(&subject, namespaced, &format!("subjects[{i}]"), &mut out);
                }
            }
            role_ref_unchanged(obj, old, &mut out);
        }
        _ => {}
    }
    out
}

/// kube's `cannot change roleRef` for an RBAC binding, the value as Go
/// prints the internal `rbac.RoleRef`
/// (`rbac.RoleRef{APIGroup:"…", Kind:"…", Name:"…"}`).
fn role_ref_unchanged(obj: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
    let Some(old) = old else {
        return;
    };
    if obj.get("roleRef") == old.get("roleRef") {
        return;
    }
    let part = |k: &str| {
        quote(
            obj.pointer(&format!("/roleRef/{k}"))
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )
    };
    out.push(Cause::invalid_rendered(
        "roleRef",
        &format!(
            "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
            part("apiGroup"),
            part("kind"),
            part("name")
        ),
        "cannot change roleRef",
    ));
}

/// The same rule for an access binding's `spec.roleRef`, compared as read
/// (an omitted kind is the default one); a binding that does not read is
/// refused by its own checks.
fn access_role_ref_unchanged(
    obj: &Value,
    old: Option<&Value>,
    namespaced: bool,
    out: &mut Vec<Cause>,
) {
    use kubeforge_authz::access::BindingObject;
    let Some(old) = old else {
        return;
    };
    if let (Ok(new), Ok(was)) = (
        BindingObject::from_value(obj, namespaced),
        BindingObject::from_value(old, namespaced),
    ) && new.role_ref != was.role_ref
    {
        out.push(Cause::invalid_rendered(
            "spec.roleRef",
            &format!(
                "RoleRef{{Kind:{}, Name:{}}}",
                quote(new.role_ref.kind.as_str()),
                quote(&new.role_ref.name)
            ),
            "cannot change roleRef",
        ));
    }
}
