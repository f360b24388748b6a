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

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use kubeforge_apimachinery::labels::Selector;
use serde_json::json;

use super::helper::plugin;
use super::node_affinity::matches_required;
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, NodeInfo, NodeScore, PodInfo,
    PreFilterExtensions, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, Snapshot,
    Status, types::tolerates,
};

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
const STATE_FILTER: &str = "PreFilterPodTopologySpread";
const STATE_SCORE: &str = "PreScorePodTopologySpread";

#[derive(Clone)]
enum Matcher {
    Labels(Selector),
    SameController(String),
}

#[derive(Clone)]
struct Constraint {
    max_skew: i64,
    key: String,
    matcher: Matcher,
    min_domains: i64,
    honor_affinity: bool,
    honor_taints: bool,
}

impl Constraint {
    fn matches(&self, ns: &str, pod: &PodInfo) -> bool {
        if pod.namespace != ns || pod.pod.metadata.deletion_timestamp.is_some() {
            return false;
        }
        match &self.matcher {
            Matcher::Labels(s) => s.matches(&pod.labels),
            Matcher::SameController(uid) => controller_uid(pod).is_some_and(|u| u == uid),
        }
    }
}

fn controller_uid(pod: &PodInfo) -> Option<&str> {
    pod.pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
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
        matcher: Matcher::Labels(selector),
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

#[derive(Clone)]
struct FilterState {
    constraints: Vec<Constraint>,
    /// Per constraint: domain value → matching pods.
    counts: Vec<HashMap<String, i64>>,
    /// Per constraint: the global minimum (0 below minDomains domains).
    min: Vec<i64>,
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
                *self.counts[i].entry(v.clone()).or_default() += delta;
                self.recompute_min(i);
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
        let mut st = FilterState {
            counts: vec![HashMap::new(); cs.len()],
            min: vec![0; cs.len()],
            constraints: cs,
        };
        for node in snapshot.nodes() {
            if !node_eligible(&st.constraints, pod, node) {
                continue;
            }
            for (i, c) in st.constraints.iter().enumerate() {
                let Some(v) = node.labels().get(&c.key) else {
                    continue;
                };
                let n = node
                    .pods
                    .iter()
                    .filter(|p| c.matches(&pod.namespace, p))
                    .count() as i64;
                *st.counts[i].entry(v.clone()).or_default() += n;
            }
        }
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

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<FilterState>(STATE_FILTER) else {
            return Status::success();
        };
        for (i, c) in st.constraints.iter().enumerate() {
            let Some(v) = node.labels().get(&c.key) else {
                return Status::unresolvable(
                    "node(s) didn't match pod topology spread constraints (missing required label)",
                );
            };
            let self_match = i64::from(c.matches(&pod.namespace, pod));
            let count = st.counts[i].get(v).copied().unwrap_or(0);
            if count + self_match - st.min[i] > c.max_skew {
                return Status::unschedulable(
                    "node(s) didn't match pod topology spread constraints",
                );
            }
        }
        Status::success()
    }
}

#[derive(Clone)]
struct ScoreState {
    constraints: Vec<Constraint>,
    counts: Vec<HashMap<String, i64>>,
    weights: Vec<f64>,
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
                        matcher: Matcher::SameController(uid.to_string()),
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
        let mut weights = Vec::new();
        for c in &cs {
            let mut values: Vec<&str> = nodes
                .iter()
                .filter_map(|n| n.labels().get(&c.key).map(String::as_str))
                .collect();
            values.sort_unstable();
            values.dedup();
            weights.push(((values.len() + 2) as f64).ln());
        }
        let mut counts = vec![HashMap::new(); cs.len()];
        for node in snapshot.nodes() {
            for (i, c) in cs.iter().enumerate() {
                if c.key == HOSTNAME {
                    continue; // counted per node at Score
                }
                let labels = node.labels();
                let Some(v) = labels.get(&c.key) else {
                    continue;
                };
                if c.honor_affinity && !matches_required(pod, node) {
                    continue;
                }
                let n = node
                    .pods
                    .iter()
                    .filter(|p| c.matches(&pod.namespace, p))
                    .count() as i64;
                *counts[i].entry(v.clone()).or_default() += n;
            }
        }
        state.write(
            STATE_SCORE,
            ScoreState {
                constraints: cs,
                counts,
                weights,
            },
        );
        Status::success()
    }
}

/// Nodes lacking a topology key get this before normalization (→ 0).
const INVALID: i64 = -1;

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let Some(st) = state.read::<ScoreState>(STATE_SCORE) else {
            return (0, Status::success());
        };
        let labels = node.labels();
        if !has_any_constraints(pod) {
            // defaults: nodes without a zone still score by hostname
        } else if !st.constraints.iter().all(|c| labels.contains_key(&c.key)) {
            return (INVALID, Status::success());
        }
        let mut score = 0f64;
        for (i, c) in st.constraints.iter().enumerate() {
            let Some(v) = labels.get(&c.key) else {
                continue;
            };
            let cnt = if c.key == HOSTNAME {
                node.pods
                    .iter()
                    .filter(|p| c.matches(&pod.namespace, p))
                    .count() as i64
            } else {
                st.counts[i].get(v).copied().unwrap_or(0)
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
