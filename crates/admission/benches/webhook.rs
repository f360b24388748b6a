//! Webhook server latency over HTTPS at a fixed arrival rate: the
//! validating policies (require requests/limits, no :latest, registry
//! allow-list) behind kubeforge-runtime's webhook server, AdmissionReviews
//! sent open-loop at `RATE`/s over keep-alive TLS connections; latency is
//! measured from each request's scheduled send time, so a server falling
//! behind shows up in the tail (no coordinated omission).
//!
//! `CARGO_TARGET_DIR=/work/bench-target cargo bench -p kubeforge-admission --bench webhook`
//! (env: RATE, SECONDS, CONNECTIONS).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubeforge_admission::server::PolicyHandler;
use kubeforge_admission::{ClusterView, Engine, compile};
use kubeforge_runtime::webhook::WebhookServer;
use serde_json::json;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn review(i: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("uid-{i}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": format!("web-{i}"), "namespace": "prod", "operation": "CREATE",
            "userInfo": {"username": "system:admin", "groups": ["system:masters"]},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("web-{i}"), "namespace": "prod", "labels": {"app": "web", "tier": "frontend"}},
                "spec": {"containers": [
                    {"name": "web", "image": "docker.io/library/nginx:1.27", "ports": [{"containerPort": 80}],
                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}},
                    {"name": "proxy", "image": "registry.k8s.io/pause:3.9",
                     "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}}}]}},
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    }))
    .unwrap_or_default()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let rate = env("RATE", 5000);
    let seconds = env("SECONDS", 10);
    let connections = env("CONNECTIONS", 16) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async move {
        let spec = serde_json::from_value(json!({
            "requireResources": {},
            "images": {"disallowLatest": true, "allowedRegistries": ["docker.io", "registry.k8s.io"]}
        }))
        .unwrap_or_else(|e| panic!("spec: {e}"));
        let engine = Arc::new(Engine::new(vec!["kube-system".into()], ClusterView::default()));
        engine.set_policies(vec![compile("baseline", &spec).unwrap_or_else(|e| panic!("{e}"))]);
        let dir = common::TempDir::new("bench");
        let server = WebhookServer::builder()
            .addr("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .cert_dir(dir.0.join("certs"))
            .handler("/validate", PolicyHandler::validating(engine))
            .bind()
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let (addr, ca) = (server.local_addr(), server.ca_bundle().to_string());
        tokio::spawn(server.run(std::future::pending()));

        // Warm up each connection (TLS handshake, allocator, caches).
        let mut senders = Vec::new();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(Duration, bool)>();
        for _ in 0..connections {
            let mut c = common::Https::connect(addr, &ca).await;
            for i in 0..50 {
                let (s, _) = c.post("/validate", review(i)).await;
                assert_eq!(s, 200);
            }
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
            let done = done_tx.clone();
            tokio::spawn(async move {
                while let Some((scheduled, body)) = rx.recv().await {
                    let (s, b) = c.post("/validate", body).await;
                    let ok = s == 200 && b.windows(14).any(|w| w == b"\"allowed\":true");
                    let _ = done.send((scheduled.elapsed(), ok));
                }
            });
            senders.push(tx);
        }
        drop(done_tx);
        let bodies: Vec<Vec<u8>> = (0..1000).map(review).collect();
        let total = rate * seconds;
        let per_tick = rate / 1000;
        let start = Instant::now();
        let mut ticker = tokio::time::interval(Duration::from_millis(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut sent = 0u64;
        let mut tick = 0u64;
        while sent < total {
            ticker.tick().await;
            let scheduled = start + Duration::from_millis(tick);
            tick += 1;
            for _ in 0..per_tick {
                let i = sent as usize;
                let _ = senders[i % connections].send((scheduled, bodies[i % bodies.len()].clone()));
                sent += 1;
            }
        }
        drop(senders);
        let mut lat = Vec::with_capacity(total as usize);
        let mut failures = 0;
        while let Some((d, ok)) = done_rx.recv().await {
            lat.push(d);
            if !ok {
                failures += 1;
            }
        }
        let elapsed = start.elapsed();
        lat.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "webhook HTTPS validating policies: offered {rate}/s for {seconds}s over {connections} connections; achieved {:.0}/s; {} reviews, {failures} not allowed/failed",
            lat.len() as f64 / elapsed.as_secs_f64(),
            lat.len()
        );
        println!(
            "latency from scheduled send: p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms",
            ms(percentile(&lat, 0.50)),
            ms(percentile(&lat, 0.90)),
            ms(percentile(&lat, 0.99)),
            ms(percentile(&lat, 0.999)),
            ms(percentile(&lat, 1.0))
        );
    });
}
