//! Shared informers: one watch per kind however many controllers use it.
//!
//! An informer runs kube-runtime's [`watcher`] (with its default backoff) for
//! one kind across all namespaces, prunes each object (`managedFields` and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation by default)
//! before it reaches the cache, keeps the cache (a [`Cache`], compact JSON by
//! default), and fans every change out to its subscribers (the controllers)
//! with the old and the new object, so predicates can compare them. Unlike a
//! `ReflectHandle`, deletions are delivered too, and a subscriber that is not
//! running (a replica that is not leading) never holds the watch back: it has
//! not subscribed.
//!
//! After a (re)list the changes are delivered only once the cache holds the
//! listed state, as client-go's informers replace their store before
//! notifying handlers.
//!
//! For kinds a controller reconciles, the informer also keeps a kube-runtime
//! [`Store`] of [`Handle`]s (name and namespace only): kube-runtime's
//! `applier` looks queued objects up in a `Store`, and the reconcile then
//! reads the full object from the cache.

use std::any::Any;
use std::collections::HashMap;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cache::{Cache, Shelf, Slot, TRIM_EVERY, key_of};
use crate::sync::lock;
use tokio_util::sync::CancellationToken;

/// The annotation `kubectl apply` (client-side) stores its input in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What the manager can cache, watch and reconcile: a typed Kubernetes
/// object (k8s-openapi types, `kube::CustomResource` types). The default
/// compact cache keeps objects in their serde JSON form, so that form must
/// round-trip (it does for k8s-openapi and kube-derive types).
pub trait Cacheable:
    Resource<DynamicType = (), Scope: CacheScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Cacheable for K where
    K: Resource<DynamicType = (), Scope: CacheScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// A kind's scope as a cache sees it: whether a namespace can narrow its
/// list and watch. Implemented for k8s-openapi's namespaced and
/// cluster-scoped markers, which every typed kind (kube-derive's included)
/// carries.
pub trait CacheScope: 'static + Sized {
    /// Whether objects of this scope live in namespaces.
    const NAMESPACED: bool;

    /// The API listing and watching the `K`s of namespace `ns` (every
    /// namespace when `None`); a cluster-scoped kind has no namespace, and
    /// `ns` is ignored.
    fn watch_api<K: Resource<Scope = Self, DynamicType = ()>>(
        client: Client,
        ns: Option<&str>,
    ) -> Api<K>;
}

impl CacheScope for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
    fn watch_api<K: Resource<Scope = Self, DynamicType = ()>>(
        client: Client,
        ns: Option<&str>,
    ) -> Api<K> {
        match ns {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        }
    }
}

impl CacheScope for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
    fn watch_api<K: Resource<Scope = Self, DynamicType = ()>>(
        client: Client,
        _ns: Option<&str>,
    ) -> Api<K> {
        Api::all(client)
    }
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

/// What kube-runtime's `applier` keeps per object of a reconciled kind:
/// its name and namespace, as a resource of kind `K`.
pub(crate) struct Handle<K> {
    meta: ObjectMeta,
    kind: PhantomData<fn() -> K>,
}

impl<K: Cacheable> Handle<K> {
    fn of(obj: &K) -> Handle<K> {
        Handle {
            meta: ObjectMeta {
                name: obj.meta().name.clone(),
                namespace: obj.meta().namespace.clone(),
                ..Default::default()
            },
            kind: PhantomData,
        }
    }

    /// The key of the object this handle stands for.
    pub(crate) fn key(&self) -> ObjectRef<K> {
        let r = ObjectRef::new(self.meta.name.as_deref().unwrap_or_default());
        match self.meta.namespace.as_deref() {
            Some(ns) => r.within(ns),
            None => r,
        }
    }
}

