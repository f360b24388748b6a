//! The garbage collector, after kube-controller-manager's.
//!
//! **Graph.** Every resource that discovery lists as listable, watchable and
//! deletable (custom resources included; discovery runs again whenever a
//! CustomResourceDefinition changes, and every 30 s) is watched with a
//! metadata-only watch. One task folds the events into a graph
//! (`gc_graph.rs`): uid → node (identity, ownerReferences,
//! dependents, deletion state). An owner that is referenced but not seen is
//! a *virtual* node until a watch shows it or a GET proves it absent. A
//! group whose discovery fails keeps its monitors; a resource discovery no
//! longer lists stops being watched, and nothing is inferred from that.
//!
//! **Decisions** (kube's `attemptToDeleteItem`), made by a pool of workers
//! from a deduplicating queue with per-item backoff:
//! - a dependent whose owners are all gone is deleted (Background, or the
//!   policy its own `orphan`/`foregroundDeletion` finalizer asks for); an
//!   owner counts as gone only when its deletion was observed on a watch or
//!   a GET by name found nothing (or another uid) — never because the cache
//!   lacks it. As kube's `isDangling`: the GET goes to the resource the
//!   reference's apiVersion and kind map to (an unserved apiVersion is
//!   retried, never mapped to another version), in the dependent's
//!   namespace when namespaced; a cluster-scoped dependent naming a
//!   namespaced owner is left alone;
//! - a dependent with another live owner stays, and the references to the
//!   dead owners are removed from it (as kube does);
//! - an owner with the `foregroundDeletion` finalizer has its dependents
//!   deleted (those with dependents of their own in the foreground), and
//!   loses the finalizer once no dependent with `blockOwnerDeletion: true`
//!   is left; cycles are broken by un-blocking references, like kube;
//! - an owner with the `orphan` finalizer has its reference removed from
//!   every dependent, then loses the finalizer.
//!
//! Writes are guarded: deletes carry uid and resourceVersion preconditions,
//! finalizer and ownerReference patches carry the resourceVersion they were
//! computed from, and a conflict means "look again", so another
//! controller's finalizer or reference is never lost. Failures come back
//! after an exponential backoff (5 ms doubling to 60 s), so nothing loops
//! hot, cyclic references included.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event, watcher};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::task::{JoinHandle, JoinSet};

use crate::catalog::{Catalog, Resource};
use crate::gc_graph::{Coordinates, Graph, GraphEvent, InvalidOwnerRef, Node, Queues, Uid};
use crate::gc_object::GcObject;
use crate::{Error, is_conflict, is_not_found, send_discard};
use kubeforge_runtime::{BackoffConfig, Manager, WorkQueue};

/// The finalizer asking the garbage collector to orphan the dependents.
pub const FINALIZER_ORPHAN: &str = "orphan";
/// The finalizer asking the garbage collector to delete the dependents first.
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// Options of the garbage collector.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// Workers deleting dependents concurrently (kube-controller-manager's
    /// `--concurrent-gc-syncs`, 20 there).
    pub workers: usize,
    /// Workers orphaning dependents.
    pub orphan_workers: usize,
    /// Discovery runs again this often even without CRD changes.
    pub resync: Duration,
    /// How long to wait for the first list of every resource before acting
    /// anyway.
    pub sync_timeout: Duration,
    /// First retry delay of a failed item (doubling per failure).
    pub min_backoff: Duration,
    /// Largest retry delay of a failed item.
    pub max_backoff: Duration,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            workers: 64,
            orphan_workers: 4,
            resync: Duration::from_secs(30),
            sync_timeout: Duration::from_secs(30),
            min_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_secs(60),
        }
    }
}

impl GcOptions {
    fn backoff(&self) -> BackoffConfig {
        BackoffConfig {
            base: self.min_backoff,
            max: self.max_backoff,
        }
    }
}

/// The name the collector runs under on a [`Manager`].
pub const NAME: &str = "garbage-collector";
/// kube's name of the queue of objects to judge (its `workqueue_*` metrics'
/// `name`).
pub const DELETE_QUEUE: &str = "garbage_collector_attempt_to_delete";
/// kube's name of the queue of owners whose dependents are orphaned.
pub const ORPHAN_QUEUE: &str = "garbage_collector_attempt_to_orphan";

