//! The scheduler itself: watches (pods, nodes, PriorityClasses,
//! PodDisruptionBudgets) feed one scheduling loop on a dedicated thread,
//! which owns the cache and the queue and runs one scheduling cycle at a time;
//! binding cycles run asynchronously on the tokio runtime and report back;
//! events and pod conditions are written by a reporter task.
//!
//! ```text
//! watchers ──Input──▶ scheduling loop (thread) ──spawn──▶ binding cycles (tokio)
//!                       │  cache + queue + profiles         │
//!                       └──Report──▶ reporter (events, PodScheduled=False)
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::watcher;
use serde_json::json;

use crate::cache::Cache;
use crate::config::{ConfigError, SchedulerConfiguration};
use crate::extender::Extender;
use crate::framework::runtime::{FitError, PermitOutcome};
use crate::framework::{
    ClusterEvent, Code, CycleState, DuplicatePlugin, Framework, Handle, PdbInfo, PodInfo,
    PostFilterContext, QueuedPodInfo, Registry, Status, WaitingPods,
};
use crate::metrics::Metrics;
use crate::priority::PriorityClasses;
use crate::queue::SchedulingQueue;

/// Why the scheduler could not start.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Two plugins share a name.
    #[error(transparent)]
    Duplicate(#[from] DuplicatePlugin),
    /// Not called inside a tokio runtime.
    #[error("the scheduler must be started inside a tokio runtime")]
    NoRuntime,
}

/// What the scheduling loop is told.
pub enum Input {
    /// A pod was added or changed.
    PodApply(Arc<Pod>),
    /// A pod was deleted.
    PodDelete(Arc<Pod>),
    /// A relist finished: pods not in the set are gone.
    PodsRelisted(HashSet<String>),
    /// A node was added or changed.
    NodeApply(Arc<Node>),
    /// A node was deleted.
    NodeDelete(String),
    /// A relist finished: nodes not in the set are gone.
    NodesRelisted(HashSet<String>),
    /// A PriorityClass was added or changed.
    PriorityClassApply(Box<PriorityClass>),
    /// A PriorityClass was deleted.
    PriorityClassDelete(String),
    /// Something a plugin watches changed: retry unschedulable pods.
    Activate,
    /// A binding cycle succeeded.
    Bound {
        /// The pod.
        pod: Arc<PodInfo>,
        /// The node.
        node: String,
        /// The profile.
        profile: String,
        /// When the attempt started.
        started: Instant,
    },
    /// A binding cycle failed.
    BindFailed {
        /// The queued pod.
        info: Box<QueuedPodInfo>,
        /// The node.
        node: String,
        /// Why.
        status: Status,
        /// The profile.
        profile: String,
        /// When the attempt started.
        started: Instant,
    },
    /// Stop the loop.
    Stop,
}

/// What the reporter writes to the API.
#[derive(Debug)]
pub enum Report {
    /// `Scheduled` event.
    Scheduled {
        /// The pod.
        pod: Arc<PodInfo>,
        /// The node.
        node: String,
    },
    /// `FailedScheduling` event and the PodScheduled=False condition.
    Failed {
        /// The pod.
        pod: Arc<PodInfo>,
        /// `Unschedulable` or `SchedulerError`.
        reason: &'static str,
        /// The message.
        message: String,
        /// A nominated node to record.
        nominated: Option<String>,
    },
}

/// The outcome of one scheduling cycle (for tests and benchmarks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CycleOutcome {
    /// Assumed on a node; binding runs asynchronously.
    Assumed(String),
    /// No node fits; the message is the FailedScheduling text.
    Unschedulable(String),
    /// An internal error.
    Error(String),
    /// The popped pod was no longer pending.
    Skipped,
}

/// Builds and starts a scheduler.
#[must_use]
pub struct SchedulerBuilder {
    client: Option<kube::Client>,
    config: SchedulerConfiguration,
    registry: Registry,
    report_events: bool,
}

impl SchedulerBuilder {
    /// A scheduler talking to the API through `client`.
    pub fn new(client: kube::Client) -> Self {
        SchedulerBuilder {
            client: Some(client),
            config: SchedulerConfiguration::default(),
            registry: Registry::in_tree(),
            report_events: true,
        }
    }

    /// A scheduler with no API (in-process benchmarks): feed it with
    /// [`SchedulerCore::handle_input`], bind with a custom Bind plugin.
    pub fn without_client() -> Self {
        SchedulerBuilder {
            client: None,
            config: SchedulerConfiguration::default(),
            registry: Registry::in_tree(),
            report_events: false,
        }
    }

    /// Use this configuration.
    pub fn config(mut self, config: SchedulerConfiguration) -> Self {
        self.config = config;
        self
    }

    /// Add out-of-tree plugins (a name clash fails `build`).
    pub fn plugins(mut self, registry: Registry) -> Self {
        // Keep the error for build(): merge into a copy.
        let mut merged = self.registry.clone();
        match merged.merge(registry) {
            Ok(()) => self.registry = merged,
            Err(e) => {
                // A marker plugin name records the clash for build().
                let name = e.0.clone();
                let _ = self
                    .registry
                    .register(&format!("\0duplicate:{name}"), move |_, _| {
                        Err(format!("duplicate {name}"))
                    });
            }
        }
        self
    }

    /// Whether to write events and pod conditions (default: with a client).
    pub fn report_events(mut self, on: bool) -> Self {
        self.report_events = on;
        self
    }

