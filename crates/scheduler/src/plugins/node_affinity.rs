//! NodeAffinity: `nodeSelector` and required node affinity filter nodes
//! (terms ORed, expressions ANDed); preferred terms add their weights to the
//! score (weight 2). A malformed affinity rejects the pod with the reason.
//!
//! PreFilter compiles the required part once per cycle when it only names
//! the well-known topology keys (zone, region, hostname): values become the
//! snapshot's interned ids, so Filter compares integers per node instead of
//! looking labels up and comparing strings.

use super::helper::{default_normalize_score, plugin};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, NodeInfo, NodeScore, PodInfo,
    PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, Snapshot, Status,
    types::{NO_TOPOLOGY_VALUE, NodeOp, NodeRequirement, NodeTerm, well_known_key_index},
};

const STATE_KEY: &str = "NodeAffinity";

/// One label requirement on a well-known topology key, its values as the
/// snapshot's ids (values no node has are dropped: they match no node).
#[derive(Debug, Clone)]
struct FastRequirement {
    key: usize,
    op: NodeOp,
    ids: Vec<u32>,
}

impl FastRequirement {
    fn compile(snapshot: &Snapshot, key: &str, op: NodeOp, values: &[String]) -> Option<Self> {
        let key = well_known_key_index(key)?;
        if !matches!(
            op,
            NodeOp::In | NodeOp::NotIn | NodeOp::Exists | NodeOp::DoesNotExist
        ) {
            return None;
        }
        let ids = values
            .iter()
            .filter_map(|v| snapshot.topology_value_id(key, v).1)
            .collect();
        Some(FastRequirement { key, op, ids })
    }

    fn matches(&self, ids: &[u32; 3]) -> bool {
        let v = ids[self.key];
        let present = v != NO_TOPOLOGY_VALUE;
        match self.op {
            NodeOp::In => present && self.ids.contains(&v),
            NodeOp::NotIn => !present || !self.ids.contains(&v),
            NodeOp::Exists => present,
            NodeOp::DoesNotExist => !present,
            NodeOp::Gt | NodeOp::Lt => false, // never compiled
        }
    }
}

/// A required term: its label requirements compiled, its field
/// requirements (`metadata.name`) kept as they are.
#[derive(Debug, Clone)]
struct FastTerm {
    expressions: Vec<FastRequirement>,
    fields: Vec<NodeRequirement>,
}

/// The pod's nodeSelector and required terms for this cycle's snapshot.
#[derive(Debug, Clone)]
struct Compiled {
    snapshot: u64,
    selector: Vec<FastRequirement>,
    terms: Option<Vec<FastTerm>>,
}

impl Compiled {
    /// `None` when some part names another key or uses Gt/Lt.
    fn new(pod: &PodInfo, snapshot: &Snapshot) -> Option<Compiled> {
        let selector = pod
            .node_selector
            .iter()
            .map(|(k, v)| {
                FastRequirement::compile(snapshot, k, NodeOp::In, std::slice::from_ref(v))
            })
            .collect::<Option<Vec<_>>>()?;
        let terms = match &pod.required_node_terms {
            None => None,
            Some(terms) => Some(
                terms
                    .iter()
                    .map(|t: &NodeTerm| {
                        Some(FastTerm {
                            expressions: t
                                .expressions
                                .iter()
                                .map(|r| {
                                    FastRequirement::compile(snapshot, &r.key, r.op, &r.values)
                                })
                                .collect::<Option<Vec<_>>>()?,
                            fields: t.fields.clone(),
                        })
                    })
                    .collect::<Option<Vec<_>>>()?,
            ),
        };
        Some(Compiled {
            snapshot: snapshot.id(),
            selector,
            terms,
        })
    }

    /// The answer of [`matches_required`], or `None` when the node was not
    /// stamped by this cycle's snapshot.
    fn matches(&self, node: &NodeInfo) -> Option<bool> {
        let (id, ids) = node.topology_ids.as_ref()?;
        if *id != self.snapshot {
            return None;
        }
        if !self.selector.iter().all(|r| r.matches(ids)) {
            return Some(false);
        }
        Some(match &self.terms {
            None => true,
            Some(terms) => terms.iter().any(|t| {
                // an empty term matches nothing
                (!t.expressions.is_empty() || !t.fields.is_empty())
                    && t.expressions.iter().all(|r| r.matches(ids))
                    && t.fields.iter().all(|r| r.matches(Some(&node.name)))
            }),
        })
    }
}

/// The NodeAffinity plugin.
pub struct NodeAffinity;
plugin!(
    NodeAffinity,
    "NodeAffinity",
    [pre_filter, filter, pre_score, score],
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
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if let Some(e) = &pod.parse_error {
            return (None, Status::unresolvable(e.clone()));
        }
        if pod.node_selector.is_empty() && pod.required_node_terms.is_none() {
            return (None, Status::skip());
        }
        if let Some(c) = Compiled::new(pod, snapshot) {
            state.write(STATE_KEY, c);
        }
        (None, Status::success())
    }
}

