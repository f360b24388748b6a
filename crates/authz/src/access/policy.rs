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

use super::conditions::{Conditions, Test};
use super::spec::{BindingObject, Effect, RoleKind, RoleObject, RoleRef};
use crate::rbac::compact::RuleSet;
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
    /// `rule 0 {…} of ClusterAccessRole "viewer" (inherited: …)`, made
    /// once when the policy is built.
    text: String,
}

impl Origin {
    fn new(path: Vec<Arc<str>>, index: usize, rule: &Rule) -> Arc<Origin> {
        let holder = path.last().map(|s| &**s).unwrap_or_default();
        let mut text = format!("rule {index} {} of {holder}", compact_string(rule));
        if path.len() > 1 {
            let chain: Vec<&str> = path.iter().map(|p| &**p).collect();
            text.push_str(&format!(" (inherited: {})", chain.join(" → ")));
        }
        Arc::new(Origin { path, index, text })
    }
}

/// A role with every inherited rule.
#[derive(Debug, Default)]
struct Resolved {
    rules: Vec<Rule>,
    origins: Vec<Arc<Origin>>,
    /// `rules` packed for decisions.
    packed: RuleSet,
}

impl Resolved {
    fn new(rules: Vec<Rule>, origins: Vec<Arc<Origin>>) -> Arc<Resolved> {
        Arc::new(Resolved {
            packed: RuleSet::new(&rules),
            rules,
            origins,
        })
    }
}

/// One binding, compiled.
#[derive(Debug)]
struct Compiled {
    namespace: String,
    subjects: Vec<Subject>,
    effect: Effect,
    conditions: Result<Conditions, String>,
    /// The bound role's label.
    role: String,
    rules: Result<Arc<Resolved>, String>,
    /// `AccessBinding "b" in namespace "ns" (Deny) of ClusterAccessRole
    /// "r" to User "u"` for each subject, made once.
    whats: Vec<String>,
}

