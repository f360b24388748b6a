//! Identity and access, usable without the API server: who is asking
//! ([`UserInfo`]), what they ask for ([`Attributes`]), and whether they may
//! ([`Authorizer`]). The RBAC authorizer ([`rbac::RbacAuthorizer`]) follows
//! kube-apiserver's `plugin/pkg/auth/authorizer/rbac` rule for rule: the same
//! matching (`*`, `res/sub`, `*/sub`, resourceNames, nonResourceURL
//! prefixes), the same subjects (User, Group, ServiceAccount with the
//! binding's namespace as default), the same reasons
//! (`RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to Group "g"`)
//! and the same Forbidden wording ([`Attributes::forbidden_message`]).
//!
//! The API server calls it as a stage of its request path; the
//! authorization webhook serves it to real clusters.
//!
//! ```
//! use kubeforge_authz::{Attributes, Authorizer, Decision, UserInfo};
//! use kubeforge_authz::rbac::{RbacAuthorizer, RbacPolicy};
//! use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
//!
//! let role = Role {
//!     metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
//!         name: Some("reader".into()), namespace: Some("dev".into()), ..Default::default()
//!     },
//!     rules: Some(vec![PolicyRule {
//!         api_groups: Some(vec!["".into()]),
//!         resources: Some(vec!["pods".into()]),
//!         verbs: vec!["get".into(), "list".into()],
//!         ..Default::default()
//!     }]),
//! };
//! let binding = RoleBinding {
//!     metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
//!         name: Some("alice-reads".into()), namespace: Some("dev".into()), ..Default::default()
//!     },
//!     role_ref: RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "Role".into(), name: "reader".into() },
//!     subjects: Some(vec![Subject { kind: "User".into(), name: "alice".into(), ..Default::default() }]),
//! };
//! let rbac = RbacAuthorizer::new(RbacPolicy::build(&[role], &[], &[binding], &[]));
//! let alice = UserInfo::new("alice", ["system:authenticated"]);
//! let get = Attributes::resource(alice.clone(), "get", "dev", "", "v1", "pods", "", "web");
//! assert!(matches!(rbac.authorize(&get), Decision::Allow { .. }));
//! let delete = Attributes::resource(alice, "delete", "dev", "", "v1", "pods", "", "web");
//! assert!(matches!(rbac.authorize(&delete), Decision::NoOpinion { .. }));
//! assert_eq!(
//!     delete.forbidden_message(""),
//!     r#"pods "web" is forbidden: User "alice" cannot delete resource "pods" in API group "" in the namespace "dev""#
//! );
//! ```

pub mod access;
pub mod attributes;
pub mod decision;
pub mod node;
pub mod rbac;
pub mod satoken;
mod subjects;
pub mod tokenfile;
pub mod user;
pub mod x509;

pub use attributes::Attributes;
pub use decision::{Authorizer, Decision, Union};
pub use tokenfile::{TokenFile, TokenFileError};
pub use user::UserInfo;
