//! CRD schemas as the server admits and uses them: the structural checks
//! and CEL rule checks run when a CRD is written, then compilation into a
//! validator and what a write does with it (validate, validate an update,
//! prune, default, list unknown fields). Input: JSON values one after the
//! other: the `openAPIV3Schema`, an object, and an old object.
#![no_main]
use kubeforge_schema::{Validator, check_rules, check_structural};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let mut values = serde_json::Deserializer::from_slice(data).into_iter::<Value>();
    let Some(Ok(schema)) = values.next() else {
        return;
    };
    let obj = match values.next() {
        Some(Ok(v)) => v,
        _ => json!({"apiVersion": "fuzz.example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w"}, "spec": {"replicas": 1}}),
    };
    let old = match values.next() {
        Some(Ok(v)) => v,
        _ => obj.clone(),
    };
    let prefix = "spec.versions[0].schema.openAPIV3Schema";
    let structural = check_structural(&schema, prefix);
    let _ = check_rules(&schema, prefix);
    let Ok(v) = Validator::from_crd_schema(&schema) else {
        return;
    };
    if !structural.is_empty() {
        // The server refuses such a CRD; nothing else runs on it.
        return;
    }
    let _ = v.validate(&obj);
    let _ = v.validate_update(&obj, &old);
    let _ = v.unknown_fields(&obj);
    let mut pruned = obj.clone();
    let _ = v.prune(&mut pruned);
    let mut defaulted = pruned.clone();
    v.apply_defaults(&mut defaulted);
    let _ = v.validate(&defaulted);
    let _ = v.list_type_at(&["spec", "ports"]);
});
