//! CRDs in depth at the schema level: CEL rules (`x-kubernetes-validations`),
//! list types, defaulting, and the other OpenAPI extensions.

use kubeforge_schema::{FieldError, ListType, Validator, check_rules, check_structural};
use serde_json::{Value, json};

fn validator(schema: &Value) -> Validator {
    Validator::from_crd_schema(schema).expect("schema compiles")
}

fn object(spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": { "name": "w", "namespace": "default" },
        "spec": spec,
    })
}

fn lines(errs: &[FieldError]) -> Vec<String> {
    errs.iter()
        .map(|e| format!("{} [{}] {}", e.field, e.reason, e.message))
        .collect()
}

/// The example: defaults, an int-or-string, a CEL rule on `spec`.
fn widget_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    { "rule": "self.minReplicas <= self.replicas", "message": "minReplicas must not exceed replicas" },
                ],
                "properties": {
                    "replicas": { "type": "integer", "default": 1 },
                    "minReplicas": { "type": "integer", "default": 0 },
                    "maxSurge": { "x-kubernetes-int-or-string": true },
                    "name": { "type": "string" },
                },
            },
            "status": { "type": "object", "properties": { "replicas": { "type": "integer" } } },
        },
    })
}

#[test]
fn cel_rule_with_message() {
    let v = validator(&widget_schema());
    assert!(check_structural(&widget_schema(), "p").is_empty());
    let ok = object(json!({ "replicas": 3, "minReplicas": 2 }));
    assert_eq!(lines(&v.validate(&ok)), Vec::<String>::new());
    let bad = object(json!({ "replicas": 1, "minReplicas": 2 }));
    let errs = v.validate(&bad);
    assert_eq!(
        lines(&errs),
        vec![
            "spec [FieldValueInvalid] Invalid value: \"object\": minReplicas must not exceed replicas"
        ]
    );
    assert_eq!(
        errs[0].to_string(),
        "spec: Invalid value: \"object\": minReplicas must not exceed replicas"
    );
}

#[test]
fn defaults_then_rule() {
    let v = validator(&widget_schema());
    let mut obj = object(json!({}));
    assert!(v.apply_defaults(&mut obj));
    assert_eq!(obj["spec"], json!({ "replicas": 1, "minReplicas": 0 }));
    // Idempotent, and says nothing changed.
    let before = obj.clone();
    assert!(!v.apply_defaults(&mut obj));
    assert_eq!(obj, before);
    assert!(v.validate(&obj).is_empty());
    // A missing field the rule reads is a runtime error, as in kube-apiserver.
    let no_defaults = object(json!({ "replicas": 1 }));
    assert_eq!(
        lines(&v.validate(&no_defaults)),
        vec![
            "spec [FieldValueInvalid] Invalid value: \"object\": no such key: minReplicas evaluating rule: minReplicas must not exceed replicas"
        ]
    );
}

#[test]
fn default_message_and_reasons() {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    { "rule": "self.a != 'x'" },
                    { "rule": "self.a != 'y'", "reason": "FieldValueForbidden", "message": "no y" },
                    { "rule": "self.a != 'z'", "reason": "FieldValueRequired", "message": "no z", "fieldPath": ".a" },
                    { "rule": "self.a != 'w'", "reason": "FieldValueDuplicate" },
                    { "rule": "self.a != 'v'", "messageExpression": "'a is ' + self.a" },
                ],
                "properties": { "a": { "type": "string" } },
            },
        },
    });
    assert_eq!(lines(&check_structural(&schema, "p")), Vec::<String>::new());
    let v = validator(&schema);
    let check = |a: &str| lines(&v.validate(&object(json!({ "a": a }))));
    assert_eq!(
        check("x"),
        vec!["spec [FieldValueInvalid] Invalid value: \"object\": failed rule: self.a != 'x'"]
    );
    assert_eq!(
        check("y"),
        vec!["spec [FieldValueForbidden] Forbidden: no y"]
    );
    assert_eq!(
        check("z"),
        vec!["spec.a [FieldValueRequired] Required value: no z"]
    );
    assert_eq!(
        check("w"),
        vec!["spec [FieldValueDuplicate] Duplicate value: \"object\""]
    );
    assert_eq!(
        check("v"),
        vec!["spec [FieldValueInvalid] Invalid value: \"object\": a is v"]
    );
    assert!(check("ok").is_empty());
}

