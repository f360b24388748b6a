//! The Scheduling Framework: extension-point traits ([`interface`]), the
//! per-cycle state, what plugins read ([`types`], [`Snapshot`]), the plugin
//! [`Registry`] and the [`Framework`] that runs one profile's plugins.

pub mod interface;
pub mod registry;
pub mod runtime;
pub mod snapshot;
pub mod topology_counts;
pub mod types;
pub mod waiting;

pub use interface::*;
pub use registry::{DuplicatePlugin, Handle, PdbInfo, PluginFactory, Registry};
pub use runtime::Framework;
pub use snapshot::Snapshot;
pub use topology_counts::{DomainCounts, PodMatcher};
pub use types::{NodeInfo, PodInfo, Resource};
pub use waiting::WaitingPods;
