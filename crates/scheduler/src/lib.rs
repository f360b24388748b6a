//! kubeforge's scheduler: the Kubernetes Scheduling Framework's plugin model
//! as a kube-rs client, so it runs the same against the embedded API server
//! and — as a second scheduler — against a real cluster.
//!
//! Its room: a queue of pending pods, a cache of nodes with precomputed
//! aggregates, profiles of plugins (a trait per extension point, found by
//! name in a [`Registry`]), preemption, HTTP extenders, and binding through
//! `pods/binding`. It never imports the API server or the store.
//!
//! ```no_run
//! # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use kubeforge_scheduler::{SchedulerBuilder, SchedulerConfiguration};
//!
//! let config = SchedulerConfiguration::from_yaml(
//!     "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n",
//! )?;
//! let scheduler = SchedulerBuilder::new(client).config(config).start()?;
//! // … pods with schedulerName default-scheduler are now bound to nodes …
//! scheduler.stop().await;
//! # Ok(()) }
//! ```

pub mod cache;
pub mod config;
pub mod extender;
pub mod extender_server;
pub mod framework;
pub mod metrics;
pub mod plugins;
pub mod priority;
pub mod queue;
pub mod scheduler;
#[cfg(test)]
mod test_rng;

pub use config::{ConfigError, SchedulerConfiguration};
pub use framework::{Framework, Handle, Plugin, Registry, Status};
pub use scheduler::{
    BuildError, CycleOutcome, Input, RunningScheduler, SchedulerBuilder, SchedulerCore,
};
