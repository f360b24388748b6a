//! The Memcached operator: keeps a memcached Deployment of `spec.size`
//! replicas for each `Memcached` and reports its state in the status.
//!
//! It is its own project, `crates/operators/memcached-operator`, scaffolded
//! by `kubeforge init` and `kubeforge create api` as a user's would be (its
//! `PROJECT`, `config/`, `Makefile`, tests and bench are there); this
//! module re-exports it under the names `kubeforge operator memcached` and
//! `kubeforge up --operators memcached` use.

pub use memcached_operator::api::cache::v1alpha1::{
    DEFAULT_CONTAINER_PORT, Memcached, MemcachedSpec, MemcachedStatus,
};
pub use memcached_operator::controllers::memcached as controller;
pub use memcached_operator::controllers::memcached::desired;