impl<K> Clone for Handle<K> {
    fn clone(&self) -> Self {
        Handle {
            meta: self.meta.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> Debug for Handle<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("name", &self.meta.name)
            .field("namespace", &self.meta.namespace)
            .finish()
    }
}

impl<K: Cacheable> Resource for Handle<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
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

/// One object of a list in progress: its key and its cache slot (holding
/// the decoded object too if someone was watching).
type Listed<K> = (ObjectRef<K>, Slot<K>);

struct Subscribers<K> {
    senders: Vec<mpsc::UnboundedSender<Change<K>>>,
}

/// A shared informer for kind `K`.
pub(crate) struct Informer<K: Cacheable> {
    shelf: Arc<Shelf<K>>,
    ready_tx: watch::Sender<bool>,
    ready_rx: watch::Receiver<bool>,
    /// Taken by the one `run`.
    handle_writer: Mutex<Option<Writer<Handle<K>>>>,
    handles: Store<Handle<K>>,
    /// Whether a controller reconciles `K` (then `handles` is kept).
    reconciled: AtomicBool,
    subs: Mutex<Subscribers<K>>,
    synced: AtomicBool,
    kind: String,
    /// What is listed and watched (every `K` by default).
    scope: Mutex<WatchScope<K>>,
}

/// Which `K`s an informer lists and watches: the API it watches through
/// (every namespace, or one) and the label and field selectors.
pub(crate) struct WatchScope<K> {
    /// The API to watch through, given the manager's client.
    pub api: Arc<dyn Fn(Client) -> Api<K> + Send + Sync>,
    /// The watch's selectors.
    pub config: watcher::Config,
}

impl<K> WatchScope<K> {
    /// Watch only what matches label selector `labels` and field selector
    /// `fields` (an empty one selects everything).
    pub(crate) fn select(&mut self, labels: &str, fields: &str) {
        if !labels.is_empty() {
            self.config = std::mem::take(&mut self.config).labels(labels);
        }
        if !fields.is_empty() {
            self.config = std::mem::take(&mut self.config).fields(fields);
        }
    }
}

impl<K: Cacheable> WatchScope<K> {
    /// Every `K` in namespace `ns` (every namespace when `None`; a
    /// cluster-scoped kind's every object).
    fn in_namespace(ns: Option<String>) -> Self {
        WatchScope {
            api: Arc::new(move |client| K::Scope::watch_api::<K>(client, ns.as_deref())),
            config: watcher::Config::default(),
        }
    }
}

impl<K: Cacheable> Informer<K> {
    fn new(compact: bool, namespace: Option<String>, scope: Option<&Scope>) -> Informer<K> {
        let writer = Writer::<Handle<K>>::default();
        let kind = format!(
            "{}.{}{}{}",
            K::kind(&()),
            K::api_version(&()),
            if K::metadata_api() { " (metadata)" } else { "" },
            scope.map(|s| format!(" [{s}]")).unwrap_or_default()
        );
        let (ready_tx, ready_rx) = watch::channel(false);
        Informer {
            shelf: Arc::new(Shelf::new(compact, kind.clone())),
            ready_tx,
            ready_rx,
            handles: writer.as_reader(),
            handle_writer: Mutex::new(Some(writer)),
            reconciled: AtomicBool::new(false),
            subs: Mutex::new(Subscribers {
                senders: Vec::new(),
            }),
            synced: AtomicBool::new(false),
            kind,
            scope: Mutex::new(WatchScope::in_namespace(namespace)),
        }
    }

    /// Change what is listed and watched (before the manager runs).
    pub(crate) fn scope(&self, change: impl FnOnce(&mut WatchScope<K>)) {
        change(&mut lock(&self.scope));
    }

    /// The cache (empty until the first list arrives).
    pub(crate) fn cache(&self) -> Cache<K> {
        Cache::new(self.shelf.clone(), self.ready_rx.clone())
    }

    /// Turns true once the first list is in the cache.
    pub(crate) fn ready(&self) -> watch::Receiver<bool> {
        self.ready_rx.clone()
    }

    /// The handles of the cached objects, for kube-runtime's `applier`;
    /// kept from now on (call before the manager runs).
    pub(crate) fn handles(&self) -> Store<Handle<K>> {
        self.reconciled.store(true, Ordering::SeqCst);
        self.handles.clone()
    }

