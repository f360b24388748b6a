//! In-process framework benchmark, mirroring kube-scheduler's scheduler_perf
//! workloads without an API server: nodes 4 CPU / 32 Gi / 110 pods, pods
//! requesting 100m / 500 Mi; the default profile with a no-op binder (binding
//! cycles still run asynchronously and report back).
//!
//! `cargo bench -p kubeforge-scheduler --bench framework [basic] [spread]
//! [affinity] [antiaffinity] [podaffinity] [preemption] [preemption-starts] [memory]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use kubeforge_scheduler::framework::{BindPlugin, CycleState, Plugin, PodInfo, Registry, Status};
use kubeforge_scheduler::{
    CycleOutcome, Input, SchedulerBuilder, SchedulerConfiguration, SchedulerCore,
};
use serde_json::json;

// The allocator of the `kubeforge` binary that runs this scheduler, so the
// figures are the binary's (glibc malloc's free-list work was ~8 % of a
// SchedulingBasic cycle).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct NoopBinder;
impl Plugin for NoopBinder {
    fn name(&self) -> &str {
        "NoopBinder"
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}
impl BindPlugin for NoopBinder {
    fn bind(&self, _: Arc<CycleState>, _: Arc<PodInfo>, _: String) -> BoxFuture<'static, Status> {
        Box::pin(async { Status::success() })
    }
}

fn node(i: usize, zones: usize) -> Arc<Node> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("node-{i}"), "labels": {
                "kubernetes.io/hostname": format!("node-{i}"),
                "topology.kubernetes.io/zone": format!("zone-{}", i % zones),
            }},
            "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
                       "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
        }))
        .expect("node"),
    )
}

fn pod(i: usize, extra: &serde_json::Value, priority: i32) -> Arc<Pod> {
    let mut spec = json!({
        "schedulerName": "default-scheduler",
        "priority": priority,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]
    });
    if let Some(o) = extra.as_object() {
        for (k, v) in o {
            spec[k] = v.clone();
        }
    }
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("pod-{i}"), "namespace": "default", "uid": format!("uid-{i}"),
                         "labels": {"app": "bench", "color": if i.is_multiple_of(2) { "red" } else { "blue" }}},
            "spec": spec
        }))
        .expect("pod"),
    )
}

fn core(rt: &tokio::runtime::Runtime) -> SchedulerCore {
    let cfg = SchedulerConfiguration::from_yaml(
        "profiles:\n- schedulerName: default-scheduler\n  plugins:\n    bind:\n      disabled: [{name: '*'}]\n      enabled: [{name: NoopBinder}]\n",
    )
    .expect("config");
    let mut reg = Registry::new();
    reg.register("NoopBinder", |_, _| {
        Ok(Arc::new(NoopBinder) as Arc<dyn Plugin>)
    })
    .expect("register");
    SchedulerBuilder::without_client()
        .config(cfg)
        .plugins(reg)
        .build_core(rt.handle().clone())
        .expect("core")
}

/// CPU time of every thread of this process so far (ns, from
/// `/proc/self/task/*/schedstat`): the figure that does not depend on how
/// busy the shared machine is.
fn cpu_ns() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

struct Result {
    pods_per_sec: f64,
    cpu_us_per_pod: f64,
    p50: Duration,
    p99: Duration,
    scheduled: usize,
    unschedulable: usize,
}

/// Measure scheduling `pods` (already queued) until every one is assumed
/// and its binding cycle reported.
fn measure(core: &mut SchedulerCore, n: usize) -> Result {
    let mut lat = Vec::with_capacity(n);
    let mut scheduled = 0;
    let mut unschedulable = 0;
    let cpu0 = cpu_ns();
    let start = Instant::now();
    loop {
        let t = Instant::now();
        match core.schedule_one() {
            Some(CycleOutcome::Assumed(_)) => scheduled += 1,
            Some(CycleOutcome::Unschedulable(_)) => unschedulable += 1,
            Some(_) => {}
            None => break,
        }
        lat.push(t.elapsed());
        if lat.len() % 256 == 0 {
            core.drain_inputs();
        }
    }
    // wait for the binding cycles to report
    while core.metrics().attempts("scheduled") < scheduled as u64 {
        core.drain_inputs();
        std::thread::sleep(Duration::from_micros(200));
    }
    let elapsed = start.elapsed();
    let cpu = cpu_ns().saturating_sub(cpu0);
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Result {
        pods_per_sec: scheduled as f64 / elapsed.as_secs_f64(),
        cpu_us_per_pod: cpu as f64 / 1000.0 / (scheduled + unschedulable).max(1) as f64,
        p50: pct(0.5),
        p99: pct(0.99),
        scheduled,
        unschedulable,
    }
}

