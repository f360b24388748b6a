//! DefaultPreemption (PostFilter): when no node fits, find nodes where
//! removing lower-priority pods would make room, pick one by kube-scheduler's
//! rules, delete the victims (gracefully) and nominate the node.
//!
//! Node order: fewest PodDisruptionBudget violations → lowest highest-victim
//! priority → smallest sum of victim priorities → fewest victims → latest
//! start among the highest-priority victims → first found.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use super::helper::{decode_args, plugin};
use crate::framework::{
    Code, CycleState, FilterPlugin, Handle, NodeInfo, NodeToStatus, PdbInfo, PodInfo,
    PostFilterContext, PostFilterPlugin, PostFilterResult, Status,
    runtime::{histogram_message, nominated_counts},
};

/// `DefaultPreemptionArgs`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Accepted for compatibility.
    pub api_version: Option<String>,
    /// Accepted for compatibility.
    pub kind: Option<String>,
    /// Minimum candidates as a percentage of nodes (default 10).
    pub min_candidate_nodes_percentage: Option<i64>,
    /// Minimum candidates as a count (default 100).
    pub min_candidate_nodes_absolute: Option<i64>,
}

/// The DefaultPreemption plugin.
pub struct DefaultPreemption {
    handle: Handle,
    pct: usize,
    abs: usize,
    /// Stop the dry runs at a candidate no other could beat (off only in
    /// tests comparing with the full search).
    early_exit: bool,
    /// Picks where the dry runs start (xorshift64*, as kube-scheduler
    /// draws a random offset per attempt).
    rng: AtomicU64,
    /// A fixed start instead (tests comparing two searches).
    fixed_offset: Option<usize>,
}
plugin!(DefaultPreemption, "DefaultPreemption", [post_filter]);

impl DefaultPreemption {
    /// Build from args.
    pub fn new(args: Option<&serde_json::Value>, handle: &Handle) -> Result<Self, String> {
        let a: Args = decode_args(args)?;
        let pct = a.min_candidate_nodes_percentage.unwrap_or(10);
        let abs = a.min_candidate_nodes_absolute.unwrap_or(100);
        if !(0..=100).contains(&pct) {
            return Err(format!(
                "minCandidateNodesPercentage: Invalid value: {pct}: not in valid range [0, 100]"
            ));
        }
        if abs < 0 {
            return Err(format!(
                "minCandidateNodesAbsolute: Invalid value: {abs}: not in valid range [0, inf)"
            ));
        }
        if pct == 0 && abs == 0 {
            return Err("minCandidateNodesPercentage, minCandidateNodesAbsolute: Invalid value: both cannot be zero".into());
        }
        Ok(DefaultPreemption {
            handle: handle.clone(),
            pct: pct as usize,
            abs: abs as usize,
            early_exit: true,
            rng: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
            fixed_offset: None,
        })
    }

    /// Where this attempt's dry runs start among `n` nodes: random, so
    /// pods preempting one after another do not all try the same nodes
    /// first (kube-scheduler's `GetOffsetAndNumCandidates`).
    fn offset(&self, n: usize) -> usize {
        if let Some(o) = self.fixed_offset {
            return o % n;
        }
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// A node where preemption would work.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Node name.
    pub node: Arc<str>,
    /// Pods to delete.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many victims violate a PodDisruptionBudget.
    pub pdb_violations: usize,
}

/// More important first: higher priority, then earlier start.
fn more_important(a: &PodInfo, b: &PodInfo) -> std::cmp::Ordering {
    b.priority
        .cmp(&a.priority)
        .then(a.start_time.cmp(&b.start_time))
}

/// Per victim, in order, whether evicting it (after the ones before it)
/// takes a budget below zero (kube's `filterPodsWithPDBViolation`): a pod
/// without labels matches no budget, and a pod already in a budget's
/// `disruptedPods` does not spend it again.
fn pdb_violations<'p>(pdbs: &[PdbInfo], victims: impl Iterator<Item = &'p PodInfo>) -> Vec<bool> {
    let mut allowed: Vec<i32> = pdbs.iter().map(|p| p.disruptions_allowed).collect();
    victims
        .map(|v| {
            let mut violating = false;
            if v.labels.is_empty() {
                return false;
            }
            for (i, p) in pdbs.iter().enumerate() {
                if p.namespace != v.namespace
                    || !p.selector.matches(&v.labels)
                    || p.disrupted.contains(&v.name)
                {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violating = true;
                }
            }
            violating
        })
        .collect()
}