    /// Subscribe to changes from now on; also answers whether the cache was
    /// already synced at that moment (then the subscriber should take the
    /// current state from the cache; otherwise the initial list arrives as
    /// changes).
    pub(crate) fn subscribe(&self) -> (mpsc::UnboundedReceiver<Change<K>>, bool) {
        let (tx, rx) = mpsc::unbounded();
        let mut subs = lock(&self.subs);
        subs.senders.push(tx);
        (rx, self.synced.load(Ordering::SeqCst))
    }

    async fn run(
        self: Arc<Self>,
        client: Client,
        transform: Transform<K>,
        stop: CancellationToken,
    ) {
        let Some(mut handles) = lock(&self.handle_writer).take() else {
            return;
        };
        let keep_handles = self.reconciled.load(Ordering::SeqCst);
        let (api, config) = {
            let scope = lock(&self.scope);
            ((scope.api)(client), scope.config.clone())
        };
        let stream = watcher(api, config)
            .default_backoff()
            .modify(move |o: &mut K| transform(o));
        let mut stream = std::pin::pin!(stream);
        let mut trim = tokio::time::interval(TRIM_EVERY);
        trim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Objects listed since the last Init, cached and delivered at
        // InitDone.
        let mut listed: Vec<Listed<K>> = Vec::new();
        loop {
            let ev = tokio::select! {
                ev = stream.next() => ev,
                _ = trim.tick() => {
                    self.shelf.trim();
                    continue;
                }
                () = stop.cancelled() => return,
            };
            let Some(ev) = ev else { return };
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(kind = %self.kind, error = %e, "watch failed; retrying with backoff");
                    continue;
                }
            };
            // The applier's handles change after the cache, so a handle it
            // finds always has its object cached (unless just deleted).
            let handle_event = keep_handles.then(|| match &ev {
                watcher::Event::Apply(o) => watcher::Event::Apply(Handle::of(o)),
                watcher::Event::Delete(o) => watcher::Event::Delete(Handle::of(o)),
                watcher::Event::Init => watcher::Event::Init,
                watcher::Event::InitApply(o) => watcher::Event::InitApply(Handle::of(o)),
                watcher::Event::InitDone => watcher::Event::InitDone,
            });
            self.apply(ev, &mut listed, &mut handles, handle_event);
        }
    }

    /// Take one watch event into the cache, the applier's handles and the
    /// subscribers, all under the subscribers' lock: a controller that
    /// subscribes meanwhile either gets this event's changes (and, before
    /// the first list is in, the whole list as changes) or sees the cache
    /// already holding it — never neither.
    fn apply(
        &self,
        ev: watcher::Event<K>,
        listed: &mut Vec<Listed<K>>,
        handles: &mut Writer<Handle<K>>,
        handle_event: Option<watcher::Event<Handle<K>>>,
    ) {
        let mut subs = lock(&self.subs);
        let watched = !subs.senders.is_empty();
        let mut changes = Vec::new();
        let mut list_done = false;
        match ev {
            watcher::Event::Apply(obj) => {
                let key = key_of(&obj);
                let slot = self.shelf.slot(Arc::new(obj), watched);
                let new = if watched { slot.object() } else { None };
                let old = self.shelf.insert(key, slot);
                if let Some(new) = new {
                    let old = old.and_then(Slot::into_object);
                    changes.push(Change::Applied { old, new });
                }
            }
            watcher::Event::Delete(obj) => {
                let last = self.shelf.remove(&key_of(&obj));
                if watched {
                    let last = last
                        .and_then(Slot::into_object)
                        .unwrap_or_else(|| Arc::new(obj));
                    changes.push(Change::Deleted(last));
                }
            }
            watcher::Event::Init => listed.clear(),
            watcher::Event::InitApply(obj) => {
                let key = key_of(&obj);
                listed.push((key, self.shelf.slot(Arc::new(obj), watched)));
            }
            watcher::Event::InitDone => {
                changes = self.swap_in(std::mem::take(listed), watched);
                list_done = true;
            }
        }
        // Cache, then the applier's handles, then the subscribers: a
        // change a controller queues is always found by the applier and
        // its object in the cache.
        if let Some(e) = handle_event {
            handles.apply_watcher_event(&e);
        }
        for change in changes {
            subs.senders
                .retain(|tx| tx.unbounded_send(change.clone()).is_ok());
        }
        if list_done && !self.synced.swap(true, Ordering::SeqCst) {
            self.ready_tx.send_replace(true);
            tracing::debug!(kind = %self.kind, objects = self.shelf.len(), "cache synced");
        }
    }

    /// A (re)list is complete: swap it in; returns the changes to deliver
    /// (none if nobody watches).
    fn swap_in(&self, listed: Vec<Listed<K>>, watched: bool) -> Vec<Change<K>> {
        let mut fresh = HashMap::with_capacity(listed.len());
        let mut news = Vec::new();
        for (key, slot) in listed {
            if watched && let Some(new) = slot.object() {
                news.push((key.clone(), new));
            }
            fresh.insert(key, slot);
        }
        let mut before = self.shelf.replace(fresh);
        let mut changes = Vec::new();
        if watched {
            for (key, new) in news {
                let old = before.remove(&key).and_then(Slot::into_object);
                changes.push(Change::Applied { old, new });
            }
            for (_, gone) in before {
                if let Some(gone) = gone.into_object() {
                    changes.push(Change::Deleted(gone));
                }
            }
        }
        changes
    }
}

