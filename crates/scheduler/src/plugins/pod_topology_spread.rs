//! PodTopologySpread: keeps matching pods spread over topology domains.
//! DoNotSchedule constraints filter (`count + self − global min ≤ maxSkew`,
//! with `minDomains`), ScheduleAnyway constraints and the system defaults
//! (hostname maxSkew 3, zone maxSkew 5) score (weight 2). Node inclusion:
//! `nodeAffinityPolicy` Honor and `nodeTaintsPolicy` Ignore by default.
//!
//! The system defaults select "pods of the same controller" (the owner with
//! `controller: true`), which is what kube-scheduler's selector built from the
//! owning ReplicaSet/StatefulSet matches in practice; Services are not
//! consulted.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use kubeforge_apimachinery::labels::Selector;
use serde_json::json;

use super::helper::plugin;
use super::node_affinity::matches_required;
use crate::framework::{
    ClusterEvent, Code, CycleState, DomainCounts, FilterPlugin, MAX_NODE_SCORE, NodeInfo,
    NodeScore, PodInfo, PodMatcher, PreFilterExtensions, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Snapshot, Status,
    topology_counts::{FastBuild, controller_uid},
    types::{NO_TOPOLOGY_VALUE, tolerates, well_known_key_index},
};

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
const STATE_FILTER: &str = "PreFilterPodTopologySpread";
const STATE_SCORE: &str = "PreScorePodTopologySpread";

#[derive(Clone)]
struct Constraint {
    max_skew: i64,
    key: String,
    matcher: PodMatcher,
    min_domains: i64,
    honor_affinity: bool,
    honor_taints: bool,
}

impl Constraint {
    fn matches(&self, ns: &str, pod: &PodInfo) -> bool {
        self.matcher.counts(ns, pod)
    }
}

fn parse(c: &TopologySpreadConstraint, pod: &PodInfo) -> Result<Constraint, String> {
    if c.max_skew <= 0 {
        return Err(format!(
            "topologySpreadConstraints.maxSkew: Invalid value: {}: must be greater than zero",
            c.max_skew
        ));
    }
    let mut sel = match &c.label_selector {
        Some(s) => serde_json::to_value(s).map_err(|e| e.to_string())?,
        None => json!(null),
    };
    // matchLabelKeys: the pod's own values for these keys join the selector.
    for k in c.match_label_keys.iter().flatten() {
        if let Some(v) = pod.labels.get(k) {
            if sel.is_null() {
                sel = json!({});
            }
            let exprs = sel
                .as_object_mut()
                .map(|o| o.entry("matchExpressions").or_insert_with(|| json!([])));
            if let Some(arr) = exprs.and_then(|e| e.as_array_mut()) {
                arr.push(json!({"key": k, "operator": "In", "values": [v]}));
            }
        }
    }
    let selector = if sel.is_null() {
        Selector::nothing()
    } else {
        Selector::from_label_selector(&sel)
            .map_err(|e| format!("topologySpreadConstraints.labelSelector: {e}"))?
    };
    Ok(Constraint {
        max_skew: i64::from(c.max_skew),
        key: c.topology_key.clone(),
        matcher: PodMatcher::Labels(selector),
        min_domains: i64::from(c.min_domains.unwrap_or(1)),
        honor_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
        honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
    })
}

fn constraints(pod: &PodInfo, hard: bool) -> Result<Vec<Constraint>, String> {
    let want = if hard {
        "DoNotSchedule"
    } else {
        "ScheduleAnyway"
    };
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.when_unsatisfiable == want)
        .map(|c| parse(c, pod))
        .collect()
}

