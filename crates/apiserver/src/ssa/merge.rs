//! The apply merge: the field set of an applied configuration, merging it
//! into the live object (maps by key, list-maps by key, sets by value,
//! atomic values replaced, in SMD's order), and pruning what the applier
//! owned last time and no longer applies.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::path::{display_path, display_pe, field_pe, item_pe};
use super::schema::{Lk, Ty};
use super::set::{FieldSet, Scope};

/// A problem with an applied configuration.
#[derive(Debug)]
pub struct ConfigError {
    /// Where (`spec.containers[1]`).
    pub field: String,
    /// What.
    pub message: String,
    /// A duplicate list-map key or set value.
    pub duplicate: bool,
}

fn config_set(v: &Value, ty: &Ty<'_>, path: &mut String) -> Result<FieldSet, ConfigError> {
    let mut node = FieldSet::default();
    match v {
        Value::Object(m) => {
            if ty.map_atomic() {
                node.member = true;
                return Ok(node);
            }
            for (k, cv) in m {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                let mut c = config_set(cv, &ty.child(k), path)?;
                path.truncate(len);
                if cv.is_null() || cv.as_object().is_some_and(Map::is_empty) {
                    c.member = true;
                }
                if !c.is_empty() {
                    node.children.insert(field_pe(k), c);
                }
            }
        }
        Value::Array(a) => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                node.member = true;
                return Ok(node);
            }
            let ity = ty.item();
            for (i, item) in a.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let pe = item_pe(item, &lk, ty).map_err(|e| ConfigError {
                    field: path.clone(),
                    message: e.0,
                    duplicate: false,
                })?;
                if node.children.contains_key(&pe) {
                    let field = path[..len].to_string();
                    return Err(ConfigError {
                        field,
                        message: format!("duplicate entries for key {}", display_pe(&pe)),
                        duplicate: true,
                    });
                }
                let mut c = config_set(item, &ity, path)?;
                path.truncate(len);
                c.member = true;
                node.children.insert(pe, c);
            }
        }
        _ => node.member = true,
    }
    Ok(node)
}

pub(crate) fn config_set_root(
    v: &Value,
    ty: &Ty<'_>,
    scope: Scope,
) -> Result<FieldSet, ConfigError> {
    let mut set = config_set(v, ty, &mut String::new())?;
    scope.filter(&mut set);
    Ok(set)
}

// ---------------------------------------------------------------------------
// Merge.

/// Merge an applied configuration into a live object.
///
/// A `null` for a granular map, struct or list (YAML's empty `labels:`) is
/// an empty one, as in SMD: merged with the live value, it keeps all of it.
/// Only when the live value is empty or absent too does the `null` stand
/// (both are then compared as leaves, which keeps the null/empty
/// distinction); for atomic values and scalars `null` replaces the value.
pub(crate) fn merge_into(l: &mut Value, r: &Value, ty: &Ty<'_>) {
    match (&mut *l, r) {
        (Value::Object(lm), Value::Object(rm))
            if !(ty.map_atomic() || lm.is_empty() && rm.is_empty()) =>
        {
            for (k, rv) in rm {
                match lm.get_mut(k) {
                    Some(lv) => merge_into(lv, rv, &ty.child(k)),
                    None => {
                        lm.insert(k.clone(), rv.clone());
                    }
                }
            }
        }
        (Value::Object(lm), Value::Null) if !(ty.map_atomic() || lm.is_empty()) => {}
        (Value::Array(la), Value::Array(ra)) if !(la.is_empty() && ra.is_empty()) => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                *l = r.clone();
            } else {
                merge_list(la, ra, &lk, ty);
            }
        }
        (Value::Array(la), Value::Null)
            if !(la.is_empty() || matches!(ty.list_kind(), Lk::Atomic)) => {}
        _ => *l = r.clone(),
    }
}

