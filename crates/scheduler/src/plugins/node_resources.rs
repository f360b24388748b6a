//! NodeResourcesFit (requests against allocatable: CPU, memory, ephemeral
//! storage, `pods`, extended resources such as `nvidia.com/gpu`; scoring by
//! LeastAllocated, MostAllocated or RequestedToCapacityRatio, weight 1) and
//! NodeResourcesBalancedAllocation (weight 1).

use std::borrow::Cow;
use std::ops::ControlFlow;

use serde::Deserialize;

use super::helper::{decode_args, plugin};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, NodeInfo, PodInfo, PreScorePlugin,
    ScorePlugin, Snapshot, Status, score_each_node,
};

/// A resource and its weight in scoring.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    /// Resource name.
    pub name: String,
    /// Weight (default 1).
    #[serde(default = "one")]
    pub weight: i64,
}

fn one() -> i64 {
    1
}

/// A point of the RequestedToCapacityRatio shape.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UtilizationShapePoint {
    /// Utilization 0–100.
    pub utilization: i64,
    /// Score 0–10.
    pub score: i64,
}

/// RequestedToCapacityRatio parameters.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedToCapacityRatioParam {
    /// The piecewise-linear shape.
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

/// `scoringStrategy`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    /// LeastAllocated (default), MostAllocated, RequestedToCapacityRatio.
    #[serde(rename = "type", default)]
    pub type_: Option<String>,
    /// Resources and weights (default cpu 1, memory 1).
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    /// For RequestedToCapacityRatio.
    #[serde(default)]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

/// `NodeResourcesFitArgs`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FitArgs {
    /// Accepted for compatibility (kubeforge's args have no apiVersion use).
    pub api_version: Option<String>,
    /// Accepted for compatibility.
    pub kind: Option<String>,
    /// Resources the filter ignores.
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    /// Resource groups (prefix before '/') the filter ignores.
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    /// How nodes are scored.
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    Least,
    Most,
    Ratio,
}

/// The NodeResourcesFit plugin.
pub struct NodeResourcesFit {
    ignored: Vec<String>,
    ignored_groups: Vec<String>,
    strategy: Strategy,
    kinds: Vec<(Kind, i64)>,
    shape: Vec<(i64, i64)>,
}
plugin!(
    NodeResourcesFit,
    "NodeResourcesFit",
    [filter, score],
    events = vec![
        ClusterEvent::NodeAdd,
        ClusterEvent::NodeUpdate,
        ClusterEvent::PodDelete
    ]
);

fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: "cpu".into(),
            weight: 1,
        },
        ResourceSpec {
            name: "memory".into(),
            weight: 1,
        },
    ]
}

impl NodeResourcesFit {
    /// Build from args; `extra_ignored` are resources extenders manage.
    pub fn new(
        args: Option<&serde_json::Value>,
        extra_ignored: Vec<String>,
    ) -> Result<Self, String> {
        let a: FitArgs = decode_args(args)?;
        let s = a.scoring_strategy.unwrap_or_default();
        let strategy = match s.type_.as_deref().unwrap_or("LeastAllocated") {
            "LeastAllocated" => Strategy::Least,
            "MostAllocated" => Strategy::Most,
            "RequestedToCapacityRatio" => Strategy::Ratio,
            other => {
                return Err(format!(
                    "scoringStrategy.type: Unsupported value: {other:?}: supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
                ));
            }
        };
        let resources = if s.resources.is_empty() {
            default_resources()
        } else {
            s.resources
        };
        for (i, r) in resources.iter().enumerate() {
            if !(1..=100).contains(&r.weight) {
                return Err(format!(
                    "scoringStrategy.resources[{i}].weight: Invalid value: {}: resource weight of {} should be in range [1, 100]",
                    r.weight, r.name
                ));
            }
        }
        let mut shape = Vec::new();
        if strategy == Strategy::Ratio {
            let pts = s
                .requested_to_capacity_ratio
                .map(|r| r.shape)
                .unwrap_or_default();
            if pts.is_empty() {
                return Err("scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point must be specified".into());
            }
            for (i, p) in pts.iter().enumerate() {
                if !(0..=100).contains(&p.utilization) {
                    return Err(format!(
                        "scoringStrategy.requestedToCapacityRatio.shape[{i}].utilization: Invalid value: {}: not in valid range [0, 100]",
                        p.utilization
                    ));
                }
                if !(0..=10).contains(&p.score) {
                    return Err(format!(
                        "scoringStrategy.requestedToCapacityRatio.shape[{i}].score: Invalid value: {}: not in valid range [0, 10]",
                        p.score
                    ));
                }
                if i > 0 && p.utilization <= pts[i - 1].utilization {
                    return Err(format!(
                        "scoringStrategy.requestedToCapacityRatio.shape[{i}].utilization: Invalid value: {}: utilization values must be sorted in increasing order",
                        p.utilization
                    ));
                }
                // scores are 0–10 in the config, 0–100 internally
                shape.push((p.utilization, p.score * (MAX_NODE_SCORE / 10)));
            }
        }
        let mut ignored = a.ignored_resources;
        ignored.extend(extra_ignored);
        Ok(NodeResourcesFit {
            ignored,
            ignored_groups: a.ignored_resource_groups,
            strategy,
            kinds: kinds(&resources),
            shape,
        })
    }

