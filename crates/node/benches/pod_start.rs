//! Pod start-up on a container node: bound → Running latency for a busybox
//! `sleep` pod whose image is present (one at a time), and 100 pods on one
//! node started at once (time until all Running, and memory per pod).
//! Needs root and the packages of scripts/test-all.sh.
//!
//! ```sh
//! CARGO_TARGET_DIR=/work/bench-target cargo bench -p kubeforge-node --bench pod_start
//! ```

#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use kubeforge_node::AgentConfig;
use kubeforge_node::local::Runtimes;
use kubeforge_testenv::TestEnv;
use serde_json::json;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "bench-0", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}))
    .unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn wait_all(running: &Arc<Mutex<HashMap<String, Instant>>>, names: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if names
            .iter()
            .all(|n| running.lock().unwrap().contains_key(n))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pods did not all run within 120s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn delete_all(pods: &Api<Pod>, names: &[String]) {
    for n in names {
        let _ = pods
            .delete(n, &DeleteParams::default().grace_period(0))
            .await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .is_empty()
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test` runs bench targets without --bench: nothing to do.
    }
    let dir = PathBuf::from(format!("/tmp/kf-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let lock = kubeforge_node::footprint::DirLock::acquire(&dir).unwrap();
    let runtimes = Runtimes::start(&lock, 1, |_| "bench-0".to_string())
        .await
        .unwrap();
    let env = TestEnv::builder().start().await.unwrap();
    let client = env.client();
    let mut cfg = AgentConfig::new("bench-0", runtimes.runtime(0).socket(), dir.join("agent"));
    cfg.cgroup_parent = runtimes.cgroup_parent().to_string();
    let agent = kubeforge_node::start(client.clone(), cfg).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // When each pod is first seen Running.
    let running: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = running.clone();
    let watch_api = pods.clone();
    tokio::spawn(async move {
        let mut w = watcher::watcher(watch_api, watcher::Config::default()).boxed();
        while let Some(Ok(ev)) = w.next().await {
            if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = ev
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            {
                seen.lock()
                    .unwrap()
                    .entry(p.metadata.name.clone().unwrap())
                    .or_insert_with(Instant::now);
            }
        }
    });

    // Warm-up: the image is pulled once.
    pods.create(&PostParams::default(), &pod("warm"))
        .await
        .unwrap();
    wait_all(&running, &["warm".to_string()]).await;
    delete_all(&pods, &["warm".to_string()]).await;

    // One at a time: bound → Running.
    let n = 40;
    let mut lat = Vec::new();
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("seq-{i}");
        let t0 = Instant::now();
        pods.create(&PostParams::default(), &pod(&name))
            .await
            .unwrap();
        wait_all(&running, std::slice::from_ref(&name)).await;
        lat.push(running.lock().unwrap()[&name] - t0);
        names.push(name);
    }
    lat.sort();
    println!(
        "bound → Running, one at a time ({n} pods): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().unwrap().as_secs_f64() * 1e3
    );
    delete_all(&pods, &names).await;

    // 100 at once on the one node.
    let before = rss_kib();
    let names: Vec<String> = (0..100).map(|i| format!("burst-{i}")).collect();
    let t0 = Instant::now();
    for name in &names {
        pods.create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    wait_all(&running, &names).await;
    let all = t0.elapsed();
    let after = rss_kib();
    println!(
        "100 pods on one node: all Running after {:.2} s; process RSS +{} KiB ({:.0} KiB per pod: agent, API server and store together)",
        all.as_secs_f64(),
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / 100.0
    );
    delete_all(&pods, &names).await;

    agent.stop_and_remove_pods().await;
    env.stop().await;
    runtimes.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
