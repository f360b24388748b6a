//! The workload controllers of kube-controller-manager, as kube-rs clients
//! on `kubeforge-runtime`: [ReplicaSet](replicaset), [Deployment](deployment),
//! [StatefulSet](statefulset), [DaemonSet](daemonset), [Job](job),
//! [CronJob](cronjob), [EndpointSlices and Endpoints](endpoints),
//! [node lifecycle](nodelifecycle), ReplicationControllers (run by the
//! ReplicaSet code), [PodDisruptionBudgets](disruption) and
//! [HorizontalPodAutoscalers](hpa).
//!
//! Entry points (what `kubeforge up` and the test environment call):
//!
//! - [`start`]`(clients, WorkloadOptions) -> Result<Workloads, Error>`:
//!   spawns one [`kubeforge_runtime::Manager`] with every enabled
//!   controller on the current Tokio runtime and waits for its caches to
//!   sync; [`Workloads::stop`] shuts it down.
//! - [`run_until_shutdown`]`(clients, opts, shutdown)`: the same, until a
//!   future resolves (like [`crate::run_builtin`]).
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), kubeforge_controllers::Error> {
//! use kubeforge_controllers::workloads::{self, WorkloadOptions};
//! let w = workloads::start(client, WorkloadOptions::default()).await?;
//! // … Deployments roll out, Jobs complete, nodes are watched …
//! w.stop().await;
//! # Ok(()) }
//! ```
//!
//! They run against any API server. Pods only make progress if something
//! plays the kubelet (the node simulator, or a test writing pod status).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, ReplicationController, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kubeforge_runtime::Cache;
use kubeforge_runtime::events::EventRecorder;
use kubeforge_runtime::{Manager, ShutdownHandle};
use tokio::task::JoinHandle;

use crate::Error;

pub mod clock;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod hpa;
pub mod job;
pub mod nodelifecycle;
pub(crate) mod pod_index;
pub mod replicaset;
pub mod statefulset;
pub(crate) mod util;

pub use clock::{Clock, ManualClock, SystemClock};

/// The names of the workload controllers, as `kubeforge up` prints them.
pub const NAMES: &str = "replicaset, replicationcontroller, deployment, statefulset, daemonset, job, cronjob, endpointslice, endpoints, node-lifecycle, disruption, horizontalpodautoscaling";

/// One workload controller, to enable or disable it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkloadController {
    /// ReplicaSets → pods.
    ReplicaSet,
    /// Deployments → ReplicaSets.
    Deployment,
    /// StatefulSets → pods and ControllerRevisions.
    StatefulSet,
    /// DaemonSets → one pod per eligible node.
    DaemonSet,
    /// Jobs → pods until completion.
    Job,
    /// CronJobs → Jobs on a schedule.
    CronJob,
    /// Services → EndpointSlices and Endpoints.
    Endpoints,
    /// Node heartbeats → Ready condition, taints, evictions.
    NodeLifecycle,
    /// ReplicationControllers → pods.
    ReplicationController,
    /// Pods → PodDisruptionBudget status.
    Disruption,
    /// Metrics → HorizontalPodAutoscaler scale.
    HorizontalPodAutoscaler,
}

impl WorkloadController {
    /// Every controller.
    pub const ALL: [WorkloadController; 11] = [
        WorkloadController::ReplicaSet,
        WorkloadController::Deployment,
        WorkloadController::StatefulSet,
        WorkloadController::DaemonSet,
        WorkloadController::Job,
        WorkloadController::CronJob,
        WorkloadController::Endpoints,
        WorkloadController::NodeLifecycle,
        WorkloadController::ReplicationController,
        WorkloadController::Disruption,
        WorkloadController::HorizontalPodAutoscaler,
    ];
}