#[test]
fn rules_users_write() {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "name": {
                        "type": "string",
                        "x-kubernetes-validations": [
                            { "rule": "self.startsWith('app-')", "message": "must start with app-" },
                            { "rule": "self.matches('^[a-z-]+$')", "message": "lowercase only" },
                            { "rule": "size(self) <= 10", "message": "too long" },
                        ],
                    },
                    "ports": {
                        "type": "array",
                        "items": { "type": "integer" },
                        "x-kubernetes-validations": [
                            { "rule": "self.all(p, p > 0 && p < 65536)", "message": "bad port" },
                            { "rule": "self.exists(p, p == 80) || size(self) == 0", "message": "needs 80" },
                            { "rule": "self.map(p, p * 2).filter(p, p > 1000).size() < 2", "message": "big" },
                        ],
                    },
                    "labels": {
                        "type": "object",
                        "additionalProperties": { "type": "string" },
                        "x-kubernetes-validations": [
                            { "rule": "!has(self.forbidden)", "message": "no forbidden label" },
                            { "rule": "self.all(k, self[k] != '')", "message": "empty label" },
                        ],
                    },
                    "size": {
                        "x-kubernetes-int-or-string": true,
                        "x-kubernetes-validations": [
                            { "rule": "type(self) == int ? self > 0 : self.endsWith('%')", "message": "bad size" },
                        ],
                    },
                    "ratio": { "type": "number", "x-kubernetes-validations": [{ "rule": "self <= 1.0", "message": "ratio" }] },
                    "x-y": { "type": "string" },
                },
                "x-kubernetes-validations": [
                    { "rule": "!has(self.x__dash__y) || self.x__dash__y == 'ok'", "message": "escaped" },
                ],
            },
        },
    });
    assert_eq!(lines(&check_structural(&schema, "p")), Vec::<String>::new());
    let v = validator(&schema);
    let good = object(json!({
        "name": "app-x",
        "ports": [80, 443],
        "labels": { "a": "b" },
        "size": "50%",
        "ratio": 1,
        "x-y": "ok",
    }));
    assert_eq!(lines(&v.validate(&good)), Vec::<String>::new());
    let good = object(json!({ "size": 5 }));
    assert_eq!(lines(&v.validate(&good)), Vec::<String>::new());
    let bad = object(json!({
        "name": "App_12345678",
        "ports": [0, 700, 800],
        "labels": { "forbidden": "", "b": "x" },
        "size": true,
        "ratio": 1.5,
        "x-y": "no",
    }));
    let got = lines(&v.validate(&bad));
    // `size: true` is a type error: blocking, so no rule runs.
    assert_eq!(
        got,
        vec![
            "spec.size [FieldValueTypeInvalid] Invalid value: \"boolean\": spec.size in body must be of type integer,string: \"boolean\"",
            "<nil> [FieldValueInvalid] Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ]
    );
    let mut bad = bad;
    bad["spec"]["size"] = json!("50");
    let got = lines(&v.validate(&bad));
    assert_eq!(
        got,
        vec![
            "spec [FieldValueInvalid] Invalid value: \"object\": escaped",
            "spec.labels [FieldValueInvalid] Invalid value: \"object\": no forbidden label",
            "spec.labels [FieldValueInvalid] Invalid value: \"object\": empty label",
            "spec.name [FieldValueInvalid] Invalid value: \"string\": must start with app-",
            "spec.name [FieldValueInvalid] Invalid value: \"string\": lowercase only",
            "spec.name [FieldValueInvalid] Invalid value: \"string\": too long",
            "spec.ports [FieldValueInvalid] Invalid value: \"array\": bad port",
            "spec.ports [FieldValueInvalid] Invalid value: \"array\": needs 80",
            "spec.ports [FieldValueInvalid] Invalid value: \"array\": big",
            "spec.ratio [FieldValueInvalid] Invalid value: \"number\": ratio",
            "spec.size [FieldValueInvalid] Invalid value: \"\": bad size",
        ]
    );
}

