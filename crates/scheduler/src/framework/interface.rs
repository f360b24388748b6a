//! Every extension point of the Scheduling Framework, declared in one place
//! (read it like kube-scheduler's `framework/interface.go`).
//!
//! A plugin is a type implementing [`Plugin`] plus one trait per extension
//! point it takes part in; its `Plugin` impl returns itself from the matching
//! `as_*` accessor, which is how the framework finds the points a plugin
//! implements (Go does it with type assertions).
//!
//! One pod goes through a **scheduling cycle** at a time:
//!
//! ```text
//! PreEnqueue (queue entry) → QueueSort (queue order)
//! PreFilter → Filter (per node) → [PostFilter when no node fits]
//!   → PreScore → Score (per node) → NormalizeScore → Reserve → Permit
//! ```
//!
//! and then, asynchronously, a **binding cycle**: wait on Permit → PreBind →
//! Bind → PostBind. A failure after Reserve runs Unreserve in reverse order.

use std::any::Any;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::runtime::Framework;
use super::snapshot::Snapshot;
use super::types::{NodeInfo, PodInfo};

/// The outcome class of a plugin call (kube-scheduler's `framework.Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// The plugin ran and the pod may go on.
    Success,
    /// An internal error: the pod is retried with backoff.
    Error,
    /// The pod does not fit now; preemption may help.
    Unschedulable,
    /// The pod does not fit and preemption on this node would not help.
    UnschedulableAndUnresolvable,
    /// Permit: wait for approval.
    Wait,
    /// The plugin has nothing to do for this pod (PreFilter/PreScore/Bind).
    Skip,
    /// PreEnqueue: the pod stays out of the active queue (gated).
    Pending,
}

/// A plugin's verdict: a code, reasons for people, and the plugin that gave it.
///
/// Reasons are `Cow<'static, str>` so a Filter rejecting thousands of nodes
/// with a fixed message does not allocate a string per node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The outcome.
    pub code: Code,
    /// Human-readable reasons ("Insufficient cpu", …).
    pub reasons: Reasons,
    /// The plugin that returned it (filled in by the framework; shared, so
    /// a status per rejected node copies no name).
    pub plugin: PluginName,
}

/// The name of the plugin that gave a [`Status`], read as a `str` (empty
/// until the framework fills it in). Names are interned for the life of the
/// process (one copy per distinct plugin name), so a status carries a
/// plain reference: the statuses built and dropped per node (every Filter
/// and Score call returns one) cost no allocation and no atomic
/// reference count.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PluginName(Option<&'static str>);

impl PluginName {
    /// The interned name (the first use of a name keeps one copy of it for
    /// the rest of the process; plugin names are a small fixed set).
    pub fn new(name: &str) -> PluginName {
        static NAMES: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
            std::sync::Mutex::new(std::collections::BTreeSet::new());
        let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = names.get(name) {
            return PluginName(Some(n));
        }
        let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
        names.insert(n);
        PluginName(Some(n))
    }

    fn same(&self, other: &PluginName) -> bool {
        match (self.0, other.0) {
            (Some(a), Some(b)) => std::ptr::eq(a, b) || a == b,
            _ => self.is_empty() && other.is_empty(),
        }
    }
}

impl std::ops::Deref for PluginName {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.unwrap_or("")
    }
}

impl std::fmt::Debug for PluginName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for PluginName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl PartialEq<str> for PluginName {
    fn eq(&self, other: &str) -> bool {
        **self == *other
    }
}

impl PartialEq<&str> for PluginName {
    fn eq(&self, other: &&str) -> bool {
        **self == **other
    }
}

/// A status's reasons, read as a slice. A single reason (what nearly every
/// rejection has) is kept inline, so rejecting a node allocates nothing
/// for a fixed message.
#[derive(Clone, Default)]
pub struct Reasons(ReasonsRepr);