    /// Build the scheduling loop without starting anything.
    pub fn build_core(self, runtime: tokio::runtime::Handle) -> Result<SchedulerCore, BuildError> {
        if let Some(dup) = self
            .registry
            .names()
            .find_map(|n| n.strip_prefix("\0duplicate:"))
        {
            return Err(DuplicatePlugin(dup.to_string()).into());
        }
        self.config.validate()?;
        let extenders: Vec<Arc<Extender>> = self
            .config
            .extenders
            .iter()
            .map(|e| Arc::new(Extender::new(e.clone(), runtime.clone())))
            .collect();
        let handle = Handle {
            client: self.client.clone(),
            runtime: Some(runtime.clone()),
            extender_ignored_resources: extenders
                .iter()
                .flat_map(|e| e.ignored_resources())
                .collect(),
            waiting_pods: WaitingPods::default(),
            pdbs: Arc::new(RwLock::new(Vec::new())),
            parallelism: self.config.parallelism.unwrap_or(16).max(1) as usize,
        };
        let pct = self.config.percentage_of_nodes_to_score.unwrap_or(0);
        let mut profiles = HashMap::new();
        let mut interest: HashMap<String, Vec<ClusterEvent>> = HashMap::new();
        let mut sort = None;
        for (i, p) in self.config.effective_profiles().iter().enumerate() {
            let fw = Framework::new(i, p, pct, &self.registry, handle.clone(), extenders.clone())?;
            let qs = fw.queue_sort().map(|q| q.name().to_string());
            match (&sort, qs) {
                (None, Some(q)) => sort = Some((q, fw.queue_sort())),
                (Some((prev, _)), Some(q)) if *prev != q => {
                    return Err(ConfigError::Invalid {
                        field: format!("profiles[{i}].plugins.queueSort"),
                        message: format!("{q:?}: queueSort must be the same for all profiles"),
                    }
                    .into());
                }
                _ => {}
            }
            interest.extend(fw.events_by_plugin());
            profiles.insert(fw.profile_name().to_string(), Arc::new(fw));
        }
        let sort = sort
            .and_then(|(_, p)| p)
            .ok_or_else(|| ConfigError::Invalid {
                field: "profiles".into(),
                message: "no queue sort plugin".into(),
            })?;
        let (initial, max) = self.config.backoff();
        let (tx, rx) = std::sync::mpsc::channel();
        Ok(SchedulerCore {
            cache: Cache::new(),
            queue: SchedulingQueue::new(sort, initial, max),
            profiles,
            interest,
            classes: PriorityClasses::default(),
            tx,
            rx,
            reports: None,
            runtime,
            metrics: Arc::new(Metrics::default()),
            handle,
            cycles: 0,
            synced: (false, false),
        })
    }

    /// Start the scheduler: watches, the scheduling thread and the reporter.
    /// Must be called inside a tokio runtime.
    pub fn start(self) -> Result<RunningScheduler, BuildError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BuildError::NoRuntime)?;
        let client = self.client.clone();
        let report = self.report_events;
        let mut core = self.build_core(runtime.clone())?;
        let tx = core.sender();
        let mut tasks = Vec::new();
        if let Some(client) = client {
            if report {
                let (rtx, rrx) = tokio::sync::mpsc::unbounded_channel();
                core.reports = Some(rtx);
                tasks.push(runtime.spawn(reporter(client.clone(), rrx)));
            }
            tasks.extend(spawn_watches(
                &runtime,
                client,
                tx.clone(),
                core.handle.pdbs.clone(),
            ));
        }
        let metrics = core.metrics.clone();
        let thread = std::thread::Builder::new()
            .name("kubeforge-scheduler".into())
            .spawn(move || core.run())
            .map_err(|_| BuildError::NoRuntime)?;
        Ok(RunningScheduler {
            tx,
            thread: Some(thread),
            tasks,
            metrics,
        })
    }
}

/// A running scheduler.
pub struct RunningScheduler {
    tx: Sender<Input>,
    thread: Option<std::thread::JoinHandle<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    metrics: Arc<Metrics>,
}

impl RunningScheduler {
    /// The metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Stop watching and scheduling (binding cycles in flight finish on
    /// their own).
    pub async fn stop(mut self) {
        let _ = self.tx.send(Input::Stop);
        for t in &self.tasks {
            t.abort();
        }
        if let Some(th) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || th.join()).await;
        }
    }
}

