//! The [`Framework`]: one profile's plugins per extension point, built from
//! the configuration and the registry, and the code that runs each point in
//! kube-scheduler's order (filter with the adaptive node sampling, scoring
//! with weights and normalization, Permit waits, the binding cycle).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::interface::*;
use super::registry::{Handle, Registry};
use super::snapshot::Snapshot;
use super::types::{NodeInfo, PodInfo};
use crate::config::{self, ConfigError, Profile};
use crate::extender::Extender;

/// The longest a pod may wait at Permit.
pub const MAX_PERMIT_WAIT: Duration = Duration::from_secs(15 * 60);

/// The minimum number of feasible nodes to find before scoring.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The minimum adaptive percentage.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;

/// How many feasible nodes to look for among `n` (kube-scheduler's
/// `numFeasibleNodesToFind`): all below 100 nodes; otherwise
/// `max(100, n·pct/100)` with `pct = max(5, 50 − n/125)` when adaptive (0).
pub fn num_feasible_nodes_to_find(percentage: i32, n: usize) -> usize {
    if n < MIN_FEASIBLE_NODES_TO_FIND || percentage >= 100 {
        return n;
    }
    let pct = if percentage <= 0 {
        (50usize.saturating_sub(n / 125)).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    } else {
        percentage as usize
    };
    (n * pct / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

struct Entry {
    name: String,
    /// The name again, interned, carried by the statuses this plugin
    /// returns.
    id: PluginName,
    plugin: Arc<dyn Plugin>,
    weight: i64,
}

/// Plugins of one profile, ordered per extension point.
pub struct Framework {
    profile_name: String,
    percentage_of_nodes_to_score: i32,
    plugins: HashMap<String, Arc<dyn Plugin>>,
    pre_enqueue: Vec<Entry>,
    queue_sort: Vec<Entry>,
    pre_filter: Vec<Entry>,
    filter: Vec<Entry>,
    post_filter: Vec<Entry>,
    pre_score: Vec<Entry>,
    score: Vec<Entry>,
    reserve: Vec<Entry>,
    permit: Vec<Entry>,
    pre_bind: Vec<Entry>,
    bind: Vec<Entry>,
    post_bind: Vec<Entry>,
    extenders: Vec<Arc<Extender>>,
    handle: Handle,
    next_start: AtomicUsize,
    /// Nodes with the pods nominated to them added, kept between cycles
    /// (see [`NominatedCopies`]).
    nominated_copies: std::sync::Mutex<NominatedCopies>,
    /// Where the nominated nodes are in the snapshot, kept between cycles.
    nominated_positions: std::sync::Mutex<NominatedPositions>,
    rng: AtomicU64,
}

/// The outcome of Permit.
pub enum PermitOutcome {
    /// Go on to binding.
    Allowed,
    /// Denied: unreserve and requeue.
    Rejected(Status),
    /// Wait for the plugins that said Wait (or the timeout).
    Wait(tokio::sync::oneshot::Receiver<Status>, Duration),
}

/// No node fits: why, per node.
#[derive(Debug, Clone)]
pub struct FitError {
    /// Nodes considered.
    pub num_all_nodes: usize,
    /// Why each node was rejected.
    pub statuses: NodeToStatus,
    /// A reason that applies to every node (PreFilter rejection).
    pub pre_filter_status: Option<Status>,
    /// What PostFilter (preemption) said.
    pub post_filter_message: Option<String>,
}

impl FitError {
    /// kube-scheduler's message: "0/5 nodes are available: 3 Insufficient
    /// cpu, 2 node(s) had untolerated taint {k: v}." — reasons counted over
    /// nodes and sorted, then PostFilter's message.
    pub fn message(&self) -> String {
        let mut msg = if let Some(s) = &self.pre_filter_status {
            format!(
                "0/{} nodes are available: {}.",
                self.num_all_nodes,
                s.message()
            )
        } else {
            histogram_message(self.num_all_nodes, &self.statuses)
        };
        if let Some(pf) = &self.post_filter_message {
            msg.push(' ');
            msg.push_str(pf);
        }
        msg
    }

    /// Plugins that rejected the pod on some node.
    pub fn unschedulable_plugins(&self) -> Vec<String> {
        let mut v: Vec<&str> = self
            .statuses
            .distinct()
            .map(|(s, _)| s)
            .chain(self.pre_filter_status.iter())
            .map(|s| &*s.plugin)
            .filter(|p| !p.is_empty())
            .collect();
        v.sort_unstable();
        v.dedup();
        v.into_iter().map(str::to_string).collect()
    }
}

/// `"0/N nodes are available: <count> <reason>, …."` with the reasons sorted.
pub fn histogram_message(n: usize, statuses: &NodeToStatus) -> String {
    let mut counts: HashMap<&str, usize, super::topology_counts::FastBuild> = HashMap::default();
    for (s, nodes) in statuses.distinct() {
        for r in &s.reasons {
            *counts.entry(r.as_ref()).or_default() += nodes;
        }
    }
    let mut reasons: Vec<String> = counts
        .into_iter()
        .map(|(r, c)| format!("{c} {r}"))
        .collect();
    reasons.sort();
    format!("0/{n} nodes are available: {}.", reasons.join(", "))
}

impl Framework {
    /// Build a profile's framework: instantiate its plugins from the registry
    /// with their args and resolve each extension point's list.
    pub fn new(
        profile_index: usize,
        profile: &Profile,
        global_percentage: i32,
        registry: &Registry,
        handle: Handle,
        extenders: Vec<Arc<Extender>>,
    ) -> Result<Framework, ConfigError> {
        let invalid = |field: String, message: String| ConfigError::Invalid { field, message };
        let mut args: HashMap<&str, &serde_json::Value> = HashMap::new();
        for (j, pc) in profile.plugin_config.iter().enumerate() {
            if registry.get(&pc.name).is_none() {
                return Err(invalid(
                    format!("profiles[{profile_index}].pluginConfig[{j}].name"),
                    format!("{:?}: plugin not registered", pc.name),
                ));
            }
            args.insert(pc.name.as_str(), &pc.args);
        }
        // Every plugin the profile could use: defaults kept by multiPoint and
        // every explicitly enabled one.
        let mut wanted: Vec<(String, String)> = Vec::new();
        for (name, _) in config::DEFAULT_PLUGINS {
            if !profile
                .plugins
                .multi_point
                .disabled
                .iter()
                .any(|d| d.name == "*" || d.name == *name)
            {
                wanted.push((name.to_string(), "default plugins".into()));
            }
        }
        for (point, set) in profile.plugins.points() {
            for (j, r) in set.enabled.iter().enumerate() {
                if !wanted.iter().any(|w| w.0 == r.name) {
                    wanted.push((
                        r.name.clone(),
                        format!("profiles[{profile_index}].plugins.{point}.enabled[{j}].name"),
                    ));
                }
            }
        }
        let mut plugins: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
        for (name, field) in &wanted {
            let Some(factory) = registry.get(name) else {
                return Err(invalid(
                    field.clone(),
                    format!("{name:?}: plugin not registered"),
                ));
            };
            let plugin = factory(args.get(name.as_str()).copied(), &handle).map_err(|e| {
                let j = profile
                    .plugin_config
                    .iter()
                    .position(|p| &p.name == name)
                    .unwrap_or(0);
                invalid(
                    format!("profiles[{profile_index}].pluginConfig[{j}].args"),
                    format!("plugin {name}: {e}"),
                )
            })?;
            plugins.insert(name.clone(), plugin);
        }
        type Check = fn(&dyn Plugin) -> bool;
        let p = &profile.plugins;
        let points: [(&str, &config::PluginSet, Check); 12] = [
            ("preEnqueue", &p.pre_enqueue, |x| {
                x.as_pre_enqueue().is_some()
            }),
            ("queueSort", &p.queue_sort, |x| x.as_queue_sort().is_some()),
            ("preFilter", &p.pre_filter, |x| x.as_pre_filter().is_some()),
            ("filter", &p.filter, |x| x.as_filter().is_some()),
            ("postFilter", &p.post_filter, |x| {
                x.as_post_filter().is_some()
            }),
            ("preScore", &p.pre_score, |x| x.as_pre_score().is_some()),
            ("score", &p.score, |x| x.as_score().is_some()),
            ("reserve", &p.reserve, |x| x.as_reserve().is_some()),
            ("permit", &p.permit, |x| x.as_permit().is_some()),
            ("preBind", &p.pre_bind, |x| x.as_pre_bind().is_some()),
            ("bind", &p.bind, |x| x.as_bind().is_some()),
            ("postBind", &p.post_bind, |x| x.as_post_bind().is_some()),
        ];
        let mut lists: Vec<Vec<Entry>> = Vec::new();
        for (point, set, check) in points {
            let implements = |n: &str| plugins.get(n).is_some_and(|pl| check(pl.as_ref()));
            let resolved = config::resolve_point(profile_index, p, point, set, &implements);
            let mut list = Vec::new();
            for (name, weight, field) in resolved {
                let Some(plugin) = plugins.get(&name) else {
                    return Err(invalid(
                        format!("{field}.name"),
                        format!("{name:?}: plugin not registered"),
                    ));
                };
                if !check(plugin.as_ref()) {
                    return Err(invalid(
                        format!("{field}.name"),
                        format!("{name:?}: plugin does not extend the {point} extension point"),
                    ));
                }
                list.push(Entry {
                    id: PluginName::new(&name),
                    name,
                    plugin: plugin.clone(),
                    weight,
                });
            }
            lists.push(list);
        }
        let mut it = lists.into_iter();
        let mut next = || it.next().unwrap_or_default();
        let fw = Framework {
            profile_name: profile
                .scheduler_name
                .clone()
                .unwrap_or_else(|| config::DEFAULT_SCHEDULER_NAME.into()),
            percentage_of_nodes_to_score: profile
                .percentage_of_nodes_to_score
                .unwrap_or(global_percentage),
            plugins,
            pre_enqueue: next(),
            queue_sort: next(),
            pre_filter: next(),
            filter: next(),
            post_filter: next(),
            pre_score: next(),
            score: next(),
            reserve: next(),
            permit: next(),
            pre_bind: next(),
            bind: next(),
            post_bind: next(),
            extenders,
            handle,
            next_start: AtomicUsize::new(0),
            nominated_copies: Default::default(),
            nominated_positions: Default::default(),
            rng: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
        };
        if fw.queue_sort.len() != 1 {
            return Err(invalid(
                format!("profiles[{profile_index}].plugins.queueSort"),
                format!(
                    "{} plugins enabled: exactly one queue sort plugin is required",
                    fw.queue_sort.len()
                ),
            ));
        }
        if fw.bind.is_empty() && !fw.extenders.iter().any(|e| e.is_binder()) {
            return Err(invalid(
                format!("profiles[{profile_index}].plugins.bind"),
                "no bind plugin enabled: at least one is required".into(),
            ));
        }
        Ok(fw)
    }

    /// The profile's `schedulerName`.
    pub fn profile_name(&self) -> &str {
        &self.profile_name
    }

    /// The handle plugins were built with.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// A plugin instance by name.
    pub fn plugin(&self, name: &str) -> Option<&Arc<dyn Plugin>> {
        self.plugins.get(name)
    }

    /// The names enabled at each point, for logs and tests:
    /// `(point, [(name, weight)])`.
    pub fn enabled(&self) -> Vec<(&'static str, Vec<(String, i64)>)> {
        let f = |l: &Vec<Entry>| l.iter().map(|e| (e.name.clone(), e.weight)).collect();
        vec![
            ("preEnqueue", f(&self.pre_enqueue)),
            ("queueSort", f(&self.queue_sort)),
            ("preFilter", f(&self.pre_filter)),
            ("filter", f(&self.filter)),
            ("postFilter", f(&self.post_filter)),
            ("preScore", f(&self.pre_score)),
            ("score", f(&self.score)),
            ("reserve", f(&self.reserve)),
            ("permit", f(&self.permit)),
            ("preBind", f(&self.pre_bind)),
            ("bind", f(&self.bind)),
            ("postBind", f(&self.post_bind)),
        ]
    }

    /// The QueueSort plugin.
    pub fn queue_sort(&self) -> Option<Arc<dyn Plugin>> {
        self.queue_sort.first().map(|e| e.plugin.clone())
    }

    /// The events each plugin wants for requeueing, by plugin name.
    pub fn events_by_plugin(&self) -> HashMap<String, Vec<ClusterEvent>> {
        self.plugins
            .iter()
            .map(|(n, p)| (n.clone(), p.events_to_register()))
            .collect()
    }

    /// PreEnqueue: all must succeed.
    pub fn run_pre_enqueue(&self, pod: &PodInfo) -> Status {
        for e in &self.pre_enqueue {
            if let Some(p) = e.plugin.as_pre_enqueue() {
                let s = p.pre_enqueue(pod);
                if !s.is_success() {
                    return s.with_plugin_id(&e.id);
                }
            }
        }
        Status::success()
    }

    /// PreFilter: returns the nodes to consider (`None`: all) or the status
    /// that rejected the pod.
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Result<Option<Vec<String>>, Status> {
        let mut allowed: Option<Vec<String>> = None;
        for e in &self.pre_filter {
            let Some(p) = e.plugin.as_pre_filter() else {
                continue;
            };
            let (result, status) = p.pre_filter(state, pod, snapshot);
            match status.code {
                Code::Success => {}
                Code::Skip => {
                    state.skip_filter.push(e.name.clone());
                    continue;
                }
                _ => return Err(status.with_plugin_id(&e.id)),
            }
            if let Some(names) = result.and_then(|r| r.node_names) {
                allowed = Some(match allowed {
                    None => names,
                    Some(prev) => prev.into_iter().filter(|n| names.contains(n)).collect(),
                });
            }
        }
        state.filter_skip_mask = 0;
        for (i, e) in self.filter.iter().enumerate().take(64) {
            if state.skip_filter.contains(&e.name) {
                state.filter_skip_mask |= 1 << i;
            }
        }
        Ok(allowed)
    }

    /// PreFilter AddPod extensions (preemption dry runs).
    pub fn run_pre_filter_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for e in &self.pre_filter {
            if state.skip_filter.contains(&e.name) {
                continue;
            }
            if let Some(x) = e.plugin.as_pre_filter().and_then(|p| p.extensions()) {
                let s = x.add_pod(state, pod, to_add, node);
                if !s.is_success() {
                    return s.with_plugin_id(&e.id);
                }
            }
        }
        Status::success()
    }

    /// PreFilter RemovePod extensions (preemption dry runs).
    pub fn run_pre_filter_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for e in &self.pre_filter {
            if state.skip_filter.contains(&e.name) {
                continue;
            }
            if let Some(x) = e.plugin.as_pre_filter().and_then(|p| p.extensions()) {
                let s = x.remove_pod(state, pod, to_remove, node);
                if !s.is_success() {
                    return s.with_plugin_id(&e.id);
                }
            }
        }
        Status::success()
    }

    /// Filter one node: stops at the first plugin that rejects it.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for (i, e) in self.filter.iter().enumerate() {
            if i < 64 && state.filter_skip_mask & (1 << i) != 0 {
                continue;
            }
            if let Some(p) = e.plugin.as_filter() {
                let s = p.filter(state, pod, node);
                if !s.is_success() {
                    return s.with_plugin_id(&e.id);
                }
            }
        }
        Status::success()
    }

    /// Whether the pod passes every filter on this node: the verdict of
    /// [`run_filter`](Self::run_filter) without building statuses (an Error
    /// counts as not passing).
    pub fn run_filter_passes(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> bool {
        for (i, e) in self.filter.iter().enumerate() {
            if i < 64 && state.filter_skip_mask & (1 << i) != 0 {
                continue;
            }
            if let Some(p) = e.plugin.as_filter()
                && !matches!(p.passes(state, pod, node), Ok(true))
            {
                return false;
            }
        }
        true
    }

    /// The filters this pod runs in this cycle, in order (those its
    /// PreFilter skipped left out): what [`run_filter`](Self::run_filter)
    /// asks on every node.
    pub fn active_filters<'s>(
        &'s self,
        state: &CycleState,
    ) -> impl Iterator<Item = &'s dyn FilterPlugin> + 's {
        let mask = state.filter_skip_mask;
        self.filter
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i >= 64 || mask & (1 << i) == 0)
            .filter_map(|(_, e)| e.plugin.as_filter())
    }

    /// Where each of the snapshot's nodes has its entries in `nominated`
    /// (sorted by node name), by the node's position in the snapshot:
    /// (first, count), count 0 for none; empty when nothing is nominated.
    /// One lookup per nominated pod (an integer hash of its shared node
    /// name, kept between cycles) instead of a search of the list by name
    /// per node.
    pub(crate) fn nominated_index(
        &self,
        snapshot: &Snapshot,
        nominated: &[(Arc<str>, Arc<PodInfo>)],
    ) -> Vec<(u32, u32)> {
        nominated_starts(
            snapshot,
            nominated,
            self.nominated_positions.try_lock().ok().as_deref_mut(),
        )
    }

    /// Filter with the pods nominated to this node (by earlier preemptions,
    /// with at least this pod's priority) counted as if already there; the
    /// node must pass both with and without them. `nominated` is (node, pod)
    /// sorted by node name, as [`SchedulingQueue::nominated`] gives it.
    ///
    /// [`SchedulingQueue::nominated`]: crate::queue::SchedulingQueue::nominated
    pub fn run_filter_with_nominated(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[(Arc<str>, Arc<PodInfo>)],
    ) -> Status {
        let extra = nominated_on(pod, &node.name, nominated);
        self.run_filter_with_extra(state, pod, node, extra, || {
            self.has_active_extensions(state)
        })
    }

    /// [`run_filter_with_nominated`](Self::run_filter_with_nominated) with
    /// the node's own entries of the nominated list already found (`run`:
    /// every entry for this node, as [`nominated_starts`] locates them) and
    /// whether PreFilter extensions are active already known.
    fn run_filter_with_run(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        run: &[(Arc<str>, Arc<PodInfo>)],
        extensions: bool,
    ) -> Status {
        let extra = run
            .iter()
            .filter(|(_, p)| nominated_counts(pod, p))
            .map(|(_, p)| p);
        self.run_filter_with_extra(state, pod, node, extra, || extensions)
    }

    /// Filter `node` with the nominated pods `extra` added, then as it is;
    /// `extensions` (asked only when there is a pod to add) tells whether a
    /// PreFilter extension would change the cycle state.
    fn run_filter_with_extra<'p>(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        extra: impl Iterator<Item = &'p Arc<PodInfo>>,
        extensions: impl FnOnce() -> bool,
    ) -> Status {
        let mut extra = extra.peekable();
        if extra.peek().is_some() {
            // The node with its nominated pods, in a scratch copy that keeps
            // its allocations from one call to the next; the cycle state is
            // copied only when a PreFilter extension would change it.
            let s = with_scratch(node, |with| {
                let mut st = extensions().then(|| state.clone());
                for p in extra {
                    with.add_pod(p.clone());
                    if let Some(st) = st.as_mut() {
                        let s = self.run_pre_filter_add_pod(st, pod, p, with);
                        if !s.is_success() {
                            return s;
                        }
                    }
                }
                self.run_filter(st.as_ref().unwrap_or(state), pod, with)
            });
            if !s.is_success() {
                return s;
            }
        }
        self.run_filter(state, pod, node)
    }

    /// [`run_filter_with_run`](Self::run_filter_with_run) without PreFilter
    /// extensions, filtering a kept copy of the node with its nominated pods
    /// when nothing it was made from changed (see [`NominatedCopies`]).
    fn run_filter_with_copy(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        idx: usize,
        node: &NodeInfo,
        run: &[(Arc<str>, Arc<PodInfo>)],
        copies: &mut NominatedCopies,
    ) -> Status {
        // Which of the node's nominated pods count, worked out once (the
        // UID comparison is a string comparison).
        let mut counted = std::mem::take(&mut copies.counted);
        counted.clear();
        counted.extend(
            run.iter()
                .enumerate()
                .filter(|(_, (_, p))| nominated_counts(pod, p))
                .map(|(i, _)| i),
        );
        let s = if counted.is_empty() {
            self.run_filter(state, pod, node)
        } else {
            let copy = copies.get(idx, node, run, &counted);
            let s = self.run_filter(state, pod, copy);
            if s.is_success() {
                self.run_filter(state, pod, node)
            } else {
                s
            }
        };
        copies.counted = counted;
        s
    }

    /// Whether a PreFilter extension (AddPod/RemovePod) runs in this cycle:
    /// without one, adding or removing pods in a dry run leaves the cycle
    /// state as it is, so it need not be copied.
    pub fn has_active_extensions(&self, state: &CycleState) -> bool {
        self.pre_filter.iter().any(|e| {
            !state.skip_filter.contains(&e.name)
                && e.plugin
                    .as_pre_filter()
                    .and_then(|p| p.extensions())
                    .is_some()
        })
    }

    /// Find feasible nodes: filter from a rotating start until enough are
    /// found (the adaptive percentage), then ask the extenders.
    pub fn find_nodes_that_fit<'a>(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &'a Snapshot,
        allowed: Option<&[String]>,
        nominated: &[(Arc<str>, Arc<PodInfo>)],
    ) -> Result<(Vec<&'a NodeInfo>, NodeToStatus), Status> {
        let nodes = snapshot.nodes();
        let n = nodes.len();
        let mut statuses = NodeToStatus::default();
        let mut feasible: Vec<&NodeInfo> = Vec::new();
        if n == 0 {
            return Ok((feasible, statuses));
        }
        if let Some(names) = allowed {
            for name in names {
                if let Some(node) = snapshot.get(name) {
                    let s = self.run_filter_with_nominated(state, pod, node, nominated);
                    if s.is_success() {
                        feasible.push(node);
                    } else if s.code == Code::Error {
                        return Err(s);
                    } else {
                        statuses.insert(node.id.clone(), s);
                    }
                }
            }
            // Nodes the PreFilter ruled out count as unresolvable.
            for node in nodes {
                if !names.contains(&node.name) {
                    statuses.insert(
                        node.id.clone(),
                        Status::unresolvable("node(s) didn't satisfy plugin(s) [PreFilter]"),
                    );
                }
            }
        } else {
            let want = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, n);
            let start = self.next_start.load(Ordering::Relaxed) % n;
            let mut processed = 0;
            // The filters this pod runs, resolved once rather than per node.
            let active: Vec<(&PluginName, &dyn FilterPlugin)> = self
                .filter
                .iter()
                .enumerate()
                .filter(|(i, _)| *i >= 64 || state.filter_skip_mask & (1 << i) == 0)
                .filter_map(|(_, e)| e.plugin.as_filter().map(|p| (&e.id, p)))
                .collect();
            let no_filters = active.is_empty();
            // Each node's entries in the nominated list, found once per
            // cycle (one lookup per nominated node) instead of a search of
            // the list per node.
            let starts = nominated_starts(
                snapshot,
                nominated,
                self.nominated_positions.try_lock().ok().as_deref_mut(),
            );
            let extensions = !nominated.is_empty() && self.has_active_extensions(state);
            // Without PreFilter extensions a node's copy with its nominated
            // pods does not depend on the incoming pod beyond which pods
            // count, so copies are kept from one cycle to the next.
            let mut copies = if nominated.is_empty() || extensions {
                None
            } else {
                self.nominated_copies.try_lock().ok()
            };
            let mut with_nominated = |idx: usize, node: &NodeInfo| -> Option<Status> {
                let &(s, len) = starts.get(idx).filter(|(_, len)| *len > 0)?;
                let run = nominated.get(s as usize..(s + len) as usize)?;
                Some(match copies.as_deref_mut() {
                    Some(copies) => self.run_filter_with_copy(state, pod, idx, node, run, copies),
                    None => self.run_filter_with_run(state, pod, node, run, extensions),
                })
            };
            // Rejected nodes are only remembered by index; their statuses are
            // worked out again (filters are pure within a cycle) only when
            // the per-node map is needed (no node fits, or an extender adds
            // to it): most cycles find nodes and would throw them away.
            // A rejected node's status is kept when it was built anyway
            // (by the check with its nominated pods).
            // (Kept apart: most rejected nodes have none, and a failed
            // cycle records hundreds of indices.)
            let mut failed: Vec<u32> = Vec::new();
            let mut known: Vec<(u32, Status)> = Vec::new();
            for i in 0..n {
                let idx = (start + i) % n;
                let node = &nodes[idx];
                processed += 1;
                if node.node.is_none() {
                    continue;
                }
                // Only the verdict here: rejected nodes' statuses are
                // worked out below when needed.
                let r = if no_filters {
                    Ok(None)
                } else {
                    match pass_filters(&active, state, pod, node) {
                        // A node must pass with and without its nominated
                        // pods: the plain run (no copies) settles most
                        // rejections.
                        Ok(true) if !nominated.is_empty() => match with_nominated(idx, node) {
                            None => Ok(None),
                            Some(s) => match s.code {
                                Code::Success => Ok(None),
                                Code::Error => Err(s),
                                _ => Ok(Some(Some(s))),
                            },
                        },
                        Ok(true) => Ok(None),
                        Ok(false) => Ok(Some(None)),
                        Err(s) => Err(s),
                    }
                };
                match r {
                    Ok(None) => {
                        feasible.push(node);
                        if feasible.len() >= want {
                            break;
                        }
                    }
                    Ok(Some(status)) => {
                        failed.push(idx as u32);
                        if let Some(s) = status {
                            known.push((idx as u32, s));
                        }
                    }
                    Err(s) => return Err(s),
                }
            }
            self.next_start
                .store((start + processed) % n, Ordering::Relaxed);
            if feasible.is_empty() || !self.extenders.is_empty() {
                statuses.reserve(failed.len());
                // `known` is in the order of `failed`.
                let mut known = known.into_iter().peekable();
                for idx in failed {
                    let node = &nodes[idx as usize];
                    let kept = known.next_if(|(k, _)| *k == idx).map(|(_, s)| s);
                    let s = match kept.or_else(|| with_nominated(idx as usize, node)) {
                        Some(s) => s,
                        None => match run_filters(&active, state, pod, node) {
                            Ok(()) => continue,
                            Err((f, s)) => match active.get(f) {
                                Some((name, _)) => s.with_plugin_id(name),
                                None => s,
                            },
                        },
                    };
                    // Each node is visited once: no lookup by name.
                    statuses.insert_new(node.id.clone(), s);
                }
            }
        }
        if !feasible.is_empty() && !self.extenders.is_empty() {
            feasible = self.run_extender_filters(pod, feasible, snapshot, &mut statuses)?;
        }
        Ok((feasible, statuses))
    }

    fn run_extender_filters<'a>(
        &self,
        pod: &PodInfo,
        mut feasible: Vec<&'a NodeInfo>,
        snapshot: &'a Snapshot,
        statuses: &mut NodeToStatus,
    ) -> Result<Vec<&'a NodeInfo>, Status> {
        for ext in &self.extenders {
            if !ext.has_filter() || !ext.is_interested(pod) || feasible.is_empty() {
                continue;
            }
            match ext.filter(pod, &feasible) {
                Ok(result) => {
                    for (n, msg) in result.failed {
                        statuses
                            .insert(n.into(), Status::unschedulable(msg).with_plugin("Extender"));
                    }
                    for (n, msg) in result.failed_unresolvable {
                        statuses
                            .insert(n.into(), Status::unresolvable(msg).with_plugin("Extender"));
                    }
                    feasible = result
                        .node_names
                        .iter()
                        .filter_map(|n| snapshot.get(n))
                        .collect();
                }
                Err(e) if ext.is_ignorable() => {
                    tracing::warn!(extender = %ext.name(), error = %e, "skipping ignorable extender");
                }
                Err(e) => {
                    return Err(Status::error(format!("extender {}: {e}", ext.name())));
                }
            }
        }
        Ok(feasible)
    }

    /// PostFilter: stops at the first Success.
    pub fn run_post_filter(
        &self,
        ctx: &PostFilterContext<'_>,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let mut messages = Vec::new();
        for e in &self.post_filter {
            let Some(p) = e.plugin.as_post_filter() else {
                continue;
            };
            let (r, s) = p.post_filter(ctx, state, pod, statuses);
            if s.is_success() {
                return (r, s);
            }
            if s.code == Code::Error {
                return (None, s.with_plugin_id(&e.id));
            }
            messages.extend(s.reasons);
        }
        (None, Status::with_reasons(Code::Unschedulable, messages))
    }

    /// Whether any PostFilter plugin is enabled.
    pub fn has_post_filter(&self) -> bool {
        !self.post_filter.is_empty()
    }

    /// PreScore then Score, NormalizeScore and the weighted sum, plus the
    /// extenders' prioritize scores × weight × 10.
    pub fn run_score<'a>(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&'a NodeInfo],
        snapshot: &Snapshot,
    ) -> Result<Vec<NodeScore<'a>>, Status> {
        for e in &self.pre_score {
            let Some(p) = e.plugin.as_pre_score() else {
                continue;
            };
            let s = p.pre_score(state, pod, nodes, snapshot);
            match s.code {
                Code::Success => {}
                Code::Skip => state.skip_score.push(e.name.clone()),
                _ => return Err(s.with_plugin_id(&e.id)),
            }
        }
        // One list of names for the plugins' NormalizeScore; the weighted
        // sums are kept apart and written into it at the end.
        let mut scores: Vec<NodeScore<'a>> = nodes
            .iter()
            .map(|n| NodeScore {
                name: &n.name,
                score: 0,
            })
            .collect();
        let mut raw: Vec<i64> = vec![0; nodes.len()];
        let mut totals: Vec<i64> = vec![0; nodes.len()];
        for e in &self.score {
            if state.skip_score.contains(&e.name) {
                continue;
            }
            let Some(p) = e.plugin.as_score() else {
                continue;
            };
            // One call per plugin for all nodes (not one per node).
            let s = p.score_nodes(state, pod, nodes, &mut raw);
            if !s.is_success() {
                return Err(s.with_plugin_id(&e.id));
            }
            for (slot, r) in scores.iter_mut().zip(&raw) {
                slot.score = *r;
            }
            let s = p.normalize(state, pod, &mut scores);
            if !s.is_success() {
                return Err(s.with_plugin_id(&e.id));
            }
            for (t, s) in totals.iter_mut().zip(&scores) {
                if !(0..=MAX_NODE_SCORE).contains(&s.score) {
                    return Err(Status::error(format!(
                        "plugin {} returns an invalid score {}, it should in the range of [0, 100] after normalizing",
                        e.name, s.score
                    ))
                    .with_plugin_id(&e.id));
                }
                *t += s.score * e.weight;
            }
        }
        for ext in &self.extenders {
            if !ext.has_prioritize() || !ext.is_interested(pod) {
                continue;
            }
            // Prioritize errors are ignored, as kube-scheduler does.
            if let Ok(list) = ext.prioritize(pod, nodes) {
                for hp in list {
                    if let Some(i) = scores.iter().position(|t| t.name == hp.host) {
                        totals[i] += hp.score * ext.weight() * (MAX_NODE_SCORE / 10);
                    }
                }
            }
        }
        for (s, t) in scores.iter_mut().zip(totals) {
            s.score = t;
        }
        Ok(scores)
    }

    fn next_random(&self) -> u64 {
        // xorshift64*: cheap and good enough for tie-breaking.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Ordering::Relaxed);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The highest-scoring node, ties broken at random (reservoir sampling).
    pub fn select_host(&self, scores: &[NodeScore]) -> Option<String> {
        let mut best: Option<&NodeScore> = None;
        let mut ties = 0u64;
        for s in scores {
            match best {
                None => {
                    best = Some(s);
                    ties = 1;
                }
                Some(b) if s.score > b.score => {
                    best = Some(s);
                    ties = 1;
                }
                Some(b) if s.score == b.score => {
                    ties += 1;
                    if self.next_random().is_multiple_of(ties) {
                        best = Some(s);
                    }
                }
                _ => {}
            }
        }
        best.map(|b| b.name.to_string())
    }

    /// Reserve in order; on failure the caller runs Unreserve.
    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for e in &self.reserve {
            if let Some(p) = e.plugin.as_reserve() {
                let s = p.reserve(state, pod, node);
                if !s.is_success() {
                    return s.with_plugin_id(&e.id);
                }
            }
        }
        Status::success()
    }

    /// Unreserve in reverse order.
    pub fn run_unreserve(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        for e in self.reserve.iter().rev() {
            if let Some(p) = e.plugin.as_reserve() {
                p.unreserve(state, pod, node);
            }
        }
    }

    /// Permit: approve, deny, or register the pod as waiting.
    pub fn run_permit(
        &self,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        node: &str,
    ) -> PermitOutcome {
        let mut waiting = Vec::new();
        let mut timeout = MAX_PERMIT_WAIT;
        for e in &self.permit {
            let Some(p) = e.plugin.as_permit() else {
                continue;
            };
            let (s, t) = p.permit(state, pod, node);
            match s.code {
                Code::Success | Code::Skip => {}
                Code::Wait => {
                    waiting.push(e.name.clone());
                    timeout = timeout.min(t);
                }
                _ => return PermitOutcome::Rejected(s.with_plugin_id(&e.id)),
            }
        }
        if waiting.is_empty() {
            return PermitOutcome::Allowed;
        }
        let rx = self.handle.waiting_pods.add(pod.clone(), node, waiting);
        PermitOutcome::Wait(rx, timeout)
    }

    /// The binding cycle: wait on Permit, PreBind, Bind (extender binder
    /// first, then plugins until one does not Skip), PostBind.
    pub async fn run_binding_cycle(
        self: Arc<Self>,
        state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: String,
        wait: Option<(tokio::sync::oneshot::Receiver<Status>, Duration)>,
    ) -> Status {
        if let Some((rx, timeout)) = wait {
            let s = match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(s)) => s,
                Ok(Err(_)) => Status::unschedulable("waiting pod was dropped"),
                Err(_) => Status::unschedulable(format!(
                    "rejected due to timeout after waiting {}s at plugin(s) Permit",
                    timeout.as_secs()
                )),
            };
            self.handle.waiting_pods.remove(&pod.uid);
            if !s.is_success() {
                return s;
            }
        }
        for e in &self.pre_bind {
            if let Some(p) = e.plugin.as_pre_bind() {
                let s = p.pre_bind(state.clone(), pod.clone(), node.clone()).await;
                if !s.is_success() && s.code != Code::Skip {
                    return s.with_plugin_id(&e.id);
                }
            }
        }
        let mut bound = false;
        for ext in &self.extenders {
            if ext.is_binder() && ext.is_interested(&pod) {
                if let Err(e) = ext.bind(&pod, &node).await {
                    return Status::error(format!("extender {} bind: {e}", ext.name()));
                }
                bound = true;
                break;
            }
        }
        if !bound {
            let mut handled = false;
            for e in &self.bind {
                if let Some(p) = e.plugin.as_bind() {
                    let s = p.bind(state.clone(), pod.clone(), node.clone()).await;
                    if s.code == Code::Skip {
                        continue;
                    }
                    if !s.is_success() {
                        return s.with_plugin_id(&e.id);
                    }
                    handled = true;
                    break;
                }
            }
            if !handled {
                return Status::error("no bind plugin handled the pod");
            }
        }
        for e in &self.post_bind {
            if let Some(p) = e.plugin.as_post_bind() {
                p.post_bind(&pod, &node);
            }
        }
        Status::success()
    }
}

