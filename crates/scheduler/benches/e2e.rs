//! End to end through the embedded API server in-process: pods created with
//! kube-rs, seen by the scheduler's watch, scheduled, and bound with a
//! `pods/binding` write (plus the `Scheduled` event each). 5000 nodes
//! 4 CPU / 32 Gi / 110 pods; pods request 100m / 500 Mi.
//!
//! `cargo bench -p kubeforge-scheduler --bench e2e [-- <pods>]`
//!
//! The rate is pods / (time from the first create to the last pod bound),
//! with the creates running while the scheduler works: the average of
//! scheduler_perf's per-second `SchedulingThroughput` samples over its
//! measured `createPods` op comes to about the same figure. Also printed: the CPU
//! time per pod of the whole process and of the scheduling thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kubeforge_scheduler::SchedulerBuilder;
use serde_json::json;

// The allocator `kubeforge up` (which embeds this server and scheduler)
// uses, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// CPU time so far (ns, from `/proc/self/task/*/schedstat`) of every
/// thread of this process, and of the scheduling thread alone (named
/// `kubeforge-scheduler`): the figures that depend least on how busy the
/// shared machine is.
fn cpu_ns() -> (u64, u64) {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (0, 0);
    };
    let (mut all, mut sched) = (0, 0);
    for t in dir.filter_map(|t| t.ok()) {
        let Some(ns) = std::fs::read_to_string(t.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        else {
            continue;
        };
        all += ns;
        if std::fs::read_to_string(t.path().join("comm"))
            .is_ok_and(|c| c.trim() == "kubeforge-sched")
        {
            sched += ns;
        }
    }
    (all, sched)
}

fn main() {
    let pods: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(5000, pods));
}

async fn run(nodes: usize, pods: usize) {
    let server = kubeforge_apiserver::ApiServer::in_memory().await;
    let client = server.client();
    let napi: Api<Node> = Api::all(client.clone());
    let t = Instant::now();
    futures::stream::iter(0..nodes)
        .for_each_concurrent(32, |i| {
            let napi = napi.clone();
            async move {
                let name = format!("node-{i}");
                let n: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": format!("zone-{}", i % 10)}},
                    "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}, "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
                }))
                .expect("node");
                let mut created = napi.create(&PostParams::default(), &n).await.expect("create node");
                created.status = n.status;
                napi.replace_status(&name, &PostParams::default(), &created).await.expect("node status");
            }
        })
        .await;
    eprintln!("{nodes} nodes created in {:?}", t.elapsed());
    let sched = SchedulerBuilder::new(client.clone())
        .start()
        .expect("scheduler");
    let metrics = sched.metrics();
    tokio::time::sleep(Duration::from_millis(500)).await; // initial lists
    let papi: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cpu0 = cpu_ns();
    let start = Instant::now();
    let creating = {
        let papi = papi.clone();
        tokio::spawn(async move {
            futures::stream::iter(0..pods)
                .for_each_concurrent(32, |i| {
                    let papi = papi.clone();
                    async move {
                        let p: Pod = serde_json::from_value(json!({
                            "metadata": {"name": format!("pod-{i}")},
                            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]}
                        }))
                        .expect("pod");
                        papi.create(&PostParams::default(), &p).await.expect("create pod");
                    }
                })
                .await;
        })
    };
    let created_at = Arc::new(std::sync::Mutex::new(None));
    {
        let c = created_at.clone();
        let creating = creating;
        tokio::spawn(async move {
            let _ = creating.await;
            *c.lock().expect("lock") = Some(start.elapsed());
        });
    }
    loop {
        let done = metrics.attempts("scheduled") as usize;
        if done >= pods {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "only {done}/{pods} bound after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let el = start.elapsed();
    let cpu1 = cpu_ns();
    let created = created_at.lock().expect("lock").unwrap_or(el);
    // verify through the API that the pods really are bound
    let list = papi.list(&Default::default()).await.expect("list");
    let bound = list
        .items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count();
    let text = metrics.render();
    let count_le = |le: &str| -> f64 {
        text.lines()
            .find(|l| {
                l.starts_with(&format!(
                    "scheduler_scheduling_attempt_duration_seconds_bucket{{le=\"{le}\"}}"
                ))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let total = count_le("+Inf");
    let p = |q: f64| {
        [
            "0.001", "0.002", "0.004", "0.008", "0.016", "0.032", "0.064", "0.128", "0.256",
            "0.512", "1.024", "2.048", "4.096",
        ]
        .into_iter()
        .find(|le| count_le(le) >= q * total)
        .unwrap_or(">4.096")
    };
    let per_pod = |ns: u64| ns as f64 / 1000.0 / pods.max(1) as f64;
    println!(
        "e2e {nodes} nodes, {pods} pods created by kube-rs (32 concurrent, done in {:.2} s) and bound through pods/binding: {:.0} pods/s ({bound} bound per LIST); attempt latency (schedule + bind) p50 ≤ {} s, p99 ≤ {} s; CPU per pod {:.0} µs all threads (clients, API server, scheduler), {:.0} µs on the scheduling thread; load {}",
        created.as_secs_f64(),
        pods as f64 / el.as_secs_f64(),
        p(0.5),
        p(0.99),
        per_pod(cpu1.0.saturating_sub(cpu0.0)),
        per_pod(cpu1.1.saturating_sub(cpu0.1)),
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().map(str::to_string))
            .unwrap_or_default(),
    );
    sched.stop().await;
}
