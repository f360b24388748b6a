//! Admission checks of a CRD version's `openAPIV3Schema`, as apiextensions-apiserver
//! does them: the generic OpenAPI checks (unsupported keywords, list/map type
//! extensions), the structural-schema invariants and completeness, and the
//! validity of `default` values. Field paths and messages are Go's
//! (`spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value:
//! must not be empty for specified object fields`).
//!
//! The `x-kubernetes-validations` rules are compiled and checked too (see
//! [`crate::check_rules`]) once the rest of the schema is acceptable. Not checked:
//! the status-subresource restrictions on the root schema, and CEL cost estimates.

use serde_json::{Map, Value};

use crate::FieldError;
use crate::validator::Validator;

use crate::validator::messages as m;

/// Joins a path and a child name (`a.b`; just `b` when the path is empty).
fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// `path[key]`.
fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

fn prop(path: &str, k: &str) -> String {
    key(&child(path, "properties"), k)
}

fn type_of(s: &Map<String, Value>) -> &str {
    s.get("type").and_then(Value::as_str).unwrap_or("")
}

fn flag(s: &Map<String, Value>, k: &str) -> bool {
    s.get(k).and_then(Value::as_bool) == Some(true)
}

fn properties(s: &Map<String, Value>) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

fn sorted_keys(m: &Map<String, Value>) -> Vec<&String> {
    // serde_json's map is ordered by key unless `preserve_order` is on; sort anyway.
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    keys
}

/// Structural-schema check of a CRD version's schema.
///
/// Returns the causes kube-apiserver would give, with fields under `field_prefix`
/// (e.g. `spec.versions[0].schema.openAPIV3Schema`): types everywhere except under
/// `x-kubernetes-int-or-string` / `x-kubernetes-preserve-unknown-fields`, no types,
/// defaults, descriptions or extensions inside `allOf`/`anyOf`/`oneOf`/`not`, root
/// `metadata` restricted to `name`/`generateName`, no `additionalProperties` at the
/// root, unsupported keywords (`$ref`, `patternProperties`, `uniqueItems`, ...),
/// `x-kubernetes-list-type`/`-map-type` consistency (`map` keys scalar, unique,
/// required or defaulted, not nullable; `set` items atomic), `default` values that
/// validate against their schema and have no unknown fields, and, when all that
/// holds, the `x-kubernetes-validations` rules ([`crate::check_rules`]: e.g.
/// `...x-kubernetes-validations[0].rule: Invalid value: ...: compilation failed:
/// ...`). An empty list means the schema is acceptable.
pub fn check_structural(schema: &Value, field_prefix: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(root) = schema.as_object() else {
        errs.push(m::invalid(field_prefix, schema, "must be an object"));
        return errs;
    };
    standard(
        root,
        field_prefix,
        &Standard {
            is_root: true,
            inside_meta: false,
            forbid_defaults: None,
        },
        &mut errs,
    );

    let mut structural = Vec::new();
    invariants(root, field_prefix, Level::Root, &mut structural);
    completeness(root, field_prefix, &mut structural);
    structural.sort_by_key(ToString::to_string);
    structural.dedup();
    let structural_ok = structural.is_empty();
    errs.extend(structural);

    if structural_ok {
        let rules = crate::check_rules(schema, field_prefix);
        let mut default_errs = Vec::new();
        defaults(root, field_prefix, true, false, &mut default_errs);
        if !rules.is_empty() {
            // A rule that doesn't compile also fails every default below it:
            // report it once, as a rule error.
            default_errs.retain(|e| !e.message.contains(": rule compile error: "));
        }
        errs.extend(default_errs);
        errs.extend(rules);
    }
    errs
}

/// Context of the generic checks.
struct Standard<'a> {
    is_root: bool,
    inside_meta: bool,
    forbid_defaults: Option<&'a str>,
}

