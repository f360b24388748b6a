//! The kubeforge policies compiled for decisions, and the authorizer.
//!
//! [`AccessPolicy::build`] resolves every role once: its own rules, then
//! each parent's (transitively, depth first, each rule remembering the
//! path it was inherited through). A parent that is missing, invalid or on
//! a cycle makes the role *broken*: it grants nothing, and a Deny binding
//! to it refuses everything its subjects ask while its conditions hold
//! (fail closed). Bindings are indexed by subject as RBAC's are.
//!
//! [`AccessAuthorizer`] answers: a Deny binding whose conditions hold (or
//! cannot be decided) and whose role matches → `Deny`, whatever else
//! allows; else an Allow binding whose conditions hold and whose role
//! matches → `Allow`; else no opinion, so RBAC decides.
//! [`AccessAuthorizer::explain`] also says why each other candidate did
//! not apply.

use std::collections::BTreeMap;
use std::sync::Arc;

use foldhash::HashMap;
use jiff::Timestamp;
use k8s_openapi::api::rbac::v1::Subject;
use kubeforge_apimachinery::gofmt::quote;

use super::conditions::{Conditions, Outcome};
use super::spec::{BindingObject, Effect, RoleKind, RoleObject, RoleRef};
use crate::rbac::escalation::compact_string;
use crate::rbac::{RbacPolicy, Rule, applies_to_user};
use crate::subjects::{HasSubjects, Scoped};
use crate::{Attributes, Authorizer, Decision, UserInfo};

/// A role's key: kind, namespace ("" for cluster kinds), name.
type Key = (RoleKind, String, String);

/// `ClusterAccessRole "admin"` / `AccessRole "editor" in namespace "dev"`.
fn label(kind: RoleKind, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{} {}", kind.as_str(), quote(name))
    } else {
        format!(
            "{} {} in namespace {}",
            kind.as_str(),
            quote(name),
            quote(namespace)
        )
    }
}

/// Where a rule came from: the roles from the bound one to the one that
/// holds it, and its index there.
#[derive(Debug)]
struct Origin {
    path: Vec<Arc<str>>,
    index: usize,
}

impl Origin {
    fn describe(&self, rule: &Rule) -> String {
        let holder = self.path.last().map(|s| &**s).unwrap_or_default();
        let mut s = format!("rule {} {} of {holder}", self.index, compact_string(rule));
        if self.path.len() > 1 {
            let chain: Vec<&str> = self.path.iter().map(|p| &**p).collect();
            s.push_str(&format!(" (inherited: {})", chain.join(" → ")));
        }
        s
    }
}

/// A role with every inherited rule.
#[derive(Debug, Default)]
struct Resolved {
    rules: Vec<Rule>,
    origins: Vec<Arc<Origin>>,
}

/// One binding, compiled.
#[derive(Debug)]
struct Compiled {
    /// `ClusterAccessBinding "b"` / `AccessBinding "b" in namespace "ns"`.
    label: String,
    namespace: String,
    subjects: Vec<Subject>,
    effect: Effect,
    conditions: Result<Conditions, String>,
    /// The bound role's label.
    role: String,
    rules: Result<Arc<Resolved>, String>,
}

impl HasSubjects for Compiled {
    fn subjects(&self) -> &[Subject] {
        &self.subjects
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
}

/// Every kubeforge role and binding, compiled. Immutable: build a new one
/// when they (or RBAC roles they name) change.
#[derive(Debug, Default)]
pub struct AccessPolicy {
    bindings: Scoped<Compiled>,
    /// Roles that could not be resolved, and why (for status and explain).
    broken: BTreeMap<Key, String>,
    /// Bindings (namespace, name) that cannot be applied, and why.
    broken_bindings: BTreeMap<(String, String), String>,
}

/// An object that did not pass its checks when loaded.
#[derive(Clone, Debug)]
pub struct Invalid {
    /// `AccessRole`, `ClusterAccessRole`, `AccessBinding` or
    /// `ClusterAccessBinding`.
    pub kind: String,
    /// Namespace ("" for cluster kinds).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Why.
    pub reason: String,
    /// For bindings: what [`BindingObject::salvage`] read of it.
    pub salvage: Option<(Vec<Subject>, Effect)>,
}

struct Builder<'a> {
    roles: HashMap<Key, &'a RoleObject>,
    invalid: HashMap<Key, &'a str>,
    rbac: &'a RbacPolicy,
    memo: HashMap<Key, Result<Arc<Resolved>, String>>,
}

