//! 10,000 Memcacheds created at once reach a reconciled state (finalizer
//! on, Deployment created, status written) on TestEnv with the operator's
//! default options. Prints the time from the first create to the last
//! reconciled object, and reconciles/s from the runtime's metrics.
//!
//! `CARGO_TARGET_DIR=/work/bench-target cargo bench -p memcached-operator --bench memcached`
//! (`MEMCACHED_BENCH_N` changes the count, `MEMCACHED_BENCH_CONCURRENCY`
//! the operator's max concurrent reconciles, `MEMCACHED_BENCH_TYPED_CACHE=1`
//! keeps the Manager's caches decoded rather than compact.)

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};
use kubeforge_runtime::Manager;
use kubeforge_testenv::TestEnv;
use memcached_operator::api::cache::v1alpha1::Memcached;
use memcached_operator::controllers::memcached::{self as controller, FINALIZER, Options};

const NS: &str = "bench";

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn reconciles(metrics: &kubeforge_runtime::metrics::Metrics) -> (u64, u64) {
    let text = metrics.encode();
    let mut ok = 0.0;
    let mut all = 0.0;
    for l in text.lines() {
        if l.starts_with("controller_runtime_reconcile_total{")
            && l.contains("controller=\"memcached\"")
        {
            let v: f64 = l
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            all += v;
            if l.contains("result=\"success\"") || l.contains("result=\"requeue_after\"") {
                ok += v;
            }
        }
    }
    (ok as u64, all as u64)
}

async fn reconciled(mcs: &Api<Memcached>, deps: &Api<Deployment>) -> (usize, usize) {
    let lp = ListParams::default();
    let done = mcs
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|m| {
                    m.metadata
                        .finalizers
                        .iter()
                        .flatten()
                        .any(|f| f == FINALIZER)
                        && m.status
                            .as_ref()
                            .and_then(|s| s.observed_generation)
                            .is_some()
                })
                .count()
        })
        .unwrap_or(0);
    let deployments = deps.list(&lp).await.map(|l| l.items.len()).unwrap_or(0);
    (done, deployments)
}

fn main() {
    let n = env_num("MEMCACHED_BENCH_N", 10_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let crd_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/crd/bases");
        let env = TestEnv::builder()
            .crds_from_dir(crd_dir)
            .start()
            .await
            .expect("TestEnv");
        let client = env.client();
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": NS}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let mut options = Options {
            image: "example.test/memcached:1".into(),
            ..Options::default()
        };
        if let Ok(c) = std::env::var("MEMCACHED_BENCH_CONCURRENCY") {
            options.max_concurrent_reconciles = c.parse().expect("a number");
        }
        let concurrency = options.max_concurrent_reconciles;
        // MEMCACHED_BENCH_TYPED_CACHE=1: objects kept decoded in the
        // caches instead of the default compact JSON (for comparison).
        let typed = std::env::var("MEMCACHED_BENCH_TYPED_CACHE").is_ok_and(|v| v == "1");
        let mgr = Manager::builder(client.clone())
            .handle_signals(false)
            .compact_cache(!typed)
            .build();
        controller::register_with(&mgr, options);
        let metrics = mgr.metrics();
        let shutdown = mgr.shutdown_handle();
        let running = tokio::spawn(mgr.run());
        // Let the caches sync on an empty namespace first.
        tokio::time::sleep(Duration::from_millis(200)).await;

        let mcs: Api<Memcached> = Api::namespaced(client.clone(), NS);
        let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
        let start = Instant::now();
        stream::iter(0..n)
            .for_each_concurrent(64, |i| {
                let mcs = mcs.clone();
                async move {
                    let m = Memcached::with_size(NS, &format!("mc-{i:05}"), (i % 5) as i32 + 1);
                    mcs.create(&PostParams::default(), &m).await.expect("create");
                }
            })
            .await;
        let created = start.elapsed();
        println!(
            "memcached: {n} created in {:.2} s ({:.0} creates/s, 64 concurrent clients)",
            created.as_secs_f64(),
            n as f64 / created.as_secs_f64()
        );
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let (done, deployments) = reconciled(&mcs, &deps).await;
            if done >= n && deployments >= n {
                break;
            }
            if Instant::now() > deadline {
                println!("memcached: gave up after 600 s: {done} reconciled, {deployments} Deployments");
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let total = start.elapsed();
        let (ok, all) = reconciles(&metrics);
        println!(
            "memcached: {n} reconciled (finalizer, Deployment, status) in {:.2} s from the first create; \
             {all} reconciles ({ok} successful) = {:.0} reconciles/s; max_concurrent_reconciles {concurrency}",
            total.as_secs_f64(),
            all as f64 / total.as_secs_f64()
        );
        shutdown.shutdown();
        let _ = tokio::time::timeout(Duration::from_secs(30), running).await;
        env.stop().await;
    });
}
