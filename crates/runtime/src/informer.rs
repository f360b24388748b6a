//! Shared informers: one watch per kind however many controllers use it.
//!
//! An informer runs kube-runtime's [`watcher`] (with its default backoff) for
//! one kind across all namespaces, prunes each object (`managedFields` and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation by default)
//! before it reaches the cache, keeps the cache in a kube-runtime
//! [`Store`](kube::runtime::reflector::Store), and fans every change out to
//! its subscribers (the controllers) with the old and the new object, so
//! predicates can compare them. Unlike a `ReflectHandle`, deletions are
//! delivered too, and a subscriber that is not running (a replica that is
//! not leading) never holds the watch back: it has not subscribed.
//!
//! After a (re)list the changes are delivered only once the cache holds the
//! listed state, as client-go's informers replace their store before
//! notifying handlers.

use std::any::Any;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::channel::mpsc;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::shutdown::Stop;

/// The annotation `kubectl apply` (client-side) stores its input in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What the manager can cache, watch and reconcile: a typed Kubernetes
/// object (k8s-openapi types, `kube::CustomResource` types).
pub trait Cacheable:
    Resource<DynamicType = (), Scope: 'static>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Cacheable for K where
    K: Resource<DynamicType = (), Scope: 'static>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// One change seen by an informer.
pub(crate) enum Change<K> {
    /// Added (`old` is `None`) or updated.
    Applied { old: Option<Arc<K>>, new: Arc<K> },
    /// Deleted; the last state known.
    Deleted(Arc<K>),
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Applied { old, new } => Change::Applied {
                old: old.clone(),
                new: new.clone(),
            },
            Change::Deleted(o) => Change::Deleted(o.clone()),
        }
    }
}

/// Drop the fields a controller almost never reads but that dominate an
/// object's size: `metadata.managedFields` and the last-applied annotation.
pub fn prune<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED_ANNOTATION);
        if a.is_empty() {
            meta.annotations = None;
        }
    }
}

struct Subscribers<K> {
    senders: Vec<mpsc::UnboundedSender<Change<K>>>,
}

/// A shared informer for kind `K`.
pub(crate) struct Informer<K: Cacheable> {
    store: Store<K>,
    writer: Mutex<Option<Writer<K>>>,
    subs: Mutex<Subscribers<K>>,
    synced: AtomicBool,
    kind: String,
}

impl<K: Cacheable> Informer<K> {
    fn new() -> Informer<K> {
        let writer = Writer::<K>::default();
        Informer {
            store: writer.as_reader(),
            writer: Mutex::new(Some(writer)),
            subs: Mutex::new(Subscribers {
                senders: Vec::new(),
            }),
            synced: AtomicBool::new(false),
            kind: format!(
                "{}.{}{}",
                K::kind(&()),
                K::api_version(&()),
                if K::metadata_api() { " (metadata)" } else { "" }
            ),
        }
    }

    /// The cache (empty until the first list arrives).
    pub(crate) fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Subscribe to changes from now on; also answers whether the cache was
    /// already synced at that moment (then the subscriber should take the
    /// current state from the store; otherwise the initial list arrives as
    /// changes).
    pub(crate) fn subscribe(&self) -> (mpsc::UnboundedReceiver<Change<K>>, bool) {
        let (tx, rx) = mpsc::unbounded();
        let mut subs = lock(&self.subs);
        subs.senders.push(tx);
        (rx, self.synced.load(Ordering::SeqCst))
    }

    fn publish(&self, change: Change<K>) {
        let mut subs = lock(&self.subs);
        subs.senders
            .retain(|tx| tx.unbounded_send(change.clone()).is_ok());
    }

