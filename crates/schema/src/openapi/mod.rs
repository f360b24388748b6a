//! The `/openapi/v2` and `/openapi/v3` documents, built from the list of served
//! resources.
//!
//! Definitions are gathered in one canonical form (Swagger 2.0 `#/definitions/`
//! references, see [`crate::builtin`]) and then converted: for v3, references move
//! to `#/components/schemas/` and `IntOrString`/`Quantity` get kube's `oneOf`
//! forms; for v2, `oneOf`/`anyOf`/`not`/`nullable` are dropped (gnostic's v2 schema
//! cannot carry them) and `IntOrString`/`Quantity` become strings, as kube-apiserver
//! publishes them.
//!
//! Custom resources are published like kube-apiserver does: the structural schema
//! (or `{type: object}` if it is not structural), with `apiVersion`, `kind` and a
//! `metadata` reference to `ObjectMeta` added, and `x-kubernetes-group-version-kind`.

mod hash;
mod protobuf;
mod v3;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use crate::builtin::{
    API_VERSION_DESCRIPTION, INT_OR_STRING, KIND_DESCRIPTION, LIST_META, OBJECT_META, QUANTITY,
    builtins, closure, gvk_extension, list_schema,
};
use crate::structural::check_structural;
use crate::{ResourceInfo, SchemaSource};

pub use v3::{openapi_v3_group_version, openapi_v3_root};

/// The Kubernetes version the documents describe (k8s-openapi's `v1_33`).
pub(crate) const KUBERNETES_VERSION: &str = "v1.33.0";

const DEFINITIONS_PREFIX: &str = "#/definitions/";
const COMPONENTS_PREFIX: &str = "#/components/schemas/";

/// Which document a definition is being prepared for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    V2,
    V3,
}

/// kube's model name for a custom kind: reversed group, version, kind
/// (`stable.example.com`, `v1`, `CronTab` → `com.example.stable.v1.CronTab`).
pub(crate) fn gvk_model_name(group: &str, version: &str, kind: &str) -> String {
    let mut parts: Vec<&str> = group.split('.').filter(|p| !p.is_empty()).collect();
    parts.reverse();
    let mut name = parts.join(".");
    if !name.is_empty() {
        name.push('.');
    }
    name.push_str(version);
    name.push('.');
    name.push_str(kind);
    name
}

/// Definition names of one resource's kind and list kind.
pub(crate) struct ResourceDefs {
    pub(crate) kind: String,
    pub(crate) list: String,
}

/// The definitions a document needs.
pub(crate) struct Gathered {
    /// Definitions of custom (and schemaless) kinds, canonical form.
    custom: BTreeMap<String, Value>,
    /// Names of the built-in definitions needed.
    builtin: BTreeSet<&'static str>,
    /// Each resource's definition names, in input order.
    pub(crate) names: Vec<ResourceDefs>,
}

/// Gathers the definitions needed by `resources` (for `flavor`), plus the closure of
/// `extra` built-in definitions.
pub(crate) fn gather<'r>(
    resources: impl IntoIterator<Item = &'r ResourceInfo>,
    extra: &[&str],
    flavor: Flavor,
) -> Gathered {
    let b = builtins();
    let mut custom: BTreeMap<String, Value> = BTreeMap::new();
    let mut roots: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
    let mut names = Vec::new();
    for r in resources {
        match (&r.schema, b.kind(&r.group, &r.version, &r.kind)) {
            (SchemaSource::Builtin, Some(entry)) => {
                roots.push(entry.def.clone());
                roots.push(entry.list_def.clone());
                names.push(ResourceDefs {
                    kind: entry.def.clone(),
                    list: entry.list_def.clone(),
                });
            }
            (source, _) => {
                let kind = gvk_model_name(&r.group, &r.version, &r.kind);
                let list = format!("{kind}List");
                let schema = match source {
                    SchemaSource::Custom(s) => custom_definition(r, s, flavor),
                    SchemaSource::Builtin => placeholder_definition(r),
                };
                custom.insert(kind.clone(), schema);
                custom.insert(
                    list.clone(),
                    list_schema(
                        &r.group,
                        &r.version,
                        &r.kind,
                        &format!("{DEFINITIONS_PREFIX}{kind}"),
                        &format!("{DEFINITIONS_PREFIX}{LIST_META}"),
                    ),
                );
                roots.push(OBJECT_META.to_owned());
                roots.push(LIST_META.to_owned());
                names.push(ResourceDefs { kind, list });
            }
        }
    }
    let builtin = closure(&b.defs, roots.iter().map(String::as_str))
        .into_keys()
        .filter(|name| !custom.contains_key(*name))
        .collect();
    Gathered {
        custom,
        builtin,
        names,
    }
}

