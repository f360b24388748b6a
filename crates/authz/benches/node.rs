//! The Node authorizer at 5,000 nodes and 150,000 pods (issue 41's
//! scale): each pod in one of 1,000 namespaces uses its ServiceAccount,
//! two Secrets (one its own, one shared by its namespace) and two
//! ConfigMaps (likewise). Timed one by one: a random node getting a
//! Secret of a random pod (its own node's about half the time), a
//! ConfigMap, a ServiceAccount token (the request's attributes freshly
//! copied, as a server builds them); prints p50/p99/max in nanoseconds,
//! the time to build the graph, and the memory it takes (the process's
//! resident set before and after).
//!
//! Run: `cargo bench -p kubeforge-authz --bench node`

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kubeforge_authz::node::{NODES_GROUP, NodeGraph, authorize};
use kubeforge_authz::{Attributes, Decision, UserInfo};

const NODES: usize = 5_000;
const PODS: usize = 150_000;
const NAMESPACES: usize = 1_000;
const DECISIONS: usize = 300_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn pod(i: usize) -> Pod {
    let ns = format!("ns-{}", i % NAMESPACES);
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("pod-{i}"), "namespace": ns},
        "spec": {
            "nodeName": format!("node-{}", i % NODES),
            "serviceAccountName": format!("sa-{}", i % 7),
            "containers": [{"name": "c", "image": "app",
                "envFrom": [{"configMapRef": {"name": "shared-config"}}],
                "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": format!("secret-{i}"), "key": "p"}}}]}],
            "volumes": [
                {"name": "s", "secret": {"secretName": "shared-secret"}},
                {"name": "c", "configMap": {"name": format!("config-{i}")}},
            ],
        }
    }))
    .expect("pod")
}

fn resident_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4
}

fn report(name: &str, mut ns: Vec<u64>) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)];
    println!(
        "{name:<40} p50 {:>5} ns  p99 {:>5} ns  max {:>8} ns",
        at(0.50),
        at(0.99),
        ns[ns.len() - 1]
    );
}

fn main() {
    let pods: Vec<Pod> = (0..PODS).map(pod).collect();
    let before = resident_kib();
    let t = Instant::now();
    let mut graph = NodeGraph::new();
    for p in &pods {
        graph.set_pod(p);
    }
    let built = t.elapsed();
    let after = resident_kib();
    println!(
        "graph: {NODES} nodes, {} pods, built in {:.0} ms, {} MiB resident ({} bytes per pod)",
        graph.pod_count(),
        built.as_secs_f64() * 1000.0,
        (after.saturating_sub(before)) / 1024,
        (after.saturating_sub(before)) * 1024 / PODS as u64
    );
    let users: Vec<UserInfo> = (0..NODES)
        .map(|n| UserInfo {
            name: format!("system:node:node-{n}"),
            groups: vec![NODES_GROUP.into(), "system:authenticated".into()],
            ..UserInfo::default()
        })
        .collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (label, resource, sub, verb) in [
        ("get secret (own pod's half the time)", "secrets", "", "get"),
        ("get configmap", "configmaps", "", "get"),
        (
            "create serviceaccounts/token",
            "serviceaccounts",
            "token",
            "create",
        ),
    ] {
        let asks: Vec<Attributes> = (0..DECISIONS)
            .map(|_| {
                let i = rng.next(PODS);
                // Half the time the pod's own node, else a random one.
                let node = if rng.next(2) == 0 {
                    i % NODES
                } else {
                    rng.next(NODES)
                };
                let name = match resource {
                    "secrets" => format!("secret-{i}"),
                    "configmaps" => format!("config-{i}"),
                    _ => format!("sa-{}", i % 7),
                };
                Attributes::resource(
                    users[node].clone(),
                    verb,
                    &format!("ns-{}", i % NAMESPACES),
                    "",
                    "v1",
                    resource,
                    sub,
                    &name,
                )
            })
            .collect();
        let mut allowed = 0usize;
        let times: Vec<u64> = asks
            .iter()
            .map(|a| {
                // A request's attributes are fresh (hot in cache) when the
                // authorizer sees them: so are these.
                let a = a.clone();
                let t = Instant::now();
                let d = authorize(black_box(&graph), &[], black_box(&a));
                let ns = t.elapsed().as_nanos() as u64;
                if matches!(d, Decision::Allow { .. }) {
                    allowed += 1;
                }
                ns
            })
            .collect();
        report(label, times);
        println!("  allowed {allowed} of {DECISIONS}");
        if resource == "secrets" {
            let lookups: Vec<u64> = asks
                .iter()
                .map(|a| {
                    let a = a.clone();
                    let node = a.user.name.trim_start_matches("system:node:").to_string();
                    let t = Instant::now();
                    black_box(graph.related(
                        &node,
                        kubeforge_authz::node::Kind::Secret,
                        &a.namespace,
                        &a.name,
                    ));
                    t.elapsed().as_nanos() as u64
                })
                .collect();
            report("  of which the graph lookup", lookups);
        }
    }
}
