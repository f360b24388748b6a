//! Errors: what a reconciler returns ([`ReconcileError`]) and why
//! [`Manager::run`](crate::Manager::run) stops with a failure ([`Error`]).

use std::fmt;
use std::net::SocketAddr;

/// A boxed error, the currency of reconcilers.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The error a reconciler returns.
///
/// Like `anyhow::Error`, anything that converts into a boxed error converts
/// into it, so `?` works on `kube::Error`, `serde_json::Error`, a `String`…
/// Such errors are retried with per-object exponential backoff.
/// [`ReconcileError::terminal`] marks an error that retrying cannot fix
/// (bad input in a spec, say): it is counted as an error but not retried; the
/// object is reconciled again on its next change.
///
/// It deliberately does not implement `std::error::Error` itself, which
/// keeps the blanket `From` coherent (as anyhow does).
pub struct ReconcileError {
    inner: BoxError,
    terminal: bool,
}

impl ReconcileError {
    /// A retried error (what `?` produces).
    pub fn new(e: impl Into<BoxError>) -> Self {
        ReconcileError {
            inner: e.into(),
            terminal: false,
        }
    }

    /// An error that is not retried: counted, logged, and left until the
    /// object changes again.
    pub fn terminal(e: impl Into<BoxError>) -> Self {
        ReconcileError {
            inner: e.into(),
            terminal: true,
        }
    }

    /// Whether this error is terminal (not retried).
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// The underlying error.
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.inner
    }

    /// The underlying error, owned.
    pub fn into_inner(self) -> BoxError {
        self.inner
    }
}

impl<E> From<E> for ReconcileError
where
    E: Into<BoxError>,
{
    fn from(e: E) -> Self {
        ReconcileError::new(e)
    }
}

impl fmt::Debug for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReconcileError")
            .field("inner", &self.inner)
            .field("terminal", &self.terminal)
            .finish()
    }
}

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terminal {
            write!(f, "terminal: {}", self.inner)
        } else {
            fmt::Display::fmt(&self.inner, f)
        }
    }
}

/// Why [`Manager::run`](crate::Manager::run) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This replica was leading and could not renew its Lease within the
    /// renew deadline; its controllers were stopped (controller-runtime
    /// exits the process here; restart or exit likewise).
    #[error(
        "leader election lost: could not renew Lease {namespace}/{name} within the renew deadline"
    )]
    LeaderElectionLost {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
    },
    /// The metrics/health address could not be bound.
    #[error("cannot serve /metrics, /healthz and /readyz on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// Installing the SIGTERM handler failed.
    #[error("cannot listen for SIGTERM: {0}")]
    Signal(std::io::Error),
    /// The leader election configuration is not usable.
    #[error("invalid leader election settings: {0}")]
    LeaderElectionConfig(String),
    /// The webhook server failed while the manager ran.
    #[error("the webhook server failed: {0}")]
    Webhooks(#[source] crate::webhook::WebhookError),
    /// A controller stopped by itself (a panic in a mapper or predicate,
    /// say) while the manager ran; everything was stopped with it, so a
    /// replica never keeps its Lease while not reconciling.
    #[error("controller {name} stopped unexpectedly: {reason}")]
    ControllerStopped {
        /// The controller's name.
        name: String,
        /// The panic's message, or that it ended.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<u32, ReconcileError> {
        Ok(s.parse::<u32>()?)
    }

    #[test]
    fn question_mark_converts_and_terminal_is_kept() {
        let e = parse("x").err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("invalid digit found in string"));
        let t = ReconcileError::terminal("spec.size must be positive");
        assert!(t.is_terminal());
        assert_eq!(t.to_string(), "terminal: spec.size must be positive");
        let r: ReconcileError = "plain".into();
        assert!(!r.is_terminal());
    }
}