#[test]
fn transition_rules() {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "immutable": {
                        "type": "string",
                        "x-kubernetes-validations": [{ "rule": "self == oldSelf", "message": "is immutable" }],
                    },
                    "counter": {
                        "type": "integer",
                        "x-kubernetes-validations": [
                            { "rule": "self >= oldSelf", "message": "may not decrease" },
                            { "rule": "self < 100", "message": "under 100" },
                        ],
                    },
                    "once": {
                        "type": "string",
                        "x-kubernetes-validations": [
                            { "rule": "!oldSelf.hasValue() || oldSelf.value() == self", "message": "set once", "optionalOldSelf": true },
                        ],
                    },
                    "items": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": { "type": "string" },
                                "size": { "type": "integer", "x-kubernetes-validations": [{ "rule": "self >= oldSelf", "message": "may not shrink" }] },
                            },
                        },
                    },
                },
            },
        },
    });
    assert_eq!(lines(&check_structural(&schema, "p")), Vec::<String>::new());
    let v = validator(&schema);
    let old = object(
        json!({ "immutable": "a", "counter": 5, "once": "x", "items": [{ "name": "a", "size": 2 }, { "name": "b", "size": 2 }] }),
    );
    // Create: transition rules skipped.
    assert!(v.validate(&old).is_empty());
    let new = object(
        json!({ "immutable": "b", "counter": 4, "once": "y", "items": [{ "name": "b", "size": 1 }, { "name": "a", "size": 3 }, { "name": "c", "size": 0 }] }),
    );
    assert_eq!(
        lines(&v.validate_update(&new, &old)),
        vec![
            "spec.counter [FieldValueInvalid] Invalid value: \"integer\": may not decrease",
            "spec.immutable [FieldValueInvalid] Invalid value: \"string\": is immutable",
            "spec.items[0].size [FieldValueInvalid] Invalid value: \"integer\": may not shrink",
            "spec.once [FieldValueInvalid] Invalid value: \"string\": set once",
        ]
    );
    // optionalOldSelf: evaluated on create too, with oldSelf empty.
    let created = object(json!({ "once": "z" }));
    assert!(v.validate(&created).is_empty());
    // Ratcheting: an unchanged value that breaks a rule is kept.
    let stored = object(json!({ "counter": 200 }));
    let update = object(json!({ "counter": 200, "immutable": "q" }));
    assert!(v.validate_update(&update, &stored).is_empty());
    let update = object(json!({ "counter": 201 }));
    assert_eq!(
        lines(&v.validate_update(&update, &stored)),
        vec!["spec.counter [FieldValueInvalid] Invalid value: \"integer\": under 100"]
    );
}

#[test]
fn root_rule_and_metadata() {
    let schema = json!({
        "type": "object",
        "x-kubernetes-validations": [
            { "rule": "self.metadata.name.startsWith('w')", "message": "name must start with w" },
            { "rule": "self.kind == 'Widget'" },
        ],
        "properties": { "spec": { "type": "object" } },
    });
    assert_eq!(lines(&check_structural(&schema, "p")), Vec::<String>::new());
    let v = validator(&schema);
    assert!(v.validate(&object(json!({}))).is_empty());
    let mut other = object(json!({}));
    other["metadata"]["name"] = json!("x");
    assert_eq!(
        lines(&v.validate(&other)),
        vec!["<nil> [FieldValueInvalid] Invalid value: \"object\": name must start with w"]
    );
    // Only name and generateName of metadata are visible to rules.
    let schema = json!({
        "type": "object",
        "x-kubernetes-validations": [{ "rule": "has(self.metadata.labels)" }],
    });
    let errs = lines(&check_rules(&schema, "p"));
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(errs[0].contains("undefined field 'labels'"), "{errs:#?}");
}

