//! Field selectors as the real `kubectl` uses them: a boolean or integer
//! field an object does not set reads as kube's Go zero value (`false`,
//! `0`), a missing string as "", and each kind accepts exactly kube's
//! field labels.

use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use kubeforge_apiserver::ApiServer;
use serde_json::json;

/// A scratch directory for kubectl's discovery cache, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "kubeforge-field-selectors-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run kubectl against `server`; (success, stdout, stderr).
async fn kubectl(server: &str, cache: &Scratch, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new("kubectl");
    cmd.env("KUBECONFIG", "/dev/null")
        .arg(format!("--server={server}"))
        .arg(format!("--cache-dir={}", cache.0.display()))
        .args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn names(out: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.rsplit('/').next().unwrap_or(l).to_string())
        .collect();
    v.sort();
    v
}

async fn serve(server: &ApiServer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_booleans_and_integers_read_as_go_zero_values_in_kubectl() {
    let server = ApiServer::in_memory().await;
    let url = serve(&server).await;
    let cache = Scratch::new();
    let client = server.client();
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, spec) in [
        ("plain", json!({})),
        ("cordoned", json!({"unschedulable": true})),
        ("open", json!({"unschedulable": false})),
    ] {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
    }
    let (ok, out, err) = kubectl(
        &url,
        &cache,
        &[
            "get",
            "nodes",
            "--field-selector",
            "spec.unschedulable=false",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(names(&out), ["open", "plain"]);
    let (ok, out, err) = kubectl(
        &url,
        &cache,
        &[
            "get",
            "nodes",
            "--field-selector",
            "spec.unschedulable!=false",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(names(&out), ["cordoned"]);
    // Nodes have no metadata.namespace field label.
    let (ok, _, err) = kubectl(
        &url,
        &cache,
        &["get", "nodes", "--field-selector", "metadata.namespace=x"],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("field label not supported: metadata.namespace"),
        "{err}"
    );

    // Pods: spec.hostNetwork unset is false.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for (name, host) in [("a", None), ("b", Some(true))] {
        let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
        if let Some(h) = host {
            spec["hostNetwork"] = json!(h);
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    let (ok, out, err) = kubectl(
        &url,
        &cache,
        &[
            "get",
            "pods",
            "--field-selector",
            "spec.hostNetwork=false",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(names(&out), ["a"]);

    // Services: spec.type and spec.clusterIP are field labels.
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}]}
    }))
    .expect("svc");
    svcs.create(&PostParams::default(), &svc)
        .await
        .expect("create svc");
    let (ok, out, err) = kubectl(
        &url,
        &cache,
        &[
            "get",
            "svc",
            "--field-selector",
            "spec.type=ClusterIP",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(names(&out), ["web"]);

    // ReplicaSets: status.replicas unset is 0.
    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .expect("rs");
    rss.create(&PostParams::default(), &rs)
        .await
        .expect("create rs");
    let got = rss
        .list(&ListParams::default().fields("status.replicas=0"))
        .await
        .expect("list");
    assert_eq!(got.items.len(), 1);

    // Namespaces: status.phase and metadata.name only.
    let ns: Api<Namespace> = Api::all(client);
    let active = ns
        .list(&ListParams::default().fields("status.phase=Active,metadata.name=default"))
        .await
        .expect("list ns");
    assert_eq!(active.items.len(), 1);
    let (ok, _, err) = kubectl(
        &url,
        &cache,
        &["get", "ns", "--field-selector", "metadata.namespace="],
    )
    .await;
    assert!(!ok);
    assert!(err.contains("field label not supported"), "{err}");
}
