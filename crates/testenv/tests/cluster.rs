//! A whole cluster in a test: `.controllers().scheduler().nodes(n)` makes
//! Deployments roll out onto simulated nodes, as an operator's tests need.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kubeforge_controllers::nodesim::Delays;
use kubeforge_testenv::TestEnv;

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_rolls_out_onto_simulated_nodes() {
    let env = TestEnv::builder()
        .controllers()
        .scheduler()
        .nodes(2)
        .node_delays(Delays::zero())
        .start()
        .await
        .expect("start");
    let nodes: Api<Node> = Api::all(env.client());
    let names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes")
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(names, ["node-0", "node-1"]);
    assert_eq!(env.simulator().map(|s| s.nodes().len()), Some(2));

    let deploy: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx"}]},
            },
        },
    }))
    .expect("deployment");
    let deployments: Api<Deployment> = Api::default_namespaced(env.client());
    deployments
        .create(&PostParams::default(), &deploy)
        .await
        .expect("create");
    eventually("3 available replicas", || async {
        deployments
            .get("web")
            .await
            .ok()
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
            == Some(3)
    })
    .await;
    let pods: Api<Pod> = Api::default_namespaced(env.client());
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("pods");
    assert_eq!(list.items.len(), 3);
    for p in &list.items {
        let status = p.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(
            status
                .pod_ip
                .as_deref()
                .is_some_and(|ip| ip.starts_with("10.64."))
        );
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        assert!(matches!(node, Some("node-0" | "node-1")), "{node:?}");
    }

    // Stopping a node's heartbeats through the API is refused for unknown nodes.
    let sim = env.simulator().expect("simulator");
    assert!(sim.set_heartbeats("node-9", false).is_err());
    sim.set_heartbeats("node-0", false).expect("known node");
    env.stop().await;
}