#[derive(Clone)]
enum ReasonsRepr {
    One(Cow<'static, str>),
    Many(Vec<Cow<'static, str>>),
}

impl Default for ReasonsRepr {
    fn default() -> Self {
        ReasonsRepr::Many(Vec::new())
    }
}

impl Reasons {
    /// No reasons.
    pub fn new() -> Reasons {
        Reasons::default()
    }

    /// One reason.
    pub fn one(reason: Cow<'static, str>) -> Reasons {
        Reasons(ReasonsRepr::One(reason))
    }

    /// Add a reason.
    pub fn push(&mut self, reason: Cow<'static, str>) {
        match &mut self.0 {
            ReasonsRepr::Many(v) if v.is_empty() => self.0 = ReasonsRepr::One(reason),
            ReasonsRepr::Many(v) => v.push(reason),
            ReasonsRepr::One(_) => {
                if let ReasonsRepr::One(first) = std::mem::take(&mut self.0) {
                    self.0 = ReasonsRepr::Many(vec![first, reason]);
                }
            }
        }
    }
}

impl std::ops::Deref for Reasons {
    type Target = [Cow<'static, str>];
    fn deref(&self) -> &Self::Target {
        match &self.0 {
            ReasonsRepr::One(r) => std::slice::from_ref(r),
            ReasonsRepr::Many(v) => v,
        }
    }
}

impl std::fmt::Debug for Reasons {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Reasons {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Reasons {}

impl From<Vec<Cow<'static, str>>> for Reasons {
    fn from(mut v: Vec<Cow<'static, str>>) -> Reasons {
        match v.len() {
            1 => Reasons(ReasonsRepr::One(v.remove(0))),
            _ => Reasons(ReasonsRepr::Many(v)),
        }
    }
}

impl FromIterator<Cow<'static, str>> for Reasons {
    fn from_iter<I: IntoIterator<Item = Cow<'static, str>>>(iter: I) -> Reasons {
        let mut r = Reasons::new();
        r.extend(iter);
        r
    }
}

impl Extend<Cow<'static, str>> for Reasons {
    fn extend<I: IntoIterator<Item = Cow<'static, str>>>(&mut self, iter: I) {
        for x in iter {
            self.push(x);
        }
    }
}

impl IntoIterator for Reasons {
    type Item = Cow<'static, str>;
    type IntoIter = std::vec::IntoIter<Cow<'static, str>>;
    fn into_iter(self) -> Self::IntoIter {
        match self.0 {
            ReasonsRepr::One(r) => vec![r].into_iter(),
            ReasonsRepr::Many(v) => v.into_iter(),
        }
    }
}

impl<'a> IntoIterator for &'a Reasons {
    type Item = &'a Cow<'static, str>;
    type IntoIter = std::slice::Iter<'a, Cow<'static, str>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl Status {
    /// Success.
    pub fn success() -> Status {
        Status {
            code: Code::Success,
            reasons: Reasons::new(),
            plugin: PluginName(None),
        }
    }

    /// A status with a code and one reason.
    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Status {
        Status {
            code,
            reasons: Reasons::one(reason.into()),
            plugin: PluginName(None),
        }
    }

    /// Unschedulable with a reason.
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::Unschedulable, reason)
    }

    /// UnschedulableAndUnresolvable with a reason.
    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// An internal error.
    pub fn error(reason: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::Error, reason)
    }

    /// Skip.
    pub fn skip() -> Status {
        Status {
            code: Code::Skip,
            reasons: Reasons::new(),
            plugin: PluginName(None),
        }
    }

    /// Whether the code is Success.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Whether the code is Unschedulable or UnschedulableAndUnresolvable.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    /// The reasons joined with ", ".
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    /// A status with these reasons (none: Success-like codes).
    pub fn with_reasons(code: Code, reasons: impl Into<Reasons>) -> Status {
        Status {
            code,
            reasons: reasons.into(),
            plugin: PluginName(None),
        }
    }

    pub(crate) fn with_plugin(self, name: &str) -> Status {
        if self.plugin.is_empty() {
            self.with_plugin_id(&PluginName::new(name))
        } else {
            self
        }
    }

    pub(crate) fn with_plugin_id(mut self, name: &PluginName) -> Status {
        if self.plugin.is_empty() {
            self.plugin = *name;
        }
        self
    }
}

