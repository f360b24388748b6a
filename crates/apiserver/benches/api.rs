//! API server benchmarks for the targets (run with
//! `cargo bench -p kubeforge-apiserver --bench api`):
//!
//! - start-up: in-process server to the first successful kube-rs call;
//! - pod creates/s through HTTP with kube-rs and 32 concurrent requests,
//!   memory and durable store;
//! - LIST of 100,000 pods;
//! - one event reaching 1,000 concurrent watchers (p99 latency).
//!
//! - `httpscreates`: the memory creates over HTTP, then over HTTPS as a
//!   client-certificate user allowed by RBAC (twice each, alternating).
//! - `psacreates`: the memory creates with the namespace unlabelled, then
//!   labelled for Pod Security (enforce baseline, audit and warn
//!   restricted), five times each, alternating.
//!
//! Pass scenario names (`startup creates list watch`) to run a subset.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kubeforge_apiserver::ApiServer;
use kubeforge_store::{DurableOptions, Store};
use serde_json::json;

// The allocator `kubeforge up` uses, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", "tier": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    }))
    .expect("pod")
}

async fn listener_client(server: &ApiServer) -> Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    Client::try_from(config).expect("client")
}

/// CPU seconds (user + system) this process has used so far, from
/// /proc/self/stat (Linux), so a run on a busy machine can still say what
/// one create costs.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn startup() {
    let runs = 200;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let server = ApiServer::in_memory().await;
        let ns: Api<Namespace> = Api::all(server.client());
        ns.get("default").await.expect("first call");
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "startup  in-process server to first kube-rs call: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({runs} runs)",
        pct(&times, 0.5).as_secs_f64() * 1e3,
        pct(&times, 0.99).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
}

async fn creates(label: &str, store: Store, total: usize) {
    let server = ApiServer::new(store).await.expect("server");
    let client = listener_client(&server).await;
    creates_with(label, "kube-rs over HTTP", client, total).await;
}

/// Pod creates with Pod Security evaluating every one (issue 41): the
/// `default` namespace labelled to enforce `baseline` and to audit and
/// warn at `restricted` (the bench pod passes baseline, so each create is
/// admitted with an audit annotation and a warning), or left unlabelled
/// (the plugin only reads the namespace's labels).
async fn psa_creates(labelled: bool, total: usize) {
    let server = ApiServer::in_memory().await;
    let client = listener_client(&server).await;
    if labelled {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let patch = json!({"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/audit": "restricted",
            "pod-security.kubernetes.io/warn": "restricted"}}});
        namespaces
            .patch(
                "default",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .expect("label the namespace");
    }
    // (Part of the pods' names: a DNS label.)
    let label = if labelled {
        "psa-labelled"
    } else {
        "psa-unlabelled"
    };
    creates_with(label, "kube-rs over HTTP", client, total).await;
}

