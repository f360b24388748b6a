//! Comparing two objects as field sets (what an Update operation added,
//! changed and removed), and the fields a create sets, computed in one walk
//! and optionally rendered straight to FieldsV1.

use std::collections::{BTreeMap, HashMap};

#[cfg(test)]
use serde_json::json;
use serde_json::{Map, Value};

use super::path::{PeError, field_pe, item_pe};
use super::schema::{Lk, Ty};
use super::set::{FieldSet, Scope};

/// What changed between two objects, as field sets.
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    /// Fields only in the new object (and maps/items added as a whole).
    pub added: FieldSet,
    /// Leaves present in both with different values.
    pub modified: FieldSet,
    /// Fields only in the old object.
    pub removed: FieldSet,
}

impl Comparison {
    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    fn attach(&mut self, pe: impl FnOnce() -> String, c: Comparison) {
        if c.is_empty() {
            return;
        }
        let pe = pe();
        for (mine, theirs) in [
            (&mut self.added, c.added),
            (&mut self.modified, c.modified),
            (&mut self.removed, c.removed),
        ] {
            if !theirs.is_empty() {
                mine.children.insert(pe.clone(), theirs);
            }
        }
    }
}

fn leaf(l: Option<&Value>, r: Option<&Value>, out: &mut Comparison) {
    match (l, r) {
        (None, Some(_)) => out.added.member = true,
        (Some(_), None) => out.removed.member = true,
        (Some(a), Some(b)) if a != b => out.modified.member = true,
        _ => {}
    }
}

fn is_map_or_none(v: Option<&Value>) -> bool {
    v.is_none_or(Value::is_object)
}

fn is_list_or_none(v: Option<&Value>) -> bool {
    v.is_none_or(Value::is_array)
}

fn compare_maps(
    l: Option<&Map<String, Value>>,
    r: Option<&Map<String, Value>>,
    ty: &Ty<'_>,
    keep: &dyn Fn(&str) -> bool,
    out: &mut Comparison,
) {
    if let Some(lm) = l {
        for (k, lv) in lm {
            if !keep(k) {
                continue;
            }
            let rv = r.and_then(|m| m.get(k));
            let mut c = Comparison::default();
            compare_at(Some(lv), rv, &ty.child(k), &mut c);
            out.attach(|| field_pe(k), c);
        }
    }
    if let Some(rm) = r {
        for (k, rv) in rm {
            if !keep(k) || l.is_some_and(|m| m.contains_key(k)) {
                continue;
            }
            let mut c = Comparison::default();
            compare_at(None, Some(rv), &ty.child(k), &mut c);
            out.attach(|| field_pe(k), c);
        }
    }
}

fn compare_at(l: Option<&Value>, r: Option<&Value>, ty: &Ty<'_>, out: &mut Comparison) {
    if l.is_none() && r.is_none() {
        return;
    }
    if is_map_or_none(l) && is_map_or_none(r) {
        let lm = l.and_then(Value::as_object);
        let rm = r.and_then(Value::as_object);
        if ty.map_atomic() || (lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty)) {
            return leaf(l, r, out);
        }
        compare_maps(lm, rm, ty, &|_| true, out);
    } else if is_list_or_none(l) && is_list_or_none(r) {
        let la = l
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let ra = r
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let lk = ty.list_kind();
        if matches!(lk, Lk::Atomic) || (la.is_empty() && ra.is_empty()) {
            return leaf(l, r, out);
        }
        let mut items = Comparison::default();
        if compare_lists(la, ra, &lk, ty, &mut items).is_err() {
            return leaf(l, r, out);
        }
        out.added.children.append(&mut items.added.children);
        out.modified.children.append(&mut items.modified.children);
        out.removed.children.append(&mut items.removed.children);
    } else {
        return leaf(l, r, out);
    }
    if l.is_none() {
        out.added.member = true;
    } else if r.is_none() {
        out.removed.member = true;
    }
}

fn compare_lists(
    la: &[Value],
    ra: &[Value],
    lk: &Lk,
    ty: &Ty<'_>,
    out: &mut Comparison,
) -> Result<(), PeError> {
    let ity = ty.item();
    // pe → (live items, new items), in first-seen order.
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, (Vec<&Value>, Vec<&Value>)> = HashMap::new();
    for (side, items) in [(0, la), (1, ra)] {
        for item in items {
            let pe = item_pe(item, lk, ty)?;
            let g = match groups.get_mut(&pe) {
                Some(g) => g,
                None => {
                    order.push(pe.clone());
                    groups.entry(pe).or_default()
                }
            };
            if side == 0 {
                g.0.push(item);
            } else {
                g.1.push(item);
            }
        }
    }
    for pe in order {
        let Some((ls, rs)) = groups.remove(&pe) else {
            continue;
        };
        match (ls.len(), rs.len()) {
            (0..=1, 0..=1) => {
                let mut c = Comparison::default();
                compare_at(ls.first().copied(), rs.first().copied(), &ity, &mut c);
                out.attach(|| pe, c);
            }
            (2.., 2..) => {
                if ls != rs {
                    out.modified.children.entry(pe).or_default().member = true;
                }
            }
            (2.., _) => {
                let mut c = Comparison::default();
                if let Some(r) = rs.first() {
                    compare_at(None, Some(r), &ity, &mut c);
                }
                c.removed.member = true;
                out.attach(|| pe, c);
            }
            (_, 2..) => {
                let mut c = Comparison::default();
                if let Some(l) = ls.first() {
                    compare_at(Some(l), None, &ity, &mut c);
                }
                c.added.member = true;
                out.attach(|| pe, c);
            }
        }
    }
    Ok(())
}