impl Builder<'_> {
    fn key(r: &RoleRef, namespace: &str) -> Key {
        let ns = if r.kind.namespaced() { namespace } else { "" };
        (r.kind, ns.to_string(), r.name.clone())
    }

    fn resolve(&mut self, key: &Key, stack: &mut Vec<Key>) -> Result<Arc<Resolved>, String> {
        if let Some(done) = self.memo.get(key) {
            return done.clone();
        }
        let (kind, ns, name) = key;
        let me: Arc<str> = label(*kind, ns, name).into();
        if let Some(at) = stack.iter().position(|k| k == key) {
            let mut cycle: Vec<String> = stack[at..]
                .iter()
                .map(|(k, n, m)| label(*k, n, m))
                .collect();
            cycle.push(me.to_string());
            return Err(format!("its parents form a cycle: {}", cycle.join(" → ")));
        }
        let result = match kind {
            RoleKind::Role | RoleKind::ClusterRole => self
                .rbac
                .role_ref_rules(kind.as_str(), name, ns)
                .map(|rules| {
                    let origins = (0..rules.len())
                        .map(|index| {
                            Arc::new(Origin {
                                path: vec![me.clone()],
                                index,
                            })
                        })
                        .collect();
                    Arc::new(Resolved {
                        rules: rules.to_vec(),
                        origins,
                    })
                }),
            RoleKind::AccessRole | RoleKind::ClusterAccessRole => {
                if let Some(why) = self.invalid.get(key) {
                    Err(format!("{me} is invalid: {why}"))
                } else if let Some(role) = self.roles.get(key).copied() {
                    stack.push(key.clone());
                    let r = self.inherit(role, &me, stack);
                    stack.pop();
                    r
                } else {
                    Err(format!(
                        "{}.{} {} not found",
                        kind.as_str().to_ascii_lowercase(),
                        kind.group(),
                        quote(name)
                    ))
                }
            }
        };
        self.memo.insert(key.clone(), result.clone());
        result
    }

    fn inherit(
        &mut self,
        role: &RoleObject,
        me: &Arc<str>,
        stack: &mut Vec<Key>,
    ) -> Result<Arc<Resolved>, String> {
        let mut out = Resolved {
            rules: role.rules.clone(),
            origins: (0..role.rules.len())
                .map(|index| {
                    Arc::new(Origin {
                        path: vec![me.clone()],
                        index,
                    })
                })
                .collect(),
        };
        for p in &role.parents {
            let pk = Self::key(p, &role.namespace);
            let parent = self.resolve(&pk, stack).map_err(|e| {
                if e.starts_with("its parents form a cycle") {
                    e
                } else {
                    format!("parent {}: {e}", label(pk.0, &pk.1, &pk.2))
                }
            })?;
            for (rule, origin) in parent.rules.iter().zip(&parent.origins) {
                let mut path = vec![me.clone()];
                path.extend(origin.path.iter().cloned());
                out.rules.push(rule.clone());
                out.origins.push(Arc::new(Origin {
                    path,
                    index: origin.index,
                }));
            }
        }
        Ok(Arc::new(out))
    }
}

