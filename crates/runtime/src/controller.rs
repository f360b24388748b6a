//! Controllers: what to reconcile (`for`, [`owns`](ControllerBuilder::owns),
//! [`watches`](ControllerBuilder::watches)), when (predicates, resync,
//! requeue), and how (bounded concurrency, per-object backoff, terminal
//! errors, panic recovery), built on kube-runtime's
//! [`applier`](kube::runtime::applier), the engine of its `Controller`.
//!
//! The triggers come from the manager's shared informers rather than from a
//! watch per controller; kube-runtime's scheduler deduplicates them, never
//! runs two reconciles of one object at once, and holds requeues. Around
//! each reconcile this module keeps controller-runtime's metrics and its
//! default rate limiter (5 ms → 1000 s per object, reset on success).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, StreamExt};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tracing::Instrument;

use crate::action::Action;
use crate::backoff::{BackoffConfig, ItemBackoff};
use crate::cache::Cache;
use crate::error::ReconcileError;
use crate::informer::{Cacheable, Change, Handle, Informer, Informers, Scope};
use crate::manager::Manager;
use crate::metrics::{ControllerLabels, DepthSource, Metrics, QueueLabels};
use crate::permissions::{self, Permissions};
use crate::predicates::Predicate;
use crate::sync::lock;
use tokio_util::sync::CancellationToken;

/// Builds a controller for primary kind `K` with context `C`; see
/// [`Manager::controller`]. Nothing runs until [`register`](Self::register)
/// and [`Manager::run`].
#[must_use = "a controller does nothing until .register(reconcile) is called"]
pub struct ControllerBuilder<'m, K: Cacheable, C> {
    mgr: &'m Manager,
    name: String,
    ctx: Arc<C>,
    /// The owned and watched kinds' sources, resolved at
    /// [`register`](Self::register) against the controller's scope.
    sources: Vec<PendingSource<K>>,
    predicate: Option<Predicate>,
    max_concurrent: u16,
    resync: Option<Duration>,
    backoff: BackoffConfig,
    /// Which `K`s the controller caches (the kind's default cache when
    /// `None`).
    scope: Option<Scope>,
    /// What the controller reads and writes (see [`crate::permissions`]).
    permissions: Permissions,
}

/// Subscribes one trigger source when the controller starts.
type SourceFn<K> = Box<dyn FnOnce(&Arc<Shared<K>>) -> BoxStream<'static, ObjectRef<K>> + Send>;

/// An owned or watched kind's source before the controller's scope is
/// known: given the informers and that scope, its cache's readiness (no
/// reconcile runs before every cache the controller reads has listed) and
/// its trigger source.
type PendingSource<K> =
    Box<dyn FnOnce(&Informers, Option<&Scope>) -> (watch::Receiver<bool>, SourceFn<K>) + Send>;

