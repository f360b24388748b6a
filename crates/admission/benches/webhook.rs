//! Webhook server latency over HTTPS at a fixed arrival rate: the
//! validating policies (require requests/limits, no :latest, registry
//! allow-list) behind kubeforge-runtime's webhook server.
//!
//! The server runs in a child process (this binary re-run with
//! `WEBHOOK_BENCH_SERVE=1`) on a multi-thread tokio runtime of
//! `SERVER_THREADS` workers (default 2: what `kubeforge webhook` gets on
//! this machine), so the load generator shares no runtime, thread or
//! allocator with it. The generator is open-loop, as wrk2 is: a pacing
//! thread releases one AdmissionReview every `1/RATE` s (evenly spaced,
//! not in 1 ms bursts); a single-thread tokio runtime hands each one to an
//! idle connection of a pool of `CONNECTIONS` pre-warmed keep-alive
//! HTTP/1.1 + TLS connections (as Go's transport in the kube-apiserver
//! does); bodies are serialized once before the run. Latency is measured
//! from each review's *scheduled* send time to the end of its response
//! body, so a server (or generator) falling behind shows in the tail (no
//! coordinated omission). The CPU time both processes spent during the
//! run (from /proc/<pid>/task/*/schedstat) is printed per review.
//!
//! `CARGO_TARGET_DIR=/work/bench-target cargo bench -p kubeforge-admission --bench webhook`
//!
//! Env: `RATE` (reviews/s; a comma list runs each in turn, e.g.
//! `RATE=5000,10000,15000` to find the sustainable maximum), `SECONDS`
//! (per rate, default 10), `CONNECTIONS` (default 16), `SERVER_THREADS`
//! (0: a current-thread runtime), `HANDLER=floor` (a server answering
//! allowed without decoding the Pod or running policies: the HTTPS floor),
//! `TRACE=1` (per-review timestamps on both sides, see below).
//!
//! With `TRACE=1` every review carries its sequence number in its `uid`;
//! the generator keeps, per review, when it was scheduled, released by the
//! pacer, taken by a connection task, written, answered (headers) and read
//! to the end; the server keeps when the handler started and ended and on
//! which worker. Both sides stamp with `Instant` (CLOCK_MONOTONIC) mapped
//! onto one wall-clock origin taken once per process, so the two logs can
//! be merged. The bench prints where the time of the median and of the
//! slowest 1 % of reviews went, and the stalls: the pacer waking over 1 ms
//! late, or either process doing nothing for over 1 ms while work waited on
//! it, with how many of the reviews over 2 ms each kind overlaps. It writes
//! the merged log (one line per review, nanoseconds) to
//! `$CARGO_TARGET_DIR/tmp/webhook-trace-<rate>.tsv`. On a shared machine,
//! `chrt -f 10` before the command gives both processes the CPU whenever
//! they are runnable.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
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

