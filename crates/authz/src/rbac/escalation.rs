//! Escalation prevention: may a user write a Role or binding granting
//! these rules? kube's `ConfirmNoEscalation` over
//! `component-helpers/auth/rbac/validation/policy_comparator.go`, kept
//! literal: every rule written is broken down to one group, resource, verb
//! (and name, or non-resource URL and verb) and each piece must be covered
//! by one rule the user already holds — `*` covers everything, `*/sub`
//! covers `x/sub`, held names must include the asked name, a held rule with
//! names never covers a nameless piece. The refusal lists what is missing
//! in kube's compact form, merged and sorted as kube does.

use std::collections::BTreeSet;

use kubeforge_apimachinery::gofmt::quote;

use super::Rule;
use crate::UserInfo;

/// Each rule broken into pieces of one group, resource, verb and name (or
/// one non-resource URL and verb): kube's `BreakdownRule`.
pub fn breakdown(rule: &Rule) -> Vec<Rule> {
    let one = |s: &str| vec![s.to_string()];
    let mut out = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let piece = Rule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: one(verb),
                    ..Rule::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(piece);
                } else {
                    for name in &rule.resource_names {
                        out.push(Rule {
                            resource_names: one(name),
                            ..piece.clone()
                        });
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(Rule {
                non_resource_urls: one(url),
                verbs: one(verb),
                ..Rule::default()
            });
        }
    }
    out
}

