//! CustomResourceDefinitions: checking them, establishing them (status
//! conditions NamesAccepted and Established), and turning each served
//! version into a registry row; deleting one deletes its objects.

use std::sync::Arc;

use bytes::Bytes;
use kubeforge_apimachinery::names::NameRule;
use kubeforge_schema::Validator;
use serde_json::{Value, json};

use crate::context::Ctx;
use crate::error::{ApiError, ApiResult, Cause};
use crate::registry::{ALL_VERBS, CustomInfo, ResourceDef, ScalePaths, Strategy};
use crate::server::ApiServer;
use crate::table::{CellSource, Column};

const CRD_PREFIX: &str = "/registry/apiextensions.k8s.io/customresourcedefinitions/";

fn is_crd(ctx: &Ctx<'_>) -> bool {
    ctx.def.strategy == Strategy::Crd
}

/// Register every CRD already in the store (server start).
pub fn restore(server: &ApiServer) -> ApiResult<()> {
    for kv in server.store().range(CRD_PREFIX, None, 0).kvs {
        if let Ok(crd) = serde_json::from_slice::<Value>(&kv.value) {
            register(server, &crd);
        }
    }
    Ok(())
}

fn cause(field: &str, message: impl Into<String>, reason: &str) -> Cause {
    Cause {
        reason: reason.into(),
        message: message.into(),
        field: field.into(),
    }
}

/// Checks on the CRD itself.
pub fn validate(crd: &Value, causes: &mut Vec<Cause>) {
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let plural = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if group.is_empty() {
        causes.push(cause("spec.group", "Required value", "FieldValueRequired"));
    } else if !group.contains('.') {
        causes.push(cause(
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
            "FieldValueInvalid",
        ));
    }
    if plural.is_empty() {
        causes.push(cause(
            "spec.names.plural",
            "Required value",
            "FieldValueRequired",
        ));
    }
    if kind.is_empty() {
        causes.push(cause(
            "spec.names.kind",
            "Required value",
            "FieldValueRequired",
        ));
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(cause(
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
            "FieldValueInvalid",
        ));
    }
    match crd.pointer("/spec/scope").and_then(Value::as_str) {
        Some("Namespaced" | "Cluster") => {}
        Some(s) => causes.push(cause(
            "spec.scope",
            format!("Unsupported value: \"{s}\": supported values: \"Cluster\", \"Namespaced\""),
            "FieldValueNotSupported",
        )),
        None => causes.push(cause("spec.scope", "Required value", "FieldValueRequired")),
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if versions.is_empty() {
        causes.push(cause(
            "spec.versions",
            "Invalid value: null: must have exactly one version marked as storage version",
            "FieldValueInvalid",
        ));
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        causes.push(cause(
            "spec.versions",
            format!(
                "Invalid value: {:?}: must have exactly one version marked as storage version",
                versions
                    .iter()
                    .filter_map(|v| v.get("name").and_then(Value::as_str))
                    .collect::<Vec<_>>()
            ),
            "FieldValueInvalid",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if v.get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(cause(
                &format!("spec.versions[{i}].name"),
                "Required value",
                "FieldValueRequired",
            ));
        }
        match v.pointer("/schema/openAPIV3Schema") {
            Some(schema) => {
                let prefix = format!("spec.versions[{i}].schema.openAPIV3Schema");
                for e in kubeforge_schema::check_structural(schema, &prefix) {
                    causes.push(Cause {
                        reason: e.reason.to_string(),
                        message: e.message,
                        field: e.field,
                    });
                }
            }
            None => causes.push(cause(
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value: schemas are required",
                "FieldValueRequired",
            )),
        }
    }
}

fn accepted_names(crd: &Value) -> Value {
    let mut names = crd
        .pointer("/spec/names")
        .filter(|n| n.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if names
        .get("singular")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        names["singular"] = json!(kind.to_ascii_lowercase());
    }
    if names
        .get("listKind")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        names["listKind"] = json!(format!("{kind}List"));
    }
    names
}

fn storage_version(crd: &Value) -> Option<String> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)?
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .map(str::to_string)
}

fn established_status(crd: &Value, old_stored: &[Value]) -> Value {
    let now = crate::object::now_rfc3339();
    let mut stored: Vec<Value> = old_stored.to_vec();
    if let Some(sv) = storage_version(crd).filter(|sv| !stored.iter().any(|s| s == &json!(sv))) {
        stored.push(json!(sv));
    }
    json!({
        "acceptedNames": accepted_names(crd),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ],
        "storedVersions": stored,
    })
}

/// Set a new CRD's status and defaults before it is stored.
pub fn before_create(ctx: &Ctx<'_>, obj: &mut Value) -> ApiResult<()> {
    if !is_crd(ctx) {
        return Ok(());
    }
    check_conflicts(ctx, obj)?;
    default_crd(obj);
    obj["status"] = established_status(obj, &[]);
    Ok(())
}

/// Keep a CRD's status current across updates.
pub fn before_update(ctx: &Ctx<'_>, obj: &mut Value, old: &Value) -> ApiResult<()> {
    if !is_crd(ctx) {
        return Ok(());
    }
    default_crd(obj);
    let old_stored = old
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut status = established_status(obj, &old_stored);
    // Keep transition times when conditions did not change.
    if let Some(old_conds) = old.pointer("/status/conditions") {
        status["conditions"] = old_conds.clone();
    }
    if let Some(s) = obj.get("status").and_then(|s| s.get("storedVersions")) {
        status["storedVersions"] = s.clone();
    }
    obj["status"] = status;
    Ok(())
}

