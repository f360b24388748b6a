//! The live key space: an ordered map from key to its latest [`KeyValue`]
//! plus the store's current revision. Compare-and-swap checks, revision
//! assignment and the construction of the resulting [`Event`] all happen
//! here, under the caller's write lock, so both backends decide ordering the
//! same way.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::{Event, EventKind, KeyValue, RangeResult, Revision, StoreError};

/// Latest value of every live key, and the revision of the last write.
#[derive(Debug, Default)]
pub(crate) struct State {
    map: BTreeMap<Arc<str>, KeyValue>,
    revision: Revision,
}

impl State {
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
        if self.map.contains_key(key) {
            return Err(StoreError::AlreadyExists {
                key: key.to_owned(),
            });
        }
        let rev = self.revision + 1;
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
        self.map.insert(key, kv.clone());
        self.revision = rev;
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
        let rev = self.revision + 1;
        let slot = self.map.get_mut(key).ok_or_else(|| StoreError::NotFound {
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
        let prev = std::mem::replace(slot, kv.clone());
        self.revision = rev;
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
        let rev = self.revision + 1;
        let current = self.map.get(key).ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        check_expected(current, expected)?;
        let value = tombstone(rev, current);
        let prev = self.map.remove(key).ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        let kv = KeyValue {
            key: prev.key.clone(),
            value,
            create_revision: prev.create_revision,
            mod_revision: rev,
            version: prev.version,
        };
        self.revision = rev;
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
        self.map.remove(key).is_some()
    }

    /// Raises the revision to at least `revision` (a snapshot header).
    pub(crate) fn replay_revision(&mut self, revision: Revision) {
        self.revision = self.revision.max(revision);
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
