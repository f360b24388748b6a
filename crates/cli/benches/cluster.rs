//! A whole cluster at scale, and a rollout's latency, against the real
//! `kubeforge up` process (durable store, fsync on) driven over loopback.
//!
//! `scale`: `kubeforge up --nodes $KF_NODES` (default 5000), then
//! `$KF_PODS` pods (default 150000) created through Deployments of
//! `$KF_REPLICAS` replicas (default 1000), one Deployment created every
//! `replicas / $KF_RATE` seconds (default 1000 pods/s). Reports the time
//! until every pod is Running, the pod startup latency (a pod's first
//! appearance in a watch → Running in the watch, the SLO's create →
//! Running; p50/p99), the achieved creation rate and the `up` process's
//! peak RSS (VmHWM), its CPU time per pod (user + system, from
//! `/proc/<pid>/stat`) and the pods' stored size (JSON as served, with
//! managedFields).
//!
//! `$KF_BIN` runs that kubeforge binary instead of the one built with the
//! bench (to compare two builds in one sitting).
//!
//! For a per-component breakdown: `$KF_UP_ARGS` adds arguments to `up`
//! (e.g. `--no-workload-controllers --no-scheduler`); `KF_BARE=1` creates
//! the pods directly (no Deployments, so no workload controller is
//! needed), `KF_BOUND=1` with them already bound round-robin to the nodes
//! (no scheduler needed).
//!
//! `rollout`: `kubeforge up --pod-start-delay 0 --pod-exit-delay 0
//! --no-fsync` (`KF_FSYNC=1`: with fsync) and a 3-replica Deployment from
//! `kubectl create deployment` to `kubectl rollout status` success (the
//! real kubectl, including its own start-up), `$KF_ROLLOUTS` times
//! (default 20).
//!
//! ```sh
//! CARGO_TARGET_DIR=/work/bench-target cargo bench -p kubeforge --bench cluster            # both
//! KF_BENCH=scale KF_NODES=500 KF_PODS=15000 cargo bench -p kubeforge --bench cluster       # smaller
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Up {
    child: Child,
    dir: PathBuf,
    kubeconfig: PathBuf,
    url: String,
}

impl Up {
    fn start(tag: &str, args: &[&str]) -> Up {
        let dir = std::env::temp_dir().join(format!(
            "kubeforge-cluster-bench-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        // `$KF_BIN` runs another kubeforge binary (an A/B of two builds).
        let bin =
            std::env::var("KF_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kubeforge").into());
        let mut child = Command::new(bin)
            .args([
                "up",
                "--insecure-http",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(&dir)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn kubeforge");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let (mut url, mut kubeconfig) = (None, None);
        for line in lines.by_ref() {
            let line = line.expect("stdout");
            if let Some(u) = line.trim().strip_prefix("API server: ") {
                url = Some(u.to_string());
            }
            if let Some(k) = line.strip_prefix("export KUBECONFIG=") {
                kubeconfig = Some(PathBuf::from(k));
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Up {
            child,
            dir,
            kubeconfig: kubeconfig.expect("export line"),
            url: url.expect("url"),
        }
    }

    fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    }

    /// User + system CPU seconds used so far.
    fn cpu_secs(&self) -> f64 {
        cpu_secs_of(&self.child.id().to_string())
    }

    /// (VmRSS, VmHWM) in MiB.
    fn rss_mib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
                / 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-INT")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the scale bench's own watch reads of a pod (uid, node, phase):
/// the measuring client decodes only that, so that it takes as little as
/// possible of the two cores it shares with the `up` it measures.
#[derive(Clone, Debug, serde::Deserialize)]
struct Watched {
    #[serde(deserialize_with = "watched_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: WatchedSpec,
    #[serde(default)]
    status: WatchedStatus,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
struct WatchedSpec {
    #[serde(rename = "nodeName")]
    node_name: Option<String>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
struct WatchedStatus {
    phase: Option<String>,
}

/// The metadata kept: identity and the resourceVersion the watcher resumes from.
fn watched_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct M {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
    }
    let m = <M as serde::Deserialize>::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        ..ObjectMeta::default()
    })
}

impl kube::Resource for Watched {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// CPU seconds (user + system) of process `pid` ("self" for this one).
fn cpu_secs_of(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which ends with ')'): utime and
    // stime are the 12th and 13th, in clock ticks (100 per second).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
            },
        },
    }))
    .expect("deployment")
}

fn bare_pod(name: &str, node: Option<String>) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": "bare"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
        },
    }))
    .expect("pod")
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

