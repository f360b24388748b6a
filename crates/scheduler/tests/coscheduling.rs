//! Gang scheduling: a PodGroup's members are bound all together once
//! `minMember` of them fit, or none is.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeforge_scheduler::{SchedulerBuilder, SchedulerConfiguration};
use serde_json::json;

async fn install_podgroup_crd(c: &kube::Client) {
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(json!({
            "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
            "spec": {"group": "scheduling.x-k8s.io", "scope": "Namespaced",
                "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "shortNames": ["pg"]},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
        }))
        .unwrap();
    Api::all(c.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
}

async fn pod_group(c: &kube::Client, name: &str, min: u32, timeout: u32) {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup"),
        "podgroups",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &ar);
    let mut o = DynamicObject::new(name, &ar).within("default");
    o.data = json!({"spec": {"minMember": min, "scheduleTimeoutSeconds": timeout}});
    api.create(&PostParams::default(), &o).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_of_four_all_or_nothing() {
    let (_s, c) = server().await;
    install_podgroup_crd(&c).await;
    for i in 0..4 {
        node(&c, &format!("n{i}"), "2", "4Gi", json!({})).await;
    }
    pod_group(&c, "train", 4, 30).await;
    pod_group(&c, "short", 3, 1).await;
    let cfg = SchedulerConfiguration::from_yaml(
        "profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: Coscheduling}]\n",
    )
    .unwrap();
    let sched = SchedulerBuilder::new(c.clone())
        .config(cfg)
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // PodGroups seen
    let member = |g: &str| json!({"metadata": {"labels": {"scheduling.x-k8s.io/pod-group": g}}});
    // 3 of 4 members: they wait at Permit, none is bound
    for i in 0..3 {
        pod(&c, &format!("train-{i}"), "1", "1Gi", member("train")).await;
    }
    for i in 0..3 {
        assert_eq!(
            node_after(&c, &format!("train-{i}"), Duration::from_millis(100)).await,
            None,
            "bound before the gang was complete"
        );
    }
    // the 4th completes the gang: all four are bound
    pod(&c, "train-3", "1", "1Gi", member("train")).await;
    for i in 0..4 {
        bound(&c, &format!("train-{i}")).await;
    }
    // a gang that cannot complete times out and binds nobody
    for i in 0..2 {
        pod(&c, &format!("short-{i}"), "100m", "64Mi", member("short")).await;
    }
    for i in 0..2 {
        assert_eq!(
            node_after(&c, &format!("short-{i}"), Duration::from_millis(800)).await,
            None
        );
    }
    // the timeout is reported (events are written asynchronously) on the
    // member whose wait ran out first — the other is rejected with it as
    // "another member … was rejected". Which one that is depends on which
    // reached Permit first, and stays so across retries (both then back off
    // alike), so either may carry it.
    let start = std::time::Instant::now();
    loop {
        let mut evs = events(&c, "short-0").await;
        evs.extend(events(&c, "short-1").await);
        if evs
            .iter()
            .any(|(r, n)| r == "FailedScheduling" && n.contains("timeout"))
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{evs:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(node_after(&c, "short-1", Duration::ZERO).await, None);
    sched.stop().await;
}
