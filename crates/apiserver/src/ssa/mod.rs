//! The server-side-apply core: field sets, the apply merge, conflicts and
//! `managedFields`, with no request context — pure functions over
//! `serde_json` values and a [`Schema`] (list types from the strategic
//! tables or a CRD schema through [`ListTypes`]). `crate::fieldset` adapts
//! requests to it.
//!
//! The semantics follow sigs.k8s.io/structured-merge-diff (SMD) and
//! k8s.io/apimachinery/pkg/util/managedfields as kube-apiserver uses them:
//!
//! - [`schema`]: list and map semantics per path;
//! - [`path`]: path elements and their human form;
//! - [`set`]: field sets, FieldsV1, stripped metadata, reset fields;
//! - [`merge`]: the applied configuration's field set, merge and prune;
//! - [`compare`]: what an Update changed, and what a create sets;
//! - [`managed`]: `managedFields` entries and Update bookkeeping;
//! - [`apply`] and [`update`]: the two operations.
//!
//! One entry per manager, operation, apiVersion (for Update) and
//! subresource; empty entries are dropped; at most ten Update entries
//! (older ones fold into `ancient-changes`).

pub(crate) mod apply;
pub(crate) mod compare;
pub(crate) mod managed;
pub(crate) mod merge;
pub(crate) mod path;
pub(crate) mod scale;
pub(crate) mod schema;
pub(crate) mod set;
pub(crate) mod update;

pub(crate) use apply::{ApplyError, ApplyRequest, apply};
pub(crate) use managed::{map_eq_ignoring, same_object};
pub(crate) use schema::{CrdSchema, ListTypes, Schema};
pub(crate) use set::Scope;
pub(crate) use update::{UpdateRequest, update};

#[cfg(test)]
mod tests;