#[allow(clippy::too_many_arguments)]
fn workload(
    rt: &tokio::runtime::Runtime,
    name: &str,
    nodes: usize,
    init: usize,
    pods: usize,
    zones: usize,
    init_spec: serde_json::Value,
    spec: serde_json::Value,
    floor: f64,
) {
    let mut c = core(rt);
    for i in 0..nodes {
        c.handle_input(Input::NodeApply(node(i, zones)));
    }
    // init pods, scheduled first (not measured)
    for i in 0..init {
        c.handle_input(Input::PodApply(pod(1_000_000 + i, &init_spec, 0)));
    }
    let _ = measure(&mut c, init);
    for i in 0..pods {
        c.handle_input(Input::PodApply(pod(
            i,
            &spec,
            if name == "Preemption" { 100 } else { 0 },
        )));
    }
    let r = measure(&mut c, pods);
    println!(
        "{name:<16} {nodes} nodes, {init} init + {pods} pods: {:>8.0} pods/s, {:.1} µs CPU/pod (p50 {:?}, p99 {:?}; {} scheduled, {} unschedulable; load {}) — kube-scheduler CI floor {floor}, 10× = {}",
        r.pods_per_sec,
        r.cpu_us_per_pod,
        r.p50,
        r.p99,
        r.scheduled,
        r.unschedulable,
        load(),
        floor * 10.0
    );
}

/// 500 nodes filled with low-priority pods, then high-priority pods preempt
/// (scheduler_perf's PreemptionBasic). With `distinct_starts` every
/// low-priority pod has its own creation time, as in a real cluster, so the
/// dry runs cannot stop at the first candidate (ties on every rule).
fn preemption(rt: &tokio::runtime::Runtime, scenario: &str, distinct_starts: bool) {
    let mut c = core(rt);
    for i in 0..500 {
        c.handle_input(Input::NodeApply(node(i, 10)));
    }
    let big = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "900m", "memory": "1Gi"}}}]});
    for i in 0..2000 {
        let mut p = pod(1_000_000 + i, &big, 0);
        if distinct_starts {
            let t = jiff::Timestamp::from_second(1_700_000_000 + i as i64).expect("timestamp");
            Arc::make_mut(&mut p).metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t));
        }
        c.handle_input(Input::PodApply(p));
    }
    let _ = measure(&mut c, 2000);
    for i in 0..500 {
        c.handle_input(Input::PodApply(pod(i, &big, 100)));
    }
    let cpu0 = cpu_ns();
    let start = Instant::now();
    let mut nominated = 0;
    while let Some(o) = c.schedule_one() {
        if matches!(o, CycleOutcome::Unschedulable(_)) {
            nominated += 1;
        }
    }
    let el = start.elapsed();
    let cpu = cpu_ns().saturating_sub(cpu0);
    println!(
        "{scenario:<18} 500 nodes full, 500 high-priority pods: {:>8.0} preemption cycles/s, {:.1} µs CPU/cycle ({nominated} nominated; load {}) — kube-scheduler CI floor 570, 10× = 5700",
        nominated as f64 / el.as_secs_f64(),
        cpu as f64 / 1000.0 / nominated.max(1) as f64,
        load()
    );
}

fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
            })
        })
        .unwrap_or(0.0)
        / 1024.0
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |w: &str| args.is_empty() || args.iter().any(|a| a == w);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    if want("basic") {
        workload(
            &rt,
            "SchedulingBasic",
            5000,
            1000,
            10_000,
            10,
            json!({}),
            json!({}),
            680.0,
        );
    }
    if want("spread") {
        let c = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "bench"}}}]});
        workload(
            &rt,
            "TopologySpread",
            5000,
            1000,
            5000,
            10,
            c.clone(),
            c,
            460.0,
        );
    }
    if want("affinity") {
        let c = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-0", "zone-1"]}]}]}}}});
        workload(
            &rt,
            "NodeAffinity",
            5000,
            1000,
            5000,
            10,
            json!({}),
            c,
            220.0,
        );
    }
    if want("antiaffinity") {
        let c = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"color": "red"}}}]}}});
        workload(
            &rt,
            "PodAntiAffinity",
            5000,
            1000,
            1000,
            10,
            c.clone(),
            c,
            60.0,
        );
    }
    if want("podaffinity") {
        let c = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"color": "red"}}}]}}});
        workload(&rt, "PodAffinity", 5000, 1000, 5000, 10, c.clone(), c, 35.0);
    }
    for (scenario, distinct_starts) in [("preemption", false), ("preemption-starts", true)] {
        if want(scenario) {
            preemption(&rt, scenario, distinct_starts);
        }
    }
    if want("memory") {
        let before = rss_mb();
        let mut c = core(&rt);
        for i in 0..5000 {
            c.handle_input(Input::NodeApply(node(i, 10)));
        }
        for i in 0..150_000 {
            let p = pod(i, &json!({"nodeName": format!("node-{}", i % 5000)}), 0);
            c.handle_input(Input::PodApply(p));
        }
        println!(
            "Memory           5000 nodes + 150000 bound pods in the cache: RSS grew {:.0} MiB ({} pods cached)",
            rss_mb() - before,
            c.cache().pod_count()
        );
        // scheduling attempts with those 150,000 pods in place
        for i in 0..5000 {
            c.handle_input(Input::PodApply(pod(200_000 + i, &json!({}), 0)));
        }
        let r = measure(&mut c, 5000);
        println!(
            "Latency          5000 nodes, 150000 pods bound, 5000 more scheduled: {:>8.0} pods/s, {:.1} µs CPU/pod, attempt p50 {:?}, p99 {:?} ({} scheduled; load {})",
            r.pods_per_sec,
            r.cpu_us_per_pod,
            r.p50,
            r.p99,
            r.scheduled,
            load()
        );
    }
}