/// Data a plugin keeps for one scheduling cycle (kube-scheduler's
/// `StateData`): must be cloneable, because preemption runs filters on copies.
pub trait StateData: Any + Send + Sync {
    /// A copy of the data.
    fn clone_data(&self) -> Box<dyn StateData>;
    /// Upcast for downcasting.
    fn as_any(&self) -> &dyn Any;
    /// Upcast for downcasting, mutably.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_data(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Per-cycle storage shared by the plugins (PreFilter writes what Filter reads).
#[derive(Default)]
pub struct CycleState {
    /// A handful of entries, read per node by Filter and Score: a short list
    /// compared by key beats hashing the key every time.
    data: Vec<(&'static str, Box<dyn StateData>)>,
    /// Plugins whose PreFilter returned Skip: their Filter is not called.
    pub(crate) skip_filter: Vec<String>,
    /// Plugins whose PreScore returned Skip: their Score is not called.
    pub(crate) skip_score: Vec<String>,
    /// Bit i: the i-th Filter plugin is skipped (from `skip_filter`).
    pub(crate) filter_skip_mask: u64,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            data: self
                .data
                .iter()
                .map(|(k, v)| (*k, (**v).clone_data()))
                .collect(),
            skip_filter: self.skip_filter.clone(),
            skip_score: self.skip_score.clone(),
            filter_skip_mask: self.filter_skip_mask,
        }
    }
}

impl CycleState {
    fn position(&self, key: &str) -> Option<usize> {
        self.data
            .iter()
            .position(|(k, _)| std::ptr::eq(*k, key) || *k == key)
    }

    /// Store data under a key (by convention the plugin's name).
    pub fn write<T: StateData>(&mut self, key: &'static str, value: T) {
        match self.position(key) {
            Some(i) => self.data[i].1 = Box::new(value),
            None => self.data.push((key, Box::new(value))),
        }
    }

    /// Read data written earlier in the cycle.
    pub fn read<T: 'static>(&self, key: &str) -> Option<&T> {
        let i = self.position(key)?;
        (*self.data[i].1).as_any().downcast_ref()
    }

    /// Read data mutably (PreFilter extensions update it during preemption).
    pub fn read_mut<T: 'static>(&mut self, key: &str) -> Option<&mut T> {
        let i = self.position(key)?;
        (*self.data[i].1).as_any_mut().downcast_mut()
    }
}

/// A cluster event that may make an unschedulable pod schedulable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterEvent {
    /// A node was added.
    NodeAdd,
    /// A node's labels, taints, allocatable or schedulability changed.
    NodeUpdate,
    /// A pod was deleted (frees resources, ports, breaks anti-affinity).
    PodDelete,
    /// A pod was added or changed (affinity and spread count pods).
    PodAdd,
    /// Something a plugin watches on its own (PodGroups, …).
    Other,
}

/// The base of every plugin: a name, and which extension points it implements.
pub trait Plugin: Send + Sync + 'static {
    /// The name the plugin registers under.
    fn name(&self) -> &str;
    /// Cluster events after which a pod this plugin rejected is retried
    /// (kube-scheduler's `EnqueueExtensions`). Default: every event.
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PodDelete,
            ClusterEvent::PodAdd,
            ClusterEvent::Other,
        ]
    }
    /// This plugin as a PreEnqueue plugin.
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    /// This plugin as a QueueSort plugin.
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    /// This plugin as a PreFilter plugin.
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    /// This plugin as a Filter plugin.
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    /// This plugin as a PostFilter plugin.
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    /// This plugin as a PreScore plugin.
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    /// This plugin as a Score plugin.
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    /// This plugin as a Reserve plugin.
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    /// This plugin as a Permit plugin.
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    /// This plugin as a PreBind plugin.
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    /// This plugin as a Bind plugin.
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    /// This plugin as a PostBind plugin.
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
}

