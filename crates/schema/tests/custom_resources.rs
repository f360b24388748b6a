//! Validation, pruning, unknown fields and defaulting of custom resources.

use kubeforge_schema::{FieldError, Validator};
use serde_json::{Value, json};

/// The CronTab schema from the Kubernetes CRD documentation.
fn crontab_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "cronSpec": { "type": "string" },
                    "image": { "type": "string" },
                    "replicas": { "type": "integer" },
                },
            },
        },
    })
}

fn crontab(spec: Value) -> Value {
    json!({
        "apiVersion": "stable.example.com/v1",
        "kind": "CronTab",
        "metadata": { "name": "my-new-cron-object", "namespace": "default" },
        "spec": spec,
    })
}

fn validator(schema: &Value) -> Validator {
    Validator::from_crd_schema(schema).expect("schema compiles")
}

#[test]
fn crontab_type_error() {
    let v = validator(&crontab_schema());
    let errs = v.validate(&crontab(
        json!({ "cronSpec": 5, "image": "my-awesome-cron-image" }),
    ));
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].field, "spec.cronSpec");
    assert_eq!(errs[0].reason, "FieldValueTypeInvalid");
    assert!(
        errs[0].message.contains("must be of type string"),
        "{}",
        errs[0].message
    );
    assert_eq!(
        errs[0].message,
        "Invalid value: \"integer\": spec.cronSpec in body must be of type string: \"integer\""
    );
}

#[test]
fn crontab_valid() {
    let v = validator(&crontab_schema());
    let obj = crontab(json!({ "cronSpec": "* * * * */5", "image": "img", "replicas": 1 }));
    assert_eq!(v.validate(&obj), Vec::<FieldError>::new());
    // An integral float is an integer, as for kube's JSON decoding.
    let obj = crontab(json!({ "replicas": 2.0 }));
    assert_eq!(v.validate(&obj), Vec::<FieldError>::new());
    let errs = v.validate(&crontab(json!({ "replicas": 2.5 })));
    assert_eq!(
        errs[0].message,
        "Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\""
    );
}

/// The CronTab schema of the "validation" section of the docs, with more keywords.
fn strict_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["cronSpec", "image"],
                "properties": {
                    "cronSpec": { "type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$" },
                    "image": { "type": "string", "minLength": 3, "maxLength": 10 },
                    "replicas": { "type": "integer", "minimum": 1, "maximum": 10 },
                    "ratio": { "type": "number", "exclusiveMinimum": true, "minimum": 0, "multipleOf": 0.5 },
                    "policy": { "type": "string", "enum": ["Allow", "Forbid"] },
                    "tags": { "type": "array", "items": { "type": "string" }, "minItems": 1, "maxItems": 2 },
                    "labels": { "type": "object", "additionalProperties": { "type": "string" }, "maxProperties": 1 },
                    "when": { "type": "string", "format": "date-time" },
                    "port": { "x-kubernetes-int-or-string": true },
                    "note": { "type": "string", "nullable": true },
                    "size": { "type": "integer", "format": "int32" },
                },
            },
        },
    })
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter()
        .map(|e| format!("{} [{}] {}", e.field, e.reason, e.message))
        .collect()
}

