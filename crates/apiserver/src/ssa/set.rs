//! Field sets: a trie of serialized path elements whose nodes may be
//! *members* (owned as a whole), with the set algebra SMD's `fieldpath`
//! offers, FieldsV1 parsing and rendering (a member with children renders
//! as a `.` entry), the metadata kube never tracks, and the reset fields
//! that limit what an operation on the main resource or `/status` owns.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::path::canonical_pe;

/// A set of field paths: a trie of serialized path elements whose nodes may
/// be members (owned as a whole).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    pub(crate) member: bool,
    pub(crate) children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    /// No members anywhere.
    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Whether a path is a member.
    #[inline]
    pub fn has(&self, path: &[String]) -> bool {
        let mut cur = self;
        for pe in path {
            match cur.children.get(pe) {
                Some(c) => cur = c,
                None => return false,
            }
        }
        cur.member
    }

    /// Add all of `other`.
    #[inline]
    pub fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (pe, c) in &other.children {
            match self.children.get_mut(pe) {
                Some(mine) => mine.union_with(c),
                None => {
                    self.children.insert(pe.clone(), c.clone());
                }
            }
        }
    }

    /// Remove the members of `other` (not their descendants).
    #[inline]
    pub fn difference_with(&mut self, other: &FieldSet) {
        if other.member {
            self.member = false;
        }
        if other.children.is_empty() || self.children.is_empty() {
            return;
        }
        self.children.retain(|pe, c| {
            if let Some(o) = other.children.get(pe) {
                c.difference_with(o);
            }
            !c.is_empty()
        });
    }

    /// The members in both.
    #[inline]
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        let (small, large) = if self.children.len() <= other.children.len() {
            (&self.children, &other.children)
        } else {
            (&other.children, &self.children)
        };
        for (pe, c) in small {
            if let Some(o) = large.get(pe) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    out.children.insert(pe.clone(), i);
                }
            }
        }
        out
    }

    /// All member paths, in order.
    pub fn paths(&self) -> Vec<Vec<String>> {
        fn walk(s: &FieldSet, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
            if s.member && !prefix.is_empty() {
                out.push(prefix.clone());
            }
            for (pe, c) in &s.children {
                prefix.push(pe.clone());
                walk(c, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        walk(self, &mut Vec::new(), &mut out);
        out
    }

    /// Parse FieldsV1 (as kube-apiserver writes it).
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Some(m) = v.as_object() else {
            return Err("FieldsV1 must be an object".into());
        };
        let mut out = FieldSet::default();
        for (k, child) in m {
            if k == "." {
                out.member = true;
                continue;
            }
            let pe = canonical_pe(k)?;
            let mut c = FieldSet::from_fields_v1(child)?;
            if child.as_object().is_some_and(Map::is_empty) {
                c.member = true;
            }
            if !c.is_empty() {
                match out.children.get_mut(&pe) {
                    Some(existing) => existing.union_with(&c),
                    None => {
                        out.children.insert(pe, c);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Render as FieldsV1, consuming the set.
    pub fn into_fields_v1(self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (pe, c) in self.children {
            m.insert(pe, c.into_fields_v1());
        }
        Value::Object(m)
    }

    /// Render as FieldsV1.
    #[cfg(test)]
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (pe, c) in &self.children {
            m.insert(pe.clone(), c.to_fields_v1());
        }
        Value::Object(m)
    }

    fn remove_member(&mut self, path: &[&str]) {
        let Some((first, rest)) = path.split_first() else {
            self.member = false;
            return;
        };
        if let Some(c) = self.children.get_mut(*first) {
            c.remove_member(rest);
            if c.is_empty() {
                self.children.remove(*first);
            }
        }
    }
}

/// Drop the fields kube-apiserver never tracks (its stripMetaManager):
/// apiVersion, kind, metadata itself and the server-owned metadata.
pub(crate) fn strip_meta(set: &mut FieldSet) {
    set.remove_member(&["f:apiVersion"]);
    set.remove_member(&["f:kind"]);
    set.remove_member(&["f:metadata"]);
    for f in [
        "f:name",
        "f:namespace",
        "f:creationTimestamp",
        "f:selfLink",
        "f:uid",
        "f:clusterName",
        "f:generation",
        "f:managedFields",
        "f:resourceVersion",
    ] {
        set.remove_member(&["f:metadata", f]);
    }
}

/// Which top-level fields an operation may own (kube's reset fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every field.
    All,
    /// The main resource of a kind with a `/status` subresource.
    NoStatus,
    /// `/status`.
    OnlyStatus,
}

impl Scope {
    #[inline]
    pub(crate) fn keeps(self, top: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::NoStatus => top != "status",
            Scope::OnlyStatus => top == "status",
        }
    }

    #[inline]
    pub(crate) fn filter(self, set: &mut FieldSet) {
        if self != Scope::All {
            set.children
                .retain(|pe, _| self.keeps(pe.strip_prefix("f:").unwrap_or(pe)));
        }
    }
}