/// The same creates over HTTPS as a user authenticated by a client
/// certificate and allowed by an RBAC RoleBinding (not `system:masters`,
/// which skips RBAC): authentication and authorization on every request.
async fn https_creates(total: usize) {
    use rustls::pki_types::pem::PemObject;
    let server = ApiServer::in_memory().await;
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "bench CA");
    let ca_pem = ca_params.self_signed(&ca_key).expect("ca").pem();
    let issuer = rcgen::Issuer::new(ca_params, &ca_key);
    let sign = |p: rcgen::CertificateParams| {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &issuer).expect("cert");
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    };
    let mut serving = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("p");
    serving.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let (_, serving_key, serving_der) = sign(serving);
    let mut client = rcgen::CertificateParams::new(Vec::<String>::new()).expect("p");
    client.distinguished_name = rcgen::DistinguishedName::new();
    client
        .distinguished_name
        .push(rcgen::DnType::CommonName, "bench");
    client
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "devs");
    client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let (client_pem, client_key, _) = sign(client);
    server.set_authentication(Some(
        kubeforge_apiserver::Authentication::new(kubeforge_apiserver::TokenFile::default())
            .with_client_ca(&ca_pem)
            .expect("client CA"),
    ));
    server.enable_rbac(true).await.expect("rbac");
    let admin = server.client();
    let rbac = |v: serde_json::Value| -> kube::api::DynamicObject {
        serde_json::from_value(v).expect("rbac object")
    };
    let gvk = |kind: &str, plural: &str| {
        kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind),
            plural,
        )
    };
    Api::<kube::api::DynamicObject>::namespaced_with(
        admin.clone(),
        "default",
        &gvk("Role", "roles"),
    )
    .create(
        &PostParams::default(),
        &rbac(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "pod-creator"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "list"]}]})),
    )
    .await
    .expect("role");
    Api::<kube::api::DynamicObject>::namespaced_with(admin, "default", &gvk("RoleBinding", "rolebindings"))
        .create(&PostParams::default(), &rbac(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "bench-creates"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-creator"},
            "subjects": [{"kind": "Group", "name": "devs"}]})))
        .await
        .expect("binding");
    let tls = kubeforge_apiserver::tls::server_config(
        vec![serving_der.into()],
        rustls::pki_types::PrivateKeyDer::from_pem_slice(serving_key.as_bytes()).expect("key"),
    )
    .expect("tls");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(
        server
            .clone()
            .serve_tls(listener, tls, std::future::pending()),
    );
    let yaml = kubeforge_apiserver::kubeconfig_tls_yaml(addr, &ca_pem, &client_pem, &client_key);
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    let client = Client::try_from(config).expect("client");
    creates_with("memory", "kube-rs over HTTPS, x509 + RBAC", client, total).await;
}

async fn creates_with(label: &str, how: &str, client: Client, total: usize) {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let concurrency = 32;
    let per = total / concurrency;
    // Warm up connections.
    pods.list(&ListParams::default().limit(1))
        .await
        .expect("warm");
    let t = Instant::now();
    let cpu0 = cpu_seconds();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let pods = pods.clone();
        let label = label.to_string();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per);
            for i in 0..per {
                let s = Instant::now();
                pods.create(&PostParams::default(), &pod(&format!("{label}-{w}-{i}")))
                    .await
                    .expect("create");
                lat.push(s.elapsed());
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.expect("task"));
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let n = (per * concurrency) as f64;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    lat.sort();
    println!(
        "creates  {label:<8} {} pods, 32 concurrent, {how}: {:.0} creates/s (p50 {:.2} ms, p99 {:.2} ms); \
         CPU {:.0} µs/create client+server (= {:.0}/s on {cores} idle cores)",
        per * concurrency,
        n / secs,
        pct(&lat, 0.5).as_secs_f64() * 1e3,
        pct(&lat, 0.99).as_secs_f64() * 1e3,
        cpu / n * 1e6,
        cores * n / cpu
    );
}

/// The server alone: pod creates as raw requests handed to
/// `ApiServer::handle` in-process (no HTTP, no client decoding), 32 tasks.
async fn raw_creates(total: usize) {
    use http_body_util::{BodyExt, Full};
    let server = ApiServer::in_memory().await;
    let concurrency = 32;
    let per = total / concurrency;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let server = server.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let body = serde_json::to_vec(&pod(&format!("raw-{w}-{i}"))).expect("json");
                let req = http::Request::post("/api/v1/namespaces/default/pods")
                    .header("content-type", "application/json")
                    .body(Full::new(bytes::Bytes::from(body)))
                    .expect("request");
                let resp = server.handle(req).await;
                assert_eq!(resp.status(), 201);
                let _ = resp.into_body().collect().await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    println!(
        "creates  server only, in-process raw requests, 32 concurrent: {:.0} creates/s",
        (per * concurrency) as f64 / t.elapsed().as_secs_f64()
    );
}