const OPENAPI_TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// `ValidateCustomResourceDefinitionOpenAPISchema` and `specStandardValidatorV3`.
fn standard(s: &Map<String, Value>, p: &str, ctx: &Standard<'_>, errs: &mut Vec<FieldError>) {
    let t = type_of(s);
    if !t.is_empty() && !OPENAPI_TYPES.contains(&t) {
        let allowed: Vec<String> = OPENAPI_TYPES.iter().map(|s| (*s).to_owned()).collect();
        errs.push(m::not_supported(
            &child(p, "type"),
            &Value::String(t.into()),
            &allowed,
        ));
    }
    if s.contains_key("default")
        && let Some(reason) = ctx.forbid_defaults
    {
        errs.push(m::forbidden(
            &child(p, "default"),
            &format!("must not be set {reason}"),
        ));
    }
    if s.get("id")
        .and_then(Value::as_str)
        .is_some_and(|id| !id.is_empty())
    {
        errs.push(m::forbidden(&child(p, "id"), "id is not supported"));
    }
    if s.contains_key("additionalItems") {
        errs.push(m::forbidden(
            &child(p, "additionalItems"),
            "additionalItems is not supported",
        ));
    }
    if s.get("patternProperties")
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty())
    {
        errs.push(m::forbidden(
            &child(p, "patternProperties"),
            "patternProperties is not supported",
        ));
    }
    if s.get("definitions")
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty())
    {
        errs.push(m::forbidden(
            &child(p, "definitions"),
            "definitions is not supported",
        ));
    }
    if s.contains_key("dependencies") {
        errs.push(m::forbidden(
            &child(p, "dependencies"),
            "dependencies is not supported",
        ));
    }
    if s.contains_key("$ref") {
        errs.push(m::forbidden(&child(p, "$ref"), "$ref is not supported"));
    }
    if t == "null" {
        errs.push(m::forbidden(
            &child(p, "type"),
            "type cannot be set to null, use nullable as an alternative",
        ));
    }
    if s.get("items").is_some_and(Value::is_array) {
        errs.push(m::forbidden(
            &child(p, "items"),
            "items must be a schema object and not an array",
        ));
    }
    if ctx.inside_meta && flag(s, "x-kubernetes-embedded-resource") {
        errs.push(m::forbidden(
            &child(p, "x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        ));
    }
    if flag(s, "uniqueItems") {
        errs.push(m::forbidden(
            &child(p, "uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }

    let props = properties(s);
    if let Some(ap) = s.get("additionalProperties") {
        if props.is_some_and(|p| !p.is_empty()) && (ap.as_bool() != Some(true)) {
            errs.push(m::forbidden(
                &child(p, "additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        if let Some(aps) = ap.as_object() {
            let sub = Standard {
                is_root: false,
                inside_meta: ctx.inside_meta,
                forbid_defaults: if ctx.inside_meta {
                    Some("inside additionalProperties applying to object metadata")
                } else {
                    ctx.forbid_defaults
                },
            };
            standard(aps, &child(p, "additionalProperties"), &sub, errs);
        }
    }
    if let Some(props) = props {
        let embedded = flag(s, "x-kubernetes-embedded-resource");
        for k in sorted_keys(props) {
            let Some(ps) = props[k].as_object() else {
                errs.push(m::invalid(&prop(p, k), &props[k], "must be an object"));
                continue;
            };
            let is_meta = matches!(k.as_str(), "metadata" | "kind" | "apiVersion");
            let top_level = format!("in top-level {k}");
            let sub = if (ctx.is_root || embedded) && is_meta {
                Standard {
                    is_root: false,
                    inside_meta: true,
                    forbid_defaults: if ctx.is_root {
                        Some(top_level.as_str())
                    } else {
                        ctx.forbid_defaults
                    },
                }
            } else {
                Standard {
                    is_root: false,
                    inside_meta: ctx.inside_meta,
                    forbid_defaults: ctx.forbid_defaults,
                }
            };
            standard(ps, &prop(p, k), &sub, errs);
        }
    }
    let nested = Standard {
        is_root: false,
        inside_meta: ctx.inside_meta,
        forbid_defaults: ctx.forbid_defaults,
    };
    if let Some(not) = s.get("not").and_then(Value::as_object) {
        standard(not, &child(p, "not"), &nested, errs);
    }
    for kw in ["allOf", "oneOf", "anyOf"] {
        if let Some(list) = s.get(kw).and_then(Value::as_array) {
            for (i, sub) in list.iter().enumerate() {
                if let Some(sub) = sub.as_object() {
                    standard(sub, &format!("{}[{i}]", child(p, kw)), &nested, errs);
                }
            }
        }
    }
    if let Some(items) = s.get("items").and_then(Value::as_object) {
        standard(items, &child(p, "items"), &nested, errs);
    }

    if s.get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(false)
    {
        errs.push(m::invalid(
            &child(p, "x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(false),
            "must be true or undefined",
        ));
    }
    list_map_extensions(s, p, t, errs);
}

/// The `x-kubernetes-map-type` / `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` checks.
fn list_map_extensions(s: &Map<String, Value>, p: &str, t: &str, errs: &mut Vec<FieldError>) {
    if let Some(map_type) = s.get("x-kubernetes-map-type") {
        if t != "object" {
            let detail = "must be object if x-kubernetes-map-type is specified";
            if t.is_empty() {
                errs.push(m::required_detail(&child(p, "type"), detail));
            } else {
                errs.push(m::invalid(
                    &child(p, "type"),
                    &Value::String(t.into()),
                    detail,
                ));
            }
        }
        if !matches!(map_type.as_str(), Some("atomic" | "granular")) {
            errs.push(m::not_supported(
                &child(p, "x-kubernetes-map-type"),
                map_type,
                &["atomic".into(), "granular".into()],
            ));
        }
    }
    let list_type = s.get("x-kubernetes-list-type");
    if let Some(lt) = list_type {
        if t != "array" {
            let detail = "must be array if x-kubernetes-list-type is specified";
            if t.is_empty() {
                errs.push(m::required_detail(&child(p, "type"), detail));
            } else {
                errs.push(m::invalid(
                    &child(p, "type"),
                    &Value::String(t.into()),
                    detail,
                ));
            }
        }
        if !matches!(lt.as_str(), Some("atomic" | "set" | "map")) {
            errs.push(m::not_supported(
                &child(p, "x-kubernetes-list-type"),
                lt,
                &["atomic".into(), "set".into(), "map".into()],
            ));
        }
    }
    let keys: Vec<&str> = s
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let lt = list_type.and_then(Value::as_str);
    if !keys.is_empty() && lt != Some("map") {
        let detail = "must be map if x-kubernetes-list-map-keys is non-empty";
        match list_type {
            None => errs.push(m::required_detail(
                &child(p, "x-kubernetes-list-type"),
                detail,
            )),
            Some(v) => errs.push(m::invalid(&child(p, "x-kubernetes-list-type"), v, detail)),
        }
    }
    if lt == Some("map") {
        if keys.is_empty() {
            errs.push(m::required_detail(
                &child(p, "x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match s.get("items").and_then(Value::as_object) {
            None => errs.push(m::required_detail(
                &child(p, "items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(items) => {
                let it = type_of(items);
                if it != "object" {
                    errs.push(m::invalid(
                        &child(&child(p, "items"), "type"),
                        &Value::String(it.into()),
                        "must be object if parent array's x-kubernetes-list-type is map",
                    ));
                } else {
                    let item_props = properties(items);
                    let mut seen: Vec<&str> = Vec::new();
                    for k in &keys {
                        match item_props
                            .and_then(|ip| ip.get(*k))
                            .and_then(Value::as_object)
                        {
                            Some(kp) => {
                                if matches!(type_of(kp), "array" | "object") {
                                    errs.push(m::invalid(
                                        &child(&key(&child(&child(p, "items"), "properties"), k), "type"),
                                        &Value::String(it.into()),
                                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                    ));
                                }
                            }
                            None => errs.push(m::invalid(
                                &child(p, "x-kubernetes-list-map-keys"),
                                &s["x-kubernetes-list-map-keys"],
                                "entries must all be names of item properties",
                            )),
                        }
                        if seen.contains(k) {
                            errs.push(m::invalid(
                                &child(p, "x-kubernetes-list-map-keys"),
                                &s["x-kubernetes-list-map-keys"],
                                "must not contain duplicate entries",
                            ));
                        }
                        seen.push(k);
                    }
                }
            }
        }
    }
    if lt == Some("set")
        && t == "array"
        && let Some(items) = s.get("items").and_then(Value::as_object)
    {
        let it = type_of(items);
        if it == "array"
            && let Some(ilt) = items.get("x-kubernetes-list-type")
            && ilt.as_str() != Some("atomic")
        {
            errs.push(m::invalid(
                &child(&child(p, "items"), "x-kubernetes-list-type"),
                ilt,
                "must be atomic as item of a list with x-kubernetes-list-type=set",
            ));
        }
        if it == "object"
            && items.get("x-kubernetes-map-type").and_then(Value::as_str) != Some("atomic")
        {
            errs.push(m::invalid(
                &child(&child(p, "items"), "x-kubernetes-map-type"),
                items.get("x-kubernetes-list-type").unwrap_or(&Value::Null),
                "must be atomic as item of a list with x-kubernetes-list-type=set",
            ));
        }
    }
    map_list_keys_set(s, p, lt, &keys, errs);
}

/// `validateMapListKeysMapSet`: items of `set` and `map` lists can't be nullable;
/// `map` keys must be required or defaulted, and not nullable.
fn map_list_keys_set(
    s: &Map<String, Value>,
    p: &str,
    lt: Option<&str>,
    keys: &[&str],
    errs: &mut Vec<FieldError>,
) {
    let Some(lt @ ("set" | "map")) = lt else {
        return;
    };
    let Some(items) = s.get("items").and_then(Value::as_object) else {
        return;
    };
    let ip = child(p, "items");
    if flag(items, "nullable") {
        errs.push(m::forbidden(
            &child(&ip, "nullable"),
            &format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
        ));
    }
    if lt != "map" {
        return;
    }
    let required: Vec<&str> = items
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = properties(items) else {
        return;
    };
    for k in keys {
        let Some(kp) = props.get(*k).and_then(Value::as_object) else {
            continue;
        };
        let kpath = key(&child(&ip, "properties"), k);
        if !required.contains(k) && kp.get("default").is_none_or(Value::is_null) {
            errs.push(m::required_detail(
                &child(&kpath, "default"),
                "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
            ));
        }
        if flag(kp, "nullable") {
            errs.push(m::forbidden(
                &child(&kpath, "nullable"),
                "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
            ));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// Whether `anyOf` is exactly `[{type: integer}, {type: string}]`.
fn is_int_or_string_any_of(v: Option<&Value>) -> bool {
    let Some(list) = v.and_then(Value::as_array) else {
        return false;
    };
    list.len() == 2
        && list[0]
            .as_object()
            .is_some_and(|o| o.len() == 1 && type_of(o) == "integer")
        && list[1]
            .as_object()
            .is_some_and(|o| o.len() == 1 && type_of(o) == "string")
}

/// `validateStructuralInvariants`.
fn invariants(s: &Map<String, Value>, p: &str, lvl: Level, errs: &mut Vec<FieldError>) {
    let t = type_of(s);
    let items = s.get("items").and_then(Value::as_object);
    if t == "array" && items.is_none() {
        errs.push(m::required_detail(&child(p, "items"), "must be specified"));
    }
    if let Some(items) = items {
        invariants(items, &child(p, "items"), Level::Item, errs);
    }
    let props = properties(s);
    if let Some(props) = props {
        for k in sorted_keys(props) {
            if let Some(ps) = props[k].as_object() {
                invariants(ps, &prop(p, k), Level::Field, errs);
            }
        }
    }
    let additional = s.get("additionalProperties");
    if let Some(ap) = additional {
        if lvl == Level::Root {
            errs.push(m::forbidden(
                &child(p, "additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Some(aps) = ap.as_object() {
            invariants(aps, &child(p, "additionalProperties"), Level::Field, errs);
        }
    }

    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errs.push(m::invalid(
            &child(p, "x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(m::invalid(
            &child(p, "x-kubernetes-embedded-resource"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }

    let skip_any_of = is_int_or_string_any_of(s.get("anyOf"));
    let skip_first_all_of_any_of = s
        .get("allOf")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .is_some_and(|first| is_int_or_string_any_of(first.get("anyOf")));
    value_validation(s, p, skip_any_of, skip_first_all_of_any_of, errs);

    if embedded && t != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        if t.is_empty() {
            errs.push(m::required_detail(&child(p, "type"), detail));
        } else {
            errs.push(m::invalid(
                &child(p, "type"),
                &Value::String(t.into()),
                detail,
            ));
        }
    } else if t.is_empty() && !int_or_string && !preserve {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(m::required_detail(&child(p, "type"), detail));
    }
    if embedded && additional.is_some() {
        errs.push(m::forbidden(
            &child(p, "additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !t.is_empty() && t != "object" {
        errs.push(m::invalid(
            &child(p, "type"),
            &Value::String(t.into()),
            "must be object at the root",
        ));
    }

    let check_metadata = lvl == Level::Root || embedded;
    if let Some(props) = props {
        if check_metadata {
            for name in ["kind", "apiVersion"] {
                if let Some(ps) = props.get(name).and_then(Value::as_object) {
                    let pt = type_of(ps);
                    if pt != "string" {
                        errs.push(m::invalid(
                            &child(&prop(p, name), "type"),
                            &Value::String(pt.into()),
                            "must be string",
                        ));
                    }
                }
            }
        }
        if let Some(meta) = props.get("metadata").and_then(Value::as_object) {
            metadata_invariants(meta, check_metadata, lvl, &prop(p, "metadata"), errs);
        }
    }
    if embedded && !preserve && props.is_none_or(Map::is_empty) {
        errs.push(m::required_detail(
            &child(p, "properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// `validateStructuralMetadataInvariants`.
fn metadata_invariants(
    s: &Map<String, Value>,
    check_metadata: bool,
    lvl: Level,
    p: &str,
    errs: &mut Vec<FieldError>,
) {
    let t = type_of(s);
    if check_metadata && t != "object" {
        errs.push(m::invalid(
            &child(p, "type"),
            &Value::String(t.into()),
            "must be object",
        ));
    }
    if lvl == Level::Root {
        let only_names = properties(s).is_none_or(|props| {
            !props.is_empty() && props.keys().all(|k| k == "name" || k == "generateName")
        });
        let other_keys = s
            .keys()
            .any(|k| !matches!(k.as_str(), "type" | "default" | "properties"));
        if !only_names || other_keys {
            errs.push(m::forbidden(
                p,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
}

/// Keywords that must not appear in value validations (`NestedValueValidation`'s
/// forbidden generics and extensions), with Go's messages.
const FORBIDDEN_NESTED: [(&str, &str); 10] = [
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    (
        "x-kubernetes-preserve-unknown-fields",
        "must be false to be structural",
    ),
    (
        "x-kubernetes-embedded-resource",
        "must be false to be structural",
    ),
    (
        "x-kubernetes-int-or-string",
        "must be false to be structural",
    ),
    (
        "x-kubernetes-list-map-keys",
        "must be empty to be structural",
    ),
    (
        "x-kubernetes-list-type",
        "must be undefined to be structural",
    ),
    (
        "x-kubernetes-map-type",
        "must be undefined to be structural",
    ),
    ("x-kubernetes-validations", "must be empty to be structural"),
];

fn pattern_check(s: &Map<String, Value>, p: &str, errs: &mut Vec<FieldError>) {
    if let Some(pattern) = s.get("pattern").and_then(Value::as_str)
        && let Err(e) = regex::Regex::new(pattern)
    {
        errs.push(m::invalid(
            &child(p, "pattern"),
            &Value::String(pattern.into()),
            &format!("must be a valid regular expression, but isn't: {e}"),
        ));
    }
}

/// `validateValueValidation`.
fn value_validation(
    s: &Map<String, Value>,
    p: &str,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    errs: &mut Vec<FieldError>,
) {
    if !skip_any_of {
        junctor(s, "anyOf", p, |_| false, errs);
    }
    junctor(s, "allOf", p, |i| skip_first_all_of_any_of && i == 0, errs);
    junctor(s, "oneOf", p, |_| false, errs);
    if let Some(not) = s.get("not").and_then(Value::as_object) {
        nested(not, &child(p, "not"), false, errs);
    }
    pattern_check(s, p, errs);
}

fn junctor(
    s: &Map<String, Value>,
    kw: &str,
    p: &str,
    skip_any_of: impl Fn(usize) -> bool,
    errs: &mut Vec<FieldError>,
) {
    if let Some(list) = s.get(kw).and_then(Value::as_array) {
        for (i, sub) in list.iter().enumerate() {
            if let Some(sub) = sub.as_object() {
                nested(sub, &format!("{}[{i}]", child(p, kw)), skip_any_of(i), errs);
            }
        }
    }
}

/// `validateNestedValueValidation`.
fn nested(s: &Map<String, Value>, p: &str, skip_any_of: bool, errs: &mut Vec<FieldError>) {
    value_validation(s, p, skip_any_of, false, errs);
    if let Some(items) = s.get("items").and_then(Value::as_object) {
        nested(items, &child(p, "items"), false, errs);
    }
    if let Some(props) = properties(s) {
        for k in sorted_keys(props) {
            if let Some(ps) = props[k].as_object() {
                nested(ps, &prop(p, k), false, errs);
            }
        }
        if props.contains_key("metadata") {
            errs.push(m::forbidden(
                &prop(p, "metadata"),
                "must not be specified in a nested context",
            ));
        }
    }
    if s.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty())
    {
        errs.push(m::forbidden(
            &child(p, "type"),
            "must be empty to be structural",
        ));
    }
    if s.contains_key("additionalProperties") {
        errs.push(m::forbidden(
            &child(p, "additionalProperties"),
            "must be undefined to be structural",
        ));
    }
    if s.get("default").is_some_and(|d| !d.is_null()) {
        errs.push(m::forbidden(
            &child(p, "default"),
            "must be undefined to be structural",
        ));
    }
    for (kw, detail) in FORBIDDEN_NESTED {
        let present = match s.get(kw) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::String(v)) => !v.is_empty(),
            Some(Value::Array(v)) => !v.is_empty(),
            Some(_) => true,
        };
        if present {
            errs.push(m::forbidden(&child(p, kw), detail));
        }
    }
}

/// `validateStructuralCompleteness`: properties and items used in the root's value
/// validations must exist in the structural schema.
fn completeness(s: &Map<String, Value>, p: &str, errs: &mut Vec<FieldError>) {
    value_completeness(s, Some(s), p, p, errs);
}

fn value_completeness(
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &str,
    v_path: &str,
    errs: &mut Vec<FieldError>,
) {
    if let Some(not) = v.get("not").and_then(Value::as_object) {
        nested_completeness(not, s, s_path, &child(v_path, "not"), errs);
    }
    for kw in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = v.get(kw).and_then(Value::as_array) {
            for (i, sub) in list.iter().enumerate() {
                if let Some(sub) = sub.as_object() {
                    nested_completeness(
                        sub,
                        s,
                        s_path,
                        &format!("{}[{i}]", child(v_path, kw)),
                        errs,
                    );
                }
            }
        }
    }
}

fn nested_completeness(
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &str,
    v_path: &str,
    errs: &mut Vec<FieldError>,
) {
    let Some(s) = s else {
        errs.push(m::required_detail(
            s_path,
            &format!("because it is defined in {v_path}"),
        ));
        return;
    };
    value_completeness(v, Some(s), s_path, v_path, errs);
    if let Some(items) = v.get("items").and_then(Value::as_object) {
        nested_completeness(
            items,
            s.get("items").and_then(Value::as_object),
            &child(s_path, "items"),
            &child(v_path, "items"),
            errs,
        );
    }
    if let Some(props) = properties(v) {
        let s_props = properties(s);
        for k in sorted_keys(props) {
            let Some(vp) = props[k].as_object() else {
                continue;
            };
            match s_props.and_then(|sp| sp.get(k)).and_then(Value::as_object) {
                Some(sp) => {
                    nested_completeness(vp, Some(sp), &prop(s_path, k), &prop(v_path, k), errs)
                }
                None => errs.push(m::required_detail(
                    &prop(s_path, k),
                    &format!("because it is defined in {}", prop(v_path, k)),
                )),
            }
        }
    }
}

/// `ValidateDefaults`: every `default` (outside resource metadata) must validate
/// against its schema and carry no unknown fields.
fn defaults(
    s: &Map<String, Value>,
    p: &str,
    resource: bool,
    inside_meta: bool,
    errs: &mut Vec<FieldError>,
) {
    let embedded = resource || flag(s, "x-kubernetes-embedded-resource");
    if let (Some(d), false) = (s.get("default"), inside_meta) {
        let schema = Value::Object(s.clone());
        if let Ok(v) = Validator::from_subschema(&schema, embedded) {
            let base = child(p, "default");
            let mut pruned = d.clone();
            v.prune(&mut pruned);
            if pruned != *d {
                errs.push(m::invalid(&base, d, "must not have unknown fields"));
            }
            for mut e in v.validate(d) {
                e.field = if e.field.is_empty() {
                    base.clone()
                } else {
                    child(&base, &e.field)
                };
                errs.push(e);
            }
        }
    }
    if let Some(items) = s.get("items").and_then(Value::as_object) {
        defaults(items, &child(p, "items"), false, inside_meta, errs);
    }
    if let Some(props) = properties(s) {
        for k in sorted_keys(props) {
            if let Some(ps) = props[k].as_object() {
                let meta = embedded && matches!(k.as_str(), "metadata" | "apiVersion" | "kind");
                defaults(ps, &prop(p, k), false, inside_meta || meta, errs);
            }
        }
    }
    if let Some(ap) = s.get("additionalProperties").and_then(Value::as_object) {
        defaults(
            ap,
            &child(p, "additionalProperties"),
            false,
            inside_meta,
            errs,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PREFIX: &str = "spec.validation.openAPIV3Schema";

    fn fields(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn crontab_is_structural() {
        let s = json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "cronSpec": {"type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"},
                    "image": {"type": "string"},
                    "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                    "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                }},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }
        });
        assert_eq!(fields(&check_structural(&s, PREFIX)), Vec::<String>::new());
    }

    #[test]
    fn missing_types() {
        let s = json!({
            "type": "object",
            "properties": {"spec": {"properties": {"a": {"type": "array"}}}}
        });
        assert_eq!(
            fields(&check_structural(&s, PREFIX)),
            vec![
                "spec.validation.openAPIV3Schema.properties[spec].properties[a].items: Required value: must be specified",
                "spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
            ]
        );
        let errs = check_structural(&json!({"properties": {}}), PREFIX);
        assert_eq!(
            fields(&errs),
            vec![
                "spec.validation.openAPIV3Schema.type: Required value: must not be empty at the root"
            ]
        );
        assert_eq!(errs[0].reason, "FieldValueRequired");
    }

    #[test]
    fn nested_and_metadata() {
        let s = json!({
            "type": "object",
            "additionalProperties": {"type": "string"},
            "properties": {
                "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
                "spec": {"type": "object", "anyOf": [{"type": "object", "properties": {"x": {}}}]},
            }
        });
        let got = fields(&check_structural(&s, PREFIX));
        assert!(got.contains(&"spec.validation.openAPIV3Schema.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive".to_owned()), "{got:#?}");
        assert!(got.contains(&"spec.validation.openAPIV3Schema.additionalProperties: Forbidden: must not be used at the root".to_owned()), "{got:#?}");
        assert!(got.contains(&"spec.validation.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified".to_owned()), "{got:#?}");
        assert!(got.contains(&"spec.validation.openAPIV3Schema.properties[spec].anyOf[0].type: Forbidden: must be empty to be structural".to_owned()), "{got:#?}");
    }

    #[test]
    fn completeness_and_unsupported() {
        let s = json!({
            "type": "object",
            "anyOf": [{"properties": {"foo": {"minLength": 1}}}],
            "properties": {"bar": {"type": "string", "$ref": "#/x", "uniqueItems": true}},
        });
        let got = fields(&check_structural(&s, ""));
        assert_eq!(
            got,
            vec![
                "properties[bar].$ref: Forbidden: $ref is not supported",
                "properties[bar].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
                "properties[foo]: Required value: because it is defined in anyOf[0].properties[foo]",
            ]
        );
    }

    #[test]
    fn bad_defaults() {
        let s = json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "default": "three"},
                "tmpl": {"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": 1}},
            }}}
        });
        let got = fields(&check_structural(&s, "p"));
        assert_eq!(
            got,
            vec![
                "p.properties[spec].properties[replicas].default: Invalid value: \"string\":  in body must be of type integer: \"string\"",
                "p.properties[spec].properties[tmpl].default: Invalid value: {\"a\":\"x\",\"b\":1}: must not have unknown fields",
            ]
        );
    }
}
