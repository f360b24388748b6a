//! Small helpers over objects held as `serde_json::Value`.

use serde_json::{Map, Value, json};

/// `metadata` of an object, created when missing.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        // `metadata` was just made an object above.
        _ => unreachable!("metadata is an object"),
    }
}

/// A string field of metadata.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// Now, as an RFC 3339 timestamp with second precision (metav1.Time).
pub fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// Five random characters from kube's generateName alphabet.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let id = uuid::Uuid::new_v4();
    id.as_bytes()
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Serialize an object with its `resourceVersion` set to `rev`.
pub fn encode_with_rv(mut obj: Value, rev: u64) -> bytes::Bytes {
    meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rev.to_string()));
    bytes::Bytes::from(serde_json::to_vec(&obj).unwrap_or_default())
}

/// Everything but metadata and status: what a generation bump looks at.
pub fn spec_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    o
}

/// Read a dotted path (`spec.replicas`).
pub fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|s| !s.is_empty())
        .try_fold(obj, |v, seg| v.get(seg))
}

/// Write a dotted path, creating objects on the way.
pub fn set_path(obj: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path.split('.').filter(|s| !s.is_empty()).collect();
    let mut cur = obj;
    for (i, seg) in segs.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == segs.len() {
            map.insert((*seg).to_string(), value);
            return;
        }
        cur = map.entry((*seg).to_string()).or_insert_with(|| json!({}));
    }
}

/// Drop `null` map entries recursively: what decoding into Go structs does
/// for the built-in kinds (kubectl sends `creationTimestamp: null`).
pub fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            for x in m.values_mut() {
                strip_nulls(x);
            }
        }
        Value::Array(a) => {
            for x in a {
                strip_nulls(x);
            }
        }
        _ => {}
    }
}
