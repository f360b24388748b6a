//! A work queue in client-go's model, for controllers whose work is not
//! one kind's objects (the garbage collector's uids, say); controllers
//! built with [`Manager::controller`](crate::Manager::controller) have
//! their queue already.
//!
//! As client-go's rate-limited queue: an item is queued at most once
//! however often it is added; it is never handed to two workers at the same
//! time (an item added while it is processed is queued again when its
//! worker calls [`done`](WorkQueue::done)); a failed item comes back after
//! its own exponential backoff ([`BackoffConfig`]), reset by
//! [`forget`](WorkQueue::forget), so nothing loops hot.
//!
//! A queue made by [`Manager::work_queue`](crate::Manager::work_queue)
//! keeps client-go's workqueue metrics under its name, as controller
//! queues do: `workqueue_adds_total`, `workqueue_depth`,
//! `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds`
//! and `workqueue_retries_total` (every delayed add counts as a retry, as
//! in client-go).
//!
//! ```no_run
//! # async fn demo(mgr: kubeforge_runtime::Manager) {
//! use kubeforge_runtime::BackoffConfig;
//! let q = mgr.work_queue::<String>("uids", BackoffConfig::default());
//! q.add("a".into());
//! while let Some(item) = q.get().await {
//!     let ok = !item.is_empty(); // … the work …
//!     if ok { q.forget(&item) } else { q.add_rate_limited(item.clone()) }
//!     q.done(&item);
//! }
//! # }
//! ```

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backoff::{BackoffConfig, ItemBackoff};
use crate::metrics::{DepthSource, Metrics, QueueLabels};
use crate::sync::lock;

/// A deduplicating work queue with per-item backoff; cheap to clone (the
/// clones are one queue).
pub struct WorkQueue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        WorkQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<T> std::fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.inner.state);
        f.debug_struct("WorkQueue")
            .field("queued", &s.queue.len())
            .field("processing", &s.processing.len())
            .field("shut", &s.shut)
            .finish()
    }
}

struct Inner<T> {
    state: Mutex<State<T>>,
    notify: Notify,
    backoff: ItemBackoff<T>,
    metrics: Option<(Arc<Metrics>, QueueLabels)>,
}

