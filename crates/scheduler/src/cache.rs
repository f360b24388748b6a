//! The scheduler's cache: the [`Snapshot`] of nodes plus where every known
//! pod is, including pods **assumed** on a node (chosen, not yet bound).
//!
//! An assumed pod counts against its node at once, so the next cycle does not
//! pick the same room; when the bind is confirmed by the watch it becomes a
//! plain pod, and when the bind fails it is **forgotten** (removed again).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::framework::{PodInfo, Snapshot};

#[derive(Debug)]
struct PodState {
    node: String,
    assumed: bool,
}

/// Nodes and the pods on them.
#[derive(Debug, Default)]
pub struct Cache {
    snapshot: Snapshot,
    pods: HashMap<String, PodState>,
}

impl Cache {
    /// An empty cache.
    pub fn new() -> Cache {
        Cache::default()
    }

    /// The snapshot plugins read.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Add or update a node.
    pub fn apply_node(&mut self, node: Arc<Node>) {
        self.snapshot.apply_node(node);
    }

    /// Remove a node.
    pub fn remove_node(&mut self, name: &str) {
        self.snapshot.remove_node(name);
    }

    /// Assume a pod on a node (before binding).
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: &str) {
        if let Some(old) = self.pods.remove(&pod.uid) {
            self.snapshot.remove_pod(&old.node, &pod.uid);
        }
        self.pods.insert(
            pod.uid.clone(),
            PodState {
                node: node.to_string(),
                assumed: true,
            },
        );
        self.snapshot.add_pod(node, pod);
    }

    /// Whether a pod is assumed (chosen, bind not yet seen).
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|s| s.assumed)
    }

    /// Whether the cache knows the pod on some node.
    pub fn contains(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// Undo `assume` (bind failed).
    pub fn forget(&mut self, uid: &str) {
        if let Some(s) = self.pods.get(uid)
            && s.assumed
        {
            let node = s.node.clone();
            self.pods.remove(uid);
            self.snapshot.remove_pod(&node, uid);
        }
    }

    /// A bound pod seen on the watch (new, changed, or confirming an
    /// assumption).
    pub fn apply_bound_pod(&mut self, pod: Arc<PodInfo>, node: &str) {
        if let Some(old) = self.pods.remove(&pod.uid) {
            self.snapshot.remove_pod(&old.node, &pod.uid);
        }
        self.pods.insert(
            pod.uid.clone(),
            PodState {
                node: node.to_string(),
                assumed: false,
            },
        );
        self.snapshot.add_pod(node, pod);
    }

    /// A pod deleted (or finished): free its node's room.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        match self.pods.remove(uid) {
            Some(s) => {
                self.snapshot.remove_pod(&s.node, uid);
                true
            }
            None => false,
        }
    }

    /// Number of pods the cache accounts for.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeStatus, Pod};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node(name: &str) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.status = Some(NodeStatus {
            allocatable: Some(
                [("cpu".to_string(), Quantity("4".into()))]
                    .into_iter()
                    .collect(),
            ),
            ..Default::default()
        });
        Arc::new(n)
    }

    fn pod(uid: &str) -> Arc<PodInfo> {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    #[test]
    fn assume_forget_and_confirm() {
        let mut c = Cache::new();
        c.apply_node(node("n1"));
        c.assume(pod("a"), "n1");
        assert_eq!(c.snapshot().get("n1").unwrap().requested.milli_cpu, 1000);
        c.forget("a");
        assert_eq!(c.snapshot().get("n1").unwrap().requested.milli_cpu, 0);
        c.assume(pod("b"), "n1");
        c.apply_bound_pod(pod("b"), "n1");
        assert!(!c.is_assumed("b"));
        c.forget("b"); // confirmed pods are not forgotten
        assert_eq!(c.snapshot().get("n1").unwrap().requested.milli_cpu, 1000);
        // a node removed and re-added keeps its pods
        c.remove_node("n1");
        c.apply_node(node("n1"));
        assert_eq!(c.snapshot().get("n1").unwrap().pods.len(), 1);
        assert!(c.remove_pod("b"));
        assert_eq!(c.snapshot().get("n1").unwrap().requested.milli_cpu, 0);
    }
}
