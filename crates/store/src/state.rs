//! The live key space: an ordered map from key to its latest [`KeyValue`]
//! plus the store's current revision. Compare-and-swap checks, revision
//! assignment and the construction of the resulting [`Event`] all happen
//! here, under the caller's write lock, so both backends decide ordering the
//! same way.
//!
//! The durable backend orders a write before it is on disk: its change then
//! waits in `pending` (which later writes' checks consult) and reaches the
//! map that reads see only when the log writer commits it after the fsync.
//! Reads, list revisions and watch starts therefore only ever see durable
//! revisions, and a revision a client has seen is never reused after a
//! crash.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::{Event, EventKind, KeyValue, RangeResult, Revision, StoreError};

/// Latest value of every live key, and the revision of the last write.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The published (durable) key space.
    map: BTreeMap<Arc<str>, KeyValue>,
    /// Revision of the last published write.
    revision: Revision,
    /// Durable backend: keys changed by writes ordered but not yet durable,
    /// with the revision and state (None: deleted) of their newest change.
    pending: HashMap<Arc<str>, (Revision, Option<KeyValue>)>,
    /// Revision of the last ordered write (at least `revision`).
    ordered: Revision,
    /// Whether changes wait in `pending` until committed (durable backend).
    deferred: bool,
    /// Where the durable log stood when `revision` was published.
    pub(crate) log: LogPos,
}

/// A position in the durable log, as of the published revision.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LogPos {
    /// Sequence number of the live log.
    pub(crate) seq: u64,
    /// End of its last published record.
    pub(crate) offset: u64,
    /// Whether it is a snapshot with nothing after it.
    pub(crate) fresh: bool,
}

impl State {
    /// Makes later writes wait in `pending` until [`State::commit`].
    pub(crate) fn defer_writes(&mut self, log: LogPos) {
        self.deferred = true;
        self.ordered = self.revision;
        self.log = log;
    }

    /// The newest ordered state of `key` (pending or published).
    fn latest(&self, key: &str) -> Option<&KeyValue> {
        if !self.pending.is_empty()
            && let Some((_, kv)) = self.pending.get(key)
        {
            return kv.as_ref();
        }
        self.map.get(key)
    }

    /// Records an ordered change at revision `rev`.
    fn record(&mut self, key: Arc<str>, rev: Revision, kv: Option<KeyValue>) {
        self.ordered = rev;
        if self.deferred {
            self.pending.insert(key, (rev, kv));
            return;
        }
        match kv {
            Some(kv) => {
                self.map.insert(key, kv);
            }
            None => {
                self.map.remove(&key);
            }
        }
        self.revision = rev;
    }

    /// Publishes an ordered event (durable backend, after its fsync).
    pub(crate) fn commit(&mut self, event: &Event) {
        let kv = &event.kv;
        match event.kind {
            EventKind::Put => {
                self.map.insert(kv.key.clone(), kv.clone());
            }
            EventKind::Delete => {
                self.map.remove(&*kv.key);
            }
        }
        self.revision = kv.mod_revision;
        if self
            .pending
            .get(&*kv.key)
            .is_some_and(|(rev, _)| *rev == kv.mod_revision)
        {
            self.pending.remove(&*kv.key);
        }
    }

    /// Revision of the last write (0 for an empty, never-written store).
    pub(crate) fn revision(&self) -> Revision {
        self.revision
    }

    /// Latest state of `key`, if live.
    pub(crate) fn get(&self, key: &str) -> Option<KeyValue> {
        self.map.get(key).cloned()
    }

    /// Number of live keys.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every live key-value, in key order (used to write a log snapshot).
    pub(crate) fn snapshot(&self) -> Vec<KeyValue> {
        self.map.values().cloned().collect()
    }