impl DefaultPreemption {
    /// Per victim, whether evicting it (after the ones before it) violates
    /// a PodDisruptionBudget; `None` when no PDB exists (none does).
    fn violates_pdb<'p>(&self, victims: impl Iterator<Item = &'p PodInfo>) -> Option<Vec<bool>> {
        let Ok(pdbs) = self.handle.pdbs.read() else {
            return None;
        };
        if pdbs.is_empty() {
            return None;
        }
        Some(pdb_violations(&pdbs, victims))
    }

    /// Try one node (at position `idx` in the snapshot): remove every
    /// lower-priority pod; if the pod then fits, add them back one by one
    /// (PDB-violating first, most important first) while it still fits.
    /// The ones that cannot come back are the victims.
    ///
    /// `scratch` is kept between dry runs: the node without its
    /// lower-priority pods is copied into `scratch.info` (reusing its
    /// allocations, the removed pods never copied), and the candidate's
    /// victim list is `scratch.victims` (taken). The cycle state is copied
    /// only when a PreFilter extension would change it.
    fn select_victims<'n>(
        &self,
        d: &DryRuns<'n>,
        idx: usize,
        node: &'n NodeInfo,
        scratch: &mut Scratch<'n>,
    ) -> Option<Candidate> {
        let (pod, state) = (d.pod, d.state);
        let Scratch {
            info,
            potential,
            extra,
            victims,
        } = scratch;
        // Any pod below the incoming pod's priority? The node keeps its
        // lowest priority, so no pod is read for nodes without one.
        if node
            .lowest_priority()
            .is_none_or(|(lowest, _)| lowest >= pod.priority)
        {
            return None;
        }
        // The filters that read only the node object answer the same on
        // every copy of it made below: asked once, on the node itself.
        if !passes_all(&d.per_node, state, pod, node) {
            return None;
        }
        extra.clear();
        extra.extend(d.nominated_on(idx, node));
        potential.clear();
        let fw = d.framework;
        let mut st = None;
        if d.extensions {
            // The extensions see the node after each removal, as
            // kube-scheduler runs them: take the pods out one at a time,
            // by position, last first (a removal moves the last pod into
            // the hole, so positions before it still hold the node's own
            // pods), then restore the node's order.
            info.clone_from(node);
            let st = st.insert(state.clone());
            for i in (0..node.pods.len()).rev() {
                if node.pods[i].priority < pod.priority {
                    let v = info.remove_pod_at(i);
                    fw.run_pre_filter_remove_pod(st, pod, &v, info);
                    potential.push(&node.pods[i]);
                }
            }
            potential.reverse();
        } else {
            info.clone_without(node, |p| p.priority < pod.priority, |p| potential.push(p));
        }
        if !d.fits(&mut st, info, extra) {
            return None;
        }
        // Most important first; the sort is stable, so equal pods are
        // tried in the order they are on the node.
        potential.sort_by(|a, b| more_important(a, b));
        // PDB-violating pods are tried first; without PDBs there is one group.
        let violating = self.violates_pdb(potential.iter().map(|p| &***p));
        victims.clear();
        let mut pdb_violations = 0;
        for is_violating in [true, false] {
            for (i, p) in potential.iter().enumerate() {
                if violating.as_ref().is_some_and(|v| v[i]) != is_violating {
                    continue;
                }
                info.add_pod(Arc::clone(p));
                if let Some(st) = st.as_mut() {
                    fw.run_pre_filter_add_pod(st, pod, p, info);
                }
                if d.fits(&mut st, info, extra) {
                    continue; // reprieved
                }
                info.pop_pod();
                if let Some(st) = st.as_mut() {
                    fw.run_pre_filter_remove_pod(st, pod, p, info);
                }
                if is_violating {
                    pdb_violations += 1;
                }
                victims.push(Arc::clone(p));
            }
        }
        if victims.is_empty() {
            return None;
        }
        victims.sort_by(|a, b| more_important(a, b));
        Some(Candidate {
            node: node.id.clone(),
            victims: std::mem::take(victims),
            pdb_violations,
        })
    }
}

/// Scratch space the dry runs of one attempt reuse: the node copy, the
/// potential victims and nominated pods found on it, and the victim list
/// of the last candidate that lost.
#[derive(Default)]
struct Scratch<'n> {
    info: NodeInfo,
    potential: Vec<&'n Arc<PodInfo>>,
    extra: Vec<&'n Arc<PodInfo>>,
    victims: Vec<Arc<PodInfo>>,
}

/// What the dry runs of one preemption attempt share, worked out once.
struct DryRuns<'a> {
    framework: &'a crate::framework::Framework,
    /// The cycle state after PreFilter.
    state: &'a CycleState,
    /// The preemptor.
    pod: &'a PodInfo,
    /// The filters the pod runs whose verdict may change as pods come and
    /// go: asked on every check of a dry run.
    per_check: Vec<&'a dyn FilterPlugin>,
    /// The filters the pod runs that read only the node object
    /// ([`FilterPlugin::ignores_node_pods`]): asked once per node.
    per_node: Vec<&'a dyn FilterPlugin>,
    /// Whether a PreFilter AddPod/RemovePod extension runs (a dry run then
    /// keeps its own copy of the cycle state).
    extensions: bool,
    /// The pods nominated to nodes, sorted by node name.
    nominated: &'a [(Arc<str>, Arc<PodInfo>)],
    /// Each node's entries in `nominated` by snapshot position (empty when
    /// nothing is nominated).
    nominated_index: Vec<(u32, u32)>,
}

impl<'a> DryRuns<'a> {
    fn new(ctx: &PostFilterContext<'a>, state: &'a CycleState, pod: &'a PodInfo) -> Self {
        let fw = ctx.framework;
        let (per_node, per_check) = fw
            .active_filters(state)
            .partition(|f| f.ignores_node_pods());
        DryRuns {
            framework: fw,
            state,
            pod,
            per_check,
            per_node,
            extensions: fw.has_active_extensions(state),
            nominated: ctx.nominated,
            nominated_index: fw.nominated_index(ctx.snapshot, ctx.nominated),
        }
    }

