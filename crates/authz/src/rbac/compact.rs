//! A role's rules packed for deciding: every string of every rule in one
//! contiguous buffer, so checking a request against a role reads a few
//! adjacent cache lines instead of following a pointer per rule, per field
//! and per string (a `Rule` is five `Vec<String>`s). The match is
//! [`Rule::allows`]'s, field for field; [`RuleSet::first_match`] answers
//! what `rules.iter().position(|r| r.allows(a))` would.
//!
//! Layout, all lengths little-endian `u32`: per rule its byte length, then
//! five lists (verbs, API groups, resources, resource names,
//! non-resource URLs), each its byte length, then its strings, each its
//! length and bytes.

use super::Rule;
use super::rules::{one_resource_matches, one_url_matches};
use crate::Attributes;

/// Rules packed for matching; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    blob: Box<[u8]>,
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    // Lengths past u32 cannot come from an API object (bodies are capped
    // far below); saturate rather than wrap.
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    out.extend_from_slice(&n.to_le_bytes());
}

/// Reserve a length slot; [`patch_len`] fills it.
fn reserve(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    at
}

fn patch_len(out: &mut [u8], at: usize) {
    let n = out.len() - at - 4;
    let n = u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
    if let Some(slot) = out.get_mut(at..at + 4) {
        slot.copy_from_slice(&n);
    }
}

fn put_list(out: &mut Vec<u8>, items: &[String]) {
    let at = reserve(out);
    for s in items {
        put_len(out, s.len());
        out.extend_from_slice(s.as_bytes());
    }
    patch_len(out, at);
}

/// Read a length at the front of `b`, and the rest.
fn take_len(b: &[u8]) -> Option<(usize, &[u8])> {
    let (n, rest) = b.split_first_chunk::<4>()?;
    Some((u32::from_le_bytes(*n) as usize, rest))
}

/// Split a length-prefixed section off the front of `b`.
fn section(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let (n, rest) = take_len(b)?;
    (n <= rest.len()).then(|| rest.split_at(n))
}

/// The strings of a list section.
fn strings(mut b: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (s, rest) = section(b)?;
        b = rest;
        Some(s)
    })
}

/// The five lists of one rule.
struct Lists<'a> {
    verbs: &'a [u8],
    groups: &'a [u8],
    resources: &'a [u8],
    names: &'a [u8],
    urls: &'a [u8],
}

fn lists(rule: &[u8]) -> Option<Lists<'_>> {
    let (verbs, rest) = section(rule)?;
    let (groups, rest) = section(rest)?;
    let (resources, rest) = section(rest)?;
    let (names, rest) = section(rest)?;
    let (urls, _) = section(rest)?;
    Some(Lists {
        verbs,
        groups,
        resources,
        names,
        urls,
    })
}

fn any_is(list: &[u8], want: &[u8]) -> bool {
    strings(list).any(|s| s == b"*" || s == want)
}

fn resource_matches(list: &[u8], resource: &[u8], sub: &[u8]) -> bool {
    strings(list).any(|r| one_resource_matches(r, resource, sub))
}

fn name_matches(list: &[u8], name: &[u8]) -> bool {
    list.is_empty() || strings(list).any(|n| n == name)
}

fn url_matches(list: &[u8], path: &[u8]) -> bool {
    strings(list).any(|u| one_url_matches(u, path))
}

fn allows(rule: &[u8], a: &Attributes) -> bool {
    let Some(l) = lists(rule) else {
        return false;
    };
    if !any_is(l.verbs, a.verb.as_bytes()) {
        return false;
    }
    if a.resource_request {
        any_is(l.groups, a.api_group.as_bytes())
            && resource_matches(l.resources, a.resource.as_bytes(), a.subresource.as_bytes())
            && name_matches(l.names, a.name.as_bytes())
    } else {
        url_matches(l.urls, a.path.as_bytes())
    }
}

impl RuleSet {
    /// Pack `rules`, in order.
    pub fn new(rules: &[Rule]) -> RuleSet {
        let mut out = Vec::new();
        for r in rules {
            let at = reserve(&mut out);
            put_list(&mut out, &r.verbs);
            put_list(&mut out, &r.api_groups);
            put_list(&mut out, &r.resources);
            put_list(&mut out, &r.resource_names);
            put_list(&mut out, &r.non_resource_urls);
            patch_len(&mut out, at);
        }
        RuleSet {
            blob: out.into_boxed_slice(),
        }
    }

    /// The index of the first rule that allows `a`.
    pub fn first_match(&self, a: &Attributes) -> Option<usize> {
        let mut b: &[u8] = &self.blob;
        let mut i = 0;
        while let Some((rule, rest)) = section(b) {
            if allows(rule, a) {
                return Some(i);
            }
            b = rest;
            i += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UserInfo;

    /// Every combination of these rules and requests decides as
    /// `Rule::allows` does.
    #[test]
    fn packed_rules_match_as_rules_do() {
        let words = [
            "",
            "*",
            "get",
            "list",
            "pods",
            "pods/log",
            "*/log",
            "*/status",
            "apps",
            "web",
            "deployments",
            "deployments/scale",
            "pods/*",
            "/healthz",
            "/api/*",
            "/api",
            "/*",
            "/apis/**",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut pick = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        // Names may be empty (any name); other lists hold one to three.
        let list = |pick: &mut dyn FnMut(usize) -> usize, min: usize| -> Vec<String> {
            (0..min + pick(3))
                .map(|_| words[pick(words.len())].to_string())
                .collect()
        };
        let rules: Vec<Rule> = (0..400)
            .map(|_| Rule {
                verbs: list(&mut pick, 1),
                api_groups: list(&mut pick, 1),
                resources: list(&mut pick, 1),
                resource_names: list(&mut pick, 0),
                non_resource_urls: list(&mut pick, 1),
            })
            .collect();
        let mut checked = 0;
        let mut matched = 0;
        for chunk in rules.chunks(4) {
            let set = RuleSet::new(chunk);
            for _ in 0..200 {
                let w = |pick: &mut dyn FnMut(usize) -> usize| words[pick(words.len())];
                let a = if pick(4) == 0 {
                    let verb = w(&mut pick);
                    let path = w(&mut pick);
                    Attributes::non_resource(UserInfo::default(), verb, path)
                } else {
                    let (verb, group, res) = (w(&mut pick), w(&mut pick), w(&mut pick));
                    let sub = if pick(2) == 0 {
                        ""
                    } else {
                        ["log", "status", "scale", "*"][pick(4)]
                    };
                    let name = if pick(2) == 0 { "" } else { w(&mut pick) };
                    Attributes::resource(
                        UserInfo::default(),
                        verb,
                        "ns",
                        group,
                        "v1",
                        res,
                        sub,
                        name,
                    )
                };
                let want = chunk.iter().position(|r| r.allows(&a));
                assert_eq!(set.first_match(&a), want, "{chunk:?} {a:?}");
                checked += 1;
                matched += usize::from(want.is_some());
            }
        }
        assert!(checked > 10_000 && matched > 1_000, "{checked} {matched}");
        assert_eq!(
            RuleSet::new(&[]).first_match(&Attributes::non_resource(
                UserInfo::default(),
                "get",
                "/"
            )),
            None
        );
    }
}