/// A realistic Pod create review: two containers, one fully specified.
fn review(i: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("0b6c5a4e-1f2d-4c3b-9a8e-{i:012}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": format!("web-{i}"), "namespace": "prod", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "8f0a1c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("web-{i}"), "namespace": "prod",
                    "generateName": "web-7d9c8b6f5-",
                    "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d9c8b6f5"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c8b6f5",
                        "uid": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"containers": [
                    {"name": "web", "image": "docker.io/library/nginx:1.27", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                     "env": [{"name": "MODE", "value": "production"}],
                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
                     "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                     "imagePullPolicy": "IfNotPresent"},
                    {"name": "proxy", "image": "registry.k8s.io/pause:3.9",
                     "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}},
                     "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                     "imagePullPolicy": "IfNotPresent"}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                    "serviceAccountName": "default", "schedulerName": "default-scheduler",
                    "securityContext": {},
                    "tolerations": [
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
                    "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"},
                "status": {}},
            "oldObject": null,
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

/// On-CPU time of every thread of `pid` so far.
fn cpu_time(pid: u32) -> Duration {
    let mut ns = 0u64;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    Duration::from_nanos(ns)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The machine-wide `cpu` line of /proc/stat: (busy, idle, steal) ticks.
fn cpu_ticks() -> (u64, u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let f = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    (f(0) + f(1) + f(2) + f(5) + f(6), f(3) + f(4), f(7))
}

fn tracing_on() -> bool {
    std::env::var("TRACE").is_ok_and(|v| v == "1")
}

/// Nanoseconds since the Unix epoch of `t`, through one (wall clock,
/// monotonic clock) pair taken once per process: two processes' stamps
/// can then be compared (to well under a microsecond of pairing error).
fn stamp(t: Instant) -> u64 {
    use std::sync::OnceLock;
    static BASE: OnceLock<(u64, Instant)> = OnceLock::new();
    let (wall, base) = *BASE.get_or_init(|| {
        // The tightest of a few (Instant, SystemTime, Instant) readings.
        let mut best: Option<(Duration, u64, Instant)> = None;
        for _ in 0..100 {
            let a = Instant::now();
            let w = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let b = Instant::now();
            if best.is_none_or(|(width, _, _)| b - a < width) {
                best = Some((b - a, w, a + (b - a) / 2));
            }
        }
        best.map_or((0, Instant::now()), |(_, w, at)| (w, at))
    });
    if t >= base {
        wall + (t - base).as_nanos() as u64
    } else {
        wall.saturating_sub((base - t).as_nanos() as u64)
    }
}

/// The `uid` prefix of every review; the 12 digits after it are the
/// review's sequence number when tracing.
const UID_PREFIX: &[u8] = b"0b6c5a4e-1f2d-4c3b-9a8e-";

fn uid_digits(body: &[u8]) -> Option<usize> {
    body.windows(UID_PREFIX.len())
        .position(|w| w == UID_PREFIX)
        .map(|p| p + UID_PREFIX.len())
}

/// `body` with review number `id` written into its uid.
fn with_id(body: &[u8], at: usize, id: u64) -> Bytes {
    let mut b = body.to_vec();
    let digits = format!("{id:012}");
    b[at..at + 12].copy_from_slice(digits.as_bytes());
    Bytes::from(b)
}

/// Server side of `TRACE=1`: (review number, worker, handler start, end).
struct Traced {
    inner: Arc<dyn kubeforge_runtime::webhook::ReviewHandler>,
    log: Arc<std::sync::Mutex<Vec<[u64; 4]>>>,
}

fn worker_index() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local!(static ME: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    ME.with(|m| *m)
}

impl kubeforge_runtime::webhook::ReviewHandler for Traced {
    fn review<'a>(&'a self, body: &'a [u8]) -> kubeforge_runtime::webhook::ReviewFuture<'a> {
        let start = Instant::now();
        Box::pin(async move {
            let out = self.inner.review(body).await;
            let end = Instant::now();
            let id = uid_digits(body)
                .and_then(|at| {
                    std::str::from_utf8(body.get(at..at + 12)?)
                        .ok()?
                        .parse()
                        .ok()
                })
                .unwrap_or(u64::MAX);
            if let Ok(mut log) = self.log.lock() {
                log.push([id, worker_index(), stamp(start), stamp(end)]);
            }
            out
        })
    }
}

fn trace_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// `HANDLER=floor`: answers allowed after reading only `request.uid`, to
/// show what HTTPS, HTTP/1.1 and the runtime cost without the policies.
struct Floor;

impl kubeforge_runtime::webhook::ReviewHandler for Floor {
    fn review<'a>(&'a self, body: &'a [u8]) -> kubeforge_runtime::webhook::ReviewFuture<'a> {
        #[derive(serde::Deserialize)]
        struct Review {
            request: Request,
        }
        #[derive(serde::Deserialize)]
        struct Request {
            uid: String,
        }
        let out = serde_json::from_slice::<Review>(body)
            .map(|r| {
                let mut resp = kube::core::admission::AdmissionResponse::invalid("");
                resp.uid = r.request.uid;
                resp.allowed = true;
                resp.result = Default::default();
                resp
            })
            .map_err(|e| e.to_string());
        Box::pin(std::future::ready(out))
    }
}

/// The child: serve the validating policies until stdin closes.
fn serve() {
    let threads = env("SERVER_THREADS", 2) as usize;
    let rt = if threads == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
    .unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async move {
        let engine = engine();
        let dir = common::TempDir::new("bench");
        let handler: Arc<dyn kubeforge_runtime::webhook::ReviewHandler> =
            if std::env::var("HANDLER").is_ok_and(|h| h == "floor") {
                Arc::new(Floor)
            } else {
                PolicyHandler::validating(engine)
            };
        stamp(Instant::now());
        let log = Arc::new(std::sync::Mutex::new(Vec::with_capacity(if tracing_on() {
            1_000_000
        } else {
            0
        })));
        let handler: Arc<dyn kubeforge_runtime::webhook::ReviewHandler> = if tracing_on() {
            Arc::new(Traced {
                inner: handler,
                log: log.clone(),
            })
        } else {
            handler
        };
        let server = WebhookServer::builder()
            .addr("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .cert_dir(dir.0.join("certs"))
            .handler("/validate", handler)
            .bind()
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let ca = dir
            .0
            .join("certs")
            .join(kubeforge_runtime::webhook::CA_FILE);
        println!("{} {}", server.local_addr(), ca.display());
        let _ = std::io::stdout().flush();
        let stdin_closed = async {
            let _ = tokio::task::spawn_blocking(|| {
                let mut sink = String::new();
                while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
            })
            .await;
        };
        server
            .run(stdin_closed)
            .await
            .unwrap_or_else(|e| panic!("serve: {e}"));
        if tracing_on() {
            let log = log.lock().map(|l| l.clone()).unwrap_or_default();
            let text: String = log
                .iter()
                .map(|[id, w, s, e]| format!("{id}\t{w}\t{s}\t{e}\n"))
                .collect();
            let p = trace_path("webhook-trace-server.tsv");
            std::fs::write(&p, text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
        drop(dir);
    });
}

/// One review to send: its number, scheduled send time and the time the
/// pacer released it.
type Job = (usize, Instant, Instant);

/// What the generator saw of one review.
#[derive(Clone, Copy)]
struct Rec {
    id: u64,
    conn: usize,
    scheduled: Instant,
    released: Instant,
    /// A connection task took it.
    taken: Instant,
    /// The connection was ready and the request handed to hyper.
    sent: Instant,
    /// Response headers arrived.
    head: Instant,
    /// The response body was read.
    done: Instant,
}

struct RunResult {
    latencies: Vec<Duration>,
    recs: Vec<Rec>,
    failures: usize,
    elapsed: Duration,
}

/// Offer `rate`/s for `seconds` over the pool; every review's latency.
async fn run_rate(
    conns: &[Arc<tokio::sync::Mutex<common::Https>>],
    bodies: &Arc<Vec<Bytes>>,
    id_at: &Arc<Vec<usize>>,
    first_id: u64,
    rate: u64,
    seconds: u64,
) -> RunResult {
    let total = (rate * seconds) as usize;
    let trace = tracing_on();
    let (job_tx, job_rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
    let job_rx = Arc::new(tokio::sync::Mutex::new(job_rx));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(Rec, bool)>();
    // One task per connection takes the next review when its connection
    // is idle: the pool of a keep-alive HTTP client.
    let mut workers = Vec::new();
    for (conn, c) in conns.iter().enumerate() {
        let (c, rx, done, bodies, id_at) = (
            c.clone(),
            job_rx.clone(),
            done_tx.clone(),
            bodies.clone(),
            id_at.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut c = c.lock().await;
            loop {
                let job = rx.lock().await.recv().await;
                let Some((i, scheduled, released)) = job else {
                    break;
                };
                let taken = Instant::now();
                let id = first_id + i as u64;
                let k = i % bodies.len();
                let body = if trace {
                    with_id(&bodies[k], id_at[k], id)
                } else {
                    bodies[k].clone()
                };
                let (s, b, sent, head) = c.post_timed("/validate", body).await;
                let ok = s == 200 && b.windows(14).any(|w| w == b"\"allowed\":true");
                let rec = Rec {
                    id,
                    conn,
                    scheduled,
                    released,
                    taken,
                    sent,
                    head,
                    done: Instant::now(),
                };
                let _ = done.send((rec, ok));
            }
        }));
    }
    drop(done_tx);
    // The pacer: a plain thread sleeping to each send time (tokio's timer
    // has 1 ms granularity; this is within tens of microseconds).
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now() + Duration::from_millis(5);
    let pacer = std::thread::spawn(move || {
        for i in 0..total {
            let at = start + interval.mul_f64(i as f64);
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            if job_tx.send((i, at, Instant::now())).is_err() {
                break;
            }
        }
    });
    let mut latencies = Vec::with_capacity(total);
    let mut recs = Vec::with_capacity(total);
    let mut failures = 0;
    while let Some((r, ok)) = done_rx.recv().await {
        latencies.push(r.done - r.scheduled);
        recs.push(r);
        if !ok {
            failures += 1;
        }
    }
    let elapsed = start.elapsed();
    let _ = pacer.join();
    for w in workers {
        let _ = w.await;
    }
    latencies.sort_unstable();
    RunResult {
        latencies,
        recs,
        failures,
        elapsed,
    }
}

fn engine() -> Arc<Engine> {
    let spec = serde_json::from_value(json!({
        "requireResources": {},
        "images": {"disallowLatest": true, "allowedRegistries": ["docker.io", "registry.k8s.io"]}
    }))
    .unwrap_or_else(|e| panic!("spec: {e}"));
    let engine = Arc::new(Engine::new(
        vec!["kube-system".into()],
        ClusterView::default(),
    ));
    engine.set_policies(vec![
        compile("baseline", &spec).unwrap_or_else(|e| panic!("{e}")),
    ]);
    engine
}

/// The handler alone, no HTTP or TLS: decode, policies, encode; CPU per
/// review on one thread. Also the same with the whole Pod decoded (what
/// the validating handler did before it decoded only what the rules read).
fn handler_only(bodies: &[Bytes]) -> (Duration, Duration) {
    use kubeforge_runtime::webhook::{ReviewHandler, parse_review, respond};
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let engine = engine();
    let h = PolicyHandler::validating(engine.clone());
    let n = env("HANDLER_ITERS", 20_000) as usize;
    rt.block_on(async {
        let mut bytes = 0;
        let t = cpu_time(std::process::id());
        for i in 0..n {
            let r = h
                .review(&bodies[i % bodies.len()])
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            bytes += serde_json::to_vec(&r.into_review()).map_or(0, |b| b.len());
        }
        let lean = (cpu_time(std::process::id()) - t) / n as u32;
        let t = cpu_time(std::process::id());
        for i in 0..n {
            let req = parse_review::<k8s_openapi::api::core::v1::Pod>(&bodies[i % bodies.len()])
                .unwrap_or_else(|e| panic!("{e}"));
            let v = engine.validate(&req).await;
            bytes += serde_json::to_vec(&respond(&req, v).into_review()).map_or(0, |b| b.len());
        }
        let full = (cpu_time(std::process::id()) - t) / n as u32;
        assert!(bytes > 0);
        (lean, full)
    })
}

fn main() {
    if std::env::var_os("WEBHOOK_BENCH_SERVE").is_some() {
        serve();
        return;
    }
    let rates: Vec<u64> = std::env::var("RATE")
        .unwrap_or_else(|_| "5000".into())
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .filter(|r| *r > 0)
        .collect();
    let seconds = env("SECONDS", 10);
    let connections = env("CONNECTIONS", 16) as usize;
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current exe: {e}"));
    let mut child = Command::new(exe)
        .env("WEBHOOK_BENCH_SERVE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting the server process: {e}"));
    let mut line = String::new();
    let out = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("child stdout"));
    BufReader::new(out)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("reading the server's address: {e}"));
    let (addr, ca_path) = line
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("server said {line:?}"));
    let addr: std::net::SocketAddr = addr.parse().unwrap_or_else(|e| panic!("{e}"));
    let ca = std::fs::read_to_string(ca_path).unwrap_or_else(|e| panic!("{ca_path}: {e}"));
    let server_pid = child.id();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let bodies: Arc<Vec<Bytes>> = Arc::new((0..1000).map(|i| Bytes::from(review(i))).collect());
    let id_at: Arc<Vec<usize>> = Arc::new(
        bodies
            .iter()
            .map(|b| uid_digits(b).unwrap_or_else(|| panic!("no uid in the review")))
            .collect(),
    );
    stamp(Instant::now());
    let handler = handler_only(&bodies);
    let traced = rt.block_on(async move {
        // Warm up each connection (TLS handshake, allocators, caches).
        let mut conns = Vec::new();
        for _ in 0..connections {
            let mut c = common::Https::connect(addr, &ca).await;
            for i in 0..200 {
                let (s, b) = c.post_bytes("/validate", bodies[i % bodies.len()].clone()).await;
                assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
            }
            conns.push(Arc::new(tokio::sync::Mutex::new(c)));
        }
        println!(
            "webhook HTTPS, {}; review {} bytes; \
             server: own process, {} tokio workers; generator: own process, 1 thread + pacer, {connections} keep-alive connections",
            if std::env::var("HANDLER").is_ok_and(|h| h == "floor") {
                "HANDLER=floor (reads request.uid, answers allowed: no policies)"
            } else {
                "validating policies (requests/limits, no :latest, registry allow-list)"
            },
            bodies[0].len(),
            env("SERVER_THREADS", 2)
        );
        println!(
            "handler alone (decode + policies + encode, no HTTP/TLS): {:.1} us CPU per review \
             ({:.1} us when the whole Pod is decoded)",
            handler.0.as_secs_f64() * 1e6,
            handler.1.as_secs_f64() * 1e6
        );
        let me = std::process::id();
        let mut traced = Vec::new();
        let mut first_id = 1_000_000;
        for rate in rates {
            let load_before = load();
            let (s0, g0) = (cpu_time(server_pid), cpu_time(me));
            let t0 = cpu_ticks();
            let r = run_rate(&conns, &bodies, &id_at, first_id, rate, seconds).await;
            first_id += r.recs.len() as u64;
            let (s1, g1) = (cpu_time(server_pid), cpu_time(me));
            let t1 = cpu_ticks();
            let (busy, idle, steal) = (
                t1.0.saturating_sub(t0.0) as f64,
                t1.1.saturating_sub(t0.1) as f64,
                t1.2.saturating_sub(t0.2) as f64,
            );
            let all = (busy + idle + steal).max(1.0);
            let n = r.latencies.len().max(1) as f64;
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            let us_per = |d: Duration| d.as_secs_f64() * 1e6 / n;
            println!(
                "offered {rate}/s for {seconds}s: achieved {:.0}/s, {} reviews, {} not allowed/failed; loadavg before {load_before}, after {}",
                r.latencies.len() as f64 / r.elapsed.as_secs_f64(),
                r.latencies.len(),
                r.failures,
                load()
            );
            println!(
                "  latency from scheduled send: p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms",
                ms(percentile(&r.latencies, 0.50)),
                ms(percentile(&r.latencies, 0.90)),
                ms(percentile(&r.latencies, 0.99)),
                ms(percentile(&r.latencies, 0.999)),
                ms(percentile(&r.latencies, 1.0))
            );
            println!(
                "  CPU per review: server {:.1} us, generator {:.1} us; machine (all processes) busy {:.0} %, idle {:.0} %, steal {:.1} %",
                us_per(s1.saturating_sub(s0)),
                us_per(g1.saturating_sub(g0)),
                100.0 * busy / all,
                100.0 * idle / all,
                100.0 * steal / all
            );
            traced.push((rate, r.recs));
        }
        traced
    });
    drop(child.stdin.take());
    let _ = child.wait();
    if tracing_on() {
        report_trace(&traced);
    }
}

/// Overlapping or touching (from, to) spans merged into one.
fn merge_spans(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in spans {
        match out.last_mut() {
            Some((_, end)) if a <= *end => *end = (*end).max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Spans over 1 ms in which a process recorded no event (`events`) while
/// some work had been waiting on it (`waiting`: from when to when).
fn idle_while_waiting(mut events: Vec<u64>, mut waiting: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    const MS: u64 = 1_000_000;
    events.sort_unstable();
    waiting.sort_unstable();
    let mut out = Vec::new();
    for w in events.windows(2) {
        let (a, b) = (w[0], w[1]);
        if b - a <= MS {
            continue;
        }
        // The earliest moment in (a, b) from which some work waited until b.
        let lo = waiting.partition_point(|(from, _)| *from + 100 * MS < a);
        let hi = waiting.partition_point(|(from, _)| *from < b);
        let since = waiting[lo..hi]
            .iter()
            .filter(|(_, to)| *to >= b)
            .map(|(from, _)| (*from).max(a))
            .min();
        if let Some(since) = since
            && b - since > MS
        {
            out.push((since, b));
        }
    }
    out
}

/// Merge both sides' timestamps per review and say where the time of the
/// median reviews and of the slowest 1 % went.
fn report_trace(runs: &[(u64, Vec<Rec>)]) {
    let server_log = trace_path("webhook-trace-server.tsv");
    let text = std::fs::read_to_string(&server_log)
        .unwrap_or_else(|e| panic!("{}: {e}", server_log.display()));
    let server: std::collections::HashMap<u64, [u64; 3]> = text
        .lines()
        .filter_map(|l| {
            let v: Vec<u64> = l.split('\t').filter_map(|f| f.parse().ok()).collect();
            (v.len() == 4).then(|| (v[0], [v[1], v[2], v[3]]))
        })
        .collect();
    const PHASES: [&str; 8] = [
        "pacer late",
        "wait for a connection",
        "connection ready",
        "written -> handler start",
        "handler",
        "handler end -> headers",
        "headers -> body read",
        "total",
    ];
    for (rate, recs) in runs {
        // Phases in ns, per review; the server's stamps are on the same clock.
        let mut rows: Vec<[i64; 8]> = Vec::with_capacity(recs.len());
        // For the stall search: when each process did something, and when
        // work waited on it.
        let (mut gen_events, mut gen_waiting) = (Vec::new(), Vec::new());
        let (mut srv_events, mut srv_waiting) = (Vec::new(), Vec::new());
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let mut lines = String::from(
            "id\tconn\tworker\tscheduled\treleased\ttaken\tsent\thandler_start\thandler_end\thead\tdone\n",
        );
        for r in recs {
            let Some([worker, hs, he]) = server.get(&r.id).copied() else {
                continue;
            };
            let (sc, rl, tk, sn, hd, dn) = (
                stamp(r.scheduled),
                stamp(r.released),
                stamp(r.taken),
                stamp(r.sent),
                stamp(r.head),
                stamp(r.done),
            );
            lines.push_str(&format!(
                "{}\t{}\t{worker}\t{sc}\t{rl}\t{tk}\t{sn}\t{hs}\t{he}\t{hd}\t{dn}\n",
                r.id, r.conn
            ));
            gen_events.extend([tk, hd, dn]);
            gen_waiting.extend([(rl, tk), (he, hd)]);
            srv_events.extend([hs, he]);
            srv_waiting.push((sn, hs));
            if dn.saturating_sub(sc) > 2_000_000 {
                spans.push((sc, dn));
            }
            let d = |a: u64, b: u64| b as i64 - a as i64;
            rows.push([
                d(sc, rl),
                d(rl, tk),
                d(tk, sn),
                d(sn, hs),
                d(hs, he),
                d(he, hd),
                d(hd, dn),
                d(sc, dn),
            ]);
        }
        let out = trace_path(&format!("webhook-trace-{rate}.tsv"));
        let _ = std::fs::write(&out, lines);
        // Stalls: the pacer (a thread doing nothing but sleep and send) woke
        // over 1 ms late; or a process did nothing for over 1 ms while work
        // waited on it (the generator: a released review no connection task
        // took, an answer sent but not read; the server: a request written
        // whose handler had not started; the latter includes the
        // generator's own write, so it is an upper bound).
        let pacer: Vec<(u64, u64)> = recs
            .iter()
            .filter(|r| r.released - r.scheduled > Duration::from_millis(1))
            .map(|r| (stamp(r.scheduled), stamp(r.released)))
            .collect();
        for (name, stalls) in [
            ("pacer", merge_spans(pacer)),
            ("generator", idle_while_waiting(gen_events, gen_waiting)),
            ("server", idle_while_waiting(srv_events, srv_waiting)),
        ] {
            let held = spans
                .iter()
                .filter(|(from, to)| stalls.iter().any(|(a, b)| a < to && b > from))
                .count();
            println!(
                "trace {rate}/s: {name} stalls over 1 ms: {} (longest {:.1} ms, {:.1} ms in all); \
                 {held} of the {} reviews over 2 ms overlap one",
                stalls.len(),
                stalls.iter().map(|(a, b)| b - a).max().unwrap_or(0) as f64 / 1e6,
                stalls.iter().map(|(a, b)| b - a).sum::<u64>() as f64 / 1e6,
                spans.len()
            );
        }
        rows.sort_unstable_by_key(|r| r[7]);
        let n = rows.len();
        if n == 0 {
            println!("trace {rate}/s: no review matched the server's log");
            continue;
        }
        let mean = |rs: &[[i64; 8]], k: usize| {
            rs.iter().map(|r| r[k] as f64).sum::<f64>() / rs.len().max(1) as f64 / 1000.0
        };
        let median = &rows[n * 45 / 100..(n * 55 / 100).max(n * 45 / 100 + 1)];
        let slow = &rows[n * 99 / 100..];
        println!(
            "trace {rate}/s ({n} reviews matched; merged log {}): mean us per phase",
            out.display()
        );
        println!("  {:<26} {:>12} {:>14}", "phase", "p45-p55", "slowest 1 %");
        for (k, name) in PHASES.iter().enumerate() {
            println!(
                "  {name:<26} {:>12.1} {:>14.1}",
                mean(median, k),
                mean(slow, k)
            );
        }
    }
}
