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
    tokio::time::sleep(Duration::from_millis(200)).await; // classes seen
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
    let msg = unschedulable_message(&c, "polite").await;
    assert!(
        msg.contains("preemption: not eligible due to preemptionPolicy=Never."),
        "{msg}"
    );
    let api: Api<Pod> = Api::namespaced(c.clone(), "default");
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
