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

/// The `PartialObjectMetadata` form of an object's JSON, with its
/// `metadata` copied as it is: the rest is skipped, not decoded, so a
/// metadata-only watch (the garbage collector's) costs a scan per event
/// instead of a decode and re-encode. `None` when `obj` is not a JSON object.
pub fn partial_metadata_json(obj: &[u8]) -> Option<Vec<u8>> {
    let meta = leading_field(obj, "metadata")?;
    let meta = meta.map_or("{}", |r| match r.get() {
        "null" => "{}",
        raw => raw,
    });
    const HEAD: &str =
        r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#;
    let mut out = Vec::with_capacity(HEAD.len() + meta.len() + 1);
    out.extend_from_slice(HEAD.as_bytes());
    out.extend_from_slice(meta.as_bytes());
    out.push(b'}');
    Some(out)
}

/// The object's JSON without `metadata.managedFields`, for the in-process
/// clients that ask for it ([`OMIT_MANAGED_FIELDS`](crate::codec::OMIT_MANAGED_FIELDS)):
/// the field's bytes are cut out of the encoding, nothing is decoded. The
/// same bytes when the object has no managedFields (or is not laid out as
/// the server encodes objects).
pub fn without_managed_fields(obj: &bytes::Bytes) -> bytes::Bytes {
    match managed_fields_span(obj) {
        Some(cut) => {
            let mut out = Vec::with_capacity(obj.len() - cut.len());
            out.extend_from_slice(&obj[..cut.start]);
            out.extend_from_slice(&obj[cut.end..]);
            bytes::Bytes::from(out)
        }
        None => obj.clone(),
    }
}

/// The byte range to remove for `"managedFields":[…]` in the object's
/// metadata, with one adjoining comma. Only the object's leading entries up
/// to `metadata`, and metadata's up to `managedFields`, are scanned (the
/// server writes `kind`, `apiVersion` and `metadata` first, so spec and
/// status are never read).
fn managed_fields_span(obj: &[u8]) -> Option<std::ops::Range<usize>> {
    const KEY: &[u8] = b"\"managedFields\":";
    let meta = leading_field(obj, "metadata")??.get();
    let value = leading_field(meta.as_bytes(), "managedFields")??.get();
    // Offsets of the borrowed slices inside `obj`.
    let base = obj.as_ptr() as usize;
    let meta_start = meta.as_ptr() as usize - base;
    let start = value.as_ptr() as usize - base;
    let end = start + value.len();
    let key = start.checked_sub(KEY.len())?;
    if obj.get(key..start)? != KEY || key <= meta_start {
        return None;
    }
    match (obj[key - 1], obj.get(end)) {
        (b',', _) => Some(key - 1..end),
        (b'{', Some(b',')) => Some(key..end + 1),
        (b'{', Some(b'}')) => Some(key..end),
        _ => None,
    }
}