fn has_any_constraints(pod: &PodInfo) -> bool {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// Whether a node counts for the constraints: it has every topology key and
/// passes the inclusion policies.
fn node_eligible(cs: &[Constraint], pod: &PodInfo, node: &NodeInfo) -> bool {
    let labels = node.labels();
    if !cs.iter().all(|c| labels.contains_key(&c.key)) {
        return false;
    }
    if cs.iter().any(|c| c.honor_affinity) && !matches_required(pod, node) {
        return false;
    }
    if cs.iter().any(|c| c.honor_taints) {
        for t in &node.taints {
            if (t.effect == "NoSchedule" || t.effect == "NoExecute")
                && !pod.tolerations.iter().any(|tol| tolerates(tol, t))
            {
                return false;
            }
        }
    }
    true
}

/// Whether the inclusion policies leave every node carrying the keys in:
/// then the counts can come from the snapshot's incremental index.
fn no_inclusion_filter(cs: &[Constraint], pod: &PodInfo) -> bool {
    let has_node_affinity = !pod.node_selector.is_empty() || pod.required_node_terms.is_some();
    !cs.iter()
        .any(|c| c.honor_taints || (c.honor_affinity && has_node_affinity))
}

/// Per constraint, matching pods per domain over the nodes that count: those
/// carrying every key in `required` and passing the inclusion policies.
/// Skips constraints for which `skip` says so (left empty).
fn domain_counts(
    cs: &[Constraint],
    required: &[String],
    pod: &PodInfo,
    snapshot: &Snapshot,
    skip: impl Fn(&Constraint) -> bool,
) -> Vec<DomainCounts> {
    if no_inclusion_filter(cs, pod) {
        return cs
            .iter()
            .map(|c| {
                if skip(c) {
                    DomainCounts::default()
                } else {
                    snapshot.topology_counts(&pod.namespace, &c.matcher, &c.key, required)
                }
            })
            .collect();
    }
    // The slow way, over every pod (the node set depends on this pod).
    let mut counts = vec![DomainCounts::default(); cs.len()];
    for node in snapshot.nodes() {
        let labels = node.labels();
        if !required.iter().all(|k| labels.contains_key(k)) || !node_eligible(cs, pod, node) {
            continue;
        }
        for (i, c) in cs.iter().enumerate() {
            if skip(c) {
                continue;
            }
            let Some(v) = labels.get(&c.key) else {
                continue;
            };
            let n = node
                .pods
                .iter()
                .filter(|p| c.matches(&pod.namespace, p))
                .count() as i64;
            *counts[i].entry(Arc::from(v.as_str())).or_default() += n;
        }
    }
    counts
}

/// For a well-known topology key: its index (see [`well_known_key_index`])
/// and `counts` by the snapshot's interned value id, so per-node checks
/// read a count without string lookups.
fn counts_by_id(
    key: &str,
    counts: &DomainCounts,
    snapshot: &Snapshot,
) -> Option<(usize, Vec<i64>)> {
    let k = well_known_key_index(key)?;
    let mut by_id = vec![0; snapshot.topology_value_count(k)];
    for (v, n) in counts {
        if let (_, Some(id)) = snapshot.topology_value_id(k, v)
            && let Some(slot) = by_id.get_mut(id as usize)
        {
            *slot = *n;
        }
    }
    Some((k, by_id))
}

/// How many domains of `key` the scored nodes span (kube-scheduler's
/// topology size, which sets a constraint's normalizing weight): the
/// distinct values among the nodes that have the key. Counted on the
/// snapshot's interned ids when the key is well known.
fn topology_size(key: &str, nodes: &[&NodeInfo], snapshot: &Snapshot) -> usize {
    if let Some(k) = well_known_key_index(key) {
        let sid = snapshot.id();
        let mut seen = vec![false; snapshot.topology_value_count(k)];
        let mut size = 0;
        let stamped = nodes.iter().all(|n| match n.topology_ids {
            Some((s, ids)) if s == sid => {
                let id = ids[k];
                if id == NO_TOPOLOGY_VALUE {
                    return true;
                }
                match seen.get_mut(id as usize) {
                    Some(b) => {
                        size += usize::from(!*b);
                        *b = true;
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        });
        if stamped {
            return size;
        }
    }
    let mut values: Vec<&str> = nodes
        .iter()
        .filter_map(|n| n.labels().get(key).map(String::as_str))
        .collect();
    values.sort_unstable();
    values.dedup();
    values.len()
}

#[derive(Clone)]
struct FilterState {
    constraints: Vec<Constraint>,
    /// Per constraint: domain value → matching pods.
    counts: Vec<DomainCounts>,
    /// Per constraint: the global minimum (0 below minDomains domains).
    min: Vec<i64>,
    /// Per constraint: 1 when the incoming pod matches its own selector.
    self_match: Vec<i64>,
    /// Per constraint with a well-known key: (key index, counts by the
    /// snapshot's value id), so Filter reads a node's count without string
    /// lookups (nodes stamped by `snapshot_id`).
    fast: Vec<Option<(usize, Vec<i64>)>>,
    snapshot_id: u64,
}

impl FilterState {
    fn recompute_min(&mut self, i: usize) {
        let c = &self.constraints[i];
        let m = &self.counts[i];
        self.min[i] = if (m.len() as i64) < c.min_domains {
            0
        } else {
            m.values().copied().min().unwrap_or(0)
        };
    }

    fn update(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        if !node_eligible(&self.constraints, pod, node) {
            return;
        }
        for i in 0..self.constraints.len() {
            let c = &self.constraints[i];
            if !c.matches(&pod.namespace, other) {
                continue;
            }
            if let Some(v) = node.labels().get(&c.key) {
                *self.counts[i].entry(Arc::from(v.as_str())).or_default() += delta;
                self.recompute_min(i);
                if let (Some((k, by_id)), Some((sid, ids))) = (&mut self.fast[i], node.topology_ids)
                    && sid == self.snapshot_id
                    && let Some(c) = by_id.get_mut(ids[*k] as usize)
                {
                    *c += delta;
                }
            }
        }
    }
}

/// The PodTopologySpread plugin.
pub struct PodTopologySpread;
plugin!(
    PodTopologySpread,
    "PodTopologySpread",
    [pre_filter, filter, pre_score, score],
    events = vec![
        ClusterEvent::NodeAdd,
        ClusterEvent::NodeUpdate,
        ClusterEvent::PodDelete,
        ClusterEvent::PodAdd
    ]
);

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let cs = match constraints(pod, true) {
            Ok(c) => c,
            Err(e) => return (None, Status::unresolvable(e)),
        };
        if cs.is_empty() {
            return (None, Status::skip());
        }
        let required: Vec<String> = cs.iter().map(|c| c.key.clone()).collect();
        let counts = domain_counts(&cs, &required, pod, snapshot, |_| false);
        let fast = cs
            .iter()
            .zip(&counts)
            .map(|(c, m)| counts_by_id(&c.key, m, snapshot))
            .collect();
        let mut st = FilterState {
            fast,
            snapshot_id: snapshot.id(),
            min: vec![0; cs.len()],
            self_match: cs
                .iter()
                .map(|c| i64::from(c.matches(&pod.namespace, pod)))
                .collect(),
            counts,
            constraints: cs,
        };
        for i in 0..st.constraints.len() {
            st.recompute_min(i);
        }
        state.write(STATE_FILTER, st);
        (None, Status::success())
    }

    fn extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl PreFilterExtensions for PodTopologySpread {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(st) = state.read_mut::<FilterState>(STATE_FILTER) {
            st.update(pod, other, node, 1);
        }
        Status::success()
    }
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(st) = state.read_mut::<FilterState>(STATE_FILTER) {
            st.update(pod, other, node, -1);
        }
        Status::success()
    }
}

const MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
const SKEWED: &str = "node(s) didn't match pod topology spread constraints";

/// Why the node fails the hard constraints (`None`: it passes).
fn rejection(st: &FilterState, node: &NodeInfo) -> Option<(Code, &'static str)> {
    for (i, c) in st.constraints.iter().enumerate() {
        if let (Some((k, by_id)), Some((sid, ids))) = (&st.fast[i], node.topology_ids)
            && sid == st.snapshot_id
        {
            let id = ids[*k];
            if id == NO_TOPOLOGY_VALUE {
                return Some((Code::UnschedulableAndUnresolvable, MISSING_LABEL));
            }
            let count = by_id.get(id as usize).copied().unwrap_or(0);
            if count + st.self_match[i] - st.min[i] > c.max_skew {
                return Some((Code::Unschedulable, SKEWED));
            }
            continue;
        }
        let Some(v) = node.labels().get(&c.key) else {
            return Some((Code::UnschedulableAndUnresolvable, MISSING_LABEL));
        };
        let count = st.counts[i].get(v.as_str()).copied().unwrap_or(0);
        if count + st.self_match[i] - st.min[i] > c.max_skew {
            return Some((Code::Unschedulable, SKEWED));
        }
    }
    None
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        match state
            .read::<FilterState>(STATE_FILTER)
            .and_then(|st| rejection(st, node))
        {
            None => Status::success(),
            Some((code, reason)) => Status::new(code, reason),
        }
    }

    fn passes(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<bool, Status> {
        Ok(state
            .read::<FilterState>(STATE_FILTER)
            .and_then(|st| rejection(st, node))
            .is_none())
    }
}

#[derive(Clone)]
struct ScoreState {
    constraints: Vec<Constraint>,
    counts: Vec<DomainCounts>,
    weights: Vec<f64>,
    /// As [`FilterState::fast`] (empty counts for the hostname key).
    fast: Vec<Option<(usize, Vec<i64>)>>,
    /// For a default (same controller) hostname constraint: the matching
    /// pods by interned hostname id of the nodes to score (only non-zero
    /// counts kept), when no two nodes share a hostname.
    by_host: Vec<Option<HashMap<u32, i64, FastBuild>>>,
    snapshot_id: u64,
}

/// A node's domain for a constraint: an interned id or the label value.
#[derive(Clone, Copy)]
enum Domain<'a> {
    Id(u32),
    Value(&'a str),
}

impl ScoreState {
    /// The node's domain for constraint `i` (`None`: it lacks the key).
    fn domain<'a>(
        &self,
        i: usize,
        node: &'a NodeInfo,
        ids: Option<[u32; 3]>,
    ) -> Option<Domain<'a>> {
        if let (Some((k, _)), Some(ids)) = (&self.fast[i], ids) {
            let id = ids[*k];
            return (id != NO_TOPOLOGY_VALUE).then_some(Domain::Id(id));
        }
        node.labels()
            .get(&self.constraints[i].key)
            .map(|v| Domain::Value(v.as_str()))
    }

    /// Matching pods in the domain of constraint `i` (not the hostname).
    fn count(&self, i: usize, d: Domain<'_>) -> i64 {
        match (d, &self.fast[i]) {
            (Domain::Id(id), Some((_, by_id))) => by_id.get(id as usize).copied().unwrap_or(0),
            (Domain::Value(v), _) => self.counts[i].get(v).copied().unwrap_or(0),
            (Domain::Id(_), None) => 0,
        }
    }
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        let cs = if has_any_constraints(pod) {
            match constraints(pod, false) {
                Ok(c) => c,
                Err(e) => return Status::unresolvable(e),
            }
        } else {
            // System defaults, for pods that belong to a controller.
            match controller_uid(pod) {
                None => Vec::new(),
                Some(uid) => [(HOSTNAME, 3), (ZONE, 5)]
                    .into_iter()
                    .map(|(k, s)| Constraint {
                        max_skew: s,
                        key: k.into(),
                        matcher: PodMatcher::Controller(uid.to_string()),
                        min_domains: 1,
                        honor_affinity: true,
                        honor_taints: false,
                    })
                    .collect(),
            }
        };
        if cs.is_empty() {
            return Status::skip();
        }
        let weights = cs
            .iter()
            .map(|c| ((topology_size(&c.key, nodes, snapshot) + 2) as f64).ln())
            .collect();
        // Explicit constraints count only nodes carrying every key; the
        // system defaults count each key on its own (kube-scheduler's
        // requireAllTopologies). Hostname domains are counted at Score.
        let explicit = has_any_constraints(pod);
        let all_keys: Vec<String> = cs.iter().map(|c| c.key.clone()).collect();
        let counts = if explicit {
            domain_counts(&cs, &all_keys, pod, snapshot, |c| c.key == HOSTNAME)
        } else {
            cs.iter()
                .map(|c| {
                    if c.key == HOSTNAME {
                        DomainCounts::default()
                    } else {
                        domain_counts(
                            std::slice::from_ref(c),
                            std::slice::from_ref(&c.key),
                            pod,
                            snapshot,
                            |_| false,
                        )
                        .pop()
                        .unwrap_or_default()
                    }
                })
                .collect()
        };
        let fast = cs
            .iter()
            .zip(&counts)
            .map(|(c, m)| {
                let k = well_known_key_index(&c.key)?;
                if c.key == HOSTNAME {
                    // Counted per node at Score.
                    Some((k, Vec::new()))
                } else {
                    counts_by_id(&c.key, m, snapshot)
                }
            })
            .collect();
        let by_host = cs
            .iter()
            .map(|c| match &c.matcher {
                PodMatcher::Controller(_) if c.key == HOSTNAME => {
                    hostname_counts(snapshot, &pod.namespace, &c.matcher, nodes)
                }
                _ => None,
            })
            .collect();
        state.write(
            STATE_SCORE,
            ScoreState {
                constraints: cs,
                counts,
                weights,
                fast,
                by_host,
                snapshot_id: snapshot.id(),
            },
        );
        Status::success()
    }
}

