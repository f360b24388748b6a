//! Test environment start-up and fault-injection costs (run with
//! `cargo bench -p kubeforge-testenv --bench start`):
//!
//! - `start`: `TestEnv::builder().start()` in-process → first successful
//!   kube-rs call (GET namespace `default`), p50/p99 over many starts, with
//!   the default built-in controllers, without them, with one CRD (first
//!   call: LIST of its kind), and on loopback (first call over HTTP); and
//!   start → the built-in controllers' caches synced; the same first GET on
//!   a current-thread runtime (what `#[tokio::test]` uses by default);
//! - `faults`: GET latency through an idle fault layer against the server's
//!   plain in-process client, and with 2 ms of injected latency.
//!
//! Pass scenario names (`start faults`) to run a subset.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kubeforge_testenv::{Faults, TestEnv, TestEnvBuilder};

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let mean = times.iter().sum::<Duration>() / times.len().max(1) as u32;
    println!(
        "{what:<58} n={:<5} p50 {:>9.3} ms  p99 {:>9.3} ms  mean {:>9.3} ms",
        times.len(),
        pct(&times, 0.5).as_secs_f64() * 1e3,
        pct(&times, 0.99).as_secs_f64() * 1e3,
        mean.as_secs_f64() * 1e3,
    );
}

fn crd() -> CustomResourceDefinition {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "memcacheds.cache.example.com"},
        "spec": {
            "group": "cache.example.com",
            "scope": "Namespaced",
            "names": {"plural": "memcacheds", "singular": "memcached", "kind": "Memcached"},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 5},
                        "containerPort": {"type": "integer", "default": 11211}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}
            }]
        }
    }))
    .expect("crd")
}

async fn first_call_ns(env: &TestEnv) {
    let ns: Api<Namespace> = Api::all(env.client());
    ns.get("default").await.expect("first call");
}

async fn starts<F>(what: &str, runs: usize, builder: impl Fn() -> TestEnvBuilder, first: F)
where
    F: AsyncFn(&TestEnv),
{
    // Warm up allocators and lazily built tables (OpenAPI, registry).
    for _ in 0..5 {
        let env = builder().start().await.expect("start");
        first(&env).await;
        env.stop().await;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let env = builder().start().await.expect("start");
        first(&env).await;
        times.push(t.elapsed());
        env.stop().await;
    }
    report(what, times);
}

async fn start() {
    let runs = 500;
    starts(
        "start → first GET (in-process, built-in controllers)",
        runs,
        TestEnv::builder,
        first_call_ns,
    )
    .await;
    starts(
        "start → first GET (in-process, no controllers)",
        runs,
        || TestEnv::builder().builtin_controllers(false),
        first_call_ns,
    )
    .await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cache.example.com", "v1alpha1", "Memcached"),
        "memcacheds",
    );
    starts(
        "start with 1 CRD → first LIST of it (in-process)",
        runs,
        || TestEnv::builder().crd(crd()),
        async |env: &TestEnv| {
            let api: Api<DynamicObject> = Api::default_namespaced_with(env.client(), &ar);
            api.list(&ListParams::default()).await.expect("first call");
        },
    )
    .await;
    starts(
        "start → built-in controllers' caches synced (in-process)",
        200,
        TestEnv::builder,
        async |env: &TestEnv| {
            if let Some(c) = env.controllers() {
                c.wait_synced().await;
            }
        },
    )
    .await;
    starts(
        "start → first GET (loopback + kubeconfig, over HTTP)",
        100,
        || TestEnv::builder().loopback(true),
        first_call_ns,
    )
    .await;
}

async fn gets(what: &str, client: kube::Client, runs: usize) {
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    for _ in 0..50 {
        cms.get("probe").await.expect("get");
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        cms.get("probe").await.expect("get");
        times.push(t.elapsed());
    }
    report(what, times);
}

async fn faults() {
    let env = TestEnv::builder()
        .builtin_controllers(false)
        .start()
        .await
        .expect("start");
    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    let mut probe = ConfigMap::default();
    probe.metadata.name = Some("probe".into());
    cms.create(&PostParams::default(), &probe)
        .await
        .expect("probe");
    gets(
        "GET, server's plain in-process client",
        env.client_without_faults(),
        5000,
    )
    .await;
    gets("GET, through the idle fault layer", env.client(), 5000).await;
    env.faults()
        .set(Faults::new().latency(Duration::from_millis(2)));
    gets("GET, with 2 ms injected latency", env.client(), 500).await;
    env.faults().set(
        Faults::new()
            .latency(Duration::from_millis(1))
            .latency_jitter(Duration::from_millis(2)),
    );
    gets(
        "GET, with 1 ms + [0, 2) ms jitter injected",
        env.client(),
        500,
    )
    .await;
    env.stop().await;
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if want("start") {
            start().await;
        }
    });
    if want("start") {
        // `#[tokio::test]`'s default runtime: one thread for the test and
        // the controllers.
        let single = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        single.block_on(async {
            starts(
                "start → first GET (current-thread runtime, controllers)",
                500,
                TestEnv::builder,
                first_call_ns,
            )
            .await;
            starts(
                "start → first GET (current-thread runtime, no controllers)",
                500,
                || TestEnv::builder().builtin_controllers(false),
                first_call_ns,
            )
            .await;
        });
    }
    rt.block_on(async {
        if want("faults") {
            faults().await;
        }
    });
}
