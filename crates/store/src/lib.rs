//! A revisioned key-value store in etcd's data model.
//!
//! One global [`Revision`] grows by one on every write; each key carries its
//! `create_revision`, `mod_revision` and `version`. Writes are compare-and-swap
//! on the key's `mod_revision`; reads see the latest durable state; watchers receive
//! every change under a prefix from a given revision on, with the previous
//! value, until the history they need has been compacted.
//!
//! Two backends share this API: [`Store::memory`] and [`Store::open`]
//! (durable: an append-only log with group commit, fsync before a write is
//! visible or acknowledged, replayed on open; corruption refuses to open). Values are [`Bytes`], shared (not
//! copied) between the live state, the watch history and every watcher.
//!
//! ```
//! use kubeforge_store::Store;
//! # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! # rt.block_on(async {
//! let store = Store::memory();
//! let kv = store
//!     .create("/registry/core/configmaps/default/x", |_rev| "{}".into())
//!     .await?;
//! assert_eq!((kv.version, kv.mod_revision), (1, 1));
//! # Ok::<(), kubeforge_store::StoreError>(())
//! # }).unwrap();
//! ```

mod hub;
mod record;
mod state;
pub mod vfs;
mod wal;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, mpsc};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use hub::Hub;
pub use hub::Watcher;
use state::State;
pub use vfs::{StdVfs, Vfs, VfsFile};

/// A point in the store's history: the number of writes made so far.
pub type Revision = u64;

/// The state of one key.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyValue {
    /// The key, e.g. `/registry/core/pods/default/web-1`.
    pub key: Arc<str>,
    /// The value (JSON for the API server), shared, never copied.
    pub value: Bytes,
    /// Revision of the write that created the key.
    pub create_revision: Revision,
    /// Revision of the last write to the key.
    pub mod_revision: Revision,
    /// 1 on create, +1 per update.
    pub version: u64,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created or updated.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change, as seen by watchers.
///
/// For Put: `kv` is the new state, `prev` the old one (None on create).
/// For Delete: `kv.key` = the key, `kv.mod_revision` = the delete's revision,
/// `kv.value` = the tombstone bytes the caller supplied,
/// `create_revision`/`version` copied from prev; `prev` = the last live state.
#[derive(Clone, Debug)]
pub struct Event {
    /// Put or Delete.
    pub kind: EventKind,
    /// The key's state after the change (see above for deletes).
    pub kv: KeyValue,
    /// The key's state before the change.
    pub prev: Option<KeyValue>,
    /// One form derived from `kv.value`, computed by the first watcher that
    /// needs it and shared by the rest (the API server keeps the object
    /// without `metadata.managedFields` here). Every reader must derive the
    /// same form.
    pub derived: OnceLock<Bytes>,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Create of a key that exists.
    #[error("key {key} already exists")]
    AlreadyExists {
        /// The key.
        key: String,
    },
    /// Update or delete of a key that does not exist.
    #[error("key {key} not found")]
    NotFound {
        /// The key.
        key: String,
    },
    /// The key's mod_revision was not the expected one.
    #[error("key {key} was modified: expected revision {expected}, found {actual}")]
    Conflict {
        /// The key.
        key: String,
        /// The mod_revision the caller expected.
        expected: Revision,
        /// The key's actual mod_revision.
        actual: Revision,
    },
    /// A watch needs events that are no longer kept.
    #[error("revision {requested} has been compacted (oldest available {compacted})")]
    Compacted {
        /// The first revision the watch needed.
        requested: Revision,
        /// The oldest revision a new watch may start after.
        compacted: Revision,
    },
    /// Reading or writing the log failed (also: an entry over 1 GiB).
    #[error("storage I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// The log holds records that cannot have been written by this store.
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
    /// The store was closed.
    #[error("store is closed")]
    Closed,
}

/// The answer to [`Store::range`].
#[derive(Clone, Debug)]
pub struct RangeResult {
    /// Matching key-values, in key order.
    pub kvs: Vec<KeyValue>,
    /// Whether further matching keys exist past the limit.
    pub more: bool,
    /// The store's revision when it was read (consistent with `kvs`).
    pub revision: Revision,
}

