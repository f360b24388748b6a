//! Secrets and ConfigMaps as kube-apiserver stores them: a Secret's
//! `stringData` folded into `data` (kube's v1 conversion: `stringData`
//! wins over `data`, and is never stored), its `type` defaulted to
//! `Opaque`, and kube's `ValidateSecret` / `ValidateConfigMap` with their
//! update rules — data keys as file names, at most 1 MiB of data, the
//! fields each built-in Secret type requires (a ServiceAccount token
//! Secret names its ServiceAccount), `type` immutable, and nothing of an
//! `immutable: true` object's data changing.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kubeforge_apimachinery::names::{Cause, is_config_map_key};
use kubeforge_authz::satoken::legacy::{
    SECRET_TYPE as SERVICE_ACCOUNT_TOKEN_TYPE, SERVICE_ACCOUNT_NAME_KEY,
};
use serde_json::{Map, Value};

use crate::error::Cause as ApiCause;

/// kube's `MaxSecretSize`, also a ConfigMap's limit.
const MAX_SIZE: usize = 1024 * 1024;
const IMMUTABLE: &str = "field is immutable when `immutable` is set";

/// Defaults of a Secret on create and update.
pub(crate) fn prepare(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    if m.get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        m.insert("type".into(), Value::from("Opaque"));
    }
    // Go's base64 skips line breaks (a YAML block value); store the
    // canonical text.
    if let Some(Value::Object(data)) = m.get_mut("data") {
        for v in data.values_mut() {
            if let Value::String(s) = v
                && s.contains(['\r', '\n'])
            {
                s.retain(|c| c != '\r' && c != '\n');
            }
        }
    }
    let Some(Value::Object(strings)) = m.remove("stringData") else {
        return;
    };
    let data = m.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if data.is_null() {
        *data = Value::Object(Map::new());
    }
    // A `data` that is not an object is left for the schema to refuse.
    if let Some(data) = data.as_object_mut() {
        for (k, v) in strings {
            let text = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            data.insert(k, Value::from(STANDARD.encode(text)));
        }
    }
}

/// The decoded values of `bag` (base64 strings), `None` for one that does
/// not decode.
fn decoded(bag: &Map<String, Value>) -> Vec<(&str, Option<Vec<u8>>)> {
    bag.iter()
        .map(|(k, v)| {
            let bytes = v.as_str().and_then(|s| STANDARD.decode(s).ok());
            (k.as_str(), bytes)
        })
        .collect()
}

fn bag<'a>(obj: &'a Value, field: &str) -> Option<&'a Map<String, Value>> {
    obj.get(field).and_then(Value::as_object)
}

fn is_immutable(obj: &Value) -> bool {
    obj.get("immutable").and_then(Value::as_bool) == Some(true)
}

fn push(causes: &mut Vec<ApiCause>, c: Cause) {
    causes.push(c.into());
}

/// The rules of an `immutable: true` object `old` on update: it stays
/// immutable, and the bags in `fields` do not change.
fn immutable_update(obj: &Value, old: &Value, fields: &[&str], causes: &mut Vec<ApiCause>) {
    if !is_immutable(old) {
        return;
    }
    if !is_immutable(obj) {
        push(causes, Cause::forbidden("immutable", IMMUTABLE));
    }
    for f in fields {
        let empty = Value::Object(Map::new());
        let norm = |v: Option<&Value>| match v {
            None | Some(Value::Null) => empty.clone(),
            Some(v) => v.clone(),
        };
        if norm(obj.get(*f)) != norm(old.get(*f)) {
            push(causes, Cause::forbidden(f, IMMUTABLE));
        }
    }
}