/// A schema for a resource that claims to be built in but has no k8s-openapi type.
fn placeholder_definition(r: &ResourceInfo) -> Value {
    json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "x-kubernetes-group-version-kind": gvk_extension(&r.group, &r.version, &r.kind),
    })
}

/// Keywords kept when publishing a CRD schema (the structural schema's fields).
const PUBLISHED_KEYWORDS: &[&str] = &[
    "description",
    "type",
    "title",
    "default",
    "nullable",
    "externalDocs",
    "example",
    "format",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "items",
    "properties",
    "additionalProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// The published schema of a custom resource (`buildKubeNative`).
fn custom_definition(r: &ResourceInfo, schema: &Value, flavor: Flavor) -> Value {
    let gvk = gvk_extension(&r.group, &r.version, &r.kind);
    let structural = schema.is_object() && check_structural(schema, "").is_empty();
    let root_preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    if !structural || (flavor == Flavor::V2 && root_preserve) {
        return json!({ "type": "object", "x-kubernetes-group-version-kind": gvk });
    }
    let mut s = filter_keywords(schema);
    match flavor {
        Flavor::V3 => unfold_int_or_string(&mut s),
        Flavor::V2 => {
            to_v2_structural(&mut s);
            remove_key_recursive(&mut s, "default");
        }
    }
    if let Value::Object(map) = &mut s {
        let props = map
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(props) = props {
            props.insert("metadata".into(), metadata_ref());
            props.insert(
                "apiVersion".into(),
                json!({ "description": API_VERSION_DESCRIPTION, "type": "string" }),
            );
            props.insert(
                "kind".into(),
                json!({ "description": KIND_DESCRIPTION, "type": "string" }),
            );
        }
    }
    add_embedded_properties(&mut s, flavor);
    if let Value::Object(map) = &mut s {
        map.insert("x-kubernetes-group-version-kind".into(), gvk);
    }
    s
}

fn metadata_ref() -> Value {
    json!({
        "$ref": format!("{DEFINITIONS_PREFIX}{OBJECT_META}"),
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    })
}

/// Keeps only the keywords a structural schema carries, recursively.
fn filter_keywords(v: &Value) -> Value {
    let Value::Object(map) = v else {
        return v.clone();
    };
    let mut out = Map::new();
    for (k, child) in map {
        if !PUBLISHED_KEYWORDS.contains(&k.as_str()) {
            continue;
        }
        let child = match k.as_str() {
            "properties" => match child {
                Value::Object(props) => Value::Object(
                    props
                        .iter()
                        .map(|(name, s)| (name.clone(), filter_keywords(s)))
                        .collect(),
                ),
                other => other.clone(),
            },
            "items" | "not" => filter_keywords(child),
            "additionalProperties" if child.is_object() => filter_keywords(child),
            "allOf" | "oneOf" | "anyOf" => match child {
                Value::Array(list) => Value::Array(list.iter().map(filter_keywords).collect()),
                other => other.clone(),
            },
            _ => child.clone(),
        };
        out.insert(k.clone(), child);
    }
    Value::Object(out)
}

/// Calls `f` on every schema node of a structural schema (not into junctors).
fn visit_structural(v: &mut Value, f: &mut impl FnMut(&mut Map<String, Value>)) {
    let Value::Object(map) = v else { return };
    f(map);
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for child in props.values_mut() {
            visit_structural(child, f);
        }
    }
    if let Some(items) = map.get_mut("items") {
        visit_structural(items, f);
    }
    if let Some(ap @ Value::Object(_)) = map.get_mut("additionalProperties") {
        visit_structural(ap, f);
    }
}