/// The pods nominated to `node` that count when filtering `pod` there: the
/// others' with at least its priority. `nominated` is sorted by node name.
pub fn nominated_on<'n>(
    pod: &'n PodInfo,
    node: &'n str,
    nominated: &'n [(Arc<str>, Arc<PodInfo>)],
) -> impl Iterator<Item = &'n Arc<PodInfo>> + 'n {
    // Sorted by node name (the queue keeps it so): find this node's range
    // instead of comparing every entry.
    let lo = nominated.partition_point(|(n, _)| **n < *node);
    nominated[lo..]
        .iter()
        .take_while(move |(n, _)| **n == *node)
        .filter(move |(_, p)| nominated_counts(pod, p))
        .map(|(_, p)| p)
}

/// Whether a pod nominated to a node counts when filtering `pod` there:
/// another pod of at least its priority (kube-scheduler's
/// `addGENominatedPods`).
pub(crate) fn nominated_counts(pod: &PodInfo, nominated: &PodInfo) -> bool {
    // The priority first: an integer, next to what the check reads anyway.
    nominated.priority >= pod.priority && !nominated.same_uid(pod)
}

/// Copies of nodes with the pods nominated to them added (what
/// kube-scheduler's `addGENominatedPods` builds for every such node on
/// every Filter call), kept between cycles: while many pods wait for
/// preemption victims to go, the same nodes carry the same nominated pods
/// cycle after cycle, and copying a node (a reference count per pod on it)
/// was most of a failed cycle's filter pass.
///
/// A copy is reused only if it was made from exactly what the node and the
/// nominations are now, compared by identity: the same node object, the
/// same pods in the same order and the same topology ids (everything in a
/// [`NodeInfo`] is derived from those), plus the same nominated pods added
/// in the same order. The copy holds all of them, so no address compared
/// can have been reused by another object. The incoming pod is not part of
/// a copy (only which nominated pods count for it, which is compared), and
/// copies are used only when no PreFilter extension would change the
/// cycle state per added pod.
#[derive(Default)]
struct NominatedCopies {
    /// By the node's position in the snapshot (a node that moved or was
    /// replaced fails the identity check and is copied again).
    entries: Vec<Option<Box<NominatedCopy>>>,
    /// Scratch: positions of the nominated pods that count.
    counted: Vec<usize>,
}