/// The kept hostname counts of a default constraint for the nodes about to
/// be scored (those stamped by this snapshot), by interned hostname id,
/// non-zero ones only; `None` when two nodes share a hostname.
fn hostname_counts(
    snapshot: &Snapshot,
    namespace: &str,
    matcher: &PodMatcher,
    nodes: &[&NodeInfo],
) -> Option<HashMap<u32, i64, FastBuild>> {
    let k = well_known_key_index(HOSTNAME)?;
    let ids: Vec<u32> = nodes
        .iter()
        .filter_map(|n| n.topology_ids)
        .filter(|(sid, _)| *sid == snapshot.id())
        .map(|(_, ids)| ids[k])
        .filter(|&id| id != NO_TOPOLOGY_VALUE)
        .collect();
    let counts = snapshot.topology_counts_by_id(namespace, matcher, HOSTNAME, &[], true, &ids)?;
    Some(
        ids.into_iter()
            .zip(counts)
            .filter(|&(_, c)| c != 0)
            .collect(),
    )
}

/// Nodes lacking a topology key get this before normalization (→ 0).
const INVALID: i64 = -1;

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let Some(st) = state.read::<ScoreState>(STATE_SCORE) else {
            return (0, Status::success());
        };
        // The node's interned topology ids, if it is stamped by the
        // snapshot the state was computed on.
        let ids = node
            .topology_ids
            .and_then(|(sid, ids)| (sid == st.snapshot_id).then_some(ids));
        if !has_any_constraints(pod) {
            // defaults: nodes without a zone still score by hostname
        } else if !(0..st.constraints.len()).all(|i| st.domain(i, node, ids).is_some()) {
            return (INVALID, Status::success());
        }
        let mut score = 0f64;
        for (i, c) in st.constraints.iter().enumerate() {
            let Some(domain) = st.domain(i, node, ids) else {
                continue;
            };
            let cnt = if c.key == HOSTNAME {
                match (&c.matcher, &st.by_host[i], domain) {
                    // The default constraints: the count kept by the node's
                    // interned hostname (a node stamped by this snapshot,
                    // hostnames unique), else the node's own per-controller
                    // count. Both count the controller's non-terminating
                    // pods (in its namespace, see `PodMatcher::Controller`).
                    (PodMatcher::Controller(_), Some(by_id), Domain::Id(id)) => {
                        by_id.get(&id).copied().unwrap_or(0)
                    }
                    (PodMatcher::Controller(uid), _, _) => {
                        i64::from(node.controllers.get(uid.as_str()).copied().unwrap_or(0))
                    }
                    _ => node
                        .pods
                        .iter()
                        .filter(|p| c.matches(&pod.namespace, p))
                        .count() as i64,
                }
            } else {
                st.count(i, domain)
            };
            score += cnt as f64 * st.weights[i] + (c.max_skew - 1) as f64;
        }
        (score.round() as i64, Status::success())
    }

    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let valid = scores.iter().filter(|s| s.score != INVALID);
        let min = valid.clone().map(|s| s.score).min().unwrap_or(0);
        let max = valid.map(|s| s.score).max().unwrap_or(0);
        for s in scores.iter_mut() {
            if s.score == INVALID {
                s.score = 0;
            } else if max == 0 {
                s.score = MAX_NODE_SCORE;
            } else {
                s.score = MAX_NODE_SCORE * (max + min - s.score) / max;
            }
        }
        Status::success()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn node(name: &str, zone: Option<&str>) -> Arc<Node> {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if let Some(z) = zone {
            labels[ZONE] = json!(z);
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
            }))
            .unwrap(),
        )
    }

    fn pod(uid: &str) -> Arc<PodInfo> {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c"}], "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}}]}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    /// A copy of a snapshot node built outside the snapshot: no interned
    /// topology ids, so plugins take their string-lookup paths.
    fn unstamped(n: &NodeInfo) -> NodeInfo {
        let mut copy = NodeInfo::new(n.node.clone().unwrap());
        for p in &n.pods {
            copy.add_pod(p.clone());
        }
        copy
    }

    /// Filter verdicts per node, from the snapshot's nodes (interned zone
    /// ids) and from copies built outside it (string lookups): the same.
    fn verdicts(s: &Snapshot, incoming: &PodInfo) -> Vec<(String, bool)> {
        let pl = PodTopologySpread;
        let mut state = CycleState::default();
        assert!(pl.pre_filter(&mut state, incoming, s).1.is_success());
        s.nodes()
            .iter()
            .map(|n| {
                let fast = pl.filter(&state, incoming, n).is_success();
                let copy = unstamped(n);
                assert!(copy.topology_ids.is_none());
                assert_eq!(fast, pl.filter(&state, incoming, &copy).is_success());
                (n.name.clone(), fast)
            })
            .collect()
    }

    #[test]
    fn hard_constraint_follows_pods_and_relabels() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", Some("a")));
        s.apply_node(node("n2", Some("b")));
        s.apply_node(node("n3", None));
        s.add_pod("n1", pod("p1"));
        let v = verdicts(&s, &pod("new"));
        // zone a has 1, zone b 0: only b is within maxSkew 1; n3 lacks the key
        assert_eq!(
            v,
            [
                ("n1".into(), false),
                ("n2".into(), true),
                ("n3".into(), false)
            ]
        );
        s.add_pod("n2", pod("p2"));
        assert!(verdicts(&s, &pod("new")).iter().take(2).all(|(_, ok)| *ok));
        // n3 gets zone c (0 pods): now only c is at the minimum
        s.apply_node(node("n3", Some("c")));
        assert_eq!(
            verdicts(&s, &pod("new")),
            [
                ("n1".into(), false),
                ("n2".into(), false),
                ("n3".into(), true)
            ]
        );
        s.remove_pod("n1", "p1");
        assert_eq!(
            verdicts(&s, &pod("new")),
            [
                ("n1".into(), true),
                ("n2".into(), false),
                ("n3".into(), true)
            ]
        );
    }

    /// A pod of ReplicaSet `rs` with no constraints of its own (it gets
    /// the system defaults: hostname and zone).
    fn owned(uid: &str, rs: &str) -> Arc<PodInfo> {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid, "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                    "uid": rs, "controller": true}]},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    /// Scores per node, from the snapshot's nodes (interned ids) and from
    /// copies built outside it (string lookups), with the weights each
    /// PreScore computed: the same both ways.
    fn scores(s: &Snapshot, incoming: &PodInfo) -> Vec<(String, i64)> {
        let pl = PodTopologySpread;
        let stamped: Vec<&NodeInfo> = s.nodes().iter().collect();
        let copies: Vec<NodeInfo> = stamped.iter().map(|n| unstamped(n)).collect();
        let copies: Vec<&NodeInfo> = copies.iter().collect();
        let mut fast = CycleState::default();
        assert!(pl.pre_score(&mut fast, incoming, &stamped, s).is_success());
        let mut slow = CycleState::default();
        assert!(pl.pre_score(&mut slow, incoming, &copies, s).is_success());
        let weights = |st: &CycleState| st.read::<ScoreState>(STATE_SCORE).unwrap().weights.clone();
        assert_eq!(weights(&fast), weights(&slow));
        stamped
            .iter()
            .zip(&copies)
            .map(|(n, c)| {
                assert!(n.topology_ids.is_some() && c.topology_ids.is_none());
                let a = pl.score(&fast, incoming, n).0;
                assert_eq!(a, pl.score(&fast, incoming, c).0, "node {}", n.name);
                (n.name.clone(), a)
            })
            .collect()
    }

    #[test]
    fn default_constraints_score_the_same_with_and_without_interned_ids() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", Some("a")));
        s.apply_node(node("n2", Some("a")));
        s.apply_node(node("n3", Some("b")));
        s.apply_node(node("n4", None));
        for (i, n) in ["n1", "n1", "n2", "n4"].iter().enumerate() {
            s.add_pod(n, owned(&format!("p{i}"), "rs-1"));
        }
        s.add_pod("n3", owned("other", "rs-2"));
        let got = scores(&s, &owned("new", "rs-1"));
        let of = |name: &str| got.iter().find(|(n, _)| n == name).unwrap().1;
        // Raw scores, lower is better (normalize inverts them). Zone a
        // holds 3 of rs-1's pods, n1 two of them: n3 (zone b, none) is the
        // best place, n1 the worst.
        assert!(of("n3") < of("n2") && of("n2") < of("n1"), "{got:?}");
        // An explicit soft zone constraint: n4 lacks the key.
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "x", "namespace": "default", "uid": "x", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c"}], "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "web"}}}]}
        }))
        .unwrap();
        let got = scores(&s, &PodInfo::new(Arc::new(p)));
        assert_eq!(got.iter().find(|(n, _)| n == "n4").unwrap().1, INVALID);
        s.apply_node(node("n4", Some("c")));
        scores(&s, &owned("new", "rs-1"));
        // The kept hostname counts follow removals and terminating pods.
        s.remove_pod("n1", "p0");
        let mut t: Pod = (*owned("p9", "rs-1").pod).clone();
        t.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        s.add_pod("n3", Arc::new(PodInfo::new(Arc::new(t))));
        let got = scores(&s, &owned("new", "rs-1"));
        let of = |name: &str| got.iter().find(|(n, _)| n == name).unwrap().1;
        // n1 and n2 now hold one pod each (same zone); n3's terminating
        // pod does not count.
        assert_eq!(of("n1"), of("n2"));
        assert!(of("n3") < of("n1"), "{got:?}");
    }

    #[test]
    fn a_hostname_shared_by_two_nodes_scores_each_node_by_its_own_pods() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", Some("a")));
        s.apply_node(node("n2", Some("a")));
        s.add_pod("n1", owned("p1", "rs-1"));
        s.add_pod("n1", owned("p2", "rs-1"));
        let m = PodMatcher::Controller("rs-1".into());
        assert!(
            s.topology_counts_by_id("default", &m, HOSTNAME, &[], true, &[])
                .is_some()
        );
        // n2 relabelled with n1's hostname: the two nodes share one
        // domain, so the counts by hostname are not per node any more.
        let mut twin = (*node("n2", Some("a"))).clone();
        twin.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(HOSTNAME.into(), "n1".into());
        s.apply_node(Arc::new(twin));
        assert!(
            s.topology_counts_by_id("default", &m, HOSTNAME, &[], true, &[])
                .is_none()
        );
        assert!(
            s.topology_counts_by_id("default", &m, HOSTNAME, &[], false, &[])
                .is_some()
        );
        let got = scores(&s, &owned("new", "rs-1"));
        let of = |name: &str| got.iter().find(|(n, _)| n == name).unwrap().1;
        assert!(of("n2") < of("n1"), "{got:?}");
        // Back to its own hostname: the kept counts are used again.
        s.apply_node(node("n2", Some("a")));
        assert!(
            s.topology_counts_by_id("default", &m, HOSTNAME, &[], true, &[])
                .is_some()
        );
        scores(&s, &owned("new", "rs-1"));
    }
}
