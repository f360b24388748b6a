//! A bounded pool of workers sending the simulator's writes (pod statuses,
//! final deletions, Lease renewals, node statuses) as raw requests whose
//! answers are read and dropped: no typed decode of 150,000 pods' replies.
//! The queue is bounded, so a slow API server slows the pod loop rather
//! than growing memory.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::Client;
use tokio::sync::{Mutex, mpsc};
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

const QUEUE: usize = 2048;
const ATTEMPTS: u32 = 5;

pub(crate) struct Pool {
    tx: mpsc::Sender<Write>,
    tasks: Vec<JoinHandle<()>>,
}

impl Pool {
    pub(crate) fn start(client: Client, workers: usize, shared: Arc<Shared>) -> Pool {
        let (tx, rx) = mpsc::channel(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let tasks = (0..workers)
            .map(|_| {
                let rx = rx.clone();
                let client = client.clone();
                let shared = shared.clone();
                tokio::spawn(async move {
                    loop {
                        let next = rx.lock().await.recv().await;
                        let Some(w) = next else { break };
                        send(&client, &shared, w).await;
                    }
                })
            })
            .collect();
        Pool { tx, tasks }
    }

    pub(crate) fn sender(&self) -> mpsc::Sender<Write> {
        self.tx.clone()
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
