//! RBAC exactly as kube-apiserver evaluates it
//! (`plugin/pkg/auth/authorizer/rbac/rbac.go` over
//! `pkg/registry/rbac/validation/rule.go`): ClusterRoleBindings apply
//! everywhere, RoleBindings only in their namespace; a binding's roleRef is
//! a ClusterRole or (RoleBindings only) a Role of the binding's namespace;
//! the first rule that allows ends the search, with kube's reason; a
//! binding whose role is missing adds an error to the reason of a refusal
//! (`RBAC: clusterrole.rbac.authorization.k8s.io "r" not found`).
//!
//! kube walks every binding per request. [`RbacPolicy`] indexes bindings by
//! subject (user name, group, ServiceAccount) when it is built, so a
//! decision looks only at the bindings that name the caller — the decision
//! is the same, its cost no longer grows with the number of bindings.

pub mod compact;
pub mod escalation;
pub mod rules;

use foldhash::HashMap;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};

use crate::user::matches_service_account;
use crate::{Attributes, Authorizer, Decision, UserInfo};
pub use rules::Rule;

use compact::RuleSet;

/// One binding, its roleRef resolved when the policy was built.
#[derive(Debug)]
pub struct Binding {
    /// Binding name.
    pub name: String,
    /// Namespace ("" for a ClusterRoleBinding).
    pub namespace: String,
    /// `Role` or `ClusterRole` (as written).
    pub role_kind: String,
    /// The role's name.
    pub role_name: String,
    /// The subjects, as written.
    pub subjects: Vec<Subject>,
    /// The role's rules, or why they could not be found.
    pub rules: Result<Arc<[Rule]>, String>,
    /// `RBAC: allowed by …` for each subject, made once when the policy is
    /// built: formatting it per decision was most of a decision's cost.
    allowed_by: Vec<String>,
    /// `rules` packed for decisions (shared with every binding of the role).
    packed: Arc<RuleSet>,
}

impl Binding {
    /// kube's binding describer: `ClusterRoleBinding "b" of ClusterRole "r"
    /// to Group "g"` / `RoleBinding "b/ns" of Role "r" to User "u"`.
    pub fn describe(&self, subject: &Subject) -> String {
        let q = kubeforge_apimachinery::gofmt::quote;
        let subject = describe_subject(subject, &self.namespace);
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {} of {} {} to {subject}",
                q(&self.name),
                self.role_kind,
                q(&self.role_name)
            )
        } else {
            format!(
                "RoleBinding {} of {} {} to {subject}",
                q(&format!("{}/{}", self.name, self.namespace)),
                self.role_kind,
                q(&self.role_name)
            )
        }
    }

    /// The first subject that names `user` (kube's `appliesTo`), in a
    /// binding of `namespace` ("" for cluster bindings).
    pub fn subject_for(&self, user: &UserInfo) -> Option<&Subject> {
        self.subject_index(user).map(|i| &self.subjects[i])
    }

    fn subject_index(&self, user: &UserInfo) -> Option<usize> {
        self.subjects
            .iter()
            .position(|s| applies_to_user(user, s, &self.namespace))
    }
}

fn describe_subject(s: &Subject, binding_namespace: &str) -> String {
    let q = kubeforge_apimachinery::gofmt::quote;
    if s.kind == "ServiceAccount" {
        let ns = s
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(binding_namespace);
        format!("{} {}", s.kind, q(&format!("{}/{ns}", s.name)))
    } else {
        format!("{} {}", s.kind, q(&s.name))
    }
}

/// kube's `appliesToUser`: User by name, Group by membership,
/// ServiceAccount by username with the binding's namespace as default.
pub fn applies_to_user(user: &UserInfo, s: &Subject, namespace: &str) -> bool {
    match s.kind.as_str() {
        "User" => user.name == s.name,
        "Group" => user.in_group(&s.name),
        "ServiceAccount" => {
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(namespace);
            !ns.is_empty() && matches_service_account(ns, &s.name, &user.name)
        }
        _ => false,
    }
}