#[test]
fn keyword_failures() {
    let v = validator(&strict_schema());
    let errs = v.validate(&crontab(json!({
        "cronSpec": "every minute",
        "image": "ab",
        "replicas": 11,
        "ratio": 0,
        "policy": "Maybe",
        "tags": ["a", "b", "c"],
        "labels": { "a": "1", "b": "2" },
        "when": "yesterday",
        "port": true,
        "note": null,
        "size": 3_000_000_000u64,
    })));
    assert_eq!(
        messages(&errs),
        vec![
            "spec.cronSpec [FieldValueInvalid] Invalid value: \"every minute\": spec.cronSpec in body should match '^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$'",
            "spec.image [FieldValueInvalid] Invalid value: \"ab\": spec.image in body should be at least 3 chars long",
            "spec.labels [FieldValueTooMany] Too many: 2: must have at most 1 item",
            "spec.policy [FieldValueNotSupported] Unsupported value: \"Maybe\": supported values: \"Allow\", \"Forbid\"",
            "spec.port [FieldValueTypeInvalid] Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
            "spec.ratio [FieldValueInvalid] Invalid value: 0: spec.ratio in body should be greater than 0",
            "spec.replicas [FieldValueInvalid] Invalid value: 11: spec.replicas in body should be less than or equal to 10",
            "spec.size [FieldValueInvalid] Invalid value: \"\": Checked value must be of type integer with format int32 in spec.size",
            "spec.tags [FieldValueTooMany] Too many: 3: must have at most 2 items",
            "spec.when [FieldValueTypeInvalid] Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
        ]
    );

    let errs = v.validate(&crontab(
        json!({ "image": "a-very-long-image" , "tags": [], "ratio": 0.7 }),
    ));
    assert_eq!(
        messages(&errs),
        vec![
            "spec.image [FieldValueTooLong] Too long: may not be more than 10 bytes",
            "spec.ratio [FieldValueInvalid] Invalid value: 0.7: spec.ratio in body should be a multiple of 0.5",
            "spec.tags [FieldValueInvalid] Invalid value: 0: spec.tags in body should have at least 1 items",
            "spec.cronSpec [FieldValueRequired] Required value",
        ]
    );

    let ok = crontab(json!({
        "cronSpec": "*/5 * * * *",
        "image": "nginx",
        "port": "http",
        "note": null,
        "when": "2024-05-01T10:00:00Z",
        "labels": { "a": "b" },
    }));
    assert_eq!(v.validate(&ok), Vec::<FieldError>::new());
}

#[test]
fn root_metadata_only_type_checked() {
    let v = validator(&crontab_schema());
    let mut obj = crontab(json!({}));
    obj["metadata"] = json!({ "name": "x", "labels": { "a": "b" }, "whatever": 1 });
    assert_eq!(v.validate(&obj), Vec::<FieldError>::new());
    obj["kind"] = json!(5);
    let errs = v.validate(&obj);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "kind");
}

#[test]
fn pruning_and_unknown_fields() {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "image": { "type": "string" },
                    "containers": { "type": "array", "items": { "type": "object", "properties": { "name": { "type": "string" } } } },
                    "free": { "type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": { "known": { "type": "object", "properties": { "a": { "type": "string" } } } } },
                    "map": { "type": "object", "additionalProperties": { "type": "object", "properties": { "v": { "type": "string" } } } },
                    "embedded": { "type": "object", "x-kubernetes-embedded-resource": true, "properties": { "spec": { "type": "object" } } },
                    "optional": { "type": "string" },
                },
            },
            "status": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
        },
    });
    let v = validator(&schema);
    let mut obj = json!({
        "apiVersion": "stable.example.com/v1",
        "kind": "CronTab",
        "metadata": { "name": "x", "bogus": true, "labels": { "a": "b" } },
        "spec": {
            "image": "nginx",
            "foo": 1,
            "containers": [{ "name": "c", "extra": true }],
            "free": { "anything": [1, 2], "known": { "a": "x", "b": "y" } },
            "map": { "k": { "v": "1", "w": "2" } },
            "embedded": { "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p", "nope": 1 }, "spec": {}, "junk": 1 },
            "optional": null,
        },
        "status": { "whatever": { "deep": true } },
        "topLevel": 1,
    });
    let expected = vec![
        "metadata.bogus",
        "spec.containers[0].extra",
        "spec.embedded.junk",
        "spec.embedded.metadata.nope",
        "spec.foo",
        "spec.free.known.b",
        "spec.map.k.w",
        "topLevel",
    ];
    assert_eq!(v.unknown_fields(&obj), expected);
    let before = obj.clone();
    assert_eq!(v.unknown_fields(&obj), expected);
    assert_eq!(obj, before, "unknown_fields must not modify");

    assert_eq!(v.prune(&mut obj), expected);
    assert_eq!(
        obj,
        json!({
            "apiVersion": "stable.example.com/v1",
            "kind": "CronTab",
            "metadata": { "name": "x", "labels": { "a": "b" } },
            "spec": {
                "image": "nginx",
                "containers": [{ "name": "c" }],
                "free": { "anything": [1, 2], "known": { "a": "x" } },
                "map": { "k": { "v": "1" } },
                "embedded": { "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" }, "spec": {} },
            },
            "status": { "whatever": { "deep": true } },
        })
    );
    assert!(v.unknown_fields(&obj).is_empty());
}