/// Run a garbage collector on `mgr` (started with its controllers, stopped
/// with them), writing through `client`, its queues' metrics served under
/// kube's queue names [`DELETE_QUEUE`] and [`ORPHAN_QUEUE`]. It declares
/// kube's `system:controller:generic-garbage-collector` rules on the
/// manager (see [`Manager::permissions`]). The handle reads its state.
pub fn register(mgr: &Manager, client: Client, opts: GcOptions) -> GarbageCollector {
    let backoff = opts.backoff();
    let gc = GarbageCollector::with_queues(
        client,
        opts,
        mgr.work_queue(DELETE_QUEUE, backoff),
        mgr.work_queue(ORPHAN_QUEUE, backoff),
    );
    mgr.permits(
        "*",
        "*",
        &["get", "list", "watch", "patch", "update", "delete"],
    );
    // Events about invalid owner references.
    mgr.permits("", "events", &["create", "patch", "update"]);
    mgr.permits("events.k8s.io", "events", &["create", "patch", "update"]);
    let runner = gc.clone();
    mgr.add_runnable(NAME, move |stop| runner.run_until(stop));
    gc
}

/// Counters for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Nodes in the graph (objects seen, and owners referenced but not seen).
    pub nodes: usize,
    /// Nodes for owners referenced but not (yet) seen.
    pub virtual_nodes: usize,
    /// Resources watched.
    pub monitors: usize,
    /// Items waiting in the delete queue.
    pub queued: usize,
    /// Objects deleted by the collector.
    pub deleted: u64,
    /// ownerReference / finalizer patches sent.
    pub patched: u64,
    /// Judgements put off (retried later) or given up because an owner
    /// reference cannot be resolved: its apiVersion is not served, or a
    /// cluster-scoped object names a namespaced owner.
    pub unresolved: u64,
}

/// The garbage collector; cheap to clone. Start it with
/// [`GarbageCollector::run`] (or [`crate::start_builtin`]).
#[derive(Clone)]
pub struct GarbageCollector {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    opts: GcOptions,
    graph: Mutex<Graph>,
    catalog: RwLock<Arc<Catalog>>,
    delete_q: WorkQueue<Uid>,
    orphan_q: WorkQueue<Uid>,
    events: mpsc::UnboundedSender<GraphEvent>,
    events_rx: Mutex<Option<mpsc::UnboundedReceiver<GraphEvent>>>,
    invalid: mpsc::UnboundedSender<InvalidOwnerRef>,
    invalid_rx: Mutex<Option<mpsc::UnboundedReceiver<InvalidOwnerRef>>>,
    synced: tokio::sync::watch::Sender<bool>,
    listed: Mutex<HashSet<String>>,
    listed_changed: Notify,
    counters: Mutex<(u64, u64, u64)>,
}

impl GarbageCollector {
    /// A garbage collector using `client`, with unmetered queues; nothing
    /// runs until [`GarbageCollector::run`]. On a [`Manager`], use
    /// [`register`] instead.
    pub fn new(client: Client, opts: GcOptions) -> GarbageCollector {
        let backoff = opts.backoff();
        Self::with_queues(
            client,
            opts,
            WorkQueue::new(backoff),
            WorkQueue::new(backoff),
        )
    }

    fn with_queues(
        client: Client,
        opts: GcOptions,
        delete_q: WorkQueue<Uid>,
        orphan_q: WorkQueue<Uid>,
    ) -> GarbageCollector {
        let (tx, rx) = mpsc::unbounded_channel();
        let (invalid, invalid_rx) = mpsc::unbounded_channel();
        let (synced, _) = tokio::sync::watch::channel(false);
        GarbageCollector {
            shared: Arc::new(Shared {
                client,
                graph: Mutex::new(Graph::default()),
                catalog: RwLock::new(Arc::new(Catalog::default())),
                delete_q,
                orphan_q,
                events: tx,
                events_rx: Mutex::new(Some(rx)),
                invalid,
                invalid_rx: Mutex::new(Some(invalid_rx)),
                synced,
                listed: Mutex::new(HashSet::new()),
                listed_changed: Notify::new(),
                counters: Mutex::new((0, 0, 0)),
                opts,
            }),
        }
    }

