//! Stop signals: the [`ShutdownHandle`] a user keeps to stop a running
//! manager, and the internal [`Stop`] token passed down to every task.

use tokio::sync::watch;

/// A stop signal shared by tasks: resolves once stop was requested (or the
/// sender is gone).
#[derive(Clone, Debug)]
pub(crate) struct Stop(watch::Receiver<bool>);

impl Stop {
    /// A new signal and the sender that fires it.
    pub(crate) fn new() -> (watch::Sender<bool>, Stop) {
        let (tx, rx) = watch::channel(false);
        (tx, Stop(rx))
    }

    /// Wait for the stop request.
    pub(crate) async fn wait(&mut self) {
        let _ = self.0.wait_for(|s| *s).await;
    }

    /// Whether stop was requested already.
    pub(crate) fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }
}

/// Asks a running [`Manager`](crate::Manager) to shut down gracefully, as
/// SIGTERM does. Cheap to clone; usable before or during `run`.
#[derive(Clone, Debug)]
pub struct ShutdownHandle(pub(crate) std::sync::Arc<watch::Sender<bool>>);

impl ShutdownHandle {
    /// Request a graceful shutdown: controllers stop taking new work, finish
    /// the reconciles in flight (bounded by the grace period), then `run`
    /// returns.
    pub fn shutdown(&self) {
        self.0.send_replace(true);
    }
}
