//! Path elements of field sets (`f:<field>`, `k:{...}` for list-map items
//! with their key fields sorted, `v:<json>` for set items, `i:<n>` for
//! list indexes): building them from values, their canonical form when
//! parsed from FieldsV1, and the human form conflicts print
//! (`.spec.containers[name="a"].image`).

use serde_json::Value;

use super::schema::{Lk, Ty};

#[inline]
pub(crate) fn field_pe(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push_str("f:");
    s.push_str(name);
    s
}

#[inline]
pub(crate) fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Why a list item has no path element.
#[derive(Debug)]
pub(crate) struct PeError(pub(crate) String);

/// The path element of a list item (`k:{...}` or `v:...`).
#[inline]
pub(crate) fn item_pe(item: &Value, lk: &Lk, list_ty: &Ty<'_>) -> Result<String, PeError> {
    match lk {
        Lk::Map(keys) => {
            let Some(m) = item.as_object() else {
                return Err(PeError(if item.is_null() {
                    "associative list with keys may not have a null element".into()
                } else {
                    "associative list with keys may not have non-map elements".into()
                }));
            };
            let names = keys.each();
            let mut fields: Vec<(&str, String)> = Vec::with_capacity(names.len());
            for k in &names {
                if let Some(v) = m.get(*k) {
                    fields.push((k, v.to_string()));
                } else if let Some(d) = list_ty.key_default(k) {
                    fields.push((k, d.to_string()));
                }
            }
            if fields.is_empty() {
                return Err(PeError(format!(
                    "associative list with keys has an element that omits all key fields {:?} (and doesn't have default values for any key fields)",
                    names
                )));
            }
            fields.sort_by(|a, b| a.0.cmp(b.0));
            let mut s = String::from("k:{");
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(&json_str(k));
                s.push(':');
                s.push_str(v);
            }
            s.push('}');
            Ok(s)
        }
        Lk::Set => match item {
            Value::Object(_) => Err(PeError(
                "associative list without keys has an element that's a map type".into(),
            )),
            Value::Array(_) => Err(PeError(
                "not supported: associative list with lists as elements".into(),
            )),
            Value::Null => Err(PeError(
                "associative list without keys has an element that's an explicit null".into(),
            )),
            v => Ok(format!("v:{v}")),
        },
        Lk::Atomic => Err(PeError("invalid indexing of non-associative list".into())),
    }
}

/// Canonical form of a serialized path element (keys sorted, compact JSON).
pub(crate) fn canonical_pe(s: &str) -> Result<String, String> {
    let (kind, rest) = s
        .split_once(':')
        .ok_or_else(|| format!("missing colon: {s}"))?;
    match kind {
        "f" => Ok(s.to_string()),
        "i" => rest
            .parse::<usize>()
            .map(|i| format!("i:{i}"))
            .map_err(|e| e.to_string()),
        "v" => {
            let v: Value = serde_json::from_str(rest).map_err(|e| e.to_string())?;
            Ok(format!("v:{v}"))
        }
        "k" => {
            let v: Value = serde_json::from_str(rest).map_err(|e| e.to_string())?;
            if !v.is_object() {
                return Err(format!("key is not an object: {s}"));
            }
            // serde_json maps are sorted by key.
            Ok(format!("k:{v}"))
        }
        _ => Err(format!("unknown path element type: {s}")),
    }
}

/// Go's `%v` of a value inside a path (strings quoted).
fn display_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::String(s) => json_str(s),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(display_value).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", display_value(v)))
            .collect::<String>(),
        other => other.to_string(),
    }
}

/// The human form of one path element (`.name`, `[name="a"]`, `[="x"]`, `[0]`).
pub(crate) fn display_pe(pe: &str) -> String {
    match pe.split_once(':') {
        Some(("f", name)) => format!(".{name}"),
        Some(("i", i)) => format!("[{i}]"),
        Some(("v", v)) => match serde_json::from_str::<Value>(v) {
            Ok(v) => format!("[={}]", display_value(&v)),
            Err(_) => format!("[={v}]"),
        },
        Some(("k", k)) => match serde_json::from_str::<Value>(k) {
            Ok(Value::Object(m)) => format!(
                "[{}]",
                m.iter()
                    .map(|(k, v)| format!("{k}={}", display_value(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            _ => format!("[{k}]"),
        },
        _ => pe.to_string(),
    }
}

/// `.spec.template.spec.containers[name="a"].image`.
pub fn display_path(path: &[String]) -> String {
    path.iter().map(|pe| display_pe(pe)).collect()
}
