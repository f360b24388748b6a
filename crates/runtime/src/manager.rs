//! The [`Manager`]: owns the client, the shared caches, the controllers, the
//! admin server (`/metrics`, `/healthz`, `/readyz`) and leader election, and
//! runs them until SIGTERM/SIGINT or a [`ShutdownHandle`], shutting down
//! gracefully within a bound.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cache::Cache;
use futures::future::join_all;
use kube::Client;
use kube::core::PartialObjectMeta;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::BackoffConfig;
use crate::admin::{self, AdminState};
use crate::controller::{ControllerBuilder, StartFn};
use crate::error::Error;
use crate::informer::{Cacheable, Informers, Scope};
use crate::leader::{Elector, LeaderElection, LeaderState};
use crate::metrics::Metrics;
use crate::permissions::Permissions;
use crate::shutdown::ShutdownHandle;
use crate::sync::lock;
use crate::webhook::WebhookServer;
use crate::workqueue::WorkQueue;
use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Configures a [`Manager`]; see [`Manager::builder`].
#[must_use]
pub struct ManagerBuilder {
    client: Client,
    metrics_addr: Option<SocketAddr>,
    metrics_listener: Option<std::net::TcpListener>,
    leader: Option<LeaderElection>,
    grace: Duration,
    prune: bool,
    compact: bool,
    signals: bool,
    registry: Registry,
    webhooks: Option<WebhookServer>,
    scopes: Vec<ScopeFn>,
    namespace: Option<String>,
}

/// A cache scope set on the builder, applied to the informers at build.
type ScopeFn = Box<dyn FnOnce(&Informers) + Send>;