/// The raw value of the top-level entry `name` of the JSON object `json`,
/// reading the object's entries only up to that one (the rest is not
/// parsed). `Some(None)`: a valid object without that entry. `None`: not a
/// JSON object (or an escaped key before the entry).
fn leading_field<'a>(
    json: &'a [u8],
    name: &str,
) -> Option<Option<&'a serde_json::value::RawValue>> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    use serde_json::value::RawValue;
    struct Find<'n, 'a> {
        name: &'n str,
        found: &'n mut Option<&'a RawValue>,
    }
    impl<'de> Visitor<'de> for Find<'_, 'de> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(k) = map.next_key::<&'de str>()? {
                if k == self.name {
                    *self.found = Some(map.next_value::<&'de RawValue>()?);
                    // Stop here: the caller ignores the error serde_json
                    // reports for the entries left unread.
                    return Ok(());
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(json);
    let read = de.deserialize_map(Find {
        name,
        found: &mut found,
    });
    // Found: the error for the unread rest does not matter. Not found: only
    // a whole, valid object says so.
    match (found, read.and_then(|()| de.end())) {
        (Some(raw), _) => Some(Some(raw)),
        (None, Ok(())) => Some(None),
        (None, Err(_)) => None,
    }
}

/// The JSON of an object laid out as kube-apiserver writes it where
/// clients compare bytes: `kind`, `apiVersion` and `metadata` first (Go's
/// struct order: every kind, list and `Status` embeds `TypeMeta` and then
/// its object or list metadata), then the other entries in key order (what
/// a `serde_json::Map` holds). A value that is not an object is written as
/// it is. Only the top level is reordered: nested structs such as
/// `ownerReferences` lead with `apiVersion` in Go too.
pub fn to_json(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    write_json(&mut out, v);
    out
}

/// The entries every object response leads with, in Go's order.
const LEADING: [&str; 3] = ["kind", "apiVersion", "metadata"];

/// [`to_json`] appended to `out`.
pub fn write_json(out: &mut Vec<u8>, v: &Value) {
    let Value::Object(m) = v else {
        // Writing a Value into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, v);
        return;
    };
    out.push(b'{');
    let mut first = true;
    let mut entry = |out: &mut Vec<u8>, k: &str, x: &Value| {
        if !first {
            out.push(b',');
        }
        first = false;
        let _ = serde_json::to_writer(&mut *out, k);
        out.push(b':');
        let _ = serde_json::to_writer(&mut *out, x);
    };
    for k in LEADING {
        if let Some(x) = m.get(k) {
            entry(out, k, x);
        }
    }
    for (k, x) in m {
        if !LEADING.contains(&k.as_str()) {
            entry(out, k, x);
        }
    }
    out.push(b'}');
}

/// [`to_json`] for a response that may be a list: the list and each of
/// its top-level `items` lead with `kind`, `apiVersion` and `metadata`.
pub fn to_json_list(v: &Value) -> Vec<u8> {
    let Some(Value::Array(items)) = v.get("items") else {
        return to_json(v);
    };
    let Value::Object(m) = v else {
        return to_json(v);
    };
    let mut out = Vec::with_capacity(512);
    out.push(b'{');
    let mut first = true;
    let keys = LEADING.into_iter().filter(|k| m.contains_key(*k)).chain(
        m.keys()
            .map(String::as_str)
            .filter(|k| !LEADING.contains(k)),
    );
    for k in keys {
        if !first {
            out.push(b',');
        }
        first = false;
        let _ = serde_json::to_writer(&mut out, k);
        out.push(b':');
        if k == "items" {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(&mut out, item);
            }
            out.push(b']');
        } else if let Some(x) = m.get(k) {
            let _ = serde_json::to_writer(&mut out, x);
        }
    }
    out.push(b'}');
    out
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

/// An object serialized before the store's write lock is taken, with a
/// slot for the resourceVersion the store assigns: under the lock only a
/// copy remains, so concurrent writers don't queue behind serialization.
pub struct Encoded {
    bytes: Vec<u8>,
    /// The byte range of the placeholder inside `bytes`.
    slot: std::ops::Range<usize>,
    /// The object itself when the placeholder was not unique (the object's
    /// own data contained it): then it is serialized the slow way.
    fallback: Option<Value>,
}

/// The placeholder written as resourceVersion: random per process, so no
/// client can know it; `Encoded` still checks it occurs exactly once.
fn rv_placeholder() -> &'static str {
    static PLACEHOLDER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PLACEHOLDER.get_or_init(|| format!("~kubeforge-rv-{}", uuid::Uuid::new_v4().simple()))
}

fn find_from(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let first = *needle.first()?;
    let last_start = hay.len().checked_sub(needle.len())?;
    (from..=last_start).find(|&i| hay[i] == first && hay[i..].starts_with(needle))
}

impl Encoded {
    /// Serialize `obj` now, leaving its resourceVersion to [`Encoded::with_rv`].
    pub fn new(mut obj: Value) -> Encoded {
        let placeholder = rv_placeholder();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(placeholder));
        let bytes = to_json(&obj);
        let needle = placeholder.as_bytes();
        let at = find_from(&bytes, needle, 0);
        let unique = at.is_some_and(|i| find_from(&bytes, needle, i + needle.len()).is_none());
        match at {
            Some(i) if unique => Encoded {
                bytes,
                slot: i..i + needle.len(),
                fallback: None,
            },
            _ => Encoded {
                bytes: Vec::new(),
                slot: 0..0,
                fallback: Some(obj),
            },
        }
    }

    /// The stored bytes: the object with `resourceVersion` = `rev`.
    pub fn with_rv(&self, rev: u64) -> bytes::Bytes {
        if let Some(obj) = &self.fallback {
            return encode_with_rv(obj.clone(), rev);
        }
        let rv = rev.to_string();
        let mut out = Vec::with_capacity(self.bytes.len() + rv.len());
        out.extend_from_slice(&self.bytes[..self.slot.start]);
        out.extend_from_slice(rv.as_bytes());
        out.extend_from_slice(&self.bytes[self.slot.end..]);
        bytes::Bytes::from(out)
    }
}

impl Encoded {
    /// The object back, for the rare write that must change it after
    /// encoding (a generated name that collided).
    pub fn into_value(self) -> Value {
        match self.fallback {
            Some(obj) => obj,
            None => serde_json::from_slice(&self.bytes).unwrap_or(Value::Null),
        }
    }
}