struct State<T> {
    /// Items ready for a worker, in order.
    queue: VecDeque<T>,
    /// Items added and not yet handed out (some wait for their worker's
    /// `done`), with when they were added.
    dirty: HashMap<T, Instant>,
    /// Items a worker holds, with when it got them.
    processing: HashMap<T, Instant>,
    shut: bool,
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<T> {
    /// A queue without metrics whose failed items come back after
    /// `backoff`'s delays.
    pub fn new(backoff: BackoffConfig) -> WorkQueue<T> {
        Self::build(backoff, None)
    }

    /// A queue keeping the `workqueue_*` families of `metrics` under
    /// `name`.
    pub(crate) fn with_metrics(
        name: &str,
        backoff: BackoffConfig,
        metrics: Arc<Metrics>,
    ) -> WorkQueue<T> {
        let q = Self::build(backoff, Some((metrics.clone(), QueueLabels::of(name))));
        metrics.init_queue(name, Arc::new(Depth(Arc::downgrade(&q.inner))));
        q
    }

    fn build(backoff: BackoffConfig, metrics: Option<(Arc<Metrics>, QueueLabels)>) -> Self {
        WorkQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashMap::new(),
                    processing: HashMap::new(),
                    shut: false,
                }),
                notify: Notify::new(),
                backoff: ItemBackoff::new(backoff),
                metrics,
            }),
        }
    }

    /// Queue `item` unless it is already waiting; an item being processed
    /// is queued again once its worker is [`done`](Self::done).
    pub fn add(&self, item: T) {
        let mut s = lock(&self.inner.state);
        if s.shut || s.dirty.contains_key(&item) {
            return;
        }
        if let Some((m, labels)) = &self.inner.metrics {
            m.workqueue_adds.get_or_create(labels).inc();
        }
        s.dirty.insert(item.clone(), Instant::now());
        if s.processing.contains_key(&item) {
            return;
        }
        s.queue.push_back(item);
        drop(s);
        self.inner.notify.notify_one();
    }

    /// Queue `item` after `delay`.
    pub fn add_after(&self, item: T, delay: Duration) {
        if self.is_shutting_down() {
            return;
        }
        if let Some((m, labels)) = &self.inner.metrics {
            m.workqueue_retries.get_or_create(labels).inc();
        }
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

    /// Queue `item` again after its next backoff step (the delay doubles
    /// with each call until [`forget`](Self::forget)).
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.inner.backoff.when(item.clone());
        self.add_after(item, delay);
    }

    /// Reset `item`'s backoff (it succeeded, or is gone).
    pub fn forget(&self, item: &T) {
        self.inner.backoff.forget(item);
    }

    /// The next item, waiting for one; `None` once the queue is shut down.
    /// Call [`done`](Self::done) when finished with it.
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.inner.notify.notified();
            {
                let mut s = lock(&self.inner.state);
                if s.shut {
                    return None;
                }
                if let Some(item) = s.queue.pop_front() {
                    let now = Instant::now();
                    let added = s.dirty.remove(&item).unwrap_or(now);
                    s.processing.insert(item.clone(), now);
                    let more = !s.queue.is_empty();
                    drop(s);
                    if let Some((m, labels)) = &self.inner.metrics {
                        m.workqueue_queue_duration
                            .get_or_create(labels)
                            .observe(now.saturating_duration_since(added).as_secs_f64());
                    }
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

    /// Finish processing `item`; if it was added meanwhile it is queued
    /// again.
    pub fn done(&self, item: &T) {
        let mut s = lock(&self.inner.state);
        let started = s.processing.remove(item);
        let again = s.dirty.contains_key(item) && !s.shut;
        if again {
            s.queue.push_back(item.clone());
        }
        drop(s);
        if let (Some((m, labels)), Some(t)) = (&self.inner.metrics, started) {
            m.workqueue_work_duration
                .get_or_create(labels)
                .observe(t.elapsed().as_secs_f64());
        }
        if again {
            self.inner.notify.notify_one();
        }
    }

    /// Stop handing out items: waiting workers get `None`, later adds are
    /// dropped.
    pub fn shutdown(&self) {
        lock(&self.inner.state).shut = true;
        self.inner.notify.notify_waiters();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        lock(&self.inner.state).shut
    }

    /// Items ready for a worker (not counting those being processed or
    /// waiting out a delay).
    pub fn len(&self) -> usize {
        lock(&self.inner.state).queue.len()
    }

    /// Whether no item is ready for a worker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `workqueue_depth` of a queue: client-go's depth counts every item
/// added and not yet handed out, including one that waits for its
/// worker's `done`.
struct Depth<T>(Weak<Inner<T>>);

impl<T: Send + Sync> DepthSource for Depth<T> {
    fn depth(&self) -> i64 {
        self.0.upgrade().map_or(0, |q| {
            i64::try_from(lock(&q.state).dirty.len()).unwrap_or(i64::MAX)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff(base_ms: u64, max_ms: u64) -> BackoffConfig {
        BackoffConfig {
            base: Duration::from_millis(base_ms),
            max: Duration::from_millis(max_ms),
        }
    }

    #[tokio::test]
    async fn dedupes_and_requeues_while_processing() {
        let q: WorkQueue<u32> = WorkQueue::new(backoff(1, 10));
        q.add(1);
        q.add(1);
        q.add(2);
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some(1));
        q.add(1); // while processing: comes back after done
        assert_eq!(q.len(), 1);
        q.done(&1);
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some(2));
        assert_eq!(q.get().await, Some(1));
        q.shutdown();
        assert_eq!(q.get().await, None);
        q.add(3);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_items_wait_out_their_backoff() {
        let q: WorkQueue<u32> = WorkQueue::new(backoff(20, 50));
        let mut waits = Vec::new();
        for forget in [false, false, false, true, false] {
            let t = Instant::now();
            q.add_rate_limited(7);
            assert!(q.is_empty());
            assert_eq!(q.get().await, Some(7));
            waits.push(t.elapsed().as_millis());
            q.done(&7);
            if forget {
                q.forget(&7);
            }
        }
        // Doubling, capped, reset by forget (on the paused clock).
        assert_eq!(waits, [20, 40, 50, 50, 20]);
    }

    #[tokio::test]
    async fn keeps_client_go_metrics_under_its_name() {
        let metrics = Arc::new(Metrics::new(
            prometheus_client::registry::Registry::default(),
        ));
        let q: WorkQueue<&str> = WorkQueue::with_metrics("uids", backoff(1, 1), metrics.clone());
        q.add("a");
        q.add("a");
        q.add("b");
        let text = metrics.encode();
        assert!(text.contains("workqueue_adds_total{name=\"uids\",controller=\"uids\"} 2"));
        assert!(text.contains("workqueue_depth{name=\"uids\",controller=\"uids\"} 2"));
        let a = q.get().await.expect("a is queued");
        q.add(a); // waits for done: still counted in depth
        q.done(&a);
        q.add_rate_limited("c");
        let text = metrics.encode();
        assert!(text.contains("workqueue_adds_total{name=\"uids\",controller=\"uids\"} 3"));
        assert!(text.contains("workqueue_retries_total{name=\"uids\",controller=\"uids\"} 1"));
        assert!(text.contains("workqueue_depth{name=\"uids\",controller=\"uids\"} 2"));
        assert!(text.contains(
            "workqueue_queue_duration_seconds_count{name=\"uids\",controller=\"uids\"} 1"
        ));
        assert!(text.contains(
            "workqueue_work_duration_seconds_count{name=\"uids\",controller=\"uids\"} 1"
        ));
    }
}
