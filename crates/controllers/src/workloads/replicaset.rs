//! The replicaset controller (in progress).

use std::sync::Arc;

use kubeforge_runtime::Manager;

use super::Ctx;

/// Register the controller with `mgr`.
pub(crate) fn register(_mgr: &Manager, _ctx: Arc<Ctx>) {}