impl crate::subjects::HasSubjects for Binding {
    fn subjects(&self) -> &[Subject] {
        &self.subjects
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
}

/// Every Role, ClusterRole and binding, indexed for decisions. Immutable:
/// build a new one when RBAC objects change.
#[derive(Debug, Default)]
pub struct RbacPolicy {
    bindings: crate::subjects::Scoped<Binding>,
    cluster_roles: HashMap<String, RoleRules>,
    roles: HashMap<(String, String), RoleRules>,
}

/// A role's rules, and the same packed for decisions.
#[derive(Clone, Debug)]
struct RoleRules {
    rules: Arc<[Rule]>,
    packed: Arc<RuleSet>,
}

fn compile(rules: Option<&Vec<k8s_openapi::api::rbac::v1::PolicyRule>>) -> RoleRules {
    let rules: Arc<[Rule]> = rules
        .map(|rs| rs.iter().map(Rule::from).collect::<Vec<_>>())
        .unwrap_or_default()
        .into();
    RoleRules {
        packed: Arc::new(RuleSet::new(&rules)),
        rules,
    }
}

impl RbacPolicy {
    /// Index the given objects. Bindings are ordered by name, so the
    /// reason of an allowed request is stable (kube's order is its cache's).
    pub fn build(
        roles: &[Role],
        cluster_roles: &[ClusterRole],
        role_bindings: &[RoleBinding],
        cluster_role_bindings: &[ClusterRoleBinding],
    ) -> RbacPolicy {
        let mut p = RbacPolicy::default();
        for r in cluster_roles {
            let name = r.metadata.name.clone().unwrap_or_default();
            p.cluster_roles.insert(name, compile(r.rules.as_ref()));
        }
        for r in roles {
            let key = (
                r.metadata.namespace.clone().unwrap_or_default(),
                r.metadata.name.clone().unwrap_or_default(),
            );
            p.roles.insert(key, compile(r.rules.as_ref()));
        }
        let mut crbs: Vec<&ClusterRoleBinding> = cluster_role_bindings.iter().collect();
        crbs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for b in crbs {
            let binding = p.resolve(
                b.metadata.name.clone().unwrap_or_default(),
                String::new(),
                &b.role_ref,
                b.subjects.clone().unwrap_or_default(),
            );
            p.bindings.add(binding);
        }
        let mut rbs: Vec<&RoleBinding> = role_bindings.iter().collect();
        rbs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for b in rbs {
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            let binding = p.resolve(
                b.metadata.name.clone().unwrap_or_default(),
                ns.clone(),
                &b.role_ref,
                b.subjects.clone().unwrap_or_default(),
            );
            p.bindings.add(binding);
        }
        p
    }

    /// kube's `GetRoleReferenceRules`, with the lister's NotFound wording.
    fn resolve(
        &self,
        name: String,
        namespace: String,
        role_ref: &k8s_openapi::api::rbac::v1::RoleRef,
        subjects: Vec<Subject>,
    ) -> Binding {
        let role = self.role_ref(&role_ref.kind, &role_ref.name, &namespace);
        let packed = role.as_ref().map(|r| r.packed.clone()).unwrap_or_default();
        let mut b = Binding {
            name,
            namespace,
            role_kind: role_ref.kind.clone(),
            role_name: role_ref.name.clone(),
            subjects,
            rules: role.map(|r| r.rules),
            allowed_by: Vec::new(),
            packed,
        };
        b.allowed_by = b
            .subjects
            .iter()
            .map(|s| format!("RBAC: allowed by {}", b.describe(s)))
            .collect();
        b
    }

    /// The rules of the role a binding in `namespace` ("" for a
    /// ClusterRoleBinding) refers to, or kube's error (the lister's
    /// NotFound wording, or an unsupported kind) — kube's
    /// `GetRoleReferenceRules`.
    pub fn role_ref_rules(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
    ) -> Result<Arc<[Rule]>, String> {
        self.role_ref(kind, name, namespace).map(|r| r.rules)
    }

