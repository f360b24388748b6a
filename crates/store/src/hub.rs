//! The watch hub: a bounded history of recent events plus a broadcast
//! channel for live ones, both behind one mutex.
//!
//! Publishing = (lock; append to history, evicting the oldest events past the
//! window and raising the compacted revision; broadcast; unlock). Starting a
//! watch = (lock; subscribe; copy the history events it needs; unlock). Since
//! both take the same lock, a new watcher sees every event exactly once:
//! those published before it subscribed come from the copy, later ones from
//! the channel. Prefix filtering happens in the watcher, so publishing costs
//! the same whatever the number of watchers (one `Arc` per receiver, paid
//! lazily by the receivers themselves).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use crate::{Event, Revision, StoreError};

/// Slots of the broadcast channel: how far a watcher may fall behind the
/// newest event before it gets [`StoreError::Compacted`].
pub(crate) const CHANNEL_CAPACITY: usize = 65_536;

/// Recent events and the live channel.
pub(crate) struct Hub {
    inner: Mutex<HubInner>,
}

struct HubInner {
    /// Events with revisions `compacted + 1 ..= last`, consecutive.
    history: VecDeque<Arc<Event>>,
    /// Most events `history` keeps.
    window: usize,
    /// Oldest revision a watch may start after.
    compacted: Revision,
    /// Revision of the last published event.
    last: Revision,
    /// `None` once closed: receivers then drain and end.
    tx: Option<broadcast::Sender<Arc<Event>>>,
}

impl Hub {
    /// An empty hub whose first event will carry revision `revision + 1`.
    pub(crate) fn new(window: usize, revision: Revision) -> Hub {
        let (tx, _) = broadcast::channel(CHANNEL_CAPACITY);
        Hub {
            inner: Mutex::new(HubInner {
                history: VecDeque::with_capacity(window.min(4096)),
                window,
                compacted: revision,
                last: revision,
                tx: Some(tx),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubInner> {
        // A panic while holding this lock cannot leave the history half
        // updated in a way that matters more than losing the hub, so keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes events, which must continue the revision sequence in order.
    pub(crate) fn publish<I: IntoIterator<Item = Arc<Event>>>(&self, events: I) {
        let mut hub = self.lock();
        for event in events {
            hub.push(event);
        }
    }

    /// Oldest revision a watch may start after.
    pub(crate) fn compacted_revision(&self) -> Revision {
        self.lock().compacted
    }

    /// Drops history at or below `revision` (clamped to the last published
    /// revision; lowering it is a no-op).
    pub(crate) fn compact(&self, revision: Revision) {
        let mut hub = self.lock();
        let revision = revision.min(hub.last);
        if revision <= hub.compacted {
            return;
        }
        while hub
            .history
            .front()
            .is_some_and(|e| e.kv.mod_revision <= revision)
        {
            hub.history.pop_front();
        }
        hub.compacted = revision;
    }

    /// The last published revision and the history events under `prefix`
    /// with revisions in `(after, last]`; Compacted when `after` is older
    /// than the history.
    pub(crate) fn events_after(
        &self,
        prefix: &str,
        after: Revision,
    ) -> Result<(Revision, Vec<Arc<Event>>), StoreError> {
        let hub = self.lock();
        if after < hub.compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted: hub.compacted,
            });
        }
        let skip = usize::try_from(after - hub.compacted).unwrap_or(usize::MAX);
        let events = hub
            .history
            .iter()
            .skip(skip)
            .filter(|e| e.kv.key.starts_with(prefix))
            .cloned()
            .collect();
        Ok((hub.last, events))
    }

    /// Ends every watcher once it has drained the events already sent.
    pub(crate) fn close(&self) {
        self.lock().tx = None;
    }

    /// Starts a watch of `prefix` after revision `after`.
    pub(crate) fn watch(
        self: &Arc<Self>,
        prefix: &str,
        after: Revision,
    ) -> Result<Watcher, StoreError> {
        let hub = self.lock();
        if after < hub.compacted {
            return Err(StoreError::Compacted {
                requested: after + 1,
                compacted: hub.compacted,
            });
        }
        let rx = hub.tx.as_ref().ok_or(StoreError::Closed)?.subscribe();
        // History revisions are consecutive from compacted + 1.
        let skip = usize::try_from(after - hub.compacted).unwrap_or(usize::MAX);
        let backlog: VecDeque<Arc<Event>> = hub
            .history
            .iter()
            .skip(skip)
            .filter(|e| e.kv.key.starts_with(prefix))
            .cloned()
            .collect();
        Ok(Watcher {
            hub: Arc::downgrade(self),
            prefix: prefix.into(),
            after,
            channel_revision: hub.last,
            backlog,
            rx: Some(rx),
        })
    }
}

impl HubInner {
    fn push(&mut self, event: Arc<Event>) {
        let rev = event.kv.mod_revision;
        debug_assert_eq!(
            rev,
            self.last + 1,
            "events must be published in revision order"
        );
        self.last = rev;
        if let Some(tx) = &self.tx {
            // An error only means there is no receiver right now.
            let _ = tx.send(event.clone());
        }
        self.history.push_back(event);
        while self.history.len() > self.window {
            match self.history.pop_front() {
                Some(old) => self.compacted = old.kv.mod_revision,
                None => break,
            }
        }
    }
}

/// A stream of the events under one prefix, in revision order, from a given
/// revision on. Get one from [`crate::Store::watch`].
///
/// Adapt it to a `futures::Stream` with e.g.
/// `futures::stream::unfold(w, |mut w| async move { w.next().await.map(|e| (e, w)) })`.
pub struct Watcher {
    /// Where a watcher that fell behind the channel catches up from (weak:
    /// a watcher must not keep the channel open once the store is gone).
    hub: Weak<Hub>,
    prefix: Box<str>,
    /// Events at or below this revision are not wanted.
    after: Revision,
    /// Revision of the last event taken from the channel (or the last one
    /// published before subscribing).
    channel_revision: Revision,
    /// History events copied when the watch started, already filtered.
    backlog: VecDeque<Arc<Event>>,
    /// `None` once the stream has ended.
    rx: Option<broadcast::Receiver<Arc<Event>>>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("prefix", &self.prefix)
            .field("after", &self.after)
            .field("channel_revision", &self.channel_revision)
            .field("backlog", &self.backlog.len())
            .field("ended", &self.rx.is_none())
            .finish()
    }
}

impl Watcher {
    /// The revision through which this watcher has delivered every event
    /// under its prefix: events at or below it were returned by `next` or
    /// were not wanted. On a quiet prefix it still moves with the store,
    /// since the watcher sees (and skips) every other event; a bookmark
    /// carrying it lets a client resume without going back to a revision
    /// the history may have dropped.
    pub fn progress(&self) -> Revision {
        match self.backlog.front() {
            Some(first) => first.kv.mod_revision.saturating_sub(1).max(self.after),
            None => self.after.max(self.channel_revision),
        }
    }