#[test]
fn invalid_rules_at_crd_time() {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    { "rule": "self.minReplicas <= self.replicas +" },
                    { "rule": "self.minReplica <= self.replicas" },
                    { "rule": "self.replicas" },
                    { "rule": "foo(self.replicas)" },
                    { "rule": "self.name == 5" },
                    { "rule": "" },
                    { "rule": "self.replicas > 0", "reason": "Bogus" },
                    { "rule": "self.replicas > 0", "optionalOldSelf": true },
                    { "rule": "self.replicas > 0", "fieldPath": ".nope" },
                    { "rule": "self.replicas > 0", "message": "a\nb" },
                ],
                "properties": {
                    "replicas": { "type": "integer" },
                    "minReplicas": { "type": "integer" },
                    "name": { "type": "string" },
                    "list": {
                        "type": "array",
                        "items": { "type": "string", "x-kubernetes-validations": [{ "rule": "self == oldSelf" }] },
                    },
                },
            },
        },
    });
    // Schema-level problems of the rules come first and hide compilation.
    let got = lines(&check_rules(
        &schema,
        "spec.versions[0].schema.openAPIV3Schema",
    ));
    let p = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations";
    assert!(
        got.contains(&format!(
            "{p}[5].rule [FieldValueRequired] Required value: rule is not specified"
        )),
        "{got:#?}"
    );
    assert!(
        got.iter().any(|l| l.starts_with(&format!(
            "{p}[6].reason [FieldValueNotSupported] Unsupported value: \"Bogus\""
        ))),
        "{got:#?}"
    );
    assert!(got.contains(&format!("{p}[8].fieldPath [FieldValueInvalid] Invalid value: \".nope\": fieldPath must be a valid path")), "{got:#?}");
    assert!(got.contains(&format!("{p}[9].message [FieldValueInvalid] Invalid value: \"a\\nb\": message must not contain line breaks")), "{got:#?}");

    let mut fixed = schema.clone();
    let rules = fixed["properties"]["spec"]["x-kubernetes-validations"]
        .as_array_mut()
        .expect("rules");
    rules.truncate(5);
    rules.push(json!({ "rule": "self.replicas > 0", "optionalOldSelf": true }));
    let got = lines(&check_structural(
        &fixed,
        "spec.versions[0].schema.openAPIV3Schema",
    ));
    assert_eq!(got.len(), 7, "{got:#?}");
    assert!(got[0].starts_with(&format!("{p}[0].rule [FieldValueInvalid] Invalid value: apiextensions.ValidationRule{{Rule:\"self.minReplicas <= self.replicas +\", Message:\"\"")), "{got:#?}");
    assert!(
        got[0].contains(
            ": compilation failed: ERROR: <input>:1:36: Syntax error: mismatched input '<EOF>'"
        ),
        "{got:#?}"
    );
    assert!(
        got[1].contains("compilation failed: ERROR: <input>:1:5: undefined field 'minReplica'"),
        "{got:#?}"
    );
    assert!(
        got[2].ends_with("cel expression must evaluate to a bool"),
        "{got:#?}"
    );
    assert!(got[3].contains("undeclared reference to 'foo'"), "{got:#?}");
    assert!(
        got[4].contains("found no matching overload for '_==_' applied to '(string, int)'"),
        "{got:#?}"
    );
    assert_eq!(
        got[5],
        format!(
            "{p}[5].optionalOldSelf [FieldValueInvalid] Invalid value: true: may not be set if oldSelf is not used in rule"
        )
    );
    assert_eq!(
        got[6],
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[list].items.x-kubernetes-validations[0].rule [FieldValueInvalid] Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[list]"
    );
    // A rule that didn't compile still shows up when validating.
    let v = validator(&fixed);
    let errs = lines(&v.validate(&object(
        json!({ "replicas": 1, "minReplicas": 0, "name": "a" }),
    )));
    assert!(errs[0].starts_with("spec [FieldValueInvalid] Invalid value: \"object\": rule compile error: compilation failed:"), "{errs:#?}");
}

#[test]
fn kubernetes_list_library() {
    let schema = json!({
        "type": "object",
        "properties": { "spec": { "type": "object",
            "properties": { "l": { "type": "array", "items": { "type": "integer" } },
                            "d": { "type": "array", "items": { "type": "number" } } },
            "x-kubernetes-validations": [
                { "rule": "self.l.isSorted()", "message": "sorted" },
                { "rule": "self.l.sum() <= 10", "message": "sum" },
                { "rule": "size(self.l) == 0 || self.l.min() >= 1", "message": "min" },
                { "rule": "size(self.l) == 0 || self.l.max() < 9", "message": "max" },
                { "rule": "self.l.indexOf(2) != 0 && self.l.lastIndexOf(5) != 0", "message": "index" },
                { "rule": "self.d.sum() < 2.0", "message": "double sum" },
            ] } },
    });
    assert!(check_structural(&schema, "p").is_empty());
    let v = validator(&schema);
    assert!(
        v.validate(&object(json!({ "l": [1, 3, 5], "d": [0.5, 1] })))
            .is_empty()
    );
    assert!(v.validate(&object(json!({ "l": [], "d": [] }))).is_empty());
    let got: Vec<String> = v
        .validate(&object(json!({ "l": [2, 1, 9], "d": [1.5, 1] })))
        .iter()
        .map(|e| e.message.clone())
        .collect();
    assert_eq!(
        got,
        [
            "Invalid value: \"object\": sorted",
            "Invalid value: \"object\": sum",
            "Invalid value: \"object\": max",
            "Invalid value: \"object\": index",
            "Invalid value: \"object\": double sum",
        ]
    );
}

