//! DefaultPreemption (PostFilter): when no node fits, find nodes where
//! removing lower-priority pods would make room, pick one by kube-scheduler's
//! rules, delete the victims (gracefully) and nominate the node.
//!
//! Node order: fewest PodDisruptionBudget violations → lowest highest-victim
//! priority → smallest sum of victim priorities → fewest victims → latest
//! start among the highest-priority victims → first found.

use std::sync::Arc;

use serde::Deserialize;

use super::helper::{decode_args, plugin};
use crate::framework::{
    Code, CycleState, Handle, NodeInfo, NodeToStatus, PodInfo, PostFilterContext, PostFilterPlugin,
    PostFilterResult, Status, runtime::histogram_message,
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
        })
    }
}

/// A node where preemption would work.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Node name.
    pub node: String,
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

impl DefaultPreemption {
    fn violates_pdb(&self, victims: &[Arc<PodInfo>]) -> Vec<bool> {
        let pdbs = self
            .handle
            .pdbs
            .read()
            .map(|p| p.clone())
            .unwrap_or_default();
        let mut allowed: Vec<i32> = pdbs.iter().map(|p| p.disruptions_allowed).collect();
        victims
            .iter()
            .map(|v| {
                let mut violating = false;
                for (i, p) in pdbs.iter().enumerate() {
                    if p.namespace == v.namespace && p.selector.matches(&v.labels) {
                        allowed[i] -= 1;
                        if allowed[i] < 0 {
                            violating = true;
                        }
                    }
                }
                violating
            })
            .collect()
    }

    /// Try one node: remove every lower-priority pod; if the pod then fits,
    /// add them back one by one (PDB-violating first, most important first)
    /// while it still fits. The ones that cannot come back are the victims.
    fn select_victims(
        &self,
        ctx: &PostFilterContext<'_>,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Option<Candidate> {
        let fw = ctx.framework;
        let mut info = node.clone();
        let mut st = state.clone();
        let mut potential: Vec<Arc<PodInfo>> = node
            .pods
            .iter()
            .filter(|p| p.priority < pod.priority)
            .cloned()
            .collect();
        if potential.is_empty() {
            return None;
        }
        for v in &potential {
            info.remove_pod(&v.uid);
            fw.run_pre_filter_remove_pod(&mut st, pod, v, &info);
        }
        if !fw
            .run_filter_with_nominated(&st, pod, &info, ctx.nominated)
            .is_success()
        {
            return None;
        }
        potential.sort_by(|a, b| more_important(a, b));
        let violating = self.violates_pdb(&potential);
        let (viol, non_viol): (Vec<_>, Vec<_>) =
            potential.into_iter().zip(violating).partition(|(_, v)| *v);
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
                    continue; // reprieved
                }
                info.remove_pod(&p.uid);
                fw.run_pre_filter_remove_pod(&mut st, pod, &p, &info);
                if is_violating {
                    pdb_violations += 1;
                }
                victims.push(p);
            }
        }
        if victims.is_empty() {
            return None;
        }
        victims.sort_by(|a, b| more_important(a, b));
        Some(Candidate {
            node: node.name.clone(),
            victims,
            pdb_violations,
        })
    }
}

/// Pick a candidate by kube-scheduler's rules.
pub fn pick_one(candidates: &[Candidate]) -> Option<&Candidate> {
    candidates.iter().min_by(|a, b| {
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
        let nodes = ctx.snapshot.nodes();
        let n = nodes.len();
        let mut not_helpful = NodeToStatus::new();
        let potential: Vec<&NodeInfo> = nodes
            .iter()
            .filter(|node| match statuses.get(&node.name) {
                Some(s) if s.code == Code::UnschedulableAndUnresolvable => {
                    not_helpful.insert(
                        node.name.clone(),
                        Status::unresolvable("Preemption is not helpful for scheduling"),
                    );
                    false
                }
                _ => node.node.is_some(),
            })
            .collect();
        if potential.is_empty() {
            return (
                None,
                Status::unschedulable(format!(
                    "preemption: {}",
                    histogram_message(n, &not_helpful)
                )),
            );
        }
        let want = (potential.len() * self.pct / 100)
            .max(self.abs)
            .min(potential.len());
        let offset =
            (pod.start_time.unsigned_abs() as usize).wrapping_add(pod.uid.len()) % potential.len();
        let mut candidates = Vec::new();
        let mut statuses_out = not_helpful;
        for i in 0..potential.len() {
            let node = potential[(offset + i) % potential.len()];
            match self.select_victims(ctx, state, pod, node) {
                Some(c) => candidates.push(c),
                None => {
                    statuses_out.insert(
                        node.name.clone(),
                        Status::unschedulable("No preemption victims found for incoming pod"),
                    );
                }
            }
            if candidates.len() >= want {
                break;
            }
        }
        let Some(best) = pick_one(&candidates).cloned() else {
            return (
                None,
                Status::unschedulable(format!(
                    "preemption: {}",
                    histogram_message(n, &statuses_out)
                )),
            );
        };
        // Delete the victims gracefully; the pod is retried when they are gone.
        if let (Some(client), Some(rt)) = (self.handle.client.clone(), self.handle.runtime.clone())
        {
            for v in best.victims.iter().cloned() {
                let client = client.clone();
                let preemptor = pod.key();
                let node = best.node.clone();
                rt.spawn(async move {
                    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, &v.namespace);
                    let dp = kube::api::DeleteParams {
                        preconditions: Some(kube::api::Preconditions { uid: Some(v.uid.clone()), resource_version: None }),
                        ..Default::default()
                    };
                    match api.delete(&v.name, &dp).await {
                        Ok(_) => tracing::info!(victim = %v.key(), preemptor = %preemptor, node = %node, "preempted"),
                        Err(e) => tracing::warn!(victim = %v.key(), error = %e, "deleting a preemption victim failed"),
                    }
                });
            }
        }
        (
            Some(PostFilterResult {
                nominated_node_name: Some(best.node.clone()),
            }),
            Status::success(),
        )
    }
}