    fn is_ignored(&self, name: &str) -> bool {
        self.ignored.iter().any(|i| i == name)
            || name
                .split_once('/')
                .is_some_and(|(g, _)| self.ignored_groups.iter().any(|i| i == g))
    }

    fn ratio(&self, requested: i64, capacity: i64) -> i64 {
        if capacity == 0 {
            return 0;
        }
        let util = (requested * 100 / capacity).min(100);
        // piecewise linear through the shape points
        let pts = &self.shape;
        let Some(first) = pts.first() else { return 0 };
        if util <= first.0 {
            return first.1;
        }
        for w in pts.windows(2) {
            let ((u0, s0), (u1, s1)) = (w[0], w[1]);
            if util <= u1 {
                return s0 + (s1 - s0) * (util - u0) / (u1 - u0);
            }
        }
        pts.last().map_or(0, |p| p.1)
    }
}

/// Why a pod does not fit a node's resources (every reason, as
/// kube-scheduler's `fitsRequest`).
pub fn insufficient(
    pod: &PodInfo,
    node: &NodeInfo,
    ignored: &dyn Fn(&str) -> bool,
) -> Vec<Cow<'static, str>> {
    let mut out = Vec::new();
    shortfalls(pod, node, ignored, |r| {
        out.push(r);
        ControlFlow::Continue(())
    });
    out
}

/// Whether the pod fits the node's resources: `insufficient` is empty.
fn fits(pod: &PodInfo, node: &NodeInfo, ignored: &dyn Fn(&str) -> bool) -> bool {
    let mut fits = true;
    shortfalls(pod, node, ignored, |_| {
        fits = false;
        ControlFlow::Break(())
    });
    fits
}

