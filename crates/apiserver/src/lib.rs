//! A Kubernetes-API-compatible server over [`kubeforge_store`].
//!
//! It serves discovery, OpenAPI (v2 protobuf and v3), and the REST verbs
//! (get, list, watch, create, update, patch, delete, deletecollection) for
//! the built-in resources and for custom resources defined by CRDs, with
//! Kubernetes semantics: resourceVersions from the store's revisions,
//! optimistic concurrency, selectors, paging, `Status` errors and Table
//! output. `kubectl`, kube-rs and the Python client use it unmodified.
//!
//! Two ways in: [`ApiServer::serve`] on a loopback listener, or in-process
//! with [`ApiServer::client`], which hands the server to `kube::Client` as a
//! tower service with no socket.
//!
//! ```no_run
//! # async fn demo() {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! let server = kubeforge_apiserver::ApiServer::in_memory().await;
//! let cms: kube::Api<ConfigMap> = kube::Api::default_namespaced(server.client());
//! let list = cms.list(&Default::default()).await.unwrap();
//! # }
//! ```

mod access_policy;
mod admission;
mod aggregated;
pub mod audit;
mod authn;
mod authz;
pub mod body;
mod bootstrap;
mod builtin;
pub mod codec;
mod componentstatus;
mod context;
mod convert;
mod crd;
mod csr;
mod discovery;
mod ephemeral;
pub mod error;
mod eviction;
mod fieldset;
mod impersonation;
mod jsonpatch;
mod kubeconfig;
mod linger;
pub mod metrics;
mod node_authz;
pub mod nodeproxy;
mod object;
mod patch;
mod pod_validation;
mod priority;
mod projection;
mod protobuf;
pub mod rbac_components;
mod rbac_defaults;
mod rbac_escalation;
mod rbac_validation;
mod recover;
pub mod registry;
pub mod request;
mod resource_metrics;
mod rest;
mod reviews;
mod satokens;
mod scale;
mod secrets;
mod server;
mod serviceaccount;
mod ssa;
mod strategy;
mod streamtranslator;
pub mod table;
pub mod tls;
mod watch;

pub use authn::{Authentication, ClientCaError};
pub use bootstrap::KUBERNETES_SERVICE_IP;
pub use error::{ApiError, Cause};
pub use kubeconfig::{kubeconfig_tls_yaml, kubeconfig_yaml};
pub use kubeforge_authz::satoken::TokenIssuer;
pub use kubeforge_authz::{TokenFile, UserInfo};
pub use nodeproxy::{KubeletClient, KubeletClientError};
pub use resource_metrics::MetricsProvider;
pub use satokens::DEFAULT_ISSUER as SERVICE_ACCOUNT_ISSUER;
pub use server::{ApiServer, InProcess, KUBERNETES_VERSION};
