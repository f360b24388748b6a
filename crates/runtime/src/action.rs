//! What a reconcile asks for next: [`Action`].

use std::time::Duration;

/// The result of a successful reconcile: when to reconcile the object again
/// if nothing changes before. The same shape as kube-runtime's `Action`
/// (and converts into it), but readable, so the manager can count
/// `requeue_after` results and track the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile again after `duration` (controller-runtime's
    /// `Result{RequeueAfter: d}`). `Duration::ZERO` is `Result{Requeue:
    /// true}`: requeued with the object's rate-limited backoff.
    #[must_use]
    pub const fn requeue(duration: Duration) -> Action {
        Action {
            requeue_after: Some(duration),
        }
    }

    /// Reconcile again only when a watched object changes.
    #[must_use]
    pub const fn await_change() -> Action {
        Action {
            requeue_after: None,
        }
    }

    /// When to reconcile again, if asked.
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

impl From<Action> for kube::runtime::controller::Action {
    fn from(a: Action) -> Self {
        match a.requeue_after {
            Some(d) => kube::runtime::controller::Action::requeue(d),
            None => kube::runtime::controller::Action::await_change(),
        }
    }
}
