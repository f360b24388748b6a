//! Does one PolicyRule cover a request: kube's `rbac/v1/evaluation_helpers.go`
//! and `RuleAllows`, kept literal.
//!
//! - verbs, apiGroups: `*` or equal;
//! - resources: `*`, equal to `resource/subresource`, or `*/subresource`
//!   when the request has one (`pods/*` is *not* a wildcard in RBAC);
//! - resourceNames: empty matches any name, else the request's name must be
//!   listed — so nameless create, list, watch and deletecollection never
//!   match a rule with names;
//! - nonResourceURLs: `*`, equal, or a prefix when the rule ends in `*`
//!   (`/healthz/*` matches `/healthz/x`, not `/healthz`).

use crate::Attributes;

/// A PolicyRule as the evaluator keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    /// Verbs.
    pub verbs: Vec<String>,
    /// API groups.
    pub api_groups: Vec<String>,
    /// Resources (`pods`, `pods/log`, `*/scale`, `*`).
    pub resources: Vec<String>,
    /// Object names.
    pub resource_names: Vec<String>,
    /// Non-resource URLs.
    pub non_resource_urls: Vec<String>,
}

impl From<&k8s_openapi::api::rbac::v1::PolicyRule> for Rule {
    fn from(r: &k8s_openapi::api::rbac::v1::PolicyRule) -> Rule {
        Rule {
            verbs: r.verbs.clone(),
            api_groups: r.api_groups.clone().unwrap_or_default(),
            resources: r.resources.clone().unwrap_or_default(),
            resource_names: r.resource_names.clone().unwrap_or_default(),
            non_resource_urls: r.non_resource_urls.clone().unwrap_or_default(),
        }
    }
}

impl Rule {
    /// Whether this rule allows `a` (kube's `RuleAllows`).
    pub fn allows(&self, a: &Attributes) -> bool {
        if !verb_matches(self, &a.verb) {
            return false;
        }
        if a.resource_request {
            api_group_matches(self, &a.api_group)
                && resource_matches(self, &a.resource, &a.subresource)
                && resource_name_matches(self, &a.name)
        } else {
            non_resource_url_matches(self, &a.path)
        }
    }
}

/// A verb in the rule is `*` or `verb`.
pub fn verb_matches(rule: &Rule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == "*" || v == verb)
}

/// An API group in the rule is `*` or `group`.
pub fn api_group_matches(rule: &Rule, group: &str) -> bool {
    rule.api_groups.iter().any(|g| g == "*" || g == group)
}

/// A resource in the rule is `*`, `resource[/subresource]`, or
/// `*/subresource` when a subresource is asked for.
pub fn resource_matches(rule: &Rule, resource: &str, subresource: &str) -> bool {
    rule.resources
        .iter()
        .any(|r| one_resource_matches(r.as_bytes(), resource.as_bytes(), subresource.as_bytes()))
}

/// Whether the rule resource `r` covers `resource` and `sub` (kube's
/// `ResourceMatches` for one entry).
pub(crate) fn one_resource_matches(r: &[u8], resource: &[u8], sub: &[u8]) -> bool {
    if r == b"*" {
        return true;
    }
    let exact = if sub.is_empty() {
        r == resource
    } else {
        r.len() == resource.len() + 1 + sub.len()
            && r.starts_with(resource)
            && r.get(resource.len()) == Some(&b'/')
            && r.ends_with(sub)
    };
    exact
        || (!sub.is_empty() && r.len() == sub.len() + 2 && r.starts_with(b"*/") && r.ends_with(sub))
}

/// The rule names no objects, or names `name`.
pub fn resource_name_matches(rule: &Rule, name: &str) -> bool {
    rule.resource_names.is_empty() || rule.resource_names.iter().any(|n| n == name)
}

/// A URL in the rule is `*`, `path`, or a prefix of it ending in `*`.
pub fn non_resource_url_matches(rule: &Rule, path: &str) -> bool {
    rule.non_resource_urls
        .iter()
        .any(|u| one_url_matches(u.as_bytes(), path.as_bytes()))
}