/// kube's `ValidateSecret` (and `ValidateSecretUpdate` with `old`).
pub(crate) fn validate_secret(obj: &Value, old: Option<&Value>, causes: &mut Vec<ApiCause>) {
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or_default();
    if let Some(old) = old {
        // A Secret stored before `type` was defaulted reads as Opaque.
        let was = old
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .unwrap_or("Opaque");
        if was != ty {
            push(causes, Cause::invalid("type", ty, "field is immutable"));
        }
        immutable_update(obj, old, &["data"], causes);
    }
    let empty = Map::new();
    let data = bag(obj, "data").unwrap_or(&empty);
    let values = decoded(data);
    let mut total = 0;
    for (key, bytes) in &values {
        let field = format!("data[{key}]");
        for msg in is_config_map_key(key) {
            push(causes, Cause::invalid(&field, key, &msg));
        }
        match bytes {
            Some(b) => total += b.len(),
            None => push(
                causes,
                Cause::invalid_rendered(
                    &field,
                    "\"<secret contents redacted>\"",
                    "must be base64-encoded",
                ),
            ),
        }
    }
    if total > MAX_SIZE {
        push(causes, Cause::too_long("data", MAX_SIZE));
    }
    let value = |key: &str| -> Option<&[u8]> {
        values
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, b)| b.as_deref())
    };
    // kube names two of these fields `data[%s][key]` (a format verb left
    // in its path); clients matching on the field see the same text.
    match ty {
        SERVICE_ACCOUNT_TOKEN_TYPE => {
            let named = obj
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(SERVICE_ACCOUNT_NAME_KEY))
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            if !named {
                push(
                    causes,
                    Cause::required(
                        &format!("metadata.annotations[{SERVICE_ACCOUNT_NAME_KEY}]"),
                        "",
                    ),
                );
            }
        }
        "kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson" => {
            let key = if ty.ends_with("json") {
                ".dockerconfigjson"
            } else {
                ".dockercfg"
            };
            let field = format!("data[{key}]");
            if !data.contains_key(key) {
                push(causes, Cause::required(&field, ""));
            } else if let Err(e) =
                serde_json::from_slice::<Map<String, Value>>(value(key).unwrap_or_default())
            {
                push(
                    causes,
                    Cause::invalid_rendered(
                        &field,
                        "\"<secret contents redacted>\"",
                        &e.to_string(),
                    ),
                );
            }
        }
        "kubernetes.io/basic-auth"
            if !data.contains_key("username") && !data.contains_key("password") =>
        {
            push(causes, Cause::required("data[%s][username]", ""));
            push(causes, Cause::required("data[%s][password]", ""));
        }
        "kubernetes.io/ssh-auth" if value("ssh-privatekey").is_none_or(|v| v.is_empty()) => {
            push(causes, Cause::required("data[%s][ssh-privatekey]", ""));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !data.contains_key(key) {
                    push(causes, Cause::required(&format!("data[{key}]"), ""));
                }
            }
        }
        _ => {}
    }
}

