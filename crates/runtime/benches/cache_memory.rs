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
//! Then, with the profiler stopped, the time of reads (best of five rounds
//! over all N pods, so preemption on a loaded machine mostly drops out): a
//! `get` of every pod while nothing is decoded (a decode each), again while
//! the decoded copies are held (shared), and a whole `state()` after a
//! trim.
//!
//! `CARGO_TARGET_DIR=/work/bench-target cargo bench -p kubeforge-runtime --bench cache_memory -- 2000`
//! (the argument is N; the default is 2000).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeforge_apiserver::ApiServer;
use kubeforge_runtime::Manager;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn typical_pod(i: usize) -> serde_json::Value {
    let hash = "7c9d8f6b5d";
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("web-{hash}-{i:05}"),
            "namespace": "default",
            "generateName": format!("web-{hash}-"),
            "labels": {"app": "web", "pod-template-hash": hash, "tier": "frontend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T06:00:00Z"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{hash}"),
                "uid": "5f0c7d3e-9a51-4a4e-8d53-1c1f6c1b2e77", "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "containers": [{
                "name": "web",
                "image": "registry.example.com/team/web:1.27.3",
                "imagePullPolicy": "IfNotPresent",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [
                    {"name": "LOG_LEVEL", "value": "info"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                    {"name": "CACHE_URL", "value": "memcached.default.svc:11211"}
                ],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                "livenessProbe": {"httpGet": {"path": "/livez", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
            }],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]}}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": format!("node-{:03}", i % 100),
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority"
        }
    })
}

fn typical_status(i: usize) -> serde_json::Value {
    let t = "2026-11-30T06:01:02Z";
    let cond = |ty: &str| serde_json::json!({"type": ty, "status": "True", "lastProbeTime": null, "lastTransitionTime": t});
    serde_json::json!({"status": {
        "phase": "Running",
        "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")],
        "hostIP": format!("10.0.{}.{}", i % 100 / 10, i % 10 + 1),
        "hostIPs": [{"ip": format!("10.0.{}.{}", i % 100 / 10, i % 10 + 1)}],
        "podIP": format!("10.244.{}.{}", i / 250, i % 250 + 2),
        "podIPs": [{"ip": format!("10.244.{}.{}", i / 250, i % 250 + 2)}],
        "startTime": t,
        "containerStatuses": [{
            "name": "web", "ready": true, "restartCount": 0, "started": true,
            "state": {"running": {"startedAt": t}},
            "image": "registry.example.com/team/web:1.27.3",
            "imageID": "registry.example.com/team/web@sha256:4c2f1d0e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e",
            "containerID": format!("containerd://{:064x}", i)
        }],
        "qosClass": "Burstable"
    }})
}

struct Measure {
    bytes: usize,
    json_bytes: usize,
    /// CPU ns per get: cold (decoding), warm (shared), per object of state().
    reads: Option<(f64, f64, f64)>,
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

/// ns per object of `f` run over `n` objects: best of five rounds, each
/// after `reset`.
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

fn read_costs<K: kubeforge_runtime::Cacheable>(
    cache: &kubeforge_runtime::Cache<K>,
) -> (f64, f64, f64) {
    let keys = cache.keys();
    let n = keys.len();
    let held = std::cell::RefCell::new(Vec::with_capacity(n));
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
    let warm = per_object(
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
    (cold, warm, state)
}

async fn measure(n: usize, mode: Mode) -> Measure {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let create = PostParams {
        field_manager: Some("kube-controller-manager".into()),
        ..Default::default()
    };
    let status = PatchParams {
        field_manager: Some("kubelet".into()),
        ..Default::default()
    };
    let mut json_bytes = 0;
    for i in 0..n {
        let pod: Pod = serde_json::from_value(typical_pod(i)).expect("pod shape");
        let created = pods.create(&create, &pod).await.expect("create pod");
        let name = created.metadata.name.clone().unwrap_or_default();
        let done = pods
            .patch_status(&name, &status, &Patch::Merge(&typical_status(i)))
            .await
            .expect("status");
        json_bytes += serde_json::to_vec(&done).map(|v| v.len()).unwrap_or(0);
    }
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
    let reads = match (&full, &meta) {
        (Some(c), _) => Some(read_costs(c)),
        (_, Some(c)) => Some(read_costs(c)),
        _ => None,
    };
    stop.shutdown();
    let _ = run.await;
    Measure {
        bytes: after.saturating_sub(before),
        json_bytes: json_bytes / n.max(1),
        reads,
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
            if let Some((cold, warm, state)) = b.reads {
                println!(
                    "           per read: get decoding {:>7.0} ns | get shared {:>5.0} ns | state() {:>7.0} ns/object",
                    cold, warm, state
                );
            }
        }
    });
}