impl Drop for RunningScheduler {
    fn drop(&mut self) {
        let _ = self.tx.send(Input::Stop);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The scheduling loop's state: cache, queue, profiles.
pub struct SchedulerCore {
    cache: Cache,
    queue: SchedulingQueue,
    profiles: HashMap<String, Arc<Framework>>,
    interest: HashMap<String, Vec<ClusterEvent>>,
    classes: PriorityClasses,
    tx: Sender<Input>,
    rx: Receiver<Input>,
    reports: Option<tokio::sync::mpsc::UnboundedSender<Report>>,
    runtime: tokio::runtime::Handle,
    metrics: Arc<Metrics>,
    handle: Handle,
    cycles: u64,
    /// Whether the pod and node watches have each listed once: as
    /// kube-scheduler waits for its informers to sync, [`Self::run`] starts
    /// scheduling only then (before, a pod could be judged against an empty
    /// node list: "0/0 nodes are available").
    synced: (bool, bool),
}

impl SchedulerCore {
    /// A sender of inputs (binding cycles report through it too).
    pub fn sender(&self) -> Sender<Input> {
        self.tx.clone()
    }

    /// The cache.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The queue.
    pub fn queue(&self) -> &SchedulingQueue {
        &self.queue
    }

    /// The metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// A profile's framework.
    pub fn profile(&self, name: &str) -> Option<&Arc<Framework>> {
        self.profiles.get(name)
    }

    /// Apply every input already received; returns false after `Stop`.
    pub fn drain_inputs(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(Input::Stop) => return false,
                Ok(i) => self.handle_input(i),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn run(mut self) {
        loop {
            if !self.drain_inputs() {
                return;
            }
            self.queue.flush(Instant::now());
            if self.cycles.is_multiple_of(64) {
                self.metrics.pending(self.queue.lengths());
            }
            if self.synced == (true, true) && self.schedule_one().is_some() {
                continue;
            }
            self.metrics.pending(self.queue.lengths());
            let wait = self
                .queue
                .next_wakeup()
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            match self.rx.recv_timeout(wait) {
                Ok(Input::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(i) => self.handle_input(i),
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    fn move_pods(&mut self, event: ClusterEvent) {
        let interest = &self.interest;
        self.queue.move_on_event(event, &|plugin, ev| {
            interest.get(plugin).is_none_or(|evs| evs.contains(&ev))
        });
    }

    fn pod_info(&self, pod: Arc<Pod>) -> PodInfo {
        let mut info = PodInfo::new(pod);
        self.classes.resolve(&mut info);
        info
    }

    /// Apply one input (watch event or binding result).
    pub fn handle_input(&mut self, input: Input) {
        match input {
            Input::PodApply(pod) => self.on_pod(pod),
            Input::PodDelete(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                self.queue.delete(&uid);
                self.handle.waiting_pods.reject(&uid, "", "pod deleted");
                if self.cache.remove_pod(&uid) {
                    self.move_pods(ClusterEvent::PodDelete);
                }
            }
            Input::PodsRelisted(live) => {
                self.synced.0 = true;
                let gone: Vec<Arc<PodInfo>> = self
                    .queue
                    .pods()
                    .into_iter()
                    .filter(|p| !live.contains(&p.uid))
                    .collect();
                for p in gone {
                    self.queue.delete(&p.uid);
                }
                // Assumed pods too: the relist shows every pod that still
                // exists, bound or not, so one missing was deleted while its
                // delete event was lost; kept, it would hold its node's room
                // forever (kube's informer delivers DeletedFinalStateUnknown
                // for it, which removes an assumed pod as any other).
                let stale: Vec<String> = self
                    .cache
                    .snapshot()
                    .nodes()
                    .iter()
                    .flat_map(|n| n.pods.iter())
                    .filter(|p| !live.contains(&p.uid))
                    .map(|p| p.uid.clone())
                    .collect();
                if !stale.is_empty() {
                    for uid in stale {
                        self.handle.waiting_pods.reject(&uid, "", "pod deleted");
                        self.cache.remove_pod(&uid);
                    }
                    self.move_pods(ClusterEvent::PodDelete);
                }
            }
            Input::NodeApply(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let event = match self.cache.snapshot().get(&name) {
                    None => Some(ClusterEvent::NodeAdd),
                    Some(old) => {
                        let before = (
                            old.allocatable.clone(),
                            old.labels().clone(),
                            old.taints.clone(),
                            old.unschedulable,
                        );
                        self.cache.apply_node(node.clone());
                        let now = self.cache.snapshot().get(&name);
                        let changed = now.is_some_and(|n| {
                            (
                                n.allocatable.clone(),
                                n.labels().clone(),
                                n.taints.clone(),
                                n.unschedulable,
                            ) != before
                        });
                        changed.then_some(ClusterEvent::NodeUpdate)
                    }
                };
                if event == Some(ClusterEvent::NodeAdd) {
                    self.cache.apply_node(node);
                }
                if let Some(e) = event {
                    self.move_pods(e);
                }
            }
            Input::NodeDelete(name) => self.cache.remove_node(&name),
            Input::NodesRelisted(live) => {
                self.synced.1 = true;
                let gone: Vec<String> = self
                    .cache
                    .snapshot()
                    .nodes()
                    .iter()
                    .filter(|n| !live.contains(&n.name))
                    .map(|n| n.name.clone())
                    .collect();
                for n in gone {
                    self.cache.remove_node(&n);
                }
            }
            Input::PriorityClassApply(pc) => {
                self.classes.apply(&pc);
                self.reresolve_priorities();
            }
            Input::PriorityClassDelete(name) => {
                self.classes.remove(&name);
                self.reresolve_priorities();
            }
            Input::Activate => self.move_pods(ClusterEvent::Other),
            Input::Bound {
                pod,
                node,
                profile,
                started,
            } => {
                self.metrics
                    .attempt("scheduled", &profile, started.elapsed());
                self.queue.clear_nomination(&pod.uid);
                if let Some(r) = &self.reports {
                    let _ = r.send(Report::Scheduled { pod, node });
                }
            }
            Input::BindFailed {
                info,
                node,
                status,
                profile,
                started,
            } => {
                let _ = node;
                // No longer assumed: deleted meanwhile (a Permit wait it was
                // rejected from, or a relist) or seen bound. kube's
                // handleSchedulingFailure queues it again only if its
                // informer still has it unassigned.
                let assumed = self.cache.is_assumed(&info.pod.uid);
                self.cache.forget(&info.pod.uid);
                self.metrics.attempt("error", &profile, started.elapsed());
                if !assumed {
                    tracing::debug!(pod = %info.pod.key(), "binding cycle failed for a pod no longer pending");
                    return;
                }
                let message = status.message();
                if message.contains("is already assigned to node") {
                    // Another scheduler bound it first; the watch brings the bound pod.
                    tracing::debug!(pod = %info.pod.key(), "already bound by someone else");
                    return;
                }
                let gone = message.contains("not found") || message.contains("NotFound");
                let pod = info.pod.clone();
                if !gone {
                    if status.is_rejected() {
                        self.queue
                            .add_unschedulable(*info, vec![status.plugin.to_string()]);
                    } else {
                        self.queue.add_backoff(*info);
                    }
                }
                self.report_failure(
                    &pod,
                    if status.is_rejected() {
                        "Unschedulable"
                    } else {
                        "SchedulerError"
                    },
                    message,
                    None,
                );
            }
            Input::Stop => {}
        }
    }

    fn reresolve_priorities(&mut self) {
        for p in self.queue.pods() {
            let info = self.pod_info(p.pod.clone());
            let admitted = self.admit(&info);
            self.queue.add(Arc::new(info), admitted);
        }
        self.move_pods(ClusterEvent::Other);
    }

    fn admit(&self, info: &PodInfo) -> bool {
        let name = info
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or(crate::config::DEFAULT_SCHEDULER_NAME);
        self.profiles
            .get(name)
            .is_some_and(|fw| fw.run_pre_enqueue(info).is_success())
    }

    fn on_pod(&mut self, pod: Arc<Pod>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let status = pod.status.as_ref();
        let terminal = status
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        if let Some(node) = node {
            self.queue.delete(&uid);
            if terminal {
                if self.cache.remove_pod(&uid) {
                    self.move_pods(ClusterEvent::PodDelete);
                }
                return;
            }
            let confirming = self.cache.is_assumed(&uid);
            let known = self.cache.contains(&uid);
            let info = Arc::new(self.pod_info(pod));
            self.cache.apply_bound_pod(info, &node);
            if !known && !confirming {
                self.move_pods(ClusterEvent::PodAdd);
            }
            return;
        }
        if self.cache.is_assumed(&uid) {
            return; // binding in flight
        }
        if terminal {
            // Finished before it was placed (a pod failed by the API's
            // eviction or by its deadline): nothing left to schedule.
            self.queue.delete(&uid);
            return;
        }
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or(crate::config::DEFAULT_SCHEDULER_NAME);
        if !self.profiles.contains_key(name) {
            return; // another scheduler's pod
        }
        if pod.metadata.deletion_timestamp.is_some() {
            self.queue.delete(&uid);
            return;
        }
        let info = Arc::new(self.pod_info(pod));
        self.queue.update_nomination(info.clone());
        let admitted = self.admit(&info);
        self.queue.add(info, admitted);
    }

    fn report_failure(
        &self,
        pod: &Arc<PodInfo>,
        reason: &'static str,
        message: String,
        nominated: Option<String>,
    ) {
        tracing::debug!(pod = %pod.key(), %reason, %message, "scheduling failed");
        if let Some(r) = &self.reports {
            let _ = r.send(Report::Failed {
                pod: pod.clone(),
                reason,
                message,
                nominated,
            });
        }
    }

    /// Pop one pod and run its scheduling cycle (binding is spawned).
    /// `None` when the active queue is empty.
    pub fn schedule_one(&mut self) -> Option<CycleOutcome> {
        let info = self.queue.pop()?;
        self.cycles += 1;
        let started = Instant::now();
        let pod = info.pod.clone();
        if self.cache.contains(&pod.uid) {
            self.queue.done(&pod.uid);
            return Some(CycleOutcome::Skipped);
        }
        let profile = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.clone())
            .unwrap_or_else(|| crate::config::DEFAULT_SCHEDULER_NAME.into());
        let Some(fw) = self.profiles.get(&profile).cloned() else {
            self.queue.done(&pod.uid);
            return Some(CycleOutcome::Skipped);
        };
        let mut state = CycleState::default();
        match self.find_host(&fw, &mut state, &pod) {
            Ok(node) => Some(self.assume_and_bind(fw, state, info, node, started)),
            Err(Failure::Fit(fit)) => {
                let mut fit = *fit;
                let mut nominated = None;
                let resolvable = fit
                    .pre_filter_status
                    .as_ref()
                    .is_none_or(|s| s.code == Code::Unschedulable);
                if fw.has_post_filter() && resolvable {
                    self.metrics.preemption_attempt();
                    let snapshot = self.cache.snapshot();
                    let nominated_pods = self.queue.nominated();
                    let ctx = PostFilterContext {
                        framework: &fw,
                        snapshot,
                        nominated: &nominated_pods,
                    };
                    let (result, status) = fw.run_post_filter(&ctx, &state, &pod, &fit.statuses);
                    if status.is_success() {
                        nominated = result.and_then(|r| r.nominated_node_name);
                    } else if !status.reasons.is_empty() {
                        fit.post_filter_message = Some(status.message());
                    }
                }
                let message = fit.message();
                if let Some(node) = &nominated {
                    self.queue.nominate(pod.clone(), node);
                }
                self.metrics
                    .attempt("unschedulable", &profile, started.elapsed());
                self.report_failure(&pod, "Unschedulable", message.clone(), nominated);
                self.queue
                    .add_unschedulable(info, fit.unschedulable_plugins());
                Some(CycleOutcome::Unschedulable(message))
            }
            Err(Failure::Error(s)) => {
                let message = s.message();
                self.metrics.attempt("error", &profile, started.elapsed());
                self.report_failure(&pod, "SchedulerError", message.clone(), None);
                self.queue.add_backoff(info);
                Some(CycleOutcome::Error(message))
            }
        }
    }

    fn find_host(
        &mut self,
        fw: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
    ) -> Result<String, Failure> {
        let snapshot = self.cache.snapshot();
        let n = snapshot.nodes().len();
        let fit = |pre: Option<Status>, statuses| {
            Failure::Fit(Box::new(FitError {
                num_all_nodes: n,
                statuses,
                pre_filter_status: pre,
                post_filter_message: None,
            }))
        };
        if let Some(e) = &pod.parse_error {
            return Err(fit(
                Some(Status::unresolvable(e.clone())),
                Default::default(),
            ));
        }
        let allowed = match fw.run_pre_filter(state, pod, snapshot) {
            Ok(a) => a,
            Err(s) if s.is_rejected() => return Err(fit(Some(s), Default::default())),
            Err(s) => return Err(Failure::Error(s)),
        };
        let nominated = self.queue.nominated();
        let (feasible, statuses) = fw
            .find_nodes_that_fit(state, pod, snapshot, allowed.as_deref(), &nominated)
            .map_err(Failure::Error)?;
        match feasible.len() {
            0 => Err(fit(None, statuses)),
            1 => Ok(feasible[0].name.clone()),
            _ => {
                let scores = fw
                    .run_score(state, pod, &feasible, snapshot)
                    .map_err(Failure::Error)?;
                fw.select_host(&scores)
                    .ok_or_else(|| Failure::Error(Status::error("no host selected")))
            }
        }
    }

    fn assume_and_bind(
        &mut self,
        fw: Arc<Framework>,
        mut state: CycleState,
        info: QueuedPodInfo,
        node: String,
        started: Instant,
    ) -> CycleOutcome {
        let pod = info.pod.clone();
        self.cache.assume(pod.clone(), &node);
        let profile = fw.profile_name().to_string();
        let fail =
            |core: &mut SchedulerCore, state: &CycleState, s: Status, info: QueuedPodInfo| {
                fw.run_unreserve(state, &pod, &node);
                core.cache.forget(&pod.uid);
                core.metrics.attempt(
                    if s.is_rejected() {
                        "unschedulable"
                    } else {
                        "error"
                    },
                    &profile,
                    started.elapsed(),
                );
                let msg = s.message();
                core.report_failure(
                    &pod,
                    if s.is_rejected() {
                        "Unschedulable"
                    } else {
                        "SchedulerError"
                    },
                    msg.clone(),
                    None,
                );
                if s.is_rejected() {
                    core.queue
                        .add_unschedulable(info, vec![s.plugin.to_string()]);
                    CycleOutcome::Unschedulable(msg)
                } else {
                    core.queue.add_backoff(info);
                    CycleOutcome::Error(msg)
                }
            };
        let s = fw.run_reserve(&mut state, &pod, &node);
        if !s.is_success() {
            return fail(self, &state, s, info);
        }
        let wait = match fw.run_permit(&mut state, &pod, &node) {
            PermitOutcome::Rejected(s) => return fail(self, &state, s, info),
            PermitOutcome::Allowed => None,
            PermitOutcome::Wait(rx, t) => Some((rx, t)),
        };
        self.queue.done(&pod.uid);
        let tx = self.tx.clone();
        let state = Arc::new(state);
        let node2 = node.clone();
        self.runtime.spawn(async move {
            let s = fw
                .clone()
                .run_binding_cycle(state.clone(), pod.clone(), node2.clone(), wait)
                .await;
            let profile = fw.profile_name().to_string();
            if s.is_success() {
                let _ = tx.send(Input::Bound {
                    pod,
                    node: node2,
                    profile,
                    started,
                });
            } else {
                fw.run_unreserve(&state, &pod, &node2);
                let _ = tx.send(Input::BindFailed {
                    info: Box::new(info),
                    node: node2,
                    status: s,
                    profile,
                    started,
                });
            }
        });
        CycleOutcome::Assumed(node)
    }
}

enum Failure {
    Fit(Box<FitError>),
    Error(Status),
}

/// An object for the scheduler's cache without its managedFields, which
/// nothing here reads (kube-scheduler's informers trim them the same way):
/// a third of a typical pod's decoded size.
fn trimmed<K: kube::Resource>(mut obj: K) -> Arc<K> {
    obj.meta_mut().managed_fields = None;
    Arc::new(obj)
}

fn spawn_watches(
    rt: &tokio::runtime::Handle,
    client: kube::Client,
    tx: Sender<Input>,
    pdbs: Arc<RwLock<Vec<PdbInfo>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    // Pods
    {
        let tx = tx.clone();
        let api: kube::Api<Pod> = kube::Api::all(client.clone());
        tasks.push(rt.spawn(async move {
            let mut seen: Option<HashSet<String>> = None;
            let mut s = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(ev) = s.next().await {
                let ok = match ev {
                    Ok(watcher::Event::Apply(p)) => tx.send(Input::PodApply(trimmed(p))).is_ok(),
                    Ok(watcher::Event::InitApply(p)) => {
                        if let (Some(seen), Some(uid)) = (seen.as_mut(), p.metadata.uid.clone()) {
                            seen.insert(uid);
                        }
                        tx.send(Input::PodApply(trimmed(p))).is_ok()
                    }
                    Ok(watcher::Event::Delete(p)) => tx.send(Input::PodDelete(trimmed(p))).is_ok(),
                    Ok(watcher::Event::Init) => {
                        seen = Some(HashSet::new());
                        true
                    }
                    Ok(watcher::Event::InitDone) => tx
                        .send(Input::PodsRelisted(seen.take().unwrap_or_default()))
                        .is_ok(),
                    Err(e) => {
                        tracing::warn!(error = %e, "pod watch failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        true
                    }
                };
                if !ok {
                    return;
                }
            }
        }));
    }
    // Nodes
    {
        let tx = tx.clone();
        let api: kube::Api<Node> = kube::Api::all(client.clone());
        tasks.push(rt.spawn(async move {
            let mut seen: Option<HashSet<String>> = None;
            let mut s = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(ev) = s.next().await {
                let ok = match ev {
                    Ok(watcher::Event::Apply(n)) => tx.send(Input::NodeApply(trimmed(n))).is_ok(),
                    Ok(watcher::Event::InitApply(n)) => {
                        if let (Some(seen), Some(name)) = (seen.as_mut(), n.metadata.name.clone()) {
                            seen.insert(name);
                        }
                        tx.send(Input::NodeApply(trimmed(n))).is_ok()
                    }
                    Ok(watcher::Event::Delete(n)) => tx
                        .send(Input::NodeDelete(n.metadata.name.unwrap_or_default()))
                        .is_ok(),
                    Ok(watcher::Event::Init) => {
                        seen = Some(HashSet::new());
                        true
                    }
                    Ok(watcher::Event::InitDone) => tx
                        .send(Input::NodesRelisted(seen.take().unwrap_or_default()))
                        .is_ok(),
                    Err(e) => {
                        tracing::warn!(error = %e, "node watch failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        true
                    }
                };
                if !ok {
                    return;
                }
            }
        }));
    }
    // PriorityClasses
    {
        let tx = tx.clone();
        let api: kube::Api<PriorityClass> = kube::Api::all(client.clone());
        tasks.push(rt.spawn(async move {
            let mut s = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(ev) = s.next().await {
                let ok = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        tx.send(Input::PriorityClassApply(Box::new(p))).is_ok()
                    }
                    Ok(watcher::Event::Delete(p)) => tx
                        .send(Input::PriorityClassDelete(
                            p.metadata.name.unwrap_or_default(),
                        ))
                        .is_ok(),
                    Ok(_) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "priorityclass watch failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        true
                    }
                };
                if !ok {
                    return;
                }
            }
        }));
    }
    // PodDisruptionBudgets (read by preemption directly)
    {
        let api: kube::Api<PodDisruptionBudget> = kube::Api::all(client);
        tasks.push(rt.spawn(async move {
            let mut known: HashMap<(String, String), PdbInfo> = HashMap::new();
            let mut s = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        if let Some(info) = pdb_info(&p) {
                            known.insert((info.namespace.clone(), info.name.clone()), info);
                        }
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        known.remove(&(
                            p.metadata.namespace.unwrap_or_default(),
                            p.metadata.name.unwrap_or_default(),
                        ));
                    }
                    Ok(watcher::Event::Init) => known.clear(),
                    Ok(watcher::Event::InitDone) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "pdb watch failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
                if let Ok(mut w) = pdbs.write() {
                    *w = known.values().cloned().collect();
                }
            }
        }));
    }
    tasks
}

/// A budget as preemption reads it; `None` for one that covers no pod
/// there: an absent, empty or invalid selector (kube: "A PDB with a nil or
/// empty selector matches nothing").
fn pdb_info(p: &PodDisruptionBudget) -> Option<PdbInfo> {
    let sel = p.spec.as_ref()?.selector.as_ref()?;
    let selector = kubeforge_apimachinery::labels::Selector::from_label_selector(
        &serde_json::to_value(sel).ok()?,
    )
    .ok()
    .filter(|s| !s.is_everything() && !s.is_nothing())?;
    let status = p.status.as_ref();
    Some(PdbInfo {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        selector,
        disruptions_allowed: status.map_or(0, |s| s.disruptions_allowed),
        disrupted: status
            .and_then(|s| s.disrupted_pods.as_ref())
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default(),
    })
}

/// Writes events (events.k8s.io/v1, as kube-scheduler) and the PodScheduled
/// condition. At most 16 writes in flight; when far behind, `Scheduled`
/// events are dropped (kube-scheduler's broadcaster drops too).
async fn reporter(client: kube::Client, mut rx: tokio::sync::mpsc::UnboundedReceiver<Report>) {
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    while let Some(r) = rx.recv().await {
        if matches!(r, Report::Scheduled { .. }) && rx.len() > 10_000 {
            continue;
        }
        let Ok(permit) = sem.clone().acquire_owned().await else {
            return;
        };
        let client = client.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match r {
                Report::Scheduled { pod, node } => {
                    let note = format!(
                        "Successfully assigned {}/{} to {}",
                        pod.namespace, pod.name, node
                    );
                    post_event(&client, &pod, "Normal", "Scheduled", &note).await;
                }
                Report::Failed {
                    pod,
                    reason,
                    message,
                    nominated,
                } => {
                    post_event(&client, &pod, "Warning", "FailedScheduling", &message).await;
                    let mut status = json!({
                        "conditions": [{
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": reason,
                            "message": message,
                            "lastProbeTime": null,
                            "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                        }]
                    });
                    if let Some(n) = nominated {
                        status["nominatedNodeName"] = json!(n);
                    }
                    let api: kube::Api<Pod> = kube::Api::namespaced(client, &pod.namespace);
                    let patch = kube::api::Patch::Strategic(json!({ "status": status }));
                    if let Err(e) = api
                        .patch_status(&pod.name, &kube::api::PatchParams::default(), &patch)
                        .await
                    {
                        tracing::debug!(pod = %pod.key(), error = %e, "updating the PodScheduled condition failed");
                    }
                }
            }
        });
    }
}

/// Write an events.k8s.io/v1 Event about `pod`, as kube-scheduler's
/// recorder does (`Scheduled`, `FailedScheduling`, and `Preempted` on a
/// preemption victim).
pub(crate) async fn post_event(
    client: &kube::Client,
    pod: &PodInfo,
    type_: &str,
    reason: &str,
    note: &str,
) {
    let now = jiff::Timestamp::now();
    let ev = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": format!("{}.{:x}", pod.name, now.as_nanosecond()), "namespace": pod.namespace},
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
        "reportingController": "default-scheduler",
        "reportingInstance": "default-scheduler-kubeforge",
        "action": match reason {
            "Scheduled" => "Binding",
            "Preempted" => "Preempting",
            _ => "Scheduling",
        },
        "reason": reason,
        "note": note,
        "type": type_,
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
    });
    let req = http::Request::post(format!(
        "/apis/events.k8s.io/v1/namespaces/{}/events",
        pod.namespace
    ))
    .header("Content-Type", "application/json")
    .body(serde_json::to_vec(&ev).unwrap_or_default());
    // The created Event the server sends back is not needed: read as
    // text, not decoded (an API error still comes back as the error).
    if let Ok(req) = req
        && let Err(e) = client.request_text(req).await
    {
        tracing::debug!(pod = %pod.key(), error = %e, "writing an event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unbound_pod_that_finished_leaves_the_queue() {
        let rt = current_thread();
        let mut core = SchedulerBuilder::without_client()
            .build_core(rt.handle().clone())
            .expect("core");
        let pod = |phase: &str| -> Arc<Pod> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                    "status": {"phase": phase}
                }))
                .expect("pod"),
            )
        };
        let queued = |core: &SchedulerCore| {
            let l = core.queue().lengths();
            l.active + l.backoff + l.unschedulable + l.gated
        };
        core.handle_input(Input::PodApply(pod("Pending")));
        assert_eq!(queued(&core), 1);
        core.handle_input(Input::PodApply(pod("Failed")));
        assert_eq!(queued(&core), 0, "a finished pod stayed queued");
    }

    /// A pod assumed on the only node's only pod slot, then missing from a
    /// relist (deleted while its delete event was lost): its room is freed
    /// and the next pod fits there.
    #[test]
    fn a_relist_drops_an_assumed_pod_that_is_gone() {
        let rt = current_thread();
        let mut core = one_node_core(&rt, SchedulerBuilder::without_client(), 1);
        let pod = |uid: &str| -> Arc<Pod> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": uid, "namespace": "default", "uid": uid},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}))
                .expect("pod"),
            )
        };
        core.handle_input(Input::PodApply(pod("a")));
        assert_eq!(
            core.schedule_one(),
            Some(CycleOutcome::Assumed("n1".into()))
        );
        assert!(core.cache().is_assumed("a"));
        core.handle_input(Input::PodsRelisted(HashSet::new()));
        assert!(
            !core.cache().contains("a"),
            "the deleted pod is still assumed"
        );
        core.handle_input(Input::PodApply(pod("b")));
        assert_eq!(
            core.schedule_one(),
            Some(CycleOutcome::Assumed("n1".into())),
            "the gone pod's room was not freed"
        );
    }

    /// A Permit plugin that makes every pod wait.
    struct Hold;

    impl crate::framework::Plugin for Hold {
        fn name(&self) -> &str {
            "Hold"
        }
        fn as_permit(&self) -> Option<&dyn crate::framework::PermitPlugin> {
            Some(self)
        }
    }

    impl crate::framework::PermitPlugin for Hold {
        fn permit(
            &self,
            _: &mut crate::framework::CycleState,
            _: &PodInfo,
            _: &str,
        ) -> (Status, Duration) {
            (
                Status::new(crate::framework::Code::Wait, "held"),
                Duration::from_secs(600),
            )
        }
    }

    /// A pod deleted while it waits at Permit is rejected there (kube's
    /// RejectWaitingPod); its failed binding cycle must not put it back in
    /// the queue, where it would be scheduled again as a ghost.
    #[test]
    fn a_pod_deleted_at_permit_is_not_queued_again() {
        let rt = current_thread();
        let mut core = holding_core(&rt, 10);
        let pod: Arc<Pod> = Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "w", "namespace": "default", "uid": "w"},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}))
            .expect("pod"),
        );
        core.handle_input(Input::PodApply(pod.clone()));
        assert_eq!(
            core.schedule_one(),
            Some(CycleOutcome::Assumed("n1".into()))
        );
        core.handle_input(Input::PodDelete(pod));
        // Let the binding cycle see the rejection and report it.
        let failed = next_bind_failure(&rt, &mut core);
        core.handle_input(failed);
        let l = core.queue().lengths();
        assert_eq!(
            l.active + l.backoff + l.unschedulable + l.gated,
            0,
            "the deleted pod was queued again: {l:?}"
        );
        assert!(!core.cache().contains("w"));
    }

    /// A core whose every pod waits at Permit (the Hold plugin), with one
    /// node of `pods` slots.
    fn holding_core(rt: &tokio::runtime::Runtime, pods: u32) -> SchedulerCore {
        let mut registry = crate::framework::Registry::new();
        registry
            .register("Hold", |_, _| {
                Ok(Arc::new(Hold) as Arc<dyn crate::framework::Plugin>)
            })
            .expect("register");
        let cfg = SchedulerConfiguration::from_yaml(
            "profiles:\n- plugins:\n    permit:\n      enabled: [{name: Hold}]\n",
        )
        .expect("config");
        one_node_core(
            rt,
            SchedulerBuilder::without_client()
                .plugins(registry)
                .config(cfg),
            pods,
        )
    }

    /// A current-thread runtime for a core's binding cycles.
    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// The core `builder` makes, knowing one node `n1` (4 CPUs, 8 GiB) with
    /// room for `pods` pods.
    fn one_node_core(
        rt: &tokio::runtime::Runtime,
        builder: SchedulerBuilder,
        pods: u32,
    ) -> SchedulerCore {
        let mut core = builder.build_core(rt.handle().clone()).expect("core");
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": pods.to_string()}}}))
        .expect("node");
        core.handle_input(Input::NodeApply(Arc::new(node)));
        core
    }

    /// The binding-cycle failure the core reports next, driving `rt`.
    fn next_bind_failure(rt: &tokio::runtime::Runtime, core: &mut SchedulerCore) -> Input {
        rt.block_on(async {
            for _ in 0..1000 {
                match core.rx.try_recv() {
                    Ok(input @ Input::BindFailed { .. }) => return Some(input),
                    Ok(_) => {}
                    Err(_) => tokio::task::yield_now().await,
                }
            }
            None
        })
        .expect("a binding cycle failed")
    }

    /// A preemption victim waiting at Permit is rejected there ("preempted",
    /// kube's PreemptPod) rather than deleted: it goes back to the queue,
    /// and the preemptor is nominated for its room.
    #[test]
    fn a_victim_waiting_at_permit_is_rejected_not_deleted() {
        let rt = current_thread();
        let mut core = holding_core(&rt, 1);
        let pod = |name: &str, priority: i32| -> Arc<Pod> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": "default", "uid": name},
                    "spec": {"priority": priority, "containers": [{"name": "c", "image": "nginx"}]}}))
                .expect("pod"),
            )
        };
        core.handle_input(Input::PodApply(pod("low", 0)));
        assert_eq!(
            core.schedule_one(),
            Some(CycleOutcome::Assumed("n1".into()))
        );
        core.handle_input(Input::PodApply(pod("high", 100)));
        assert!(matches!(
            core.schedule_one(),
            Some(CycleOutcome::Unschedulable(_))
        ));
        let Input::BindFailed { info, status, .. } = next_bind_failure(&rt, &mut core) else {
            unreachable!()
        };
        assert_eq!(info.pod.uid, "low");
        assert!(
            status.message().contains("preempted"),
            "{}",
            status.message()
        );
        core.handle_input(Input::BindFailed {
            info,
            node: "n1".into(),
            status,
            profile: "default-scheduler".into(),
            started: Instant::now(),
        });
        assert!(
            !core.cache().contains("low"),
            "the rejected victim still holds its room"
        );
        assert_eq!(
            core.queue().lengths().unschedulable,
            2,
            "both wait: low requeued, high nominated"
        );
    }

    /// A scheduler started after another one preempted for a pod: the
    /// pod's `status.nominatedNodeName` holds the room its terminating
    /// victim is freeing, so a lower-priority pod arriving now does not take
    /// it (kube's nominator reads the status on every add).
    #[test]
    fn a_nomination_in_the_status_holds_the_room_after_a_restart() {
        let rt = current_thread();
        let mut core = one_node_core(&rt, SchedulerBuilder::without_client(), 10);
        let pod = |name: &str, cpu: &str, priority: i32, extra: serde_json::Value| -> Input {
            let mut p = serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": name},
                "spec": {"priority": priority, "containers": [{"name": "c", "image": "nginx",
                    "resources": {"requests": {"cpu": cpu}}}]}});
            if let Some(spec) = extra.get("spec").and_then(|v| v.as_object()) {
                for (k, v) in spec {
                    p["spec"][k] = v.clone();
                }
            }
            for key in ["metadata", "status"] {
                if let Some(m) = extra.get(key).and_then(|v| v.as_object()) {
                    for (k, v) in m {
                        p[key][k] = v.clone();
                    }
                }
            }
            Input::PodApply(Arc::new(serde_json::from_value(p).expect("pod")))
        };
        // The earlier scheduler's victim, still terminating.
        core.handle_input(pod(
            "victim",
            "2",
            0,
            serde_json::json!({"spec": {"nodeName": "n1"},
                "metadata": {"deletionTimestamp": "2026-12-01T00:00:00Z"},
                "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                    "reason": "PreemptionByScheduler"}]}}),
        ));
        core.handle_input(pod(
            "big",
            "3",
            100,
            serde_json::json!({"status": {"nominatedNodeName": "n1"}}),
        ));
        assert!(
            matches!(core.schedule_one(), Some(CycleOutcome::Unschedulable(_))),
            "big waits for its victim"
        );
        core.handle_input(pod("small", "1", 0, serde_json::json!({})));
        let outcome = core.schedule_one();
        assert!(
            matches!(outcome, Some(CycleOutcome::Unschedulable(_))),
            "the small pod took the room held for big: {outcome:?}"
        );
    }

    fn budget(v: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(v).expect("budget")
    }

    #[test]
    fn a_budget_with_no_or_an_empty_selector_covers_no_pod() {
        let none = budget(serde_json::json!({"metadata": {"name": "a"}, "spec": {}}));
        assert!(pdb_info(&none).is_none());
        let empty =
            budget(serde_json::json!({"metadata": {"name": "b"}, "spec": {"selector": {}}}));
        assert!(pdb_info(&empty).is_none());
        let real = budget(
            serde_json::json!({"metadata": {"name": "c", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                "expectedPods": 3, "disruptedPods": {"web-1": "2026-12-01T00:00:00Z"}}}),
        );
        let info = pdb_info(&real).expect("covers app=web");
        assert_eq!(info.disruptions_allowed, 1);
        assert!(info.disrupted.contains("web-1"));
    }
}