/// Compare two whole objects within a scope (never `metadata.managedFields`).
pub(crate) fn compare_objects(l: &Value, r: &Value, ty: &Ty<'_>, scope: Scope) -> Comparison {
    let mut out = Comparison::default();
    let (Some(lm), Some(rm)) = (l.as_object(), r.as_object()) else {
        return out;
    };
    let keep = |k: &str| scope.keeps(k) && k != "metadata";
    compare_maps(Some(lm), Some(rm), ty, &keep, &mut out);
    if scope.keeps("metadata") {
        let mty = ty.child("metadata");
        let mut c = Comparison::default();
        let (lmeta, rmeta) = (lm.get("metadata"), rm.get("metadata"));
        compare_maps(
            lmeta.and_then(Value::as_object),
            rmeta.and_then(Value::as_object),
            &mty,
            &|k| k != "managedFields",
            &mut c,
        );
        out.attach(|| field_pe("metadata"), c);
    }
    out
}

/// An "empty" object of the kind to compare a created object against: the
/// structs a Go object always has (metadata, spec, status, pod templates)
/// are present, so only maps and items created as a whole are members.
#[cfg(test)]
pub(crate) fn skeleton(obj: &Value, ty: &Ty<'_>) -> Value {
    match ty {
        Ty::Custom(..) => json!({}),
        _ => skeleton_walk(obj, ty, true),
    }
}

/// Whether `k` (holding `v`) is part of the skeleton of its parent.
fn in_skeleton(k: &str, v: &Value, cty: &Ty<'_>, root: bool) -> bool {
    v.is_object()
        && (matches!(cty, Ty::Struct(_)) || (root && matches!(k, "metadata" | "spec" | "status")))
}

fn skeleton_walk(obj: &Value, ty: &Ty<'_>, root: bool) -> Value {
    let mut out = Map::new();
    if let Some(m) = obj.as_object() {
        for (k, v) in m {
            let cty = ty.child(k);
            if in_skeleton(k, v, &cty, root) {
                out.insert(k.clone(), skeleton_walk(v, &cty, false));
            }
        }
    }
    Value::Object(out)
}

/// The fields a create sets: what `compare_objects(skeleton(obj), obj)`
/// reports as added or modified, computed in one walk (every create runs
/// this, so it builds no skeleton and no three-way comparison).
pub(crate) fn created_fields(obj: &Value, ty: &Ty<'_>, scope: Scope) -> FieldSet {
    let mut out = FieldSet::default();
    let Some(m) = obj.as_object() else {
        return out;
    };
    let custom = matches!(ty, Ty::Custom(..));
    let keep = |k: &str| scope.keeps(k) && k != "metadata";
    created_children(m, ty, !custom, true, &keep, &mut out);
    if scope.keeps("metadata")
        && let Some(meta) = m.get("metadata").and_then(Value::as_object)
    {
        let mut c = FieldSet::default();
        let in_skel = !custom;
        created_children(
            meta,
            &ty.child("metadata"),
            in_skel,
            false,
            &|k| k != "managedFields",
            &mut c,
        );
        if !c.is_empty() {
            out.children.insert(field_pe("metadata"), c);
        }
    }
    out
}

/// The children of a map whose skeleton is present (`in_skel`) or absent.
fn created_children(
    m: &Map<String, Value>,
    ty: &Ty<'_>,
    in_skel: bool,
    root: bool,
    keep: &dyn Fn(&str) -> bool,
    out: &mut FieldSet,
) {
    for (k, v) in m {
        if !keep(k) {
            continue;
        }
        let cty = ty.child(k);
        let c = if in_skel && in_skeleton(k, v, &cty, root) {
            created_struct(v, &cty)
        } else {
            added_whole(v, &cty)
        };
        if !c.is_empty() {
            out.children.insert(field_pe(k), c);
        }
    }
}

/// A struct the skeleton has: only what is not itself skeleton is added.
fn created_struct(v: &Value, ty: &Ty<'_>) -> FieldSet {
    let Some(m) = v.as_object() else {
        return FieldSet::default();
    };
    if m.is_empty() {
        return FieldSet::default();
    }
    if ty.map_atomic() {
        // Compared as a leaf against its skeleton.
        return FieldSet {
            member: skeleton_walk(v, ty, false) != *v,
            children: BTreeMap::new(),
        };
    }
    let mut out = FieldSet::default();
    created_children(m, ty, true, false, &|_| true, &mut out);
    out
}

