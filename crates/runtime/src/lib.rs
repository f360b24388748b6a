//! kubeforge-runtime is what an extension author writes controllers with:
//! the Rust counterpart of controller-runtime, on kube-rs. A [`Manager`]
//! owns the [`kube::Client`], one shared cache per kind (however many
//! controllers use it; `managedFields` and the last-applied annotation
//! pruned by default), the controllers, leader election on a Lease,
//! controller-runtime's metrics on `/metrics` beside `/healthz` and
//! `/readyz`, and graceful bounded shutdown on SIGTERM/SIGINT. It is a
//! kube-rs client only, so it runs unchanged against any cluster.
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
//! use kubeforge_runtime::{Action, Manager, ReconcileError, predicates};
//!
//! async fn reconcile(cm: Arc<ConfigMap>, _ctx: Arc<()>) -> Result<Action, ReconcileError> {
//!     // … make the world match `cm` …
//!     Ok(Action::requeue(Duration::from_secs(300)))
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let mgr = Manager::builder(client)
//!     .metrics_addr("127.0.0.1:8080".parse()?)
//!     .leader_election("configmap-controller-lock", "default")
//!     .build();
//! mgr.controller::<ConfigMap, _>("configmap", ())
//!     .owns::<Deployment>()
//!     .with_predicate(predicates::generation_changed())
//!     .max_concurrent_reconciles(4)
//!     .register(reconcile);
//! mgr.run().await?;
//! # Ok(()) }
//! ```
//!
//! Caches ([`Manager::store`]) are [`Cache`]s with kube-runtime `Store`'s
//! reads; by default they keep objects as compact JSON, decoded on read and
//! shared while in use (3.8 KiB per typical pod instead of 15 KiB decoded;
//! see the [`cache`] module). For kinds whose spec and status a controller
//! never reads, metadata-only caches ([`ControllerBuilder::owns_metadata`],
//! [`Manager::metadata_store`]) hold less still.
//!
//! Modules: [`controller`] (builder, queue, backoff), [`cache`], [`predicates`],
//! [`leader`] (Lease election), [`metrics`] (names and labels),
//! [`conditions`], [`events`], [`owner`], [`workqueue`] (a queue for work that
//! is not one kind's objects).
//!
//! Differences from kube-runtime's `Controller` worth knowing: reconcilers
//! return this crate's [`Action`] (same constructors, but readable) and
//! [`ReconcileError`]; errors are retried with controller-runtime's per-object
//! backoff (5 ms → 1000 s) rather than an error policy; the default
//! concurrency is 1 per controller, as in controller-runtime.

mod action;
mod admin;
pub mod api_errors;
pub mod backoff;
pub mod cache;
pub mod conditions;
pub mod controller;
pub mod dynamic;
mod error;
pub mod events;
pub mod finalizer;
mod informer;
pub mod leader;
mod manager;
pub mod manifests;
pub mod metrics;
pub mod owner;
pub mod permissions;
pub mod predicates;
mod shutdown;
pub mod sync;
pub mod webhook;
pub mod workqueue;

pub use action::Action;
pub use backoff::BackoffConfig;
pub use cache::{Cache, CacheClosed};
pub use controller::ControllerBuilder;
pub use error::{BoxError, Error, ReconcileError};
pub use informer::{CacheScope, Cacheable, LAST_APPLIED_ANNOTATION, Scope, prune};
pub use kube::core::PartialObjectMeta;
pub use kube::runtime::reflector::ObjectRef;
pub use leader::LeaderElection;
pub use manager::{Manager, ManagerBuilder};
pub use permissions::Permissions;
pub use predicates::Predicate;
pub use shutdown::ShutdownHandle;
pub use workqueue::WorkQueue;
