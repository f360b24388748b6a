//! The Memcached operator: keeps a memcached Deployment of `spec.size`
//! replicas for each `Memcached` and reports its state in the status.

pub mod controller;
pub mod desired;
pub mod types;

pub use types::{DEFAULT_CONTAINER_PORT, Memcached, MemcachedSpec, MemcachedStatus};