/// A value created as a whole: a member, with its granular parts.
fn added_whole(v: &Value, ty: &Ty<'_>) -> FieldSet {
    let mut out = FieldSet {
        member: true,
        children: BTreeMap::new(),
    };
    match v {
        Value::Object(m) if !m.is_empty() && !ty.map_atomic() => {
            for (k, cv) in m {
                out.children
                    .insert(field_pe(k), added_whole(cv, &ty.child(k)));
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                return out;
            }
            let Ok(pes) = a
                .iter()
                .map(|item| item_pe(item, &lk, ty))
                .collect::<Result<Vec<_>, _>>()
            else {
                return out;
            };
            let ity = ty.item();
            for (pe, item) in pes.into_iter().zip(a) {
                // Duplicates: the first item stands for them all.
                out.children
                    .entry(pe)
                    .or_insert_with(|| added_whole(item, &ity));
            }
        }
        _ => {}
    }
    out
}

/// A field-set node rendered as FieldsV1 while it is built: what
/// [`created_fields`] followed by [`strip_meta`] and
/// [`FieldSet::into_fields_v1`] give, without the intermediate trie (every
/// create of an untracked object takes this path).
#[derive(Default)]
struct V1 {
    member: bool,
    children: Map<String, Value>,
}

impl V1 {
    fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    fn into_value(self) -> Value {
        let mut m = self.children;
        if self.member && !m.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        Value::Object(m)
    }
}

/// The metadata fields kube never tracks (see [`strip_meta`]).
const STRIPPED_META: [&str; 9] = [
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "clusterName",
    "generation",
    "managedFields",
    "resourceVersion",
];

/// The FieldsV1 of a create with no earlier managers: `created_fields`
/// with kube's stripped fields removed, rendered directly.
pub(crate) fn created_fields_v1(obj: &Value, ty: &Ty<'_>, scope: Scope) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(m) = obj.as_object() else {
        return out;
    };
    let custom = matches!(ty, Ty::Custom(..));
    let keep = |k: &str| scope.keeps(k) && k != "metadata";
    v1_created_children(
        m,
        ty,
        !custom,
        true,
        &keep,
        &["apiVersion", "kind"],
        &mut out,
    );
    if scope.keeps("metadata")
        && let Some(meta) = m.get("metadata").and_then(Value::as_object)
    {
        let mut c = Map::new();
        v1_created_children(
            meta,
            &ty.child("metadata"),
            !custom,
            false,
            &|k| k != "managedFields",
            &STRIPPED_META,
            &mut c,
        );
        if !c.is_empty() {
            out.insert(field_pe("metadata"), Value::Object(c));
        }
    }
    out
}

/// [`created_children`], rendering into `out`; the members of `stripped`
/// keys are dropped (their granular parts stay, as `strip_meta` does).
fn v1_created_children(
    m: &Map<String, Value>,
    ty: &Ty<'_>,
    in_skel: bool,
    root: bool,
    keep: &dyn Fn(&str) -> bool,
    stripped: &[&str],
    out: &mut Map<String, Value>,
) {
    for (k, v) in m {
        if !keep(k) {
            continue;
        }
        let cty = ty.child(k);
        let mut c = if in_skel && in_skeleton(k, v, &cty, root) {
            v1_created_struct(v, &cty)
        } else {
            v1_added_whole(v, &cty)
        };
        if stripped.contains(&k.as_str()) {
            c.member = false;
        }
        if !c.is_empty() {
            out.insert(field_pe(k), c.into_value());
        }
    }
}

/// [`created_struct`], rendered.
fn v1_created_struct(v: &Value, ty: &Ty<'_>) -> V1 {
    let Some(m) = v.as_object().filter(|m| !m.is_empty()) else {
        return V1::default();
    };
    if ty.map_atomic() {
        return V1 {
            member: skeleton_walk(v, ty, false) != *v,
            children: Map::new(),
        };
    }
    let mut out = V1::default();
    v1_created_children(m, ty, true, false, &|_| true, &[], &mut out.children);
    out
}

/// [`added_whole`], rendered.
fn v1_added_whole(v: &Value, ty: &Ty<'_>) -> V1 {
    let mut out = V1 {
        member: true,
        children: Map::new(),
    };
    match v {
        Value::Object(m) if !m.is_empty() && !ty.map_atomic() => {
            for (k, cv) in m {
                out.children
                    .insert(field_pe(k), v1_added_whole(cv, &ty.child(k)).into_value());
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                return out;
            }
            let Ok(pes) = a
                .iter()
                .map(|item| item_pe(item, &lk, ty))
                .collect::<Result<Vec<_>, _>>()
            else {
                return out;
            };
            let ity = ty.item();
            for (pe, item) in pes.into_iter().zip(a) {
                // Duplicates: the first item stands for them all.
                if !out.children.contains_key(&pe) {
                    out.children
                        .insert(pe, v1_added_whole(item, &ity).into_value());
                }
            }
        }
        _ => {}
    }
    out
}