#[test]
fn unsupported_library_functions_are_not_enforced() {
    let schema = json!({
        "type": "object",
        "properties": { "spec": { "type": "object",
            "x-kubernetes-validations": [{ "rule": "isURL(self.u) && quantity(self.q).isLessThan(quantity('1Gi'))" }],
            "properties": { "u": { "type": "string" }, "q": { "type": "string" } } } },
    });
    assert!(check_structural(&schema, "p").is_empty());
    assert!(
        validator(&schema)
            .validate(&object(json!({ "u": "nope", "q": "x" })))
            .is_empty()
    );
}

#[test]
fn evaluation_is_bounded() {
    // Deep nesting is refused when compiled (it would overflow stacks).
    let deep = format!("{}true{}", "(".repeat(500), ")".repeat(500));
    let chain = format!("{}1 > 0", "1 + ".repeat(3000));
    let long_chain = format!("{}1 > 0", "1 + ".repeat(400));
    for rule in [&deep, &chain, &long_chain] {
        let schema = json!({ "type": "object", "properties": { "spec": { "type": "object",
            "x-kubernetes-validations": [{ "rule": rule, "message": "m" }] } } });
        let errs = check_rules(&schema, "p");
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].message.contains("compilation failed"),
            "{}",
            errs[0]
        );
        // The validator keeps working.
        let v = validator(&schema);
        assert_eq!(v.validate(&object(json!({}))).len(), 1);
    }
    // Quadratic rules over big lists are stopped by the cost estimate.
    let schema = json!({ "type": "object", "properties": { "spec": { "type": "object",
        "properties": { "l": { "type": "array", "items": { "type": "integer" } } },
        "x-kubernetes-validations": [
            { "rule": "self.l.all(x, self.l.all(y, self.l.exists(z, x + y + z >= 0)))" },
            { "rule": "self.l.size() >= 0" },
        ] } } });
    let v = validator(&schema);
    let small = object(json!({ "l": [1, 2, 3] }));
    assert!(v.validate(&small).is_empty());
    let big = object(json!({ "l": (0..5000).collect::<Vec<i32>>() }));
    let errs = lines(&v.validate(&big));
    assert_eq!(
        errs,
        vec![
            "spec [FieldValueInvalid] Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.l.all(x, self.l.all(y, self.l.exists(z, x + y + z >= 0)))"
        ]
    );
    // Runtime errors are causes, not panics.
    let schema = json!({ "type": "object", "properties": { "spec": { "type": "object",
        "properties": { "a": { "type": "integer" }, "l": { "type": "array", "items": { "type": "integer" } } },
        "x-kubernetes-validations": [
            { "rule": "10 / self.a > 1" },
            { "rule": "self.l[5] > 1" },
            { "rule": "self.a + 9223372036854775807 > 0" },
        ] } } });
    let v = validator(&schema);
    let errs = lines(&v.validate(&object(json!({ "a": 0, "l": [] }))));
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(
        errs[0].ends_with("division by zero evaluating rule: 10 / self.a > 1"),
        "{errs:#?}"
    );
    assert!(
        errs[1].contains("evaluating rule: self.l[5] > 1"),
        "{errs:#?}"
    );
    let errs = lines(&v.validate(&object(json!({ "a": 5, "l": [] }))));
    assert!(
        errs.iter()
            .any(|e| e
                .ends_with("integer overflow evaluating rule: self.a + 9223372036854775807 > 0")),
        "{errs:#?}"
    );
}