    fn role_ref(&self, kind: &str, name: &str, namespace: &str) -> Result<RoleRules, String> {
        let q = kubeforge_apimachinery::gofmt::quote;
        match kind {
            "Role" => self
                .roles
                .get(&(namespace.to_string(), name.to_string()))
                .cloned()
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io {} not found", q(name))),
            "ClusterRole" => self.cluster_roles.get(name).cloned().ok_or_else(|| {
                format!(
                    "clusterrole.rbac.authorization.k8s.io {} not found",
                    q(name)
                )
            }),
            kind => Err(format!("unsupported role reference kind: {}", q(kind))),
        }
    }

    /// Number of bindings (cluster and namespaced).
    pub fn binding_count(&self) -> usize {
        self.bindings.len()
    }

    /// Visit every binding that names `user` in `namespace` (cluster
    /// bindings first), each once, in binding order within a scope;
    /// `visit` returns false to stop.
    pub fn visit_bindings(
        &self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(&Binding, &Subject) -> bool,
    ) {
        let mut ids: Vec<u32> = Vec::new();
        for scope in self.bindings.scopes(namespace) {
            scope.ids(user, &mut ids);
            for &i in &ids {
                let Some(b) = scope.bindings.get(i as usize) else {
                    continue;
                };
                // The index found it through a subject; kube reports the
                // first subject of the binding that applies.
                let Some(s) = b.subject_for(user) else {
                    continue;
                };
                if !visit(b, s) {
                    return;
                }
            }
        }
    }

    /// Every rule `user` holds in `namespace` (cluster-wide rules included)
    /// and the errors met resolving roles — kube's `RulesFor`, what
    /// SelfSubjectRulesReview and escalation checks use.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<Rule>, Vec<String>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        self.visit_bindings(user, namespace, |b, _| {
            match &b.rules {
                Ok(rs) => rules.extend(rs.iter().cloned()),
                Err(e) => errors.push(e.clone()),
            }
            true
        });
        (rules, errors)
    }
}

/// kube's error aggregate text: one message alone, several as
/// `[a, b]`, duplicates dropped.
pub fn aggregate(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.as_slice() {
        [] => String::new(),
        [one] => (*one).to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The RBAC authorizer over a policy snapshot.
#[derive(Debug, Default, Clone)]
pub struct RbacAuthorizer {
    policy: Arc<RbacPolicy>,
}

impl RbacAuthorizer {
    /// An authorizer deciding by `policy`.
    pub fn new(policy: RbacPolicy) -> RbacAuthorizer {
        RbacAuthorizer {
            policy: Arc::new(policy),
        }
    }

    /// The policy it decides by.
    pub fn policy(&self) -> &Arc<RbacPolicy> {
        &self.policy
    }
}

impl Authorizer for RbacAuthorizer {
    fn authorize(&self, a: &Attributes) -> Decision {
        // A binding reached through several subjects or lists is looked at
        // again; the answer is the same, and skipping the sort and dedup
        // `visit_bindings` does keeps a decision free of allocations until
        // its answer.
        let mut errors: Vec<&str> = Vec::new();
        for scope in self.policy.bindings.scopes(&a.namespace) {
            for list in scope.lists(&a.user) {
                for &i in list {
                    let Some(b) = scope.bindings.get(i as usize) else {
                        continue;
                    };
                    // Which subject names the user is needed only for
                    // the reason (the index lists only bindings with one).
                    match &b.rules {
                        Ok(_) => {
                            if b.packed.first_match(a).is_some()
                                && let Some(s) = b.subject_index(&a.user)
                            {
                                return Decision::Allow {
                                    reason: b.allowed_by[s].clone(),
                                };
                            }
                        }
                        Err(e) => {
                            if b.subject_index(&a.user).is_some() {
                                errors.push(e);
                            }
                        }
                    }
                }
            }
        }
        if errors.is_empty() {
            Decision::NoOpinion {
                reason: String::new(),
            }
        } else {
            let errors: Vec<String> = errors.into_iter().map(str::to_string).collect();
            Decision::NoOpinion {
                reason: format!("RBAC: {}", aggregate(&errors)),
            }
        }
    }
}

#[cfg(test)]
mod tests;
