//! A hand-written encoder for the few gnostic `openapi.v2` messages `/openapi/v2`
//! needs (github.com/google/gnostic-models `openapiv2/OpenAPIv2.proto`):
//! `Document`, `Info`, `Paths`, `Definitions`, `NamedSchema`, `Schema`,
//! `Properties`, `ItemsItem`, `TypeItem`, `AdditionalPropertiesItem`,
//! `ExternalDocs`, `NamedAny` and `Any` (values as YAML text in its `yaml` field).

use serde_json::{Map, Value};

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn tag(buf: &mut Vec<u8>, field: u32, wire: u8) {
    varint(buf, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(buf, field, LEN);
    varint(buf, data.len() as u64);
    buf.extend_from_slice(data);
}

/// A `string` field (proto3: empty strings are not written).
fn string(buf: &mut Vec<u8>, field: u32, s: &str) {
    if !s.is_empty() {
        bytes(buf, field, s.as_bytes());
    }
}

/// An embedded message field, always written (presence matters for messages).
fn message(buf: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    f(&mut inner);
    bytes(buf, field, &inner);
}

fn double(buf: &mut Vec<u8>, field: u32, v: f64) {
    if v != 0.0 {
        tag(buf, field, FIXED64);
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

fn int64(buf: &mut Vec<u8>, field: u32, v: i64) {
    if v != 0 {
        tag(buf, field, VARINT);
        varint(buf, v as u64);
    }
}

fn boolean(buf: &mut Vec<u8>, field: u32, v: bool) {
    if v {
        tag(buf, field, VARINT);
        varint(buf, 1);
    }
}

/// Writes a JSON string as a YAML double-quoted scalar (escaping everything YAML
/// 1.1 does not allow raw).
fn yaml_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (' '..='~').contains(&c)
                || ('\u{a0}'..='\u{d7ff}').contains(&c)
                || (('\u{e000}'..='\u{fffd}').contains(&c) && c != '\u{feff}')
                || c >= '\u{10000}' =>
            {
                out.push(c);
            }
            c => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
        }
    }
    out.push('"');
}

/// Flow-style YAML (JSON with blanks after separators) that yaml.v2 and
/// sigs.k8s.io/yaml read back as the same value.
pub(crate) fn to_yaml(v: &Value) -> String {
    fn write(out: &mut String, v: &Value) {
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(&n.to_string()),
            Value::String(s) => yaml_string(out, s),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write(out, item);
                }
                out.push(']');
            }
            Value::Object(map) => {
                out.push('{');
                for (i, (k, item)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    yaml_string(out, k);
                    out.push_str(": ");
                    write(out, item);
                }
                out.push('}');
            }
        }
    }
    let mut out = String::new();
    write(&mut out, v);
    out.push('\n');
    out
}

/// An `Any` message carrying `v` as YAML.
fn any(buf: &mut Vec<u8>, field: u32, v: &Value) {
    message(buf, field, |b| string(b, 2, &to_yaml(v)));
}

/// Encodes a Swagger 2.0 JSON document (as built by `openapi_v2_json`).
pub(crate) fn encode_document(doc: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    string(
        &mut buf,
        1,
        doc.get("swagger").and_then(Value::as_str).unwrap_or("2.0"),
    );
    if let Some(info) = doc.get("info") {
        message(&mut buf, 2, |b| {
            string(
                b,
                1,
                info.get("title").and_then(Value::as_str).unwrap_or(""),
            );
            string(
                b,
                2,
                info.get("version").and_then(Value::as_str).unwrap_or(""),
            );
        });
    }
    message(&mut buf, 8, |_| {});
    if let Some(Value::Object(defs)) = doc.get("definitions") {
        message(&mut buf, 9, |b| named_schemas(b, 1, defs));
    }
    buf
}

/// Repeated `NamedSchema` entries.
fn named_schemas(buf: &mut Vec<u8>, field: u32, map: &Map<String, Value>) {
    for (name, schema) in map {
        message(buf, field, |b| {
            string(b, 1, name);
            message(b, 2, |b| encode_schema(b, schema));
        });
    }
}

