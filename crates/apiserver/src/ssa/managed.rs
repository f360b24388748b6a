//! `managedFields` entries: decoding and encoding them, their order,
//! identity and the cap on Update entries, recording an Update operation's
//! changes (SMD's Updater.Update), and whether a write changed anything.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::compare::Comparison;
use super::path::json_str;
use super::set::{FieldSet, strip_meta};

/// At most this many Update entries are kept (kube's DefaultMaxUpdateManagers).
const MAX_UPDATE_MANAGERS: usize = 10;

/// One `managedFields` entry.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The apiVersion the fields were written in.
    pub api_version: String,
    /// `status`, `scale`, ... or empty for the main resource.
    pub subresource: String,
    /// Last change (RFC 3339), if known.
    pub time: Option<String>,
    /// Owned fields.
    pub fields: FieldSet,
}

impl Entry {
    /// Same manager identity (apiVersion counts for Update only, as in kube).
    pub(crate) fn is(
        &self,
        manager: &str,
        operation: &str,
        api_version: &str,
        subresource: &str,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == subresource
            && (operation == "Apply" || self.api_version == api_version)
    }

    pub(crate) fn same_identity(&self, other: &Entry) -> bool {
        self.is(
            &other.manager,
            &other.operation,
            &other.api_version,
            &other.subresource,
        )
    }

    /// How kube names this manager in conflicts.
    pub(crate) fn display(&self) -> String {
        let mut s = json_str(&self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(
                " with subresource {}",
                json_str(&self.subresource)
            ));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    fn into_json(self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), Value::String(self.manager));
        m.insert("operation".into(), Value::String(self.operation));
        m.insert("apiVersion".into(), Value::String(self.api_version));
        if let Some(t) = self.time {
            m.insert("time".into(), Value::String(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.fields.into_fields_v1());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), Value::String(self.subresource));
        }
        Value::Object(m)
    }
}

/// Parse `metadata.managedFields`; an invalid entry fails the whole list,
/// as in kube.
pub fn decode_managed(v: &Value) -> Result<Vec<Entry>, String> {
    let Some(a) = v.as_array() else {
        return Err("managedFields must be a list".into());
    };
    let mut out: Vec<Entry> = Vec::with_capacity(a.len());
    for (i, e) in a.iter().enumerate() {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default();
        let operation = s("operation");
        if !matches!(operation, "Apply" | "Update") {
            return Err("operation must be `Apply` or `Update`".into());
        }
        if s("apiVersion").is_empty() {
            return Err("apiVersion must not be empty".into());
        }
        match s("fieldsType") {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
            t => {
                return Err(format!(
                    "invalid fieldsType {t:?} in managed fields entry {i}"
                ));
            }
        }
        let fields = match e.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::default(),
            Some(f) => FieldSet::from_fields_v1(f)?,
        };
        let entry = Entry {
            manager: s("manager").to_string(),
            operation: operation.to_string(),
            api_version: s("apiVersion").to_string(),
            subresource: s("subresource").to_string(),
            time: e.get("time").and_then(Value::as_str).map(str::to_string),
            fields,
        };
        // A repeated identity replaces the earlier one, as kube's map does.
        out.retain(|x| !x.same_identity(&entry));
        out.push(entry);
    }
    Ok(out)
}

pub(crate) fn managed_of(obj: &Value) -> Option<&Value> {
    obj.get("metadata")?.get("managedFields")
}

/// kube's `isResetManagedFields`: `[]` or `[{}]`.
pub(crate) fn is_reset(v: &Value) -> bool {
    match v.as_array().map(Vec::as_slice) {
        Some([]) => true,
        Some([e]) => e
            .as_object()
            .is_some_and(|m| m.values().all(|v| v.is_null() || v == &json!(""))),
        _ => false,
    }
}

/// Sort (Apply first, then by time, manager, apiVersion, subresource), drop
/// empty entries and write them to the object (or remove the field).
pub(crate) fn set_managed(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| {
                a.time
                    .as_deref()
                    .unwrap_or("")
                    .cmp(b.time.as_deref().unwrap_or(""))
            })
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    let meta = crate::object::meta_mut(obj);
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.into_iter().map(Entry::into_json).collect()),
        );
    }
}

