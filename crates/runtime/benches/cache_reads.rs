//! What reading the Manager's shared Pod cache costs, per object, with the
//! cache typed (`compact_cache(false)`) and compact (the default).
//!
//! N typical pods (the `cache_memory` bench's: a Deployment's running pod,
//! 6.8 KB of JSON as served, 3.6 KB once pruned) are created on the embedded
//! server and a Manager syncs its Pod cache. Then, over all N pods, best of
//! five rounds (wall time, so preemption on a loaded machine mostly drops
//! out): a `get` of every pod while nothing is decoded (with the compact
//! cache, a decode each), again while those objects are held (shared), a
//! whole `state()` after a trim, and `keys()`, which never decodes. The
//! system allocator is used.
//!
//! `CARGO_TARGET_DIR=/work/bench-target cargo bench -p kubeforge-runtime --bench cache_reads -- 2000`
//! (the argument is N; the default is 2000).

use std::cell::RefCell;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kubeforge_apiserver::ApiServer;
use kubeforge_runtime::{Cache, Manager};

#[path = "common/pods.rs"]
mod pods;

/// ns per object of `f` over `n` objects: best of five rounds, each after
/// `reset`.
fn per_object(n: usize, mut reset: impl FnMut(), mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        reset();
        let t = std::time::Instant::now();
        f();
        best = best.min(t.elapsed().as_nanos() as f64);
    }
    best / n.max(1) as f64
}

fn read_costs(cache: &Cache<Pod>) -> [f64; 4] {
    let keys = cache.keys();
    let n = keys.len();
    let held = RefCell::new(Vec::with_capacity(n));
    let cold = per_object(
        n,
        || {
            held.borrow_mut().clear();
            cache.trim();
        },
        || {
            let mut h = held.borrow_mut();
            for k in &keys {
                h.push(cache.get(k));
            }
        },
    );
    assert!(held.borrow().iter().all(Option::is_some));
    let shared = per_object(
        n,
        || {},
        || {
            for k in &keys {
                std::hint::black_box(cache.get(k));
            }
        },
    );
    held.borrow_mut().clear();
    let state = per_object(
        n,
        || cache.trim(),
        || {
            std::hint::black_box(cache.state());
        },
    );
    cache.trim();
    let list_keys = per_object(
        n,
        || {},
        || {
            std::hint::black_box(cache.keys());
        },
    );
    [cold, shared, state, list_keys]
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let server = ApiServer::in_memory().await;
        let client = server.client();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let json = pods::create_typical_pods(&pods, n).await;
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "cache_reads: {n} typical pods ({json} B of JSON as served), best of 5 rounds; load {}",
            load.trim()
        );
        for compact in [false, true] {
            let mgr = Manager::builder(client.clone())
                .handle_signals(false)
                .compact_cache(compact)
                .build();
            let cache = mgr.store::<Pod>();
            let stop = mgr.shutdown_handle();
            let run = tokio::spawn(mgr.run());
            cache.wait_until_ready().await.expect("cache ready");
            assert_eq!(cache.len(), n);
            let [cold, shared, state, keys] = read_costs(&cache);
            println!(
                "  {:<7} get cold {:>8.0} ns | get shared {:>5.0} ns | state() {:>8.0} ns/object | keys() {:>4.0} ns/object",
                if compact { "compact" } else { "typed" },
                cold,
                shared,
                state,
                keys
            );
            stop.shutdown();
            let _ = run.await;
        }
    });
}
