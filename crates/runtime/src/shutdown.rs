//! Stop signals: the [`ShutdownHandle`] a user keeps to stop a running
//! manager. Inside, every task is handed a tokio-util
//! [`CancellationToken`]: cancelled once it should stop.

use tokio_util::sync::CancellationToken;

/// Asks a running [`Manager`](crate::Manager) to shut down gracefully, as
/// SIGTERM does. Cheap to clone; usable before or during `run`.
#[derive(Clone, Debug)]
pub struct ShutdownHandle(pub(crate) CancellationToken);

impl ShutdownHandle {
    /// Request a graceful shutdown: controllers stop taking new work, finish
    /// the reconciles in flight (bounded by the grace period), then `run`
    /// returns.
    pub fn shutdown(&self) {
        self.0.cancel();
    }

    /// A guard that requests the shutdown when dropped: for a manager
    /// owned by a struct (or a scope) that should stop with it.
    pub fn drop_guard(self) -> tokio_util::sync::DropGuard {
        self.0.drop_guard()
    }
}
