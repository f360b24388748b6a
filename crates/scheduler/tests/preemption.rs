//! Priority and preemption: PriorityClass resolution, victims chosen by
//! kube-scheduler's rules and deleted, nominatedNodeName, `Never`.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kubeforge_scheduler::SchedulerBuilder;
use serde_json::json;

async fn priority_class(c: &kube::Client, name: &str, value: i32, never: bool) {
    let pc: k8s_openapi::api::scheduling::v1::PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": name}, "value": value,
        "preemptionPolicy": if never { "Never" } else { "PreemptLowerPriority" }
    }))
    .unwrap();
    Api::all(c.clone())
        .create(&PostParams::default(), &pc)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_priority_pod_preempts_the_cheapest_victims() {
    let (_s, c) = server().await;
    priority_class(&c, "low", 10, false).await;
    priority_class(&c, "mid", 100, false).await;
    priority_class(&c, "high", 1000, false).await;
    priority_class(&c, "high-never", 1000, true).await;
    node(&c, "n1", "2", "4Gi", json!({})).await;
    node(&c, "n2", "2", "4Gi", json!({})).await;
    let sched = SchedulerBuilder::new(c.clone()).start().unwrap();
    // n1 holds a mid-priority pod, n2 a low-priority one: the low one goes
    pod(
        &c,
        "mid-pod",
        "1500m",
        "1Gi",
        json!({"spec": {"priorityClassName": "mid", "nodeName": "n1"}}),
    )
    .await;
    pod(
        &c,
        "low-pod",
        "1500m",
        "1Gi",
        json!({"spec": {"priorityClassName": "low", "nodeName": "n2"}}),
    )
    .await;
    // a pod that may not preempt waits
    pod(
        &c,
        "polite",
        "1500m",
        "1Gi",
        json!({"spec": {"priorityClassName": "high-never"}}),
    )
    .await;
    // The scheduler's PriorityClass watch may lag behind its pod watch: a pod
    // seen before its class is refused ("no PriorityClass with name …") and
    // retried once the class arrives; wait for the refusal this test is about.
    unschedulable_for(
        &c,
        "polite",
        "preemption: not eligible due to preemptionPolicy=Never.",
    )
    .await;
    let api: Api<Pod> = Api::namespaced(c.clone(), "default");
    assert!(
        api.get("polite")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.node_name)
            .is_none(),
        "polite was bound"
    );
    api.delete("polite", &Default::default()).await.unwrap();
    pod(
        &c,
        "urgent",
        "1500m",
        "1Gi",
        json!({"spec": {"priorityClassName": "high"}}),
    )
    .await;
    assert_eq!(bound(&c, "urgent").await, "n2");
    assert!(
        api.get_opt("low-pod").await.unwrap().is_none(),
        "the low-priority victim is deleted"
    );
    assert!(
        api.get_opt("mid-pod").await.unwrap().is_some(),
        "the mid-priority pod stays"
    );
    let p = api.get("urgent").await.unwrap();
    assert_eq!(
        p.spec.unwrap().priority,
        Some(1000),
        "the API server's Priority admission set spec.priority from the class"
    );
    sched.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_priority_class_is_refused_then_scheduled_once_created() {
    let (_s, c) = server().await;
    node(&c, "n1", "2", "4Gi", json!({})).await;
    let sched = SchedulerBuilder::new(c.clone()).start().unwrap();
    let typo: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "typo"},
        "spec": {"priorityClassName": "hihg", "containers": [{"name": "c", "image": "nginx"}]}
    }))
    .unwrap();
    let api: Api<Pod> = Api::namespaced(c.clone(), "default");
    // As on kube-apiserver, the Priority admission plugin refuses the pod.
    let err = api
        .create(&Default::default(), &typo)
        .await
        .expect_err("unknown class");
    let kube::Error::Api(s) = err else {
        panic!("not an API error")
    };
    assert_eq!(s.code, 403);
    assert!(
        s.message
            .contains("no PriorityClass with name hihg was found"),
        "{}",
        s.message
    );
    // creating the class lets it through, with the class's priority
    priority_class(&c, "hihg", 5, false).await;
    pod(
        &c,
        "typo",
        "100m",
        "64Mi",
        json!({"spec": {"priorityClassName": "hihg"}}),
    )
    .await;
    assert_eq!(bound(&c, "typo").await, "n1");
    assert_eq!(
        api.get("typo").await.unwrap().spec.unwrap().priority,
        Some(5)
    );
    sched.stop().await;
}