    /// The pods nominated to the node at position `idx` that count when
    /// filtering the preemptor there (others' of at least its priority).
    fn nominated_on<'s>(
        &'s self,
        idx: usize,
        node: &'s NodeInfo,
    ) -> impl Iterator<Item = &'a Arc<PodInfo>> + 's {
        let run: &'a [(Arc<str>, Arc<PodInfo>)] = match self.nominated_index.get(idx) {
            Some(&(first, len)) if len > 0 => self
                .nominated
                .get(first as usize..(first + len) as usize)
                .unwrap_or_default(),
            _ => &[],
        };
        // The index is by position in the snapshot the context holds;
        // the entries name this node.
        debug_assert!(run.iter().all(|(n, _)| **n == *node.name));
        let pod = self.pod;
        run.iter()
            .filter(move |(_, p)| nominated_counts(pod, p))
            .map(|(_, p)| p)
    }

    /// Whether the preemptor passes the filters that may change on the dry
    /// run's `info`, with the pods nominated there (`extra`) and without
    /// them: the answer `Framework::run_filter_with_nominated` gives (the
    /// node-only filters passed already), but the nominated pods are added
    /// to the dry run's copy and taken out again instead of copying it once
    /// more. `st` is the dry run's cycle state (`None`: no PreFilter
    /// extension runs, so the cycle's state is read unchanged).
    fn fits(
        &self,
        st: &mut Option<CycleState>,
        info: &mut NodeInfo,
        extra: &[&Arc<PodInfo>],
    ) -> bool {
        let (fw, pod) = (self.framework, self.pod);
        if !extra.is_empty() {
            let mut ok = true;
            let mut added = 0;
            let mut extended = 0;
            for p in extra {
                info.add_pod(Arc::clone(p));
                added += 1;
                if let Some(st) = st.as_mut()
                    && !fw.run_pre_filter_add_pod(st, pod, p, info).is_success()
                {
                    ok = false;
                    break;
                }
                extended += 1;
            }
            if ok {
                ok = passes_all(
                    &self.per_check,
                    st.as_ref().unwrap_or(self.state),
                    pod,
                    info,
                );
            }
            for i in (0..added).rev() {
                info.pop_pod();
                if let Some(st) = st.as_mut().filter(|_| i < extended) {
                    fw.run_pre_filter_remove_pod(st, pod, extra[i], info);
                }
            }
            if !ok {
                return false;
            }
        }
        passes_all(
            &self.per_check,
            st.as_ref().unwrap_or(self.state),
            pod,
            info,
        )
    }
}

/// Whether every filter passes (an Error counts as not passing, as in
/// `Framework::run_filter_passes`).
fn passes_all(
    filters: &[&dyn FilterPlugin],
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> bool {
    filters
        .iter()
        .all(|f| matches!(f.passes(state, pod, node), Ok(true)))
}

/// The best key any candidate could have among `nodes` (kube-scheduler's
/// order, see [`pick_one`]): no PDB violation, one victim of the lowest
/// priority below `pod`'s, started last among those. A candidate with this
/// key cannot be beaten by a later one (ties go to the first found), so the
/// search may stop there: the node and victims chosen are the same as
/// after a dry run on every candidate node.
///
/// Read from each node's kept [`NodeInfo::lowest_priority`] (no walk over
/// every pod): the lowest priority overall is the lowest below `pod`'s
/// whenever any pod is below it.
fn best_possible<'n>(
    pod: &PodInfo,
    nodes: impl Iterator<Item = &'n NodeInfo>,
) -> Option<(i32, i64)> {
    let mut best: Option<(i32, i64)> = None;
    for (prio, start) in nodes.filter_map(|n| n.lowest_priority()) {
        best = Some(match best {
            Some((b, s)) if b < prio => (b, s),
            Some((b, s)) if b == prio => (b, s.max(start)),
            _ => (prio, start),
        });
    }
    best.filter(|(prio, _)| *prio < pod.priority)
}

/// Whether `c` has the key [`best_possible`] computed.
fn is_best_possible(c: &Candidate, best: Option<(i32, i64)>) -> bool {
    match (best, c.victims.as_slice()) {
        (Some((prio, start)), [v]) => {
            c.pdb_violations == 0 && v.priority == prio && v.start_time == start
        }
        _ => false,
    }
}

impl DefaultPreemption {
    /// The dry runs: candidate nodes from a pseudo-random offset until
    /// `max(minCandidateNodesAbsolute, minCandidateNodesPercentage)` are
    /// found (or one no other could beat), then the best by [`pick_one`].
    /// The error is the message for the pod when no node would do.
    fn find_candidate(
        &self,
        ctx: &PostFilterContext<'_>,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
    ) -> Result<Candidate, Status> {
        let nodes = ctx.snapshot.nodes();
        let n = nodes.len();
        let mut not_helpful = NodeToStatus::default();
        // Most cycles have no unresolvable node: then no per-node lookup.
        let any_unresolvable = statuses
            .distinct()
            .any(|(s, _)| s.code == Code::UnschedulableAndUnresolvable);
        // Each node with its position in the snapshot.
        let potential: Vec<(usize, &NodeInfo)> = nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| {
                if node.node.is_none() {
                    return false;
                }
                if !any_unresolvable {
                    return true;
                }
                match statuses.get(node.name.as_str()) {
                    Some(s) if s.code == Code::UnschedulableAndUnresolvable => {
                        not_helpful.insert(
                            node.id.clone(),
                            Status::unresolvable("Preemption is not helpful for scheduling"),
                        );
                        false
                    }
                    _ => true,
                }
            })
            .collect();
        if potential.is_empty() {
            return Err(Status::unschedulable(format!(
                "preemption: {}",
                histogram_message(n, &not_helpful)
            )));
        }
        let want = (potential.len() * self.pct / 100)
            .max(self.abs)
            .min(potential.len());
        let offset = self.offset(potential.len());
        // The best candidate so far (kube-scheduler's `pickOneNodeForPreemption`
        // over the candidates in the order found: a later one replaces it
        // only when strictly better) and how many were found.
        let mut chosen: Option<Candidate> = None;
        let mut found = 0;
        let mut statuses_out = not_helpful;
        let dry = DryRuns::new(ctx, state, pod);
        let mut scratch = Scratch::default();
        // Worked out on the first candidate that could have it.
        let mut best: Option<Option<(i32, i64)>> = None;
        for i in 0..potential.len() {
            let (idx, node) = potential[(offset + i) % potential.len()];
            match self.select_victims(&dry, idx, node, &mut scratch) {
                Some(c) => {
                    found += 1;
                    let done = self.early_exit
                        && c.pdb_violations == 0
                        && c.victims.len() == 1
                        && is_best_possible(
                            &c,
                            *best.get_or_insert_with(|| {
                                best_possible(pod, potential.iter().map(|(_, n)| *n))
                            }),
                        );
                    let better = chosen
                        .as_ref()
                        .is_none_or(|b| compare(&c, b) == std::cmp::Ordering::Less);
                    let loser = if better { chosen.replace(c) } else { Some(c) };
                    if let Some(loser) = loser {
                        // its victim list is reused by the next candidate
                        scratch.victims = loser.victims;
                    }
                    if done {
                        break;
                    }
                }
                None => {
                    statuses_out.insert(
                        node.id.clone(),
                        Status::unschedulable("No preemption victims found for incoming pod"),
                    );
                }
            }
            if found >= want {
                break;
            }
        }
        chosen.ok_or_else(|| {
            Status::unschedulable(format!(
                "preemption: {}",
                histogram_message(n, &statuses_out)
            ))
        })
    }
}

