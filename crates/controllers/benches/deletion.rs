//! Deletion benchmarks for the targets, on an in-process server
//! (memory store) with the built-in controllers running (run with
//! `cargo bench -p kubeforge-controllers --bench deletion`):
//!
//! - `cascade`: an owner with 10,000 dependent pods deleted with
//!   propagationPolicy Background: time from the DELETE to the last
//!   dependent gone (target ≤ 2 s); the same with Foreground, until the
//!   owner itself is gone;
//! - `namespace`: a namespace with 50,000 objects (25,000 configmaps and
//!   25,000 pods) deleted: time from the DELETE to the namespace gone
//!   (target ≤ 10 s);
//! - `namespace-durable` (not run by default): the same with 10,000
//!   objects on the durable store (fsync on).
//!
//! Pass scenario names to run a subset.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kubeforge_apiserver::ApiServer;
use kubeforge_controllers::Builtin;
use serde_json::{Value, json};

async fn start() -> (ApiServer, Client, Builtin) {
    start_on(ApiServer::in_memory().await).await
}

async fn start_on(server: ApiServer) -> (ApiServer, Client, Builtin) {
    server.set_controllers_running(true);
    let client = server.client();
    let controllers = kubeforge_controllers::start_builtin(client.clone());
    controllers.wait_synced().await;
    (server, client, controllers)
}

fn pod(name: &str, owners: &Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}, "ownerReferences": owners},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    }))
    .expect("pod")
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "data": {"key": "value", "other": "a somewhat longer value to make it realistic"}
    }))
    .expect("configmap")
}

async fn create_pods(client: &Client, ns: &str, prefix: &str, n: usize, owners: Value) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let p = pod(&format!("{prefix}-{i}"), &owners);
            async move {
                api.create(&PostParams::default(), &p)
                    .await
                    .expect("create pod")
            }
        })
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
}

async fn create_configmaps(client: &Client, ns: &str, n: usize) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let c = configmap(&format!("cm-{i}"));
            async move {
                api.create(&PostParams::default(), &c)
                    .await
                    .expect("create cm")
            }
        })
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
}

/// Wait until the garbage collector's graph holds at least `n` nodes.
async fn graph_holds(b: &Builtin, n: usize) {
    while b.gc().stats().nodes < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn until(mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(start.elapsed() < Duration::from_secs(120), "timed out");
    }
    start.elapsed()
}

async fn cascade(policy: &str) -> (Duration, Duration) {
    const N: usize = 10_000;
    let (server, client, controllers) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &configmap("owner"))
        .await
        .expect("owner");
    let uid = owner.metadata.uid.clone().expect("uid");
    let owners = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid,
                         "blockOwnerDeletion": true, "controller": true}]);
    let created = Instant::now();
    create_pods(&client, "default", "dep", N, owners).await;
    let create_time = created.elapsed();
    graph_holds(&controllers, N + 1).await;
    eprintln!(
        "  created {N} dependents in {:.2} s; graph holds them",
        create_time.as_secs_f64()
    );
    let store = server.store().clone();
    let dp = if policy == "Foreground" {
        DeleteParams::foreground()
    } else {
        DeleteParams::background()
    };
    let start = Instant::now();
    cms.delete("owner", &dp).await.expect("delete owner");
    let deps = until(|| store.count("/registry/core/pods/default/") == 0).await;
    let owner_gone = until(|| {
        store
            .get("/registry/core/configmaps/default/owner")
            .is_none()
    })
    .await;
    let total = start.elapsed();
    let stats = controllers.gc().stats();
    eprintln!(
        "  {policy}: last dependent gone {:.3} s after the DELETE, owner gone at {:.3} s (collector deleted {}, patched {})",
        deps.as_secs_f64(),
        total.as_secs_f64().max(owner_gone.as_secs_f64()),
        stats.deleted,
        stats.patched
    );
    controllers.stop().await;
    (deps, total)
}

async fn namespace(half: usize, durable: Option<&std::path::Path>) -> Duration {
    let server = match durable {
        Some(dir) => {
            let opts = kubeforge_store::DurableOptions::default();
            let store = kubeforge_store::Store::open(dir, opts)
                .await
                .expect("durable store");
            ApiServer::new(store).await.expect("server")
        }
        None => ApiServer::in_memory().await,
    };
    let (server, client, controllers) = start_on(server).await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "bench"}})).expect("namespace");
    nss.create(&PostParams::default(), &ns).await.expect("ns");
    let created = Instant::now();
    create_configmaps(&client, "bench", half).await;
    create_pods(&client, "bench", "pod", half, json!([])).await;
    eprintln!(
        "  created {} objects in {:.2} s",
        2 * half,
        created.elapsed().as_secs_f64()
    );
    graph_holds(&controllers, 2 * half).await;
    let store = server.store().clone();
    let start = Instant::now();
    nss.delete("bench", &DeleteParams::default())
        .await
        .expect("delete ns");
    let marked = start.elapsed();
    let emptied = until(|| {
        store.count("/registry/core/pods/bench/") == 0
            && store.count("/registry/core/configmaps/bench/") == 0
    })
    .await;
    let gone = until(|| store.get("/registry/core/namespaces/bench").is_none()).await;
    let total = start.elapsed();
    eprintln!(
        "  namespace: DELETE answered in {:.3} s, emptied at {:.3} s, gone at {:.3} s",
        marked.as_secs_f64(),
        (marked + emptied).as_secs_f64(),
        total.as_secs_f64().max(gone.as_secs_f64())
    );
    controllers.stop().await;
    total
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want =
        |s: &str| (args.is_empty() && s != "namespace-durable") || args.iter().any(|a| a == s);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if want("cascade") {
            eprintln!("cascade: owner with 10,000 dependents (in-process, memory store)");
            let (bg, _) = cascade("Background").await;
            let (_, fg) = cascade("Foreground").await;
            println!(
                "cascade/background: {:.3} s (target <= 2 s) {}",
                bg.as_secs_f64(),
                if bg <= Duration::from_secs(2) {
                    "OK"
                } else {
                    "MISSED"
                }
            );
            println!("cascade/foreground (owner gone): {:.3} s", fg.as_secs_f64());
        }
        if want("namespace") {
            eprintln!("namespace: 50,000 objects (in-process, memory store)");
            let t = namespace(25_000, None).await;
            println!(
                "namespace/50000: {:.3} s (target <= 10 s) {}",
                t.as_secs_f64(),
                if t <= Duration::from_secs(10) {
                    "OK"
                } else {
                    "MISSED"
                }
            );
        }
        if want("namespace-durable") {
            eprintln!("namespace: 10,000 objects (in-process, durable store with fsync)");
            let dir =
                std::env::temp_dir().join(format!("kubeforge-bench-ns-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let t = namespace(5_000, Some(&dir)).await;
            let _ = std::fs::remove_dir_all(&dir);
            println!("namespace-durable/10000: {:.3} s", t.as_secs_f64());
        }
    });
}
