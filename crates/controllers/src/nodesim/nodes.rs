//! Simulated nodes: registration (Node + Lease, or a status refresh of a
//! node that already exists), Lease renewals every `lease_interval` and
//! status updates every `status_interval`, spread evenly over the interval
//! so 5,000 nodes make a steady stream of writes rather than bursts; and
//! a watch on the nodes for the [`ANNOTATION_HEARTBEATS`] switch.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::pool::Write;
use super::{ANNOTATION_HEARTBEATS, Error, Shared, SimulatorOptions};

/// Concurrent requests while registering.
const REGISTER_CONCURRENCY: usize = 32;

/// RFC 3339 with seconds, as metav1.Time.
pub(crate) fn now_time() -> String {
    let t = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// RFC 3339 with microseconds, as metav1.MicroTime.
fn now_micro() -> String {
    let t = k8s_openapi::jiff::Timestamp::now();
    format!("{t:.6}")
}

/// Create every node (or refresh an existing one's status) and its Lease.
pub(crate) async fn register(
    client: &Client,
    shared: &Arc<Shared>,
    options: &SimulatorOptions,
) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    futures::stream::iter(0..shared.nodes.len())
        .map(|i| {
            let nodes = nodes.clone();
            let leases = leases.clone();
            let shared = shared.clone();
            let client = client.clone();
            async move {
                let spec = &shared.nodes[i];
                let wrap = |source| Error::Register {
                    node: spec.name.clone(),
                    source,
                };
                let node: Node = serde_json::from_value(json!({
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": spec.name,
                        "labels": spec.labels,
                        "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                    },
                    "spec": {
                        "podCIDR": spec.pod_cidr_string(),
                        "podCIDRs": [spec.pod_cidr_string()],
                        "providerID": format!("kubeforge://{}", spec.name),
                        "taints": spec.taints,
                    },
                }))
                .map_err(|e| wrap(kube::Error::SerdeError(e)))?;
                let created = match nodes.create(&Default::default(), &node).await {
                    Ok(n) => Some(n),
                    Err(e) if crate::is_already_exists(&e) => nodes.get(&spec.name).await.ok(),
                    Err(e) => return Err(wrap(e)),
                };
                let status = status_patch(&shared, i, true);
                crate::send_discard(
                    &client,
                    http::Request::patch(format!("/api/v1/nodes/{}/status", spec.name))
                        .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
                        .body(status)
                        .map_err(|e| wrap(kube::Error::HttpError(e)))?,
                )
                .await
                .map_err(wrap)?;
                let owner = created.and_then(|n| n.metadata.uid).map(|uid| {
                    json!([{"apiVersion": "v1", "kind": "Node", "name": spec.name, "uid": uid}])
                });
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": spec.name, "namespace": "kube-node-lease", "ownerReferences": owner},
                    "spec": {
                        "holderIdentity": spec.name,
                        "leaseDurationSeconds": options.lease_duration_seconds,
                        "renewTime": now_micro(),
                    },
                });
                let lease = serde_json::from_value(lease).map_err(|e| wrap(kube::Error::SerdeError(e)))?;
                match leases.create(&Default::default(), &lease).await {
                    Ok(_) => {}
                    Err(e) if crate::is_already_exists(&e) => {
                        let body = lease_patch(&spec.name, options.lease_duration_seconds);
                        crate::send_discard(
                            &client,
                            http::Request::patch(format!(
                                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{}",
                                spec.name
                            ))
                            .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
                            .body(body)
                            .map_err(|e| wrap(kube::Error::HttpError(e)))?,
                        )
                        .await
                        .map_err(wrap)?;
                    }
                    Err(e) => return Err(wrap(e)),
                }
                Ok(())
            }
        })
        .buffer_unordered(REGISTER_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

fn lease_patch(name: &str, duration: i32) -> Vec<u8> {
    json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": now_micro()}})
        .to_string()
        .into_bytes()
}

/// The node's whole status as a merge patch.
fn status_patch(shared: &Shared, i: usize, ready: bool) -> Vec<u8> {
    let spec = &shared.nodes[i];
    let now = now_time();
    let cond = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": ty, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        })
    };
    let ready_cond = if ready {
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        )
    } else {
        cond(
            "Ready",
            "False",
            "KubeletNotReady",
            "simulated kubelet stopped",
        )
    };
    let body: Value = json!({
        "status": {
            "capacity": spec.capacity,
            "allocatable": spec.allocatable,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                ready_cond,
            ],
            "addresses": [
                {"type": "InternalIP", "address": spec.internal_ip.to_string()},
                {"type": "Hostname", "address": spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": format!("{:032x}", fnv(spec.name.as_bytes())),
                "systemUUID": format!("{:032x}", fnv(spec.name.as_bytes()).rotate_left(64)),
                "bootID": format!("{:032x}", fnv(now.as_bytes())),
                "kernelVersion": "6.1.0-kubeforge",
                "osImage": "kubeforge simulated node",
                "containerRuntimeVersion": "kubeforge-sim://0.1.0",
                "kubeletVersion": "v1.33.0-kubeforge",
                "kubeProxyVersion": "v1.33.0-kubeforge",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "phase": "Running",
        }
    });
    body.to_string().into_bytes()
}