impl<'m, K: Cacheable, C: Send + Sync + 'static> ControllerBuilder<'m, K, C> {
    pub(crate) fn new(mgr: &'m Manager, name: &str, ctx: C) -> Self {
        ControllerBuilder {
            mgr,
            name: name.to_string(),
            ctx: Arc::new(ctx),
            sources: Vec::new(),
            predicate: None,
            max_concurrent: 1,
            resync: None,
            backoff: BackoffConfig::default(),
            scope: None,
            permissions: {
                let mut p = Permissions::new();
                p.allow_kind::<K>(None, permissions::READ);
                p
            },
        }
    }

    /// Also reconcile the controlling owner (an ownerReference with
    /// `controller: true` of kind `K`) when a `Child` changes or is deleted,
    /// like controller-runtime's `Owns`.
    ///
    /// Records that the controller reads and writes `Child`s (`create`,
    /// `update`, `patch`, `delete`) and updates `K`'s `finalizers`
    /// subresource (what `blockOwnerDeletion` on the owner reference
    /// needs).
    pub fn owns<Child: Cacheable>(mut self) -> Self {
        self.permissions
            .allow_kind::<Child>(None, permissions::READ)
            .allow_kind::<Child>(None, permissions::WRITE)
            .allow_kind::<K>(Some("finalizers"), &["update"]);
        self.sources
            .push(Box::new(|informers: &Informers, scope: Option<&Scope>| {
                let informer =
                    informers.get_in::<Child>(scope.and_then(Scope::namespace_only).as_ref());
                let ready = informer.ready();
                let source: SourceFn<K> = Box::new(move |_shared: &Arc<Shared<K>>| {
                    let (rx, _) = informer.subscribe();
                    rx.flat_map(|change| {
                        let mut refs: Vec<ObjectRef<K>> = Vec::new();
                        match &change {
                            Change::Applied { old, new } => {
                                refs.extend(controller_owner::<K, Child>(new));
                                if let Some(old) = old {
                                    refs.extend(controller_owner::<K, Child>(old));
                                }
                            }
                            Change::Deleted(o) => refs.extend(controller_owner::<K, Child>(o)),
                        }
                        refs.dedup();
                        stream::iter(refs)
                    })
                    .boxed()
                });
                (ready, source)
            }));
        self
    }

    /// [`owns`](Self::owns) with a metadata-only cache of the children
    /// (`PartialObjectMeta<Child>`, controller-runtime's `OnlyMetadata`):
    /// about a tenth of the memory for kinds whose spec and status the
    /// controller does not read. Read them with
    /// [`Manager::metadata_store`].
    pub fn owns_metadata<Child: Cacheable>(self) -> Self {
        self.owns::<PartialObjectMeta<Child>>()
    }

    /// Also reconcile the objects `mapper` names when an `Other` changes or
    /// is deleted (controller-runtime's `Watches` with
    /// `EnqueueRequestsFromMapFunc`); on an update both the old and the new
    /// object are mapped. Records that the controller reads `Other`s.
    pub fn watches<Other, I>(mut self, mapper: impl Fn(&Other) -> I + Send + Sync + 'static) -> Self
    where
        Other: Cacheable,
        I: IntoIterator<Item = ObjectRef<K>>,
    {
        self.permissions
            .allow_kind::<Other>(None, permissions::READ);
        let mapper = Arc::new(mapper);
        self.sources.push(Box::new(
            move |informers: &Informers, scope: Option<&Scope>| {
                let informer =
                    informers.get_in::<Other>(scope.and_then(Scope::namespace_only).as_ref());
                let ready = informer.ready();
                let source: SourceFn<K> = Box::new(move |_shared: &Arc<Shared<K>>| {
                    let (rx, _) = informer.subscribe();
                    rx.flat_map(move |change| {
                        let mut refs: Vec<ObjectRef<K>> = Vec::new();
                        match &change {
                            Change::Applied { old, new } => {
                                refs.extend(mapper(new));
                                if let Some(old) = old {
                                    refs.extend(mapper(old));
                                }
                            }
                            Change::Deleted(o) => refs.extend(mapper(o)),
                        }
                        // One key per object: a namespace on a cluster-scoped
                        // kind's ref would make a second key, reconciled apart.
                        for r in &mut refs {
                            normalize(r);
                        }
                        stream::iter(refs)
                    })
                    .boxed()
                });
                (ready, source)
            },
        ));
        self
    }

    /// Cache and reconcile only the `K`s in `scope` — a namespace, label
    /// and field selectors — instead of the kind's default cache.
    /// Controllers with equal scopes share one cache; read it with
    /// [`Manager::store_in`]. The owned and watched kinds are cached in
    /// the scope's namespace (without its selectors: children need not
    /// carry the owner's labels). The manager-wide
    /// [`namespace`](crate::ManagerBuilder::namespace) applies when the
    /// scope names none.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = Some(scope);
        self
    }

    /// Filter updates of the primary kind `K` (creations always pass). Owned
    /// and watched kinds are not filtered, so a child's status change still
    /// reaches its owner. Compose several with [`Predicate::and`] /
    /// [`Predicate::or`]; calling this again combines with `and`.
    pub fn with_predicate(mut self, predicate: Predicate) -> Self {
        self.predicate = Some(match self.predicate.take() {
            Some(p) => p.and(predicate),
            None => predicate,
        });
        self
    }

    /// How many objects are reconciled at once (default 1, as
    /// controller-runtime). One object is never reconciled twice at once.
    /// 0 means 1.
    pub fn max_concurrent_reconciles(mut self, n: u16) -> Self {
        self.max_concurrent = n.max(1);
        self
    }

    /// Reconcile every cached object of kind `K` every `every` (periodic
    /// resync; off by default).
    pub fn resync(mut self, every: Duration) -> Self {
        self.resync = (!every.is_zero()).then_some(every);
        self
    }

    /// The per-object backoff after errors (default 5 ms → 1000 s).
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.backoff = backoff;
        self
    }

    /// Declare that the reconciler writes `K`'s status subresource
    /// (`get`, `update`, `patch` on `<plural>/status`).
    pub fn writes_status(mut self) -> Self {
        self.permissions
            .allow_kind::<K>(Some("status"), permissions::STATUS);
        self
    }

    /// Declare that the reconciler adds and removes a finalizer on `K`s
    /// (`update` and `patch` on them, as [`crate::finalizer`] does).
    pub fn uses_finalizer(mut self) -> Self {
        self.permissions.allow_kind::<K>(None, &["update", "patch"]);
        self
    }

    /// Declare that the reconciler records Events
    /// ([`EventRecorder`](crate::events::EventRecorder)).
    pub fn records_events(mut self) -> Self {
        self.permissions.merge(&permissions::events());
        self
    }

    /// Declare that the reconciler calls `verbs` on kind `T`, which it
    /// neither owns nor watches (e.g. reads Secrets live).
    pub fn writes<T: kube::Resource<DynamicType = ()>>(mut self, verbs: &[&str]) -> Self {
        self.permissions.allow_kind::<T>(None, verbs);
        self
    }

    /// Declare any other rule the reconciler needs: `verbs` on `resource`
    /// (plural, or `plural/subresource`) of API group `group`.
    pub fn permits(mut self, group: &str, resource: &str, verbs: &[&str]) -> Self {
        self.permissions.allow(group, resource, verbs);
        self
    }

    /// Add the controller to the manager with its reconcile function. It
    /// starts with [`Manager::run`] (once leading, with leader election).
    pub fn register<F, Fut>(self, reconcile: F)
    where
        F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
    {
        self.mgr.permits_all(&self.permissions);
        let informers = self.mgr.informers();
        let informer = informers.get_in::<K>(self.scope.as_ref());
        let metrics = self.mgr.metrics();
        let handles = informer.handles();
        let shared = Arc::new(Shared {
            name: self.name.clone(),
            cache: informer.cache(),
            pending: Mutex::new(HashMap::new()),
            backoff: ItemBackoff::new(self.backoff),
            labels: ControllerLabels {
                controller: self.name.clone(),
            },
            queue_labels: QueueLabels::of(&self.name),
            metrics: metrics.clone(),
            tracker: self.mgr.reconciles(),
        });
        metrics.init_controller(&self.name, self.max_concurrent, shared.clone());
        let (mut synced, mut sources): (Vec<_>, Vec<_>) = self
            .sources
            .into_iter()
            .map(|pending| pending(informers, self.scope.as_ref()))
            .unzip();
        synced.push(informer.ready());
        sources.insert(0, primary_source(informer, self.predicate));
        let run = Running {
            synced,
            shared,
            handles,
            sources,
            reconcile: Arc::new(reconcile),
            ctx: self.ctx,
            resync: self.resync,
            concurrency: self.max_concurrent,
        };
        self.mgr.add_controller(
            self.name,
            Box::new(move |stop: CancellationToken| run.run(stop).boxed()),
        );
    }
}