impl ManagerBuilder {
    /// Cache — and so reconcile, own and watch — only what is in namespace
    /// `ns`, for every namespaced kind (controller-runtime's cache
    /// `DefaultNamespaces`): an operator whose Roles cover one namespace
    /// runs without naming each kind. Cluster-scoped kinds are cached whole;
    /// [`namespace_for`](Self::namespace_for) and
    /// [`selector_for`](Self::selector_for) still narrow a kind further.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_string());
        self
    }

    /// Cache — and so reconcile, own and watch — only the `K`s in namespace
    /// `ns` (controller-runtime's cache `ByObject` namespaces). The list and
    /// watch go to the namespace's own URL, so RBAC in that namespace is
    /// enough: an operator whose Role covers one namespace runs.
    pub fn namespace_for<K>(mut self, ns: &str) -> Self
    where
        K: Cacheable,
        K::Scope: kube::core::NamespaceScope,
    {
        let ns = ns.to_string();
        self.scopes.push(Box::new(move |informers: &Informers| {
            informers.get::<K>().scope(move |s| {
                s.api = Arc::new(move |client| kube::Api::<K>::all(client).constrain(&ns));
            });
        }));
        self
    }

    /// Cache only the `K`s matching the label selector `labels` and the
    /// field selector `fields` (either may be empty), in kube's syntax
    /// (`app=web,tier!=db`, `status.phase=Running`): objects outside are
    /// neither cached nor reconciled, and leaving the selection is seen as
    /// a deletion.
    pub fn selector_for<K: Cacheable>(mut self, labels: &str, fields: &str) -> Self {
        let (labels, fields) = (labels.to_string(), fields.to_string());
        self.scopes.push(Box::new(move |informers: &Informers| {
            informers
                .get::<K>()
                .scope(move |s| s.select(&labels, &fields));
        }));
        self
    }

    /// Run `server` (bound, with its routes and certificates) as part of
    /// the manager, as controller-runtime's manager runs its webhook
    /// server: it serves on every replica, leading or not, from the start
    /// of [`Manager::run`], and stops last — after the controllers and the
    /// Lease — so admission keeps answering while reconciles drain.
    pub fn webhook_server(mut self, server: WebhookServer) -> Self {
        self.webhooks = Some(server);
        self
    }

    /// Serve `/metrics`, `/healthz` and `/readyz` on `addr` (off by default).
    pub fn metrics_addr(mut self, addr: SocketAddr) -> Self {
        self.metrics_addr = Some(addr);
        self
    }

    /// Serve `/metrics`, `/healthz` and `/readyz` on an already bound
    /// listener (handy with port 0: read its address first).
    pub fn metrics_listener(mut self, listener: std::net::TcpListener) -> Self {
        self.metrics_listener = Some(listener);
        self
    }

    /// Run the controllers only while holding Lease `namespace/name`, with
    /// controller-runtime's default timings.
    pub fn leader_election(self, name: &str, namespace: &str) -> Self {
        self.leader_election_with(LeaderElection::new(name, namespace))
    }

    /// Leader election with explicit settings.
    pub fn leader_election_with(mut self, election: LeaderElection) -> Self {
        self.leader = Some(election);
        self
    }

    /// How long a shutdown waits for reconciles in flight before aborting
    /// them (default 30 s).
    pub fn graceful_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.grace = timeout;
        self
    }

    /// Whether cached objects lose `metadata.managedFields` and the
    /// `kubectl.kubernetes.io/last-applied-configuration` annotation
    /// (default: yes; they are most of a typical object's size and
    /// controllers rarely read them).
    pub fn prune_cached_objects(mut self, prune: bool) -> Self {
        self.prune = prune;
        self
    }

    /// Whether the caches keep objects as compact JSON, decoded when read
    /// and shared while in use (default: yes; a typical pod then costs
    /// 3.8 KiB instead of 15 KiB decoded), or always decoded, as
    /// kube-runtime's `Store` keeps them (faster reads for controllers
    /// that scan whole caches often). See [`Cache`].
    pub fn compact_cache(mut self, compact: bool) -> Self {
        self.compact = compact;
        self
    }

    /// Whether `run` stops on SIGTERM and SIGINT (default: yes).
    pub fn handle_signals(mut self, on: bool) -> Self {
        self.signals = on;
        self
    }

    /// Register the application's own metrics beside the manager's, served
    /// on the same `/metrics`.
    pub fn register_metrics(mut self, register: impl FnOnce(&mut Registry)) -> Self {
        register(&mut self.registry);
        self
    }

    /// The manager.
    pub fn build(self) -> Manager {
        let informers = Informers::new(self.compact, self.namespace);
        for scope in self.scopes {
            scope(&informers);
        }
        Manager {
            client: self.client,
            informers,
            controllers: Mutex::new(Vec::new()),
            metrics: Arc::new(Metrics::new(self.registry)),
            metrics_addr: self.metrics_addr,
            metrics_listener: self.metrics_listener,
            leader: self.leader,
            grace: self.grace,
            prune: self.prune,
            signals: self.signals,
            shutdown: CancellationToken::new(),
            reconciles: TaskTracker::new(),
            webhooks: Mutex::new(self.webhooks),
            permissions: Mutex::new(Permissions::new()),
        }
    }
}

/// Runs controllers over shared caches; see the crate docs for an example.
pub struct Manager {
    client: Client,
    informers: Informers,
    controllers: Mutex<Vec<(String, StartFn)>>,
    metrics: Arc<Metrics>,
    metrics_addr: Option<SocketAddr>,
    metrics_listener: Option<std::net::TcpListener>,
    leader: Option<LeaderElection>,
    grace: Duration,
    prune: bool,
    signals: bool,
    shutdown: CancellationToken,
    /// Every reconcile task of every controller, so `run` returns only once
    /// none is left running.
    reconciles: TaskTracker,
    /// The webhook server `run` serves, if any.
    webhooks: Mutex<Option<WebhookServer>>,
    /// What the registered controllers (and `permits`) need.
    permissions: Mutex<Permissions>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("metrics_addr", &self.metrics_addr)
            .field("leader", &self.leader)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// Start configuring a manager over `client`.
    pub fn builder(client: Client) -> ManagerBuilder {
        ManagerBuilder {
            client,
            metrics_addr: None,
            metrics_listener: None,
            leader: None,
            grace: Duration::from_secs(30),
            prune: true,
            compact: true,
            signals: true,
            registry: Registry::default(),
            webhooks: None,
            scopes: Vec::new(),
            namespace: None,
        }
    }

