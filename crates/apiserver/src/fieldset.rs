//! Field sets for server-side apply's `managedFields` (FieldsV1).
//!
//! A field set is the set of leaf paths an applier owns. Maps are walked
//! into; lists and scalars are leaves (lists are treated as atomic here).
//! Paths are stored as key sequences and rendered as FieldsV1 JSON
//! (`{"f:spec":{"f:replicas":{}}}`).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::rest::Sub;

/// A set of owned leaf paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet(BTreeSet<Vec<String>>);

impl FieldSet {
    /// All paths.
    pub fn paths(&self) -> impl Iterator<Item = &Vec<String>> {
        self.0.iter()
    }

    /// Whether `path` (or a parent of it, or a child) is owned.
    pub fn contains(&self, path: &[String]) -> bool {
        self.0
            .iter()
            .any(|p| p.starts_with(path) || path.starts_with(p))
    }

    /// Drop a path given in display form (`.spec.replicas`).
    pub fn remove_display(&mut self, display: &str) {
        self.0.retain(|p| display_path(p) != display);
    }

    fn from_fields_v1(v: &Value) -> FieldSet {
        let mut set = BTreeSet::new();
        fn walk(v: &Value, prefix: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
            let Some(m) = v.as_object() else { return };
            let children: Vec<(&String, &Value)> =
                m.iter().filter(|(k, _)| k.starts_with("f:")).collect();
            if children.is_empty() && !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            for (k, child) in children {
                prefix.push(k[2..].to_string());
                walk(child, prefix, out);
                prefix.pop();
            }
        }
        walk(v, &mut Vec::new(), &mut set);
        FieldSet(set)
    }

    fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for p in &self.0 {
            let mut cur = &mut root;
            for seg in p {
                let entry = cur.entry(format!("f:{seg}")).or_insert_with(|| json!({}));
                if !entry.is_object() {
                    *entry = json!({});
                }
                match entry {
                    Value::Object(m) => cur = m,
                    _ => unreachable!("just made an object"),
                }
            }
        }
        Value::Object(root)
    }
}

/// `.spec.replicas` form of a path.
pub fn display_path(p: &[String]) -> String {
    p.iter().map(|s| format!(".{s}")).collect()
}

const SKIP_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The leaf paths of an applied configuration.
pub fn of_object(obj: &Value) -> FieldSet {
    let mut set = BTreeSet::new();
    fn walk(v: &Value, prefix: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    if prefix.is_empty() && (k == "apiVersion" || k == "kind") {
                        continue;
                    }
                    if prefix.len() == 1
                        && prefix[0] == "metadata"
                        && SKIP_META.contains(&k.as_str())
                    {
                        continue;
                    }
                    prefix.push(k.clone());
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => {
                if !prefix.is_empty() {
                    out.insert(prefix.clone());
                }
            }
        }
    }
    walk(obj, &mut Vec::new(), &mut set);
    FieldSet(set)
}

/// The value at a path.
pub fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

/// Remove the value at a path (and now-empty parent maps).
pub fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = &mut *obj;
    for k in parents {
        match cur.get_mut(k) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

/// Merge an applied configuration into a live object: maps recursively,
/// everything else replaced.
pub fn merge_applied(live: &mut Value, applied: &Value) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, av) in a {
                if k == "managedFields" {
                    continue;
                }
                match l.get_mut(k) {
                    Some(lv) if lv.is_object() && av.is_object() => merge_applied(lv, av),
                    _ => {
                        l.insert(k.clone(), av.clone());
                    }
                }
            }
        }
        (l, a) => *l = a.clone(),
    }
}

/// One parsed `managedFields` entry.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// Owned fields.
    pub fields: FieldSet,
}

/// The object's `managedFields` entries.
pub fn managed_entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: e
                        .get("manager")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    operation: e
                        .get("operation")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    fields: e
                        .get("fieldsV1")
                        .map(FieldSet::from_fields_v1)
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Write `managedFields`: the other managers' entries, then this manager's.
pub fn set_managed(
    obj: &mut Value,
    others: &[(String, String, FieldSet)],
    manager: &str,
    operation: &str,
    api_version: &str,
    fields: &FieldSet,
    sub: Sub,
) {
    let now = crate::object::now_rfc3339();
    let existing = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for (m, op, set) in others {
        if set.0.is_empty() {
            continue;
        }
        let old = existing.iter().find(|e| {
            e.get("manager").and_then(Value::as_str) == Some(m)
                && e.get("operation").and_then(Value::as_str) == Some(op)
        });
        let mut e = old.cloned().unwrap_or_else(|| json!({"manager": m, "operation": op, "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1"}));
        e["fieldsV1"] = set.to_fields_v1();
        out.push(e);
    }
    let mut mine = json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields.to_fields_v1(),
    });
    if sub == Sub::Status {
        mine["subresource"] = json!("status");
    }
    out.push(mine);
    crate::object::meta_mut(obj).insert("managedFields".into(), Value::Array(out));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let obj = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"a":"b"}},"data":{"k":"v","l":"w"}});
        let set = of_object(&obj);
        let v1 = set.to_fields_v1();
        assert_eq!(
            v1,
            json!({"f:data":{"f:k":{},"f:l":{}},"f:metadata":{"f:labels":{"f:a":{}}}})
        );
        assert_eq!(FieldSet::from_fields_v1(&v1), set);
    }
}