/// **PreEnqueue**: runs before a pod enters the active queue. Every plugin
/// must return Success, otherwise the pod waits among the gated pods (no
/// Unschedulable condition) until an update of the pod lets it through.
pub trait PreEnqueuePlugin: Plugin {
    /// Success to admit the pod; anything else keeps it gated.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// **QueueSort**: orders the active queue. Exactly one per scheduler, shared
/// by all profiles.
pub trait QueueSortPlugin: Plugin {
    /// Whether `a` is popped before `b`.
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}

/// What a PreFilter may say about the nodes worth filtering.
#[derive(Debug, Clone, Default)]
pub struct PreFilterResult {
    /// `Some(names)`: only these nodes can fit (e.g. `spec.nodeName`).
    pub node_names: Option<Vec<String>>,
}

/// **PreFilter**: runs once per cycle before Filter, to precompute what
/// Filter needs (into the [`CycleState`]) or reject the pod outright. A
/// non-success status aborts the cycle; Skip turns this plugin's Filter off.
pub trait PreFilterPlugin: Plugin {
    /// Precompute or reject.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status);

    /// Incremental updates of the precomputed state when preemption adds or
    /// removes pods from a node during its dry runs (`None`: not needed).
    fn extensions(&self) -> Option<&dyn PreFilterExtensions> {
        None
    }
}

/// AddPod/RemovePod: keep a PreFilter's cycle state right while preemption
/// tries removing victims.
pub trait PreFilterExtensions: Send + Sync {
    /// `pod_to_add` is now considered on `node`.
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status;
    /// `pod_to_remove` is no longer considered on `node`.
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status;
}

/// **Filter**: can the pod run on this node? Called per node (in parallel
/// across nodes, so it only reads); the framework stops at the first plugin
/// that rejects a node.
pub trait FilterPlugin: Plugin {
    /// Success when the pod fits the node.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;

    /// Filter's verdict without its reasons: `Ok(true)` exactly when
    /// [`filter`](Self::filter) returns Success, `Err` with its status when it
    /// returns Error, `Ok(false)` otherwise. The pass over all nodes asks
    /// this (most nodes' reasons are never shown); a plugin whose rejection
    /// builds a status per node may answer it more cheaply.
    fn passes(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<bool, Status> {
        let s = self.filter(state, pod, node);
        match s.code {
            Code::Success => Ok(true),
            Code::Error => Err(s),
            _ => Ok(false),
        }
    }

    /// Whether the verdict depends only on the incoming pod, the node
    /// object (name, labels, taints, `unschedulable`) and what PreFilter
    /// wrote to the cycle state: never on the pods on the node, nor on
    /// state a PreFilter AddPod/RemovePod extension changes. Preemption's
    /// dry runs add and remove pods on a copy of a node, so such a filter
    /// answers the same for every check there: it is asked once per node
    /// instead of once per check. Default `false` (asked every time);
    /// answer `true` only when it holds, or preemption may pick another
    /// node than kube-scheduler would.
    fn ignores_node_pods(&self) -> bool {
        false
    }
}

/// Why each node was rejected, by node name (kube-scheduler's
/// `NodeToStatus`).
///
/// Most nodes of a failed cycle are rejected for the same few reasons
/// ("Insufficient cpu"), so equal statuses are stored once and each node
/// keeps an index into that small table: recording 5,000 rejections builds
/// a handful of statuses, and the `FailedScheduling` histogram or a
/// PostFilter's "is any node unresolvable?" reads the table, not every
/// node. Nodes are keyed by their shared name ([`NodeInfo::id`]), so a
/// record copies no string.
#[derive(Debug, Clone, Default)]
pub struct NodeToStatus {
    /// Distinct statuses with how many nodes currently have each.
    table: Vec<(Status, usize)>,
    /// Each node with a record (once) and its index into `table`, in the
    /// order first recorded.
    nodes: Vec<(Arc<str>, u32)>,
    /// Node name → position in `nodes`, built on the first lookup by name
    /// (a failed cycle records hundreds of nodes and usually only reads
    /// the table) and kept up to date from then on.
    by_name: std::sync::OnceLock<HashMap<Arc<str>, u32, super::topology_counts::FastBuild>>,
    /// The table entry matched last (the next node is likely the same).
    last: usize,
}

/// Past this many distinct statuses a new one is appended without looking
/// for an equal one (statuses carrying node-specific text would otherwise
/// make each record scan a long table); the histogram adds them up anyway.
const STATUS_TABLE_SCAN: usize = 32;

/// Equal code, plugin and reasons, comparing shared pointers first (a
/// plugin's fixed reasons are the same `&'static str` on every node).
fn same_status(a: &Status, b: &Status) -> bool {
    a.code == b.code
        && a.plugin.same(&b.plugin)
        && a.reasons.len() == b.reasons.len()
        && a.reasons
            .iter()
            .zip(&b.reasons)
            .all(|(x, y)| (std::ptr::eq(x.as_ptr(), y.as_ptr()) && x.len() == y.len()) || x == y)
}

impl NodeToStatus {
    /// An empty map.
    pub fn new() -> NodeToStatus {
        NodeToStatus::default()
    }

