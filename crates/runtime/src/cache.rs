//! The Manager's cache of one kind: what [`Manager::store`](crate::Manager::store)
//! returns and the controllers read.
//!
//! A typed Kubernetes object is several times larger in memory than its
//! JSON: every optional struct (a `Container`'s probes, a `Volume`'s thirty
//! possible sources) is laid out inline whether set or not, every small map
//! (labels, resource requests) takes a whole B-tree node. So by default the
//! cache keeps each object as its compact JSON encoding (what `serde_json`
//! writes for it: the object as served, minus the fields the informer
//! pruned) and decodes it when read. A decoded object is kept beside its
//! encoding and shared by every reader while anyone still holds it, and for
//! about a second after the last reader lets it go (the informer drops
//! unheld decoded objects every [`TRIM_EVERY`]), so a burst of reads of one
//! object decodes it once. The shelf remembers which slots hold a decoded
//! object, so a trim visits those, not every cached object. With
//! [`compact_cache(false)`](crate::ManagerBuilder::compact_cache) objects
//! are kept decoded, as kube-runtime's `Store` does.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;

use crate::informer::Cacheable;
use crate::sync::lock;

/// How often the informer drops decoded objects nobody holds.
pub const TRIM_EVERY: Duration = Duration::from_secs(1);

/// [`Cache::wait_until_ready`] failed: the manager that fills the cache was
/// dropped (or stopped) before the first list arrived.
#[derive(Debug, thiserror::Error)]
#[error("the cache of {kind} was dropped before it synced")]
pub struct CacheClosed {
    /// The cached kind.
    pub kind: String,
}

/// One cached object.
pub(crate) enum Slot<K> {
    /// Kept decoded (compact caching off, or encoding failed).
    Typed(Arc<K>),
    /// Kept as JSON; `hot` is the decoded object while it is shared.
    Compact {
        json: Box<[u8]>,
        hot: Mutex<Option<Arc<K>>>,
    },
}

impl<K: Cacheable> Slot<K> {
    /// Store `obj`, compactly if `compact` (else a clone of it); `keep_hot`
    /// keeps the decoded object too (until the next trim finds nobody
    /// holding it).
    pub(crate) fn new(obj: Arc<K>, compact: bool, keep_hot: bool) -> Slot<K> {
        if !compact {
            // A clone, as kube-runtime's `Store` keeps: deserializing
            // over-allocates vectors (capacity 4 for one toleration), a
            // clone allocates exactly (a third less for a typical pod).
            return Slot::Typed(Arc::new(K::clone(&obj)));
        }
        match serde_json::to_vec(&*obj) {
            Ok(json) => Slot::Compact {
                json: json.into_boxed_slice(),
                hot: Mutex::new(keep_hot.then_some(obj)),
            },
            Err(e) => {
                tracing::warn!(kind = %K::kind(&()), error = %e, "cannot encode an object; caching it decoded");
                Slot::Typed(obj)
            }
        }
    }

    /// The object, decoded if need be (and then kept hot).
    pub(crate) fn object(&self) -> Option<Arc<K>> {
        self.object_noting().map(|(o, _)| o)
    }

    /// The object, and whether this call decoded it (the slot turned hot).
    fn object_noting(&self) -> Option<(Arc<K>, bool)> {
        match self {
            Slot::Typed(o) => Some((o.clone(), false)),
            Slot::Compact { json, hot } => {
                let mut hot = lock(hot);
                if let Some(o) = &*hot {
                    return Some((o.clone(), false));
                }
                let o = Arc::new(decode::<K>(json)?);
                *hot = Some(o.clone());
                Some((o, true))
            }
        }
    }

    /// Whether the slot holds a decoded copy beside its encoding.
    fn is_hot(&self) -> bool {
        match self {
            Slot::Typed(_) => false,
            Slot::Compact { hot, .. } => lock(hot).is_some(),
        }
    }

    /// The object, consuming the slot.
    pub(crate) fn into_object(self) -> Option<Arc<K>> {
        match self {
            Slot::Typed(o) => Some(o),
            Slot::Compact { json, hot } => {
                let hot = match hot.into_inner() {
                    Ok(h) => h,
                    Err(p) => p.into_inner(),
                };
                match hot {
                    Some(o) => Some(o),
                    None => decode::<K>(&json).map(Arc::new),
                }
            }
        }
    }