/// Merge two associative lists the way SMD orders them: items only in the
/// live list keep their place, applied items follow the applied order.
fn merge_list(la: &mut Vec<Value>, ra: &[Value], lk: &Lk, ty: &Ty<'_>) {
    let pes = |items: &[Value]| -> Option<Vec<String>> {
        items.iter().map(|v| item_pe(v, lk, ty).ok()).collect()
    };
    // Both lists were validated before the merge (`apply` checks the live
    // object, `config_set_root` the configuration); should an item still
    // have no path element, the live list is kept as it is.
    let (Some(rpes), Some(lpes)) = (pes(ra), pes(la)) else {
        return;
    };
    let ity = ty.item();
    let rhs: HashSet<&str> = rpes.iter().map(String::as_str).collect();
    // First occurrence of each live item; None when duplicated.
    let mut lhs: HashMap<&str, Option<usize>> = HashMap::with_capacity(lpes.len());
    for (i, pe) in lpes.iter().enumerate() {
        lhs.entry(pe.as_str())
            .and_modify(|e| *e = None)
            .or_insert(Some(i));
    }
    let mut shared = rpes
        .iter()
        .map(String::as_str)
        .filter(|pe| lhs.contains_key(pe));
    let mut next_shared = shared.next();
    let mut litems: Vec<Option<Value>> = std::mem::take(la).into_iter().map(Some).collect();
    let mut merged: HashSet<&str> = HashSet::with_capacity(rpes.len());
    let mut out = Vec::with_capacity(lpes.len().max(rpes.len()));
    let take_live = |pe: &str, litems: &mut Vec<Option<Value>>| -> Option<Value> {
        lhs.get(pe)
            .copied()
            .flatten()
            .and_then(|i| litems[i].take())
    };
    let merge_item = |l: Option<Value>, r: &Value| -> Value {
        match l {
            Some(mut lv) => {
                merge_into(&mut lv, r, &ity);
                lv
            }
            None => r.clone(),
        }
    };
    let (ll, rl) = (lpes.len(), rpes.len());
    let (mut li, mut ri) = (0, 0);
    while li < ll || ri < rl {
        if li < ll && ri < rl {
            let pe = lpes[li].as_str();
            if pe == rpes[ri] {
                merged.insert(pe);
                let l = take_live(pe, &mut litems);
                out.push(merge_item(l, &ra[ri]));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if rhs.contains(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < ll {
            let pe = lpes[li].as_str();
            if !rhs.contains(pe) {
                out.push(litems[li].take().unwrap_or(Value::Null));
                li += 1;
                continue;
            } else if merged.contains(pe) {
                li += 1;
            }
        }
        if ri < rl {
            let pe = rpes[ri].as_str();
            merged.insert(pe);
            let l = take_live(pe, &mut litems);
            out.push(merge_item(l, &ra[ri]));
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
    }
    *la = out;
}

// ---------------------------------------------------------------------------
// Prune.

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Remove what the applier owned last time (`last`) that nobody owns now
/// (`managed`, the new configuration's set included). A struct field counts
/// as owned when anything below it is; maps and lists left empty by the
/// removal go too.
pub(crate) fn prune(v: &mut Value, last: &FieldSet, managed: Option<&FieldSet>, ty: &Ty<'_>) {
    match v {
        Value::Object(m) => {
            for (pe, lchild) in &last.children {
                let Some(name) = pe.strip_prefix("f:") else {
                    continue;
                };
                let mchild = managed.and_then(|s| s.children.get(pe));
                let owned = mchild.is_some_and(|c| c.member || !c.children.is_empty());
                if !owned {
                    m.remove(name);
                    continue;
                }
                if lchild.children.is_empty() {
                    continue;
                }
                if let Some(cv) = m.get_mut(name) {
                    let was_empty = is_empty_container(cv);
                    prune(cv, lchild, mchild, &ty.child(name));
                    if !was_empty && is_empty_container(cv) {
                        m.remove(name);
                    }
                }
            }
        }
        Value::Array(a) => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                return;
            }
            let ity = ty.item();
            let items = std::mem::take(a);
            for mut item in items {
                let Ok(pe) = item_pe(&item, &lk, ty) else {
                    a.push(item);
                    continue;
                };
                let Some(lchild) = last.children.get(&pe) else {
                    a.push(item);
                    continue;
                };
                let mchild = managed.and_then(|s| s.children.get(&pe));
                if !mchild.is_some_and(|c| c.member) {
                    continue;
                }
                if !lchild.children.is_empty() {
                    prune(&mut item, lchild, mchild, &ity);
                }
                a.push(item);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// The live object's lists.

/// Check a live object's sets and list-maps as SMD's conversion to a typed
/// value does (duplicates allowed): every item needs its path element. The
/// error is in SMD's words (`.spec.ports: element 1: associative list with
/// keys has an element that omits all key fields …`), one per list, the
/// rest of a list skipped after its first bad item.
pub(crate) fn check_live(v: &Value, ty: &Ty<'_>) -> Result<(), String> {
    let mut errs = Vec::new();
    check_walk(v, ty, &mut Vec::new(), &mut errs);
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.swap_remove(0)),
        _ => Err(format!("errors:\n  {}", errs.join("\n  "))),
    }
}

fn check_walk(v: &Value, ty: &Ty<'_>, path: &mut Vec<String>, errs: &mut Vec<String>) {
    match v {
        Value::Object(m) if !ty.map_atomic() => {
            for (k, cv) in m {
                path.push(field_pe(k));
                check_walk(cv, &ty.child(k), path, errs);
                path.pop();
            }
        }
        Value::Array(a) => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                return;
            }
            let ity = ty.item();
            for (i, item) in a.iter().enumerate() {
                match item_pe(item, &lk, ty) {
                    Ok(pe) => {
                        path.push(pe);
                        check_walk(item, &ity, path, errs);
                        path.pop();
                    }
                    Err(e) => {
                        errs.push(format!("{}: element {i}: {}", display_path(path), e.0));
                        return;
                    }
                }
            }
        }
        _ => {}
    }
}
