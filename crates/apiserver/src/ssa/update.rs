//! Update operations (create, PUT, non-apply patches, `/status`,
//! `/finalize`): the fields the write added or changed go to its manager's
//! entry and leave the others', as SMD's Updater.Update with kube's
//! managedFields handling around it (a request's own managedFields win on
//! the main resource; an untracked object stays untracked).

use serde_json::{Map, Value};

use super::compare::{Comparison, compare_objects, created_fields, created_fields_v1};
use super::managed::{
    cap_updaters, decode_managed, is_reset, managed_of, record_changes, set_managed,
};
use super::schema::Schema;
use super::set::{FieldSet, Scope};

/// What an Update operation needs to know about the request.
pub struct UpdateRequest<'a> {
    /// The writer's manager name.
    pub manager: &'a str,
    /// The subresource written (`""` for the main resource).
    pub subresource: &'a str,
    /// The fields the endpoint may own.
    pub scope: Scope,
    /// The apiVersion of the endpoint.
    pub api_version: &'a str,
    /// Fields mutating admission added, which no manager owns (kube-apiserver
    /// records a write's manager before admission).
    pub unowned: Option<&'a FieldSet>,
}

/// Record an Update operation's managed fields on `obj`, the object about
/// to be stored; `old` is the live object (None: a create).
pub(crate) fn update(
    schema: &Schema,
    old: Option<&Value>,
    obj: &mut Value,
    req: &UpdateRequest<'_>,
) {
    let live_entries = || {
        old.and_then(managed_of)
            .and_then(|v| decode_managed(v).ok())
            .unwrap_or_default()
    };
    // The request's managedFields win on the main resource (that is how
    // clients edit or reset them); else the live object's.
    let main = req.subresource.is_empty();
    let mut entries = match (main, managed_of(obj)) {
        (true, Some(v)) if is_reset(v) => Vec::new(),
        (true, Some(v)) => match decode_managed(v) {
            Ok(e) if !e.is_empty() => e,
            _ => live_entries(),
        },
        _ => live_entries(),
    };
    if entries.is_empty() && old.is_some() {
        // kube does not start tracking on an update of an untracked object.
        crate::object::meta_mut(obj).remove("managedFields");
        return;
    }
    let ty = schema.root();
    let scope = req.scope;
    if old.is_none() && entries.is_empty() && req.unowned.is_none() {
        // A create with no managers yet: one entry, rendered directly.
        let fields = created_fields_v1(obj, &ty, scope);
        let meta = crate::object::meta_mut(obj);
        if fields.is_empty() {
            meta.remove("managedFields");
        } else {
            let mut e = Map::new();
            e.insert("manager".into(), Value::String(req.manager.to_string()));
            e.insert("operation".into(), Value::String("Update".into()));
            e.insert(
                "apiVersion".into(),
                Value::String(req.api_version.to_string()),
            );
            e.insert("time".into(), Value::String(crate::object::now_rfc3339()));
            e.insert("fieldsType".into(), Value::String("FieldsV1".into()));
            e.insert("fieldsV1".into(), Value::Object(fields));
            if !req.subresource.is_empty() {
                e.insert("subresource".into(), Value::String(req.subresource.into()));
            }
            meta.insert("managedFields".into(), Value::Array(vec![Value::Object(e)]));
        }
        return;
    }
    let cmp = match old {
        Some(live) => compare_objects(live, obj, &ty, scope),
        None => Comparison {
            added: created_fields(obj, &ty, scope),
            ..Comparison::default()
        },
    };
    record_changes(
        &mut entries,
        cmp,
        req.manager,
        req.api_version,
        req.subresource,
    );
    if let Some(unowned) = req.unowned
        && let Some(e) = entries
            .iter_mut()
            .find(|e| e.is(req.manager, "Update", req.api_version, req.subresource))
    {
        e.fields.difference_with(unowned);
    }
    cap_updaters(&mut entries);
    set_managed(obj, entries);
}