async fn scale() {
    let nodes = env("KF_NODES", 5000);
    let pods = env("KF_PODS", 150_000);
    let replicas = env("KF_REPLICAS", 1000).max(1);
    let rate = env("KF_RATE", 1000).max(1);
    let t0 = Instant::now();
    let nodes_arg = nodes.to_string();
    let extra = std::env::var("KF_UP_ARGS").unwrap_or_default();
    let mut args = vec!["--nodes", &nodes_arg];
    args.extend(extra.split_whitespace());
    let bare = env("KF_BARE", 0) == 1;
    let bound = env("KF_BOUND", 0) == 1;
    let up = Up::start("scale", &args);
    let registered = t0.elapsed();
    let client = up.client();
    println!(
        "scale: {nodes} nodes registered, `up` ready in {:.1} s; RSS {:?} MiB",
        registered.as_secs_f64(),
        up.rss_mib()
    );
    let cpu0 = up.cpu_secs();
    let own0 = cpu_secs_of("self");
    let rss0 = up.rss_mib().0;

    // Watch every pod: first appearance → Running.
    // (uid, bound to a node, Running, when seen)
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, bool, bool, Instant)>();
    let api: Api<Watched> = Api::all(client.clone());
    let watch = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev else {
                continue;
            };
            let running = p.status.phase.as_deref() == Some("Running");
            let bound = p.spec.node_name.is_some();
            let uid = p.metadata.uid.unwrap_or_default();
            if tx.send((uid, bound, running, Instant::now())).is_err() {
                break;
            }
        }
    });

    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let pod_api: Api<Pod> = Api::default_namespaced(client.clone());
    let count = pods.div_ceil(replicas);
    let every = Duration::from_secs_f64(replicas as f64 / rate as f64);
    let start = Instant::now();
    let creator = tokio::spawn(async move {
        for i in 0..count {
            let n = replicas.min(pods - i * replicas) as i32;
            let at = start + every.mul_f64(i as f64);
            tokio::time::sleep_until(at.into()).await;
            if bare {
                // `n` pods spread evenly over this slot, 20 at a time.
                let step = every.div_f64(f64::from(n).max(1.0) / 20.0);
                for chunk in 0..(n as u64).div_ceil(20) {
                    tokio::time::sleep_until((at + step.mul_f64(chunk as f64)).into()).await;
                    let first = i * replicas + chunk * 20;
                    let last = (first + 20).min(i * replicas + n as u64);
                    let creates = (first..last).map(|j| {
                        let node = bound.then(|| format!("node-{}", j % nodes));
                        let pod = bare_pod(&format!("bare-{j}"), node);
                        let api = pod_api.clone();
                        async move { api.create(&PostParams::default(), &pod).await }
                    });
                    for r in futures::future::join_all(creates).await {
                        if let Err(e) = r {
                            eprintln!("create pod: {e}");
                        }
                    }
                }
                continue;
            }
            if let Err(e) = deployments
                .create(&PostParams::default(), &deployment(&format!("load-{i}"), n))
                .await
            {
                eprintln!("create load-{i}: {e}");
            }
        }
    });

    // uid → (first appearance, first seen bound), taken once the pod is
    // seen Running.
    let mut first_seen: HashMap<String, Option<(Instant, Option<Instant>)>> = HashMap::new();
    let mut latencies = Vec::with_capacity(pods as usize);
    // The two stages: created → bound (scheduling), bound → Running (node).
    let mut to_bound = Vec::with_capacity(pods as usize);
    let mut to_running = Vec::with_capacity(pods as usize);
    let mut peak_hwm = 0;
    let mut last_report = Instant::now();
    let limit = Duration::from_secs(env("KF_TIMEOUT", 3600));
    while (latencies.len() as u64) < pods {
        let next = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await;
        if let Ok(Some((uid, bound, running, at))) = next {
            let seen = first_seen.entry(uid).or_insert(Some((at, None)));
            if let Some((_, b)) = seen.as_mut()
                && bound
                && b.is_none()
            {
                *b = Some(at);
            }
            if running && let Some((t, b)) = seen.take() {
                latencies.push(at - t);
                let b = b.unwrap_or(at);
                to_bound.push(b - t);
                to_running.push(at - b);
            }
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            let (rss, hwm) = up.rss_mib();
            peak_hwm = peak_hwm.max(hwm);
            println!(
                "  {:>6.0} s: {} pods Running; RSS {rss} MiB (peak {hwm} MiB)",
                start.elapsed().as_secs_f64(),
                latencies.len()
            );
            last_report = Instant::now();
        }
        if start.elapsed() > limit {
            println!("  gave up after {:?}", limit);
            break;
        }
    }
    let all_running = start.elapsed();
    let _ = creator.await;
    watch.abort();
    let (rss, hwm) = up.rss_mib();
    peak_hwm = peak_hwm.max(hwm);
    latencies.sort();
    let created_in = every.mul_f64(count.saturating_sub(1) as f64);
    println!(
        "scale: {} of {pods} pods Running on {nodes} nodes in {:.1} s (creation scheduled over {:.1} s = {rate} pods/s)",
        latencies.len(),
        all_running.as_secs_f64(),
        created_in.as_secs_f64()
    );
    println!(
        "scale: pod startup latency p50 {:.2} s, p90 {:.2} s, p99 {:.2} s, max {:.2} s",
        pct(&latencies, 0.5).as_secs_f64(),
        pct(&latencies, 0.9).as_secs_f64(),
        pct(&latencies, 0.99).as_secs_f64(),
        pct(&latencies, 1.0).as_secs_f64()
    );
    to_bound.sort();
    to_running.sort();
    println!(
        "scale: by stage: created → bound p50 {:.2} s, p99 {:.2} s; bound → Running p50 {:.2} s, p99 {:.2} s",
        pct(&to_bound, 0.5).as_secs_f64(),
        pct(&to_bound, 0.99).as_secs_f64(),
        pct(&to_running, 0.5).as_secs_f64(),
        pct(&to_running, 0.99).as_secs_f64()
    );
    println!("scale: kubeforge up RSS {rss} MiB now, peak {peak_hwm} MiB");
    let cpu = up.cpu_secs() - cpu0;
    let n = latencies.len().max(1) as f64;
    println!(
        "scale: per pod: RSS growth {:.1} KiB (now − after start-up), CPU of `up` {:.2} ms ({cpu:.1} s in all, from after start-up)",
        (rss.saturating_sub(rss0) as f64) * 1024.0 / n,
        cpu * 1000.0 / n
    );
    println!(
        "scale: the bench's own CPU (creating and watching): {:.1} s ({:.2} ms per pod)",
        cpu_secs_of("self") - own0,
        (cpu_secs_of("self") - own0) * 1000.0 / n
    );
    let all: Api<Pod> = Api::all(client.clone());
    let (mut bytes, mut managed, mut listed) = (0usize, 0usize, 0usize);
    let mut lp = kube::api::ListParams::default().limit(5000);
    loop {
        let Ok(page) = all.list(&lp).await else { break };
        for p in &page.items {
            bytes += serde_json::to_vec(p).map(|v| v.len()).unwrap_or(0);
            managed += serde_json::to_vec(&p.metadata.managed_fields)
                .map(|v| v.len())
                .unwrap_or(0);
            listed += 1;
        }
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp.continue_token = Some(c),
            _ => break,
        }
    }
    println!(
        "scale: stored pods: {listed}, {:.2} KiB JSON each as served, of which managedFields {:.2} KiB",
        bytes as f64 / 1024.0 / listed.max(1) as f64,
        managed as f64 / 1024.0 / listed.max(1) as f64
    );
}