/// The refs of `obj`'s controlling owner when it is a `K`.
fn controller_owner<K: Cacheable, O: Resource>(obj: &O) -> Option<ObjectRef<K>> {
    let kind = K::kind(&());
    let group = K::group(&());
    let owner = obj
        .meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))?;
    let owner_group = owner.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if owner.kind != kind || owner_group != group {
        return None;
    }
    let r = ObjectRef::<K>::new(&owner.name);
    // A namespaced owner lives in its child's namespace; a cluster-scoped
    // owner has none (looking it up with one would miss it).
    Some(match obj.meta().namespace.as_deref() {
        Some(ns) if is_namespaced::<K>() => r.within(ns),
        _ => r,
    })
}

/// Drop the namespace of a ref to a cluster-scoped kind.
fn normalize<K: Cacheable>(r: &mut ObjectRef<K>) {
    if !is_namespaced::<K>() {
        r.namespace = None;
    }
}

/// Whether `K` is namespaced.
fn is_namespaced<K: Cacheable>() -> bool {
    <K::Scope as crate::informer::CacheScope>::NAMESPACED
}

/// Trigger source of the primary kind: every creation, updates that pass
/// the predicate, and (once) the whole cache if it was synced already.
fn primary_source<K: Cacheable>(
    informer: Arc<Informer<K>>,
    predicate: Option<Predicate>,
) -> SourceFn<K> {
    Box::new(move |shared: &Arc<Shared<K>>| {
        let (rx, synced) = informer.subscribe();
        let initial: Vec<ObjectRef<K>> = if synced {
            informer.cache().keys()
        } else {
            Vec::new()
        };
        let shared = shared.clone();
        let changes = rx.filter_map(move |change| {
            let out = match change {
                Change::Applied { old: None, new } => Some(ObjectRef::from_obj(&*new)),
                Change::Applied {
                    old: Some(old),
                    new,
                } => match &predicate {
                    Some(p) if !p.update(old.meta(), new.meta()) => None,
                    _ => Some(ObjectRef::from_obj(&*new)),
                },
                Change::Deleted(gone) => {
                    let r = ObjectRef::from_obj(&*gone);
                    shared.backoff.forget(&r);
                    lock(&shared.pending).remove(&r);
                    None
                }
            };
            std::future::ready(out)
        });
        stream::iter(initial).chain(changes).boxed()
    })
}