/// kube's `ValidateConfigMap` (and `ValidateConfigMapUpdate` with `old`).
pub(crate) fn validate_config_map(obj: &Value, old: Option<&Value>, causes: &mut Vec<ApiCause>) {
    if let Some(old) = old {
        immutable_update(obj, old, &["data", "binaryData"], causes);
    }
    let empty = Map::new();
    let data = bag(obj, "data").unwrap_or(&empty);
    let binary = bag(obj, "binaryData").unwrap_or(&empty);
    let mut total = 0;
    for (name, this, other, other_name) in [
        ("data", data, binary, "binaryData"),
        ("binaryData", binary, data, "data"),
    ] {
        for (key, v) in this {
            let field = format!("{name}[{key}]");
            for msg in is_config_map_key(key) {
                push(causes, Cause::invalid(&field, key, &msg));
            }
            if other.contains_key(key) {
                push(
                    causes,
                    Cause::invalid(
                        &field,
                        key,
                        &format!("duplicate of key present in {other_name}"),
                    ),
                );
            }
            total += match (name, v.as_str()) {
                ("data", Some(s)) => s.len(),
                (_, Some(s)) => STANDARD.decode(s).map(|b| b.len()).unwrap_or(s.len()),
                _ => 0,
            };
        }
    }
    if total > MAX_SIZE {
        push(causes, Cause::too_long("", MAX_SIZE));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(obj: &Value, old: Option<&Value>, secret: bool) -> Vec<String> {
        let mut causes = Vec::new();
        if secret {
            validate_secret(obj, old, &mut causes);
        } else {
            validate_config_map(obj, old, &mut causes);
        }
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn string_data_is_folded_into_data_and_wins() {
        let mut s =
            json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "two", "c": "3"}});
        prepare(&mut s);
        assert_eq!(
            s,
            json!({"type": "Opaque", "data": {"a": "eA==", "b": "dHdv", "c": "Mw=="}})
        );
        let mut wrapped = json!({"data": {"a": "aGVs\nbG8=\n"}});
        prepare(&mut wrapped);
        assert_eq!(wrapped["data"]["a"], "aGVsbG8=");
        let mut t = json!({"type": "kubernetes.io/tls", "stringData": {"tls.crt": "c"}});
        prepare(&mut t);
        assert_eq!(t["type"], "kubernetes.io/tls");
        assert_eq!(t["data"], json!({"tls.crt": "Yw=="}));
    }

    #[test]
    fn secrets_follow_kube_validation() {
        let ok = json!({"type": "Opaque", "data": {"user.name": "eA=="}});
        assert!(fields(&ok, None, true).is_empty());
        let bad = json!({"type": "Opaque", "data": {"a/b": "eA==", "..x": "eA==", "c": "!!"}});
        let f = fields(&bad, None, true);
        assert!(
            f.iter()
                .any(|m| m.starts_with("data[a/b]: Invalid value: \"a/b\": a valid config key"))
        );
        assert!(f.contains(&"data[..x]: Invalid value: \"..x\": must not start with '..'".into()));
        assert!(f.iter().any(|m| m.starts_with("data[c]:")));
        let sa = json!({"type": SERVICE_ACCOUNT_TOKEN_TYPE, "metadata": {"name": "t"}});
        assert_eq!(
            fields(&sa, None, true),
            vec![
                "metadata.annotations[kubernetes.io/service-account.name]: Required value"
                    .to_string()
            ]
        );
        let tls = json!({"type": "kubernetes.io/tls", "data": {"tls.crt": ""}});
        assert_eq!(
            fields(&tls, None, true),
            vec!["data[tls.key]: Required value".to_string()]
        );
        let basic = json!({"type": "kubernetes.io/basic-auth", "data": {}});
        assert_eq!(fields(&basic, None, true).len(), 2);
        let docker = json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": STANDARD.encode("[1]")}});
        assert_eq!(fields(&docker, None, true).len(), 1);
        let big =
            json!({"type": "Opaque", "data": {"k": STANDARD.encode(vec![0u8; MAX_SIZE + 1])}});
        assert_eq!(
            fields(&big, None, true),
            vec![format!(
                "data: Too long: must have at most {MAX_SIZE} bytes"
            )]
        );
    }

    #[test]
    fn updates_keep_type_and_immutable_data() {
        let old = json!({"type": "Opaque", "immutable": true, "data": {"a": "eA=="}});
        let changed = json!({"type": "kubernetes.io/tls", "immutable": false, "data": {"a": "eQ==", "tls.crt": "", "tls.key": ""}});
        let f = fields(&changed, Some(&old), true);
        assert!(f.contains(
            &"type: Invalid value: \"kubernetes.io/tls\": field is immutable".to_string()
        ));
        assert!(f.contains(&format!("immutable: Forbidden: {IMMUTABLE}")));
        assert!(f.contains(&format!("data: Forbidden: {IMMUTABLE}")));
        let same = json!({"type": "Opaque", "immutable": true, "data": {"a": "eA=="}, "metadata": {"labels": {"x": "1"}}});
        assert!(fields(&same, Some(&old), true).is_empty());
        // Stored by an older kubeforge without a type: the default applies.
        let untyped = json!({"data": {"a": "eA=="}});
        let updated = json!({"type": "Opaque", "data": {"a": "eQ=="}});
        assert!(fields(&updated, Some(&untyped), true).is_empty());
    }

    #[test]
    fn config_maps_refuse_bad_and_duplicate_keys() {
        let cm = json!({"data": {"a": "1", "b c": "2"}, "binaryData": {"a": "eA=="}});
        let f = fields(&cm, None, false);
        assert!(f.contains(
            &"data[a]: Invalid value: \"a\": duplicate of key present in binaryData".to_string()
        ));
        assert!(f.contains(
            &"binaryData[a]: Invalid value: \"a\": duplicate of key present in data".to_string()
        ));
        assert!(f.iter().any(|m| m.starts_with("data[b c]:")));
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let f = fields(
            &json!({"immutable": true, "data": {"a": "2"}}),
            Some(&old),
            false,
        );
        assert_eq!(f, vec![format!("data: Forbidden: {IMMUTABLE}")]);
    }
}