/// Each reason the pod does not fit, in kube-scheduler's order, until `f`
/// breaks.
fn shortfalls(
    pod: &PodInfo,
    node: &NodeInfo,
    ignored: &dyn Fn(&str) -> bool,
    mut f: impl FnMut(Cow<'static, str>) -> ControlFlow<()>,
) {
    let alloc = &node.allocatable;
    let used = &node.requested;
    if node.pods.len() as i64 + 1 > alloc.allowed_pod_number && f("Too many pods".into()).is_break()
    {
        return;
    }
    let req = &pod.requests;
    if req.milli_cpu == 0
        && req.memory == 0
        && req.ephemeral_storage == 0
        && req.scalar.iter().all(|(_, v)| *v == 0)
    {
        return;
    }
    if req.milli_cpu > 0
        && alloc.milli_cpu < req.milli_cpu + used.milli_cpu
        && f("Insufficient cpu".into()).is_break()
    {
        return;
    }
    if req.memory > 0
        && alloc.memory < req.memory + used.memory
        && f("Insufficient memory".into()).is_break()
    {
        return;
    }
    if req.ephemeral_storage > 0
        && alloc.ephemeral_storage < req.ephemeral_storage + used.ephemeral_storage
        && f("Insufficient ephemeral-storage".into()).is_break()
    {
        return;
    }
    for (name, v) in &req.scalar {
        if *v == 0 || ignored(name) {
            continue;
        }
        if alloc.scalar(name) < v + used.scalar(name)
            && f(format!("Insufficient {name}").into()).is_break()
        {
            return;
        }
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn passes(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<bool, Status> {
        Ok(fits(pod, node, &|n| self.is_ignored(n)))
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        // Built in place: one reason (the usual case) allocates nothing.
        let mut reasons = crate::framework::Reasons::new();
        shortfalls(pod, node, &|n| self.is_ignored(n), |r| {
            reasons.push(r);
            ControlFlow::Continue(())
        });
        if reasons.is_empty() {
            Status::success()
        } else {
            Status::with_reasons(crate::framework::Code::Unschedulable, reasons)
        }
    }
}

/// A scored resource, its name resolved once (scoring runs per node).
#[derive(Debug, Clone)]
enum Kind {
    Cpu,
    Memory,
    Other(String),
}

fn kinds(resources: &[ResourceSpec]) -> Vec<(Kind, i64)> {
    resources
        .iter()
        .map(|r| {
            let k = match r.name.as_str() {
                "cpu" => Kind::Cpu,
                "memory" => Kind::Memory,
                other => Kind::Other(other.to_string()),
            };
            (k, r.weight)
        })
        .collect()
}

/// (requested including this pod, allocatable) for one resource, counting
/// CPU/memory with the non-zero defaults as kube-scheduler's scorers do.
fn requested_and_allocatable(
    pod: &PodInfo,
    node: &NodeInfo,
    kind: &Kind,
    non_zero: bool,
) -> (i64, i64) {
    let (a, r) = (&node.allocatable, &node.requested);
    match kind {
        Kind::Cpu if non_zero => (node.non_zero_cpu + pod.non_zero_cpu, a.milli_cpu),
        Kind::Memory if non_zero => (node.non_zero_memory + pod.non_zero_memory, a.memory),
        Kind::Cpu => (r.milli_cpu + pod.requests.milli_cpu, a.milli_cpu),
        Kind::Memory => (r.memory + pod.requests.memory, a.memory),
        Kind::Other(other) => (r.get(other) + pod.requests.get(other), a.get(other)),
    }
}

/// LeastAllocated's or MostAllocated's 0..=100 score for one resource
/// (`alloc` > 0).
fn allocated_score(most: bool, req: i64, alloc: i64) -> i64 {
    if most {
        req.min(alloc) * MAX_NODE_SCORE / alloc
    } else if req > alloc {
        0
    } else {
        (alloc - req) * MAX_NODE_SCORE / alloc
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        scores: &mut [i64],
    ) -> Status {
        // The default resources (cpu, memory) under LeastAllocated or
        // MostAllocated: `score`'s arithmetic with the resource list and
        // the strategy resolved once per cycle instead of per node.
        let ([(Kind::Cpu, wc), (Kind::Memory, wm)], Strategy::Least | Strategy::Most) =
            (self.kinds.as_slice(), self.strategy)
        else {
            return score_each_node(self, state, pod, nodes, scores);
        };
        let (wc, wm) = (*wc, *wm);
        let most = self.strategy == Strategy::Most;
        let one = |req: i64, alloc: i64| allocated_score(most, req, alloc);
        for (slot, node) in scores.iter_mut().zip(nodes) {
            let a = &node.allocatable;
            let (mut total, mut weights) = (0i64, 0i64);
            if a.milli_cpu != 0 {
                total += one(node.non_zero_cpu + pod.non_zero_cpu, a.milli_cpu) * wc;
                weights += wc;
            }
            if a.memory != 0 {
                total += one(node.non_zero_memory + pod.non_zero_memory, a.memory) * wm;
                weights += wm;
            }
            *slot = if weights == 0 { 0 } else { total / weights };
        }
        Status::success()
    }

    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let mut total = 0i64;
        let mut weights = 0i64;
        for (kind, weight) in &self.kinds {
            if let Kind::Other(name) = kind
                && pod.requests.get(name) == 0
            {
                continue; // scalar resources count only when requested
            }
            let (req, alloc) = requested_and_allocatable(pod, node, kind, true);
            if alloc == 0 {
                continue;
            }
            let s = match self.strategy {
                Strategy::Least => allocated_score(false, req, alloc),
                Strategy::Most => allocated_score(true, req, alloc),
                Strategy::Ratio => self.ratio(req, alloc),
            };
            total += s * weight;
            weights += weight;
        }
        (
            if weights == 0 { 0 } else { total / weights },
            Status::success(),
        )
    }
}

/// `NodeResourcesBalancedAllocationArgs`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BalancedArgs {
    /// Accepted for compatibility.
    pub api_version: Option<String>,
    /// Accepted for compatibility.
    pub kind: Option<String>,
    /// Resources compared (default cpu and memory).
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
}

/// Prefers nodes whose resource fractions stay close to each other.
pub struct BalancedAllocation {
    kinds: Vec<(Kind, i64)>,
}
plugin!(
    BalancedAllocation,
    "NodeResourcesBalancedAllocation",
    [pre_score, score],
    events = vec![ClusterEvent::NodeAdd, ClusterEvent::PodDelete]
);

impl BalancedAllocation {
    /// Build from args.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, String> {
        let a: BalancedArgs = decode_args(args)?;
        Ok(BalancedAllocation {
            kinds: kinds(&if a.resources.is_empty() {
                default_resources()
            } else {
                a.resources
            }),
        })
    }
}