    /// Drop the decoded object if the slot is its only holder; returns
    /// whether a decoded copy is still kept (someone holds it).
    fn trim(&self) -> bool {
        match self {
            Slot::Typed(_) => false,
            Slot::Compact { hot, .. } => {
                let mut hot = lock(hot);
                if hot.as_ref().is_some_and(|o| Arc::strong_count(o) == 1) {
                    *hot = None;
                }
                hot.is_some()
            }
        }
    }
}

fn decode<K: Cacheable>(json: &[u8]) -> Option<K> {
    match serde_json::from_slice(json) {
        Ok(o) => Some(o),
        Err(e) => {
            // Only possible for a type whose serde form does not round-trip.
            tracing::error!(kind = %K::kind(&()), error = %e, "cannot decode a cached object; skipping it");
            None
        }
    }
}

/// The key an object is cached under: its name and (if namespaced) its
/// namespace, without the uid and resourceVersion an `ObjectRef` can carry.
pub(crate) fn key_of<K: Cacheable>(obj: &K) -> ObjectRef<K> {
    let meta = obj.meta();
    let r = ObjectRef::new(meta.name.as_deref().unwrap_or_default());
    match meta.namespace.as_deref() {
        Some(ns) => r.within(ns),
        None => r,
    }
}

type Map<K> = HashMap<ObjectRef<K>, Slot<K>>;

/// The shared state behind [`Cache`] handles; written by the informer.
pub(crate) struct Shelf<K: Cacheable> {
    map: RwLock<Map<K>>,
    /// Keys whose slot may hold a decoded copy: what a trim visits. Taken
    /// after `map` when both are held.
    hot: Mutex<HashSet<ObjectRef<K>>>,
    compact: bool,
    kind: String,
}

impl<K: Cacheable> Shelf<K> {
    pub(crate) fn new(compact: bool, kind: String) -> Shelf<K> {
        Shelf {
            map: RwLock::new(HashMap::new()),
            hot: Mutex::new(HashSet::new()),
            compact,
            kind,
        }
    }

    pub(crate) fn slot(&self, obj: Arc<K>, keep_hot: bool) -> Slot<K> {
        Slot::new(obj, self.compact, keep_hot)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Map<K>> {
        match self.map.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map<K>> {
        match self.map.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Insert or replace; returns the previous slot.
    pub(crate) fn insert(&self, key: ObjectRef<K>, slot: Slot<K>) -> Option<Slot<K>> {
        if slot.is_hot() {
            self.note_hot(key.clone());
        }
        self.write().insert(key, slot)
    }

    /// Remember that `key`'s slot holds a decoded copy.
    fn note_hot(&self, key: ObjectRef<K>) {
        lock(&self.hot).insert(key);
    }

    pub(crate) fn remove(&self, key: &ObjectRef<K>) -> Option<Slot<K>> {
        self.write().remove(key)
    }

    /// Swap in a freshly listed state; returns the previous one.
    pub(crate) fn replace(&self, fresh: Map<K>) -> Map<K> {
        let hot: HashSet<ObjectRef<K>> = fresh
            .iter()
            .filter(|(_, s)| s.is_hot())
            .map(|(k, _)| k.clone())
            .collect();
        let before = std::mem::replace(&mut *self.write(), fresh);
        *lock(&self.hot) = hot;
        before
    }

    /// Drop decoded objects nobody else holds (visiting only the slots
    /// noted hot).
    pub(crate) fn trim(&self) {
        if !self.compact {
            return;
        }
        let noted = std::mem::take(&mut *lock(&self.hot));
        if noted.is_empty() {
            return;
        }
        let still: Vec<ObjectRef<K>> = {
            let map = self.read();
            noted
                .into_iter()
                .filter(|k| map.get(k).is_some_and(Slot::trim))
                .collect()
        };
        lock(&self.hot).extend(still);
    }

    /// How many slots are noted as holding a decoded copy.
    #[cfg(test)]
    fn noted_hot(&self) -> usize {
        lock(&self.hot).len()
    }

    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }
}

/// A read handle on the Manager's shared cache of kind `K` (cheap to
/// clone): the objects as last listed and watched, minus the fields the
/// manager prunes ([`prune`](crate::prune); `metadata.managedFields` and
/// the last-applied annotation by default).
///
/// The reads mirror kube-runtime's `Store`. They return `Arc<K>`: with the
/// default compact cache an object is decoded on first read and shared with
/// later readers while anyone holds it; see the [module docs](self).
pub struct Cache<K: Cacheable> {
    shelf: Arc<Shelf<K>>,
    ready: watch::Receiver<bool>,
}

impl<K: Cacheable> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Cache {
            shelf: self.shelf.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<K: Cacheable> fmt::Debug for Cache<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("kind", &self.shelf.kind)
            .field("compact", &self.shelf.compact)
            .field("len", &self.len())
            .finish()
    }
}

impl<K: Cacheable> Cache<K> {
    pub(crate) fn new(shelf: Arc<Shelf<K>>, ready: watch::Receiver<bool>) -> Cache<K> {
        Cache { shelf, ready }
    }

