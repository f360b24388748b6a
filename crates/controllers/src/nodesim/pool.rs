//! A bounded pool of workers sending the simulator's writes (pod statuses,
//! final deletions, Lease renewals, node statuses) as raw requests whose
//! answers are read and dropped: no typed decode of 150,000 pods' replies.
//! The queue is bounded, so a slow API server slows the pod loop rather
//! than growing memory.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::Shared;

/// One write.
#[derive(Debug)]
pub(crate) enum Write {
    /// Merge-patch a pod's status.
    PodStatus {
        namespace: Box<str>,
        name: Box<str>,
        body: Vec<u8>,
    },
    /// Delete a pod with gracePeriodSeconds=0 if its uid still matches.
    PodDelete {
        namespace: Box<str>,
        name: Box<str>,
        uid: Box<str>,
    },
    /// Merge-patch a node Lease.
    Lease { name: Arc<str>, body: Vec<u8> },
    /// Merge-patch a node's status.
    NodeStatus { name: Arc<str>, body: Vec<u8> },
}

/// Writes queued across all workers at most (~16 MB of bodies).
const QUEUE: usize = 8192;
const ATTEMPTS: u32 = 5;

/// The sending side: writes about one object always go to the same worker,
/// so a pod's Running and Succeeded statuses are sent in the order they
/// were made (workers sharing one queue could reorder them).
#[derive(Clone)]
pub(crate) struct Writes {
    shards: Arc<[mpsc::Sender<Write>]>,
}

impl Writes {
    /// Queue `w` on its object's worker (waits while that queue is full).
    pub(crate) async fn send(&self, w: Write) -> Result<(), mpsc::error::SendError<Write>> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match &w {
            Write::PodStatus {
                namespace, name, ..
            }
            | Write::PodDelete {
                namespace, name, ..
            } => (namespace, name).hash(&mut h),
            Write::Lease { name, .. } | Write::NodeStatus { name, .. } => name.hash(&mut h),
        }
        let i = (h.finish() % self.shards.len() as u64) as usize;
        self.shards[i].send(w).await
    }
}

pub(crate) struct Pool {
    writes: Writes,
    tasks: Vec<JoinHandle<()>>,
}

impl Pool {
    pub(crate) fn start(client: Client, workers: usize, shared: Arc<Shared>) -> Pool {
        let workers = workers.max(1);
        let mut shards = Vec::with_capacity(workers);
        let tasks = (0..workers)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<Write>(QUEUE / workers + 1);
                shards.push(tx);
                let client = client.clone();
                let shared = shared.clone();
                tokio::spawn(async move {
                    while let Some(w) = rx.recv().await {
                        send(&client, &shared, w).await;
                    }
                })
            })
            .collect();
        Pool {
            writes: Writes {
                shards: shards.into(),
            },
            tasks,
        }
    }

    pub(crate) fn sender(&self) -> Writes {
        self.writes.clone()
    }

    /// The workers' tasks; they end once every sender is dropped and the
    /// queue is drained.
    pub(crate) fn into_tasks(self) -> Vec<JoinHandle<()>> {
        self.tasks
    }
}

async fn send(client: &Client, shared: &Shared, w: Write) {
    for attempt in 0..ATTEMPTS {
        let req = match request(&w) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "node simulator: building a request failed");
                return;
            }
        };
        match crate::send_discard(client, req).await {
            Ok(()) => {
                match &w {
                    Write::PodDelete { .. } => {
                        shared.stats.pods_deleted.fetch_add(1, Ordering::Relaxed);
                    }
                    Write::Lease { .. } => {
                        shared.stats.lease_renewals.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
                return;
            }
            // Gone, or replaced by a new object of the same name: nothing to do.
            Err(e) if crate::is_not_found(&e) || crate::is_conflict(&e) => return,
            Err(e) => {
                if attempt + 1 == ATTEMPTS {
                    shared.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, write = ?kind(&w), "node simulator: write failed");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
        }
    }
}

fn kind(w: &Write) -> String {
    match w {
        Write::PodStatus {
            namespace, name, ..
        } => format!("pod status {namespace}/{name}"),
        Write::PodDelete {
            namespace, name, ..
        } => format!("pod delete {namespace}/{name}"),
        Write::Lease { name, .. } => format!("lease {name}"),
        Write::NodeStatus { name, .. } => format!("node status {name}"),
    }
}

fn request(w: &Write) -> Result<http::Request<Vec<u8>>, http::Error> {
    const MERGE: &str = "application/merge-patch+json";
    match w {
        Write::PodStatus {
            namespace,
            name,
            body,
        } => http::Request::patch(format!("/api/v1/namespaces/{namespace}/pods/{name}/status"))
            .header(http::header::CONTENT_TYPE, MERGE)
            .body(body.clone()),
        Write::PodDelete {
            namespace,
            name,
            uid,
        } => {
            let body = serde_json::json!({
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": &**uid},
            });
            http::Request::delete(format!("/api/v1/namespaces/{namespace}/pods/{name}"))
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body.to_string().into_bytes())
        }
        Write::Lease { name, body } => http::Request::patch(format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        ))
        .header(http::header::CONTENT_TYPE, MERGE)
        .body(body.clone()),
        Write::NodeStatus { name, body } => {
            http::Request::patch(format!("/api/v1/nodes/{name}/status"))
                .header(http::header::CONTENT_TYPE, MERGE)
                .body(body.clone())
        }
    }
}