/// What a controller shares between its triggers, its reconciles and the
/// metrics.
pub(crate) struct Shared<K: Cacheable> {
    name: String,
    cache: Cache<K>,
    /// Objects waiting in the queue, with when they became (or become)
    /// ready: gives `workqueue_depth` and `workqueue_queue_duration_seconds`.
    /// The flag tells whether the entry's add was counted yet.
    pending: Mutex<HashMap<ObjectRef<K>, (Instant, bool)>>,
    backoff: ItemBackoff<ObjectRef<K>>,
    labels: ControllerLabels,
    queue_labels: QueueLabels,
    metrics: Arc<Metrics>,
    /// The manager's tracker of reconcile tasks.
    tracker: tokio_util::task::TaskTracker,
}

impl<K: Cacheable> Shared<K> {
    /// `key` enters the queue, ready at `at` (now, or later for a requeue).
    ///
    /// `workqueue_adds_total` counts as client-go's queue does: an add of
    /// an object already waiting (and ready) is deduplicated, and a delayed
    /// add counts when its delay is over, not when it is scheduled.
    fn add(&self, key: ObjectRef<K>, at: Instant) {
        let now = Instant::now();
        let mut pending = lock(&self.pending);
        let entry = pending.entry(key).or_insert((at, false));
        if at <= now && !(entry.1 && entry.0 <= now) {
            // Ready now, and not already waiting ready in the queue.
            *entry = (at, true);
            self.inc_adds();
        } else {
            entry.0 = entry.0.min(at);
        }
    }

    fn inc_adds(&self) {
        self.metrics
            .workqueue_adds
            .get_or_create(&self.queue_labels)
            .inc();
    }

    /// `key` leaves the queue for a worker.
    fn take(&self, key: &ObjectRef<K>) {
        let entry = lock(&self.pending).remove(key);
        if let Some((_, false)) = entry {
            // A delayed add whose time came.
            self.inc_adds();
        }
        let waited = entry.map_or(Duration::ZERO, |(t, _)| {
            Instant::now().saturating_duration_since(t)
        });
        self.metrics
            .workqueue_queue_duration
            .get_or_create(&self.queue_labels)
            .observe(waited.as_secs_f64());
    }