fn has(set: &[String], s: &str) -> bool {
    set.iter().any(|x| x == s)
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

fn resources_cover(held: &[String], asked: &[String]) -> bool {
    if has(held, "*") || has_all(held, asked) {
        return true;
    }
    asked.iter().all(|path| {
        has(held, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(held, &format!("*/{sub}")))
    })
}

fn url_covers(owner: &str, path: &str) -> bool {
    owner == path || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
}

/// Whether `held` covers the piece `asked` (kube's `ruleCovers`).
pub fn rule_covers(held: &Rule, asked: &Rule) -> bool {
    let verbs = has(&held.verbs, "*") || has_all(&held.verbs, &asked.verbs);
    let groups = has(&held.api_groups, "*") || has_all(&held.api_groups, &asked.api_groups);
    let resources = resources_cover(&held.resources, &asked.resources);
    let urls = asked
        .non_resource_urls
        .iter()
        .all(|p| held.non_resource_urls.iter().any(|o| url_covers(o, p)));
    let names = if asked.resource_names.is_empty() {
        held.resource_names.is_empty()
    } else {
        held.resource_names.is_empty() || has_all(&held.resource_names, &asked.resource_names)
    };
    verbs && groups && resources && names && urls
}

/// The pieces of `asked` no rule of `held` covers (kube's `Covers`).
pub fn uncovered(held: &[Rule], asked: &[Rule]) -> Vec<Rule> {
    asked
        .iter()
        .flat_map(breakdown)
        .filter(|piece| !held.iter().any(|h| rule_covers(h, piece)))
        .collect()
}

/// Whether two resource entries (`pods`, `pods/log`, `*`, `*/scale`) can
/// name the same resource: `*` names every resource and subresource.
fn resources_meet(a: &str, b: &str) -> bool {
    if a == "*" || b == "*" || a == b {
        return true;
    }
    match (a.split_once('/'), b.split_once('/')) {
        (Some((ra, sa)), Some((rb, sb))) => sa == sb && (ra == "*" || rb == "*" || ra == rb),
        _ => false,
    }
}

/// Whether two non-resource URL entries (`/healthz`, `/api/*`, `*`) can
/// name the same path.
fn urls_meet(a: &str, b: &str) -> bool {
    a == b
        || a.strip_suffix('*').is_some_and(|pa| b.starts_with(pa))
        || b.strip_suffix('*').is_some_and(|pb| a.starts_with(pb))
}

/// Whether a request could match both `rule` and `piece` (a piece of
/// [`breakdown`]): every dimension shares a value, `*` sharing with all,
/// and a side without names matching every name. What a Deny rule takes
/// from a grant: a grant overlapping it gives what its writer is denied.
pub fn rules_meet(rule: &Rule, piece: &Rule) -> bool {
    let sets_meet = |a: &[String], b: &[String], meet: &dyn Fn(&str, &str) -> bool| {
        a.iter().any(|x| b.iter().any(|y| meet(x, y)))
    };
    let plain = |x: &str, y: &str| x == "*" || y == "*" || x == y;
    if !sets_meet(&rule.verbs, &piece.verbs, &plain) {
        return false;
    }
    if !piece.non_resource_urls.is_empty() {
        return sets_meet(
            &rule.non_resource_urls,
            &piece.non_resource_urls,
            &urls_meet,
        );
    }
    let names = rule.resource_names.is_empty()
        || piece.resource_names.is_empty()
        || sets_meet(&rule.resource_names, &piece.resource_names, &|x, y| x == y);
    sets_meet(&rule.api_groups, &piece.api_groups, &plain)
        && sets_meet(&rule.resources, &piece.resources, &resources_meet)
        && names
}

/// A rule's one group, one resource and at most one name (kube's
/// `simpleResource`).
type SimpleResource = (String, String, Option<String>);

/// Merge pieces of one group and one resource (and at most one name) into
/// one rule with all their verbs (kube's `CompactRules`).
pub fn compact(rules: Vec<Rule>) -> Vec<Rule> {
    let mut out: Vec<Rule> = Vec::new();
    let mut simple: Vec<(SimpleResource, Rule)> = Vec::new();
    for r in rules {
        let is_simple = r.resource_names.len() <= 1
            && r.non_resource_urls.is_empty()
            && r.api_groups.len() == 1
            && r.resources.len() == 1;
        if !is_simple {
            out.push(r);
            continue;
        }
        let key = (
            r.api_groups[0].clone(),
            r.resources[0].clone(),
            r.resource_names.first().cloned(),
        );
        match simple.iter_mut().find(|(k, _)| *k == key) {
            Some((_, existing)) => existing.verbs.extend(r.verbs),
            None => simple.push((key, r)),
        }
    }
    out.extend(simple.into_iter().map(|(_, r)| r));
    out
}

/// Go's `%q` of a string slice: `["a" "b"]`.
pub fn quote_list(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", parts.join(" "))
}

/// kube's `CompactString` of a rule:
/// `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
pub fn compact_string(r: &Rule) -> String {
    let mut parts = Vec::new();
    if !r.api_groups.is_empty() {
        parts.push(format!("APIGroups:{}", quote_list(&r.api_groups)));
    }
    if !r.resources.is_empty() {
        parts.push(format!("Resources:{}", quote_list(&r.resources)));
    }
    if !r.non_resource_urls.is_empty() {
        parts.push(format!(
            "NonResourceURLs:{}",
            quote_list(&r.non_resource_urls)
        ));
    }
    if !r.resource_names.is_empty() {
        parts.push(format!("ResourceNames:{}", quote_list(&r.resource_names)));
    }
    if !r.verbs.is_empty() {
        parts.push(format!("Verbs:{}", quote_list(&r.verbs)));
    }
    format!("{{{}}}", parts.join(", "))
}

/// `Ok` when `user`, holding `held` (with `errors` met resolving them),
/// may grant `asked`; else kube's text: `user "x" (groups=["g"]) is
/// attempting to grant RBAC permissions not currently held:\n{…}`.
pub fn confirm_no_escalation(
    user: &UserInfo,
    held: &[Rule],
    errors: &[String],
    asked: &[Rule],
) -> Result<(), String> {
    let missing = uncovered(held, asked);
    if missing.is_empty() {
        return Ok(());
    }
    let lines: BTreeSet<String> = compact(missing).iter().map(compact_string).collect();
    let mut msg = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        quote(&user.name),
        quote_list(&user.groups),
        lines.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !errors.is_empty() {
        msg.push_str(&format!(
            "; resolution errors: [{}]",
            super::aggregate(errors)
        ));
    }
    Err(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Rule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            resource_names: v(names),
            non_resource_urls: vec![],
        }
    }

    #[test]
    fn stars_and_subresource_stars_cover() {
        let all = rule(&["*"], &["*"], &["*"], &[]);
        assert!(
            uncovered(
                &[all],
                &[rule(&["apps"], &["deployments/scale"], &["update"], &[])]
            )
            .is_empty()
        );
        let scale = rule(&["apps"], &["*/scale"], &["update"], &[]);
        assert!(
            uncovered(
                std::slice::from_ref(&scale),
                &[rule(&["apps"], &["deployments/scale"], &["update"], &[])]
            )
            .is_empty()
        );
        assert_eq!(
            uncovered(
                &[scale],
                &[rule(&["apps"], &["deployments"], &["update"], &[])]
            )
            .len(),
            1
        );
    }

    #[test]
    fn names_must_be_held_and_named_rules_never_cover_nameless_pieces() {
        let named = rule(&[""], &["configmaps"], &["get"], &["a", "b"]);
        assert!(
            uncovered(
                std::slice::from_ref(&named),
                &[rule(&[""], &["configmaps"], &["get"], &["a"])]
            )
            .is_empty()
        );
        assert_eq!(
            uncovered(
                std::slice::from_ref(&named),
                &[rule(&[""], &["configmaps"], &["get"], &["c"])]
            )
            .len(),
            1
        );
        assert_eq!(
            uncovered(&[named], &[rule(&[""], &["configmaps"], &["get"], &[])]).len(),
            1
        );
    }

    /// (deny rule, granted piece, whether a request can match both).
    #[test]
    fn a_grant_meets_a_deny_when_some_request_matches_both() {
        let url = |u: &[&str], v: &[&str]| Rule {
            non_resource_urls: u.iter().map(|x| x.to_string()).collect(),
            verbs: v.iter().map(|x| x.to_string()).collect(),
            ..Rule::default()
        };
        let secrets = rule(&[""], &["secrets"], &["get"], &[]);
        let cases = [
            (
                secrets.clone(),
                rule(&[""], &["secrets"], &["get"], &[]),
                true,
            ),
            (secrets.clone(), rule(&["*"], &["*"], &["*"], &[]), true),
            (
                secrets.clone(),
                rule(&[""], &["secrets"], &["get"], &["a"]),
                true,
            ),
            (
                secrets.clone(),
                rule(&[""], &["secrets"], &["list"], &[]),
                false,
            ),
            (
                secrets.clone(),
                rule(&["apps"], &["secrets"], &["get"], &[]),
                false,
            ),
            (
                secrets.clone(),
                rule(&[""], &["secrets/status"], &["get"], &[]),
                false,
            ),
            (
                rule(&[""], &["secrets"], &["get"], &["a"]),
                rule(&[""], &["secrets"], &["get"], &["b"]),
                false,
            ),
            (
                rule(&[""], &["secrets"], &["get"], &["a"]),
                rule(&[""], &["secrets"], &["get"], &[]),
                true,
            ),
            (
                rule(&["apps"], &["*/scale"], &["update"], &[]),
                rule(&["apps"], &["deployments/scale"], &["*"], &[]),
                true,
            ),
            (
                rule(&["apps"], &["deployments/scale"], &["update"], &[]),
                rule(&["apps"], &["deployments"], &["update"], &[]),
                false,
            ),
            (
                rule(&["*"], &["*"], &["*"], &[]),
                url(&["/healthz"], &["get"]),
                false,
            ),
            (
                url(&["/api/*"], &["get"]),
                url(&["/api/v1"], &["get"]),
                true,
            ),
            (
                url(&["/api/v1"], &["get"]),
                url(&["/api/*"], &["get"]),
                true,
            ),
            (url(&["/apis"], &["get"]), url(&["/api"], &["get"]), false),
            (url(&["*"], &["*"]), url(&["/metrics"], &["get"]), true),
        ];
        for (deny, piece, want) in cases {
            assert_eq!(rules_meet(&deny, &piece), want, "{deny:?} vs {piece:?}");
        }
    }

    #[test]
    fn the_refusal_is_kubes_text() {
        let user = UserInfo::new("x", ["devs", "system:authenticated"]);
        let held = [rule(&[""], &["pods"], &["get"], &[])];
        let asked = [
            rule(&[""], &["pods"], &["get", "list", "delete"], &[]),
            rule(&["apps"], &["deployments"], &["get"], &[]),
        ];
        assert_eq!(
            confirm_no_escalation(&user, &held, &[], &asked).expect_err("escalates"),
            "user \"x\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"list\" \"delete\"]}\n\
             {APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"get\"]}"
        );
        assert!(
            confirm_no_escalation(&user, &held, &[], &[rule(&[""], &["pods"], &["get"], &[])])
                .is_ok()
        );
    }
}
