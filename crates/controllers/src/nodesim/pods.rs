//! The simulated kubelet's pod loop: one watch on every bound pod
//! (`spec.nodeName!=`), kept to the simulator's nodes; a compact state per
//! pod; one timer heap holding every pod's next step; writes handed to the
//! worker pool. No task per pod.
//!
//! A pod's life: seen bound (Waiting: IP allocated, start timer) → Running
//! (status written; Job pods get a completion timer) → Finished
//! (Succeeded/Failed, IP released); at any point a `deletionTimestamp`
//! schedules the final DELETE (gracePeriodSeconds=0, uid precondition) at
//! the end of the grace period (or after [`Delays::exit`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::nodes::{fnv, now_time};
use super::pool::Write;
use super::sim_pod::{SimContainer, SimPod};
use super::{ANNOTATION_DURATION, ANNOTATION_FAIL, ANNOTATION_READY, Delays, Shared};

/// How often a step on a stopped node is retried.
const STOPPED_RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Waiting,
    Running,
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    Start,
    Complete,
    Delete,
}

struct Container {
    name: Box<str>,
    image: Box<str>,
}

struct PodState {
    namespace: Box<str>,
    name: Box<str>,
    uid: Box<str>,
    node: u32,
    ip: Option<u32>,
    stage: Stage,
    started: Option<Box<str>>,
    ready_desired: bool,
    ready_written: bool,
    restarts: u32,
    /// Bumped to invalidate this pod's pending timers.
    generation: u32,
    deleting: bool,
    /// Runs for this long, then finishes (Job pods and annotated ones).
    run_for: Option<Duration>,
    fail: bool,
    on_failure: bool,
    containers: Box<[Container]>,
    init_containers: Box<[Container]>,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: Instant,
    seq: u64,
    key: Arc<str>,
    generation: u32,
    action: Action,
}

/// Per-node pod IP allocation: a bitmap over the node's podCIDR.
struct Ips {
    base: u32,
    size: u32,
    used: Vec<u64>,
    next: u32,
}

impl Ips {
    fn new((net, prefix): (Ipv4Addr, u8)) -> Ips {
        // Cap the bitmap: a node never runs more than 65,536 pods.
        let size = (1u64 << (32 - u32::from(prefix))).min(65_536) as u32;
        Ips {
            base: u32::from(net),
            size,
            used: vec![0; size.div_ceil(64) as usize],
            next: 2,
        }
    }

    /// Offsets 2 … size-2 (.0 is the network, .1 the gateway, the last the broadcast).
    fn allocate(&mut self) -> Option<u32> {
        let span = self.size.saturating_sub(3);
        for k in 0..span {
            let off = 2 + (self.next - 2 + k) % span;
            let (w, b) = ((off / 64) as usize, off % 64);
            if self.used[w] & (1 << b) == 0 {
                self.used[w] |= 1 << b;
                self.next = off + 1;
                return Some(self.base + off);
            }
        }
        None
    }

    fn mark(&mut self, ip: u32) {
        if let Some(off) = ip.checked_sub(self.base).filter(|o| *o < self.size) {
            self.used[(off / 64) as usize] |= 1 << (off % 64);
        }
    }

    fn release(&mut self, ip: u32) {
        if let Some(off) = ip.checked_sub(self.base).filter(|o| *o < self.size) {
            self.used[(off / 64) as usize] &= !(1 << (off % 64));
        }
    }
}

struct Core {
    shared: Arc<Shared>,
    delays: Delays,
    pods: HashMap<Arc<str>, PodState>,
    ips: Vec<Ips>,
    timers: BinaryHeap<Reverse<Timer>>,
    seq: u64,
    writes: super::pool::Writes,
    /// Keys seen during a watch re-list (to forget pods deleted meanwhile).
    relist: Option<HashSet<Arc<str>>>,
}