    /// Room for `additional` more nodes.
    pub fn reserve(&mut self, additional: usize) {
        self.nodes.reserve(additional);
    }

    /// Record why `node` was rejected (replacing an earlier record).
    pub fn insert(&mut self, node: Arc<str>, status: Status) {
        match self.index().get(&node).copied() {
            Some(pos) => {
                let at = self.intern(status) as u32;
                self.table[at as usize].1 += 1;
                let old = std::mem::replace(&mut self.nodes[pos as usize].1, at);
                if let Some(e) = self.table.get_mut(old as usize) {
                    e.1 -= 1;
                }
            }
            None => self.insert_new(node, status),
        }
    }

    /// Record why `node` was rejected, for a node the caller knows has no
    /// record yet (the filter pass visits each node once): no lookup by
    /// name.
    pub(crate) fn insert_new(&mut self, node: Arc<str>, status: Status) {
        let at = self.intern(status) as u32;
        self.table[at as usize].1 += 1;
        if let Some(index) = self.by_name.get_mut() {
            index.insert(node.clone(), self.nodes.len() as u32);
        }
        self.nodes.push((node, at));
    }

    /// The name index, built now if it was not yet.
    fn index(&self) -> &HashMap<Arc<str>, u32, super::topology_counts::FastBuild> {
        self.by_name.get_or_init(|| {
            let mut m = HashMap::with_capacity_and_hasher(self.nodes.len(), Default::default());
            for (i, (n, _)) in self.nodes.iter().enumerate() {
                m.insert(n.clone(), i as u32);
            }
            m
        })
    }

    fn intern(&mut self, status: Status) -> usize {
        if let Some((s, _)) = self.table.get(self.last)
            && same_status(s, &status)
        {
            return self.last;
        }
        let found = if self.table.len() <= STATUS_TABLE_SCAN {
            self.table.iter().position(|(s, _)| same_status(s, &status))
        } else {
            None
        };
        let at = found.unwrap_or_else(|| {
            self.table.push((status, 0));
            self.table.len() - 1
        });
        self.last = at;
        at
    }

    /// Why `node` was rejected, if it was.
    pub fn get(&self, node: &str) -> Option<&Status> {
        let pos = *self.index().get(node)?;
        let (_, i) = self.nodes.get(pos as usize)?;
        self.table.get(*i as usize).map(|(s, _)| s)
    }

    /// Whether `node` has a record.
    pub fn contains(&self, node: &str) -> bool {
        self.index().contains_key(node)
    }

    /// How many nodes have a record.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no node has a record.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node with its status (in the order first recorded).
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Status)> + '_ {
        self.nodes
            .iter()
            .filter_map(|(n, i)| self.table.get(*i as usize).map(|(s, _)| (n, s)))
    }