/// Serialize an object with its `resourceVersion` set to `rev`.
pub fn encode_with_rv(mut obj: Value, rev: u64) -> bytes::Bytes {
    meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rev.to_string()));
    bytes::Bytes::from(to_json(&obj))
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

#[cfg(test)]
mod encoded_tests {
    use super::*;

    #[test]
    fn slot_takes_the_revision() {
        let obj = json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
        let bytes = Encoded::new(obj.clone()).with_rv(42);
        let back: Value = serde_json::from_slice(&bytes).expect("json");
        let mut want = obj;
        meta_mut(&mut want).insert("resourceVersion".into(), json!("42"));
        assert_eq!(back, want);
    }

    #[test]
    fn placeholder_in_the_data_falls_back() {
        let p = rv_placeholder();
        let obj = json!({"metadata": {"name": "a"}, "data": {"k": p}});
        let bytes = Encoded::new(obj).with_rv(7);
        let back: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(back["metadata"]["resourceVersion"], json!("7"));
        assert_eq!(back["data"]["k"], json!(p));
    }
}

#[cfg(test)]
mod partial_metadata_tests {
    use super::*;

    #[test]
    fn metadata_is_copied_and_the_rest_dropped() {
        let obj = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b\"c"}, "ownerReferences": [{"uid": "u"}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}});
        let bytes = serde_json::to_vec(&obj).expect("json");
        let out = partial_metadata_json(&bytes).expect("an object");
        let v: Value = serde_json::from_slice(&out).expect("valid json");
        assert_eq!(
            v,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
        );
    }

    #[test]
    fn missing_metadata_is_empty_and_non_objects_are_refused() {
        let out = partial_metadata_json(br#"{"kind":"Pod"}"#).expect("an object");
        let v: Value = serde_json::from_slice(&out).expect("valid json");
        assert_eq!(v["metadata"], json!({}));
        assert!(partial_metadata_json(b"[1,2]").is_none());
        assert!(partial_metadata_json(b"{not json").is_none());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod managed_fields_tests {
    use super::*;

    fn strip(v: &Value) -> Value {
        let b = bytes::Bytes::from(serde_json::to_vec(v).unwrap());
        serde_json::from_slice(&without_managed_fields(&b)).unwrap()
    }

    fn expected(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        v
    }

    #[test]
    fn managed_fields_are_cut_wherever_they_sit_in_metadata() {
        let mf = json!([{"manager": "m", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:managedFields": {}}}}}]);
        let cases = [
            // between other keys; an annotation and a label named like the field
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "annotations": {"managedFields": "x"}, "labels": {"\"managedFields\":": "y"},
                "managedFields": mf, "name": "p", "uid": "u"}, "spec": {"managedFields": [1]}}),
            // first, last, alone
            json!({"metadata": {"managedFields": mf, "name": "p"}}),
            json!({"kind": "X", "metadata": {"annotations": {"a": "b"}, "managedFields": mf}}),
            json!({"metadata": {"managedFields": mf}, "spec": {}}),
            json!({"metadata": {"managedFields": []}}),
        ];
        for v in cases {
            let got = strip(&v);
            assert_eq!(got, expected(&v), "{v}");
            assert!(got["metadata"].get("managedFields").is_none());
        }
        // The spec's own field of that name is kept.
        let v = json!({"metadata": {"managedFields": mf}, "spec": {"managedFields": [1]}});
        assert_eq!(strip(&v)["spec"]["managedFields"], json!([1]));
    }

    #[test]
    fn only_the_entries_up_to_metadata_are_read() {
        // What follows metadata is not parsed (here it is not even JSON).
        let b = bytes::Bytes::from(
            r#"{"kind":"X","metadata":{"managedFields":[{"a":1}],"name":"p"},"spec":{oops"#,
        );
        assert_eq!(
            without_managed_fields(&b),
            bytes::Bytes::from(r#"{"kind":"X","metadata":{"name":"p"},"spec":{oops"#)
        );
    }

    #[test]
    fn objects_without_managed_fields_or_in_another_layout_are_returned_as_they_are() {
        for raw in [
            r#"{"metadata":{"name":"p"},"spec":{"managedFields":[]}}"#,
            r#"{"kind":"X"}"#,
            r#"{"metadata": {"managedFields": [], "name": "p"}}"#,
            "not json",
            "[]",
        ] {
            let b = bytes::Bytes::from(raw);
            assert_eq!(without_managed_fields(&b), b, "{raw}");
        }
    }
}