/// `Structural.Unfold`: `x-kubernetes-int-or-string` gets its `anyOf` spelled out.
fn unfold_int_or_string(v: &mut Value) {
    visit_structural(v, &mut |map| {
        if map
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            != Some(true)
        {
            return;
        }
        let pattern = json!([{"type": "integer"}, {"type": "string"}]);
        let any_of_pattern = map.get("anyOf") == Some(&pattern);
        let all_of_pattern = map
            .get("allOf")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(|f| f.get("anyOf"))
            == Some(&pattern);
        if any_of_pattern || all_of_pattern {
            return;
        }
        if map.contains_key("anyOf") {
            let mut all_of = vec![json!({ "anyOf": pattern })];
            if let Some(Value::Array(existing)) = map.remove("allOf") {
                all_of.extend(existing);
            }
            map.insert("allOf".into(), Value::Array(all_of));
        } else {
            map.insert("anyOf".into(), pattern);
        }
    });
}

/// `ToStructuralOpenAPIV2`.
fn to_v2_structural(v: &mut Value) {
    visit_structural(v, &mut |map| {
        for k in ["allOf", "oneOf", "anyOf", "not"] {
            map.remove(k);
        }
        if map.remove("nullable").and_then(|n| n.as_bool()) == Some(true) {
            map.remove("type");
            map.remove("items");
            map.remove("properties");
        }
        if map
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true)
        {
            map.remove("items");
            map.remove("properties");
            if map.get("type").and_then(Value::as_str) == Some("object") {
                map.remove("type");
            }
        }
        if !map.contains_key("items") && map.get("type").and_then(Value::as_str) == Some("array") {
            map.remove("type");
        }
        let nullable_props: Vec<String> = map
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .filter(|(_, s)| s.get("nullable").and_then(Value::as_bool) == Some(true))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        let ap_nullable = map
            .get("additionalProperties")
            .and_then(|ap| ap.get("nullable"))
            .and_then(Value::as_bool)
            == Some(true);
        if ap_nullable {
            map.remove("required");
        } else if !nullable_props.is_empty()
            && let Some(Value::Array(req)) = map.get_mut("required")
        {
            req.retain(|r| {
                r.as_str()
                    .is_none_or(|r| !nullable_props.iter().any(|p| p == r))
            });
            if req.is_empty() {
                map.remove("required");
            }
        }
    });
}

/// `addEmbeddedProperties`: embedded resources get `apiVersion`, `kind`, `metadata`.
fn add_embedded_properties(v: &mut Value, flavor: Flavor) {
    visit_structural(v, &mut |map| {
        let preserve = map
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true);
        if preserve && flavor == Flavor::V2 {
            return;
        }
        if map
            .get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            != Some(true)
        {
            return;
        }
        let props = map
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(props) = props {
            props.insert("apiVersion".into(), json!({
                "description": "apiVersion defines the versioned schema of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
                "type": "string",
            }));
            props.insert("kind".into(), json!({
                "description": "kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                "type": "string",
            }));
            props.insert("metadata".into(), metadata_ref());
        }
        let required = map
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(req) = required {
            for k in ["kind", "apiVersion"] {
                if !req.iter().any(|r| r.as_str() == Some(k)) {
                    req.push(Value::String(k.into()));
                }
            }
        }
    });
}

fn remove_key_recursive(v: &mut Value, key: &str) {
    visit_structural(v, &mut |map| {
        map.remove(key);
    });
}

/// Rewrites `$ref`s from `#/definitions/` to `prefix`.
fn rewrite_refs(v: &mut Value, prefix: &str) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if k == "$ref" {
                    if let Value::String(r) = child
                        && let Some(name) = r.strip_prefix(DEFINITIONS_PREFIX)
                    {
                        *r = format!("{prefix}{name}");
                    }
                } else {
                    rewrite_refs(child, prefix);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|c| rewrite_refs(c, prefix)),
        _ => {}
    }
}

fn description_of(def: &Value) -> Value {
    def.get("description").cloned().unwrap_or(Value::Null)
}

fn with_description(mut v: Value, description: Value) -> Value {
    if let (Value::Object(map), Value::String(_)) = (&mut v, &description) {
        map.insert("description".into(), description);
    }
    v
}