    /// Each distinct status once, with how many nodes have it (`> 0`).
    pub fn distinct(&self) -> impl Iterator<Item = (&Status, usize)> + '_ {
        self.table
            .iter()
            .filter(|(_, c)| *c > 0)
            .map(|(s, c)| (s, *c))
    }
}

/// What a PostFilter achieved.
#[derive(Debug, Clone, Default)]
pub struct PostFilterResult {
    /// The node the pod was nominated to (preemption).
    pub nominated_node_name: Option<String>,
}

/// Everything a PostFilter may use: the framework (to re-run filters in
/// dry runs) and the cycle's snapshot.
pub struct PostFilterContext<'a> {
    /// The profile's framework.
    pub framework: &'a Framework,
    /// The nodes as of this cycle.
    pub snapshot: &'a Snapshot,
    /// Pods nominated to nodes by earlier preemptions: (node, pod), sorted
    /// by node name.
    pub nominated: &'a [(Arc<str>, Arc<PodInfo>)],
}

/// **PostFilter**: runs only when no node passed Filter (DefaultPreemption
/// makes room here). Stops at the first plugin that returns Success.
pub trait PostFilterPlugin: Plugin {
    /// Try to make the pod schedulable.
    fn post_filter(
        &self,
        ctx: &PostFilterContext<'_>,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status);
}

/// **PreScore**: runs once with the feasible nodes, to precompute what Score
/// needs. Skip turns this plugin's Score off for the cycle.
pub trait PreScorePlugin: Plugin {
    /// Precompute.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status;
}

/// The highest score a Score plugin may give after normalization.
pub const MAX_NODE_SCORE: i64 = 100;

/// A node's score, naming the node by a borrow of its [`NodeInfo::name`]
/// (a cycle scores hundreds of nodes; no name is copied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeScore<'a> {
    /// Node name.
    pub name: &'a str,
    /// Score.
    pub score: i64,
}

/// [`ScorePlugin::score`] per node into `scores[i]` for `nodes[i]`, stopping
/// at the first status that is not Success: the default `score_nodes`, and
/// the general case of plugins that override it for their common case.
pub fn score_each_node<P: ScorePlugin + ?Sized>(
    plugin: &P,
    state: &CycleState,
    pod: &PodInfo,
    nodes: &[&NodeInfo],
    scores: &mut [i64],
) -> Status {
    for (slot, node) in scores.iter_mut().zip(nodes) {
        let (score, s) = plugin.score(state, pod, node);
        if !s.is_success() {
            return s;
        }
        *slot = score;
    }
    Status::success()
}

/// **Score**: ranks feasible nodes. Scores are normalized to 0..=100 (by
/// [`ScorePlugin::normalize`] when provided), then multiplied by the
/// plugin's weight and summed.
pub trait ScorePlugin: Plugin {
    /// Score one node.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status);
    /// Score every feasible node of the cycle: `scores[i]` for `nodes[i]`
    /// (the slices have the same length). The framework calls this, once
    /// per cycle; the default calls [`score`](Self::score) per node and
    /// stops at the first status that is not Success. A plugin may override
    /// it to read its cycle state once instead of per node, but must give
    /// exactly the scores `score` gives.
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        scores: &mut [i64],
    ) -> Status {
        score_each_node(self, state, pod, nodes, scores)
    }
    /// Bring all scores into 0..=100 (the NormalizeScore extension). Default:
    /// scores are already in range.
    fn normalize(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _scores: &mut [NodeScore<'_>],
    ) -> Status {
        Status::success()
    }
}

/// **Reserve / Unreserve**: a plugin keeping its own state about pods on
/// nodes is told the pod was assumed on a node (Reserve) and, when a later
/// step fails, that it was not (Unreserve, in reverse plugin order).
pub trait ReservePlugin: Plugin {
    /// The pod is assumed on `node`. A failure aborts the cycle.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    /// Undo `reserve`. Must be idempotent and cannot fail.
    fn unreserve(&self, state: &CycleState, pod: &PodInfo, node: &str);
}