    /// Run until `shutdown` resolves.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        crate::run_until_shutdown(|stop| self.run_until(stop), shutdown).await;
    }

    /// Resolves once every resource watched at start has been listed into
    /// the graph (or the sync timeout passed).
    pub async fn wait_synced(&self) {
        let mut rx = self.shared.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Whether the graph holds an object with this uid that its watches
    /// have observed (kube's `GraphHasUID`): a caller that deletes an owner
    /// with the `orphan` policy right after creating dependents waits for
    /// this, because a dependent the collector never saw cannot be orphaned
    /// and is later collected for its missing owner, as in kube.
    pub fn graph_has_uid(&self, uid: &str) -> bool {
        self.shared
            .graph()
            .nodes
            .get(uid)
            .is_some_and(|n| n.observed)
    }

    /// Current counters.
    pub fn stats(&self) -> GcStats {
        let s = &self.shared;
        let (deleted, patched, unresolved) = *lock(&s.counters);
        let g = s.graph();
        GcStats {
            nodes: g.nodes.len(),
            virtual_nodes: g.nodes.values().filter(|n| !n.observed).count(),
            monitors: g
                .by_res
                .keys()
                .filter(|k| !g.unwatched.contains(*k))
                .count(),
            queued: s.delete_q.len(),
            deleted,
            patched,
            unresolved,
        }
    }

    pub(crate) async fn run_until(self, stop: CancellationToken) {
        let s = self.shared.clone();
        let Some(rx) = lock(&s.events_rx).take() else {
            tracing::warn!("garbage collector already running");
            return;
        };
        // Owned here: dropped (a lost lease aborts this future), they
        // are aborted with it.
        let mut tasks = JoinSet::new();
        tasks.spawn(build_graph(s.clone(), rx));
        if let Some(invalid) = lock(&s.invalid_rx).take() {
            tasks.spawn(report_invalid_owner_refs(s.client.clone(), invalid));
        }
        for _ in 0..s.opts.workers.max(1) {
            tasks.spawn(delete_worker(s.clone()));
        }
        for _ in 0..s.opts.orphan_workers.max(1) {
            tasks.spawn(orphan_worker(s.clone()));
        }
        let mut monitors: HashMap<String, Monitor> = HashMap::new();

        // First discovery: retried until it works.
        let mut delay = Duration::from_millis(50);
        loop {
            match Catalog::discover(&s.client).await {
                Ok(cat) => {
                    s.sync_monitors(cat, &mut monitors);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "garbage collector: discovery failed");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = stop.cancelled() => {
                            s.shutdown(tasks, monitors).await;
                            return;
                        }
                    }
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        // Wait for the first lists (kube waits for its informers' sync).
        let initial: HashSet<String> = monitors.keys().cloned().collect();
        let wait_lists = async {
            loop {
                let changed = s.listed_changed.notified();
                if initial.iter().all(|k| lock(&s.listed).contains(k)) {
                    return;
                }
                changed.await;
            }
        };
        tokio::select! {
            () = wait_lists => {}
            () = tokio::time::sleep(s.opts.sync_timeout) => {
                tracing::warn!("garbage collector: not every resource listed in time; starting anyway");
            }
            () = stop.cancelled() => {
                s.shutdown(tasks, monitors).await;
                return;
            }
        }
        let _ = s.synced.send_replace(true);
        tracing::debug!(monitors = monitors.len(), "garbage collector synced");

        // Re-discover when CRDs change, and periodically.
        let crds: Api<CustomResourceDefinition> = Api::all(s.client.clone());
        let mut crd_events = watcher(crds, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut tick = tokio::time::interval(s.opts.resync);
        tick.tick().await;
        loop {
            tokio::select! {
                ev = crd_events.next() => {
                    if ev.is_none() {
                        crd_events = futures::stream::pending().boxed();
                        continue;
                    }
                    // Let a burst of CRD events settle, then look again.
                    let settle = tokio::time::sleep(Duration::from_millis(20));
                    tokio::pin!(settle);
                    loop {
                        tokio::select! {
                            () = &mut settle => break,
                            more = crd_events.next() => if more.is_none() { break },
                        }
                    }
                    s.rediscover(&mut monitors).await;
                }
                _ = tick.tick() => s.rediscover(&mut monitors).await,
                () = stop.cancelled() => break,
            }
        }
        s.shutdown(tasks, monitors).await;
    }
}

use kubeforge_runtime::sync::lock;

/// One watched resource; its watch stops when it is dropped.
struct Monitor {
    res: Arc<Resource>,
    task: JoinHandle<()>,
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Shared {
    fn graph(&self) -> MutexGuard<'_, Graph> {
        lock(&self.graph)
    }

    fn catalog(&self) -> Arc<Catalog> {
        match self.catalog.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn count_unresolved(&self) {
        lock(&self.counters).2 += 1;
    }

    fn count(&self, deleted: u64, patched: u64) {
        let mut c = lock(&self.counters);
        c.0 += deleted;
        c.1 += patched;
    }

    async fn shutdown(&self, mut tasks: JoinSet<()>, monitors: HashMap<String, Monitor>) {
        drop(monitors);
        self.delete_q.shutdown();
        self.orphan_q.shutdown();
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }

    async fn rediscover(self: &Arc<Self>, monitors: &mut HashMap<String, Monitor>) {
        match Catalog::discover(&self.client).await {
            Ok(cat) => self.sync_monitors(cat, monitors),
            Err(e) => tracing::debug!(error = %e, "garbage collector: discovery failed"),
        }
    }

    /// Start monitors for new resources, stop those for resources gone.
    /// A monitor of a group-version whose discovery failed this time keeps
    /// running (kube's collector keeps those informers on partial
    /// discovery): a failing group is not a group gone.
    fn sync_monitors(self: &Arc<Self>, cat: Catalog, monitors: &mut HashMap<String, Monitor>) {
        let mut wanted: HashMap<String, Arc<Resource>> = cat
            .gc_resources()
            .into_iter()
            .map(|r| (r.key(), r))
            .collect();
        if let Some(why) = cat.failure_message() {
            tracing::info!(groups = %why, "garbage collector: failed to discover some groups");
            for (key, m) in monitors.iter() {
                if cat.failed().contains_key(m.res.group_version()) {
                    wanted.insert(key.clone(), m.res.clone());
                }
            }
        }
        if let Ok(mut c) = self.catalog.write() {
            *c = Arc::new(cat);
        }
        monitors.retain(|key, m| {
            let keep = wanted
                .get(key)
                .is_some_and(|r| r.ar.version == m.res.ar.version);
            if !keep && !wanted.contains_key(key) {
                tracing::debug!(resource = %key, "garbage collector: resource gone");
                let _ = self
                    .events
                    .send(GraphEvent::ResourceGone(key.as_str().into()));
            }
            keep
        });
        for (key, res) in wanted {
            if monitors.contains_key(&key) {
                continue;
            }
            let task = tokio::spawn(monitor(self.clone(), res.clone()));
            monitors.insert(key, Monitor { res, task });
        }
    }
}

/// Watch one resource's metadata into the graph.
async fn monitor(s: Arc<Shared>, res: Arc<Resource>) {
    let key: Arc<str> = res.key().into();
    let api: Api<GcObject> = Api::all_with(s.client.clone(), &res.ar);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(ev) = stream.next().await {
        let ge = match ev {
            Ok(Event::Init) => GraphEvent::InitStart(key.clone()),
            Ok(Event::InitApply(m)) => GraphEvent::Apply {
                res: res.clone(),
                meta: Box::new(m.metadata),
                init: true,
            },
            Ok(Event::InitDone) => GraphEvent::InitDone(key.clone()),
            Ok(Event::Apply(m)) => GraphEvent::Apply {
                res: res.clone(),
                meta: Box::new(m.metadata),
                init: false,
            },
            Ok(Event::Delete(m)) => GraphEvent::Delete {
                uid: m.metadata.uid.map(Uid::from),
            },
            Err(e) => {
                tracing::debug!(resource = %key, error = %e, "garbage collector: watch failed");
                continue;
            }
        };
        if s.events.send(ge).is_err() {
            return;
        }
    }
}

async fn build_graph(s: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<GraphEvent>) {
    let q = Queues {
        delete: &s.delete_q,
        orphan: &s.orphan_q,
        invalid: &s.invalid,
    };
    let mut batch = Vec::with_capacity(256);
    while rx.recv_many(&mut batch, 256).await > 0 {
        let mut listed = Vec::new();
        {
            let mut g = s.graph();
            for ev in batch.drain(..) {
                if let Some(k) = g.handle(ev, &q) {
                    listed.push(k);
                }
            }
        }
        if !listed.is_empty() {
            let mut l = lock(&s.listed);
            for k in listed {
                l.insert(k.to_string());
            }
            drop(l);
            s.listed_changed.notify_waiters();
        }
    }
}

/// Publish kube's `OwnerRefInvalidNamespace` warning event on each
/// dependent the graph reports, as kube-controller-manager's
/// `garbage-collector-controller`.
async fn report_invalid_owner_refs(
    client: Client,
    mut rx: mpsc::UnboundedReceiver<InvalidOwnerRef>,
) {
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "garbage-collector-controller".into(),
            instance: None,
        },
    );
    while let Some(bad) = rx.recv().await {
        let d = &bad.dependent;
        let reference = ObjectReference {
            api_version: Some(d.api_version.clone()),
            kind: Some(d.kind.clone()),
            name: Some(d.name.clone()),
            namespace: Some(d.namespace.clone()).filter(|n| !n.is_empty()),
            uid: Some(d.uid.to_string()),
            ..ObjectReference::default()
        };
        let note = format!(
            "ownerRef {} does not exist in namespace {:?}",
            bad.owner, d.namespace
        );
        tracing::info!(kind = %d.kind, namespace = %d.namespace, name = %d.name, owner = %bad.owner, "garbage collector: owner reference names another namespace");
        let ev = KubeEvent {
            type_: EventType::Warning,
            reason: "OwnerRefInvalidNamespace".into(),
            note: Some(note),
            action: "GarbageCollect".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&ev, &reference).await {
            tracing::debug!(error = %e, "garbage collector: event not recorded");
        }
    }
}

/// What a worker knows about an object, copied out of the graph.
#[derive(Clone, Debug)]
struct Item {
    uid: Uid,
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
    res: Option<Arc<Resource>>,
    owners: Vec<OwnerReference>,
    observed: bool,
    deleting: bool,
    deleting_dependents: bool,
    finalizers: Vec<String>,
    resource_version: Option<String>,
    has_dependents: bool,
}

/// How one ownerReference of a dependent stands.
enum OwnerState {
    Solid,
    Dangling,
    Waiting,
}

enum Outcome {
    Done,
    Retry,
}

async fn delete_worker(s: Arc<Shared>) {
    let _ = s.synced.subscribe().wait_for(|v| *v).await;
    while let Some(uid) = s.delete_q.get().await {
        match s.attempt_to_delete(&uid).await {
            Ok(Outcome::Done) => s.delete_q.forget(&uid),
            Ok(Outcome::Retry) => s.delete_q.add_rate_limited(uid.clone()),
            Err(e @ Error::Unmapped { .. }) => {
                // kube: the type may not be discovered yet; log and retry.
                tracing::info!(%uid, error = %e, "garbage collector: owner reference not resolvable; will retry");
                s.count_unresolved();
                s.delete_q.add_rate_limited(uid.clone());
            }
            Err(e) => {
                tracing::debug!(%uid, error = %e, "garbage collector: will retry");
                s.delete_q.add_rate_limited(uid.clone());
            }
        }
        s.delete_q.done(&uid);
    }
}

async fn orphan_worker(s: Arc<Shared>) {
    let _ = s.synced.subscribe().wait_for(|v| *v).await;
    while let Some(uid) = s.orphan_q.get().await {
        match s.attempt_to_orphan(&uid).await {
            Ok(()) => s.orphan_q.forget(&uid),
            Err(e) => {
                tracing::debug!(%uid, error = %e, "garbage collector: orphaning will retry");
                s.orphan_q.add_rate_limited(uid.clone());
            }
        }
        s.orphan_q.done(&uid);
    }
}

/// The fields of a metadata merge patch guarded by a resourceVersion.
fn guarded_patch(rv: &str, field: &str, value: Value) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"resourceVersion": rv, field: value}}))
}

