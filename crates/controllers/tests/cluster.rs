//! End to end in one process: API server, GC, workload controllers,
//! scheduler and the node simulator (3 nodes, zero delays). A Deployment
//! rolls out onto Running pods with IPs spread over the nodes, a new image
//! rolls out, a Job 5/2 completes on simulated kubelets, a DaemonSet skips a
//! tainted node, a StatefulSet starts db-0..2 in order, and a node whose
//! heartbeats stop turns NotReady, is tainted, and its pods are evicted and
//! rescheduled elsewhere.

mod workloads_common;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubeforge_controllers::nodesim::{Delays, NodeSimulator, SimulatorOptions, config};
use kubeforge_controllers::workloads::{self, WorkloadOptions};
use kubeforge_scheduler::{SchedulerBuilder, SchedulerConfiguration};
use serde_json::json;
use workloads_common::{eventually, obj};

const T: Duration = Duration::from_secs(60);

fn live_running(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect()
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_cluster_rollout_job_and_node_failure() {
    let server = kubeforge_apiserver::ApiServer::in_memory().await;
    server.set_controllers_running(true);
    server.set_graceful_pod_deletion(true);
    let client = server.client();
    let builtin = kubeforge_controllers::start_builtin(client.clone());
    let w = workloads::start(
        client.clone(),
        WorkloadOptions {
            node_monitor_grace_period: Duration::from_secs(1),
            node_monitor_period: Duration::from_millis(200),
            job_backoff_base: Duration::ZERO,
            ..WorkloadOptions::default()
        },
    )
    .await
    .expect("workloads");
    let config = SchedulerConfiguration::from_yaml(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n",
    )
    .expect("config");
    let scheduler = SchedulerBuilder::new(client.clone())
        .config(config)
        .start()
        .expect("scheduler");
    // Zero delays: a Job pod's Running and Succeeded statuses are written
    // back to back, which only works if the simulator keeps their order.
    let delays = Delays::zero();
    let mut opts = SimulatorOptions::new(config::uniform(3).expect("nodes")).delays(delays);
    opts.lease_interval = Duration::from_millis(200);
    let sim = NodeSimulator::start(client.clone(), opts)
        .await
        .expect("simulator");

    // kubectl create deployment web --image=nginx --replicas=3 (+ a short
    // unreachable toleration so eviction happens within the test).
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let d: Deployment = obj(
        json!({"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {
        "replicas": 3, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
            "tolerations": [
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}],
            "containers": [{"name": "nginx", "image": "nginx"}]}}}}),
    );
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let rolled_out = |image: &'static str| {
        let deployments = deployments.clone();
        let pods = pods.clone();
        async move {
            let d = deployments.get("web").await.expect("get");
            let s = d.status.clone().unwrap_or_default();
            let done = d.metadata.generation <= s.observed_generation
                && s.updated_replicas == Some(3)
                && s.replicas == Some(3)
                && s.available_replicas == Some(3);
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .expect("list")
                .items;
            let running = live_running(&list);
            done && running.len() == 3
                && running.iter().all(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.containers[0].image.as_deref())
                        == Some(image)
                })
        }
    };
    eventually("rollout of web", T, || rolled_out("nginx")).await;
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list")
        .items;
    let running = live_running(&list);
    assert!(running.iter().all(|p| {
        p.status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .is_some_and(|ip| !ip.is_empty())
    }));
    let nodes: BTreeSet<String> = running.iter().map(|p| node_of(p)).collect();
    assert!(nodes.len() >= 2, "pods spread over nodes: {nodes:?}");

    // kubectl set image deploy/web nginx=nginx:1.27
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}})))
        .await
        .expect("set image");
    eventually("rollout of nginx:1.27", T, || rolled_out("nginx:1.27")).await;

    // A Job with completions 5 / parallelism 2 completes on the simulator.
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let job: Job = obj(
        json!({"metadata": {"name": "pi"}, "spec": {"completions": 5, "parallelism": 2,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "pi", "image": "perl"}]}}}}),
    );
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("job");
    eventually("job complete", T, || async {
        let j = jobs.get("pi").await.expect("get");
        j.status.is_some_and(|s| {
            s.succeeded == Some(5)
                && s.conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
        })
    })
    .await;

    // A DaemonSet lands one Running pod per node and skips a tainted one.
    node_api_taint(&client, "node-2").await;
    let daemonsets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let ds: DaemonSet = obj(json!({"metadata": {"name": "agent"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "agent"}]}}}}));
    daemonsets
        .create(&PostParams::default(), &ds)
        .await
        .expect("ds");
    eventually("agent Running on node-0 and node-1 only", T, || async {
        let list = pods
            .list(&ListParams::default().labels("app=agent"))
            .await
            .expect("list")
            .items;
        let mut on: Vec<String> = live_running(&list).iter().map(|p| node_of(p)).collect();
        on.sort();
        on == ["node-0", "node-1"] && list.len() == 2
    })
    .await;
    // A StatefulSet creates web-0, web-1, web-2 in order.
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let ss: StatefulSet = obj(json!({"metadata": {"name": "db"}, "spec": {
        "replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "postgres"}]}}}}));
    sets.create(&PostParams::default(), &ss).await.expect("sts");
    eventually("db-0..2 Running", T, || async {
        let list = pods
            .list(&ListParams::default().labels("app=db"))
            .await
            .expect("list")
            .items;
        live_running(&list).len() == 3
    })
    .await;
    let mut created: Vec<(Option<jiff::Timestamp>, String)> = pods
        .list(&ListParams::default().labels("app=db"))
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.creation_timestamp.map(|t| t.0),
                p.metadata.name.unwrap_or_default(),
            )
        })
        .collect();
    created.sort();
    let order: Vec<&str> = created.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(order, ["db-0", "db-1", "db-2"]);
    untaint(&client, "node-2").await;

    // Stop one node's heartbeats: NotReady, tainted, pods rescheduled.
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list")
        .items;
    let victim = node_of(live_running(&list)[0]);
    sim.set_heartbeats(&victim, false).expect("stop heartbeats");
    let node_api: Api<Node> = Api::all(client.clone());
    eventually("node NotReady with the unreachable taint", T, || async {
        let n = node_api.get(&victim).await.expect("node");
        let unknown = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Ready" && c.status == "Unknown")
            });
        unknown
            && n.spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute")
    })
    .await;
    eventually("3 running pods, none on the dead node", T, || async {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .expect("list")
            .items;
        let running = live_running(&list);
        running.len() == 3
            && running.iter().all(|p| node_of(p) != victim)
            && list
                .iter()
                .filter(|p| node_of(p) == victim)
                .all(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;

    // Heartbeats resume: Ready again, the taints go.
    sim.set_heartbeats(&victim, true)
        .expect("resume heartbeats");
    eventually(
        "node Ready again without the unreachable taint",
        T,
        || async {
            let n = node_api.get(&victim).await.expect("node");
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            ready
                && !n
                    .spec
                    .and_then(|s| s.taints)
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t.key == "node.kubernetes.io/unreachable")
        },
    )
    .await;

    sim.stop().await;
    scheduler.stop().await;
    w.stop().await;
    builtin.stop().await;
}

async fn node_api_taint(client: &kube::Client, name: &str) {
    let api: Api<Node> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}})),
    )
    .await
    .expect("taint");
}

async fn untaint(client: &kube::Client, name: &str) {
    let api: Api<Node> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"taints": null}})),
    )
    .await
    .expect("untaint");
}
