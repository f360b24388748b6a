//! The kubelet's Summary API (`GET /stats/summary`,
//! `k8s.io/kubelet/pkg/apis/stats/v1alpha1`): CPU and memory of every
//! container the runtime runs for this node's pods (CRI
//! ListContainerStats), summed per pod and for the node — what
//! metrics-server-like readers and `kubectl get --raw
//! /api/v1/nodes/<node>/proxy/stats/summary` read.
//!
//! The node's own figures are the sum of its pods': every container node
//! of a machine shares the machine, so the machine's totals would count
//! each pod once per node.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::agent::Shared;
use crate::cri::api;

/// RFC 3339 with nanoseconds from Unix nanoseconds (now when 0).
fn stamp(ns: i64) -> String {
    let t = if ns > 0 {
        jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or_else(|_| jiff::Timestamp::now())
    } else {
        jiff::Timestamp::now()
    };
    t.to_string()
}

/// CPU and memory of one container or a sum of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Cumulative CPU time (ns).
    pub core_nano_seconds: u64,
    /// Current CPU rate (billionths of a core).
    pub nano_cores: u64,
    /// Working set (bytes).
    pub working_set_bytes: u64,
    /// Memory usage (bytes).
    pub usage_bytes: u64,
    /// Resident set (bytes).
    pub rss_bytes: u64,
}

impl Usage {
    fn from_stats(s: &api::ContainerStats) -> Usage {
        let cpu = s.cpu.unwrap_or_default();
        let mem = s.memory.unwrap_or_default();
        Usage {
            core_nano_seconds: cpu.usage_core_nano_seconds.map_or(0, |v| v.value),
            nano_cores: cpu.usage_nano_cores.map_or(0, |v| v.value),
            working_set_bytes: mem.working_set_bytes.map_or(0, |v| v.value),
            usage_bytes: mem.usage_bytes.map_or(0, |v| v.value),
            rss_bytes: mem.rss_bytes.map_or(0, |v| v.value),
        }
    }

    fn add(&mut self, o: &Usage) {
        self.core_nano_seconds += o.core_nano_seconds;
        self.nano_cores += o.nano_cores;
        self.working_set_bytes += o.working_set_bytes;
        self.usage_bytes += o.usage_bytes;
        self.rss_bytes += o.rss_bytes;
    }

    fn cpu_json(&self, time: &str) -> Value {
        json!({"time": time, "usageNanoCores": self.nano_cores, "usageCoreNanoSeconds": self.core_nano_seconds})
    }

    fn memory_json(&self, time: &str) -> Value {
        json!({"time": time, "usageBytes": self.usage_bytes, "workingSetBytes": self.working_set_bytes,
            "rssBytes": self.rss_bytes})
    }
}

/// One pod's containers, as the summary lists them.
#[derive(Default)]
struct PodStats {
    name: String,
    namespace: String,
    containers: BTreeMap<String, (Usage, String)>,
}

/// The summary of `stats` (the runtime's container stats, keyed by their
/// attributes' labels) for `node`, pods named from `pods` (uid → (name,
/// namespace)).
pub fn summary(
    node: &str,
    stats: &[api::ContainerStats],
    pods: &BTreeMap<String, (String, String)>,
) -> Value {
    let now = stamp(0);
    let mut by_pod: BTreeMap<String, PodStats> = BTreeMap::new();
    for s in stats {
        let Some(attrs) = &s.attributes else { continue };
        let Some(uid) = attrs.labels.get(crate::pod::POD_UID) else {
            continue;
        };
        let Some((name, namespace)) = pods.get(uid) else {
            continue;
        };
        let container = attrs
            .labels
            .get(crate::pod::CONTAINER_NAME)
            .cloned()
            .or_else(|| attrs.metadata.as_ref().map(|m| m.name.clone()))
            .unwrap_or_default();
        let time = stamp(s.cpu.as_ref().map_or(0, |c| c.timestamp));
        let entry = by_pod.entry(uid.clone()).or_insert_with(|| PodStats {
            name: name.clone(),
            namespace: namespace.clone(),
            ..PodStats::default()
        });
        // Several runs of one container: the runtime keeps exited ones;
        // the summary reports the running (largest) one.
        let usage = Usage::from_stats(s);
        let slot = entry
            .containers
            .entry(container)
            .or_insert((Usage::default(), time.clone()));
        if usage.core_nano_seconds >= slot.0.core_nano_seconds {
            *slot = (usage, time);
        }
    }
    let mut node_usage = Usage::default();
    let pods_json: Vec<Value> = by_pod
        .iter()
        .map(|(uid, p)| {
            let mut pod_usage = Usage::default();
            let containers: Vec<Value> = p
                .containers
                .iter()
                .map(|(name, (u, time))| {
                    pod_usage.add(u);
                    json!({"name": name, "cpu": u.cpu_json(time), "memory": u.memory_json(time)})
                })
                .collect();
            node_usage.add(&pod_usage);
            json!({
                "podRef": {"name": p.name, "namespace": p.namespace, "uid": uid},
                "containers": containers,
                "cpu": pod_usage.cpu_json(&now),
                "memory": pod_usage.memory_json(&now),
            })
        })
        .collect();
    json!({
        "node": {
            "nodeName": node,
            "cpu": node_usage.cpu_json(&now),
            "memory": node_usage.memory_json(&now),
        },
        "pods": pods_json,
    })
}