struct NominatedCopy {
    /// The node with the nominated pods added after its own.
    info: NodeInfo,
    /// How many of `info.pods` are the node's own.
    own: usize,
}

impl NominatedCopies {
    /// `node` (at position `idx` in the snapshot) with the pods
    /// `run[counted]` added: the kept copy if it was made from the same node
    /// and pods, else a new one (kept in its place).
    fn get(
        &mut self,
        idx: usize,
        node: &NodeInfo,
        run: &[(Arc<str>, Arc<PodInfo>)],
        counted: &[usize],
    ) -> &NodeInfo {
        if self.entries.len() <= idx {
            self.entries.resize_with(idx + 1, || None);
        }
        let entry = self.entries[idx].get_or_insert_with(|| {
            Box::new(NominatedCopy {
                info: NodeInfo::default(),
                own: usize::MAX,
            })
        });
        let extra = counted.iter().filter_map(|&i| run.get(i).map(|(_, p)| p));
        let same = entry.own == node.pods.len()
            && same_arc(&entry.info.node, &node.node)
            && entry.info.topology_ids == node.topology_ids
            && entry.info.pods.len() == node.pods.len() + counted.len()
            && {
                let (own, added) = entry.info.pods.split_at(node.pods.len());
                own.iter().zip(&node.pods).all(|(a, b)| Arc::ptr_eq(a, b))
                    && added
                        .iter()
                        .zip(extra.clone())
                        .all(|(a, b)| Arc::ptr_eq(a, b))
            };
        if !same {
            entry.info.clone_from(node);
            for p in extra {
                entry.info.add_pod(p.clone());
            }
            entry.own = node.pods.len();
        }
        &entry.info
    }
}