impl Shared {
    fn snapshot(&self, uid: &Uid) -> Option<Item> {
        let g = self.graph();
        let n = g.nodes.get(uid)?;
        Some(Item {
            uid: uid.clone(),
            api_version: n.api_version.clone(),
            kind: n.kind.clone(),
            namespace: n.namespace.clone(),
            name: n.name.clone(),
            // An unwatched node's resource may no longer be served: map it
            // again (and retry while it cannot be).
            res: n.res.clone().filter(|_| n.watched),
            owners: n.owners.clone(),
            observed: n.observed,
            deleting: n.deleting,
            deleting_dependents: n.deleting_dependents(),
            finalizers: n.finalizers.clone(),
            resource_version: n.resource_version.clone(),
            has_dependents: !n.dependents.is_empty(),
        })
    }

    /// The API for an object: the resource it was seen on, else the one its
    /// apiVersion and kind resolve to. `None` namespace for cluster-scoped.
    fn api_for(
        &self,
        res: Option<&Arc<Resource>>,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<(Api<DynamicObject>, Arc<Resource>), Error> {
        let res = match res {
            Some(r) => r.clone(),
            None => self
                .catalog()
                .resolve(api_version, kind)
                .ok_or_else(|| Error::Unmapped {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                })?,
        };
        let api = match (res.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &res.ar),
            _ => Api::all_with(self.client.clone(), &res.ar),
        };
        Ok((api, res))
    }

