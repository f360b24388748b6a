//! OpenAPI schemas for the kubeforge API server.
//!
//! This crate owns everything the server knows about the *shape* of objects:
//! the schemas of the built-in kinds (generated from k8s-openapi's `schemars`
//! implementations, never copied by hand), the handling of a CustomResourceDefinition
//! version's `openAPIV3Schema` (structural checks, validation of objects, pruning of
//! unknown fields, defaulting, unknown-field detection for `fieldValidation`), and
//! the discovery documents served at `/openapi/v2` (gnostic protobuf or JSON) and
//! `/openapi/v3` (root index plus one OpenAPI 3.0 document per group-version),
//! built from the list of resources the server currently serves.
//!
//! It does not validate `metadata` (names, labels, ...) beyond its JSON shape: the
//! server does that. It does not know about storage, HTTP or admission.
//!
//! The main entry points are [`builtin_schema`] and [`Validator::from_crd_schema`]
//! (compiled schemas, reused across requests), [`check_structural`] (CRD admission),
//! and [`openapi_v3_root`], [`openapi_v3_group_version`], [`openapi_v2_protobuf`],
//! [`openapi_v2_json`] (documents).
//!
//! Order of use on a write of a custom resource, as kube-apiserver does it:
//! [`Validator::unknown_fields`] (for `fieldValidation=Strict|Warn`, before anything
//! is dropped), [`Validator::prune`], [`Validator::apply_defaults`], then
//! [`Validator::validate`] on create or [`Validator::validate_update`] (with the
//! stored object) on update: these run the schema, the `x-kubernetes-list-type`
//! invariants and the `x-kubernetes-validations` CEL rules. On reads only
//! `apply_defaults` runs (it says whether it changed anything). Built-in kinds have
//! no schema defaults (Go defaulting functions are not schemas), so for them
//! `unknown_fields`/`prune` emulate Go's strict/lenient JSON decoding and
//! `validate` checks JSON types and required fields.

mod builtin;
mod openapi;
mod structural;
mod validator;

use std::sync::Arc;

pub use builtin::{builtin_kinds, builtin_schema};
pub use openapi::{
    openapi_v2_json, openapi_v2_protobuf, openapi_v3_group_version, openapi_v3_root,
};
pub use structural::check_structural;
pub use validator::Validator;
pub use validator::rules::check_rules;

/// How a list is merged and compared (`x-kubernetes-list-type`), for server-side
/// apply and for the uniqueness checks of `set` and `map` lists.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ListType {
    /// The list is replaced as a whole (the default for custom resources).
    Atomic,
    /// Items are unique scalars (or atomic values), merged as a set.
    Set,
    /// Items are objects identified by these keys (`x-kubernetes-list-map-keys`),
    /// merged by key.
    Map(Vec<String>),
}

/// Where a resource's schema comes from.
#[derive(Clone, Debug)]
pub enum SchemaSource {
    /// A built-in kind: the schema comes from k8s-openapi (see [`builtin_schema`]).
    Builtin,
    /// A custom resource: the `openAPIV3Schema` of the CRD version being served.
    Custom(Arc<serde_json::Value>),
}

/// One served resource, as the document builders need it.
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Plural resource name, e.g. `deployments`.
    pub plural: String,
    /// Whether the resource lives in namespaces.
    pub namespaced: bool,
    /// Supported verbs, e.g. `["create","delete","deletecollection","get","list","patch","update","watch"]`.
    pub verbs: Vec<String>,
    /// Supported subresources, e.g. `["status","scale"]`.
    pub subresources: Vec<String>,
    /// Where the schema comes from.
    pub schema: SchemaSource,
}

/// One validation failure, shaped like a `metav1.StatusCause`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the offending field, e.g. `spec.cronSpec`.
    pub field: String,
    /// A `metav1.CauseType`: `FieldValueInvalid`, `FieldValueRequired`,
    /// `FieldValueNotSupported`, `FieldValueTypeInvalid`, `FieldValueTooLong`,
    /// `FieldValueTooMany`, `FieldValueForbidden`.
    pub reason: &'static str,
    /// The message kube-apiserver would give (the Go `field.Error` body, without the field).
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// Why a schema could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A schema node was not a JSON object (or boolean).
    #[error("{path}: schema must be an object")]
    NotAnObject {
        /// Where in the schema (e.g. `properties[spec]`).
        path: String,
    },
    /// A keyword had a value of the wrong JSON type.
    #[error("{path}: invalid value for {keyword}")]
    InvalidKeyword {
        /// Where in the schema.
        path: String,
        /// The keyword, e.g. `maxLength`.
        keyword: &'static str,
    },
    /// A `pattern` is not a valid regular expression.
    #[error("{path}.pattern: must be a valid regular expression, but isn't: {message}")]
    InvalidPattern {
        /// Where in the schema.
        path: String,
        /// The regex compiler's message.
        message: String,
    },
    /// A `$ref` could not be resolved.
    #[error("{path}: unresolvable $ref {reference:?}")]
    UnresolvedRef {
        /// Where in the schema.
        path: String,
        /// The reference.
        reference: String,
    },
}