impl PreScorePlugin for BalancedAllocation {
    fn pre_score(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &[&NodeInfo],
        _: &Snapshot,
    ) -> Status {
        // Best-effort pods (no requests at all) are not scored.
        let r = &pod.requests;
        if r.milli_cpu == 0 && r.memory == 0 && r.scalar.iter().all(|(_, v)| *v == 0) {
            Status::skip()
        } else {
            Status::success()
        }
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        scores: &mut [i64],
    ) -> Status {
        // The default resources (cpu, memory): `score`'s arithmetic for two
        // fractions with the resource list resolved once per cycle.
        let [(Kind::Cpu, _), (Kind::Memory, _)] = self.kinds.as_slice() else {
            return score_each_node(self, state, pod, nodes, scores);
        };
        let (pc, pm) = (pod.requests.milli_cpu, pod.requests.memory);
        for (slot, node) in scores.iter_mut().zip(nodes) {
            let (a, r) = (&node.allocatable, &node.requested);
            // One resource (or none) with a capacity: no deviation.
            let std = if a.milli_cpu != 0 && a.memory != 0 {
                let fc = ((r.milli_cpu + pc) as f64 / a.milli_cpu as f64).min(1.0);
                let fm = ((r.memory + pm) as f64 / a.memory as f64).min(1.0);
                (fc - fm).abs() / 2.0
            } else {
                0.0
            };
            *slot = ((1.0 - std) * MAX_NODE_SCORE as f64) as i64;
        }
        Status::success()
    }

    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let mut fractions = [0f64; 8];
        let mut n = 0;
        for (kind, _) in &self.kinds {
            if n == fractions.len() {
                break;
            }
            let (req, alloc) = requested_and_allocatable(pod, node, kind, false);
            if alloc == 0 {
                continue;
            }
            fractions[n] = (req as f64 / alloc as f64).min(1.0);
            n += 1;
        }
        let f = &fractions[..n];
        let std = match n {
            0 | 1 => 0.0,
            2 => (f[0] - f[1]).abs() / 2.0,
            _ => {
                let mean = f.iter().sum::<f64>() / n as f64;
                (f.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64).sqrt()
            }
        };
        (
            ((1.0 - std) * MAX_NODE_SCORE as f64) as i64,
            Status::success(),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::framework::{NodeInfo, PodInfo};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;
    use std::sync::Arc;

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
        }
    }

    fn pod(rng: &mut Rng, i: usize) -> Arc<PodInfo> {
        let mut requests = serde_json::Map::new();
        // Missing requests count with the scoring defaults (non-zero).
        if rng.below(4) != 0 {
            requests.insert("cpu".into(), json!(format!("{}m", rng.below(3000))));
        }
        if rng.below(4) != 0 {
            requests.insert("memory".into(), json!(format!("{}Mi", rng.below(20_000))));
        }
        if rng.below(3) == 0 {
            requests.insert("nvidia.com/gpu".into(), json!(rng.below(3).to_string()));
        }
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p{i}"), "namespace": "default", "uid": format!("p{i}")},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    /// Nodes with random capacities (some zero or missing, so the
    /// `alloc == 0` branches run) and random pods on them (some nodes
    /// overcommitted, so `req > alloc` runs).
    fn node(rng: &mut Rng, i: usize) -> NodeInfo {
        let mut alloc = serde_json::Map::new();
        if rng.below(6) != 0 {
            alloc.insert("cpu".into(), json!(format!("{}m", rng.below(8000))));
        }
        if rng.below(6) != 0 {
            alloc.insert("memory".into(), json!(format!("{}Mi", rng.below(64_000))));
        }
        if rng.below(2) == 0 {
            alloc.insert("nvidia.com/gpu".into(), json!(rng.below(8).to_string()));
        }
        alloc.insert("pods".into(), json!("110"));
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("n{i}")},
            "status": {"allocatable": alloc}
        }))
        .unwrap();
        let mut info = NodeInfo::new(Arc::new(n));
        for j in 0..rng.below(6) as usize {
            info.add_pod(pod(rng, i * 100 + j));
        }
        info
    }

    /// `score_nodes` (the per-cycle fast paths for the default resources)
    /// gives exactly the per-node `score`, for every strategy and for
    /// non-default resource lists (which take the general path).
    #[test]
    fn score_nodes_equals_score_per_node() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let nodes: Vec<NodeInfo> = (0..300).map(|i| node(&mut rng, i)).collect();
        let nodes: Vec<&NodeInfo> = nodes.iter().collect();
        let fits = [
            json!({}),
            json!({"scoringStrategy": {"type": "MostAllocated"}}),
            json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [
                {"name": "cpu", "weight": 3}, {"name": "memory", "weight": 5}]}}),
            json!({"scoringStrategy": {"type": "MostAllocated", "resources": [
                {"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}]}}),
            json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [
                {"name": "memory", "weight": 1}, {"name": "cpu", "weight": 1}]}}),
            json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [
                {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                {"name": "nvidia.com/gpu", "weight": 4}]}}),
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {"shape": [
                    {"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}}}),
        ];
        let balanced = [
            json!({}),
            json!({"resources": [{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 1}]}),
            json!({"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                {"name": "nvidia.com/gpu", "weight": 1}]}),
        ];
        let mut plugins: Vec<Box<dyn ScorePlugin>> = Vec::new();
        for a in &fits {
            plugins.push(Box::new(NodeResourcesFit::new(Some(a), vec![]).unwrap()));
        }
        for a in &balanced {
            plugins.push(Box::new(BalancedAllocation::new(Some(a)).unwrap()));
        }
        let state = CycleState::default();
        let mut distinct = std::collections::HashSet::new();
        for i in 0..40 {
            let incoming = pod(&mut rng, 1_000_000 + i);
            for p in &plugins {
                let mut batch = vec![-1; nodes.len()];
                assert!(
                    p.score_nodes(&state, &incoming, &nodes, &mut batch)
                        .is_success()
                );
                for (n, got) in nodes.iter().zip(&batch) {
                    let (want, s) = p.score(&state, &incoming, n);
                    assert!(s.is_success());
                    assert_eq!(*got, want, "{} on {}", p.name(), n.name);
                    distinct.insert(want);
                }
            }
        }
        // The inputs reach many different scores, not one constant.
        assert!(distinct.len() > 50, "{}", distinct.len());
    }
}