impl Compiled {
    fn new(
        label: String,
        namespace: String,
        subjects: Vec<Subject>,
        effect: Effect,
        conditions: Result<Conditions, String>,
        role: String,
        rules: Result<Arc<Resolved>, String>,
    ) -> Compiled {
        let deny = if effect == Effect::Deny {
            " (Deny)"
        } else {
            ""
        };
        let whats = subjects
            .iter()
            .map(|s| {
                let who = subject_text(s, &namespace);
                if role.is_empty() {
                    format!("{label}{deny} to {who}")
                } else {
                    format!("{label}{deny} of {role} to {who}")
                }
            })
            .collect();
        Compiled {
            namespace,
            subjects,
            effect,
            conditions,
            role,
            rules,
            whats,
        }
    }
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
                    let origins = rules
                        .iter()
                        .enumerate()
                        .map(|(index, rule)| Origin::new(vec![me.clone()], index, rule))
                        .collect();
                    Resolved::new(rules.to_vec(), origins)
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
        let mut rules = role.rules.clone();
        let mut origins: Vec<Arc<Origin>> = role
            .rules
            .iter()
            .enumerate()
            .map(|(index, rule)| Origin::new(vec![me.clone()], index, rule))
            .collect();
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
                rules.push(rule.clone());
                origins.push(Origin::new(path, origin.index, rule));
            }
        }
        Ok(Resolved::new(rules, origins))
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
            p.add(Compiled::new(
                binding_label(&o.namespace, &o.name),
                o.namespace.clone(),
                o.subjects.clone(),
                o.effect,
                Ok(o.conditions.clone()),
                label(key.0, &key.1, &key.2),
                rules,
            ));
        }
        for i in invalid {
            let Some((subjects, effect)) = &i.salvage else {
                continue;
            };
            p.add(Compiled::new(
                binding_label(&i.namespace, &i.name),
                i.namespace.clone(),
                subjects.clone(),
                *effect,
                Err(format!("it is invalid: {}", i.reason)),
                String::new(),
                Err(format!("it is invalid: {}", i.reason)),
            ));
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

impl AccessPolicy {
    /// The pieces of `pieces` (each one group, resource, verb and name, or
    /// URL and verb: [`breakdown`](crate::rbac::escalation::breakdown))
    /// that a Deny binding naming `user` could refuse in `namespace` ("":
    /// the cluster scope), or in any namespace when `every_namespace` — a
    /// grant there gives what its writer is denied. A Deny counts whatever
    /// its conditions (they may hold when the grant is used), and one whose
    /// role cannot be resolved takes every piece (it refuses everything).
    pub fn denied_pieces(
        &self,
        user: &UserInfo,
        namespace: &str,
        every_namespace: bool,
        pieces: &[Rule],
    ) -> Vec<Rule> {
        let scopes: Vec<_> = if every_namespace {
            self.bindings.all_scopes().collect()
        } else {
            self.bindings.scopes(namespace).collect()
        };
        let mut ids = Vec::new();
        let mut denied = vec![false; pieces.len()];
        for scope in scopes {
            scope.ids(user, &mut ids);
            for &i in &ids {
                let Some(b) = scope.bindings.get(i as usize) else {
                    continue;
                };
                if b.effect != Effect::Deny {
                    continue;
                }
                for (p, hit) in pieces.iter().zip(denied.iter_mut()) {
                    *hit = *hit
                        || match &b.rules {
                            Ok(r) => r
                                .rules
                                .iter()
                                .any(|d| crate::rbac::escalation::rules_meet(d, p)),
                            Err(_) => true,
                        };
                }
            }
        }
        pieces
            .iter()
            .zip(denied)
            .filter(|(_, d)| *d)
            .map(|(p, _)| p.clone())
            .collect()
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
        self.run(a, &|| now, None)
    }

    /// Decide `a` at `now`, saying why each other candidate did not.
    pub fn explain(&self, a: &Attributes, now: Timestamp) -> Explanation {
        let mut skipped = Vec::new();
        let decision = self.run(a, &|| now, Some(&mut skipped));
        Explanation { decision, skipped }
    }

    fn run(
        &self,
        a: &Attributes,
        now: &dyn Fn() -> Timestamp,
        mut trace: Option<&mut Vec<String>>,
    ) -> Decision {
        let mut allow: Option<String> = None;
        // Without a trace a binding reached twice (by name and by group)
        // is looked at twice: the answer is the same, and skipping the
        // dedup keeps a decision free of allocations until its answer.
        let mut seen: Vec<(usize, u32)> = Vec::new();
        for (s, scope) in self.policy.bindings.scopes(&a.namespace).enumerate() {
            for list in scope.lists(&a.user) {
                for &i in list {
                    if trace.is_some() {
                        if seen.contains(&(s, i)) {
                            continue;
                        }
                        seen.push((s, i));
                    }
                    let Some(b) = scope.bindings.get(i as usize) else {
                        continue;
                    };
                    if b.effect == Effect::Allow && allow.is_some() && trace.is_none() {
                        continue;
                    }
                    // Which subject names the user matters only for the
                    // reason: looked up once the binding decides (the
                    // index lists only bindings with such a subject).
                    let subject = || {
                        b.subjects
                            .iter()
                            .position(|s| applies_to_user(&a.user, s, &b.namespace))
                    };
                    let verdict = consider(b, a, now);
                    if matches!(verdict, Verdict::Skip(_)) && trace.is_none() {
                        continue;
                    }
                    let Some(subject) = subject() else {
                        continue;
                    };
                    match verdict {
                        Verdict::Deny(rule, t) => {
                            return Decision::Deny {
                                reason: deny_reason(b, subject, rule, t, a, now),
                            };
                        }
                        Verdict::Allow(rule) => {
                            let reason = concat(
                                &["kubeforge: allowed by ", &b.whats[subject], ": ", rule],
                                0,
                            );
                            if allow.is_none() {
                                allow = Some(reason);
                            } else if let Some(t) = trace.as_deref_mut() {
                                t.push(format!("{reason} (an earlier binding already allows)"));
                            }
                        }
                        Verdict::Skip(why) => {
                            if let Some(t) = trace.as_deref_mut() {
                                t.push(skip_reason(b, subject, why, a, now()));
                            }
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

/// `parts` joined, in one allocation with room for `extra` more bytes
/// (cheaper than `format!` on every decision).
fn concat(parts: &[&str], extra: usize) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum::<usize>() + extra);
    for p in parts {
        s.push_str(p);
    }
    s
}

/// Why a binding did not decide.
enum Skip {
    Conditions(Test),
    NoRule,
    Unresolved,
}

enum Verdict<'a> {
    /// The matched rule's origin (`None`: the role cannot be resolved), and
    /// what the conditions gave.
    Deny(Option<&'a str>, Test),
    Allow(&'a str),
    Skip(Skip),
}

fn consider<'b>(b: &'b Compiled, a: &Attributes, now: &dyn Fn() -> Timestamp) -> Verdict<'b> {
    let test = match &b.conditions {
        Ok(c) => c.test(a, now),
        Err(_) => Test::Unknown,
    };
    match test {
        Test::Holds => {}
        Test::Unknown if b.effect == Effect::Deny => {}
        t => return Verdict::Skip(Skip::Conditions(t)),
    }
    let matched = match &b.rules {
        Ok(r) => match r.packed.first_match(a) {
            Some(i) => Some(r.origins[i].text.as_str()),
            None => return Verdict::Skip(Skip::NoRule),
        },
        Err(_) => None,
    };
    match (b.effect, matched) {
        (Effect::Allow, Some(rule)) => Verdict::Allow(rule),
        (Effect::Allow, None) => Verdict::Skip(Skip::Unresolved),
        (Effect::Deny, rule) => Verdict::Deny(rule, test),
    }
}

fn condition_text(b: &Compiled, t: Test, a: &Attributes, now: Timestamp) -> String {
    match &b.conditions {
        Ok(c) => c.why(t, a, now),
        Err(e) => e.clone(),
    }
}

fn deny_reason(
    b: &Compiled,
    subject: usize,
    rule: Option<&str>,
    t: Test,
    a: &Attributes,
    now: &dyn Fn() -> Timestamp,
) -> String {
    let what = &b.whats[subject];
    match rule {
        Some(rule) => {
            let mut reason = concat(&["kubeforge: denied by ", what, ": ", rule], 0);
            if t == Test::Unknown {
                reason.push_str(&format!(
                    " (its conditions could not be checked: {}; denied to fail closed)",
                    condition_text(b, t, a, now())
                ));
            }
            reason
        }
        None => {
            let e = b.rules.as_ref().err().cloned().unwrap_or_default();
            format!(
                "kubeforge: denied by {what}: the binding cannot be evaluated ({e}); denied to fail closed"
            )
        }
    }
}

fn skip_reason(b: &Compiled, subject: usize, why: Skip, a: &Attributes, now: Timestamp) -> String {
    let what = &b.whats[subject];
    match why {
        Skip::Conditions(t) => format!(
            "kubeforge: {what} does not apply: {}",
            condition_text(b, t, a, now)
        ),
        Skip::NoRule => format!(
            "kubeforge: {what} does not apply: no rule of {} matches",
            b.role
        ),
        Skip::Unresolved => format!(
            "kubeforge: {what} grants nothing: {} cannot be resolved: {}",
            b.role,
            b.rules.as_ref().err().cloned().unwrap_or_default()
        ),
    }
}

impl Authorizer for AccessAuthorizer {
    fn authorize(&self, a: &Attributes) -> Decision {
        // The clock is read only when a time window is checked, once.
        let now = std::cell::OnceCell::new();
        self.run(a, &|| *now.get_or_init(Timestamp::now), None)
    }
}