/// Run the pod loop until `stop`.
pub(crate) async fn run(
    client: Client,
    shared: Arc<Shared>,
    delays: Delays,
    writes: super::pool::Writes,
    mut stop: watch::Receiver<bool>,
) {
    let ips = shared.nodes.iter().map(|n| Ips::new(n.pod_cidr)).collect();
    let mut core = Core {
        shared,
        delays,
        pods: HashMap::new(),
        ips,
        timers: BinaryHeap::new(),
        seq: 0,
        writes,
        relist: None,
    };
    let mut events = watcher::watcher(
        Api::<SimPod>::all(client),
        watcher::Config::default()
            .fields("spec.nodeName!=")
            .page_size(1000),
    )
    .boxed();
    loop {
        let next = core.timers.peek().map(|Reverse(t)| t.at);
        tokio::select! {
            biased;
            () = super::stopped(&mut stop) => break,
            () = sleep_until(next) => core.fire_due().await,
            ev = events.next() => match ev {
                Some(Ok(ev)) => core.handle(ev).await,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "node simulator: pod watch error");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                None => break,
            },
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Core {
    fn schedule(&mut self, key: &Arc<str>, after: Duration, action: Action) {
        let Some(p) = self.pods.get(key) else { return };
        self.seq += 1;
        self.timers.push(Reverse(Timer {
            at: Instant::now() + after,
            seq: self.seq,
            key: key.clone(),
            generation: p.generation,
            action,
        }));
    }

    async fn handle(&mut self, ev: watcher::Event<SimPod>) {
        match ev {
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(key) = self.apply(pod).await
                    && let Some(seen) = self.relist.as_mut()
                {
                    seen.insert(key);
                }
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist.take() {
                    let gone: Vec<Arc<str>> = self
                        .pods
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        self.forget(&k);
                    }
                }
            }
            watcher::Event::Apply(pod) => {
                self.apply(pod).await;
            }
            watcher::Event::Delete(pod) => {
                let key = key_of(&pod);
                if let Some(p) = self.pods.get(&*key)
                    && pod.metadata.uid.as_deref() == Some(&*p.uid)
                {
                    self.forget(&key);
                }
            }
        }
    }

    fn forget(&mut self, key: &str) {
        if let Some(p) = self.pods.remove(key)
            && let Some(ip) = p.ip
        {
            self.ips[p.node as usize].release(ip);
        }
    }

    /// Take in a pod's new state; returns its key when it is ours.
    async fn apply(&mut self, pod: SimPod) -> Option<Arc<str>> {
        let node_name = pod.spec.as_ref()?.node_name.as_deref()?;
        let node = *self.shared.index.get(node_name)?;
        let key: Arc<str> = Arc::from(key_of(&pod));
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        // A new pod of the same name replaced one we knew.
        if self.pods.get(&key).is_some_and(|p| &*p.uid != uid) {
            self.forget(&key);
        }
        let annotations = pod.metadata.annotations.as_ref();
        let ann = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
        let ready_desired = ann(ANNOTATION_READY) != Some("false");
        let fail = ann(ANNOTATION_FAIL) == Some("true");
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if !self.pods.contains_key(&key) {
            let state = self.adopt(&pod, node, uid, ready_desired, fail);
            let stage = state.stage;
            let run_for = state.run_for;
            self.pods.insert(key.clone(), state);
            match stage {
                Stage::Waiting if !deleting => {
                    self.schedule(&key, self.delays.start, Action::Start)
                }
                Stage::Running => {
                    if let Some(d) = run_for {
                        self.schedule(&key, d, Action::Complete);
                    }
                }
                _ => {}
            }
        }
        let p = self.pods.get_mut(&key)?;
        p.fail = fail;
        p.ready_desired = ready_desired;
        if deleting && !p.deleting {
            p.deleting = true;
            let grace = pod
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|t| {
                    let left = t.0.as_second() - k8s_openapi::jiff::Timestamp::now().as_second();
                    Duration::from_secs(u64::try_from(left).unwrap_or(0))
                })
                .unwrap_or_default();
            let after = match self.delays.exit {
                Some(exit) => exit.min(grace),
                None => grace,
            };
            self.schedule(&key, after, Action::Delete);
        } else if p.stage == Stage::Running && !p.deleting && p.ready_desired != p.ready_written {
            // Readiness flipped by the annotation.
            p.ready_written = p.ready_desired;
            if !self.shared.stopped(p.node) {
                let body = self.running_status(&key);
                self.write_status(&key, body).await;
            }
        }
        Some(key)
    }

    /// A pod seen for the first time: Waiting, or (after a restart of the
    /// simulator) the stage its status shows.
    fn adopt(&mut self, pod: &SimPod, node: u32, uid: &str, ready: bool, fail: bool) -> PodState {
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let containers = |list: Option<&Vec<SimContainer>>| -> Box<[Container]> {
            list.map(|l| {
                l.iter()
                    .map(|c| Container {
                        name: c.name.as_str().into(),
                        image: c.image.as_deref().unwrap_or_default().into(),
                    })
                    .collect()
            })
            .unwrap_or_default()
        };
        let restart_policy = spec
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always");
        let owned_by_job = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Job" && o.controller == Some(true));
        let annotated = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_DURATION))
            .and_then(|d| super::parse_duration(d));
        let run_for = if restart_policy == "Always" {
            None
        } else if let Some(d) = annotated {
            Some(d)
        } else if owned_by_job {
            Some(self.delays.complete)
        } else {
            None
        };
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        let ip = status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
            .map(u32::from);
        let stage = match (phase, ip) {
            ("Running", Some(_)) => Stage::Running,
            ("Succeeded" | "Failed", _) => Stage::Finished,
            _ => Stage::Waiting,
        };
        let ip = match stage {
            Stage::Running => {
                if let Some(ip) = ip {
                    self.ips[node as usize].mark(ip);
                }
                ip
            }
            _ => None,
        };
        let restarts = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .map(|c| u32::try_from(c.restart_count).unwrap_or(0))
            .unwrap_or(0);
        let ready_now = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        PodState {
            namespace: pod
                .metadata
                .namespace
                .as_deref()
                .unwrap_or("default")
                .into(),
            name: pod.metadata.name.as_deref().unwrap_or_default().into(),
            uid: uid.into(),
            node,
            ip,
            stage,
            started: status
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0.to_string().into()),
            ready_desired: ready,
            ready_written: if stage == Stage::Running {
                ready_now
            } else {
                ready
            },
            restarts,
            generation: 0,
            deleting: false,
            run_for,
            fail,
            on_failure: restart_policy == "OnFailure",
            containers: containers(spec.map(|s| &s.containers)),
            init_containers: containers(spec.and_then(|s| s.init_containers.as_ref())),
        }
    }

    async fn fire_due(&mut self) {
        let now = Instant::now();
        let mut batch = Vec::new();
        while let Some(Reverse(t)) = self.timers.peek() {
            if t.at > now || batch.len() >= 4096 {
                break;
            }
            if let Some(Reverse(t)) = self.timers.pop() {
                batch.push(t);
            }
        }
        for t in batch {
            self.fire(t).await;
        }
    }

    async fn fire(&mut self, t: Timer) {
        let Some(p) = self.pods.get(&t.key) else {
            return;
        };
        if p.generation != t.generation {
            return;
        }
        if self.shared.stopped(p.node) {
            // The node's kubelet is "down": try again later.
            self.schedule(&t.key, STOPPED_RETRY, t.action);
            return;
        }
        match t.action {
            Action::Start => {
                if p.stage != Stage::Waiting || p.deleting {
                    return;
                }
                let node = p.node as usize;
                let Some(ip) = self.ips[node].allocate() else {
                    tracing::warn!(pod = %t.key, node = %self.shared.nodes[node].name, "node simulator: podCIDR exhausted; retrying");
                    self.schedule(&t.key, STOPPED_RETRY, Action::Start);
                    return;
                };
                let Some(p) = self.pods.get_mut(&t.key) else {
                    return;
                };
                p.ip = Some(ip);
                p.stage = Stage::Running;
                p.started = Some(now_time().into());
                p.ready_written = p.ready_desired;
                let run_for = p.run_for;
                let body = self.running_status(&t.key);
                self.shared
                    .stats
                    .pods_started
                    .fetch_add(1, Ordering::Relaxed);
                self.write_status(&t.key, body).await;
                if let Some(d) = run_for {
                    self.schedule(&t.key, d, Action::Complete);
                }
            }
            Action::Complete => {
                if p.stage != Stage::Running || p.deleting {
                    return;
                }
                if p.fail && p.on_failure {
                    // restartPolicy OnFailure: the kubelet restarts the container.
                    let run_for = p.run_for.unwrap_or(self.delays.complete);
                    if let Some(p) = self.pods.get_mut(&t.key) {
                        p.restarts += 1;
                    }
                    let body = self.running_status(&t.key);
                    self.write_status(&t.key, body).await;
                    self.schedule(&t.key, run_for, Action::Complete);
                    return;
                }
                let body = self.finished_status(&t.key);
                if let Some(p) = self.pods.get_mut(&t.key) {
                    p.stage = Stage::Finished;
                    if let Some(ip) = p.ip {
                        self.ips[p.node as usize].release(ip);
                    }
                }
                self.shared
                    .stats
                    .pods_finished
                    .fetch_add(1, Ordering::Relaxed);
                self.write_status(&t.key, body).await;
            }
            Action::Delete => {
                let w = Write::PodDelete {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                };
                let _ = self.writes.send(w).await;
            }
        }
    }

    async fn write_status(&mut self, key: &Arc<str>, body: Option<Vec<u8>>) {
        let (Some(p), Some(body)) = (self.pods.get(key), body) else {
            return;
        };
        let w = Write::PodStatus {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            body,
        };
        let _ = self.writes.send(w).await;
    }

    fn running_status(&self, key: &str) -> Option<Vec<u8>> {
        let p = self.pods.get(key)?;
        let started = p.started.as_deref().unwrap_or_default();
        let ready = p.ready_desired;
        let now = now_time();
        let statuses: Vec<Value> = p
            .containers
            .iter()
            .map(|c| {
                let mut s = container_status(p, c, ready);
                s["started"] = json!(true);
                s["state"] = json!({"running": {"startedAt": started}});
                if p.restarts > 0 {
                    s["lastState"] = json!({"terminated": {
                        "exitCode": 1, "reason": "Error", "startedAt": started, "finishedAt": now,
                        "containerID": container_id(p, c, p.restarts - 1),
                    }});
                }
                s
            })
            .collect();
        Some(self.status_body(p, "Running", ready, None, statuses, started))
    }

    fn finished_status(&self, key: &str) -> Option<Vec<u8>> {
        let p = self.pods.get(key)?;
        let started = p.started.as_deref().unwrap_or_default();
        let now = now_time();
        let (phase, code, reason) = if p.fail {
            ("Failed", 1, "Error")
        } else {
            ("Succeeded", 0, "Completed")
        };
        let statuses: Vec<Value> = p
            .containers
            .iter()
            .map(|c| {
                let mut s = container_status(p, c, false);
                s["started"] = json!(false);
                s["state"] = json!({"terminated": {
                    "exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now,
                    "containerID": container_id(p, c, p.restarts),
                }});
                s
            })
            .collect();
        Some(self.status_body(p, phase, false, Some("PodCompleted"), statuses, started))
    }

    fn status_body(
        &self,
        p: &PodState,
        phase: &str,
        ready: bool,
        not_ready_reason: Option<&str>,
        statuses: Vec<Value>,
        started: &str,
    ) -> Vec<u8> {
        let now = now_time();
        let node = &self.shared.nodes[p.node as usize];
        let host_ip = node.internal_ip.to_string();
        let cond = |ty: &str, ok: bool| {
            let mut c = json!({"type": ty, "status": if ok { "True" } else { "False" }, "lastTransitionTime": now, "lastProbeTime": null});
            if !ok {
                let reason = not_ready_reason.unwrap_or("ContainersNotReady");
                c["reason"] = json!(reason);
                if reason == "ContainersNotReady" {
                    let names: Vec<&str> = p.containers.iter().map(|c| &*c.name).collect();
                    c["message"] = json!(format!(
                        "containers with unready status: [{}]",
                        names.join(" ")
                    ));
                }
            }
            c
        };
        let init: Vec<Value> = p
            .init_containers
            .iter()
            .map(|c| {
                let mut s = container_status(p, c, true);
                s["started"] = json!(false);
                s["state"] = json!({"terminated": {
                    "exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started,
                    "containerID": container_id(p, c, 0),
                }});
                s
            })
            .collect();
        let mut status = json!({
            "phase": phase,
            "conditions": [
                cond("PodReadyToStartContainers", phase == "Running"),
                {"type": "Initialized", "status": "True", "lastTransitionTime": started, "lastProbeTime": null},
                cond("ContainersReady", ready),
                cond("Ready", ready),
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": started, "lastProbeTime": null},
            ],
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "startTime": started,
            "containerStatuses": statuses,
        });
        if !init.is_empty() {
            status["initContainerStatuses"] = Value::Array(init);
        }
        match p.ip.map(Ipv4Addr::from) {
            Some(ip) => {
                status["podIP"] = json!(ip.to_string());
                status["podIPs"] = json!([{"ip": ip.to_string()}]);
            }
            None => {
                status["podIP"] = Value::Null;
                status["podIPs"] = Value::Null;
            }
        }
        json!({"status": status}).to_string().into_bytes()
    }
}