/// Settings of the workload controllers.
#[derive(Clone)]
pub struct WorkloadOptions {
    /// Which controllers run (default: all).
    pub enabled: Vec<WorkloadController>,
    /// Objects reconciled at once per controller (default 5, as
    /// kube-controller-manager's `--concurrent-*-syncs`).
    pub concurrency: u16,
    /// Where CronJobs read "now" (default the system clock).
    pub clock: Arc<dyn Clock>,
    /// How long a node may miss heartbeats (its Lease's `renewTime`, else
    /// its Ready condition's `lastHeartbeatTime`) before it is marked
    /// NotReady/Unknown (default 40 s, `--node-monitor-grace-period`).
    pub node_monitor_grace_period: Duration,
    /// How often a node whose heartbeats stopped is looked at again
    /// (default 5 s); a healthy node is looked at when its heartbeats would
    /// go stale.
    pub node_monitor_period: Duration,
    /// Pods created per ReplicaSet sync at most (default 500, kube's
    /// burstReplicas).
    pub burst_replicas: usize,
    /// Base delay before a Job replaces failed pods, doubled per failure
    /// (default 10 s as kube; 0 for tests).
    pub job_backoff_base: Duration,
    /// Least time between two syncs of a ReplicaSet of 1,000 or more
    /// replicas (default 100 ms), scaled down with the replica count (10 ms
    /// at 100 replicas, 0.3 ms at 3): each sync reads all the ReplicaSet's
    /// pods, so the pod events of a large one are merged into a bounded
    /// number of syncs per second (see `util::Pacer`); 0 syncs on every event.
    pub replicaset_sync_interval: Duration,
    /// The HorizontalPodAutoscaler controller's settings.
    pub hpa: hpa::HpaOptions,
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        WorkloadOptions {
            enabled: WorkloadController::ALL.to_vec(),
            concurrency: 5,
            clock: Arc::new(SystemClock),
            node_monitor_grace_period: Duration::from_secs(40),
            node_monitor_period: Duration::from_secs(5),
            burst_replicas: 500,
            job_backoff_base: Duration::from_secs(10),
            replicaset_sync_interval: Duration::from_millis(100),
            hpa: hpa::HpaOptions::default(),
        }
    }
}

impl std::fmt::Debug for WorkloadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadOptions")
            .field("enabled", &self.enabled)
            .field("concurrency", &self.concurrency)
            .field("node_monitor_grace_period", &self.node_monitor_grace_period)
            .field("node_monitor_period", &self.node_monitor_period)
            .field("burst_replicas", &self.burst_replicas)
            .field("job_backoff_base", &self.job_backoff_base)
            .field("replicaset_sync_interval", &self.replicaset_sync_interval)
            .field("hpa", &self.hpa)
            .finish_non_exhaustive()
    }
}

/// What every controller's reconcile sees: the client, the options and
/// the shared caches.
#[allow(dead_code)] // fields used as the controllers land
pub(crate) struct Ctx {
    /// The client of the shared caches and events.
    pub shared: Client,
    /// Each controller's writes, by its ServiceAccount name.
    pub writers: std::collections::HashMap<&'static str, Client>,
    pub opts: WorkloadOptions,
    pub events: EventRecorder,
    pub pods: Cache<Pod>,
    pub replicasets: Cache<ReplicaSet>,
    pub replicationcontrollers: Cache<ReplicationController>,
    pub budgets: Cache<PodDisruptionBudget>,
    pub deployments: Cache<Deployment>,
    pub daemonsets: Cache<DaemonSet>,
    pub statefulsets: Cache<StatefulSet>,
    pub nodes: Cache<Node>,
    pub jobs: Cache<Job>,
    pub services: Cache<Service>,
    pub slices: Cache<EndpointSlice>,
    pub revisions: Cache<ControllerRevision>,
    pub leases: Cache<Lease>,
    pub expectations: util::Expectations,
    /// Generations of the ReplicaSets the Deployment controller last
    /// scaled, until its cache shows them.
    pub rs_generations: util::LastWrites<i64>,
    /// The resourceVersion of each Job status the Job controller last
    /// wrote, until its cache shows it.
    pub job_status: util::LastWrites<String>,
    pub pacer: util::Pacer,
    pub pod_index: pod_index::PodIndex,
    /// The HPA controller's memory between syncs.
    pub hpa: hpa::State,
}

impl Ctx {
    /// The client the controller running as `account` (one of
    /// [`crate::clients::accounts`]) writes through.
    pub(crate) fn client(&self, account: &str) -> &Client {
        self.writers.get(account).unwrap_or(&self.shared)
    }
}

/// The context a controller is registered with (the runtime wraps it in an
/// `Arc`; this newtype keeps that from being an `Arc<Arc<_>>`).
pub(crate) struct Shared(pub(crate) Arc<Ctx>);

impl std::ops::Deref for Shared {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        &self.0
    }
}

/// The workload controllers, running; see [`start`].
pub struct Workloads {
    shutdown: ShutdownHandle,
    task: JoinHandle<Result<(), kubeforge_runtime::Error>>,
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workloads").finish_non_exhaustive()
    }
}

impl Workloads {
    /// Stop the controllers (reconciles in flight get 5 s) and wait.
    pub async fn stop(self) {
        self.shutdown.shutdown();
        match self.task.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "workload controllers ended with an error"),
            Err(e) => tracing::warn!(error = %e, "workload controllers task failed"),
            Ok(Ok(())) => {}
        }
    }

    /// Whether the manager task is still running.
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }
}