/// Settings of the durable backend.
#[derive(Clone, Debug)]
pub struct DurableOptions {
    /// fsync (fdatasync) each group of writes before acknowledging them.
    /// Default true; false trades crash safety for speed (tests).
    pub fsync: bool,
    /// Events kept for watches to start from. Default 100_000.
    pub history: usize,
    /// While the log is busy (its previous sync ended less than this ago),
    /// a batch waits until this long after that sync for more writes to
    /// join it, so that many writes share one sync: under thousands of
    /// writes a second from many writers the log then syncs a few hundred
    /// times a second instead of after every one or two writes, each sync a
    /// device flush costing far more CPU than the bytes it writes. Each
    /// write may wait up to this much longer, which also slows a closed
    /// loop of few writers (each waits for its previous write). An idle log
    /// syncs at once. Default zero (sync each batch as soon as the previous
    /// sync ends); `kubeforge up` uses 2 ms.
    pub commit_gap: Duration,
    /// The log file is extended ahead of its records in zero-filled steps
    /// of this many bytes (synced), so that a commit's fsync does not also
    /// have to journal a new file size. Default 4 MiB.
    pub preallocate: u64,
}

impl Default for DurableOptions {
    fn default() -> Self {
        DurableOptions {
            fsync: true,
            history: DEFAULT_HISTORY,
            commit_gap: Duration::ZERO,
            preallocate: 4 << 20,
        }
    }
}

/// History window of [`Store::memory`].
const DEFAULT_HISTORY: usize = 100_000;

/// A handle to a store; clones share it (cheap: an `Arc` inside).
///
/// Writes are ordered under one write lock, where the compare-and-swap is
/// checked, the revision assigned and the caller's value closure run: the
/// closures must be quick and must not call back into the store (that would
/// deadlock).
///
/// Durable backend: a write is ordered (checked and given its revision)
/// under the lock, but reads (`get`, `range`, `current_revision`) see it,
/// watchers receive it and its caller gets its answer only once it is on
/// disk (fsynced): nothing a client can observe is lost by a crash, and a
/// revision it has seen is never reused. If the log cannot be written the
/// store cuts it back to its last synced record, refuses all later writes
/// (`Io`) and ends its watches; reads go on serving the durable state;
/// reopen it to write again.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    state: Arc<RwLock<State>>,
    hub: Arc<Hub>,
    /// Durable backend: its file system and directory.
    disk: Option<(Arc<dyn Vfs>, PathBuf)>,
    /// Held while a compaction runs (one at a time).
    compacting: tokio::sync::Mutex<()>,
    /// Queue to the log writer thread; `None` for the memory backend.
    wal: Option<mpsc::Sender<writer::Command>>,
    /// Set under the state write lock by [`Store::close`].
    closed: AtomicBool,
    /// Set by the writer thread when the log could not be written.
    failed: Arc<AtomicBool>,
    /// Syncs of the log so far (counted by the writer thread).
    syncs: Arc<AtomicU64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("durable", &self.is_durable())
            .field("revision", &self.current_revision())
            .field("compacted", &self.compacted_revision())
            .finish()
    }
}

/// Waits for the log writer's acknowledgement of one write.
type Pending = Option<oneshot::Receiver<Result<(), StoreError>>>;

impl Store {
    /// An empty in-memory store keeping 100_000 events for watches.
    pub fn memory() -> Store {
        Store::memory_with_history(DEFAULT_HISTORY)
    }

    /// An empty in-memory store keeping `history` events for watches.
    pub fn memory_with_history(history: usize) -> Store {
        Store {
            inner: Arc::new(Inner {
                state: Arc::new(RwLock::new(State::default())),
                hub: Arc::new(Hub::new(history, 0)),
                disk: None,
                compacting: tokio::sync::Mutex::new(()),
                wal: None,
                closed: AtomicBool::new(false),
                failed: Arc::new(AtomicBool::new(false)),
                syncs: Arc::new(AtomicU64::new(0)),
            }),
        }
    }

    /// Opens the durable store in `dir` (created if absent), replaying its
    /// log on a blocking thread. Watches can start from the replayed
    /// revision on (`compacted_revision() == current_revision()`).
    ///
    /// Fails with `Io(WouldBlock)` if another open store holds `dir`, and
    /// with `Corrupt` (naming the file and offset) if the log holds a bad
    /// record that is not a torn tail: acknowledged data is never dropped.
    pub async fn open(dir: &Path, opts: DurableOptions) -> Result<Store, StoreError> {
        Store::open_with(Arc::new(StdVfs), dir, opts).await
    }