fn container_status(p: &PodState, c: &Container, ready: bool) -> Value {
    json!({
        "name": &*c.name,
        "image": &*c.image,
        "imageID": image_id(&c.image),
        "containerID": container_id(p, c, p.restarts),
        "ready": ready,
        "restartCount": p.restarts,
    })
}

fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    let repo = match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    };
    let h = fnv(image.as_bytes());
    format!(
        "{repo}@sha256:{h:032x}{:032x}",
        h.rotate_left(64) ^ 0x9e37_79b9
    )
}

fn container_id(p: &PodState, c: &Container, restarts: u32) -> String {
    let h = fnv(format!("{}/{}/{restarts}", p.uid, c.name).as_bytes());
    format!("containerd://{h:032x}{:032x}", h.rotate_left(32))
}

fn key_of(pod: &SimPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ips_skip_network_gateway_broadcast_and_reuse() {
        let mut ips = Ips::new((Ipv4Addr::new(10, 0, 0, 0), 30));
        // /30: only .2 is usable.
        assert_eq!(
            ips.allocate().map(Ipv4Addr::from),
            Some(Ipv4Addr::new(10, 0, 0, 2))
        );
        assert_eq!(ips.allocate(), None);
        ips.release(u32::from(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(
            ips.allocate().map(Ipv4Addr::from),
            Some(Ipv4Addr::new(10, 0, 0, 2))
        );
        let mut ips = Ips::new((Ipv4Addr::new(10, 1, 0, 0), 24));
        let all: HashSet<u32> = (0..253).filter_map(|_| ips.allocate()).collect();
        assert_eq!(all.len(), 253);
        assert_eq!(ips.allocate(), None);
    }

    #[test]
    fn image_ids_drop_the_tag() {
        assert!(image_id("nginx:1.27").starts_with("nginx@sha256:"));
        assert!(image_id("localhost:5000/app").starts_with("localhost:5000/app@sha256:"));
        assert_eq!(image_id("nginx").len(), "nginx@sha256:".len() + 64);
    }
}
