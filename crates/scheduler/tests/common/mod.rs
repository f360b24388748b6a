//! Shared helpers: the embedded API server in-process, nodes created as
//! objects (no kubelets yet), pods, and waiting for a pod's fate.

#![allow(clippy::unwrap_used)]
#![allow(dead_code)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

pub async fn server() -> (kubeforge_apiserver::ApiServer, kube::Client) {
    let s = kubeforge_apiserver::ApiServer::in_memory().await;
    let c = s.client();
    (s, c)
}

/// A node with capacity; `extra` is merged into the object (labels, taints…).
pub async fn node(client: &kube::Client, name: &str, cpu: &str, mem: &str, extra: Value) {
    let mut n = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"capacity": {"cpu": cpu, "memory": mem, "pods": "110"},
                   "allocatable": {"cpu": cpu, "memory": mem, "pods": "110"}}
    });
    merge(&mut n, &extra);
    let node: Node = serde_json::from_value(n).expect("node json");
    let api: Api<Node> = Api::all(client.clone());
    let created = api
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
    // status is a subresource: write it there too
    let mut with_status = created.clone();
    with_status.status = node.status.clone();
    api.replace_status(name, &PostParams::default(), &with_status)
        .await
        .expect("node status");
}

pub fn merge(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

/// A pod requesting cpu/memory; `extra` is merged into the object.
pub async fn pod(client: &kube::Client, name: &str, cpu: &str, mem: &str, extra: Value) -> Pod {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx",
            "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}
    });
    merge(&mut p, &extra);
    let pod: Pod = serde_json::from_value(p).expect("pod json");
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

/// Wait until the pod is bound; returns the node.
pub async fn bound(client: &kube::Client, name: &str) -> String {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    loop {
        if let Ok(p) = api.get(name).await
            && let Some(n) = p.spec.and_then(|s| s.node_name)
        {
            return n;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "pod {name} was not bound in 15 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pod's node after waiting `d` (None: still pending).
pub async fn node_after(client: &kube::Client, name: &str, d: Duration) -> Option<String> {
    tokio::time::sleep(d).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    api.get(name)
        .await
        .ok()
        .and_then(|p| p.spec.and_then(|s| s.node_name))
}

/// Wait for the PodScheduled=False condition and return its message.
pub async fn unschedulable_message(client: &kube::Client, name: &str) -> String {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    loop {
        if let Ok(p) = api.get(name).await {
            assert!(
                p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none(),
                "pod {name} was bound"
            );
            if let Some(c) = p
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            {
                assert_eq!(c.reason.as_deref(), Some("Unschedulable"));
                return c.message.unwrap_or_default();
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "pod {name} got no PodScheduled=False condition"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Events regarding a pod: (reason, note).
pub async fn events(client: &kube::Client, pod: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    api.list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}