fn rollout() {
    let runs = env("KF_ROLLOUTS", 20);
    // `KF_FSYNC=1`: with the store's fsync (and `up`'s default commit gap).
    let mut args = vec!["--pod-start-delay", "0", "--pod-exit-delay", "0"];
    if env("KF_FSYNC", 0) != 1 {
        args.push("--no-fsync");
    }
    let up = Up::start("rollout", &args);
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &up.kubeconfig)
            .env("KUBECACHEDIR", up.dir.join("cache"))
            .output()
            .expect("kubectl must be on PATH");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Warm kubectl's discovery cache, as a user's second command would.
    kubectl(&["get", "deploy"]);
    let mut times = Vec::new();
    for i in 0..runs {
        let name = format!("web-{i}");
        let t = Instant::now();
        kubectl(&[
            "create",
            "deployment",
            &name,
            "--image=nginx",
            "--replicas=3",
        ]);
        kubectl(&[
            "rollout",
            "status",
            &format!("deploy/{name}"),
            "--timeout=60s",
        ]);
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "rollout: 3-replica Deployment, kubectl create → rollout status success, zero delays ({runs} runs): p50 {:.0} ms, p99 {:.0} ms, min {:.0} ms",
        pct(&times, 0.5).as_secs_f64() * 1000.0,
        pct(&times, 0.99).as_secs_f64() * 1000.0,
        times.first().copied().unwrap_or_default().as_secs_f64() * 1000.0
    );
}

fn main() {
    let which = std::env::var("KF_BENCH").unwrap_or_else(|_| "all".into());
    if which == "all" || which == "rollout" {
        rollout();
    }
    if which == "all" || which == "scale" {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(scale());
    }
}