    /// The client the manager's caches and controllers use.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Start building a controller named `name` (the `controller` label of
    /// its metrics) reconciling kind `K` with context `ctx`.
    pub fn controller<K: Cacheable, C: Send + Sync + 'static>(
        &self,
        name: &str,
        ctx: C,
    ) -> ControllerBuilder<'_, K, C> {
        ControllerBuilder::new(self, name, ctx)
    }

    /// Run `run` beside the controllers, as controller-runtime's `mgr.Add`
    /// runs a `Runnable`: for work that is not one kind's reconciler (the
    /// garbage collector, say). It starts with the controllers (once
    /// leading, with leader election) and is handed a token cancelled on
    /// shutdown; it must end soon after, and gets the same grace period.
    /// When the lease is lost it is dropped at once, so it should own its
    /// tasks (a `JoinSet`, or handles aborted on drop). Ending before it
    /// is told to stops the manager with [`Error::ControllerStopped`].
    pub fn add_runnable<F, Fut>(&self, name: &str, run: F)
    where
        F: FnOnce(CancellationToken) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.add_controller(name.to_string(), Box::new(move |stop| run(stop).boxed()));
    }

    /// A [`WorkQueue`] whose `workqueue_*` metrics are served under
    /// `name`, for a [runnable](Self::add_runnable)'s own work.
    pub fn work_queue<T>(&self, name: &str, backoff: BackoffConfig) -> WorkQueue<T>
    where
        T: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    {
        WorkQueue::with_metrics(name, backoff, self.metrics.clone())
    }

    /// The shared cache of kind `K`: the same one the controllers use (one
    /// watch per kind). Empty until [`run`](Self::run) starts and the first
    /// list arrives (`store.wait_until_ready().await`).
    pub fn store<K: Cacheable>(&self) -> Cache<K> {
        self.informers.get::<K>().cache()
    }

    /// The cache of the `K`s in `scope`: the one the controllers
    /// [scoped](crate::ControllerBuilder::scope) to it read (one watch per
    /// kind and distinct scope).
    pub fn store_in<K: Cacheable>(&self, scope: &Scope) -> Cache<K> {
        self.informers.get_in::<K>(Some(scope)).cache()
    }

    /// The shared metadata-only cache of kind `K` (`PartialObjectMeta<K>`,
    /// listed and watched as `PartialObjectMetadata`): names, labels,
    /// annotations, owner references… without spec or status. Shared with
    /// [`ControllerBuilder::owns_metadata`] and
    /// `watches::<PartialObjectMeta<K>, _>(…)`.
    pub fn metadata_store<K: Cacheable>(&self) -> Cache<PartialObjectMeta<K>> {
        self.informers.get::<PartialObjectMeta<K>>().cache()
    }

    /// The metrics the manager serves.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// A handle that stops [`run`](Self::run) gracefully.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shutdown.clone())
    }

    /// Everything the registered controllers declared they read and write
    /// (see [`crate::permissions`]), and what [`permits`](Self::permits)
    /// added: the ClusterRole the manager's identity needs. Leader
    /// election is apart ([`leader_election_permissions`](Self::leader_election_permissions)).
    pub fn permissions(&self) -> Permissions {
        lock(&self.permissions).clone()
    }

    /// Allow `verbs` on `group`/`resource` besides what the controllers
    /// declared (e.g. what `main` reads at start-up).
    pub fn permits(&self, group: &str, resource: &str, verbs: &[&str]) {
        lock(&self.permissions).allow(group, resource, verbs);
    }

    /// With leader election: the Lease's namespace and what the election
    /// needs there (a namespaced Role).
    pub fn leader_election_permissions(&self) -> Option<(String, Permissions)> {
        let le = self.leader.as_ref()?;
        Some((le.namespace.clone(), crate::permissions::leader_election()))
    }

    pub(crate) fn permits_all(&self, p: &Permissions) {
        lock(&self.permissions).merge(p);
    }

    pub(crate) fn reconciles(&self) -> TaskTracker {
        self.reconciles.clone()
    }

    pub(crate) fn informers(&self) -> &Informers {
        &self.informers
    }

    pub(crate) fn add_controller(&self, name: String, start: StartFn) {
        lock(&self.controllers).push((name, start));
    }

    /// Run everything until SIGTERM/SIGINT (when handled) or a
    /// [`ShutdownHandle`]: caches and the admin server at once; the
    /// controllers once the caches they need are synced and (with leader
    /// election) once this replica leads. On shutdown the controllers take
    /// no new work and get the grace period to finish reconciles in flight;
    /// then the Lease is released (if configured, within 5 s) and `run`
    /// returns. When leadership is lost, reconciles in flight are stopped
    /// at once instead (another replica may already lead).
    ///
    /// Returns [`Error::LeaderElectionLost`] when this replica stops leading
    /// (its controllers were stopped first).
    pub async fn run(self) -> Result<(), Error> {
        if let Some(le) = &self.leader {
            le.validate()?;
        }
        let listener = match (self.metrics_listener, self.metrics_addr) {
            (Some(l), _) => {
                let addr = l.local_addr().ok();
                let l = l
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::TcpListener::from_std(l));
                match l {
                    Ok(l) => Some(l),
                    Err(source) => {
                        return Err(Error::Bind {
                            addr: addr.unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
                            source,
                        });
                    }
                }
            }
            (None, Some(addr)) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| Error::Bind { addr, source })?,
            ),
            (None, None) => None,
        };

        let bg_stop = CancellationToken::new();
        let _bg_guard = bg_stop.clone().drop_guard();
        let informers = self.informers.all();
        let mut background = Vec::new();
        for inf in &informers {
            background.push(
                inf.clone()
                    .start(self.client.clone(), self.prune, bg_stop.clone()),
            );
        }
        if let Some(listener) = listener {
            if let Ok(addr) = listener.local_addr() {
                tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
            }
            let state = AdminState {
                metrics: self.metrics.clone(),
                informers: informers.clone(),
            };
            background.push(tokio::spawn(admin::serve(listener, state, bg_stop.clone())));
        }

        // The webhook server, on every replica; stopped after everything
        // else.
        let hooks_stop = CancellationToken::new();
        let _hooks_guard = hooks_stop.clone().drop_guard();
        let hooks = lock(&self.webhooks).take().map(|server| {
            let stop = hooks_stop.clone();
            tokio::spawn(async move { server.run(async move { stop.cancelled().await }).await })
        });

        let mut requested =
            std::pin::pin!(shutdown_requested(self.shutdown.clone(), self.signals)?);

        // Leader election.
        let (state_tx, mut state_rx) = watch::channel(LeaderState::Following);
        let elector_stop = CancellationToken::new();
        let _elector_guard = elector_stop.clone().drop_guard();
        let elector = self.leader.clone().map(|le| {
            tokio::spawn(Elector::new(le, self.client.clone()).run(
                self.metrics.clone(),
                state_tx,
                elector_stop.clone(),
            ))
        });
        let mut result = Ok(());
        let mut started = false;
        let leading = async {
            if elector.is_some() {
                let _ = state_rx.wait_for(|s| *s == LeaderState::Leading).await;
            }
        };
        tokio::select! {
            () = leading => started = true,
            () = &mut requested => {}
        }

        let ctrl_stop = CancellationToken::new();
        let _ctrl_guard = ctrl_stop.clone().drop_guard();
        let mut handles = Vec::new();
        let mut lost_lease = false;
        let mut names = Vec::new();
        if started {
            for (name, start) in lock(&self.controllers).drain(..) {
                tracing::debug!(controller = %name, "starting");
                handles.push(tokio::spawn(start(ctrl_stop.clone())));
                names.push(name);
            }
            // A controller's task ends only when told to: one that ends
            // sooner (a panic in a mapper or predicate) stops the manager.
            let died = async {
                if handles.is_empty() {
                    return std::future::pending().await;
                }
                let (res, i, _) = futures::future::select_all(handles.iter_mut()).await;
                let reason = match res {
                    Err(e) if e.is_panic() => crate::controller::panic_message(&*e.into_panic())
                        .unwrap_or_else(|| "it panicked".into()),
                    Err(e) => e.to_string(),
                    Ok(()) => "it ended".into(),
                };
                (i, reason)
            };
            let lost = async {
                if elector.is_some() {
                    let _ = state_rx.wait_for(|s| *s == LeaderState::Lost).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = &mut requested => tracing::info!("shutdown requested; stopping controllers"),
                (i, reason) = died => {
                    // Its handle is spent: polling it again would panic.
                    drop(handles.remove(i));
                    let name = names.get(i).cloned().unwrap_or_default();
                    tracing::error!(controller = %name, %reason, "a controller stopped; stopping the manager");
                    result = Err(Error::ControllerStopped { name, reason });
                }
                () = lost => {
                    lost_lease = true;
                    if let Some(le) = &self.leader {
                        result = Err(Error::LeaderElectionLost {
                            namespace: le.namespace.clone(),
                            name: le.name.clone(),
                        });
                    }
                }
            }
        }

        ctrl_stop.cancel();
        let aborts: Vec<_> = handles.iter().map(|h| h.abort_handle()).collect();
        if lost_lease {
            // Another replica may lead by now: nothing of ours may still
            // act (controller-runtime exits at once). Reconciles in flight
            // are dropped, not given the grace period.
            tracing::warn!("leadership lost; stopping reconciles in flight at once");
            for a in &aborts {
                a.abort();
            }
            join_all(handles).await;
        } else if tokio::time::timeout(self.grace, join_all(handles))
            .await
            .is_err()
        {
            // Graceful, bounded: no new work, finish what is in flight.
            tracing::warn!(grace = ?self.grace, "reconciles still running after the grace period; aborting them");
            for a in aborts {
                a.abort();
            }
        }
        // Aborted reconciles end at their next poll: wait for that, so none
        // acts after this point.
        self.reconciles.close();
        self.reconciles.wait().await;
        // Then the Lease (released now if configured; bounded, since the
        // API server may be what is gone), then caches and the admin
        // server.
        elector_stop.cancel();
        if let Some(e) = elector {
            let abort = e.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), e)
                .await
                .is_err()
            {
                tracing::warn!("the Lease was not released within 5 s; leaving it to expire");
                abort.abort();
            }
        }
        bg_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), join_all(background)).await;
        hooks_stop.cancel();
        if let Some(h) = hooks {
            match tokio::time::timeout(Duration::from_secs(5), h).await {
                Ok(Ok(Err(e))) => {
                    tracing::error!(error = %e, "the webhook server failed");
                    if result.is_ok() {
                        result = Err(Error::Webhooks(e));
                    }
                }
                Ok(_) => {}
                Err(_) => tracing::warn!("the webhook server did not stop within 5 s"),
            }
        }
        result
    }
}

/// Resolves when a shutdown is requested through the handle or (if
/// `signals`) by SIGTERM or SIGINT.
fn shutdown_requested(
    handle: CancellationToken,
    signals: bool,
) -> Result<impl std::future::Future<Output = ()>, Error> {
    #[cfg(unix)]
    let mut term = if signals {
        Some(
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(Error::Signal)?,
        )
    } else {
        None
    };
    Ok(async move {
        let by_handle = handle.cancelled();
        let by_signal = async {
            if !signals {
                return std::future::pending::<()>().await;
            }
            #[cfg(unix)]
            let sigterm = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let sigterm = std::future::pending::<()>();
            let sigint = async {
                if tokio::signal::ctrl_c().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = sigint => tracing::info!("SIGINT received"),
                () = sigterm => tracing::info!("SIGTERM received"),
            }
        };
        tokio::select! {
            () = by_handle => {}
            () = by_signal => {}
        }
    })
}
