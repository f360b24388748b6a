//! EndpointSlices and Endpoints follow pod readiness for a Service's
//! selector, with named target ports resolved.

mod workloads_common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use workloads_common::*;

const T: Duration = Duration::from_secs(30);

async fn slice_state(api: &Api<EndpointSlice>) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = api
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .expect("list")
        .items
        .into_iter()
        .flat_map(|s| s.endpoints)
        .map(|e| {
            (
                e.addresses[0].clone(),
                e.conditions.and_then(|c| c.ready).unwrap_or(false),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_and_endpoints_follow_readiness() {
    let env = start().await;
    let svc: Service = obj(json!({"metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}}));
    Api::<Service>::default_namespaced(env.client.clone())
        .create(&PostParams::default(), &svc)
        .await
        .expect("svc");
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    for (i, name) in ["a", "b"].iter().enumerate() {
        let p: Pod = obj(json!({"metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx", "ports": [{"name": "web", "containerPort": 8080}]}]}}));
        pods.create(&PostParams::default(), &p).await.expect("pod");
        let fate = if i == 0 { Fate::Ready } else { Fate::NotReady };
        set_pod_status(
            &env.client,
            "default",
            name,
            fate,
            &format!("10.1.0.{}", i + 1),
        )
        .await;
    }
    // A pod that does not match.
    let other: Pod = obj(
        json!({"metadata": {"name": "other", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
    );
    pods.create(&PostParams::default(), &other)
        .await
        .expect("pod");
    set_pod_status(&env.client, "default", "other", Fate::Ready, "10.1.0.9").await;

    let slices: Api<EndpointSlice> = Api::default_namespaced(env.client.clone());
    eventually("slice lists a ready and b not ready", T, || async {
        slice_state(&slices).await == vec![("10.1.0.1".into(), true), ("10.1.0.2".into(), false)]
    })
    .await;
    let list = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .expect("list")
        .items;
    let s = &list[0];
    assert_eq!(s.address_type, "IPv4");
    let ports = s.ports.clone().expect("ports");
    assert_eq!(
        (ports[0].name.as_deref(), ports[0].port),
        (Some("http"), Some(8080)),
        "named targetPort resolved"
    );
    assert!(
        s.metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o.iter().any(|r| r.kind == "Service" && r.name == "web"))
    );

    let eps: Api<Endpoints> = Api::default_namespaced(env.client.clone());
    eventually("Endpoints: a ready, b not ready", T, || async {
        let Some(e) = eps.get_opt("web").await.expect("get") else {
            return false;
        };
        let ss = e.subsets.unwrap_or_default();
        ss.len() == 1
            && ss[0]
                .addresses
                .as_ref()
                .is_some_and(|a| a.len() == 1 && a[0].ip == "10.1.0.1")
            && ss[0]
                .not_ready_addresses
                .as_ref()
                .is_some_and(|a| a.len() == 1 && a[0].ip == "10.1.0.2")
    })
    .await;

    // b turns ready, a goes away.
    set_pod_status(&env.client, "default", "b", Fate::Ready, "10.1.0.2").await;
    pods.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("slice follows", T, || async {
        slice_state(&slices).await == vec![("10.1.0.2".into(), true)]
    })
    .await;
    eventually("Endpoints follow", T, || async {
        let e = eps.get("web").await.expect("get");
        let ss = e.subsets.unwrap_or_default();
        ss.len() == 1
            && ss[0]
                .addresses
                .as_ref()
                .is_some_and(|a| a.len() == 1 && a[0].ip == "10.1.0.2")
            && ss[0].not_ready_addresses.is_none()
    })
    .await;
    env.stop().await;
}