fn same_arc<T>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Where each of the snapshot's nodes has its entries in `nominated`
/// (sorted by node name): (first, count), count 0 for none; empty when
/// nothing is nominated. One map lookup per nominated node.
fn nominated_starts(
    snapshot: &Snapshot,
    nominated: &[(Arc<str>, Arc<PodInfo>)],
    positions: Option<&mut NominatedPositions>,
) -> Vec<(u32, u32)> {
    if nominated.is_empty() {
        return Vec::new();
    }
    let nodes = snapshot.nodes();
    let mut starts = vec![(0, 0); nodes.len()];
    let Some(positions) = positions else {
        let mut i = 0;
        while i < nominated.len() {
            let len = nominated_run(nominated, i).len().max(1);
            if let Some(idx) = snapshot.index_of(&nominated[i].0)
                && let Some(slot) = starts.get_mut(idx)
            {
                *slot = (i as u32, len as u32);
            }
            i += len;
        }
        return starts;
    };
    // Each entry's node position, then runs of equal positions: the list
    // is sorted by node name, so one node's entries are adjacent.
    positions.prune(nominated.len());
    let mut run: Option<(usize, u32, u32)> = None;
    for (i, (name, _)) in nominated.iter().enumerate() {
        let idx = positions.position(snapshot, name);
        match (&mut run, idx) {
            (Some((at, _, len)), Some(idx)) if *at == idx => *len += 1,
            _ => {
                if let Some((at, first, len)) = run.take()
                    && let Some(slot) = starts.get_mut(at)
                {
                    *slot = (first, len);
                }
                run = idx.map(|idx| (idx, i as u32, 1));
            }
        }
    }
    if let Some((at, first, len)) = run
        && let Some(slot) = starts.get_mut(at)
    {
        *slot = (first, len);
    }
    starts
}