    async fn run(self: Arc<Self>, client: Client, transform: Transform<K>, mut stop: Stop) {
        let Some(mut writer) = lock(&self.writer).take() else {
            return;
        };
        let api: Api<K> = Api::all(client);
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(move |o: &mut K| transform(o));
        let mut stream = std::pin::pin!(stream);
        // Keys listed since the last Init, delivered at InitDone.
        let mut listed: Vec<ObjectRef<K>> = Vec::new();
        loop {
            let ev = tokio::select! {
                ev = stream.next() => ev,
                () = stop.wait() => return,
            };
            let Some(ev) = ev else { return };
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(kind = %self.kind, error = %e, "watch failed; retrying with backoff");
                    continue;
                }
            };
            match &ev {
                watcher::Event::Apply(obj) => {
                    let key = ObjectRef::from_obj(obj);
                    let old = self.store.get(&key);
                    writer.apply_watcher_event(&ev);
                    if let Some(new) = self.store.get(&key) {
                        self.publish(Change::Applied { old, new });
                    }
                }
                watcher::Event::Delete(obj) => {
                    let key = ObjectRef::from_obj(obj);
                    let last = self
                        .store
                        .get(&key)
                        .unwrap_or_else(|| Arc::new(obj.clone()));
                    writer.apply_watcher_event(&ev);
                    self.publish(Change::Deleted(last));
                }
                watcher::Event::Init => {
                    listed.clear();
                    writer.apply_watcher_event(&ev);
                }
                watcher::Event::InitApply(obj) => {
                    listed.push(ObjectRef::from_obj(obj));
                    writer.apply_watcher_event(&ev);
                }
                watcher::Event::InitDone => {
                    let mut before: HashMap<ObjectRef<K>, Arc<K>> = self
                        .store
                        .state()
                        .into_iter()
                        .map(|o| (ObjectRef::from_obj(&*o), o))
                        .collect();
                    writer.apply_watcher_event(&ev);
                    for key in std::mem::take(&mut listed) {
                        let old = before.remove(&key);
                        if let Some(new) = self.store.get(&key) {
                            self.publish(Change::Applied { old, new });
                        }
                    }
                    for (_, gone) in before {
                        self.publish(Change::Deleted(gone));
                    }
                    if !self.synced.swap(true, Ordering::SeqCst) {
                        tracing::debug!(kind = %self.kind, objects = self.store.len(), "cache synced");
                    }
                }
            }
        }
    }
}

/// The function each object passes through before it is cached.
pub(crate) type Transform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// An informer with its kind erased, as the manager starts and polls it.
pub(crate) trait ErasedInformer: Send + Sync {
    fn start(self: Arc<Self>, client: Client, prune: bool, stop: Stop) -> JoinHandle<()>;
    fn synced(&self) -> bool;
    fn kind(&self) -> &str;
}

impl<K: Cacheable> ErasedInformer for Informer<K> {
    fn start(self: Arc<Self>, client: Client, prune_objects: bool, stop: Stop) -> JoinHandle<()> {
        let transform: Transform<K> = if prune_objects {
            Arc::new(prune::<K>)
        } else {
            Arc::new(|_: &mut K| {})
        };
        tokio::spawn(self.run(client, transform, stop))
    }

    fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    fn kind(&self) -> &str {
        &self.kind
    }
}

/// One informer: its type, itself (to downcast) and itself kind-erased.
type Entry = (
    std::any::TypeId,
    Arc<dyn Any + Send + Sync>,
    Arc<dyn ErasedInformer>,
);

/// The manager's informers, one per kind.
#[derive(Default)]
pub(crate) struct Informers {
    by_type: Mutex<Vec<Entry>>,
}

impl Informers {
    /// The informer for `K`, created on first use.
    pub(crate) fn get<K: Cacheable>(&self) -> Arc<Informer<K>> {
        let id = std::any::TypeId::of::<K>();
        let mut all = lock(&self.by_type);
        for (t, any, _) in all.iter() {
            if *t == id
                && let Ok(inf) = any.clone().downcast::<Informer<K>>()
            {
                return inf;
            }
        }
        let inf = Arc::new(Informer::<K>::new());
        all.push((id, inf.clone(), inf.clone()));
        inf
    }

    /// All informers, kind erased.
    pub(crate) fn all(&self) -> Vec<Arc<dyn ErasedInformer>> {
        lock(&self.by_type)
            .iter()
            .map(|(_, _, e)| e.clone())
            .collect()
    }
}

/// Lock a mutex, recovering from poisoning (a panicking holder cannot leave
/// these structures half-updated in a way that matters).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    #[test]
    fn prune_drops_managed_fields_and_last_applied_only() {
        let mut cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("a".into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                annotations: Some(
                    [
                        (LAST_APPLIED_ANNOTATION.to_string(), "{}".to_string()),
                        ("keep".to_string(), "me".to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        prune(&mut cm);
        assert!(cm.metadata.managed_fields.is_none());
        let ann = cm.metadata.annotations.unwrap_or_default();
        assert_eq!(ann.len(), 1);
        assert_eq!(ann.get("keep").map(String::as_str), Some("me"));
    }
}