/// Pick a candidate by kube-scheduler's rules (the first of equals).
pub fn pick_one(candidates: &[Candidate]) -> Option<&Candidate> {
    candidates.iter().min_by(|a, b| compare(a, b))
}

/// kube-scheduler's order of candidates: `Less` when `a` is the better
/// node to preempt on.
fn compare(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    {
        let hi = |c: &Candidate| c.victims.first().map_or(i32::MIN, |v| v.priority);
        let sum = |c: &Candidate| {
            c.victims
                .iter()
                .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
                .sum::<i64>()
        };
        // latest start among the highest-priority victims: earlier is worse
        let earliest_top = |c: &Candidate| {
            let top = hi(c);
            c.victims
                .iter()
                .filter(|v| v.priority == top)
                .map(|v| v.start_time)
                .min()
                .unwrap_or(0)
        };
        a.pdb_violations
            .cmp(&b.pdb_violations)
            .then(hi(a).cmp(&hi(b)))
            .then(sum(a).cmp(&sum(b)))
            .then(a.victims.len().cmp(&b.victims.len()))
            .then(earliest_top(b).cmp(&earliest_top(a)))
    }
}

/// The reason of the `DisruptionTarget` condition on a preemption victim.
const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// kube's `PodEligibleToPreemptOthers`: a pod nominated to a node where a
/// lower-priority pod is still terminating because of a preemption waits
/// for it instead of preempting again (possibly on another node), unless
/// the filters found the nominated node unresolvable.
fn terminating_victim_on_nominated_node(
    ctx: &PostFilterContext<'_>,
    pod: &PodInfo,
    statuses: &NodeToStatus,
) -> bool {
    let nominated = ctx
        .nominated
        .iter()
        .find(|(_, p)| p.uid == pod.uid)
        .map(|(n, _)| n.as_ref())
        .or_else(|| {
            pod.pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref())
        });
    let Some(node) = nominated.filter(|n| !n.is_empty()) else {
        return false;
    };
    if statuses
        .get(node)
        .is_some_and(|s| s.code == Code::UnschedulableAndUnresolvable)
    {
        return false;
    }
    ctx.snapshot.get(node).is_some_and(|n| {
        n.pods
            .iter()
            .any(|p| p.priority < pod.priority && terminating_by_preemption(&p.pod))
    })
}

