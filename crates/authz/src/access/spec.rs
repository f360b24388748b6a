//! The kubeforge policy objects as written (`authz.kubeforge.dev/v1alpha1`
//! AccessRole, ClusterAccessRole, AccessBinding, ClusterAccessBinding),
//! read from their JSON and checked field by field. Every refusal is a
//! kube field error naming the field (`spec.conditions.sourceCIDRs[0]:
//! Invalid value: "10.0.0.0/33": must be a valid CIDR value, …`), which
//! the API server answers as 422 and the policy loader keeps as the reason
//! an object grants nothing.

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};
use kubeforge_apimachinery::gofmt::quote;
use kubeforge_apimachinery::names::{self, Cause};
use serde::Deserialize;
use serde_json::Value;

use super::conditions::Conditions;
use crate::rbac::Rule;

/// The API group of the policy kinds.
pub const GROUP: &str = "authz.kubeforge.dev";
/// Their version.
pub const VERSION: &str = "v1alpha1";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// A kind a role reference may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RoleKind {
    /// `authz.kubeforge.dev` AccessRole (namespaced).
    AccessRole,
    /// `authz.kubeforge.dev` ClusterAccessRole.
    ClusterAccessRole,
    /// `rbac.authorization.k8s.io` Role (namespaced).
    Role,
    /// `rbac.authorization.k8s.io` ClusterRole.
    ClusterRole,
}

impl RoleKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            RoleKind::AccessRole => "AccessRole",
            RoleKind::ClusterAccessRole => "ClusterAccessRole",
            RoleKind::Role => "Role",
            RoleKind::ClusterRole => "ClusterRole",
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        matches!(self, RoleKind::AccessRole | RoleKind::Role)
    }

    /// The API group of the kind.
    pub fn group(self) -> &'static str {
        match self {
            RoleKind::AccessRole | RoleKind::ClusterAccessRole => GROUP,
            RoleKind::Role | RoleKind::ClusterRole => RBAC_GROUP,
        }
    }

    /// The kind's resource (plural), for `bind` checks.
    pub fn resource(self) -> &'static str {
        match self {
            RoleKind::AccessRole => "accessroles",
            RoleKind::ClusterAccessRole => "clusteraccessroles",
            RoleKind::Role => "roles",
            RoleKind::ClusterRole => "clusterroles",
        }
    }

    fn parse(s: &str) -> Option<RoleKind> {
        Some(match s {
            "AccessRole" => RoleKind::AccessRole,
            "ClusterAccessRole" => RoleKind::ClusterAccessRole,
            "Role" => RoleKind::Role,
            "ClusterRole" => RoleKind::ClusterRole,
            _ => return None,
        })
    }

    /// The kinds a reference from a namespaced (or cluster) object may name.
    fn allowed(namespaced: bool) -> &'static [&'static str] {
        if namespaced {
            &["AccessRole", "ClusterAccessRole", "Role", "ClusterRole"]
        } else {
            &["ClusterAccessRole", "ClusterRole"]
        }
    }
}

/// A reference to a role: its kind and name; a namespaced kind is in the
/// referring object's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoleRef {
    /// The kind.
    pub kind: RoleKind,
    /// The name.
    pub name: String,
}

/// Whether a binding grants or takes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Grants the role's rules.
    Allow,
    /// Refuses what the role's rules match, whatever else allows it.
    Deny,
}

/// An AccessRole or ClusterAccessRole, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleObject {
    /// `AccessRole` or `ClusterAccessRole`.
    pub kind: RoleKind,
    /// Namespace ("" for a ClusterAccessRole).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its own rules.
    pub rules: Vec<Rule>,
    /// The roles whose rules it inherits.
    pub parents: Vec<RoleRef>,
}