impl AccessPolicy {
    /// Compile `roles` and `bindings` (already checked), with the objects
    /// that failed their checks in `invalid`; RBAC roles named as parents
    /// or in role references come from `rbac`.
    pub fn build(
        roles: &[RoleObject],
        bindings: &[BindingObject],
        invalid: &[Invalid],
        rbac: &RbacPolicy,
    ) -> AccessPolicy {
        let role_kind = |k: &str| match k {
            "AccessRole" => Some(RoleKind::AccessRole),
            "ClusterAccessRole" => Some(RoleKind::ClusterAccessRole),
            _ => None,
        };
        let mut b = Builder {
            roles: roles
                .iter()
                .map(|r| ((r.kind, r.namespace.clone(), r.name.clone()), r))
                .collect(),
            invalid: invalid
                .iter()
                .filter_map(|i| {
                    role_kind(&i.kind)
                        .map(|k| ((k, i.namespace.clone(), i.name.clone()), i.reason.as_str()))
                })
                .collect(),
            rbac,
            memo: HashMap::default(),
        };
        let mut p = AccessPolicy::default();
        let mut keys: Vec<Key> = b.roles.keys().cloned().collect();
        keys.sort();
        for k in &keys {
            if let Err(e) = b.resolve(k, &mut Vec::new()) {
                p.broken.insert(k.clone(), e);
            }
        }
        let mut sorted: Vec<&BindingObject> = bindings.iter().collect();
        sorted.sort_by(|x, y| (&x.namespace, &x.name).cmp(&(&y.namespace, &y.name)));
        for o in sorted {
            let key = Builder::key(&o.role_ref, &o.namespace);
            let rules = b.resolve(&key, &mut Vec::new());
            if let Err(e) = &rules {
                p.broken_bindings.insert(
                    (o.namespace.clone(), o.name.clone()),
                    format!("{} cannot be resolved: {e}", label(key.0, &key.1, &key.2)),
                );
            }
            p.add(Compiled {
                label: binding_label(&o.namespace, &o.name),
                namespace: o.namespace.clone(),
                subjects: o.subjects.clone(),
                effect: o.effect,
                conditions: Ok(o.conditions.clone()),
                role: label(key.0, &key.1, &key.2),
                rules,
            });
        }
        for i in invalid {
            let Some((subjects, effect)) = &i.salvage else {
                continue;
            };
            p.add(Compiled {
                label: binding_label(&i.namespace, &i.name),
                namespace: i.namespace.clone(),
                subjects: subjects.clone(),
                effect: *effect,
                conditions: Err(format!("it is invalid: {}", i.reason)),
                role: String::new(),
                rules: Err(format!("it is invalid: {}", i.reason)),
            });
        }
        p
    }

    fn add(&mut self, c: Compiled) {
        self.bindings.add(c);
    }

    /// The roles that grant nothing, and why, as `(kind, namespace, name)`.
    pub fn broken_roles(&self) -> impl Iterator<Item = (&str, &str, &str, &str)> {
        self.broken
            .iter()
            .map(|((k, ns, n), why)| (k.as_str(), ns.as_str(), n.as_str(), why.as_str()))
    }

    /// Why the role `kind`/`namespace`/`name` grants nothing, if it does not.
    pub fn role_problem(&self, kind: RoleKind, namespace: &str, name: &str) -> Option<&str> {
        self.broken
            .get(&(kind, namespace.to_string(), name.to_string()))
            .map(String::as_str)
    }

    /// Why the binding `namespace`/`name` ("" for a ClusterAccessBinding)
    /// cannot be applied, if it cannot.
    pub fn binding_problem(&self, namespace: &str, name: &str) -> Option<&str> {
        self.broken_bindings
            .get(&(namespace.to_string(), name.to_string()))
            .map(String::as_str)
    }

    /// Number of bindings.
    pub fn binding_count(&self) -> usize {
        self.bindings.len()
    }

    /// The rules `user` holds in `namespace` through Allow bindings
    /// without conditions, and whether that list is incomplete (some
    /// binding naming the user has conditions or denies, so what it adds
    /// or takes away depends on the request) — for
    /// SelfSubjectRulesReview, which kube marks incomplete in the same
    /// case.
    pub fn unconditional_rules(&self, user: &UserInfo, namespace: &str) -> (Vec<Rule>, bool) {
        let mut out = Vec::new();
        let mut incomplete = false;
        let mut ids = Vec::new();
        for scope in self.bindings.scopes(namespace) {
            scope.ids(user, &mut ids);
            for &i in &ids {
                let Some(b) = scope.bindings.get(i as usize) else {
                    continue;
                };
                let plain = matches!(&b.conditions, Ok(c) if c.is_empty());
                if b.effect == Effect::Deny || !plain {
                    incomplete = true;
                } else if let Ok(r) = &b.rules {
                    out.extend(r.rules.iter().cloned());
                }
            }
        }
        (out, incomplete)
    }
}