    fn item_api(&self, item: &Item) -> Result<Api<DynamicObject>, Error> {
        self.api_for(
            item.res.as_ref(),
            &item.api_version,
            &item.kind,
            item.namespace.as_deref(),
        )
        .map(|(api, _)| api)
    }

    /// kube's `attemptToDeleteItem`.
    async fn attempt_to_delete(self: &Arc<Self>, uid: &Uid) -> Result<Outcome, Error> {
        let Some(item) = self.snapshot(uid) else {
            return Ok(Outcome::Done);
        };
        if !item.observed {
            return self.verify_virtual(&item).await;
        }
        if item.deleting && !item.deleting_dependents {
            // Being deleted by someone: its dependents get a look once it is gone.
            return Ok(Outcome::Done);
        }
        if item.deleting_dependents {
            return self.process_deleting_dependents(&item).await;
        }
        if item.owners.is_empty() {
            return Ok(Outcome::Done);
        }
        self.collect(item).await
    }

    /// A referenced owner not seen on any watch: absent (its dependents get
    /// a look), or present and not yet seen (look again later). kube's
    /// `attemptToDeleteItem` on a virtual node: the GET is by the
    /// coordinates its first dependent named it with; an apiVersion that
    /// cannot be mapped is retried, never guessed.
    async fn verify_virtual(&self, item: &Item) -> Result<Outcome, Error> {
        let r = OwnerReference {
            api_version: item.api_version.clone(),
            kind: item.kind.clone(),
            name: item.name.clone(),
            uid: item.uid.to_string(),
            ..OwnerReference::default()
        };
        let dep_ns = item.namespace.as_deref().unwrap_or_default();
        let res = self.resolve(&r)?;
        if res.namespaced && dep_ns.is_empty() {
            // Named as a namespaced owner by a cluster-scoped object: it can
            // never resolve (kube forgets the item).
            self.count_unresolved();
            return Ok(Outcome::Done);
        }
        let identity = Coordinates::of(&r, if res.namespaced { dep_ns } else { "" });
        let absent = self.graph().absent.contains(&identity)
            || self.get_owner(&r, &res, dep_ns).await?.is_none();
        if absent {
            let _ = self.events.send(GraphEvent::VirtualDelete {
                uid: item.uid.clone(),
                identity,
            });
            return Ok(Outcome::Done);
        }
        // It exists: wait until a watch shows it (kube does the same).
        Ok(Outcome::Retry)
    }