/// Fold the oldest Update entries into `ancient-changes` beyond ten.
pub(crate) fn cap_updaters(entries: &mut Vec<Entry>) {
    let mut updaters: Vec<usize> = (0..entries.len())
        .filter(|i| entries[*i].operation == "Update")
        .collect();
    let mut length = updaters.len();
    if length <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|a, b| {
        let (a, b) = (&entries[*a], &entries[*b]);
        a.time
            .as_deref()
            .unwrap_or("")
            .cmp(b.time.as_deref().unwrap_or(""))
            .then_with(|| a.manager.cmp(&b.manager))
    });
    let mut first_of: HashMap<String, usize> = HashMap::new();
    let mut bucket_of: HashMap<String, usize> = HashMap::new();
    let mut drop = vec![false; entries.len()];
    for i in updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[i].api_version.clone();
        let Some(first) = first_of.get(&version).copied() else {
            first_of.insert(version, i);
            continue;
        };
        let bucket = *bucket_of.entry(version.clone()).or_insert_with(|| {
            let existing = (0..entries.len())
                .find(|j| !drop[*j] && entries[*j].is("ancient-changes", "Update", &version, ""));
            existing.unwrap_or_else(|| {
                entries[first].manager = "ancient-changes".into();
                entries[first].subresource.clear();
                first
            })
        });
        if bucket == i {
            continue;
        }
        let fields = std::mem::take(&mut entries[i].fields);
        entries[bucket].fields.union_with(&fields);
        entries[bucket].time = entries[i].time.clone();
        drop[i] = true;
        length -= 1;
    }
    let mut i = 0;
    entries.retain(|_| {
        let keep = !drop[i];
        i += 1;
        keep
    });
}

/// SMD's update for an Update operation: the changed fields move to
/// `manager`'s entry, the others lose them and the removed ones.
pub(crate) fn record_changes(
    entries: &mut Vec<Entry>,
    cmp: Comparison,
    manager: &str,
    api_version: &str,
    subresource: &str,
) {
    let Comparison {
        added: mut changed,
        modified,
        removed,
    } = cmp;
    changed.union_with(&modified);
    for e in entries.iter_mut() {
        e.fields.difference_with(&changed);
        e.fields.difference_with(&removed);
    }
    let mut mine = changed;
    strip_meta(&mut mine);
    if !mine.is_empty() {
        let now = crate::object::now_rfc3339();
        match entries
            .iter_mut()
            .find(|e| e.is(manager, "Update", api_version, subresource))
        {
            Some(e) => {
                e.fields.union_with(&mine);
                e.time = Some(now);
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: api_version.to_string(),
                subresource: subresource.to_string(),
                time: Some(now),
                fields: mine,
            }),
        }
    }
    entries.retain(|e| !e.fields.is_empty());
}

/// Whether two maps are equal but for the keys in `ignore`.
pub(crate) fn map_eq_ignoring(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    ignore: &[&str],
) -> bool {
    let count = |m: &Map<String, Value>| m.keys().filter(|k| !ignore.contains(&k.as_str())).count();
    count(a) == count(b)
        && a.iter()
            .filter(|(k, _)| !ignore.contains(&k.as_str()))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Equal but for `metadata.resourceVersion` and `metadata.managedFields`
/// (with `managed`, managedFields must be equal but for their `time`s).
pub(crate) fn same_object(a: &Value, b: &Value, managed: bool) -> bool {
    let (Some(am), Some(bm)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    if !map_eq_ignoring(am, bm, &["metadata"]) {
        return false;
    }
    let empty = Map::new();
    fn meta<'a>(
        m: &'a Map<String, Value>,
        empty: &'a Map<String, Value>,
    ) -> &'a Map<String, Value> {
        m.get("metadata")
            .and_then(Value::as_object)
            .unwrap_or(empty)
    }
    let (ameta, bmeta) = (meta(am, &empty), meta(bm, &empty));
    if !map_eq_ignoring(ameta, bmeta, &["resourceVersion", "managedFields"]) {
        return false;
    }
    if !managed {
        return true;
    }
    fn entries(m: &Map<String, Value>) -> &[Value] {
        m.get("managedFields")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
    let (ae, be) = (entries(ameta), entries(bmeta));
    ae.len() == be.len()
        && ae.iter().zip(be).all(|(x, y)| match (x, y) {
            (Value::Object(x), Value::Object(y)) => map_eq_ignoring(x, y, &["time"]),
            (x, y) => x == y,
        })
}