impl FilterPlugin for NodeAffinity {
    /// Reads the node object only (its labels, through the ids PreFilter compiled).
    fn ignores_node_pods(&self) -> bool {
        true
    }

    fn passes(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<bool, Status> {
        Ok(state
            .read::<Compiled>(STATE_KEY)
            .and_then(|c| c.matches(node))
            .unwrap_or_else(|| matches_required(pod, node)))
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if self.passes(state, pod, node).unwrap_or(false) {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;
    use std::sync::Arc;

    fn snapshot() -> Snapshot {
        let mut s = Snapshot::new();
        for i in 0..12 {
            let mut labels = json!({"kubernetes.io/hostname": format!("h{i}"), "disk": "ssd"});
            if i % 4 != 3 {
                labels["topology.kubernetes.io/zone"] = json!(format!("z{}", i % 3));
            }
            if i % 2 == 0 {
                labels["topology.kubernetes.io/region"] = json!("r1");
            }
            let n: Node = serde_json::from_value(
                json!({"metadata": {"name": format!("n{i}"), "labels": labels}}),
            )
            .unwrap();
            s.apply_node(Arc::new(n));
        }
        s
    }

    fn pod(spec: serde_json::Value) -> PodInfo {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c"}]);
        let p: Pod = serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "d", "uid": "p"}, "spec": spec}),
        )
        .unwrap();
        PodInfo::new(Arc::new(p))
    }

    #[test]
    fn compiled_requirements_agree_with_label_matching() {
        let s = snapshot();
        let keys = [
            "topology.kubernetes.io/zone",
            "topology.kubernetes.io/region",
            "kubernetes.io/hostname",
        ];
        let values = [
            json!(["z0"]),
            json!(["z1", "z2"]),
            json!(["r1"]),
            json!(["h3", "nowhere"]),
            json!(["nowhere"]),
        ];
        let ops = ["In", "NotIn", "Exists", "DoesNotExist"];
        let mut compiled = 0;
        let mut rejected = 0;
        let mut accepted = 0;
        for (i, key) in keys.iter().enumerate() {
            for op in ops {
                for (j, v) in values.iter().enumerate() {
                    let req = |key: &str, op: &str, v: &serde_json::Value| {
                        if op == "In" || op == "NotIn" {
                            json!({"key": key, "operator": op, "values": v})
                        } else {
                            json!({"key": key, "operator": op})
                        }
                    };
                    let other = keys[(i + j) % 3];
                    let specs = [
                        // one term, one requirement
                        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [req(key, op, v)]}]}}}}),
                        // two requirements ANDed, plus a second term ORed, plus a nodeSelector
                        json!({"nodeSelector": {"topology.kubernetes.io/region": "r1"},
                               "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                                   {"matchExpressions": [req(key, op, v), req(other, "Exists", &json!(null))]},
                                   {"matchExpressions": [req(other, "In", &values[(j + 1) % values.len()])], "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n4", "n5"]}]}]}}}}),
                        // an empty term matches nothing
                        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}}),
                    ];
                    for spec in specs {
                        let p = pod(spec);
                        assert!(p.parse_error.is_none(), "{:?}", p.parse_error);
                        let c = Compiled::new(&p, &s).unwrap();
                        compiled += 1;
                        for n in s.nodes() {
                            let want = matches_required(&p, n);
                            assert_eq!(c.matches(n), Some(want), "{key} {op} {v} on {}", n.name);
                            if want { accepted += 1 } else { rejected += 1 }
                        }
                    }
                }
            }
        }
        assert!(
            compiled > 100 && accepted > 100 && rejected > 100,
            "{compiled} {accepted} {rejected}"
        );
    }

    #[test]
    fn other_keys_and_gt_stay_on_the_label_path() {
        let s = snapshot();
        let p = pod(json!({"nodeSelector": {"disk": "ssd"}}));
        assert!(Compiled::new(&p, &s).is_none());
        let p = pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Gt", "values": ["1"]}]}]}}}}),
        );
        assert!(Compiled::new(&p, &s).is_none());
        // a node from another snapshot (or none) is not answered from ids
        let p = pod(json!({"nodeSelector": {"topology.kubernetes.io/zone": "z0"}}));
        let c = Compiled::new(&p, &s).unwrap();
        let other = snapshot();
        assert_eq!(c.matches(&other.nodes()[0]), None);
        // and the Filter then still answers from the labels
        let mut st = CycleState::default();
        let (_, status) = NodeAffinity.pre_filter(&mut st, &p, &s);
        assert!(status.is_success());
        assert!(NodeAffinity.filter(&st, &p, &other.nodes()[0]).is_success());
        assert!(!NodeAffinity.filter(&st, &p, &other.nodes()[1]).is_success());
        assert!(NodeAffinity.filter(&st, &p, &s.nodes()[0]).is_success());
    }
}
