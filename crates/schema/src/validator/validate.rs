//! Validation of a value against a compiled schema, reporting the causes
//! kube-apiserver reports for custom resources.

use serde_json::{Map, Value};

use super::messages::{
    self, go_float, go_quote, invalid_count_in_body, invalid_in_body, invalid_raw, type_invalid,
    type_name,
};
use super::{Additional, Format, Graph, Node, NodeId, Types};
use crate::FieldError;

/// How `apiVersion`, `kind` and `metadata` are treated in an object.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Meta {
    /// Ordinary properties.
    Plain,
    /// The root of a custom resource: implicit, type-checked only.
    Root,
    /// An `x-kubernetes-embedded-resource`: implicit, `apiVersion`/`kind` required.
    Embedded,
}

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// One validation run.
pub(crate) struct Validation<'g> {
    graph: &'g Graph,
    pub(crate) errors: Vec<FieldError>,
}

/// Appends `.key` (or `key` at the root) to a path; returns the old length.
fn push_key(path: &mut String, key: &str) -> usize {
    let len = path.len();
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
    len
}

fn push_index(path: &mut String, i: usize) -> usize {
    let len = path.len();
    path.push('[');
    path.push_str(&i.to_string());
    path.push(']');
    len
}

/// Whether a value is of one of the schema's types (kube-openapi's rules: an
/// integral float is an integer, an integer is a number).
fn type_ok(types: Types, v: &Value) -> bool {
    if types.is_empty() {
        return true;
    }
    match v {
        Value::Null => false,
        Value::Bool(_) => types.contains(Types::BOOLEAN),
        Value::String(_) => types.contains(Types::STRING),
        Value::Array(_) => types.contains(Types::ARRAY),
        Value::Object(_) => types.contains(Types::OBJECT),
        Value::Number(n) => {
            if types.contains(Types::NUMBER) {
                true
            } else if types.contains(Types::INTEGER) {
                !n.is_f64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            } else {
                false
            }
        }
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

impl<'g> Validation<'g> {
    pub(crate) fn new(graph: &'g Graph) -> Self {
        Validation {
            graph,
            errors: Vec::new(),
        }
    }

    /// Validates `v` at the root; `custom` for custom-resource root semantics.
    pub(crate) fn root(&mut self, id: NodeId, v: &Value, custom: bool) {
        let mut path = String::new();
        self.node_with(
            id,
            v,
            &mut path,
            if custom { Meta::Root } else { Meta::Plain },
        );
    }

    fn node(&mut self, id: NodeId, v: &Value, path: &mut String) {
        let meta = if self.graph.nodes[id].embedded {
            Meta::Embedded
        } else {
            Meta::Plain
        };
        self.node_with(id, v, path, meta);
    }

    fn node_with(&mut self, id: NodeId, v: &Value, path: &mut String, meta: Meta) {
        let graph = self.graph;
        let n = &graph.nodes[id];

        if v.is_null() {
            if !n.types.is_empty() && !n.nullable {
                self.errors.push(type_invalid(path, &n.type_label, "null"));
            } else {
                self.check_enum(n, v, path);
            }
            return;
        }
        if !type_ok(n.types, v) {
            self.errors
                .push(type_invalid(path, &n.type_label, type_name(v)));
            return;
        }

        self.combinators(n, v, path);

        match v {
            Value::String(s) => self.string(n, s, v, path),
            Value::Number(num) => self.number(n, num, v, path),
            Value::Array(items) => self.array(n, items, path),
            Value::Object(map) => self.object(n, map, path, meta),
            _ => {}
        }
        self.check_enum(n, v, path);
    }

    fn check_enum(&mut self, n: &Node, v: &Value, path: &str) {
        let Some(values) = &n.enum_values else { return };
        if values.is_empty() || values.iter().any(|e| json_eq(e, v)) {
            return;
        }
        let allowed: Vec<String> = values
            .iter()
            .map(|e| match e {
                Value::String(s) => s.clone(),
                other => serde_json::to_string(other).unwrap_or_default(),
            })
            .collect();
        self.errors.push(messages::not_supported(path, v, &allowed));
    }

    /// Runs one sub-schema on its own, returning its errors.
    fn sub(&self, id: NodeId, v: &Value, path: &str) -> Vec<FieldError> {
        let mut sub = Validation::new(self.graph);
        let mut p = path.to_owned();
        sub.node(id, v, &mut p);
        sub.errors
    }

    fn combinators(&mut self, n: &Node, v: &Value, path: &str) {
        if !n.all_of.is_empty() {
            let mut validated = 0;
            for &id in &n.all_of {
                let errs = self.sub(id, v, path);
                if errs.is_empty() {
                    validated += 1;
                }
                self.errors.extend(errs);
            }
            if validated != n.all_of.len() {
                let extra = if validated == 0 {
                    ". None validated"
                } else {
                    ""
                };
                self.errors.push(invalid_raw(
                    path,
                    "\"\"",
                    &format!(
                        "{} must validate all the schemas (allOf){extra}",
                        go_quote(path)
                    ),
                ));
            }
        }
        if !n.any_of.is_empty() {
            let mut best: Option<Vec<FieldError>> = None;
            let mut ok = false;
            for &id in &n.any_of {
                let errs = self.sub(id, v, path);
                if errs.is_empty() {
                    ok = true;
                    break;
                }
                if best.as_ref().is_none_or(|b| errs.len() < b.len()) {
                    best = Some(errs);
                }
            }
            if !ok {
                self.errors.push(invalid_raw(
                    path,
                    "\"\"",
                    &format!(
                        "{} must validate at least one schema (anyOf)",
                        go_quote(path)
                    ),
                ));
                self.errors.extend(best.unwrap_or_default());
            }
        }
        if !n.one_of.is_empty() {
            let mut best: Option<Vec<FieldError>> = None;
            let mut validated = 0;
            for &id in &n.one_of {
                let errs = self.sub(id, v, path);
                if errs.is_empty() {
                    validated += 1;
                } else if best.as_ref().is_none_or(|b| errs.len() < b.len()) {
                    best = Some(errs);
                }
            }
            if validated != 1 {
                let extra = if validated == 0 {
                    "Found none valid".to_owned()
                } else {
                    format!("Found {validated} valid alternatives")
                };
                self.errors.push(invalid_raw(
                    path,
                    "\"\"",
                    &format!(
                        "{} must validate one and only one schema (oneOf). {extra}",
                        go_quote(path)
                    ),
                ));
                if validated == 0 {
                    self.errors.extend(best.unwrap_or_default());
                }
            }
        }
        if let Some(id) = n.not
            && self.sub(id, v, path).is_empty()
        {
            self.errors.push(invalid_raw(
                path,
                "\"\"",
                &format!("{} must not validate the schema (not)", go_quote(path)),
            ));
        }
    }

    fn string(&mut self, n: &Node, s: &str, v: &Value, path: &str) {
        if n.max_length.is_some() || n.min_length.is_some() {
            let len = s.chars().count() as u64;
            if let Some(max) = n.max_length
                && len > max
            {
                self.errors.push(messages::too_long(path, max));
                return;
            }
            if let Some(min) = n.min_length
                && len < min
            {
                self.errors.push(invalid_in_body(
                    path,
                    v,
                    &format!("should be at least {min} chars long"),
                ));
                return;
            }
        }
        if let Some(p) = &n.pattern
            && !p.regex.is_match(s)
        {
            self.errors.push(invalid_in_body(
                path,
                v,
                &format!("should match '{}'", p.source),
            ));
            return;
        }
        if n.format != Format::None
            && (n.types.is_empty() || n.types.contains(Types::STRING))
            && !n.format.check_string(s)
        {
            self.errors.push(type_invalid(path, &n.format_name, s));
        }
    }

    fn number(&mut self, n: &Node, num: &serde_json::Number, v: &Value, path: &str) {
        let single_integer = n.types == Types::INTEGER;
        let single_number = n.types == Types::NUMBER;
        let range_ok = match n.format {
            Format::Int32 if single_integer => num
                .as_i64()
                .map(|i| i32::try_from(i).is_ok())
                .or_else(|| {
                    num.as_f64()
                        .map(|f| f >= f64::from(i32::MIN) && f <= f64::from(i32::MAX))
                })
                .unwrap_or(false),
            Format::Int64 | Format::None if single_integer => {
                num.as_i64().is_some() || num.as_f64().is_some_and(|f| f.abs() < 9.2e18)
            }
            Format::Float if single_number => {
                num.as_f64().is_some_and(|f| f.abs() <= f64::from(f32::MAX))
            }
            _ => true,
        };
        if !range_ok {
            let (type_name, format) = if single_integer {
                ("integer", n.format_name.as_str())
            } else {
                ("number", n.format_name.as_str())
            };
            let detail = if format.is_empty() {
                format!("Checked value must be of type {type_name} (default format) in {path}")
            } else {
                format!("Checked value must be of type {type_name} with format {format} in {path}")
            };
            self.errors.push(invalid_raw(path, "\"\"", &detail));
        }

        let f = num.as_f64().unwrap_or(0.0);
        if let Some(m) = n.multiple_of
            && m > 0.0
        {
            let q = f / m;
            if (q - q.round()).abs() > 1e-9 * q.abs().max(1.0) {
                self.errors.push(invalid_in_body(
                    path,
                    v,
                    &format!("should be a multiple of {}", go_float(m)),
                ));
            }
        }
        if let Some(max) = n.maximum {
            if n.exclusive_maximum && f >= max {
                self.errors.push(invalid_in_body(
                    path,
                    v,
                    &format!("should be less than {}", go_float(max)),
                ));
            } else if f > max {
                self.errors.push(invalid_in_body(
                    path,
                    v,
                    &format!("should be less than or equal to {}", go_float(max)),
                ));
            }
        }
        if let Some(min) = n.minimum {
            if n.exclusive_minimum && f <= min {
                self.errors.push(invalid_in_body(
                    path,
                    v,
                    &format!("should be greater than {}", go_float(min)),
                ));
            } else if f < min {
                self.errors.push(invalid_in_body(
                    path,
                    v,
                    &format!("should be greater than or equal to {}", go_float(min)),
                ));
            }
        }
    }

    fn array(&mut self, n: &Node, items: &[Value], path: &mut String) {
        if let Some(item) = n.items {
            for (i, elem) in items.iter().enumerate() {
                let len = push_index(path, i);
                self.node(item, elem, path);
                path.truncate(len);
            }
        }
        if let Some(min) = n.min_items
            && (items.len() as u64) < min
        {
            self.errors.push(invalid_count_in_body(
                path,
                items.len(),
                &format!("should have at least {min} items"),
            ));
        }
        if let Some(max) = n.max_items
            && items.len() as u64 > max
        {
            self.errors.push(messages::too_many(path, items.len(), max));
        }
        if n.unique_items {
            let dup = items
                .iter()
                .enumerate()
                .any(|(i, a)| items[..i].iter().any(|b| json_eq(a, b)));
            if dup {
                self.errors.push(invalid_raw(
                    path,
                    "\"\"",
                    &format!("{path} in body shouldn't contain duplicates"),
                ));
            }
        }
    }

    fn object(&mut self, n: &Node, map: &Map<String, Value>, path: &mut String, meta: Meta) {
        if let Some(min) = n.min_properties
            && (map.len() as u64) < min
        {
            self.errors.push(invalid_count_in_body(
                path,
                map.len(),
                &format!("should have at least {min} properties"),
            ));
        }
        if let Some(max) = n.max_properties
            && map.len() as u64 > max
        {
            self.errors.push(messages::too_many(path, map.len(), max));
        }
        if meta == Meta::Embedded {
            self.embedded_type_meta(map, path);
        }

        for (key, value) in map {
            let implicit = meta != Meta::Plain && META_FIELDS.contains(&key.as_str());
            match n.properties.get(key) {
                Some(&child) => {
                    let len = push_key(path, key);
                    self.node(child, value, path);
                    path.truncate(len);
                }
                None if implicit => {
                    if meta == Meta::Root {
                        let len = push_key(path, key);
                        let expected = if key == "metadata" {
                            "object"
                        } else {
                            "string"
                        };
                        let ok = if key == "metadata" {
                            value.is_object()
                        } else {
                            value.is_string()
                        };
                        if !ok {
                            self.errors
                                .push(type_invalid(path, expected, type_name(value)));
                        }
                        path.truncate(len);
                    }
                }
                None => match n.additional {
                    Additional::Schema(child) => {
                        let len = push_key(path, key);
                        self.node(child, value, path);
                        path.truncate(len);
                    }
                    Additional::Bool(false) => {
                        let name = if path.is_empty() {
                            format!(".{key}")
                        } else {
                            format!("{path}.{key}")
                        };
                        self.errors.push(messages::invalid(
                            path,
                            &Value::String(key.clone()),
                            &format!("{name} in body is a forbidden property"),
                        ));
                    }
                    _ => {}
                },
            }
        }

        for r in &n.required {
            if !map.contains_key(r) {
                let len = push_key(path, r);
                self.errors.push(messages::required(path));
                path.truncate(len);
            }
        }
    }

    /// apiserver's checks of an embedded resource's `apiVersion` and `kind`.
    fn embedded_type_meta(&mut self, map: &Map<String, Value>, path: &mut String) {
        for key in ["apiVersion", "kind"] {
            let len = push_key(path, key);
            match map.get(key) {
                None => self.errors.push(messages::required(path)),
                Some(Value::String(s)) if s.is_empty() => {
                    self.errors.push(messages::invalid(
                        path,
                        &Value::String(String::new()),
                        "must not be empty",
                    ));
                }
                Some(Value::String(_)) => {}
                Some(other) => self
                    .errors
                    .push(messages::invalid(path, other, "must be a string")),
            }
            path.truncate(len);
        }
        if let Some(m) = map.get("metadata")
            && !m.is_object()
        {
            let len = push_key(path, "metadata");
            self.errors
                .push(messages::invalid(path, m, "must be an object"));
            path.truncate(len);
        }
    }
}