/// Snapshot positions of the nodes named by nominations, kept between
/// cycles and keyed by the nomination's shared name (its address): the
/// queue keeps the same name object for a nomination from one cycle to the
/// next, so finding its node costs an integer hash instead of hashing and
/// comparing the name. An entry is used only if the node at the remembered
/// position is still the one it was made from (the same shared
/// [`NodeInfo::id`]); the entry holds both names, so neither address can
/// be reused by another object while it exists.
#[derive(Default)]
struct NominatedPositions {
    map: HashMap<usize, (Arc<str>, Arc<str>, usize), super::topology_counts::FastBuild>,
}

impl NominatedPositions {
    /// The position of the node called `name` in `snapshot`, if any.
    fn position(&mut self, snapshot: &Snapshot, name: &Arc<str>) -> Option<usize> {
        let nodes = snapshot.nodes();
        let key = Arc::as_ptr(name) as *const u8 as usize;
        if let Some((_, id, idx)) = self.map.get(&key)
            && nodes.get(*idx).is_some_and(|n| Arc::ptr_eq(&n.id, id))
        {
            return Some(*idx);
        }
        let idx = snapshot.index_of(name)?;
        let id = nodes.get(idx)?.id.clone();
        self.map.insert(key, (name.clone(), id, idx));
        Some(idx)
    }