/// Whether the rule URL `u` covers `path` (kube's
/// `NonResourceURLMatches` for one entry).
pub(crate) fn one_url_matches(u: &[u8], path: &[u8]) -> bool {
    if u == b"*" || u == path {
        return true;
    }
    let mut prefix = u;
    while let [rest @ .., b'*'] = prefix {
        prefix = rest;
    }
    prefix.len() < u.len() && path.starts_with(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UserInfo;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Rule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            resource_names: v(names),
            non_resource_urls: vec![],
        }
    }

    fn req(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes::resource(
            UserInfo::default(),
            verb,
            "ns",
            group,
            "v1",
            resource,
            sub,
            name,
        )
    }

    #[test]
    fn resources_match_exactly_or_by_star_subresource() {
        let r = rule(&["get"], &[""], &["pods"], &[]);
        assert!(r.allows(&req("get", "", "pods", "", "p")));
        assert!(
            !r.allows(&req("get", "", "pods", "log", "p")),
            "pods does not cover pods/log"
        );
        let r = rule(&["get"], &[""], &["pods/log"], &[]);
        assert!(r.allows(&req("get", "", "pods", "log", "p")));
        assert!(!r.allows(&req("get", "", "pods", "", "p")));
        let r = rule(&["get"], &[""], &["*/log"], &[]);
        assert!(r.allows(&req("get", "", "pods", "log", "p")));
        assert!(!r.allows(&req("get", "", "pods", "", "p")));
        assert!(!r.allows(&req("get", "", "pods", "logs", "p")));
        let r = rule(&["get"], &[""], &["pods/*"], &[]);
        assert!(
            !r.allows(&req("get", "", "pods", "log", "p")),
            "pods/* is no wildcard"
        );
        let r = rule(&["*"], &["*"], &["*"], &[]);
        assert!(r.allows(&req(
            "escalate",
            "rbac.authorization.k8s.io",
            "roles",
            "",
            ""
        )));
    }

    #[test]
    fn groups_and_verbs_match_by_star_or_equality() {
        let r = rule(&["get", "list"], &["apps"], &["deployments"], &[]);
        assert!(r.allows(&req("list", "apps", "deployments", "", "")));
        assert!(!r.allows(&req("watch", "apps", "deployments", "", "")));
        assert!(!r.allows(&req("list", "", "deployments", "", "")));
        assert!(!r.allows(&req("list", "extensions", "deployments", "", "")));
    }

    #[test]
    fn resource_names_never_match_nameless_requests() {
        let r = rule(&["*"], &[""], &["configmaps"], &["cfg"]);
        assert!(r.allows(&req("get", "", "configmaps", "", "cfg")));
        assert!(!r.allows(&req("get", "", "configmaps", "", "other")));
        for verb in ["create", "list", "watch", "deletecollection"] {
            assert!(!r.allows(&req(verb, "", "configmaps", "", "")), "{verb}");
        }
        // A list with metadata.name=cfg carries the name (set by the caller).
        assert!(r.allows(&req("list", "", "configmaps", "", "cfg")));
    }

    #[test]
    fn non_resource_urls_match_with_a_trailing_star() {
        let r = Rule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz/*".into(), "/version".into()],
            ..Rule::default()
        };
        let get = |p: &str| Attributes::non_resource(UserInfo::default(), "get", p);
        assert!(r.allows(&get("/healthz/etcd")));
        assert!(!r.allows(&get("/healthz")));
        assert!(r.allows(&get("/version")));
        assert!(!r.allows(&get("/version/")));
        assert!(!r.allows(&Attributes::non_resource(
            UserInfo::default(),
            "post",
            "/version"
        )));
        // A resource rule never covers a path, nor a path rule a resource.
        assert!(!rule(&["*"], &["*"], &["*"], &[]).allows(&get("/version")));
        assert!(!r.allows(&req("get", "", "healthz", "", "")));
    }
}