/// The function each object passes through before it is cached.
pub(crate) type Transform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// An informer with its kind erased, as the manager starts and polls it.
pub(crate) trait ErasedInformer: Send + Sync {
    fn start(
        self: Arc<Self>,
        client: Client,
        prune: bool,
        stop: CancellationToken,
    ) -> JoinHandle<()>;
    fn synced(&self) -> bool;
    fn kind(&self) -> &str;
}

impl<K: Cacheable> ErasedInformer for Informer<K> {
    fn start(
        self: Arc<Self>,
        client: Client,
        prune_objects: bool,
        stop: CancellationToken,
    ) -> JoinHandle<()> {
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

/// One informer: its type and scope (`None`: the kind's default cache),
/// itself (to downcast) and itself kind-erased.
type Entry = (
    std::any::TypeId,
    Option<Scope>,
    Arc<dyn Any + Send + Sync>,
    Arc<dyn ErasedInformer>,
);

/// Which objects of a kind a controller's cache holds
/// ([`ControllerBuilder::scope`](crate::ControllerBuilder::scope)): those
/// in one namespace, matching a label and a field selector. Controllers
/// whose scopes are equal share one cache (one list and watch); a kind's
/// default cache — [`Manager::store`](crate::Manager::store), and every
/// controller without a scope — is another.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Scope {
    namespace: Option<String>,
    labels: String,
    fields: String,
}

impl Scope {
    /// Every object (in the manager's namespace, when it has one).
    pub fn all() -> Scope {
        Scope::default()
    }

    /// The objects in namespace `ns` (cluster-scoped kinds have none and
    /// are not narrowed by it). The list and watch go to the namespace's
    /// URL, so RBAC in that namespace is enough.
    pub fn namespace(ns: &str) -> Scope {
        Scope {
            namespace: Some(ns.to_string()),
            ..Scope::default()
        }
    }

    /// Only the objects matching label selector `selector` (kube's
    /// syntax: `app=web,tier!=db`).
    pub fn labels(mut self, selector: &str) -> Scope {
        self.labels = selector.to_string();
        self
    }

    /// Only the objects matching field selector `selector`
    /// (`status.phase=Running`).
    pub fn fields(mut self, selector: &str) -> Scope {
        self.fields = selector.to_string();
        self
    }

