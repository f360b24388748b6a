//! The managed fields of `/scale` (kube's ScaleHandler): a write to the
//! Scale runs as an Update or Apply on the Scale object, whose managers are
//! the parent's managers of its replicas field, converted to own the
//! Scale's `spec.replicas`; afterwards the parent's entries are rebuilt
//! from the Scale's.

use serde_json::Value;

use super::managed::{Entry, decode_managed, managed_of, set_managed};
use super::set::FieldSet;

/// The apiVersion of the Scale object.
pub const SCALE_API_VERSION: &str = "autoscaling/v1";

/// The field path (`["f:spec", "f:replicas"]`) of a dotted path.
pub(crate) fn field_path(dotted: &str) -> Vec<String> {
    dotted
        .split('.')
        .filter(|s| !s.is_empty())
        .map(|s| format!("f:{s}"))
        .collect()
}

/// A set with the one member `path`.
fn only(path: &[String]) -> FieldSet {
    let mut out = FieldSet::default();
    let mut cur = &mut out;
    for pe in path {
        cur = cur.children.entry(pe.clone()).or_default();
    }
    cur.member = true;
    out
}

fn parent_entries(parent: &Value) -> Vec<Entry> {
    managed_of(parent)
        .and_then(|v| decode_managed(v).ok())
        .unwrap_or_default()
}

/// Give `scale` (the parent's Scale) the managedFields of the parent's
/// entries that own `replicas` (ScaleHandler.ToSubresource): each owns the
/// Scale's `spec.replicas` and keeps its identity — manager, operation,
/// subresource and the parent's apiVersion, which Update identities and
/// conflict messages use — and time.
pub(crate) fn to_subresource(parent: &Value, scale: &mut Value, replicas: &[String]) {
    let entries: Vec<Entry> = parent_entries(parent)
        .into_iter()
        .filter(|e| e.fields.has(replicas))
        .map(|e| Entry {
            fields: only(&field_path("spec.replicas")),
            ..e
        })
        .collect();
    set_managed(scale, entries);
}

/// Write the parent's managedFields after a write of `scale`, the new Scale
/// with its managedFields (ScaleHandler.ToParent): a parent entry owning
/// `replicas` keeps it while its manager is still among the Scale's, else
/// loses it; a Scale manager the parent had no entry owning `replicas`
/// gets one owning only it, in the parent's `api_version` — with no time,
/// as kube-apiserver's handler takes the time from the parent's entries.
pub(crate) fn to_parent(parent: &mut Value, scale: &Value, replicas: &[String], api_version: &str) {
    let mut scale_entries = managed_of(scale)
        .and_then(|v| decode_managed(v).ok())
        .unwrap_or_default();
    let mut out: Vec<Entry> = Vec::new();
    for mut p in parent_entries(parent) {
        if !p.fields.has(replicas) {
            out.push(p);
            continue;
        }
        if let Some(i) = scale_entries.iter().position(|s| s.same_identity(&p)) {
            scale_entries.remove(i);
            out.push(p);
            continue;
        }
        p.fields.difference_with(&only(replicas));
        if !p.fields.is_empty() {
            out.push(p);
        }
    }
    for s in scale_entries {
        let time = out
            .iter()
            .position(|p| p.same_identity(&s))
            .and_then(|i| out.remove(i).time);
        out.push(Entry {
            api_version: api_version.to_string(),
            time,
            fields: only(replicas),
            ..s
        });
    }
    set_managed(parent, out);
}