    /// Wait until the first list has filled the cache.
    ///
    /// # Errors
    /// [`CacheClosed`] if the manager was dropped or stopped before that.
    pub async fn wait_until_ready(&self) -> Result<(), CacheClosed> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| CacheClosed {
                kind: self.shelf.kind.clone(),
            })
    }

    /// The object `key` names, if cached. As with kube-runtime's `Store`,
    /// a namespace in `key` is ignored for cluster-scoped kinds.
    #[must_use]
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        let map = self.shelf.read();
        let slot = match map.get(key) {
            Some(s) => s,
            None if key.namespace.is_some() => {
                let mut cluster = key.clone();
                cluster.namespace = None;
                map.get(&cluster)?
            }
            None => return None,
        };
        let (o, decoded) = slot.object_noting()?;
        if decoded {
            self.shelf.note_hot(key.clone());
        }
        Some(o)
    }

    /// Whether `key` is cached (no decoding).
    #[must_use]
    pub fn contains(&self, key: &ObjectRef<K>) -> bool {
        let map = self.shelf.read();
        map.contains_key(key)
            || (key.namespace.is_some() && {
                let mut cluster = key.clone();
                cluster.namespace = None;
                map.contains_key(&cluster)
            })
    }

    /// The keys of all cached objects (no decoding).
    #[must_use]
    pub fn keys(&self) -> Vec<ObjectRef<K>> {
        self.shelf.read().keys().cloned().collect()
    }

    /// All cached objects (each decoded if it is not in use already).
    #[must_use]
    pub fn state(&self) -> Vec<Arc<K>> {
        self.state_filter(|_| true)
    }

    /// The cached objects `predicate` accepts.
    #[must_use]
    pub fn state_filter(&self, predicate: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        let mut out = Vec::new();
        self.walk(|o| {
            if predicate(o) {
                out.push(o.clone());
            }
            false
        });
        out
    }

    /// A cached object `predicate` accepts.
    #[must_use]
    pub fn find(&self, predicate: impl Fn(&K) -> bool) -> Option<Arc<K>> {
        let mut found = None;
        self.walk(|o| {
            if predicate(o) {
                found = Some(o.clone());
            }
            found.is_some()
        });
        found
    }

    /// Visit cached objects (decoding as need be) until `visit` returns
    /// true; slots this decodes are noted for the next trim.
    fn walk(&self, mut visit: impl FnMut(&Arc<K>) -> bool) {
        let map = self.shelf.read();
        let mut decoded = Vec::new();
        for (key, slot) in map.iter() {
            let Some((o, fresh)) = slot.object_noting() else {
                continue;
            };
            if fresh {
                decoded.push(key.clone());
            }
            if visit(&o) {
                break;
            }
        }
        if !decoded.is_empty() {
            lock(&self.shelf.hot).extend(decoded);
        }
    }

    /// How many objects are cached.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shelf.len()
    }

    /// Whether the cache is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether objects are kept as compact JSON (the default) rather than
    /// decoded.
    #[must_use]
    pub fn is_compact(&self) -> bool {
        self.shelf.compact
    }

    /// Drop the decoded copies no reader holds any more now, rather than at
    /// the informer's next trim (at most [`TRIM_EVERY`] later).
    pub fn trim(&self) {
        self.shelf.trim();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(name: &str, v: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            data: Some([("k".to_string(), v.to_string())].into()),
            ..Default::default()
        }
    }

    fn cache(compact: bool) -> (Arc<Shelf<ConfigMap>>, Cache<ConfigMap>, watch::Sender<bool>) {
        let shelf = Arc::new(Shelf::new(compact, "ConfigMap.v1".into()));
        let (tx, rx) = watch::channel(false);
        (shelf.clone(), Cache::new(shelf, rx), tx)
    }

    #[test]
    fn compact_slots_decode_to_the_same_object_and_share_it_while_held() {
        let (shelf, cache, _tx) = cache(true);
        let a = cm("a", "1");
        shelf.insert(key_of(&a), shelf.slot(Arc::new(a.clone()), false));
        let r = ObjectRef::new("a").within("ns");
        let got = cache.get(&r);
        assert_eq!(got.as_deref(), Some(&a));
        let again = cache.get(&r);
        assert!(matches!((&got, &again), (Some(x), Some(y)) if Arc::ptr_eq(x, y)));
        // Still held: a trim keeps it.
        cache.trim();
        let third = cache.get(&r);
        assert!(matches!((&got, &third), (Some(x), Some(y)) if Arc::ptr_eq(x, y)));
        drop((got, again, third));
        // Nobody holds it: a trim drops the decoded copy; the next read
        // decodes a new, equal one.
        cache.trim();
        let fresh = cache.get(&r);
        assert_eq!(fresh.as_deref(), Some(&a));
        assert!(cache.contains(&r));
        assert!(!cache.contains(&ObjectRef::new("b").within("ns")));
        assert_eq!(cache.keys(), vec![r]);
    }

    #[test]
    fn a_trim_visits_the_noted_hot_slots_and_drops_the_unheld_copies() {
        let (shelf, cache, _tx) = cache(true);
        for (n, hot) in [("a", true), ("b", false), ("c", false)] {
            let o = cm(n, "1");
            shelf.insert(key_of(&o), shelf.slot(Arc::new(o), hot));
        }
        // Inserted hot: noted; the others are not decoded yet.
        assert_eq!(shelf.noted_hot(), 1);
        let b = ObjectRef::new("b").within("ns");
        let held = cache.get(&b).unwrap();
        assert_eq!(shelf.noted_hot(), 2);
        // A walk notes what it decodes (c), not what was hot already.
        let found = cache.find(|o| o.metadata.name.as_deref() == Some("c"));
        assert!(found.is_some());
        assert_eq!(shelf.noted_hot(), 3);
        drop(found);
        // a and c are held by nobody: dropped and forgotten; b stays noted.
        cache.trim();
        assert_eq!(shelf.noted_hot(), 1);
        let again = cache.get(&b).unwrap();
        assert!(Arc::ptr_eq(&held, &again));
        let a = ObjectRef::new("a").within("ns");
        let a1 = cache.get(&a).unwrap();
        let a2 = cache.get(&a).unwrap();
        assert!(Arc::ptr_eq(&a1, &a2));
        drop((a1, a2));
        cache.trim();
        // The unheld copy of a was dropped: the next read decodes anew,
        // while b's copy, still held, is shared.
        let probe = cache.get(&a).unwrap();
        assert_eq!(shelf.noted_hot(), 2);
        drop((held, again));
        cache.trim();
        assert_eq!(shelf.noted_hot(), 1, "only a (held by probe) stays noted");
        drop(probe);
        cache.trim();
        assert_eq!(shelf.noted_hot(), 0);
        // A relist notes the hot slots of the fresh state only.
        let d = cm("d", "1");
        let mut fresh = HashMap::new();
        fresh.insert(key_of(&d), shelf.slot(Arc::new(d), true));
        drop(shelf.replace(fresh));
        assert_eq!(shelf.noted_hot(), 1);
    }

    #[test]
    fn typed_slots_keep_one_decoded_copy() {
        let (shelf, cache, _tx) = cache(false);
        let a = Arc::new(cm("a", "1"));
        shelf.insert(key_of(&*a), shelf.slot(a.clone(), false));
        let got = cache.state();
        assert_eq!(got.len(), 1);
        assert_eq!(*got[0], *a);
        let again = cache.get(&ObjectRef::new("a").within("ns"));
        assert!(again.is_some_and(|x| Arc::ptr_eq(&x, &got[0])));
        assert!(!cache.is_compact());
    }

    #[tokio::test]
    async fn wait_until_ready_resolves_on_sync_and_fails_when_closed() {
        let (_shelf, cache, tx) = cache(true);
        tx.send_replace(true);
        assert!(cache.wait_until_ready().await.is_ok());
        let (_shelf, cache, tx) = super::tests::cache(true);
        drop(tx);
        let err = cache.wait_until_ready().await.err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("the cache of ConfigMap.v1 was dropped before it synced")
        );
    }
}