/// **Permit**: the last say before binding — Success (approve), Unschedulable
/// (deny) or Wait with a timeout (capped at 15 minutes); a waiting pod is
/// allowed or rejected later through [`super::WaitingPods`].
pub trait PermitPlugin: Plugin {
    /// Approve, deny or wait.
    fn permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}

/// **PreBind**: work before the binding write (e.g. provisioning volumes).
/// A failure unreserves and requeues the pod.
pub trait PreBindPlugin: Plugin {
    /// Prepare the binding.
    fn pre_bind(
        &self,
        state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: String,
    ) -> BoxFuture<'static, Status>;
}

/// **Bind**: write the binding. Plugins are tried in order; the first that
/// does not return Skip handles it (DefaultBinder posts `pods/binding`).
pub trait BindPlugin: Plugin {
    /// Bind the pod to the node.
    fn bind(
        &self,
        state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: String,
    ) -> BoxFuture<'static, Status>;
}

/// **PostBind**: informational, after a successful bind (cleanup).
pub trait PostBindPlugin: Plugin {
    /// The pod was bound.
    fn post_bind(&self, pod: &PodInfo, node: &str);
}

/// A pod in the scheduling queue with its bookkeeping.
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// When the pod first entered the queue (FIFO tie-break).
    pub timestamp: std::time::Instant,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When the first attempt started.
    pub initial_attempt: Option<std::time::Instant>,
    /// Plugins that rejected the pod in its last attempt.
    pub unschedulable_plugins: Vec<String>,
    /// Sequence number of arrival (strict FIFO among equal timestamps).
    pub seq: u64,
    /// The scheduling cycle of the last pop (to notice events during it).
    pub scheduling_cycle: u64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn counts(m: &NodeToStatus) -> Vec<(String, usize)> {
        let mut v: Vec<(String, usize)> = m.distinct().map(|(s, c)| (s.message(), c)).collect();
        v.sort();
        v
    }

    /// Records made without a name lookup (the filter pass) and records
    /// replacing earlier ones, before and after the name index exists,
    /// read back the same as a plain map would.
    #[test]
    fn node_to_status_records_and_replaces_with_a_lazy_index() {
        let cpu = || Status::unschedulable("Insufficient cpu");
        let taint = || Status::unresolvable("node(s) had untolerated taint {k: v}");
        let mut m = NodeToStatus::new();
        for i in 0..4 {
            m.insert_new(format!("n{i}").into(), cpu());
        }
        m.insert_new("t0".into(), taint());
        assert_eq!(m.len(), 5);
        // the first lookup by name builds the index
        assert_eq!(m.get("n2"), Some(&cpu()));
        assert_eq!(
            m.get("t0").unwrap().code,
            Code::UnschedulableAndUnresolvable
        );
        assert!(m.get("x").is_none() && !m.contains("x") && m.contains("n0"));
        // records after the index exists are found too
        m.insert_new("n4".into(), cpu());
        assert_eq!(m.get("n4"), Some(&cpu()));
        // replacing moves the node between table entries
        m.insert("n1".into(), taint());
        m.insert("t0".into(), cpu());
        assert_eq!(m.len(), 6);
        assert_eq!(m.get("n1"), Some(&taint()));
        assert_eq!(m.get("t0"), Some(&cpu()));
        assert_eq!(
            counts(&m),
            vec![
                ("Insufficient cpu".to_string(), 5),
                ("node(s) had untolerated taint {k: v}".to_string(), 1)
            ]
        );
        // a fresh map takes replacements before any lookup as well
        let mut m = NodeToStatus::new();
        m.insert("a".into(), cpu());
        m.insert("a".into(), taint());
        m.insert("b".into(), taint());
        assert_eq!(m.len(), 2);
        assert_eq!(
            counts(&m),
            vec![("node(s) had untolerated taint {k: v}".to_string(), 2)]
        );
        let names: Vec<&str> = m.iter().map(|(n, _)| &**n).collect();
        assert_eq!(names, ["a", "b"]);
        // clones keep their records and index
        let c = m.clone();
        assert_eq!(c.get("b"), Some(&taint()));
    }
}