/// A canonical definition in its OpenAPI v3 form.
pub(crate) fn to_v3(name: &str, def: &Value) -> Value {
    match name {
        INT_OR_STRING => with_description(
            json!({
                "format": "int-or-string",
                "oneOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": true,
            }),
            description_of(def),
        ),
        QUANTITY => with_description(
            json!({ "oneOf": [{"type": "string"}, {"type": "number"}] }),
            description_of(def),
        ),
        _ => {
            let mut v = def.clone();
            rewrite_refs(&mut v, COMPONENTS_PREFIX);
            v
        }
    }
}

/// A canonical definition in its Swagger 2.0 form.
pub(crate) fn to_v2(name: &str, def: &Value) -> Value {
    match name {
        INT_OR_STRING => with_description(
            json!({ "type": "string", "format": "int-or-string" }),
            description_of(def),
        ),
        QUANTITY => with_description(json!({ "type": "string" }), description_of(def)),
        _ => {
            let mut v = def.clone();
            strip_v2(&mut v);
            v
        }
    }
}

/// Drops what Swagger 2.0 (and gnostic's v2 schema) cannot express. Walks schema
/// positions only, so properties named like keywords (JSONSchemaProps has `not`,
/// `oneOf`, `nullable`, ...) are kept.
fn strip_v2(v: &mut Value) {
    let Value::Object(map) = v else { return };
    for k in ["oneOf", "anyOf", "not", "nullable"] {
        map.remove(k);
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props.values_mut().for_each(strip_v2);
    }
    match map.get_mut("items") {
        Some(items @ Value::Object(_)) => strip_v2(items),
        Some(Value::Array(list)) => list.iter_mut().for_each(strip_v2),
        _ => {}
    }
    if let Some(ap @ Value::Object(_)) = map.get_mut("additionalProperties") {
        strip_v2(ap);
    }
    if let Some(Value::Array(list)) = map.get_mut("allOf") {
        list.iter_mut().for_each(strip_v2);
    }
}

/// Built-in definitions converted once per flavor.
fn converted_builtins(flavor: Flavor) -> &'static BTreeMap<String, Value> {
    static V2: OnceLock<BTreeMap<String, Value>> = OnceLock::new();
    static V3: OnceLock<BTreeMap<String, Value>> = OnceLock::new();
    let (cell, convert): (_, fn(&str, &Value) -> Value) = match flavor {
        Flavor::V2 => (&V2, to_v2),
        Flavor::V3 => (&V3, to_v3),
    };
    cell.get_or_init(|| {
        builtins()
            .defs
            .iter()
            .map(|(name, def)| (name.clone(), convert(name, def)))
            .collect()
    })
}

/// The gathered definitions, converted for `flavor`.
pub(crate) fn convert_all(g: &Gathered, flavor: Flavor) -> Map<String, Value> {
    let builtin = converted_builtins(flavor);
    let mut out: Map<String, Value> = g
        .builtin
        .iter()
        .filter_map(|name| builtin.get(*name).map(|d| ((*name).to_owned(), d.clone())))
        .collect();
    for (name, def) in &g.custom {
        let converted = match flavor {
            Flavor::V2 => to_v2(name, def),
            Flavor::V3 => to_v3(name, def),
        };
        out.insert(name.clone(), converted);
    }
    out
}

/// The Swagger 2.0 document as JSON.
pub fn openapi_v2_json(resources: &[ResourceInfo]) -> Value {
    let gathered = gather(resources, &[], Flavor::V2);
    json!({
        "swagger": "2.0",
        "info": { "title": "Kubernetes", "version": KUBERNETES_VERSION },
        "paths": {},
        "definitions": convert_all(&gathered, Flavor::V2),
    })
}

/// `/openapi/v2` as gnostic protobuf (`openapi.v2.Document` from
/// gnostic-models' `openapiv2/OpenAPIv2.proto`), the format kubectl requests.
///
/// Carries `swagger`, `info` and the definitions of every served kind and list
/// kind (with `x-kubernetes-group-version-kind` vendor extensions, values in the
/// `yaml` field). Paths are left empty on purpose: kubectl then computes
/// strategic-merge patches of built-in kinds from its compiled-in types, and
/// checks `fieldValidation` support on `/openapi/v3`.
pub fn openapi_v2_protobuf(resources: &[ResourceInfo]) -> Vec<u8> {
    protobuf::encode_document(&openapi_v2_json(resources))
}

pub(crate) use hash::hash_hex;