    /// Drop entries for nominations that are gone (only this map still
    /// holds their name) once the map is much larger than the list.
    fn prune(&mut self, live: usize) {
        if self.map.len() > 2 * live + 64 {
            self.map
                .retain(|_, (name, _, _)| Arc::strong_count(name) > 1);
        }
    }
}

/// The entries of `nominated` for the node of entry `start` (all of them:
/// the list is sorted by node name).
fn nominated_run(
    nominated: &[(Arc<str>, Arc<PodInfo>)],
    start: usize,
) -> &[(Arc<str>, Arc<PodInfo>)] {
    let Some(rest) = nominated.get(start..) else {
        return &[];
    };
    let Some((first, _)) = rest.first() else {
        return &[];
    };
    let len = rest.iter().take_while(|(n, _)| **n == **first).count();
    &rest[..len]
}

thread_local! {
    static SCRATCH: std::cell::RefCell<NodeInfo> = std::cell::RefCell::new(NodeInfo::default());
}

/// Run `f` on a copy of `node` kept in a per-thread scratch info, so the
/// copy reuses the last one's allocations (a fresh copy if it is in use).
fn with_scratch<R>(node: &NodeInfo, f: impl FnOnce(&mut NodeInfo) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            scratch.clone_from(node);
            let r = f(&mut scratch);
            // Do not keep the node's objects alive until the next call.
            scratch.node = None;
            scratch.pods.clear();
            scratch.controllers.clear();
            r
        }
        Err(_) => f(&mut node.clone()),
    })
}