    /// The resource an owner reference names, at exactly its apiVersion.
    fn resolve(&self, r: &OwnerReference) -> Result<Arc<Resource>, Error> {
        self.catalog()
            .resolve(&r.api_version, &r.kind)
            .ok_or_else(|| Error::Unmapped {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
            })
    }

    /// GET the owner `r` names (of resource `res`, in `dep_ns` when
    /// namespaced): its metadata when found with the same uid.
    async fn get_owner(
        &self,
        r: &OwnerReference,
        res: &Resource,
        dep_ns: &str,
    ) -> Result<Option<ObjectMeta>, Error> {
        let api: Api<DynamicObject> = if res.namespaced {
            Api::namespaced_with(self.client.clone(), dep_ns, &res.ar)
        } else {
            Api::all_with(self.client.clone(), &res.ar)
        };
        Ok(match api.get_metadata_opt(&r.name).await? {
            Some(m) if m.metadata.uid.as_deref() == Some(r.uid.as_str()) => Some(m.metadata),
            _ => None,
        })
    }

    /// How one owner reference of a dependent in `dep_ns` stands (kube's
    /// `isDangling`): absent by the absent-owner cache (cluster-scoped
    /// coordinates, then the dependent's namespace), else by a GET of the
    /// resource its apiVersion and kind map to — in the dependent's
    /// namespace when namespaced. `None`: a namespaced owner named by a
    /// cluster-scoped dependent, which never resolves (kube leaves the
    /// dependent alone).
    async fn owner_state(
        &self,
        r: &OwnerReference,
        dep_ns: &str,
    ) -> Result<Option<OwnerState>, Error> {
        let mut key = Coordinates::of(r, "");
        {
            let g = self.graph();
            if g.absent.contains(&key) {
                return Ok(Some(OwnerState::Dangling));
            }
            key.namespace = dep_ns.to_string();
            if g.absent.contains(&key) {
                return Ok(Some(OwnerState::Dangling));
            }
        }
        let res = self.resolve(r)?;
        if !res.namespaced {
            key.namespace.clear();
        }
        if res.namespaced && dep_ns.is_empty() {
            return Ok(None);
        }
        // What a watch shows at exactly those coordinates needs no GET.
        {
            let g = self.graph();
            if let Some(o) = g.nodes.get(r.uid.as_str())
                && o.vouches_for(r, &key.namespace)
            {
                return Ok(Some(if o.deleting_dependents() {
                    OwnerState::Waiting
                } else {
                    OwnerState::Solid
                }));
            }
        }
        match self.get_owner(r, &res, dep_ns).await? {
            None => {
                self.graph().absent.insert(key);
                Ok(Some(OwnerState::Dangling))
            }
            Some(m) => {
                let fg = m
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| f.iter().any(|x| x == FINALIZER_FOREGROUND));
                Ok(Some(if m.deletion_timestamp.is_some() && fg {
                    OwnerState::Waiting
                } else {
                    OwnerState::Solid
                }))
            }
        }
    }

    /// Classify a dependent's owner references (kube's `classifyReferences`);
    /// `None` when one of them can never resolve.
    async fn classify(
        &self,
        item: &Item,
        owners: &[OwnerReference],
    ) -> Result<Option<Vec<(OwnerReference, OwnerState)>>, Error> {
        let dep_ns = item.namespace.as_deref().unwrap_or_default();
        let mut out = Vec::with_capacity(owners.len());
        for r in owners {
            match self.owner_state(r, dep_ns).await? {
                Some(state) => out.push((r.clone(), state)),
                None => {
                    tracing::debug!(kind = %item.kind, name = %item.name, owner = %r.name, "garbage collector: a cluster-scoped object names a namespaced owner; left alone");
                    self.count_unresolved();
                    return Ok(None);
                }
            }
        }
        Ok(Some(out))
    }

    /// Decide about a dependent and act; on a conflict look again with the
    /// object as the server has it.
    async fn collect(&self, item: Item) -> Result<Outcome, Error> {
        let api = self.item_api(&item)?;
        let mut owners = item.owners.clone();
        let mut finalizers = item.finalizers.clone();
        let mut rv = item.resource_version.clone();
        for _ in 0..4 {
            let Some(states) = self.classify(&item, &owners).await? else {
                return Ok(Outcome::Done);
            };
            let solid = states.iter().any(|(_, s)| matches!(s, OwnerState::Solid));
            let dead: HashSet<&str> = states
                .iter()
                .filter(|(_, s)| !matches!(s, OwnerState::Solid))
                .map(|(r, _)| r.uid.as_str())
                .collect();
            let waiting = states.iter().any(|(_, s)| matches!(s, OwnerState::Waiting));
            let result = if solid {
                if dead.is_empty() {
                    return Ok(Outcome::Done);
                }
                // Keep the object; drop the references to dead owners.
                let kept: Vec<OwnerReference> = owners
                    .iter()
                    .filter(|r| !dead.contains(r.uid.as_str()))
                    .cloned()
                    .collect();
                self.patch_owner_refs(&api, &item, rv.as_deref(), kept)
                    .await
                    .map(|_| ())
            } else if waiting && item.has_dependents {
                // Delete it in the foreground so its own dependents go first;
                // un-block its references if a dependent waits on it too (a
                // cycle), as kube does.
                let mut guard = rv.clone();
                if self.dependent_deleting_dependents(&item.uid) {
                    let unblocked: Vec<OwnerReference> = owners
                        .iter()
                        .map(|r| {
                            let mut r = r.clone();
                            if r.block_owner_deletion == Some(true) {
                                r.block_owner_deletion = Some(false);
                            }
                            r
                        })
                        .collect();
                    if unblocked != owners {
                        match self
                            .patch_owner_refs(&api, &item, rv.as_deref(), unblocked)
                            .await
                        {
                            Ok(new_rv) => guard = new_rv,
                            Err(e) if is_conflict(&e) => guard = None,
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                match guard {
                    Some(g) => self.delete(&api, &item, &g, "Foreground").await,
                    None => Err(conflict_error()),
                }
            } else {
                let policy = if finalizers.iter().any(|f| f == FINALIZER_ORPHAN) {
                    "Orphan"
                } else if finalizers.iter().any(|f| f == FINALIZER_FOREGROUND) {
                    "Foreground"
                } else {
                    "Background"
                };
                match rv.as_deref() {
                    Some(g) => self.delete(&api, &item, g, policy).await,
                    None => Err(conflict_error()),
                }
            };
            match result {
                Ok(()) => return Ok(Outcome::Done),
                Err(e) if is_not_found(&e) => return Ok(Outcome::Done),
                Err(e) if is_conflict(&e) => {
                    // Look at the object as the server has it now.
                    let Some(fresh) = api.get_metadata_opt(&item.name).await? else {
                        return Ok(Outcome::Done);
                    };
                    let m = fresh.metadata;
                    if m.uid.as_deref() != Some(&*item.uid) || m.deletion_timestamp.is_some() {
                        return Ok(Outcome::Done);
                    }
                    owners = m.owner_references.unwrap_or_default();
                    finalizers = m.finalizers.unwrap_or_default();
                    rv = m.resource_version;
                    if owners.is_empty() {
                        return Ok(Outcome::Done);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Outcome::Retry)
    }

    /// DELETE with uid and resourceVersion preconditions.
    async fn delete(
        &self,
        api: &Api<DynamicObject>,
        item: &Item,
        rv: &str,
        policy: &str,
    ) -> Result<(), kube::Error> {
        let mut dp = match policy {
            "Orphan" => DeleteParams::orphan(),
            "Foreground" => DeleteParams::foreground(),
            _ => DeleteParams::background(),
        };
        dp.preconditions = Some(Preconditions {
            uid: Some(item.uid.to_string()),
            resource_version: Some(rv.to_string()),
        });
        let req = kube::core::Request::new(api.resource_url())
            .delete(&item.name, &dp)
            .map_err(kube::Error::BuildRequest)?;
        send_discard(&self.client, req).await?;
        tracing::debug!(kind = %item.kind, name = %item.name, policy, "garbage collector: deleted");
        self.count(1, 0);
        Ok(())
    }

    /// Set a dependent's ownerReferences to `refs`, guarded by `rv`
    /// (fetched first when unknown). The new resourceVersion.
    async fn patch_owner_refs(
        &self,
        api: &Api<DynamicObject>,
        item: &Item,
        rv: Option<&str>,
        refs: Vec<OwnerReference>,
    ) -> Result<Option<String>, kube::Error> {
        let rv = match rv {
            Some(rv) => rv.to_string(),
            None => return Err(conflict_error()),
        };
        let value = if refs.is_empty() {
            Value::Null
        } else {
            serde_json::to_value(&refs).map_err(kube::Error::SerdeError)?
        };
        let out = api
            .patch_metadata(
                &item.name,
                &PatchParams::default(),
                &guarded_patch(&rv, "ownerReferences", value),
            )
            .await?;
        self.count(0, 1);
        Ok(out.metadata.resource_version)
    }

    /// Remove `finalizer` from an object, guarded by the resourceVersion it
    /// was read at, so other finalizers are never lost.
    async fn remove_finalizer(&self, item: &Item, finalizer: &str) -> Result<(), Error> {
        let api = self.item_api(item)?;
        for _ in 0..8 {
            let Some(m) = api.get_metadata_opt(&item.name).await? else {
                return Ok(());
            };
            let m = m.metadata;
            if m.uid.as_deref() != Some(&*item.uid) {
                return Ok(());
            }
            let finalizers = m.finalizers.unwrap_or_default();
            if !finalizers.iter().any(|f| f == finalizer) {
                return Ok(());
            }
            let rest: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
            let rv = m.resource_version.unwrap_or_default();
            match api
                .patch_metadata(
                    &item.name,
                    &PatchParams::default(),
                    &guarded_patch(&rv, "finalizers", json!(rest)),
                )
                .await
            {
                Ok(_) => {
                    self.count(0, 1);
                    tracing::debug!(kind = %item.kind, name = %item.name, finalizer, "garbage collector: finalizer removed");
                    return Ok(());
                }
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(conflict_error().into())
    }

    /// Whether any dependent of `uid` is itself waiting for its own
    /// dependents (a cycle through a foreground deletion).
    fn dependent_deleting_dependents(&self, uid: &Uid) -> bool {
        let g = self.graph();
        g.nodes.get(uid).is_some_and(|n| {
            n.dependents
                .iter()
                .any(|d| g.nodes.get(d).is_some_and(Node::deleting_dependents))
        })
    }

    /// An owner waiting for its dependents (kube's
    /// `processDeletingDependentsItem`): done when no dependent with
    /// `blockOwnerDeletion` is left. (Its dependents were queued when it
    /// started waiting, and a failed dependent retries on its own, so
    /// unlike kube they are not queued again on every pass: that would make
    /// a foreground deletion of n dependents O(n²).)
    async fn process_deleting_dependents(&self, item: &Item) -> Result<Outcome, Error> {
        let blocked = self
            .graph()
            .nodes
            .get(&item.uid)
            .is_some_and(|n| !n.blocking.is_empty());
        if !blocked {
            self.remove_finalizer(item, FINALIZER_FOREGROUND).await?;
        }
        Ok(Outcome::Done)
    }

    /// kube's `attemptToOrphan`: drop the owner's reference from every
    /// dependent, then its `orphan` finalizer.
    async fn attempt_to_orphan(&self, uid: &Uid) -> Result<(), Error> {
        let Some(owner) = self.snapshot(uid) else {
            return Ok(());
        };
        let dependents: Vec<Item> = {
            let deps: Vec<Uid> = self
                .graph()
                .nodes
                .get(uid)
                .map(|n| n.dependents.iter().cloned().collect())
                .unwrap_or_default();
            deps.iter().filter_map(|d| self.snapshot(d)).collect()
        };
        let owner_uid: &str = &owner.uid;
        futures::stream::iter(dependents)
            .map(|dep| async move { self.drop_owner_ref(&dep, owner_uid).await })
            .buffer_unordered(32)
            .try_collect::<Vec<()>>()
            .await?;
        self.remove_finalizer(&owner, FINALIZER_ORPHAN).await
    }

    /// Remove the reference to `owner` from a dependent.
    async fn drop_owner_ref(&self, dep: &Item, owner: &str) -> Result<(), Error> {
        if !dep.observed {
            return Ok(());
        }
        let api = self.item_api(dep)?;
        let mut owners = dep.owners.clone();
        let mut rv = dep.resource_version.clone();
        for _ in 0..8 {
            let kept: Vec<OwnerReference> =
                owners.iter().filter(|r| r.uid != owner).cloned().collect();
            if kept.len() == owners.len() {
                return Ok(());
            }
            match self.patch_owner_refs(&api, dep, rv.as_deref(), kept).await {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_conflict(&e) => {
                    let Some(fresh) = api.get_metadata_opt(&dep.name).await? else {
                        return Ok(());
                    };
                    if fresh.metadata.uid.as_deref() != Some(&*dep.uid) {
                        return Ok(());
                    }
                    owners = fresh.metadata.owner_references.unwrap_or_default();
                    rv = fresh.metadata.resource_version;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(conflict_error().into())
    }
}

/// A stand-in 409 for "the cached resourceVersion is missing or stale".
fn conflict_error() -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure("the object has been modified", "Conflict")
            .with_code(409)
            .boxed(),
    )
}