/// The message of the pod's PodScheduled=False condition once it contains
/// `want` (the pod was retried and refused for that reason).
async fn unschedulable_for(c: &kube::Client, name: &str, want: &str) -> String {
    let api: Api<Pod> = Api::namespaced(c.clone(), "default");
    let start = std::time::Instant::now();
    loop {
        let p = api.get(name).await.unwrap();
        let msg = p
            .status
            .and_then(|s| s.conditions)
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.message)
            .unwrap_or_default();
        if msg.contains(want) {
            return msg;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "pod {name} was not refused with {want:?}; last message {msg:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemptor_waits_for_its_victims_instead_of_preempting_again() {
    let (s, c) = server().await;
    // bound pods terminate gracefully, and no kubelet finishes them: a
    // victim stays terminating until the test removes it
    s.set_graceful_pod_deletion(true);
    priority_class(&c, "low", 1, false).await;
    priority_class(&c, "high", 100, false).await;
    priority_class(&c, "top", 1000, false).await;
    node(&c, "n1", "2", "4Gi", json!({})).await;
    node(&c, "n2", "2", "4Gi", json!({})).await;
    let low = |n: &str| json!({"spec": {"priorityClassName": "low", "nodeName": n}});
    pod(&c, "low-1", "2", "1Gi", low("n1")).await;
    pod(
        &c,
        "top",
        "1",
        "1Gi",
        json!({"spec": {"priorityClassName": "top", "nodeName": "n2"}}),
    )
    .await;
    pod(&c, "low-2", "1", "1Gi", low("n2")).await;
    let sched = SchedulerBuilder::new(c.clone()).start().unwrap();
    // If the scheduler sees the preemptor before the class "high", it refuses
    // it and retries once the class arrives: the waits below poll.
    // only n1 can be freed for the preemptor: low-1 is its victim
    pod(
        &c,
        "urgent",
        "2",
        "1Gi",
        json!({"spec": {"priorityClassName": "high"}}),
    )
    .await;
    let api: Api<Pod> = Api::namespaced(c.clone(), "default");
    let start = std::time::Instant::now();
    let victim = loop {
        let v = api.get("low-1").await.unwrap();
        if v.metadata.deletion_timestamp.is_some() {
            break v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "low-1 was not preempted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mark = victim
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("the victim is marked before its deletion");
    assert_eq!(
        (
            mark.status.as_str(),
            mark.reason.as_deref(),
            mark.message.as_deref()
        ),
        (
            "True",
            Some("PreemptionByScheduler"),
            Some("default-scheduler: preempting to accommodate a higher priority pod")
        )
    );
    // removing the top pod makes n2 a candidate too (low-2 would be a newer,
    // so preferred, victim) and wakes the preemptor; it must wait for low-1
    // rather than evict low-2 as well
    api.delete("top", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    unschedulable_for(
        &c,
        "urgent",
        "not eligible due to a terminating pod on the nominated node",
    )
    .await;
    let other = api.get("low-2").await.unwrap();
    assert!(
        other.metadata.deletion_timestamp.is_none(),
        "a second victim was evicted while the first was terminating"
    );
    assert_eq!(
        api.get("urgent")
            .await
            .unwrap()
            .status
            .and_then(|s| s.nominated_node_name)
            .as_deref(),
        Some("n1")
    );
    // the victim finishes: the preemptor lands on its nominated node
    api.delete("low-1", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(bound(&c, "urgent").await, "n1");
    let other = api.get("low-2").await.unwrap();
    assert!(other.metadata.deletion_timestamp.is_none());
    sched.stop().await;
}
