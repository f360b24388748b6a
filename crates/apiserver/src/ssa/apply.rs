//! Server-side apply (SMD's Updater.Apply as kube-apiserver drives it):
//! merge the configuration, prune what the applier no longer applies,
//! check conflicts with the other managers (kubectl's upgrade from
//! client-side apply included) and record the applier's entry.

use serde_json::{Value, json};

use super::compare::{Comparison, compare_objects, created_fields};
use super::managed::{Entry, decode_managed, managed_of, record_changes, same_object, set_managed};
use super::merge::{ConfigError, check_live, config_set_root, merge_into, prune};
use super::path::display_path;
use super::schema::{Schema, Ty};
use super::set::{FieldSet, Scope, strip_meta};

/// kubectl's client-side apply annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Why an apply failed.
#[derive(Debug)]
pub enum ApplyError {
    /// Fields other managers own would change: (manager as kube prints it,
    /// field path).
    Conflicts(Vec<(String, String)>),
    /// The configuration is not valid for the list types.
    Config(ConfigError),
    /// 400.
    BadRequest(String),
    /// The live object's managedFields cannot be read.
    Internal(String),
    /// The live object does not fit its list types (an item of a list-map
    /// without any of its keys, ...): SMD's error, which kube-apiserver
    /// answers with a 500 of no reason.
    Live(String),
}

/// What an apply needs to know about the request.
pub struct ApplyRequest<'a> {
    /// The applier.
    pub manager: &'a str,
    /// `force=true`.
    pub force: bool,
    /// The subresource applied to (`""` for the main resource).
    pub subresource: &'a str,
    /// The fields the endpoint may own.
    pub scope: Scope,
    /// The apiVersion of the endpoint.
    pub api_version: &'a str,
}

/// Server-side apply of `config` onto `live` (None: the object does not
/// exist yet). Returns the merged object with its managedFields.
pub(crate) fn apply(
    schema: &Schema,
    live: Option<&Value>,
    config: &Value,
    req: &ApplyRequest<'_>,
) -> Result<Value, ApplyError> {
    let ty = schema.root();
    let (subresource, scope, api_version) = (req.subresource, req.scope, req.api_version);
    if managed_of(config).is_some_and(|v| !v.is_null()) {
        return Err(ApplyError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let empty = json!({});
    let live_v = live.unwrap_or(&empty);
    let mut entries = match managed_of(live_v) {
        Some(v) => decode_managed(v)
            .map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))?,
        None => Vec::new(),
    };
    if entries.is_empty() && live.is_some() {
        // The fields an untracked object has belong to `before-first-apply`.
        let cmp = Comparison {
            added: created_fields(live_v, &ty, scope),
            ..Comparison::default()
        };
        record_changes(
            &mut entries,
            cmp,
            "before-first-apply",
            api_version,
            subresource,
        );
    }
    let set = config_set_root(config, &ty, scope).map_err(ApplyError::Config)?;
    if live.is_some() {
        check_live(live_v, &ty).map_err(ApplyError::Live)?;
    }
    let mut merged = live_v.clone();
    merge_into(&mut merged, config, &ty);
    let mine = entries
        .iter()
        .position(|e| e.is(req.manager, "Apply", api_version, subresource));
    let previous = mine.map(|i| entries.remove(i));
    if let Some(last) = &previous {
        let mut owned = set.clone();
        for e in &entries {
            owned.union_with(&e.fields);
        }
        prune(&mut merged, &last.fields, Some(&owned), &ty);
    }
    let Comparison {
        added: mut changed,
        modified,
        removed,
    } = compare_objects(live_v, &merged, &ty, scope);
    changed.union_with(&modified);
    let mut conflicts: Vec<(usize, FieldSet)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (i, e.fields.intersection(&changed)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if !conflicts.is_empty() && !req.force {
        // kubectl upgrading from client-side apply: conflicts on fields its
        // last-applied configuration set (to the live values) are allowed.
        let allowed = (req.manager == "kubectl")
            .then(|| last_applied_fields(live_v, &ty, api_version))
            .flatten();
        let mut remaining: Vec<(String, String)> = Vec::new();
        for (i, c) in &conflicts {
            let who = entries[*i].display();
            for p in c.paths() {
                if !allowed.as_ref().is_some_and(|a| a.has(&p)) {
                    remaining.push((who.clone(), display_path(&p)));
                }
            }
        }
        if !remaining.is_empty() || allowed.is_none() {
            let mut all = remaining;
            all.sort();
            return Err(ApplyError::Conflicts(all));
        }
    }
    for (i, c) in conflicts.drain(..) {
        entries[i].fields.difference_with(&c);
    }
    for e in &mut entries {
        e.fields.difference_with(&removed);
    }
    let mut fields = set;
    strip_meta(&mut fields);
    let object_changed = !same_object(live_v, &merged, false);
    let time = if object_changed {
        Some(crate::object::now_rfc3339())
    } else {
        previous.and_then(|p| p.time)
    };
    entries.push(Entry {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: api_version.to_string(),
        subresource: subresource.to_string(),
        time,
        fields,
    });
    if req.manager == "kubectl" && has_last_applied(&merged) {
        let la = build_last_applied(config);
        if let Some(a) = merged
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.insert(LAST_APPLIED.into(), Value::String(la));
        }
    }
    set_managed(&mut merged, entries);
    Ok(merged)
}

fn has_last_applied(obj: &Value) -> bool {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

/// The applied configuration as kubectl's last-applied annotation.
fn build_last_applied(config: &Value) -> String {
    let mut c = config.clone();
    if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        let now_empty = match meta.get_mut("annotations").and_then(Value::as_object_mut) {
            Some(a) => {
                a.remove(LAST_APPLIED);
                a.is_empty()
            }
            None => false,
        };
        if now_empty {
            meta.remove("annotations");
        }
    }
    c.to_string()
}

/// The fields of the live object's last-applied configuration whose values
/// are still the live ones (kube's lastAppliedManager).
fn last_applied_fields(live: &Value, ty: &Ty<'_>, api_version: &str) -> Option<FieldSet> {
    let raw = live
        .pointer("/metadata/annotations")?
        .get(LAST_APPLIED)?
        .as_str()?;
    let la: Value = serde_json::from_str(raw).ok()?;
    if la.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return None;
    }
    let mut set = config_set_root(&la, ty, Scope::All).ok()?;
    let cmp = compare_objects(&la, live, ty, Scope::All);
    set.difference_with(&cmp.modified);
    set.difference_with(&cmp.added);
    set.difference_with(&cmp.removed);
    Some(set)
}
