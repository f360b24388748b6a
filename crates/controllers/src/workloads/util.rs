//! Helpers shared by the workload controllers.

/// Pods a controller created or deleted and has not yet seen in its cache.
#[derive(Default)]
pub(crate) struct Expectations {}