/// kube's `podTerminatingByPreemption`: deleted, and its `DisruptionTarget`
/// condition says the scheduler preempted it.
fn terminating_by_preemption(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
            .is_some_and(|c| {
                c.status == "True" && c.reason.as_deref() == Some(PREEMPTION_BY_SCHEDULER)
            })
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        ctx: &PostFilterContext<'_>,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        if !pod.may_preempt {
            return (
                None,
                Status::unschedulable("preemption: not eligible due to preemptionPolicy=Never."),
            );
        }
        if terminating_victim_on_nominated_node(ctx, pod, statuses) {
            return (
                None,
                Status::unschedulable(
                    "preemption: not eligible due to a terminating pod on the nominated node.",
                ),
            );
        }
        let best = match self.find_candidate(ctx, state, pod, statuses) {
            Ok(best) => best,
            Err(s) => return (None, s),
        };
        // A victim waiting at Permit is rejected there, not deleted (kube's
        // PreemptPod): it goes back to the queue and its room is freed.
        let waiting = |v: &PodInfo| {
            self.handle
                .waiting_pods
                .reject(&v.uid, "DefaultPreemption", "preempted")
        };
        let to_delete: Vec<_> = best
            .victims
            .iter()
            .filter(|v| !waiting(v))
            .cloned()
            .collect();
        // Delete the victims gracefully; the pod is retried when they are gone.
        if let (Some(client), Some(rt)) = (self.handle.client.clone(), self.handle.runtime.clone())
        {
            for v in to_delete {
                let client = client.clone();
                let preemptor = pod.key();
                let preemptor_uid = pod.uid.clone();
                let node = best.node.clone();
                let scheduler = pod
                    .pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.scheduler_name.clone())
                    .unwrap_or_else(|| "default-scheduler".to_string());
                rt.spawn(async move {
                    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, &v.namespace);
                    // kube-scheduler marks the victim before deleting it, so
                    // the pod's owner and a retried preemptor can tell why
                    // it is terminating.
                    let mark = serde_json::json!({"status": {"conditions": [{
                        "type": "DisruptionTarget", "status": "True",
                        "reason": PREEMPTION_BY_SCHEDULER,
                        "message": format!("{scheduler}: preempting to accommodate a higher priority pod"),
                    }]}});
                    let pp = kube::api::PatchParams::default();
                    if let Err(e) = api.patch_status(&v.name, &pp, &kube::api::Patch::Strategic(&mark)).await {
                        tracing::warn!(victim = %v.key(), error = %e, "marking a preemption victim failed");
                    }
                    let dp = kube::api::DeleteParams {
                        preconditions: Some(kube::api::Preconditions { uid: Some(v.uid.clone()), resource_version: None }),
                        ..Default::default()
                    };
                    match api.delete(&v.name, &dp).await {
                        Ok(_) => {
                            tracing::info!(victim = %v.key(), preemptor = %preemptor, node = %node, "preempted");
                            // kube-scheduler's event on the victim.
                            let note = format!("Preempted by pod {preemptor_uid} on node {node}");
                            crate::scheduler::post_event(&api.into_client(), &v, "Normal", "Preempted", &note).await;
                        }
                        Err(e) => tracing::warn!(victim = %v.key(), error = %e, "deleting a preemption victim failed"),
                    }
                });
            }
        }
        (
            Some(PostFilterResult {
                nominated_node_name: Some(best.node.to_string()),
            }),
            Status::success(),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! The dry-run shortcuts (scratch copies, nominated pods added in place,
    //! no state copy without extensions, stopping at an unbeatable
    //! candidate) must choose the same node and victims as the plain
    //! search kube-scheduler does.

    use super::*;
    use crate::framework::runtime::nominated_on;
    use crate::framework::{CycleState, Framework, PdbInfo};
    use crate::{Input, SchedulerBuilder, SchedulerCore};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    use crate::test_rng::Rng;

    #[test]
    fn budgets_skip_unlabelled_and_already_disrupted_pods() {
        let info = |name: &str, labels: serde_json::Value| {
            let mut p = pod(name, 100, 0, 0, "a", json!({}));
            p.metadata.labels = serde_json::from_value(labels).unwrap();
            PodInfo::new(Arc::new(p))
        };
        let budget = |sel: &str, allowed: i32, disrupted: &[&str]| PdbInfo {
            namespace: "default".into(),
            name: "b".into(),
            selector: kubeforge_apimachinery::labels::Selector::parse(sel).unwrap(),
            disruptions_allowed: allowed,
            disrupted: disrupted.iter().map(|s| s.to_string()).collect(),
        };
        let a1 = info("a1", json!({"app": "a"}));
        let a2 = info("a2", json!({"app": "a"}));
        let bare = info("bare", json!(null));
        // One disruption allowed: the second matching victim violates.
        let b = [budget("app=a", 1, &[])];
        assert_eq!(pdb_violations(&b, [&a1, &a2].into_iter()), [false, true]);
        // a1's eviction was already counted by the API server: it costs
        // nothing, so a2 fits in the budget.
        let b = [budget("app=a", 1, &["a1"])];
        assert_eq!(pdb_violations(&b, [&a1, &a2].into_iter()), [false, false]);
        // A selector that matches the absence of labels still does not
        // cover a pod without any.
        let b = [budget("app!=b", 0, &[])];
        assert_eq!(pdb_violations(&b, [&bare, &a1].into_iter()), [false, true]);
    }

    fn node(name: &str, zone: u64) -> Input {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": format!("z{zone}")}},
            "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
        }))
        .unwrap();
        Input::NodeApply(Arc::new(n))
    }

    /// A node that, by `kind`, carries a NoSchedule taint (0), is
    /// cordoned (1) or is plain: the filters that read only the node
    /// object (TaintToleration, NodeUnschedulable) then reject some nodes.
    fn node_of_kind(name: &str, zone: u64, kind: u64) -> Input {
        let spec = match kind {
            0 => json!({"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}),
            1 => json!({"unschedulable": true}),
            _ => json!({}),
        };
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": format!("z{zone}")}},
            "spec": spec,
            "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
        }))
        .unwrap();
        Input::NodeApply(Arc::new(n))
    }

    fn pod(
        name: &str,
        cpu: u64,
        prio: i32,
        start: u64,
        app: &str,
        extra: serde_json::Value,
    ) -> Pod {
        let mut spec = json!({
            "priority": prio,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": format!("{cpu}m")}}}]
        });
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                spec[k] = v.clone();
            }
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name,
                "labels": {"app": app},
                "creationTimestamp": format!("2026-01-01T00:00:{start:02}Z")},
            "spec": spec
        }))
        .unwrap()
    }

    /// kube-scheduler's search without the shortcuts: a fresh copy of the
    /// node and the state per dry run, `run_filter_with_nominated` (its own
    /// copies) per check, every candidate up to the bound, then `pick_one`.
    fn reference(
        plugin: &DefaultPreemption,
        ctx: &PostFilterContext<'_>,
        state: &CycleState,
        pod: &PodInfo,
    ) -> Option<Candidate> {
        let fw = ctx.framework;
        let potential: Vec<&NodeInfo> = ctx.snapshot.nodes().iter().collect();
        let want = (potential.len() * plugin.pct / 100)
            .max(plugin.abs)
            .min(potential.len());
        let offset = plugin.offset(potential.len());
        let mut candidates = Vec::new();
        for i in 0..potential.len() {
            let node = potential[(offset + i) % potential.len()];
            let mut info = node.clone();
            let mut st = state.clone();
            let mut victims_pool: Vec<Arc<PodInfo>> = node
                .pods
                .iter()
                .filter(|p| p.priority < pod.priority)
                .cloned()
                .collect();
            if victims_pool.is_empty() {
                continue;
            }
            for v in &victims_pool {
                info.remove_pod(&v.uid);
                fw.run_pre_filter_remove_pod(&mut st, pod, v, &info);
            }
            if !fw
                .run_filter_with_nominated(&st, pod, &info, ctx.nominated)
                .is_success()
            {
                continue;
            }
            victims_pool.sort_by(|a, b| more_important(a, b));
            let violating = plugin
                .violates_pdb(victims_pool.iter().map(|p| &**p))
                .unwrap_or_else(|| vec![false; victims_pool.len()]);
            let (viol, non_viol): (Vec<_>, Vec<_>) = victims_pool
                .into_iter()
                .zip(violating)
                .partition(|(_, v)| *v);
            let mut victims = Vec::new();
            let mut pdb_violations = 0;
            for (group, is_violating) in [(viol, true), (non_viol, false)] {
                for (p, _) in group {
                    info.add_pod(p.clone());
                    fw.run_pre_filter_add_pod(&mut st, pod, &p, &info);
                    if fw
                        .run_filter_with_nominated(&st, pod, &info, ctx.nominated)
                        .is_success()
                    {
                        continue;
                    }
                    info.remove_pod(&p.uid);
                    fw.run_pre_filter_remove_pod(&mut st, pod, &p, &info);
                    pdb_violations += usize::from(is_violating);
                    victims.push(p);
                }
            }
            if victims.is_empty() {
                continue;
            }
            victims.sort_by(|a, b| more_important(a, b));
            candidates.push(Candidate {
                node: node.id.clone(),
                victims,
                pdb_violations,
            });
            if candidates.len() >= want {
                break;
            }
        }
        pick_one(&candidates).cloned()
    }

    fn key(c: &Option<Candidate>) -> Option<(String, Vec<String>, usize)> {
        c.as_ref().map(|c| {
            (
                c.node.to_string(),
                c.victims.iter().map(|v| v.uid.clone()).collect(),
                c.pdb_violations,
            )
        })
    }

    /// The runtime the test scheduler cores bind on.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn core(rt: &tokio::runtime::Runtime) -> SchedulerCore {
        SchedulerBuilder::without_client()
            .build_core(rt.handle().clone())
            .unwrap()
    }

    /// Run the search three ways on `core`'s cluster for `preemptor`.
    fn compare(
        core: &SchedulerCore,
        preemptor: Pod,
        nominated: &[(Arc<str>, Arc<PodInfo>)],
        args: serde_json::Value,
        offset: usize,
    ) -> [Option<(String, Vec<String>, usize)>; 3] {
        let fw: &Framework = core.profile("default-scheduler").unwrap();
        let snapshot = core.cache().snapshot();
        let pod = PodInfo::new(Arc::new(preemptor));
        let mut state = CycleState::default();
        fw.run_pre_filter(&mut state, &pod, snapshot).unwrap();
        let ctx = PostFilterContext {
            framework: fw,
            snapshot,
            nominated,
        };
        let mut plugin = DefaultPreemption::new(Some(&args), fw.handle()).unwrap();
        plugin.fixed_offset = Some(offset);
        let fast = plugin
            .find_candidate(&ctx, &state, &pod, &NodeToStatus::default())
            .ok();
        plugin.early_exit = false;
        let full = plugin
            .find_candidate(&ctx, &state, &pod, &NodeToStatus::default())
            .ok();
        let reference = reference(&plugin, &ctx, &state, &pod);
        [key(&fast), key(&full), key(&reference)]
    }

    #[test]
    fn shortcuts_choose_what_the_full_search_chooses() {
        let rt = runtime();
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut found = 0;
        for round in 0..300 {
            let mut c = core(&rt);
            let nodes = 4 + rng.next(24);
            for i in 0..nodes {
                c.handle_input(node_of_kind(&format!("n{i}"), rng.next(3), rng.next(6)));
            }
            for i in 0..nodes {
                for j in 0..rng.next(6) {
                    let prio = [0, 0, 5, 10, 50, 200][rng.next(6) as usize];
                    let app = if rng.next(2) == 0 { "a" } else { "b" };
                    // anti-affinity on some pods exercises the PreFilter extensions
                    let mut extra = if rng.next(8) == 0 {
                        json!({"nodeName": format!("n{i}"), "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}]}}})
                    } else {
                        json!({"nodeName": format!("n{i}")})
                    };
                    // a host port on some pods (NodePorts depends on them)
                    if rng.next(6) == 0 {
                        extra["containers"] = json!([{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
                            "resources": {"requests": {"cpu": format!("{}m", 300 + 100 * rng.next(10))}}}]);
                    }
                    let p = pod(
                        &format!("p{i}-{j}"),
                        300 + 100 * rng.next(10),
                        prio,
                        rng.next(4),
                        app,
                        extra,
                    );
                    c.handle_input(Input::PodApply(Arc::new(p)));
                }
            }
            // Delete a few pods: nodes then work out their lowest
            // priority again (the early stop's bound reads it).
            for i in 0..nodes {
                if rng.next(3) == 0 {
                    let victim = pod(&format!("p{i}-0"), 100, 0, 0, "a", json!({}));
                    c.handle_input(Input::PodDelete(Arc::new(victim)));
                }
            }
            for n in c.cache().snapshot().nodes() {
                let scanned = n.pods.iter().map(|p| p.priority).min().map(|lo| {
                    let start = n
                        .pods
                        .iter()
                        .filter(|p| p.priority == lo)
                        .map(|p| p.start_time)
                        .max();
                    (lo, start.unwrap_or_default())
                });
                assert_eq!(
                    n.lowest_priority(),
                    scanned,
                    "round {round}: node {}",
                    n.name
                );
            }
            if rng.next(2) == 0 {
                let fw = c.profile("default-scheduler").unwrap();
                *fw.handle().pdbs.write().unwrap() = vec![PdbInfo {
                    namespace: "default".into(),
                    name: "pdb".into(),
                    selector: kubeforge_apimachinery::labels::Selector::parse("app=a").unwrap(),
                    disruptions_allowed: rng.next(3) as i32,
                    disrupted: Default::default(),
                }];
            }
            let mut nominated: Vec<(Arc<str>, Arc<PodInfo>)> = (0..rng.next(4))
                .map(|k| {
                    let p = pod(
                        &format!("nom{k}"),
                        500 + 500 * rng.next(4),
                        150,
                        0,
                        "x",
                        json!({}),
                    );
                    (
                        Arc::from(format!("n{}", rng.next(nodes))),
                        Arc::new(PodInfo::new(Arc::new(p))),
                    )
                })
                .collect();
            nominated.sort_by(|a, b| a.0.cmp(&b.0));
            let extra = match rng.next(3) {
                0 => json!({}),
                1 => {
                    json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "a"}}}]})
                }
                _ => {
                    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "b"}}}]}}})
                }
            };
            let mut extra = extra;
            // What the node-only filters decide: tolerating the taint, a
            // zone selector, a node name; and a host port for NodePorts.
            if rng.next(2) == 0 {
                extra["tolerations"] = json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
            }
            if rng.next(3) == 0 {
                extra["nodeSelector"] =
                    json!({"topology.kubernetes.io/zone": format!("z{}", rng.next(3))});
            }
            if rng.next(8) == 0 {
                extra["nodeName"] = json!(format!("n{}", rng.next(nodes)));
            }
            let cpu = 1000 + 500 * rng.next(6);
            if rng.next(4) == 0 {
                extra["containers"] = json!([{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": format!("{cpu}m")}}}]);
            }
            let preemptor = pod(&format!("hi{round}"), cpu, 100, rng.next(4), "a", extra);
            let args = if rng.next(2) == 0 {
                json!({})
            } else {
                json!({"minCandidateNodesAbsolute": 1 + rng.next(5), "minCandidateNodesPercentage": rng.next(30)})
            };
            let [fast, full, reference] =
                compare(&c, preemptor, &nominated, args, rng.next(64) as usize);
            assert_eq!(full, reference, "round {round}: the full search");
            assert_eq!(fast, reference, "round {round}: with the early stop");
            if fast.is_some() {
                found += 1;
            }
        }
        assert!(found > 100, "only {found} of 300 rounds found a candidate");
    }

    /// The failed filter pass records, for every node, what kube-scheduler's
    /// per-node `RunFilterPluginsWithNominatedPods` returns (nominated pods
    /// found through the per-cycle index, equal statuses shared), and the
    /// `FailedScheduling` histogram counts them node by node.
    #[test]
    fn failed_pass_statuses_match_per_node_filtering() {
        use crate::framework::runtime::histogram_message;
        let rt = runtime();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut nominated_nodes = 0;
        for round in 0..120 {
            let mut c = core(&rt);
            let nodes = 3 + rng.next(30);
            for i in 0..nodes {
                c.handle_input(node(&format!("n{i}"), rng.next(3)));
            }
            for i in 0..nodes {
                for j in 0..rng.next(5) {
                    let mut extra = json!({"nodeName": format!("n{i}")});
                    if rng.next(4) == 0 {
                        extra["containers"] = json!([{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
                            "resources": {"requests": {"cpu": "500m"}}}]);
                    }
                    let p = pod(
                        &format!("p{i}-{j}"),
                        300 + 200 * rng.next(5),
                        0,
                        0,
                        "a",
                        extra,
                    );
                    c.handle_input(Input::PodApply(Arc::new(p)));
                }
            }
            // Nominated pods of several priorities, some with the host port.
            let mut nominated: Vec<(Arc<str>, Arc<PodInfo>)> = (0..rng.next(2 * nodes))
                .map(|k| {
                    let extra = if rng.next(3) == 0 {
                        json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
                            "resources": {"requests": {"cpu": "100m"}}}]})
                    } else {
                        json!({})
                    };
                    let p = pod(&format!("nom{k}"), 500 * rng.next(5), [50, 100, 150][rng.next(3) as usize], 0, "x", extra);
                    (
                        Arc::from(format!("n{}", rng.next(nodes + 2))), // some not in the cluster
                        Arc::new(PodInfo::new(Arc::new(p))),
                    )
                })
                .collect();
            nominated.sort_by(|a, b| a.0.cmp(&b.0));
            // Several cycles on the same scheduler: copies of nodes with
            // their nominated pods are kept between cycles and must follow
            // every change of the node's pods and of the nominations.
            for step in 0..4 {
                let extra = if rng.next(2) == 0 {
                    json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
                        "resources": {"requests": {"cpu": format!("{}m", 1000 + 500 * rng.next(6))}}}]})
                } else {
                    json!({})
                };
                let incoming = pod(
                    "hi",
                    1000 + 500 * rng.next(6),
                    [100, 150][rng.next(2) as usize],
                    0,
                    "a",
                    extra,
                );
                let fw: &Framework = c.profile("default-scheduler").unwrap();
                let snapshot = c.cache().snapshot();
                let pi = PodInfo::new(Arc::new(incoming));
                let mut state = CycleState::default();
                fw.run_pre_filter(&mut state, &pi, snapshot).unwrap();
                let (feasible, statuses) = fw
                    .find_nodes_that_fit(&state, &pi, snapshot, None, &nominated)
                    .unwrap();
                let mut reference = NodeToStatus::default();
                let mut fits = Vec::new();
                for n in snapshot.nodes() {
                    if nominated_on(&pi, &n.name, &nominated).next().is_some() {
                        nominated_nodes += 1;
                    }
                    let s = fw.run_filter_with_nominated(&state, &pi, n, &nominated);
                    if s.is_success() {
                        fits.push(n.name.clone());
                    } else {
                        reference.insert(n.id.clone(), s);
                    }
                }
                let mut got: Vec<String> = feasible.iter().map(|n| n.name.clone()).collect();
                got.sort();
                fits.sort();
                assert_eq!(got, fits, "round {round} step {step}: feasible nodes");
                if feasible.is_empty() {
                    assert_eq!(statuses.len(), reference.len(), "round {round}");
                    for (name, s) in reference.iter() {
                        assert_eq!(
                            statuses.get(name),
                            Some(s),
                            "round {round} step {step}: node {name}"
                        );
                    }
                    let counted: usize = statuses.distinct().map(|(_, c)| c).sum();
                    assert_eq!(counted, statuses.len(), "round {round}");
                    // The histogram, counted node by node.
                    let mut by_reason: std::collections::BTreeMap<String, usize> =
                        Default::default();
                    for (_, s) in reference.iter() {
                        for r in &s.reasons {
                            *by_reason.entry(r.to_string()).or_default() += 1;
                        }
                    }
                    let mut parts: Vec<String> =
                        by_reason.iter().map(|(r, c)| format!("{c} {r}")).collect();
                    parts.sort();
                    assert_eq!(
                        histogram_message(snapshot.nodes().len(), &statuses),
                        format!(
                            "0/{} nodes are available: {}.",
                            snapshot.nodes().len(),
                            parts.join(", ")
                        ),
                        "round {round} step {step}"
                    );
                }
                drop(feasible);
                match rng.next(5) {
                    0 => {} // nothing changed: the kept copies are used as they are
                    3 => {
                        // A node leaves and comes back: the last node moves
                        // into its place and it is appended, so node
                        // positions kept from earlier cycles are stale.
                        let i = rng.next(nodes);
                        c.handle_input(Input::NodeDelete(format!("n{i}")));
                        c.handle_input(node(&format!("n{i}"), rng.next(3)));
                    }
                    1 => {
                        let i = rng.next(nodes);
                        let p = pod(
                            &format!("q{step}"),
                            100 + 300 * rng.next(4),
                            0,
                            0,
                            "a",
                            json!({"nodeName": format!("n{i}")}),
                        );
                        c.handle_input(Input::PodApply(Arc::new(p)));
                    }
                    2 => {
                        let victim = pod(
                            &format!("p{}-0", rng.next(nodes)),
                            100,
                            0,
                            0,
                            "a",
                            json!({}),
                        );
                        c.handle_input(Input::PodDelete(Arc::new(victim)));
                    }
                    _ => {
                        if !nominated.is_empty() {
                            let k = rng.next(nominated.len() as u64) as usize;
                            nominated.remove(k);
                        }
                        let p = pod(
                            &format!("nomx{step}"),
                            500 * rng.next(3),
                            150,
                            0,
                            "x",
                            json!({}),
                        );
                        nominated.push((
                            Arc::from(format!("n{}", rng.next(nodes))),
                            Arc::new(PodInfo::new(Arc::new(p))),
                        ));
                        nominated.sort_by(|a, b| a.0.cmp(&b.0));
                    }
                }
            }
        }
        assert!(
            nominated_nodes > 200,
            "only {nominated_nodes} nodes had nominated pods"
        );
    }

    #[test]
    fn node_to_status_shares_equal_statuses() {
        let mut m = NodeToStatus::default();
        for i in 0..4 {
            m.insert(
                Arc::from(format!("a{i}")),
                Status::unschedulable("Insufficient cpu"),
            );
        }
        m.insert(
            Arc::from("b"),
            Status::unresolvable("node(s) didn't match Pod's node affinity/selector"),
        );
        // a record replaced moves the node to its new status
        m.insert(
            Arc::from("a0"),
            Status::unresolvable("node(s) didn't match Pod's node affinity/selector"),
        );
        assert_eq!(m.len(), 5);
        let mut d: Vec<(String, usize)> = m.distinct().map(|(s, c)| (s.message(), c)).collect();
        d.sort();
        assert_eq!(
            d,
            vec![
                ("Insufficient cpu".to_string(), 3),
                (
                    "node(s) didn't match Pod's node affinity/selector".to_string(),
                    2
                )
            ]
        );
        assert_eq!(
            m.get("a0").unwrap().code,
            Code::UnschedulableAndUnresolvable
        );
        assert_eq!(m.get("a1").unwrap().message(), "Insufficient cpu");
        assert!(m.get("c").is_none());
        // statuses with distinct text beyond the scanned table still count
        for i in 0..100 {
            m.insert(
                Arc::from(format!("x{i}")),
                Status::unschedulable(format!("reason {}", i % 40)),
            );
        }
        assert_eq!(m.len(), 105);
        assert_eq!(m.distinct().map(|(_, c)| c).sum::<usize>(), 105);
        assert_eq!(m.iter().count(), 105);
    }

    #[test]
    fn the_newest_lowest_victim_wins_even_after_a_good_candidate() {
        // Three nodes each with one priority-0 pod; the one started last is
        // the victim kube-scheduler picks, wherever the search starts.
        let rt = runtime();
        let mut c = core(&rt);
        for (i, start) in [(0, 10), (1, 30), (2, 20)] {
            c.handle_input(node(&format!("n{i}"), 0));
            let p = pod(
                &format!("low{i}"),
                3500,
                0,
                start,
                "a",
                json!({"nodeName": format!("n{i}")}),
            );
            c.handle_input(Input::PodApply(Arc::new(p)));
        }
        for offset in 0..3 {
            // wherever the dry runs start
            let [fast, full, reference] = compare(
                &c,
                pod("hi", 1000, 100, 0, "a", json!({})),
                &[],
                json!({}),
                offset,
            );
            assert_eq!(fast, reference);
            assert_eq!(full, reference);
            assert_eq!(fast, Some(("n1".to_string(), vec!["low1".to_string()], 0)));
        }
    }
}
