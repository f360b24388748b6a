//! Default plugins end to end: pods created through kube-rs against the
//! embedded API server are bound (through `pods/binding`) to the nodes
//! kube-scheduler's rules pick, or get kube-scheduler's FailedScheduling
//! message.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use kubeforge_scheduler::SchedulerBuilder;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_fit_and_failed_scheduling_message() {
    let (_s, c) = server().await;
    node(&c, "small", "1", "2Gi", json!({})).await;
    node(&c, "big", "8", "16Gi", json!({})).await;
    let sched = SchedulerBuilder::new(c.clone()).start().unwrap();
    pod(&c, "needs-4-cpu", "4", "1Gi", json!({})).await;
    assert_eq!(bound(&c, "needs-4-cpu").await, "big");
    // 8 CPUs minus 4: a 5-CPU pod fits nowhere
    pod(&c, "too-big", "5", "1Gi", json!({})).await;
    let msg = unschedulable_message(&c, "too-big").await;
    assert!(
        msg.starts_with("0/2 nodes are available: 2 Insufficient cpu."),
        "{msg}"
    );
    // the event carries the same message, as `kubectl describe pod` shows
    let start = std::time::Instant::now();
    loop {
        let evs = events(&c, "too-big").await;
        if evs.iter().any(|(r, n)| {
            r == "FailedScheduling" && n.starts_with("0/2 nodes are available: 2 Insufficient cpu.")
        }) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no FailedScheduling event: {evs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let evs = events(&c, "needs-4-cpu").await;
    assert!(
        evs.iter()
            .any(|(r, n)| r == "Scheduled"
                && n == "Successfully assigned default/needs-4-cpu to big"),
        "{evs:?}"
    );
    // deleting the first pod frees the room: the pending pod is retried
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(c.clone(), "default");
    api.delete("needs-4-cpu", &Default::default())
        .await
        .unwrap();
    assert_eq!(bound(&c, "too-big").await, "big");
    sched.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_tolerations_and_unschedulable_nodes() {
    let (_s, c) = server().await;
    node(
        &c,
        "tainted",
        "4",
        "8Gi",
        json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}),
    )
    .await;
    node(
        &c,
        "cordoned",
        "4",
        "8Gi",
        json!({"spec": {"unschedulable": true}}),
    )
    .await;
    let sched = SchedulerBuilder::new(c.clone()).start().unwrap();
    pod(&c, "plain", "100m", "64Mi", json!({})).await;
    let msg = unschedulable_message(&c, "plain").await;
    assert!(
        msg.starts_with("0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable."),
        "{msg}"
    );
    pod(&c, "tolerant", "100m", "64Mi", json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}})).await;
    assert_eq!(bound(&c, "tolerant").await, "tainted");
    sched.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_affinity_selector_and_bad_operator() {
    let (_s, c) = server().await;
    for (n, zone, disk) in [("a", "z1", "hdd"), ("b", "z2", "ssd"), ("c", "z3", "ssd")] {
        node(
            &c,
            n,
            "4",
            "8Gi",
            json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone, "disk": disk}}}),
        )
        .await;
    }
    let sched = SchedulerBuilder::new(c.clone()).start().unwrap();
    pod(&c, "ssd-not-z2", "100m", "64Mi", json!({"spec": {
        "nodeSelector": {"disk": "ssd"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["z2"]}]}
        ]}}}
    }})).await;
    assert_eq!(bound(&c, "ssd-not-z2").await, "c");
    // preferred terms steer among feasible nodes
    pod(&c, "prefers-a", "100m", "64Mi", json!({"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]}}
    ]}}}})).await;
    assert_eq!(bound(&c, "prefers-a").await, "a");
    // malformed affinity: a clear reason, not a crash
    pod(&c, "bad-op", "100m", "64Mi", json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "Near", "values": ["ssd"]}]}
    ]}}}}})).await;
    let msg = unschedulable_message(&c, "bad-op").await;
    assert!(msg.contains("Unsupported value: \"Near\""), "{msg}");
    // the scheduler is still alive
    pod(&c, "after", "100m", "64Mi", json!({})).await;
    bound(&c, "after").await;
    sched.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_and_unknown_extended_resources() {
    let (_s, c) = server().await;
    node(&c, "cpu-only", "8", "16Gi", json!({})).await;
    node(&c, "gpu-node", "8", "16Gi", json!({"status": {"capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "2"}}})).await;
    let sched = SchedulerBuilder::new(c.clone()).start().unwrap();
    let gpu = |n: &str| {
        json!({"spec": {"containers": [{"name": "c", "image": "cuda", "resources": {
        "requests": {"cpu": "100m", "nvidia.com/gpu": n}, "limits": {"nvidia.com/gpu": n}}}]}})
    };
    pod(&c, "train-1", "100m", "64Mi", gpu("2")).await;
    assert_eq!(bound(&c, "train-1").await, "gpu-node");
    pod(&c, "train-2", "100m", "64Mi", gpu("1")).await;
    let msg = unschedulable_message(&c, "train-2").await;
    assert!(
        msg.starts_with("0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        "{msg}"
    );
    pod(
        &c,
        "fpga",
        "100m",
        "64Mi",
        json!({"spec": {"containers": [{"name": "c", "image": "x", "resources": {
        "requests": {"example.com/fpga": "1"}, "limits": {"example.com/fpga": "1"}}}]}}),
    )
    .await;
    let msg = unschedulable_message(&c, "fpga").await;
    assert!(msg.contains("2 Insufficient example.com/fpga"), "{msg}");
    // GPUs asked in limits only: the API server defaults the requests to
    // the limits (SetDefaults_Pod), so no node fits this one either.
    pod(
        &c,
        "limits-only",
        "100m",
        "64Mi",
        json!({"spec": {"containers": [{"name": "c", "image": "cuda", "resources": {
        "limits": {"nvidia.com/gpu": "1"}}}]}}),
    )
    .await;
    let msg = unschedulable_message(&c, "limits-only").await;
    assert!(
        msg.starts_with("0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        "{msg}"
    );
    sched.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_spread_and_pod_anti_affinity() {
    let (_s, c) = server().await;
    for (n, zone) in [("a1", "z1"), ("a2", "z1"), ("b1", "z2")] {
        node(
            &c,
            n,
            "8",
            "16Gi",
            json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}}),
        )
        .await;
    }
    let sched = SchedulerBuilder::new(c.clone()).start().unwrap();
    let spread = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}}]}});
    let mut zones = std::collections::HashMap::new();
    for i in 0..4 {
        let name = format!("web-{i}");
        pod(&c, &name, "100m", "64Mi", spread.clone()).await;
        let n = bound(&c, &name).await;
        *zones
            .entry(if n == "b1" { "z2" } else { "z1" })
            .or_insert(0) += 1;
    }
    assert_eq!(zones.get("z1"), Some(&2), "{zones:?}");
    assert_eq!(zones.get("z2"), Some(&2), "{zones:?}");
    // anti-affinity per hostname: 3 nodes hold 3 replicas, the 4th waits
    let anti = json!({"metadata": {"labels": {"app": "db"}}, "spec": {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "db"}}}]}}}});
    let mut nodes = std::collections::HashSet::new();
    for i in 0..3 {
        let name = format!("db-{i}");
        pod(&c, &name, "100m", "64Mi", anti.clone()).await;
        nodes.insert(bound(&c, &name).await);
    }
    assert_eq!(nodes.len(), 3);
    pod(&c, "db-3", "100m", "64Mi", anti.clone()).await;
    let msg = unschedulable_message(&c, "db-3").await;
    // existing pods repel it first (symmetry is checked before its own terms)
    assert!(
        msg.contains("3 node(s) didn't satisfy existing pods anti-affinity rules"),
        "{msg}"
    );
    // symmetry: a pod without terms may not join a node whose pod repels it
    let repel = json!({"metadata": {"labels": {"app": "lonely"}}, "spec": {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "topology.kubernetes.io/zone",
            "labelSelector": {"matchLabels": {"app": "noisy"}}}]}}}});
    pod(&c, "lonely", "100m", "64Mi", repel).await;
    let lonely_node = bound(&c, "lonely").await;
    pod(
        &c,
        "noisy",
        "100m",
        "64Mi",
        json!({"metadata": {"labels": {"app": "noisy"}}}),
    )
    .await;
    let noisy_node = bound(&c, "noisy").await;
    let zone = |n: &str| if n == "b1" { "z2" } else { "z1" };
    assert_ne!(zone(&lonely_node), zone(&noisy_node));
    sched.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduling_gates_hold_pods_until_removed() {
    let (_s, c) = server().await;
    node(&c, "n1", "4", "8Gi", json!({})).await;
    let sched = SchedulerBuilder::new(c.clone()).start().unwrap();
    pod(
        &c,
        "gated",
        "100m",
        "64Mi",
        json!({"spec": {"schedulingGates": [{"name": "example.com/wait"}]}}),
    )
    .await;
    assert_eq!(
        node_after(&c, "gated", Duration::from_millis(500)).await,
        None
    );
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(c.clone(), "default");
    let p = api.get("gated").await.unwrap();
    let conds = p.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        !conds
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False"),
        "gated pods get no Unschedulable condition: {conds:?}"
    );
    api.patch(
        "gated",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"spec": {"schedulingGates": null}})),
    )
    .await
    .unwrap();
    assert_eq!(bound(&c, "gated").await, "n1");
    sched.stop().await;
}
