//! The small default plugins: PrioritySort (queue order), SchedulingGates
//! (PreEnqueue), NodeUnschedulable, NodeName and NodePorts (Filters).

use super::helper::plugin;
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, PodInfo, PreEnqueuePlugin, PreFilterPlugin,
    PreFilterResult, QueueSortPlugin, QueuedPodInfo, Snapshot, Status, types::tolerates,
};
use k8s_openapi::api::core::v1::Taint;

/// Higher priority first, then first come first served.
pub struct PrioritySort;
plugin!(PrioritySort, "PrioritySort", [queue_sort], events = vec![]);

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (a.pod.priority, b.pod.priority);
        pa > pb || (pa == pb && (a.timestamp, a.seq) < (b.timestamp, b.seq))
    }
}

/// Keeps pods with `spec.schedulingGates` out of the active queue.
pub struct SchedulingGates;
plugin!(
    SchedulingGates,
    "SchedulingGates",
    [pre_enqueue],
    events = vec![]
);

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates: Vec<&str> = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .into_iter()
            .flatten()
            .map(|g| g.name.as_str())
            .collect();
        if gates.is_empty() {
            Status::success()
        } else {
            Status::new(
                crate::framework::Code::Pending,
                format!("waiting for scheduling gates: [{}]", gates.join(" ")),
            )
        }
    }
}

/// Rejects nodes with `spec.unschedulable` unless the pod tolerates the
/// `node.kubernetes.io/unschedulable` taint.
pub struct NodeUnschedulable;
plugin!(
    NodeUnschedulable,
    "NodeUnschedulable",
    [filter],
    events = vec![ClusterEvent::NodeAdd, ClusterEvent::NodeUpdate]
);

impl FilterPlugin for NodeUnschedulable {
    /// Reads the node object only (`spec.unschedulable` and the pod's tolerations).
    fn ignores_node_pods(&self) -> bool {
        true
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        if pod.tolerations.iter().any(|t| tolerates(t, &taint)) {
            Status::success()
        } else {
            Status::unresolvable("node(s) were unschedulable")
        }
    }
}

/// Rejects every node but `spec.nodeName` when it is set.
pub struct NodeName;
plugin!(
    NodeName,
    "NodeName",
    [pre_filter, filter],
    events = vec![ClusterEvent::NodeAdd]
);

impl PreFilterPlugin for NodeName {
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if pod.node_name().is_some() {
            (None, Status::success())
        } else {
            (None, Status::skip())
        }
    }
}

impl FilterPlugin for NodeName {
    /// Reads the node object only (its name).
    fn ignores_node_pods(&self) -> bool {
        true
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.node_name() {
            Some(n) if n != node.name => {
                Status::unresolvable("node(s) didn't match the requested node name")
            }
            _ => Status::success(),
        }
    }
}

/// Rejects nodes where a host port the pod wants is taken.
pub struct NodePorts;
plugin!(
    NodePorts,
    "NodePorts",
    [pre_filter, filter],
    events = vec![ClusterEvent::NodeAdd, ClusterEvent::PodDelete]
);

impl PreFilterPlugin for NodePorts {
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if pod.host_ports.is_empty() {
            (None, Status::skip())
        } else {
            (None, Status::success())
        }
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.host_ports.is_empty() {
            return Status::success();
        }
        for want in &pod.host_ports {
            if node.used_ports.iter().any(|u| u.conflicts(want)) {
                return Status::unschedulable(
                    "node(s) didn't have free ports for the requested pod ports",
                );
            }
        }
        Status::success()
    }
}