/// Start the enabled workload controllers (spawned on the current Tokio
/// runtime) and wait until their caches are synced: the caches and events
/// through `clients`' shared client, each controller's writes through its
/// own (a [`Client`] for all, or
/// [`ControllerClients::per_account`](crate::ControllerClients::per_account)).
pub async fn start(
    clients: impl Into<crate::ControllerClients>,
    opts: WorkloadOptions,
) -> Result<Workloads, Error> {
    use crate::clients::accounts;
    let clients = clients.into();
    let client = clients.shared().clone();
    let writers = [
        accounts::REPLICASET,
        accounts::REPLICATION,
        accounts::DEPLOYMENT,
        accounts::STATEFULSET,
        accounts::DAEMONSET,
        accounts::JOB,
        accounts::CRONJOB,
        accounts::TTL_AFTER_FINISHED,
        accounts::ENDPOINTSLICE,
        accounts::ENDPOINT,
        accounts::NODE,
        accounts::DISRUPTION,
        accounts::HORIZONTAL_POD_AUTOSCALER,
    ]
    .into_iter()
    .map(|a| (a, clients.for_account(a)))
    .collect();
    // Compact caches (the runtime's default): a running pod costs ~3.8 KiB
    // as compact JSON instead of ~15 KiB decoded, which is what lets
    // 150,000 pods fit. Reconciles reach only their own pods (through
    // `PodIndex`: by owner, node or namespace); the ReplicaSet controller,
    // which reads all of its pods on every sync, reads the index's slim
    // copies and never decodes.
    let mgr = Manager::builder(client.clone())
        .handle_signals(false)
        .graceful_shutdown_timeout(Duration::from_secs(5))
        .build();
    let ctx = Arc::new(Ctx {
        events: EventRecorder::new(client.clone(), "kube-controller-manager"),
        shared: client,
        writers,
        pods: mgr.store::<Pod>(),
        replicasets: mgr.store::<ReplicaSet>(),
        replicationcontrollers: mgr.store::<ReplicationController>(),
        budgets: mgr.store::<PodDisruptionBudget>(),
        deployments: mgr.store::<Deployment>(),
        daemonsets: mgr.store::<DaemonSet>(),
        statefulsets: mgr.store::<StatefulSet>(),
        nodes: mgr.store::<Node>(),
        jobs: mgr.store::<Job>(),
        services: mgr.store::<Service>(),
        slices: mgr.store::<EndpointSlice>(),
        revisions: mgr.store::<ControllerRevision>(),
        leases: mgr.store::<Lease>(),
        expectations: util::Expectations::default(),
        rs_generations: util::LastWrites::default(),
        job_status: util::LastWrites::default(),
        pacer: util::Pacer::default(),
        pod_index: pod_index::PodIndex::default(),
        hpa: hpa::State::default(),
        opts,
    });
    let on = |c: WorkloadController| ctx.opts.enabled.contains(&c);
    if on(WorkloadController::ReplicaSet) {
        replicaset::register(&mgr, ctx.clone());
    }
    if on(WorkloadController::Deployment) {
        deployment::register(&mgr, ctx.clone());
    }
    if on(WorkloadController::StatefulSet) {
        statefulset::register(&mgr, ctx.clone());
    }
    if on(WorkloadController::DaemonSet) {
        daemonset::register(&mgr, ctx.clone());
    }
    if on(WorkloadController::Job) {
        job::register(&mgr, ctx.clone());
    }
    if on(WorkloadController::CronJob) {
        cronjob::register(&mgr, ctx.clone());
    }
    if on(WorkloadController::Endpoints) {
        endpoints::register(&mgr, ctx.clone());
    }
    if on(WorkloadController::NodeLifecycle) {
        nodelifecycle::register(&mgr, ctx.clone());
    }
    if on(WorkloadController::ReplicationController) {
        replicaset::register_replication_controllers(&mgr, ctx.clone());
    }
    if on(WorkloadController::Disruption) {
        disruption::register(&mgr, ctx.clone());
    }
    if on(WorkloadController::HorizontalPodAutoscaler) {
        hpa::register(&mgr, ctx.clone());
    }
    let shutdown = mgr.shutdown_handle();
    let task = tokio::spawn(mgr.run());
    // Every store asked of the manager has its informer started by `run`.
    let _ = tokio::time::timeout(Duration::from_secs(30), ctx.pods.wait_until_ready()).await;
    Ok(Workloads { shutdown, task })
}

/// Run the workload controllers through `clients` until `shutdown`
/// resolves.
pub async fn run_until_shutdown(
    clients: impl Into<crate::ControllerClients>,
    opts: WorkloadOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let w = start(clients, opts).await?;
    shutdown.await;
    w.stop().await;
    Ok(())
}