fn default_crd(obj: &mut Value) {
    if let Some(vs) = obj
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for v in vs {
            if let Some(v) = v.as_object_mut()
                && !v.contains_key("served")
            {
                v.insert("served".into(), json!(true));
            }
        }
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        && !spec.contains_key("conversion")
    {
        spec.insert("conversion".into(), json!({"strategy": "None"}));
    }
    if let Some(names) = obj
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        names
            .entry("singular")
            .or_insert_with(|| json!(kind.to_ascii_lowercase()));
        names
            .entry("listKind")
            .or_insert_with(|| json!(format!("{kind}List")));
    }
}

fn check_conflicts(ctx: &Ctx<'_>, obj: &Value) -> ApiResult<()> {
    let group = obj
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let plural = obj
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let clash = ctx.server.registry().all().into_iter().any(|d| {
        d.group == group
            && d.plural == plural
            && d.custom.as_ref().is_none_or(|c| c.crd_name != name)
    });
    if clash {
        return Err(ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            name,
            vec![cause(
                "spec.names.plural",
                format!("Invalid value: \"{plural}\": {plural}.{group} is already served"),
                "FieldValueInvalid",
            )],
        ));
    }
    Ok(())
}

/// After a CRD is written: serve its versions.
pub fn after_write(ctx: &Ctx<'_>, bytes: &Bytes) -> ApiResult<()> {
    if !is_crd(ctx) {
        return Ok(());
    }
    if let Ok(crd) = serde_json::from_slice::<Value>(bytes) {
        register(ctx.server, &crd);
    }
    Ok(())
}

/// After a CRD is deleted: delete its objects and stop serving it.
pub async fn after_delete(ctx: &Ctx<'_>, bytes: &Bytes) -> ApiResult<()> {
    if !is_crd(ctx) {
        return Ok(());
    }
    let Ok(crd) = serde_json::from_slice::<Value>(bytes) else {
        return Ok(());
    };
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let registry = ctx.server.registry();
    let defs: Vec<_> = registry
        .all()
        .into_iter()
        .filter(|d| d.custom.as_ref().is_some_and(|c| c.crd_name == name))
        .collect();
    registry.remove_crd(&name);
    if let Some(def) = defs.first() {
        let store = ctx.server.store();
        let keys: Vec<String> = store
            .range(&def.key_prefix(), None, 0)
            .kvs
            .into_iter()
            .map(|kv| kv.key.to_string())
            .collect();
        for key in keys {
            let Some(kv) = store.get(&key) else { continue };
            let last: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
            let _ = store
                .delete(&key, None, move |rev, _| {
                    crate::object::encode_with_rv(last, rev)
                })
                .await;
        }
    }
    Ok(())
}

/// Replace the rows of a CRD with its currently served versions.
pub fn register(server: &ApiServer, crd: &Value) {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let registry = server.registry();
    registry.remove_crd(&name);
    if crd.pointer("/metadata/deletionTimestamp").is_some() {
        return;
    }
    for (def, schema) in rows_for(crd) {
        registry.insert(def, schema);
    }
}

fn strs(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn rows_for(crd: &Value) -> Vec<(ResourceDef, Option<Arc<Value>>)> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let uid = crd
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let names = accepted_names(crd);
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let namespaced = crd.pointer("/spec/scope").and_then(Value::as_str) != Some("Cluster");
    let Some(storage) = storage_version(crd) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for v in crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let Some(version) = v.get("name").and_then(Value::as_str) else {
            continue;
        };
        let schema = v.pointer("/schema/openAPIV3Schema").cloned();
        let validator = schema
            .as_ref()
            .and_then(|s| Validator::from_crd_schema(s).ok())
            .map(Arc::new);
        let mut columns: Vec<Column> = Vec::new();
        if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
            for c in cols {
                let path = c
                    .get("jsonPath")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                columns.push(Column {
                    name: c
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    type_: c
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("string")
                        .to_string(),
                    format: c
                        .get("format")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    description: c
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0) as i32,
                    source: CellSource::Path(path.to_string()),
                });
            }
        } else {
            columns.push(Column::age());
        }
        let scale = v.pointer("/subresources/scale").map(|s| ScalePaths {
            spec_replicas: s
                .get("specReplicasPath")
                .and_then(Value::as_str)
                .unwrap_or(".spec.replicas")
                .trim_start_matches('.')
                .to_string(),
            status_replicas: s
                .get("statusReplicasPath")
                .and_then(Value::as_str)
                .unwrap_or(".status.replicas")
                .trim_start_matches('.')
                .to_string(),
            label_selector: s
                .get("labelSelectorPath")
                .and_then(Value::as_str)
                .map(|p| p.trim_start_matches('.').to_string()),
            selector_is_set: false,
        });
        let field_selectors = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                    .map(|p| p.trim_start_matches('.').to_string())
                    .collect()
            })
            .unwrap_or_default();
        let def = ResourceDef {
            group: group.clone(),
            version: version.to_string(),
            kind: kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            short_names: strs(names.get("shortNames")),
            categories: strs(names.get("categories")),
            namespaced,
            verbs: ALL_VERBS.iter().map(|s| s.to_string()).collect(),
            status: v.pointer("/subresources/status").is_some(),
            scale,
            binding: false,
            ephemeral_containers: false,
            eviction: false,
            columns,
            field_selectors,
            field_absent: &[],
            namespace_field: true,
            name_rule: NameRule::Subdomain,
            generation: true,
            strategy: Strategy::Plain,
            validator: validator.clone(),
            custom: Some(CustomInfo {
                crd_name: name.clone(),
                validator,
                storage_version: storage.clone(),
                crd_uid: uid.clone(),
            }),
            conversion: None,
        };
        out.push((def, schema.map(Arc::new)));
    }
    out
}