async fn list(n: usize) {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut tasks = Vec::new();
    for w in 0..8 {
        let pods = pods.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(8) {
                pods.create(&PostParams::default(), &pod(&format!("p-{i}")))
                    .await
                    .expect("create");
            }
        }));
    }
    for t in tasks {
        t.await.expect("fill");
    }
    // Server time: the full response body of LIST over HTTP, not client decoding.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let t = Instant::now();
        bytes = raw_get(addr, "/api/v1/namespaces/default/pods").await;
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "list     {n} pods over HTTP ({:.1} MB body): median {:.0} ms, best {:.0} ms",
        bytes as f64 / 1e6,
        pct(&times, 0.5).as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3
    );
    // kube-rs including client-side decoding, for reference.
    let t = Instant::now();
    let all = pods.list(&ListParams::default()).await.expect("list");
    println!(
        "list     {n} pods with kube-rs in-process incl. client decoding: {:.0} ms ({} items)",
        t.elapsed().as_secs_f64() * 1e3,
        all.items.len()
    );
}

/// GET a path over HTTP/1.1 and read the whole response (discarding it as
/// it arrives, so the client's own buffering does not count); returns its
/// length.
async fn raw_get(addr: std::net::SocketAddr, path: &str) -> usize {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    loop {
        let n = s.read(&mut buf).await.expect("read");
        if n == 0 {
            return total;
        }
        total += n;
    }
}

async fn watch_fanout(watchers: usize) {
    let server = ApiServer::in_memory().await;
    let client = listener_client(&server).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .unwrap_or_default();
    let rounds = 20;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let ready = Arc::new(tokio::sync::Semaphore::new(0));
    for _ in 0..watchers {
        let cms = cms.clone();
        let tx = tx.clone();
        let ready = ready.clone();
        let rv = rv.clone();
        tokio::spawn(async move {
            let mut stream = cms
                .watch(&kube::api::WatchParams::default(), &rv)
                .await
                .expect("watch")
                .boxed();
            ready.add_permits(1);
            while let Some(ev) = stream.next().await {
                if let Ok(kube::api::WatchEvent::Added(cm)) = ev {
                    let round: usize = cm
                        .metadata
                        .name
                        .as_deref()
                        .and_then(|n| n.strip_prefix("e-"))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    let _ = tx.send((round, Instant::now()));
                }
            }
        });
    }
    drop(tx);
    let _all = ready.acquire_many(watchers as u32).await.expect("ready");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut lat = Vec::with_capacity(rounds * watchers);
    for round in 0..rounds {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("e-{round}")}}))
                .expect("cm");
        let sent = Instant::now();
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create");
        let mut got = 0;
        while got < watchers {
            let (r, at) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("event in time")
                .expect("open");
            if r == round {
                lat.push(at.duration_since(sent));
                got += 1;
            }
        }
    }
    lat.sort();
    println!(
        "watch    1 event to {watchers} watchers over HTTP (kube-rs), {rounds} rounds: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(&lat, 0.5).as_secs_f64() * 1e3,
        pct(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        println!(
            "machine: {} cores",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0)
        );
        if want("startup") {
            startup().await;
        }
        if want("creates") {
            creates("memory", Store::memory(), 32 * 1000).await;
            let dir = std::env::temp_dir().join(format!("kubeforge-bench-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let store = Store::open(&dir, DurableOptions::default())
                .await
                .expect("durable store");
            creates("durable", store.clone(), 32 * 500).await;
            store.close().await;
            let _ = std::fs::remove_dir_all(&dir);
        }
        if want("httpscreates") {
            creates("memory", Store::memory(), 32 * 1000).await;
            https_creates(32 * 1000).await;
            creates("memory", Store::memory(), 32 * 1000).await;
            https_creates(32 * 1000).await;
        }
        if want("psacreates") {
            for _ in 0..5 {
                psa_creates(false, 32 * 1000).await;
                psa_creates(true, 32 * 1000).await;
            }
        }
        if want("rawcreates") {
            raw_creates(32 * 1000).await;
        }
        if want("list") {
            list(100_000).await;
        }
        if want("watch") {
            watch_fanout(1000).await;
        }
    });
}