/// Every rule the role `role_ref`, referred to from `namespace`, grants
/// with its parents' (`roles` standing for the stored AccessRoles and
/// ClusterAccessRoles, RBAC roles from `rbac`), or why it cannot be
/// resolved — what escalation checks compare with the writer's rules.
pub fn effective_rules(
    roles: &[RoleObject],
    rbac: &RbacPolicy,
    role_ref: &RoleRef,
    namespace: &str,
) -> Result<Vec<Rule>, String> {
    let mut b = Builder {
        roles: roles
            .iter()
            .map(|r| ((r.kind, r.namespace.clone(), r.name.clone()), r))
            .collect(),
        invalid: HashMap::default(),
        rbac,
        memo: HashMap::default(),
    };
    let key = Builder::key(role_ref, namespace);
    b.resolve(&key, &mut Vec::new()).map(|r| r.rules.clone())
}

/// The policy made of stored objects as read from an API server: each
/// `(kind, object)` with `kind` one of `AccessRole`, `ClusterAccessRole`,
/// `AccessBinding`, `ClusterAccessBinding` (others are ignored). An object
/// that no longer passes its checks grants nothing (a Deny binding among
/// them still refuses, see [`Invalid`]); each is logged by the caller from
/// the returned list.
pub fn from_objects<'a>(
    objects: impl IntoIterator<Item = (&'a str, &'a serde_json::Value)>,
    rbac: &RbacPolicy,
) -> (AccessPolicy, Vec<Invalid>) {
    let mut roles = Vec::new();
    let mut bindings = Vec::new();
    let mut bad = Vec::new();
    for (kind, obj) in objects {
        let namespaced = matches!(kind, "AccessRole" | "AccessBinding");
        let reason = match kind {
            "AccessRole" | "ClusterAccessRole" => match RoleObject::from_value(obj, namespaced) {
                Ok(r) => {
                    roles.push(r);
                    continue;
                }
                Err(e) => super::spec::causes_text(&e),
            },
            "AccessBinding" | "ClusterAccessBinding" => {
                match BindingObject::from_value(obj, namespaced) {
                    Ok(b) => {
                        bindings.push(b);
                        continue;
                    }
                    Err(e) => super::spec::causes_text(&e),
                }
            }
            _ => continue,
        };
        let meta = |k: &str| {
            obj.pointer(&format!("/metadata/{k}"))
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        bad.push(Invalid {
            kind: kind.to_string(),
            namespace: if namespaced {
                meta("namespace")
            } else {
                String::new()
            },
            name: meta("name"),
            reason,
            salvage: kind
                .ends_with("Binding")
                .then(|| BindingObject::salvage(obj)),
        });
    }
    let policy = AccessPolicy::build(&roles, &bindings, &bad, rbac);
    (policy, bad)
}

fn binding_label(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("ClusterAccessBinding {}", quote(name))
    } else {
        format!(
            "AccessBinding {} in namespace {}",
            quote(name),
            quote(namespace)
        )
    }
}

fn subject_text(s: &Subject, namespace: &str) -> String {
    if s.kind == "ServiceAccount" {
        let ns = s
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(namespace);
        format!("ServiceAccount {}", quote(&format!("{ns}/{}", s.name)))
    } else {
        format!("{} {}", s.kind, quote(&s.name))
    }
}

/// The kubeforge policy authorizer over a snapshot.
#[derive(Clone, Debug, Default)]
pub struct AccessAuthorizer {
    policy: Arc<AccessPolicy>,
}

/// A decision and, when asked for, why each candidate binding did not
/// decide it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The decision.
    pub decision: Decision,
    /// One line per binding naming the user that did not decide.
    pub skipped: Vec<String>,
}

impl AccessAuthorizer {
    /// An authorizer deciding by `policy`.
    pub fn new(policy: AccessPolicy) -> AccessAuthorizer {
        AccessAuthorizer {
            policy: Arc::new(policy),
        }
    }

    /// The policy it decides by.
    pub fn policy(&self) -> &Arc<AccessPolicy> {
        &self.policy
    }

    /// Decide `a` at `now`.
    pub fn decide_at(&self, a: &Attributes, now: Timestamp) -> Decision {
        self.run(a, now, None)
    }

