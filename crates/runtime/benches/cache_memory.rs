//! Memory of the Manager's shared cache per typical pod, measured with dhat.
//!
//! N pods shaped like a Deployment's running pods (owner reference, one
//! container with probes, resources, env and the service account volume,
//! a Running status with five conditions; created by one field manager and
//! status-updated by another, so each carries two managedFields entries) are
//! created on the embedded server; then a dhat heap profiler starts and a
//! Manager syncs its shared Pod cache. Live heap bytes allocated during the
//! sync and still held after it, divided by N, are the cache's cost per pod
//! (the server's own copies were allocated before profiling and are not
//! counted). Two sizes give the slope, which drops fixed costs.
//!
//! Five caches: `Full` (pruning off, objects kept decoded: what a plain
//! kube-runtime `Store` holds), `Pruned` (managedFields and the
//! last-applied annotation dropped, kept decoded: `compact_cache(false)`),
//! `Compact` (the Manager's default: pruned, kept as compact JSON, decoded
//! on read), and the metadata-only caches (`PartialObjectMeta<Pod>`, what
//! `owns_metadata` caches) kept decoded (`MetaTyped`) and compact
//! (`Metadata`, the default).
//!
//! What reads cost is measured by the `cache_reads` bench (without dhat's
//! allocator, which takes a lock per allocation).
//!
//! `CARGO_TARGET_DIR=/work/bench-target cargo bench -p kubeforge-runtime --bench cache_memory -- 2000`
//! (the argument is N; the default is 2000).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kubeforge_apiserver::ApiServer;
use kubeforge_runtime::Manager;

#[path = "common/pods.rs"]
mod pods;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

struct Measure {
    bytes: usize,
    json_bytes: usize,
}

/// What the manager caches.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Full,
    Pruned,
    Compact,
    MetaTyped,
    Metadata,
}

impl Mode {
    fn compact(self) -> bool {
        matches!(self, Mode::Compact | Mode::Metadata)
    }
    fn metadata(self) -> bool {
        matches!(self, Mode::MetaTyped | Mode::Metadata)
    }
}

async fn measure(n: usize, mode: Mode) -> Measure {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let json_bytes = pods::create_typical_pods(&pods, n).await * n;
    let check = pods
        .get(&format!("web-7c9d8f6b5d-{:05}", 0))
        .await
        .expect("get");
    assert!(
        check.metadata.managed_fields.as_ref().map_or(0, Vec::len) >= 2,
        "pods should carry managedFields of two managers"
    );

    // Serve one full LIST first, so whatever the server keeps from serving
    // objects (encoded bytes) is allocated before profiling starts.
    let warm = pods.list(&Default::default()).await.expect("list");
    assert_eq!(warm.items.len(), n);
    drop(warm);

    let profiler = dhat::Profiler::builder()
        .testing()
        .trim_backtraces(Some(4))
        .build();
    let before = dhat::HeapStats::get().curr_bytes;
    let mgr = Manager::builder(client.clone())
        .handle_signals(false)
        .prune_cached_objects(mode != Mode::Full)
        .compact_cache(mode.compact())
        .build();
    let (full, meta) = if mode.metadata() {
        (None, Some(mgr.metadata_store::<Pod>()))
    } else {
        (Some(mgr.store::<Pod>()), None)
    };
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    if let Some(store) = &full {
        store.wait_until_ready().await.expect("cache ready");
        assert_eq!(store.len(), n);
    }
    if let Some(store) = &meta {
        store.wait_until_ready().await.expect("cache ready");
        assert_eq!(store.len(), n);
    }
    // Let transient buffers of the list go.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = dhat::HeapStats::get().curr_bytes;
    if let Some(store) = &full {
        let pruned = !matches!(mode, Mode::Full);
        assert!(
            store
                .state()
                .iter()
                .all(|p| p.metadata.managed_fields.is_none() == pruned && p.spec.is_some())
        );
    }
    if let Some(store) = &meta {
        assert!(
            store
                .state()
                .iter()
                .all(|p| p.metadata.owner_references.is_some()
                    && p.metadata.managed_fields.is_none())
        );
    }
    drop(profiler);
    stop.shutdown();
    let _ = run.await;
    Measure {
        bytes: after.saturating_sub(before),
        json_bytes: json_bytes / n.max(1),
    }
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
    let small = n / 4;
    rt.block_on(async {
        println!("cache_memory: typical pods, {small} and {n} cached, dhat live heap after sync");
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("  load average at start: {}", load.trim());
        for mode in [
            Mode::Full,
            Mode::Pruned,
            Mode::Compact,
            Mode::MetaTyped,
            Mode::Metadata,
        ] {
            let a = measure(small, mode).await;
            let b = measure(n, mode).await;
            let slope = (b.bytes.saturating_sub(a.bytes)) as f64 / (n - small) as f64;
            println!(
                "  {:<8} pod JSON as served {:>5} B | cache {:>6.0} B/pod at N={n} ({:.2} KiB), slope {:>6.0} B/pod ({:.2} KiB)",
                format!("{mode:?}"),
                b.json_bytes,
                b.bytes as f64 / n as f64,
                b.bytes as f64 / n as f64 / 1024.0,
                slope,
                slope / 1024.0
            );
        }
    });
}
