//! kubeforge-admission is the policy room: admission policies for Pods,
//! configured by the cluster-scoped `AdmissionPolicy` CRD
//! (`policy.kubeforge.dev/v1alpha1`) and served as mutating and validating
//! webhooks on kubeforge-runtime's webhook server (`kubeforge webhook`).
//!
//! Rules: require resource requests and limits; default labels and
//! annotations; sidecar injection (namespace or pod opt-in, `"false"` opts
//! out, idempotent); no `:latest` or untagged images and a registry
//! allow-list; image signatures (Ed25519 or ECDSA P-256 over the digest,
//! read from labelled ConfigMaps); scheduling policy by workload labels
//! (priorityClassName, tolerations, node affinity, nodeSelector). Each
//! policy runs in Enforce, Warn or Audit mode, selects namespaces and pods
//! by label, and is applied as soon as it changes; an invalid one is
//! reported in its `Ready` condition naming the field, and its last valid
//! version stays in effect. Ephemeral containers (`kubectl debug`) are
//! reviewed by the image rules. The server answers no review until its
//! caches have synced.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use kubeforge_admission::server::{PolicyServer, ServerOptions};
//! let client = kube::Client::try_default().await?;
//! let opts = ServerOptions { register: true, ..ServerOptions::default() };
//! let server = PolicyServer::start(client, &opts).await?;
//! server.run(std::future::pending()).await?;
//! # Ok(()) }
//! ```

pub mod cache;
pub mod engine;
pub mod policy;
pub mod reference;
pub mod rules;
pub mod server;
pub mod signature;

pub use engine::{AuditRecord, ClusterView, Engine};
pub use policy::{AdmissionPolicy, AdmissionPolicySpec, Mode, compile};