    /// A rate-limited requeue: the next backoff step.
    fn requeue_rate_limited(&self, key: ObjectRef<K>) -> Duration {
        let delay = self.backoff.when(key.clone());
        self.metrics
            .workqueue_retries
            .get_or_create(&self.queue_labels)
            .inc();
        self.add(key, Instant::now() + delay);
        delay
    }
}

impl<K: Cacheable> DepthSource for Shared<K> {
    fn depth(&self) -> i64 {
        let now = Instant::now();
        let mut pending = lock(&self.pending);
        // Requests for objects no longer cached are dropped by the applier.
        pending.retain(|k, _| self.cache.contains(k));
        let ready = pending.values().filter(|(t, _)| *t <= now).count();
        i64::try_from(ready).unwrap_or(i64::MAX)
    }
}

/// Why a reconcile failed, as the applier sees it.
#[derive(Debug)]
pub(crate) struct Failed {
    message: String,
    pub(crate) terminal: bool,
}

impl From<ReconcileError> for Failed {
    fn from(e: ReconcileError) -> Failed {
        Failed {
            message: e.to_string(),
            terminal: e.is_terminal(),
        }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failed {}

/// A spawned reconcile, aborted if the controller is dropped (a shutdown
/// past its grace period).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

/// The text of a panic payload, when it is a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
}

type ReconcileFn<K, C, Fut> = dyn Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync;

/// A registered controller, ready to run.
struct Running<K: Cacheable, C, Fut> {
    shared: Arc<Shared<K>>,
    /// What the applier looks queued objects up in.
    handles: kube::runtime::reflector::Store<Handle<K>>,
    sources: Vec<SourceFn<K>>,
    reconcile: Arc<ReconcileFn<K, C, Fut>>,
    ctx: Arc<C>,
    resync: Option<Duration>,
    concurrency: u16,
    synced: Vec<tokio::sync::watch::Receiver<bool>>,
}

impl<K, C, Fut> Running<K, C, Fut>
where
    K: Cacheable,
    C: Send + Sync + 'static,
    Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
{
    /// Run until `stop`: stop taking new work, finish what is in flight.
    async fn run(self, stop: CancellationToken) {
        let shared = self.shared;
        let mut triggers: Vec<BoxStream<'static, ObjectRef<K>>> =
            self.sources.into_iter().map(|s| s(&shared)).collect();
        if let Some(every) = self.resync {
            let cache = shared.cache.clone();
            triggers.push(
                stream::unfold(cache, move |cache| async move {
                    tokio::time::sleep(every).await;
                    let refs: Vec<ObjectRef<K>> = cache.keys();
                    Some((stream::iter(refs), cache))
                })
                .flatten()
                .boxed(),
            );
        }
        // Subscribed above; now every cache the reconciles read must have
        // listed (controller-runtime's WaitForCacheSync over all sources),
        // or a reconcile could miss an owned object and make it again.
        for mut ready in self.synced {
            tokio::select! {
                r = ready.wait_for(|listed| *listed) => {
                    if r.is_err() {
                        return;
                    }
                }
                () = stop.cancelled() => return,
            }
        }
        let queue_shared = shared.clone();
        let stop_queue = stop.clone();
        let queue = stream::select_all(triggers)
            .map(move |r| {
                queue_shared.add(r.clone(), Instant::now());
                Ok::<_, Infallible>(r.into_kind_unchecked::<Handle<K>>(()))
            })
            .take_until(async move { stop_queue.cancelled().await });

        let reconcile = self.reconcile;
        let worker_shared = shared.clone();
        let policy_shared = shared.clone();
        let results = kube::runtime::applier(
            move |handle: Arc<Handle<K>>, ctx: Arc<C>| {
                reconcile_one(worker_shared.clone(), reconcile.clone(), handle.key(), ctx)
            },
            move |handle: Arc<Handle<K>>, err: &Failed, _ctx: Arc<C>| {
                if err.terminal {
                    return kube::runtime::controller::Action::await_change();
                }
                let delay = policy_shared.requeue_rate_limited(handle.key());
                kube::runtime::controller::Action::requeue(delay)
            },
            self.ctx,
            self.handles,
            queue,
            kube::runtime::Config::default().concurrency(self.concurrency),
        );
        tracing::info!(controller = %shared.name, workers = self.concurrency, "starting controller");
        results
            .for_each(|r| {
                if let Err(kube::runtime::controller::Error::RunnerError(e)) = r {
                    tracing::warn!(controller = %shared.name, error = %e, "controller runner failed");
                }
                std::future::ready(())
            })
            .await;
        tracing::info!(controller = %shared.name, "controller stopped");
    }
}

type ReconcileOutcome =
    Pin<Box<dyn Future<Output = Result<kube::runtime::controller::Action, Failed>> + Send>>;

/// One reconcile: spawned (so reconciles run in parallel on the runtime's
/// threads), panics caught, metrics kept, the result classified.
fn reconcile_one<K, C, Fut>(
    shared: Arc<Shared<K>>,
    reconcile: Arc<ReconcileFn<K, C, Fut>>,
    key: ObjectRef<K>,
    ctx: Arc<C>,
) -> ReconcileOutcome
where
    K: Cacheable,
    C: Send + Sync + 'static,
    Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
{
    shared.take(&key);
    // The applier found the key queued; the object comes from the cache
    // (it can be gone only if deleted since: nothing to do then).
    let Some(obj) = shared.cache.get(&key) else {
        return Box::pin(std::future::ready(Ok(
            kube::runtime::controller::Action::await_change(),
        )));
    };
    let workers = shared
        .metrics
        .active_workers
        .get_or_create_owned(&shared.labels);
    workers.inc();
    let span = tracing::info_span!(
        "reconcile",
        controller = %shared.name,
        namespace = key.namespace.as_deref().unwrap_or(""),
        name = %key.name,
    );
    let started = Instant::now();
    let task = AbortOnDrop(
        shared.tracker.spawn(
            AssertUnwindSafe(async move { reconcile(obj, ctx).await })
                .catch_unwind()
                .instrument(span.clone()),
        ),
    );
    Box::pin(
        async move {
            let outcome = task.await;
            workers.dec();
            let secs = started.elapsed().as_secs_f64();
            let m = &shared.metrics;
            m.reconcile_time.get_or_create(&shared.labels).observe(secs);
            m.workqueue_work_duration
                .get_or_create(&shared.queue_labels)
                .observe(secs);
            let result = match outcome {
                Ok(Ok(r)) => r,
                Ok(Err(panic)) => {
                    let msg = panic_message(&*panic).unwrap_or_else(|| "reconcile panicked".into());
                    m.reconcile_panics.get_or_create(&shared.labels).inc();
                    Err(ReconcileError::new(format!("reconcile panicked: {msg}")))
                }
                Err(e) => Err(ReconcileError::new(format!("reconcile task ended: {e}"))),
            };
            m.count_outcome(&shared.labels, &result);
            match result {
                Ok(action) => match action.requeue_after() {
                    None => {
                        shared.backoff.forget(&key);
                        Ok(kube::runtime::controller::Action::await_change())
                    }
                    Some(d) if d.is_zero() => {
                        let delay = shared.requeue_rate_limited(key);
                        Ok(kube::runtime::controller::Action::requeue(delay))
                    }
                    Some(d) => {
                        shared.backoff.forget(&key);
                        shared.add(key, Instant::now() + d);
                        Ok(action.into())
                    }
                },
                Err(e) => {
                    if e.is_terminal() {
                        shared.backoff.forget(&key);
                        tracing::error!(error = %e, "reconcile failed with a terminal error; not retried");
                    } else {
                        tracing::error!(error = %e, "reconcile failed; retrying with backoff");
                    }
                    Err(Failed::from(e))
                }
            }
        }
        .instrument(span),
    )
}

/// A controller, kind erased, as the manager holds it.
pub(crate) type StartFn = Box<dyn FnOnce(CancellationToken) -> BoxFuture<'static, ()> + Send>;