    /// Keys under `prefix` strictly after `start_after`, in key order.
    pub(crate) fn iter_prefix<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
    ) -> impl Iterator<Item = &'a KeyValue> + 'a {
        let lower = match start_after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        self.map
            .range::<str, _>((lower, Bound::Unbounded))
            .map(|(_, kv)| kv)
            .take_while(move |kv| kv.key.starts_with(prefix))
    }

    /// See [`crate::Store::range`].
    pub(crate) fn range(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> RangeResult {
        let mut iter = self.iter_prefix(prefix, start_after);
        let mut kvs = Vec::new();
        let mut more = false;
        for kv in iter.by_ref() {
            if limit != 0 && kvs.len() == limit {
                more = true;
                break;
            }
            kvs.push(kv.clone());
        }
        RangeResult {
            kvs,
            more,
            revision: self.revision,
        }
    }

    /// See [`crate::Store::count`].
    pub(crate) fn count(&self, prefix: &str) -> usize {
        if prefix.is_empty() {
            return self.map.len();
        }
        self.iter_prefix(prefix, None).count()
    }

    /// Creates `key` if absent; returns the Put event.
    pub(crate) fn create(
        &mut self,
        key: &str,
        value: impl FnOnce(Revision) -> Bytes,
    ) -> Result<Event, StoreError> {
        if self.latest(key).is_some() {
            return Err(StoreError::AlreadyExists {
                key: key.to_owned(),
            });
        }
        let rev = self.ordered + 1;
        let value = value(rev);
        check_size(key, &value)?;
        let key: Arc<str> = Arc::from(key);
        let kv = KeyValue {
            key: key.clone(),
            value,
            create_revision: rev,
            mod_revision: rev,
            version: 1,
        };
        self.record(key, rev, Some(kv.clone()));
        Ok(Event {
            kind: EventKind::Put,
            kv,
            prev: None,
            derived: OnceLock::new(),
        })
    }

    /// Replaces `key`'s value if it exists and, when `expected` is given,
    /// its mod_revision matches; returns the Put event.
    pub(crate) fn update(
        &mut self,
        key: &str,
        expected: Option<Revision>,
        value: impl FnOnce(Revision) -> Bytes,
    ) -> Result<Event, StoreError> {
        let rev = self.ordered + 1;
        let slot = self.latest(key).ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        check_expected(slot, expected)?;
        let value = value(rev);
        check_size(key, &value)?;
        let kv = KeyValue {
            key: slot.key.clone(),
            value,
            create_revision: slot.create_revision,
            mod_revision: rev,
            version: slot.version + 1,
        };
        let prev = slot.clone();
        self.record(kv.key.clone(), rev, Some(kv.clone()));
        Ok(Event {
            kind: EventKind::Put,
            kv,
            prev: Some(prev),
            derived: OnceLock::new(),
        })
    }

    /// Removes `key` if it exists and, when `expected` is given, its
    /// mod_revision matches; returns the Delete event.
    pub(crate) fn delete(
        &mut self,
        key: &str,
        expected: Option<Revision>,
        tombstone: impl FnOnce(Revision, &KeyValue) -> Bytes,
    ) -> Result<Event, StoreError> {
        let rev = self.ordered + 1;
        let current = self.latest(key).ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        check_expected(current, expected)?;
        let value = tombstone(rev, current);
        let prev = current.clone();
        self.record(prev.key.clone(), rev, None);
        let kv = KeyValue {
            key: prev.key.clone(),
            value,
            create_revision: prev.create_revision,
            mod_revision: rev,
            version: prev.version,
        };
        Ok(Event {
            kind: EventKind::Delete,
            kv,
            prev: Some(prev),
            derived: OnceLock::new(),
        })
    }

    /// Applies a replayed put: the key's full state as logged.
    pub(crate) fn replay_put(&mut self, kv: KeyValue) {
        self.revision = self.revision.max(kv.mod_revision);
        self.ordered = self.revision;
        match self.map.get_mut(&*kv.key) {
            Some(slot) => {
                *slot = KeyValue {
                    key: slot.key.clone(),
                    ..kv
                }
            }
            None => {
                self.map.insert(kv.key.clone(), kv);
            }
        }
    }

    /// Applies a replayed delete; false when the key was not live.
    pub(crate) fn replay_delete(&mut self, key: &str, revision: Revision) -> bool {
        self.revision = self.revision.max(revision);
        self.ordered = self.revision;
        self.map.remove(key).is_some()
    }

    /// Raises the revision to at least `revision` (a snapshot header).
    pub(crate) fn replay_revision(&mut self, revision: Revision) {
        self.revision = self.revision.max(revision);
        self.ordered = self.revision;
    }
}

fn check_expected(current: &KeyValue, expected: Option<Revision>) -> Result<(), StoreError> {
    match expected {
        Some(want) if want != current.mod_revision => Err(StoreError::Conflict {
            key: current.key.to_string(),
            expected: want,
            actual: current.mod_revision,
        }),
        _ => Ok(()),
    }
}

/// Largest key + value a write may carry (what one log record can hold).
pub(crate) const MAX_ENTRY_BYTES: usize = crate::record::MAX_PAYLOAD - 64;

fn check_size(key: &str, value: &Bytes) -> Result<(), StoreError> {
    if key.len() + value.len() > MAX_ENTRY_BYTES {
        return Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "key {key}: entry of {} bytes is too large",
                key.len() + value.len()
            ),
        )));
    }
    Ok(())
}
