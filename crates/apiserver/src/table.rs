//! `as=Table` responses: the columns `kubectl get` prints.
//!
//! Every table starts with NAME; each row of the registry lists its further
//! columns as data ([`Column`]), either a JSONPath-like field path (how CRDs'
//! `additionalPrinterColumns` work) or a small named function for the
//! built-in columns that need computing (pods' READY, STATUS, RESTARTS).

use serde_json::{Value, json};

/// How a column's cell is computed.
#[derive(Clone, Debug)]
pub enum CellSource {
    /// Age from `metadata.creationTimestamp`.
    Age,
    /// A simple JSONPath (`.spec.replicas`, `.status.conditions[0].type`).
    Path(String),
    /// A built-in computation.
    Func(fn(&Value) -> Value),
    /// A JSON pointer to a string field; missing is "".
    Text(&'static str),
    /// A JSON pointer to an integer field; missing is 0.
    Int(&'static str),
}

/// One table column.
#[derive(Clone, Debug)]
pub struct Column {
    /// Column name as kubectl prints it (upper-cased by kubectl).
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// OpenAPI format hint (`name` for the NAME column).
    pub format: String,
    /// Description.
    pub description: String,
    /// 0 = default columns, 1 = `-o wide`.
    pub priority: i32,
    /// Where the value comes from.
    pub source: CellSource,
}

impl Column {
    /// A built-in computed column.
    pub fn func(name: &str, type_: &str, priority: i32, f: fn(&Value) -> Value) -> Column {
        Column::with_source(name, type_, priority, CellSource::Func(f))
    }

    /// A string field (JSON pointer), "" when missing.
    pub fn text(name: &str, priority: i32, pointer: &'static str) -> Column {
        Column::with_source(name, "string", priority, CellSource::Text(pointer))
    }

    /// An integer field (JSON pointer), 0 when missing.
    pub fn int(name: &str, priority: i32, pointer: &'static str) -> Column {
        Column::with_source(name, "integer", priority, CellSource::Int(pointer))
    }

    fn with_source(name: &str, type_: &str, priority: i32, source: CellSource) -> Column {
        Column {
            name: name.to_string(),
            type_: type_.to_string(),
            format: String::new(),
            description: String::new(),
            priority,
            source,
        }
    }

    /// A field-path column.
    pub fn path(name: &str, type_: &str, priority: i32, path: &str) -> Column {
        Column::with_source(name, type_, priority, CellSource::Path(path.to_string()))
    }

    /// The AGE column.
    pub fn age() -> Column {
        Column {
            name: "Age".to_string(),
            type_: "date".to_string(),
            format: String::new(),
            description: "CreationTimestamp is a timestamp representing the server time when this object was created.".to_string(),
            priority: 0,
            source: CellSource::Age,
        }
    }

    fn cell(&self, obj: &Value, now: jiff::Timestamp) -> Value {
        match &self.source {
            CellSource::Age => Value::String(age(obj.pointer("/metadata/creationTimestamp"), now)),
            CellSource::Func(f) => f(obj),
            CellSource::Text(p) => match obj.pointer(p) {
                Some(Value::String(x)) => Value::String(x.clone()),
                Some(Value::Null) | None => Value::String(String::new()),
                Some(other) => Value::String(other.to_string()),
            },
            CellSource::Int(p) => json!(obj.pointer(p).and_then(Value::as_i64).unwrap_or(0)),
            CellSource::Path(p) => {
                let v = json_path(obj, p);
                match (self.type_.as_str(), v) {
                    (_, None) | (_, Some(Value::Null)) => Value::Null,
                    ("date", Some(v)) => Value::String(age(Some(&v), now)),
                    (_, Some(v)) => v,
                }
            }
        }
    }
}

/// Evaluate a simple JSONPath: `.a.b`, `.a[0].b`, `.a[*].b` (joined by `,`),
/// with or without braces, as printer columns use them.
pub fn json_path(obj: &Value, path: &str) -> Option<Value> {
    let p = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim();
    let p = p.strip_prefix('$').unwrap_or(p);
    let mut current: Vec<&Value> = vec![obj];
    for seg in split_path(p) {
        let mut next = Vec::new();
        for v in current {
            match seg {
                Seg::Field(f) => {
                    if let Some(x) = v.get(f) {
                        next.push(x);
                    }
                }
                Seg::Index(i) => {
                    if let Some(x) = v.as_array().and_then(|a| {
                        if i < 0 {
                            a.len()
                                .checked_sub(i.unsigned_abs() as usize)
                                .and_then(|j| a.get(j))
                        } else {
                            a.get(i as usize)
                        }
                    }) {
                        next.push(x);
                    }
                }
                Seg::All => {
                    if let Some(a) = v.as_array() {
                        next.extend(a.iter());
                    }
                }
                Seg::Filter { ref path, ref test } => {
                    if let Some(a) = v.as_array() {
                        next.extend(a.iter().filter(|item| Seg::keeps(path, test, item)));
                    }
                }
            }
        }
        current = next;
    }
    match current.len() {
        0 => None,
        1 => Some(current[0].clone()),
        _ => Some(Value::String(
            current
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
        )),
    }
}

enum Seg<'a> {
    Field(&'a str),
    Index(i64),
    All,
    /// `[?(@.a.b == "x")]`, `!=`, or `[?(@.a)]` (present).
    Filter {
        path: Vec<&'a str>,
        test: Option<(bool, Value)>,
    },
}

impl Seg<'_> {
    /// Whether an array item passes a filter.
    fn keeps(path: &[&str], test: &Option<(bool, Value)>, item: &Value) -> bool {
        let mut v = Some(item);
        for f in path {
            v = v.and_then(|x| x.get(*f));
        }
        match (v, test) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(x), Some((eq, want))) => {
                // Literals compare as JSON values, numbers as numbers.
                let same = match (x, want) {
                    (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
                    _ => x == want,
                };
                same == *eq
            }
        }
    }
}