    /// The same namespace without the selectors: what a scoped
    /// controller's owned and watched kinds are cached under (their
    /// objects need not carry the primary kind's labels).
    pub(crate) fn namespace_only(&self) -> Option<Scope> {
        self.namespace.as_ref().map(|ns| Scope::namespace(ns))
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(ns) = &self.namespace {
            parts.push(format!("namespace={ns}"));
        }
        if !self.labels.is_empty() {
            parts.push(format!("labels={}", self.labels));
        }
        if !self.fields.is_empty() {
            parts.push(format!("fields={}", self.fields));
        }
        if parts.is_empty() {
            parts.push("all".into());
        }
        f.write_str(&parts.join(" "))
    }
}

/// The manager's informers, one per kind.
pub(crate) struct Informers {
    by_type: Mutex<Vec<Entry>>,
    compact: bool,
    /// Where namespaced kinds are watched unless scoped otherwise (every
    /// namespace when `None`).
    namespace: Option<String>,
}

impl Informers {
    /// No informers yet; their caches will be compact if `compact`, and
    /// those of namespaced kinds hold only `namespace` if given.
    pub(crate) fn new(compact: bool, namespace: Option<String>) -> Informers {
        Informers {
            by_type: Mutex::new(Vec::new()),
            compact,
            namespace,
        }
    }

    /// The default informer for `K`, created on first use.
    pub(crate) fn get<K: Cacheable>(&self) -> Arc<Informer<K>> {
        self.get_in::<K>(None)
    }

    /// The informer for `K` under `scope` (the default one when `None`),
    /// created on first use and shared by every caller with an equal scope.
    pub(crate) fn get_in<K: Cacheable>(&self, scope: Option<&Scope>) -> Arc<Informer<K>> {
        // A cluster-scoped kind has no namespace to narrow by, and a scope
        // that narrows nothing is the default cache.
        let scope = scope
            .map(|sc| Scope {
                namespace: if K::Scope::NAMESPACED {
                    sc.namespace.clone()
                } else {
                    None
                },
                ..sc.clone()
            })
            .filter(|sc| *sc != Scope::default());
        let scope = scope.as_ref();
        let id = std::any::TypeId::of::<K>();
        let mut all = lock(&self.by_type);
        for (t, sc, any, _) in all.iter() {
            if *t == id
                && sc.as_ref() == scope
                && let Ok(inf) = any.clone().downcast::<Informer<K>>()
            {
                return inf;
            }
        }
        let inf = match scope {
            None => Informer::<K>::new(self.compact, self.namespace.clone(), None),
            Some(sc) => {
                let ns = sc.namespace.clone().or_else(|| self.namespace.clone());
                let inf = Informer::<K>::new(self.compact, ns, Some(sc));
                inf.scope(|w| w.select(&sc.labels, &sc.fields));
                inf
            }
        };
        let inf = Arc::new(inf);
        all.push((id, scope.cloned(), inf.clone(), inf.clone()));
        inf
    }

    /// All informers, kind erased.
    pub(crate) fn all(&self) -> Vec<Arc<dyn ErasedInformer>> {
        lock(&self.by_type)
            .iter()
            .map(|(_, _, _, e)| e.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    #[test]
    fn equal_scopes_share_a_cache_and_empty_ones_are_the_default() {
        use k8s_openapi::api::core::v1::Namespace;
        let informers = Informers::new(true, None);
        let team = Scope::namespace("team").labels("app=web");
        let a = informers.get_in::<ConfigMap>(Some(&team));
        let b = informers.get_in::<ConfigMap>(Some(&team.clone()));
        assert!(Arc::ptr_eq(&a, &b), "one cache per distinct scope");
        let other = informers.get_in::<ConfigMap>(Some(&Scope::namespace("team")));
        assert!(!Arc::ptr_eq(&a, &other));
        let default = informers.get::<ConfigMap>();
        assert!(Arc::ptr_eq(
            &default,
            &informers.get_in::<ConfigMap>(Some(&Scope::all()))
        ));
        // A namespace does not narrow a cluster-scoped kind.
        assert!(Arc::ptr_eq(
            &informers.get::<Namespace>(),
            &informers.get_in::<Namespace>(Some(&Scope::namespace("team")))
        ));
        assert_eq!(informers.all().len(), 4);
        assert_eq!(team.to_string(), "namespace=team labels=app=web");
    }

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