#[test]
fn list_types() {
    let schema = json!({
        "type": "object",
        "properties": { "spec": { "type": "object", "properties": {
            "tags": { "type": "array", "x-kubernetes-list-type": "set", "items": { "type": "string" } },
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port", "protocol"],
                "items": { "type": "object", "required": ["port"], "properties": {
                    "port": { "type": "integer" },
                    "protocol": { "type": "string", "default": "TCP" },
                    "name": { "type": "string" },
                } },
            },
            "any": { "type": "array", "x-kubernetes-list-type": "atomic", "items": { "type": "string" } },
            "plain": { "type": "array", "items": { "type": "object", "properties": { "inner": {
                "type": "array", "x-kubernetes-list-type": "set", "items": { "type": "integer" } } } } },
        } } },
    });
    assert_eq!(lines(&check_structural(&schema, "p")), Vec::<String>::new());
    let v = validator(&schema);
    let mut obj = object(json!({
        "tags": ["a", "b", "a", "a", "c", "b"],
        "ports": [
            { "port": 80 },
            { "port": 80, "protocol": "UDP" },
            { "port": 80, "protocol": "TCP", "name": "again" },
        ],
        "any": ["x", "x"],
        "plain": [{ "inner": [1, 1] }],
    }));
    assert!(v.apply_defaults(&mut obj));
    assert_eq!(
        lines(&v.validate(&obj)),
        vec![
            "spec.plain[0].inner[1] [FieldValueDuplicate] Duplicate value: 1",
            "spec.ports[2] [FieldValueDuplicate] Duplicate value: {\"port\":80,\"protocol\":\"TCP\"}",
            "spec.tags[2] [FieldValueDuplicate] Duplicate value: \"a\"",
            "spec.tags[5] [FieldValueDuplicate] Duplicate value: \"b\"",
        ]
    );
    let obj = object(json!({ "ports": [{ "port": 1 }, 5] }));
    let got = lines(&v.validate(&obj));
    assert!(got.contains(&"spec.ports[1] [FieldValueInvalid] Invalid value: 5: must be an object for an array of list-type map".to_owned()), "{got:#?}");

    // The lookup for server-side apply.
    assert_eq!(v.list_type_at(&["spec", "tags"]), Some(ListType::Set));
    assert_eq!(
        v.list_type_at(&["spec", "ports"]),
        Some(ListType::Map(vec!["port".into(), "protocol".into()]))
    );
    assert_eq!(v.list_type_at(&["spec", "any"]), Some(ListType::Atomic));
    assert_eq!(v.list_type_at(&["spec", "plain"]), Some(ListType::Atomic));
    assert_eq!(
        v.list_type_at(&["spec", "plain", "inner"]),
        Some(ListType::Set)
    );
    assert_eq!(v.list_type_at(&["spec", "ports", "port"]), None);
    assert_eq!(v.list_type_at(&["spec", "nope"]), None);
    let pod = kubeforge_schema::builtin_schema("", "v1", "Pod").expect("pod schema");
    assert_eq!(pod.list_type_at(&["spec", "containers"]), None);
}

#[test]
fn list_map_keys_at_crd_time() {
    let schema = json!({
        "type": "object",
        "properties": { "spec": { "type": "object", "properties": {
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port", "protocol", "port", "meta"],
                "items": { "type": "object", "nullable": true, "required": ["port"], "properties": {
                    "port": { "type": "integer" },
                    "protocol": { "type": "string", "nullable": true },
                    "meta": { "type": "object" },
                } },
            },
            "set": { "type": "array", "x-kubernetes-list-type": "set", "items": { "type": "object" } },
        } } },
    });
    let got = lines(&check_structural(&schema, "p"));
    let base = "p.properties[spec].properties[ports]";
    for want in [
        format!("{base}.items.properties[meta].type [FieldValueInvalid] Invalid value: \"object\": must be a scalar type if parent array's x-kubernetes-list-type is map"),
        format!("{base}.x-kubernetes-list-map-keys [FieldValueInvalid] Invalid value: [\"port\",\"protocol\",\"port\",\"meta\"]: must not contain duplicate entries"),
        format!("{base}.items.nullable [FieldValueForbidden] Forbidden: cannot be nullable when x-kubernetes-list-type is map"),
        format!("{base}.items.properties[protocol].default [FieldValueRequired] Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"),
        format!("{base}.items.properties[protocol].nullable [FieldValueForbidden] Forbidden: this property is in x-kubernetes-list-map-keys, so it cannot be nullable"),
        "p.properties[spec].properties[set].items.x-kubernetes-map-type [FieldValueInvalid] Invalid value: null: must be atomic as item of a list with x-kubernetes-list-type=set".to_owned(),
    ] {
        assert!(got.contains(&want), "missing {want}\n{got:#?}");
    }
}

