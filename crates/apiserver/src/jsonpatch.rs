//! RFC 6902 JSON patch with kube-apiserver's reading of `test`: testing a
//! missing member against `null` succeeds (evanphx/json-patch does so, and
//! kube-runtime's `finalizer()` relies on it when an object has no
//! finalizers yet). Everything else is the json-patch crate.

use serde_json::Value;

/// Apply `ops` (a JSON array of operations) to `doc`.
pub fn apply(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let Some(list) = ops.as_array() else {
        return Err("a JSON patch must be an array of operations".into());
    };
    for op in list {
        let is_null_test = op.get("op").and_then(Value::as_str) == Some("test")
            && op.get("value").is_some_and(Value::is_null);
        if is_null_test {
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
            match doc.pointer(path) {
                None | Some(Value::Null) => continue,
                Some(other) => {
                    return Err(format!(
                        "test operation failed at {path}: expected null, found {other}"
                    ));
                }
            }
        }
        let one: json_patch::Patch = serde_json::from_value(Value::Array(vec![op.clone()]))
            .map_err(|e| format!("invalid JSON patch operation {op}: {e}"))?;
        json_patch::patch(doc, &one).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn null_test_on_missing_member_passes() {
        let mut doc = json!({"metadata": {"name": "x"}});
        let ops = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["a/b"]}
        ]);
        apply(&mut doc, &ops).expect("applies");
        assert_eq!(doc["metadata"]["finalizers"], json!(["a/b"]));
        let again = json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]);
        assert!(apply(&mut doc, &again).is_err());
        assert!(
            apply(
                &mut doc,
                &json!([{"op": "test", "path": "/metadata/finalizers", "value": ["x"]}])
            )
            .is_err()
        );
        assert!(apply(&mut doc, &json!({"op": "add"})).is_err());
    }
}
