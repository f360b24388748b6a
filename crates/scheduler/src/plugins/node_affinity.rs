//! NodeAffinity: `nodeSelector` and required node affinity filter nodes
//! (terms ORed, expressions ANDed); preferred terms add their weights to the
//! score (weight 2). A malformed affinity rejects the pod with the reason.

use super::helper::{default_normalize_score, plugin};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, NodeInfo, NodeScore, PodInfo,
    PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, Snapshot, Status,
};

/// The NodeAffinity plugin.
pub struct NodeAffinity;
plugin!(
    NodeAffinity,
    "NodeAffinity",
    [pre_filter, filter, score],
    events = vec![ClusterEvent::NodeAdd, ClusterEvent::NodeUpdate]
);

/// Whether the node satisfies the pod's nodeSelector and required affinity.
pub fn matches_required(pod: &PodInfo, node: &NodeInfo) -> bool {
    let labels = node.labels();
    if !pod
        .node_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    match &pod.required_node_terms {
        None => true,
        Some(terms) => terms.iter().any(|t| t.matches(node)),
    }
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if let Some(e) = &pod.parse_error {
            return (None, Status::unresolvable(e.clone()));
        }
        if pod.node_selector.is_empty() && pod.required_node_terms.is_none() {
            return (None, Status::skip());
        }
        (None, Status::success())
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if matches_required(pod, node) {
            Status::success()
        } else {
            Status::unresolvable("node(s) didn't match Pod's node affinity/selector")
        }
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &[&NodeInfo],
        _: &Snapshot,
    ) -> Status {
        // No preferred terms: every node scores the same, nothing to rank.
        if pod.preferred_node_terms.is_empty() {
            Status::skip()
        } else {
            Status::success()
        }
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let s = pod
            .preferred_node_terms
            .iter()
            .filter(|(_, t)| t.matches(node))
            .map(|(w, _)| *w)
            .sum();
        (s, Status::success())
    }

    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}