    /// Next event; a watcher that falls behind the live channel catches up
    /// from the history; `Some(Err(Compacted))` if it fell so far behind
    /// that events it needs were dropped from the history too (the stream then ends: `None`
    /// afterwards). `None` when the store closes, after the events already
    /// published have been delivered.
    ///
    /// Cancel-safe: dropping the future loses no event.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, StoreError>> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                return Some(Ok(event));
            }
            let rx = self.rx.as_mut()?;
            match rx.recv().await {
                Ok(event) => {
                    let rev = event.kv.mod_revision;
                    self.channel_revision = rev;
                    if rev > self.after && event.kv.key.starts_with(&*self.prefix) {
                        return Some(Ok(event));
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    let missed_through = self.channel_revision.saturating_add(missed);
                    if missed_through <= self.after {
                        // Only events this watch did not want were lost.
                        self.channel_revision = missed_through;
                        continue;
                    }
                    let requested = self.after.max(self.channel_revision) + 1;
                    // The channel dropped events this watch wants; the
                    // history may still hold them (etcd lets a slow watcher
                    // catch up from its history rather than cancel it).
                    if let Some(hub) = self.hub.upgrade()
                        && let Ok((last, events)) = hub.events_after(&self.prefix, requested - 1)
                    {
                        self.backlog.extend(events);
                        // Channel events up to `last` are in the backlog now.
                        self.after = self.after.max(last);
                        self.channel_revision = self.channel_revision.max(last);
                        continue;
                    }
                    self.rx = None;
                    return Some(Err(StoreError::Compacted {
                        requested,
                        compacted: missed_through,
                    }));
                }
                Err(RecvError::Closed) => {
                    self.rx = None;
                    return None;
                }
            }
        }
    }
}