/// A 128-bit FNV-1a hash (stable ids from names).
pub(crate) fn fnv(bytes: &[u8]) -> u128 {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for b in bytes {
        h ^= u128::from(*b);
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    h
}

/// Renew Leases and statuses until stopped; watch the nodes for the
/// heartbeat annotation.
pub(crate) async fn heartbeats(
    client: Client,
    shared: Arc<Shared>,
    options: SimulatorOptions,
    writes: super::pool::Writes,
    mut stop: watch::Receiver<bool>,
) {
    let n = shared.nodes.len().max(1);
    let names: Vec<Arc<str>> = shared
        .nodes
        .iter()
        .map(|s| Arc::from(s.name.as_str()))
        .collect();
    let start = Instant::now();
    let spread = |interval: Duration, i: usize| start + interval.mul_f64(i as f64 / n as f64);
    let mut next_lease: Vec<Instant> = (0..n)
        .map(|i| spread(options.lease_interval, i) + options.lease_interval)
        .collect();
    let mut next_status: Vec<Instant> = (0..n)
        .map(|i| spread(options.status_interval, i) + options.status_interval)
        .collect();
    let mut was_stopped = vec![false; n];
    let mut node_events = watcher::watcher(
        Api::<Node>::all(client),
        watcher::Config::default().labels(&format!("{}=true", super::config::SIMULATED_LABEL)),
    )
    .boxed();
    let tick =
        (options.lease_interval / 20).clamp(Duration::from_millis(20), Duration::from_millis(500));
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = super::stopped(&mut stop) => break,
            _ = ticker.tick() => {}
            () = shared.changed.notified() => {}
            ev = node_events.next() => {
                match ev {
                    Some(Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node))) => {
                        if let Some(&i) = node.metadata.name.as_ref().and_then(|name| shared.index.get(name)) {
                            let stopped = node.metadata.annotations.as_ref()
                                .and_then(|a| a.get(ANNOTATION_HEARTBEATS))
                                .is_some_and(|v| v == "stopped");
                            shared.stopped_annotation[i as usize].store(stopped, Ordering::Relaxed);
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "node simulator: node watch error");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    None => break,
                }
            }
        }
        let now = Instant::now();
        for i in 0..shared.nodes.len() {
            let stopped = shared.stopped(u32::try_from(i).unwrap_or(u32::MAX));
            if stopped {
                was_stopped[i] = true;
                continue;
            }
            // Coming back: renew and report Ready at once (the node
            // lifecycle controller set Ready=Unknown meanwhile).
            let resumed = std::mem::take(&mut was_stopped[i]);
            if resumed || now >= next_lease[i] {
                next_lease[i] = now + options.lease_interval;
                let body = lease_patch(&names[i], options.lease_duration_seconds);
                if writes
                    .send(Write::Lease {
                        name: names[i].clone(),
                        body,
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if resumed || now >= next_status[i] {
                next_status[i] = now + options.status_interval;
                let body = status_patch(&shared, i, true);
                if writes
                    .send(Write::NodeStatus {
                        name: names[i].clone(),
                        body,
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}