/// Parse `@.a.b == "x"` (or `!=`, or just `@.a.b`).
fn parse_filter(expr: &str) -> Option<Seg<'_>> {
    let expr = expr.trim();
    let (lhs, test) = match expr.find("==").or_else(|| expr.find("!=")) {
        Some(i) => {
            let eq = &expr[i..i + 2] == "==";
            let lit = expr[i + 2..].trim();
            let value = if let Some(q) = lit
                .strip_prefix('"')
                .and_then(|l| l.strip_suffix('"'))
                .or_else(|| lit.strip_prefix('\'').and_then(|l| l.strip_suffix('\'')))
            {
                Value::String(q.to_string())
            } else {
                serde_json::from_str(lit).ok()?
            };
            (expr[..i].trim(), Some((eq, value)))
        }
        None => (expr, None),
    };
    let lhs = lhs.strip_prefix('@')?;
    let path = lhs.split('.').filter(|f| !f.is_empty()).collect();
    Some(Seg::Filter { path, test })
}

/// Split a JSONPath into segments; brackets may hold dots and quotes.
fn split_path(p: &str) -> Vec<Seg<'_>> {
    let mut out = Vec::new();
    let bytes = p.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'.' => i += 1,
            b'[' => {
                // Find the closing bracket outside quotes.
                let mut j = i + 1;
                let mut quote: Option<u8> = None;
                while j < bytes.len() {
                    match (quote, bytes[j]) {
                        (Some(q), c) if c == q => quote = None,
                        (None, b'"' | b'\'') => quote = Some(bytes[j]),
                        (None, b']') => break,
                        _ => {}
                    }
                    j += 1;
                }
                let inner = p[i + 1..j.min(p.len())].trim();
                if inner == "*" {
                    out.push(Seg::All);
                } else if let Ok(n) = inner.parse::<i64>() {
                    out.push(Seg::Index(n));
                } else if let Some(f) = inner
                    .strip_prefix("?(")
                    .and_then(|f| f.strip_suffix(')'))
                    .and_then(parse_filter)
                {
                    out.push(f);
                } else if let Some(name) = inner
                    .strip_prefix('\'')
                    .and_then(|n| n.strip_suffix('\''))
                    .or_else(|| inner.strip_prefix('"').and_then(|n| n.strip_suffix('"')))
                {
                    out.push(Seg::Field(name));
                }
                i = j + 1;
            }
            _ => {
                let start = i;
                while i < bytes.len() && bytes[i] != b'.' && bytes[i] != b'[' {
                    i += 1;
                }
                out.push(Seg::Field(&p[start..i]));
            }
        }
    }
    out
}

