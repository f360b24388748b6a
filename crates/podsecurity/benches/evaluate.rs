//! What Pod Security costs a pod create: decoding the pod the API server
//! holds as JSON into its typed form (whole, and only what the checks
//! read, as the admission plugin does), then evaluating it at
//! `restricted:latest` (the most checks) and at `baseline:latest`, for a
//! compliant pod and for one that fails most checks (its messages built).
//! Each evaluation is timed one by one; prints p50/p99/max in
//! nanoseconds.
//!
//! Run: `cargo bench -p kubeforge-podsecurity --bench evaluate`

// The allocator the kubeforge binary runs with.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kubeforge_podsecurity::{Level, LevelVersion, Version, evaluate};
use serde::Deserialize;
use serde_json::{Value, json};

const ROUNDS: usize = 200_000;

/// A typical Deployment pod: two containers, an init container, volumes,
/// probes, resources.
fn pod(hardened: bool) -> Value {
    let sc = if hardened {
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
               "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    } else {
        json!({"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}})
    };
    let container = |name: &str| {
        json!({"name": name, "image": "registry.example/app:1.2.3",
               "ports": [{"containerPort": 8080, "name": "http"}],
               "env": [{"name": "MODE", "value": "prod"}],
               "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                             "limits": {"cpu": "500m", "memory": "256Mi"}},
               "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
               "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
               "securityContext": sc})
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app-7d9f8b6c5d-x2x9z", "namespace": "team",
                     "labels": {"app": "app", "pod-template-hash": "7d9f8b6c5d"},
                     "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-07T00:00:00Z"}},
        "spec": {
            "initContainers": [container("init")],
            "containers": [container("app"), container("sidecar")],
            "volumes": [{"name": "config", "configMap": {"name": "app"}},
                        {"name": "scratch", "emptyDir": {}}],
            "securityContext": {"fsGroup": 2000},
        }
    })
}

fn report(name: &str, mut ns: Vec<u64>) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)];
    let mean = ns.iter().sum::<u64>() / ns.len() as u64;
    println!(
        "{name:<44} mean {mean:>6} ns  p50 {:>6} ns  p99 {:>6} ns  max {:>8} ns",
        at(0.50),
        at(0.99),
        ns[ns.len() - 1]
    );
}

fn time(mut f: impl FnMut()) -> Vec<u64> {
    for _ in 0..10_000 {
        f();
    }
    (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as u64
        })
        .collect()
}

fn main() {
    let restricted = LevelVersion {
        level: Level::Restricted,
        version: Version::Latest,
    };
    let baseline = LevelVersion {
        level: Level::Baseline,
        version: Version::Latest,
    };
    for hardened in [true, false] {
        let v = pod(hardened);
        let which = if hardened { "compliant" } else { "violating" };
        report(
            &format!("decode ({which})"),
            time(|| {
                black_box(Pod::deserialize(black_box(&v)).ok());
            }),
        );
        report(
            &format!("decode what the checks read ({which})"),
            time(|| {
                black_box(kubeforge_podsecurity::decode(v.get("metadata"), v.get("spec")).ok());
            }),
        );
        let p = Pod::deserialize(&v).expect("pod");
        let spec = p.spec.clone().unwrap_or_default();
        for (lv, label) in [(restricted, "restricted"), (baseline, "baseline")] {
            report(
                &format!("evaluate {label}:latest ({which})"),
                time(|| {
                    let verdict = evaluate(lv, black_box(&p.metadata), black_box(&spec));
                    black_box(verdict.forbidden_detail());
                }),
            );
        }
        report(
            &format!("decode + enforce/audit/warn ({which})"),
            time(|| {
                let v = black_box(&v);
                let (meta, spec) =
                    kubeforge_podsecurity::decode(v.get("metadata"), v.get("spec")).expect("pod");
                let verdict = evaluate(restricted, &meta, &spec);
                black_box(verdict.forbidden_detail());
                black_box(evaluate(baseline, &meta, &spec).allowed());
            }),
        );
    }
}
