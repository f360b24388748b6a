//! TaintToleration: NoSchedule/NoExecute taints reject pods that do not
//! tolerate them; PreferNoSchedule taints only lower the score (weight 3).

use super::helper::{default_normalize_score, plugin};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, NodeInfo, NodeScore, PodInfo,
    PreScorePlugin, ScorePlugin, Snapshot, Status, types::tolerates,
};

/// The TaintToleration plugin.
pub struct TaintToleration;
plugin!(
    TaintToleration,
    "TaintToleration",
    [filter, pre_score, score],
    events = vec![ClusterEvent::NodeAdd, ClusterEvent::NodeUpdate]
);

impl FilterPlugin for TaintToleration {
    /// Reads the node object only (its taints and the pod's tolerations).
    fn ignores_node_pods(&self) -> bool {
        true
    }

    fn passes(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<bool, Status> {
        Ok(node.taints.iter().all(|taint| {
            (taint.effect != "NoSchedule" && taint.effect != "NoExecute")
                || pod.tolerations.iter().any(|t| tolerates(t, taint))
        }))
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for taint in &node.taints {
            if taint.effect != "NoSchedule" && taint.effect != "NoExecute" {
                continue;
            }
            if !pod.tolerations.iter().any(|t| tolerates(t, taint)) {
                return Status::unresolvable(format!(
                    "node(s) had untolerated taint {{{}: {}}}",
                    taint.key,
                    taint.value.as_deref().unwrap_or("")
                ));
            }
        }
        Status::success()
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        _: &mut CycleState,
        _: &PodInfo,
        nodes: &[&NodeInfo],
        _: &Snapshot,
    ) -> Status {
        // Without PreferNoSchedule taints every node scores the same.
        if nodes
            .iter()
            .any(|n| n.taints.iter().any(|t| t.effect == "PreferNoSchedule"))
        {
            Status::success()
        } else {
            Status::skip()
        }
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let n = node
            .taints
            .iter()
            .filter(|taint| taint.effect == "PreferNoSchedule")
            .filter(|taint| {
                !pod.tolerations.iter().any(|t| {
                    matches!(
                        t.effect.as_deref(),
                        None | Some("") | Some("PreferNoSchedule")
                    ) && tolerates(t, taint)
                })
            })
            .count();
        (n as i64, Status::success())
    }

    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}