/// The summary of this node's pods, from the runtime.
pub(crate) async fn collect(shared: &Shared) -> Result<Value, String> {
    let mut rt = shared.cri.runtime.clone();
    let stats = rt
        .list_container_stats(api::ListContainerStatsRequest { filter: None })
        .await
        .map_err(|e| e.message().to_string())?
        .into_inner()
        .stats;
    let pods: BTreeMap<String, (String, String)> = shared
        .pods
        .lock()
        .map(|p| {
            p.iter()
                .map(|(uid, pod)| {
                    let (name, ns, _) = crate::pod::identity(pod);
                    (uid.clone(), (name.to_string(), ns.to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(summary(&shared.cfg.node_name, &stats, &pods))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn stat(uid: &str, container: &str, cpu_ns: u64, nano: u64, ws: u64) -> api::ContainerStats {
        api::ContainerStats {
            attributes: Some(api::ContainerAttributes {
                id: format!("{uid}-{container}-{cpu_ns}"),
                labels: HashMap::from([
                    (crate::pod::POD_UID.to_string(), uid.to_string()),
                    (
                        crate::pod::CONTAINER_NAME.to_string(),
                        container.to_string(),
                    ),
                ]),
                ..Default::default()
            }),
            cpu: Some(api::CpuUsage {
                timestamp: 1_700_000_000_000_000_000,
                usage_core_nano_seconds: Some(api::UInt64Value { value: cpu_ns }),
                usage_nano_cores: Some(api::UInt64Value { value: nano }),
            }),
            memory: Some(api::MemoryUsage {
                timestamp: 1_700_000_000_000_000_000,
                working_set_bytes: Some(api::UInt64Value { value: ws }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pods_and_the_node_sum_their_containers() {
        let pods = BTreeMap::from([
            ("u1".to_string(), ("web".to_string(), "default".to_string())),
            ("u2".to_string(), ("db".to_string(), "data".to_string())),
        ]);
        let stats = [
            stat("u1", "a", 100, 10_000_000, 1024),
            stat("u1", "b", 200, 20_000_000, 2048),
            // An exited earlier run of b: the running one is reported.
            stat("u1", "b", 50, 0, 10),
            stat("u2", "c", 300, 5_000_000, 4096),
            // Not one of this node's pods.
            stat("zz", "x", 999, 999, 999),
        ];
        let s = summary("n1", &stats, &pods);
        assert_eq!(s["node"]["nodeName"], "n1");
        assert_eq!(s["node"]["cpu"]["usageNanoCores"], 35_000_000);
        assert_eq!(s["node"]["memory"]["workingSetBytes"], 1024 + 2048 + 4096);
        let web = s["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["podRef"]["name"] == "web")
            .unwrap();
        assert_eq!(web["podRef"]["namespace"], "default");
        assert_eq!(web["containers"].as_array().unwrap().len(), 2);
        assert_eq!(web["cpu"]["usageNanoCores"], 30_000_000);
        assert_eq!(web["containers"][1]["memory"]["workingSetBytes"], 2048);
        assert!(
            web["containers"][0]["cpu"]["time"]
                .as_str()
                .unwrap()
                .starts_with("2023-11-14T")
        );
    }
}