/// The resolved filters' verdict on one node without their reasons
/// ([`FilterPlugin::passes`]): `Err` only for an Error status.
fn pass_filters(
    active: &[(&PluginName, &dyn FilterPlugin)],
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Result<bool, Status> {
    for (_, p) in active {
        if !p.passes(state, pod, node)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Run resolved filters on one node, stopping at the first rejection: its
/// index in `active` and its status (the plugin name is added later).
fn run_filters(
    active: &[(&PluginName, &dyn FilterPlugin)],
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Result<(), (usize, Status)> {
    for (i, (_, p)) in active.iter().enumerate() {
        let s = p.filter(state, pod, node);
        if !s.is_success() {
            return Err((i, s));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_percentage() {
        assert_eq!(num_feasible_nodes_to_find(0, 50), 50);
        assert_eq!(num_feasible_nodes_to_find(0, 5000), 500);
        assert_eq!(num_feasible_nodes_to_find(0, 1000), 420);
        assert_eq!(num_feasible_nodes_to_find(0, 200), 100);
        assert_eq!(num_feasible_nodes_to_find(0, 100_000), 5000);
        assert_eq!(num_feasible_nodes_to_find(30, 5000), 1500);
        assert_eq!(num_feasible_nodes_to_find(100, 5000), 5000);
    }

    #[test]
    fn histogram_is_sorted() {
        let mut m = NodeToStatus::default();
        for i in 0..3 {
            m.insert(
                format!("a{i}").into(),
                Status::unschedulable("Insufficient cpu"),
            );
        }
        for i in 0..2 {
            m.insert(
                format!("b{i}").into(),
                Status::unschedulable("node(s) had untolerated taint {k: v}"),
            );
        }
        assert_eq!(
            histogram_message(5, &m),
            "0/5 nodes are available: 2 node(s) had untolerated taint {k: v}, 3 Insufficient cpu."
        );
    }
}