    /// [`Store::open`] over another file system (tests simulate crashes
    /// and I/O errors with one).
    pub async fn open_with(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        opts: DurableOptions,
    ) -> Result<Store, StoreError> {
        let owned = dir.to_owned();
        let fs = vfs.clone();
        let mut rec = tokio::task::spawn_blocking(move || wal::recover(&*fs, &owned))
            .await
            .map_err(|e| {
                StoreError::Io(io::Error::other(format!("log recovery task failed: {e}")))
            })??;
        let mut state = std::mem::take(&mut rec.state);
        state.defer_writes(state::LogPos {
            seq: rec.seq,
            offset: rec.len,
            fresh: rec.fresh,
        });
        let revision = state.revision();
        let keys = state.len();
        let state = Arc::new(RwLock::new(state));
        let hub = Arc::new(Hub::new(opts.history, revision));
        let failed = Arc::new(AtomicBool::new(false));
        let syncs = Arc::new(AtomicU64::new(0));
        let shared = writer::Shared {
            vfs: vfs.clone(),
            state: state.clone(),
            hub: hub.clone(),
            failed: failed.clone(),
            syncs: syncs.clone(),
        };
        let tx = writer::spawn_writer(rec, &opts, shared)?;
        tracing::info!(dir = %dir.display(), revision, keys, "opened durable store");
        Ok(Store {
            inner: Arc::new(Inner {
                state,
                hub,
                disk: Some((vfs, dir.to_owned())),
                compacting: tokio::sync::Mutex::new(()),
                wal: Some(tx),
                closed: AtomicBool::new(false),
                failed,
                syncs,
            }),
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        // The state is only mutated after every fallible step and caller
        // closure has run, so a panic cannot leave it half-written.
        self.inner
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, State> {
        self.inner
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How many times the durable log has been synced (`fdatasync`) since
    /// it was opened; 0 for the memory backend or without fsync.
    pub fn log_syncs(&self) -> u64 {
        self.inner.syncs.load(Ordering::Relaxed)
    }

    /// Whether writes go to disk.
    pub fn is_durable(&self) -> bool {
        self.inner.wal.is_some()
    }

    /// Revision of the last durable write (0 for an empty store).
    pub fn current_revision(&self) -> Revision {
        self.read().revision()
    }

    /// Oldest revision a watch may start after.
    pub fn compacted_revision(&self) -> Revision {
        self.inner.hub.compacted_revision()
    }

    /// The latest durable state of `key`.
    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.read().get(key)
    }

    /// Keys starting with `prefix`, in key order, strictly after
    /// `start_after` when given, at most `limit` (0 = no limit); `more` =
    /// further keys exist; `revision` = current revision at the time of the
    /// read (consistent with `kvs`).
    pub fn range(&self, prefix: &str, start_after: Option<&str>, limit: usize) -> RangeResult {
        self.read().range(prefix, start_after, limit)
    }

    /// Like [`Store::range`], but as the keys were at revision `at` (an MVCC
    /// read within the watch history): the current state with every later
    /// event undone. `Compacted` when `at` is older than the history; `at`
    /// above the current revision reads the current state.
    pub async fn range_at(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        at: Revision,
    ) -> Result<RangeResult, StoreError> {
        // The durable backend publishes events after their fsync: wait (for
        // at most a few thousand yields) until the history has caught up
        // with the state it is read against.
        for _ in 0..10_000 {
            {
                let state = self.read();
                let current = state.revision();
                if at >= current {
                    drop(state);
                    return Ok(self.range(prefix, start_after, limit));
                }
                let (last, events) = self.inner.hub.events_after(prefix, at)?;
                if last >= current {
                    return Ok(past_range(
                        &state,
                        &events,
                        prefix,
                        start_after,
                        limit,
                        at,
                        current,
                    ));
                }
            }
            tokio::task::yield_now().await;
        }
        Err(StoreError::Io(io::Error::other(
            "the watch history did not catch up with the state in time",
        )))
    }

    /// Number of keys starting with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.read().count(prefix)
    }

    /// Applies one change under the write lock and hands it to the backend:
    /// published at once (memory) or queued to the log writer (durable).
    /// `result` picks what the caller gets back from the event.
    fn apply(
        &self,
        change: impl FnOnce(&mut State) -> Result<Event, StoreError>,
        result: impl FnOnce(&Event) -> Option<KeyValue>,
    ) -> Result<(KeyValue, Pending), StoreError> {
        let mut state = self.write_lock();
        if self.inner.closed.load(Ordering::Relaxed) {
            return Err(StoreError::Closed);
        }
        if self.inner.failed.load(Ordering::Acquire) {
            return Err(StoreError::Io(io::Error::other(
                "an earlier write-ahead log write failed; reopen the store",
            )));
        }
        let event = change(&mut state)?;
        let kv = result(&event)
            .ok_or_else(|| StoreError::Corrupt("delete without a previous value".into()))?;
        let event = Arc::new(event);
        match &self.inner.wal {
            None => {
                self.inner.hub.publish([event]);
                Ok((kv, None))
            }
            Some(tx) => {
                let (done, rx) = oneshot::channel();
                if tx.send(writer::Command::Write { event, done }).is_err() {
                    // The writer thread is gone (it panicked): the change is
                    // in memory only, so stop accepting writes.
                    self.inner.failed.store(true, Ordering::Release);
                    return Err(StoreError::Closed);
                }
                Ok((kv, Some(rx)))
            }
        }
    }

    /// Create-if-absent. `value` is called exactly once, under the store's
    /// write lock, with the revision this write will get, and returns the
    /// bytes to store. Resolves when the write is durable (durable backend)
    /// and visible.
    pub async fn create(
        &self,
        key: &str,
        value: impl FnOnce(Revision) -> Bytes,
    ) -> Result<KeyValue, StoreError> {
        let (kv, pending) = self.apply(|s| s.create(key, value), |e| Some(e.kv.clone()))?;
        settle(kv, pending).await
    }

    /// Update-if-mod_revision: `expected_mod_revision` None = unconditional
    /// (the key must exist). NotFound if absent, Conflict on mismatch.
    pub async fn update(
        &self,
        key: &str,
        expected_mod_revision: Option<Revision>,
        value: impl FnOnce(Revision) -> Bytes,
    ) -> Result<KeyValue, StoreError> {
        let (kv, pending) = self.apply(
            |s| s.update(key, expected_mod_revision, value),
            |e| Some(e.kv.clone()),
        )?;
        settle(kv, pending).await
    }

    /// Delete-if-mod_revision. `tombstone(rev, &prev)` gives the bytes
    /// carried by the Delete event's `kv.value`. Returns the deleted (prev)
    /// KeyValue.
    pub async fn delete(
        &self,
        key: &str,
        expected_mod_revision: Option<Revision>,
        tombstone: impl FnOnce(Revision, &KeyValue) -> Bytes,
    ) -> Result<KeyValue, StoreError> {
        let (kv, pending) = self.apply(
            |s| s.delete(key, expected_mod_revision, tombstone),
            |e| e.prev.clone(),
        )?;
        settle(kv, pending).await
    }

    /// Events for keys under `prefix` with mod_revision > `after`: first the
    /// ones still in history, then live ones, in revision order, no gaps, no
    /// duplicates. Err(Compacted) when `after < compacted_revision()`;
    /// Err(Closed) after [`Store::close`].
    pub fn watch(&self, prefix: &str, after: Revision) -> Result<Watcher, StoreError> {
        self.inner.hub.watch(prefix, after)
    }

    /// Drops history at or below `revision` (clamped to the current
    /// revision; at or below the compacted revision it changes nothing), so
    /// watches from before it get Compacted. Durable backend: also rewrites
    /// the log as a snapshot of the live keys, so it does not grow without
    /// bound — written and synced on a blocking thread while writes go on,
    /// then switched to atomically and durably: the writer appends what
    /// was logged meanwhile, renames it into place and syncs the directory.
    pub async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        let (Some(tx), Some((vfs, dir))) = (&self.inner.wal, &self.inner.disk) else {
            if self.inner.closed.load(Ordering::Relaxed) {
                return Err(StoreError::Closed);
            }
            self.inner.hub.compact(revision);
            return Ok(());
        };
        let _one = self.inner.compacting.lock().await;
        {
            let _state = self.read();
            if self.inner.closed.load(Ordering::Relaxed) {
                return Err(StoreError::Closed);
            }
            if self.inner.failed.load(Ordering::Acquire) {
                return Err(StoreError::Io(io::Error::other(
                    "an earlier write-ahead log write failed; reopen the store",
                )));
            }
            self.inner.hub.compact(revision);
        }
        let (vfs, dir, state) = (vfs.clone(), dir.clone(), self.inner.state.clone());
        let written = tokio::task::spawn_blocking(move || {
            // The published state and the log position it ends at, read
            // together: the log's records after that offset are the writes
            // after the snapshot.
            let (snapshot, revision, log) = {
                let state = state.read().unwrap_or_else(PoisonError::into_inner);
                if state.log.fresh {
                    return Ok(None);
                }
                (state.snapshot(), state.revision(), state.log)
            };
            let (file, len) =
                writer::write_snapshot(&*vfs, &dir, log.seq + 1, &snapshot, revision)?;
            Ok::<_, io::Error>(Some((file, len, log)))
        })
        .await
        .map_err(|e| StoreError::Io(io::Error::other(format!("compaction task failed: {e}"))))?;
        let Some((file, len, log)) = written.inspect_err(|e| {
            tracing::warn!(error = %e, "log compaction failed; keeping the old log");
        })?
        else {
            return Ok(()); // Already a snapshot with nothing after it.
        };
        let (done, rx) = oneshot::channel();
        let cmd = writer::Command::Switch {
            file,
            len,
            base_seq: log.seq,
            from: log.offset,
            done,
        };
        tx.send(cmd).map_err(|_| StoreError::Closed)?;
        rx.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Flushes and stops the durable writer (idempotent); later writes get
    /// Closed and watchers end once they have drained what was published.
    pub async fn close(&self) {
        let rx = {
            let _state = self.write_lock();
            self.inner.closed.store(true, Ordering::Relaxed);
            let Some(tx) = &self.inner.wal else {
                self.inner.hub.close();
                return;
            };
            let (done, rx) = oneshot::channel();
            if tx.send(writer::Command::Close { done }).is_err() {
                return; // Already stopped.
            }
            rx
        };
        // An error means the writer stopped before reading the command,
        // i.e. an earlier close already finished.
        let _ = rx.await;
    }
}

/// Waits for a write's acknowledgement, if it needs one.
async fn settle(kv: KeyValue, pending: Pending) -> Result<KeyValue, StoreError> {
    match pending {
        None => Ok(kv),
        Some(rx) => match rx.await {
            Ok(Ok(())) => Ok(kv),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(StoreError::Closed),
        },
    }
}

/// `range` as of revision `at`: live keys unchanged since `at`, plus the
/// values that keys changed later had at `at` (the `prev` of their first
/// later event), merged in key order.
fn past_range(
    state: &state::State,
    events: &[Arc<Event>],
    prefix: &str,
    start_after: Option<&str>,
    limit: usize,
    at: Revision,
    current: Revision,
) -> RangeResult {
    use std::collections::BTreeMap;
    let mut first: BTreeMap<&str, Option<&KeyValue>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.kv.mod_revision <= current) {
        first.entry(&e.kv.key).or_insert(e.prev.as_ref());
    }
    let mut past = first
        .iter()
        .filter(|(k, _)| start_after.is_none_or(|s| **k > s))
        .filter_map(|(_, prev)| prev.filter(|p| p.mod_revision <= at))
        .peekable();
    let mut live = state
        .iter_prefix(prefix, start_after)
        .filter(|kv| !first.contains_key(&*kv.key))
        .peekable();
    let mut kvs = Vec::new();
    let more = loop {
        let next = match (live.peek(), past.peek()) {
            (None, None) => break false,
            (Some(l), Some(p)) if l.key <= p.key => live.next(),
            (Some(_), Some(_)) | (None, Some(_)) => past.next(),
            (Some(_), None) => live.next(),
        };
        if limit != 0 && kvs.len() == limit {
            break true;
        }
        if let Some(kv) = next {
            kvs.push(kv.clone());
        }
    };
    RangeResult {
        kvs,
        more,
        revision: at,
    }
}
