//! A work queue in client-go's model: an item is queued at most once,
//! never handed to two workers at the same time (an item added while it is
//! processed is queued again when the worker is done), and failed items
//! come back after a per-item exponential backoff, so nothing loops hot.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

/// A deduplicating work queue with per-item backoff.
pub(crate) struct Queue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Queue {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<T> {
    state: Mutex<State<T>>,
    notify: Notify,
    base: Duration,
    max: Duration,
}

struct State<T> {
    queue: VecDeque<T>,
    dirty: HashSet<T>,
    processing: HashSet<T>,
    failures: HashMap<T, u32>,
    shut: bool,
}

impl<T: Clone + Eq + Hash + Send + 'static> Queue<T> {
    /// A queue whose failed items come back after `base`, doubling per
    /// consecutive failure up to `max`.
    pub(crate) fn new(base: Duration, max: Duration) -> Queue<T> {
        Queue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashSet::new(),
                    processing: HashSet::new(),
                    failures: HashMap::new(),
                    shut: false,
                }),
                notify: Notify::new(),
                base,
                max,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        match self.inner.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Queue `item` unless it is already waiting.
    pub(crate) fn add(&self, item: T) {
        let mut s = self.lock();
        if s.shut || !s.dirty.insert(item.clone()) {
            return;
        }
        if s.processing.contains(&item) {
            // Queued again by `done`.
            return;
        }
        s.queue.push_back(item);
        drop(s);
        self.inner.notify.notify_one();
    }

    /// Queue `item` after `delay`.
    pub(crate) fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            self.add(item);
            return;
        }
        let q = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(item);
        });
    }

    /// Queue `item` again after its backoff (which doubles per call until
    /// [`Queue::forget`]).
    pub(crate) fn add_rate_limited(&self, item: T) {
        let delay = {
            let mut s = self.lock();
            let n = s.failures.entry(item.clone()).or_insert(0);
            let d = self
                .inner
                .base
                .saturating_mul(1u32 << (*n).min(20))
                .min(self.inner.max);
            *n = n.saturating_add(1);
            d
        };
        self.add_after(item, delay);
    }

    /// Reset `item`'s backoff.
    pub(crate) fn forget(&self, item: &T) {
        self.lock().failures.remove(item);
    }

    /// The next item, waiting for one; `None` once the queue is shut down.
    /// Call [`Queue::done`] when finished with it.
    pub(crate) async fn get(&self) -> Option<T> {
        loop {
            let notified = self.inner.notify.notified();
            {
                let mut s = self.lock();
                if s.shut {
                    return None;
                }
                if let Some(item) = s.queue.pop_front() {
                    s.dirty.remove(&item);
                    s.processing.insert(item.clone());
                    let more = !s.queue.is_empty();
                    drop(s);
                    if more {
                        // Wake another worker for the rest.
                        self.inner.notify.notify_one();
                    }
                    return Some(item);
                }
            }
            notified.await;
        }
    }

    /// Finish processing `item`; if it was added meanwhile it is queued again.
    pub(crate) fn done(&self, item: &T) {
        let mut s = self.lock();
        s.processing.remove(item);
        if s.dirty.contains(item) && !s.shut {
            s.queue.push_back(item.clone());
            drop(s);
            self.inner.notify.notify_one();
        }
    }

    /// Stop handing out items; waiting workers get `None`.
    pub(crate) fn shutdown(&self) {
        self.lock().shut = true;
        self.inner.notify.notify_waiters();
    }

    /// Items waiting (not counting those being processed).
    pub(crate) fn len(&self) -> usize {
        self.lock().queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dedupes_and_requeues_while_processing() {
        let q: Queue<u32> = Queue::new(Duration::from_millis(1), Duration::from_millis(10));
        q.add(1);
        q.add(1);
        q.add(2);
        assert_eq!(q.len(), 2);
        let a = q.get().await;
        assert_eq!(a, Some(1));
        q.add(1); // while processing: comes back after done
        assert_eq!(q.len(), 1);
        q.done(&1);
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some(2));
        assert_eq!(q.get().await, Some(1));
        q.shutdown();
        assert_eq!(q.get().await, None);
    }

    #[tokio::test]
    async fn backoff_grows() {
        let q: Queue<u32> = Queue::new(Duration::from_millis(20), Duration::from_millis(80));
        let start = tokio::time::Instant::now();
        q.add_rate_limited(7);
        q.add_rate_limited(7);
        assert_eq!(q.get().await, Some(7));
        assert!(start.elapsed() >= Duration::from_millis(20));
        q.done(&7);
        q.forget(&7);
    }
}