/// Human-readable age the way kubectl prints it (`duration.HumanDuration`).
pub fn age(ts: Option<&Value>, now: jiff::Timestamp) -> String {
    let Some(t) = ts
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
    else {
        return "<unknown>".to_string();
    };
    let secs = now.as_second() - t.as_second();
    human_duration(secs)
}

/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration` on whole seconds.
pub fn human_duration(secs: i64) -> String {
    /// "{big}{u1}" or "{big}{u1}{small}{u2}" when the remainder is not zero.
    fn two(big: i64, u1: &str, small: i64, u2: &str) -> String {
        if small == 0 {
            format!("{big}{u1}")
        } else {
            format!("{big}{u1}{small}{u2}")
        }
    }
    if secs < -1 {
        return "<invalid>".to_string();
    }
    let secs = secs.max(0);
    let (minutes, hours) = (secs / 60, secs / 3600);
    let days = hours / 24;
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if minutes < 10 => two(minutes, "m", secs % 60, "s"),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => two(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 192 => two(days, "d", hours % 24, "h"),
        _ if days < 365 * 2 => format!("{days}d"),
        _ if days < 365 * 8 => two(days / 365, "y", days % 365, "d"),
        _ => format!("{}y", days / 365),
    }
}

/// What the row's `object` field carries (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parse the `includeObject` query parameter.
    pub fn parse(s: Option<&str>) -> IncludeObject {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// The `columnDefinitions` of a resource's table.
pub fn column_definitions(columns: &[Column]) -> Value {
    let mut defs = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    })];
    for c in columns {
        defs.push(json!({
            "name": c.name, "type": c.type_, "format": c.format,
            "description": c.description, "priority": c.priority,
        }));
    }
    Value::Array(defs)
}

/// One table row for an object.
pub fn row(columns: &[Column], obj: &Value, include: IncludeObject, now: jiff::Timestamp) -> Value {
    let mut cells = Vec::with_capacity(columns.len() + 1);
    cells.push(
        obj.pointer("/metadata/name")
            .cloned()
            .unwrap_or(Value::Null),
    );
    for c in columns {
        cells.push(c.cell(obj, now));
    }
    let mut row = json!({ "cells": cells });
    match include {
        IncludeObject::None => {}
        IncludeObject::Object => row["object"] = obj.clone(),
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
            })
        }
    }
    row
}

/// The `Table` of one object (a GET or a watch event), its list metadata
/// carrying the object's resourceVersion.
pub fn single(columns: &[Column], object: &Value, include: IncludeObject) -> Value {
    let rv = object
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(json!(""));
    table(
        columns,
        std::slice::from_ref(object),
        include,
        json!({"resourceVersion": rv}),
    )
}

/// A whole `Table` object.
pub fn table(
    columns: &[Column],
    objects: &[Value],
    include: IncludeObject,
    list_meta: Value,
) -> Value {
    let now = jiff::Timestamp::now();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": column_definitions(columns),
        "rows": objects.iter().map(|o| row(columns, o, include, now)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(125), "2m5s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(100 * 86400), "100d");
    }

    #[test]
    fn json_paths() {
        let v = json!({"spec":{"a":[{"b":1},{"b":2}],"s":"x"}});
        assert_eq!(json_path(&v, ".spec.s"), Some(json!("x")));
        assert_eq!(json_path(&v, ".spec.a[1].b"), Some(json!(2)));
        assert_eq!(json_path(&v, "{.spec.a[*].b}"), Some(json!("1,2")));
        assert_eq!(json_path(&v, ".spec.missing"), None);
        let c = json!({"status": {"conditions": [
            {"type": "Progressing", "status": "True", "n": 1},
            {"type": "Available", "status": "False", "n": 2}]}});
        assert_eq!(
            json_path(&c, ".status.conditions[?(@.type==\"Available\")].status"),
            Some(json!("False"))
        );
        assert_eq!(
            json_path(&c, ".status.conditions[?(@.type != 'Available')].type"),
            Some(json!("Progressing"))
        );
        assert_eq!(
            json_path(&c, ".status.conditions[?(@.n==2)].type"),
            Some(json!("Available"))
        );
        assert_eq!(json_path(&c, ".status.conditions[?(@.x)].type"), None);
        assert_eq!(json_path(&c, ".status['conditions'][0].n"), Some(json!(1)));
    }
}