#[test]
fn openapi_extensions() {
    let schema = json!({
        "type": "object",
        "properties": { "spec": { "type": "object", "properties": {
            "note": { "type": "string", "nullable": true },
            "strict": { "type": "string" },
            "surge": { "x-kubernetes-int-or-string": true },
            "template": {
                "type": "object",
                "x-kubernetes-embedded-resource": true,
                "x-kubernetes-preserve-unknown-fields": true,
            },
            "typed": {
                "type": "object",
                "x-kubernetes-embedded-resource": true,
                "properties": { "spec": { "type": "object", "properties": { "x": { "type": "string" } } } },
            },
            "labels": { "type": "object", "additionalProperties": { "type": "integer" } },
            "free": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
            "small": { "type": "integer", "format": "int32" },
            "nested": { "type": "object", "default": {}, "properties": {
                "level": { "type": "string", "default": "info" },
                "deeper": { "type": "object", "default": {}, "properties": { "n": { "type": "integer", "default": 3 } } },
            } },
        } } },
    });
    assert_eq!(lines(&check_structural(&schema, "p")), Vec::<String>::new());
    let v = validator(&schema);

    // nullable
    assert!(v.validate(&object(json!({ "note": null }))).is_empty());
    let got = lines(&v.validate(&object(json!({ "strict": null }))));
    assert_eq!(
        got,
        vec![
            "spec.strict [FieldValueTypeInvalid] Invalid value: \"null\": spec.strict in body must be of type string: \"null\""
        ]
    );
    let mut pruned = object(json!({ "strict": null, "note": null }));
    v.prune(&mut pruned);
    assert_eq!(pruned["spec"], json!({ "note": null }));

    // int-or-string
    assert!(v.validate(&object(json!({ "surge": 5 }))).is_empty());
    assert!(v.validate(&object(json!({ "surge": "50%" }))).is_empty());
    let got = lines(&v.validate(&object(json!({ "surge": true }))));
    assert_eq!(
        got,
        vec![
            "spec.surge [FieldValueTypeInvalid] Invalid value: \"boolean\": spec.surge in body must be of type integer,string: \"boolean\""
        ]
    );

    // embedded resources: apiVersion and kind required, metadata pruned as ObjectMeta
    let got = lines(&v.validate(&object(
        json!({ "template": { "metadata": { "name": "x" } } }),
    )));
    assert_eq!(
        got,
        vec![
            "spec.template.apiVersion [FieldValueRequired] Required value",
            "spec.template.kind [FieldValueRequired] Required value",
        ]
    );
    let mut obj = object(json!({
        "template": { "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "x", "bogus": 1 }, "spec": { "any": 1 } },
        "typed": { "apiVersion": "v1", "kind": "T", "spec": { "x": "y", "z": 1 }, "extra": 1 },
    }));
    let removed = v.prune(&mut obj);
    assert_eq!(
        removed,
        vec![
            "spec.template.metadata.bogus",
            "spec.typed.extra",
            "spec.typed.spec.z"
        ]
    );
    assert_eq!(obj["spec"]["template"]["spec"], json!({ "any": 1 }));

    // additionalProperties
    assert!(
        v.validate(&object(json!({ "labels": { "a": 1 } })))
            .is_empty()
    );
    let got = lines(&v.validate(&object(json!({ "labels": { "a": "x" } }))));
    assert_eq!(
        got,
        vec![
            "spec.labels.a [FieldValueTypeInvalid] Invalid value: \"string\": spec.labels.a in body must be of type integer: \"string\""
        ]
    );

    // format: int32 overflow
    assert!(
        v.validate(&object(json!({ "small": 2147483647 })))
            .is_empty()
    );
    let got = lines(&v.validate(&object(json!({ "small": 2147483648u64 }))));
    assert_eq!(
        got,
        vec![
            "spec.small [FieldValueInvalid] Invalid value: \"\": Checked value must be of type integer with format int32 in spec.small"
        ]
    );

    // pruning unless x-kubernetes-preserve-unknown-fields
    let mut obj = object(json!({ "free": { "anything": { "goes": [1] } }, "unknown": 1 }));
    assert_eq!(v.prune(&mut obj), vec!["spec.unknown"]);
    assert_eq!(obj["spec"]["free"], json!({ "anything": { "goes": [1] } }));

    // defaults on nested objects, applied through defaults
    let mut obj = object(json!({}));
    assert!(v.apply_defaults(&mut obj));
    assert_eq!(
        obj["spec"]["nested"],
        json!({ "level": "info", "deeper": { "n": 3 } })
    );
    assert!(!v.apply_defaults(&mut obj));
    let mut obj = object(json!({ "nested": { "deeper": { "n": 7 } } }));
    assert!(v.apply_defaults(&mut obj));
    assert_eq!(
        obj["spec"]["nested"],
        json!({ "level": "info", "deeper": { "n": 7 } })
    );
    // No spec: nothing to default below it.
    let mut bare =
        json!({ "apiVersion": "example.com/v1", "kind": "Widget", "metadata": { "name": "w" } });
    assert!(!v.apply_defaults(&mut bare));
}

#[test]
fn defaults_are_cheap_without_defaults() {
    let v = validator(
        &json!({ "type": "object", "properties": { "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }),
    );
    let mut obj = object(json!({ "a": 1 }));
    assert!(!v.apply_defaults(&mut obj));
}

#[test]
fn odd_rules_never_panic() {
    let odd = [
        "",
        "   ",
        "self.",
        "self[",
        "'",
        "\"\"\"",
        "b'\\xff' == b''",
        "self.l.all()",
        "self.l.all(x)",
        "[].map(x, y, z, w)",
        "has(self)",
        "has(1)",
        "self.?l.hasValue()",
        "{1: 2}[1] == 2",
        "1u - 2u > 0u",
        "-9223372036854775808 / -1 == 0",
        "9223372036854775807 + 1 > 0",
        "self.s.matches('(')",
        "self.s.matches('a{1000000}')",
        "self.s.substring(5) == ''",
        "dyn(self).foo.bar == 1",
        "type(type) == type",
        "self.m.all(k, v, v == '')",
        "optional.none().value() == 1",
        "[1, 2, 3].exists_one(x, x > 0)",
        "self == self",
        "self.ä == 1",
        "\u{0}",
        "self.l.map(x, self.l).size() > 0",
        "self.l.sum() > 0 && self.l.min() < 0",
        "self.s.split('') == []",
        "self.s.charAt(-1) == ''",
        "int(self.s) > 0",
        "double('nan') != double('nan')",
        "{}.a == 1",
        "[[[]]][0][0].size() == 0",
    ];
    let mut schema = json!({ "type": "object", "properties": { "spec": { "type": "object",
        "properties": {
            "l": { "type": "array", "items": { "type": "integer" } },
            "s": { "type": "string" },
            "m": { "type": "object", "additionalProperties": { "type": "string" } },
        } } } });
    let rules: Vec<Value> = odd
        .iter()
        .map(|r| json!({ "rule": r, "message": "m" }))
        .collect();
    schema["properties"]["spec"]["x-kubernetes-validations"] = json!(rules);
    let _ = check_structural(&schema, "p");
    let _ = check_rules(&schema, "p");
    let v = validator(&schema);
    let obj = object(json!({ "l": [1, -2, 3], "s": "abc", "m": { "a": "" } }));
    let errs = v.validate(&obj);
    assert!(!errs.is_empty());
    let _ = v.validate_update(&obj, &object(json!({ "s": "x" })));
    for rule in odd {
        let one = json!({ "type": "object", "properties": { "spec": { "type": "object",
            "properties": { "s": { "type": "string" } },
            "x-kubernetes-validations": [{ "rule": rule }] } } });
        let _ = check_rules(&one, "p");
        let _ = validator(&one).validate(&object(json!({ "s": "abc" })));
    }
}