/// An AccessBinding or ClusterAccessBinding, checked.
#[derive(Clone, Debug)]
pub struct BindingObject {
    /// Namespace ("" for a ClusterAccessBinding).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The role bound.
    pub role_ref: RoleRef,
    /// Who it applies to.
    pub subjects: Vec<Subject>,
    /// Allow or Deny.
    pub effect: Effect,
    /// When it applies.
    pub conditions: Conditions,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawRef {
    api_group: String,
    kind: String,
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawRoleSpec {
    rules: Vec<PolicyRule>,
    parents: Vec<RawRef>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawBindingSpec {
    role_ref: RawRef,
    subjects: Vec<Subject>,
    effect: String,
    conditions: super::conditions::RawConditions,
}

fn meta(obj: &Value, key: &str) -> String {
    obj.pointer(&format!("/metadata/{key}"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn spec<T: for<'de> Deserialize<'de> + Default>(obj: &Value) -> Result<T, Vec<Cause>> {
    match obj.get("spec") {
        None | Some(Value::Null) => Ok(T::default()),
        Some(s) => T::deserialize(s).map_err(|e| vec![Cause::invalid("spec", "", &e.to_string())]),
    }
}

/// Go's `%#v` of a string list: `[]string{"a", "b"}`.
fn go_strings(items: &[String]) -> String {
    let q: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[]string{{{}}}", q.join(", "))
}

/// kube's `ValidatePolicyRule`.
pub fn validate_policy_rule(
    rule: &PolicyRule,
    namespaced: bool,
    field: &str,
    out: &mut Vec<Cause>,
) {
    if rule.verbs.is_empty() {
        out.push(Cause::required(
            &format!("{field}.verbs"),
            "verbs must contain at least one value",
        ));
    }
    let urls = rule.non_resource_urls.as_deref().unwrap_or_default();
    if !urls.is_empty() {
        let rendered = go_strings(urls);
        if namespaced {
            out.push(Cause::invalid_rendered(
                &format!("{field}.nonResourceURLs"),
                &rendered,
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        let has = |v: &Option<Vec<String>>| v.as_ref().is_some_and(|v| !v.is_empty());
        if has(&rule.api_groups) || has(&rule.resources) || has(&rule.resource_names) {
            out.push(Cause::invalid_rendered(
                &format!("{field}.nonResourceURLs"),
                &rendered,
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if rule.api_groups.as_ref().is_none_or(Vec::is_empty) {
        out.push(Cause::required(
            &format!("{field}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if rule.resources.as_ref().is_none_or(Vec::is_empty) {
        out.push(Cause::required(
            &format!("{field}.resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

/// kube's `ValidateRoleBindingSubject`, taking an empty `apiGroup` on User
/// and Group subjects as kube's defaulting fills it.
pub fn validate_subject(s: &Subject, namespaced: bool, field: &str, out: &mut Vec<Cause>) {
    if s.name.is_empty() {
        out.push(Cause::required(&format!("{field}.name"), ""));
    }
    let group = s.api_group.as_deref().unwrap_or_default();
    match s.kind.as_str() {
        "ServiceAccount" => {
            if !s.name.is_empty() {
                for m in names::is_dns1123_subdomain(&s.name) {
                    out.push(Cause::invalid(&format!("{field}.name"), &s.name, &m));
                }
            }
            if !group.is_empty() {
                out.push(Cause::not_supported(
                    &format!("{field}.apiGroup"),
                    group,
                    &[""],
                ));
            }
            if !namespaced && s.namespace.as_deref().is_none_or(str::is_empty) {
                out.push(Cause::required(&format!("{field}.namespace"), ""));
            }
        }
        "User" | "Group" => {
            if !group.is_empty() && group != RBAC_GROUP {
                out.push(Cause::not_supported(
                    &format!("{field}.apiGroup"),
                    group,
                    &[RBAC_GROUP],
                ));
            }
        }
        other => out.push(Cause::not_supported(
            &format!("{field}.kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
}

fn role_ref(
    raw: &RawRef,
    namespaced: bool,
    default: RoleKind,
    field: &str,
    out: &mut Vec<Cause>,
) -> Option<RoleRef> {
    let allowed = RoleKind::allowed(namespaced);
    let kind = if raw.kind.is_empty() {
        Some(default)
    } else if allowed.contains(&raw.kind.as_str()) {
        RoleKind::parse(&raw.kind)
    } else {
        out.push(Cause::not_supported(
            &format!("{field}.kind"),
            &raw.kind,
            allowed,
        ));
        None
    };
    if let Some(k) = kind
        && !raw.api_group.is_empty()
        && raw.api_group != k.group()
    {
        out.push(Cause::not_supported(
            &format!("{field}.apiGroup"),
            &raw.api_group,
            &[k.group()],
        ));
    }
    if raw.name.is_empty() {
        out.push(Cause::required(&format!("{field}.name"), ""));
    } else {
        for m in names::is_path_segment_name(&raw.name, false) {
            out.push(Cause::invalid(&format!("{field}.name"), &raw.name, &m));
        }
    }
    kind.map(|kind| RoleRef {
        kind,
        name: raw.name.clone(),
    })
}

impl RoleObject {
    /// Read and check an AccessRole (`namespaced`) or ClusterAccessRole.
    pub fn from_value(obj: &Value, namespaced: bool) -> Result<RoleObject, Vec<Cause>> {
        let raw: RawRoleSpec = spec(obj)?;
        let mut causes = Vec::new();
        for (i, r) in raw.rules.iter().enumerate() {
            validate_policy_rule(r, namespaced, &format!("spec.rules[{i}]"), &mut causes);
        }
        let kind = if namespaced {
            RoleKind::AccessRole
        } else {
            RoleKind::ClusterAccessRole
        };
        let parents: Vec<(usize, RoleRef)> = raw
            .parents
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                role_ref(
                    p,
                    namespaced,
                    kind,
                    &format!("spec.parents[{i}]"),
                    &mut causes,
                )
                .map(|r| (i, r))
            })
            .collect();
        let name = meta(obj, "name");
        for (i, p) in &parents {
            if p.kind == kind && p.name == name {
                causes.push(Cause::invalid(
                    &format!("spec.parents[{i}].name"),
                    &p.name,
                    "a role cannot be its own parent",
                ));
            }
        }
        if !causes.is_empty() {
            return Err(causes);
        }
        Ok(RoleObject {
            kind,
            namespace: if namespaced {
                meta(obj, "namespace")
            } else {
                String::new()
            },
            name,
            rules: raw.rules.iter().map(Rule::from).collect(),
            parents: parents.into_iter().map(|(_, r)| r).collect(),
        })
    }
}

impl BindingObject {
    /// Read and check an AccessBinding (`namespaced`) or
    /// ClusterAccessBinding.
    pub fn from_value(obj: &Value, namespaced: bool) -> Result<BindingObject, Vec<Cause>> {
        let raw: RawBindingSpec = spec(obj)?;
        let mut causes = Vec::new();
        let default = if namespaced {
            RoleKind::AccessRole
        } else {
            RoleKind::ClusterAccessRole
        };
        let role_ref = role_ref(
            &raw.role_ref,
            namespaced,
            default,
            "spec.roleRef",
            &mut causes,
        );
        for (i, s) in raw.subjects.iter().enumerate() {
            validate_subject(s, namespaced, &format!("spec.subjects[{i}]"), &mut causes);
        }
        let effect = match raw.effect.as_str() {
            "" | "Allow" => Some(Effect::Allow),
            "Deny" => Some(Effect::Deny),
            other => {
                causes.push(Cause::not_supported(
                    "spec.effect",
                    other,
                    &["Allow", "Deny"],
                ));
                None
            }
        };
        let conditions = Conditions::compile(&raw.conditions, "spec.conditions", &mut causes);
        match (role_ref, effect) {
            (Some(role_ref), Some(effect)) if causes.is_empty() => Ok(BindingObject {
                namespace: if namespaced {
                    meta(obj, "namespace")
                } else {
                    String::new()
                },
                name: meta(obj, "name"),
                role_ref,
                subjects: raw.subjects,
                effect,
                conditions,
            }),
            _ => Err(causes),
        }
    }

    /// What a binding that no longer passes its checks still says: its
    /// subjects and whether it denies (unreadable effects count as Deny),
    /// so the loader can fail closed for them.
    pub fn salvage(obj: &Value) -> (Vec<Subject>, Effect) {
        let subjects = obj
            .pointer("/spec/subjects")
            .cloned()
            .and_then(|s| serde_json::from_value(s).ok())
            .unwrap_or_default();
        let effect = match obj.pointer("/spec/effect").and_then(Value::as_str) {
            None | Some("" | "Allow") => Effect::Allow,
            Some(_) => Effect::Deny,
        };
        (subjects, effect)
    }
}

/// Render causes as kube's aggregate text (`a: x, b: y` inside `[…]` when
/// several).
pub fn causes_text(causes: &[Cause]) -> String {
    let parts: Vec<String> = causes.iter().map(Cause::to_error_string).collect();
    crate::rbac::aggregate(&parts)
}
