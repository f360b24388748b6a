//! Pods held at Permit: each waits until every plugin that said Wait allows
//! it, one rejects it, or its timeout passes (kube-scheduler's
//! `waitingPodsMap`). Plugins reach waiting pods through [`WaitingPods`],
//! which is how Coscheduling releases a whole gang at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::interface::Status;
use super::types::PodInfo;

struct Waiting {
    pod: Arc<PodInfo>,
    node: String,
    pending: Vec<String>,
    done: Option<oneshot::Sender<Status>>,
}

/// The pods waiting at Permit, by UID.
#[derive(Clone, Default)]
pub struct WaitingPods {
    inner: Arc<Mutex<HashMap<String, Waiting>>>,
}

impl WaitingPods {
    pub(crate) fn add(
        &self,
        pod: Arc<PodInfo>,
        node: &str,
        pending: Vec<String>,
    ) -> oneshot::Receiver<Status> {
        let (tx, rx) = oneshot::channel();
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(
            pod.uid.clone(),
            Waiting {
                pod,
                node: node.to_string(),
                pending,
                done: Some(tx),
            },
        );
        rx
    }

    pub(crate) fn remove(&self, uid: &str) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(uid);
    }

    /// Allow a waiting pod on behalf of `plugin`; the pod proceeds to binding
    /// once no plugin is pending.
    pub fn allow(&self, uid: &str, plugin: &str) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = m.get_mut(uid) {
            w.pending.retain(|p| p != plugin);
            if w.pending.is_empty()
                && let Some(tx) = w.done.take()
            {
                let _ = tx.send(Status::success());
            }
        }
    }

    /// Reject a waiting pod: it is unreserved and requeued. Returns whether
    /// the pod was waiting.
    pub fn reject(&self, uid: &str, plugin: &str, message: &str) -> bool {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = m.get_mut(uid)
            && let Some(tx) = w.done.take()
        {
            let _ = tx.send(Status::unschedulable(message.to_string()).with_plugin(plugin));
            return true;
        }
        false
    }

    /// The waiting pods with the nodes they were assumed on.
    pub fn list(&self) -> Vec<(Arc<PodInfo>, String)> {
        let m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.values()
            .filter(|w| w.done.is_some())
            .map(|w| (w.pod.clone(), w.node.clone()))
            .collect()
    }
}
