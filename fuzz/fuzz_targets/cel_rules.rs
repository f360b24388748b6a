//! CEL rules in CRD schemas (`x-kubernetes-validations`): the CRD-time
//! checks (compile, type, `oldSelf` placement) and evaluation on creates
//! and updates, including transition rules and messageExpression. Input:
//! the rule text; a second line, if any, is its messageExpression.
#![no_main]
use kubeforge_schema::{Validator, check_rules};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let (rule, message_expr) = match s.split_once('\n') {
        Some((r, m)) => (r, Some(m)),
        None => (s, None),
    };
    let mut validation = json!({ "rule": rule, "message": "failed" });
    if let Some(m) = message_expr {
        validation["messageExpression"] = json!(m);
    }
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [validation],
                "properties": {
                    "replicas": { "type": "integer" },
                    "minReplicas": { "type": "integer" },
                    "ratio": { "type": "number" },
                    "name": { "type": "string" },
                    "enabled": { "type": "boolean" },
                    "tags": { "type": "array", "items": { "type": "string" } },
                    "limits": { "type": "object", "additionalProperties": { "type": "integer" } },
                    "surge": { "x-kubernetes-int-or-string": true },
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["port"],
                        "items": { "type": "object", "required": ["port"],
                                   "properties": { "port": { "type": "integer" }, "name": { "type": "string" } } },
                    },
                    "when": { "type": "string", "format": "date-time" },
                    "data": { "type": "string", "format": "byte" },
                    "free": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                },
            },
        },
    });
    let _ = check_rules(&schema, "spec.versions[0].schema.openAPIV3Schema");
    let Ok(v) = Validator::from_crd_schema(&schema) else {
        return;
    };
    let obj = json!({"apiVersion": "fuzz.example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"replicas": 3, "minReplicas": 1, "ratio": 0.5, "name": "web", "enabled": true,
                 "tags": ["a", "b"], "limits": {"cpu": 2}, "surge": "25%",
                 "ports": [{"port": 80, "name": "http"}], "when": "2024-01-02T03:04:05Z",
                 "data": "aGVsbG8=", "free": {"x": [1, {"y": null}]}}});
    let old = json!({"apiVersion": "fuzz.example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"replicas": -1, "minReplicas": 9223372036854775807_i64, "ratio": 1e308, "name": "",
                 "enabled": false, "tags": [], "limits": {}, "surge": 3,
                 "ports": [{"port": 80}, {"port": 443}], "when": "1970-01-01T00:00:00Z",
                 "data": "", "free": {}}});
    let _ = v.validate(&obj);
    let _ = v.validate(&old);
    let _ = v.validate_update(&obj, &old);
    let _ = v.validate_update(&old, &obj);
});
