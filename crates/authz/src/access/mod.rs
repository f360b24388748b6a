//! The seed's extension of RBAC, as kubeforge's own kinds in
//! `authz.kubeforge.dev/v1alpha1`, decided beside RBAC:
//!
//! - **AccessRole** (namespaced) and **ClusterAccessRole**: `spec.rules`
//!   (PolicyRules, matched exactly as RBAC matches them) and
//!   `spec.parents`, roles whose rules are inherited transitively (another
//!   AccessRole/ClusterAccessRole, or an RBAC Role/ClusterRole). An
//!   `editor` with parent `admin` holds `admin`'s rules too.
//! - **AccessBinding** (namespaced) and **ClusterAccessBinding**:
//!   `spec.roleRef`, `spec.subjects` (as RBAC's), `spec.effect` (`Allow`,
//!   the default, or `Deny`: a Deny that matches wins over every Allow,
//!   RBAC's included) and `spec.conditions` ([`conditions`]: time windows,
//!   source CIDRs, request attributes); a binding whose conditions do not
//!   hold is skipped.
//!
//! [`spec`] reads and checks the objects (the field errors the API server
//! answers with 422); [`policy`] compiles them and decides, with the path
//! to each decision (binding, role, parents, rule) in its reason.

pub mod check;
pub mod conditions;
pub mod policy;
pub mod spec;

pub use conditions::{Conditions, Outcome, SOURCE_ADDRESS_EXTRA};
pub use policy::{AccessAuthorizer, AccessPolicy, Explanation, Invalid};
pub use spec::{BindingObject, Effect, GROUP, RoleKind, RoleObject, RoleRef, VERSION};

#[cfg(test)]
mod tests;
