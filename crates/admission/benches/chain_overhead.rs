//! The API server's own cost of calling a webhook that answers at once:
//! sequential ConfigMap creates through `ApiServer::handle` without any
//! webhook, then with one validating webhook, then with one mutating and
//! one validating webhook (each an allow-all handler on kubeforge-runtime's
//! HTTPS server); the difference in the latency percentiles is what the
//! admission chain adds per request (review encoding, the HTTPS round trip
//! on a pooled connection, response checks).
//!
//! `CARGO_TARGET_DIR=/work/bench-target cargo bench -p kubeforge-admission --bench chain_overhead`
//! (env: REQUESTS).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kube::core::DynamicObject;
use kubeforge_apiserver::ApiServer;
use kubeforge_runtime::webhook::{
    ReviewFuture, ReviewHandler, Verdict, WebhookServer, parse_review, respond,
};
use serde_json::json;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct AllowAll;

impl ReviewHandler for AllowAll {
    fn review<'a>(&'a self, body: &'a [u8]) -> ReviewFuture<'a> {
        let out = parse_review::<DynamicObject>(body).map(|r| respond(&r, Verdict::allow()));
        Box::pin(std::future::ready(out))
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len().saturating_sub(1))]
}

async fn run(server: &ApiServer, tag: &str, n: usize) -> Vec<Duration> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n + 200 {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{tag}-{i}"), "labels": {"app": "bench"}}, "data": {"k": "v"}});
        let req = http::Request::post("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .unwrap_or_else(|e| panic!("{e}"));
        let t = Instant::now();
        let resp = server.handle(req).await;
        let d = t.elapsed();
        assert_eq!(resp.status(), 201, "create {tag}-{i}");
        if i >= 200 {
            lat.push(d);
        }
    }
    lat.sort_unstable();
    lat
}

fn main() {
    let n: usize = std::env::var("REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async move {
        let server = ApiServer::in_memory().await;
        let client = server.client();
        let dir = common::TempDir::new("overhead");
        let hooks = WebhookServer::builder()
            .addr("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .cert_dir(dir.0.join("certs"))
            .handler("/allow", Arc::new(AllowAll))
            .bind()
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let (url, ca) = (hooks.url("/allow"), common::b64(hooks.ca_bundle()));
        tokio::spawn(hooks.run(std::future::pending()));
        let hook = |name: &str| json!({"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": url, "caBundle": ca},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]});
        let base = run(&server, "none", n).await;
        common::apply_config(&client, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "allow"}, "webhooks": [hook("allow.example.com")]})).await;
        let one = run(&server, "validating", n).await;
        common::apply_config(&client, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "allow"}, "webhooks": [hook("allow-mutating.example.com")]})).await;
        let two = run(&server, "both", n).await;
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!("{n} sequential ConfigMap creates through ApiServer::handle (in-memory store), 2 worker threads");
        for (what, lat) in [("no webhooks", &base), ("1 validating webhook", &one), ("1 mutating + 1 validating", &two)] {
            println!(
                "{what:<28} p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
                ms(percentile(lat, 0.5)), ms(percentile(lat, 0.9)), ms(percentile(lat, 0.99)), ms(percentile(lat, 1.0))
            );
        }
        println!(
            "added by one webhook call: p50 {:.3} ms  p99 {:.3} ms; by two: p50 {:.3} ms  p99 {:.3} ms",
            ms(percentile(&one, 0.5)) - ms(percentile(&base, 0.5)),
            ms(percentile(&one, 0.99)) - ms(percentile(&base, 0.99)),
            ms(percentile(&two, 0.5)) - ms(percentile(&base, 0.5)),
            ms(percentile(&two, 0.99)) - ms(percentile(&base, 0.99)),
        );
    });
}
