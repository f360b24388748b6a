//! Locking shared state from reconcilers and informers.

use std::sync::{Mutex, MutexGuard};

/// Lock a mutex, recovering from poisoning: a reconcile that panicked
/// while holding it must not wedge every other one (the structures kept
/// behind these locks are left consistent between statements).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