fn int_of(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

/// The fields of one `Schema` message.
fn encode_schema(buf: &mut Vec<u8>, schema: &Value) {
    let Some(s) = schema.as_object() else { return };
    let text = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("");
    let num = |k: &str| s.get(k).and_then(Value::as_f64);
    let int = |k: &str| s.get(k).and_then(int_of);
    let flag = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);

    string(buf, 1, text("$ref"));
    string(buf, 2, text("format"));
    string(buf, 3, text("title"));
    string(buf, 4, text("description"));
    if let Some(d) = s.get("default") {
        any(buf, 5, d);
    }
    if let Some(v) = num("multipleOf") {
        double(buf, 6, v);
    }
    if let Some(v) = num("maximum") {
        double(buf, 7, v);
    }
    boolean(buf, 8, flag("exclusiveMaximum"));
    if let Some(v) = num("minimum") {
        double(buf, 9, v);
    }
    boolean(buf, 10, flag("exclusiveMinimum"));
    if let Some(v) = int("maxLength") {
        int64(buf, 11, v);
    }
    if let Some(v) = int("minLength") {
        int64(buf, 12, v);
    }
    string(buf, 13, text("pattern"));
    if let Some(v) = int("maxItems") {
        int64(buf, 14, v);
    }
    if let Some(v) = int("minItems") {
        int64(buf, 15, v);
    }
    boolean(buf, 16, flag("uniqueItems"));
    if let Some(v) = int("maxProperties") {
        int64(buf, 17, v);
    }
    if let Some(v) = int("minProperties") {
        int64(buf, 18, v);
    }
    if let Some(Value::Array(req)) = s.get("required") {
        for r in req.iter().filter_map(Value::as_str) {
            bytes(buf, 19, r.as_bytes());
        }
    }
    if let Some(Value::Array(values)) = s.get("enum") {
        for v in values {
            any(buf, 20, v);
        }
    }
    match s.get("additionalProperties") {
        Some(Value::Bool(allowed)) => message(buf, 21, |b| {
            tag(b, 2, VARINT);
            varint(b, u64::from(*allowed));
        }),
        Some(ap @ Value::Object(_)) => {
            message(buf, 21, |b| message(b, 1, |b| encode_schema(b, ap)))
        }
        _ => {}
    }
    match s.get("type") {
        Some(Value::String(t)) => message(buf, 22, |b| string(b, 1, t)),
        Some(Value::Array(ts)) => message(buf, 22, |b| {
            for t in ts.iter().filter_map(Value::as_str) {
                bytes(b, 1, t.as_bytes());
            }
        }),
        _ => {}
    }
    match s.get("items") {
        Some(items @ Value::Object(_)) => {
            message(buf, 23, |b| message(b, 1, |b| encode_schema(b, items)))
        }
        Some(Value::Array(list)) => message(buf, 23, |b| {
            for items in list {
                message(b, 1, |b| encode_schema(b, items));
            }
        }),
        _ => {}
    }
    if let Some(Value::Array(all_of)) = s.get("allOf") {
        for sub in all_of {
            message(buf, 24, |b| encode_schema(b, sub));
        }
    }
    if let Some(Value::Object(props)) = s.get("properties") {
        message(buf, 25, |b| named_schemas(b, 1, props));
    }
    boolean(buf, 27, flag("readOnly"));
    if let Some(Value::Object(docs)) = s.get("externalDocs") {
        message(buf, 29, |b| {
            string(
                b,
                1,
                docs.get("description")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
            );
            string(b, 2, docs.get("url").and_then(Value::as_str).unwrap_or(""));
        });
    }
    if let Some(e) = s.get("example") {
        any(buf, 30, e);
    }
    for (k, v) in s {
        if k.starts_with("x-") {
            message(buf, 31, |b| {
                string(b, 1, k);
                any(b, 2, v);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_is_flow_json() {
        assert_eq!(
            to_yaml(&json!([{"group": "", "kind": "Pod", "version": "v1"}])),
            "[{\"group\": \"\", \"kind\": \"Pod\", \"version\": \"v1\"}]\n"
        );
        assert_eq!(
            to_yaml(&json!("a\u{7f}b\u{feff}")),
            "\"a\\u007fb\\ufeff\"\n"
        );
    }

    #[test]
    fn varints() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        let mut b = Vec::new();
        int64(&mut b, 11, -1);
        assert_eq!(b.len(), 11);
    }
}