    /// Decide `a` at `now`, saying why each other candidate did not.
    pub fn explain(&self, a: &Attributes, now: Timestamp) -> Explanation {
        let mut skipped = Vec::new();
        let decision = self.run(a, now, Some(&mut skipped));
        Explanation { decision, skipped }
    }

    fn run(&self, a: &Attributes, now: Timestamp, mut trace: Option<&mut Vec<String>>) -> Decision {
        let mut allow: Option<String> = None;
        let mut ids = Vec::new();
        for scope in self.policy.bindings.scopes(&a.namespace) {
            scope.ids(&a.user, &mut ids);
            for &i in &ids {
                let Some(b) = scope.bindings.get(i as usize) else {
                    continue;
                };
                if b.effect == Effect::Allow && allow.is_some() && trace.is_none() {
                    continue;
                }
                let Some(subject) = b
                    .subjects
                    .iter()
                    .find(|s| applies_to_user(&a.user, s, &b.namespace))
                else {
                    continue;
                };
                match consider(b, subject, a, now) {
                    Verdict::Deny(reason) => return Decision::Deny { reason },
                    Verdict::Allow(reason) => {
                        if allow.is_none() {
                            allow = Some(reason);
                        } else if let Some(t) = trace.as_deref_mut() {
                            t.push(format!("{reason} (an earlier binding already allows)"));
                        }
                    }
                    Verdict::Skip(why) => {
                        if let Some(t) = trace.as_deref_mut() {
                            t.push(why);
                        }
                    }
                }
            }
        }
        match allow {
            Some(reason) => Decision::Allow { reason },
            None => Decision::NoOpinion {
                reason: String::new(),
            },
        }
    }
}

enum Verdict {
    Deny(String),
    Allow(String),
    Skip(String),
}

fn consider(b: &Compiled, subject: &Subject, a: &Attributes, now: Timestamp) -> Verdict {
    let who = subject_text(subject, &b.namespace);
    let deny = if b.effect == Effect::Deny {
        " (Deny)"
    } else {
        ""
    };
    let what = if b.role.is_empty() {
        format!("{}{deny} to {who}", b.label)
    } else {
        format!("{}{deny} of {} to {who}", b.label, b.role)
    };
    let outcome = match &b.conditions {
        Ok(c) => c.check(a, now),
        Err(e) => Outcome::Unknown(e.clone()),
    };
    if let Outcome::Fails(why) = &outcome {
        return Verdict::Skip(format!("kubeforge: {what} does not apply: {why}"));
    }
    if b.effect == Effect::Allow
        && let Outcome::Unknown(why) = &outcome
    {
        return Verdict::Skip(format!("kubeforge: {what} does not apply: {why}"));
    }
    let matched = match &b.rules {
        Ok(r) => r
            .rules
            .iter()
            .position(|rule| rule.allows(a))
            .map(|i| Ok(r.origins[i].describe(&r.rules[i]))),
        Err(e) => Some(Err(e.clone())),
    };
    match (b.effect, matched) {
        (_, None) => Verdict::Skip(format!(
            "kubeforge: {what} does not apply: no rule of {} matches",
            b.role
        )),
        (Effect::Allow, Some(Ok(rule))) => {
            Verdict::Allow(format!("kubeforge: allowed by {what}: {rule}"))
        }
        (Effect::Allow, Some(Err(e))) => Verdict::Skip(format!(
            "kubeforge: {what} grants nothing: {} cannot be resolved: {e}",
            b.role
        )),
        (Effect::Deny, Some(Ok(rule))) => {
            let mut reason = format!("kubeforge: denied by {what}: {rule}");
            if let Outcome::Unknown(why) = outcome {
                reason.push_str(&format!(
                    " (its conditions could not be checked: {why}; denied to fail closed)"
                ));
            }
            Verdict::Deny(reason)
        }
        (Effect::Deny, Some(Err(e))) => Verdict::Deny(format!(
            "kubeforge: denied by {what}: the binding cannot be evaluated ({e}); denied to fail closed"
        )),
    }
}

impl Authorizer for AccessAuthorizer {
    fn authorize(&self, a: &Attributes) -> Decision {
        self.decide_at(a, Timestamp::now())
    }
}