#[test]
fn defaults() {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "replicas": { "type": "integer", "default": 1 },
                    "strategy": {
                        "type": "object",
                        "default": {},
                        "properties": {
                            "type": { "type": "string", "default": "Rolling" },
                            "maxSurge": { "type": "integer", "default": 25 },
                        },
                    },
                    "nested": {
                        "type": "object",
                        "properties": { "deep": { "type": "string", "default": "d" } },
                    },
                    "items": {
                        "type": "array",
                        "items": { "type": "object", "properties": { "x": { "type": "string", "default": "x" } } },
                    },
                    "map": {
                        "type": "object",
                        "additionalProperties": { "type": "object", "properties": { "y": { "type": "integer", "default": 2 } } },
                    },
                    "nullable": { "type": "string", "nullable": true, "default": "n" },
                    "nonNullable": { "type": "string", "default": "nn" },
                },
            },
        },
    });
    let v = validator(&schema);

    // No spec: nothing is defaulted (defaults apply only where the parent exists).
    let mut obj = json!({ "apiVersion": "a/v1", "kind": "K", "metadata": { "name": "x" } });
    v.apply_defaults(&mut obj);
    assert!(obj.get("spec").is_none());

    let mut obj = json!({
        "apiVersion": "a/v1", "kind": "K", "metadata": { "name": "x" },
        "spec": {
            "replicas": 3,
            "items": [{}, { "x": "given" }],
            "map": { "a": {} },
            "nullable": null,
            "nonNullable": null,
        },
    });
    v.apply_defaults(&mut obj);
    assert_eq!(
        obj["spec"],
        json!({
            "replicas": 3,
            "strategy": { "type": "Rolling", "maxSurge": 25 },
            "items": [{ "x": "x" }, { "x": "given" }],
            "map": { "a": { "y": 2 } },
            "nullable": null,
            "nonNullable": "nn",
        })
    );
    assert!(obj["spec"].get("nested").is_none());
}

#[test]
fn prune_drops_non_nullable_nulls_without_default() {
    let schema = json!({
        "type": "object",
        "properties": { "spec": { "type": "object", "properties": {
            "a": { "type": "string" },
            "b": { "type": "string", "nullable": true },
            "c": { "type": "string", "default": "c" },
        } } },
    });
    let v = validator(&schema);
    let mut obj =
        json!({ "apiVersion": "a/v1", "kind": "K", "spec": { "a": null, "b": null, "c": null } });
    assert!(v.prune(&mut obj).is_empty());
    assert_eq!(obj["spec"], json!({ "b": null, "c": null }));
    v.apply_defaults(&mut obj);
    assert_eq!(obj["spec"], json!({ "b": null, "c": "c" }));
}

#[test]
fn combinators() {
    let schema = json!({
        "type": "object",
        "properties": { "spec": {
            "type": "object",
            "properties": { "a": { "type": "string" }, "b": { "type": "string" } },
            "oneOf": [{ "required": ["a"] }, { "required": ["b"] }],
            "not": { "required": ["c"] },
        } },
    });
    let v = validator(&schema);
    let ok = json!({ "apiVersion": "a/v1", "kind": "K", "spec": { "a": "x" } });
    assert!(v.validate(&ok).is_empty());
    let both = json!({ "apiVersion": "a/v1", "kind": "K", "spec": { "a": "x", "b": "y" } });
    let errs = v.validate(&both);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(
        errs[0]
            .message
            .contains("must validate one and only one schema (oneOf). Found 2 valid alternatives")
    );
}

#[test]
fn invalid_pattern_is_a_schema_error() {
    let schema =
        json!({ "type": "object", "properties": { "a": { "type": "string", "pattern": "(" } } });
    assert!(Validator::from_crd_schema(&schema).is_err());
}

#[test]
fn validation_is_fast() {
    let v = validator(&strict_schema());
    let obj = crontab(json!({
        "cronSpec": "*/5 * * * *",
        "image": "nginx",
        "replicas": 3,
        "tags": ["a", "b"],
        "labels": { "a": "b" },
        "when": "2024-05-01T10:00:00Z",
    }));
    assert!(v.validate(&obj).is_empty());
    let start = std::time::Instant::now();
    for _ in 0..1000 {
        assert!(v.validate(&obj).is_empty());
    }
    let per_call = start.elapsed() / 1000;
    // Generous bound for unoptimized test builds on a loaded machine.
    assert!(
        per_call < std::time::Duration::from_millis(1),
        "{per_call:?} per validation"
    );
}
