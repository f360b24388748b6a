//! The simulated nodes' declarations: a YAML config file or `--nodes N`
//! uniform nodes, checked up front (quantities, names, taints, CIDRs) so a
//! mistake is a startup error naming its line rather than a node the
//! scheduler cannot use.
//!
//! ```yaml
//! zones: [zone-a, zone-b]          # spread nodes without a zone label over these
//! nodes:
//!   - name: cpu                    # with count: cpu-0 … cpu-9
//!     count: 10
//!     capacity: {cpu: "16", memory: 64Gi, pods: "110"}
//!   - name: gpu-0
//!     capacity: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
//!     allocatable: {cpu: "31", memory: 250Gi, pods: "110", nvidia.com/gpu: "8"}
//!     labels: {accelerator: a100}
//!     taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
//!     podCIDR: 10.250.0.0/24
//! ```

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

use kubeforge_apimachinery::{names, quantity};
use serde::Deserialize;
use serde_saphyr::Spanned;

/// The label every simulated node carries (value `true`), so users and
/// tests can select them: `kubectl get nodes -l kubeforge.dev/simulated`.
pub const SIMULATED_LABEL: &str = "kubeforge.dev/simulated";

/// Zones used when the config names none.
pub const DEFAULT_ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// A node config that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The YAML does not parse or has the wrong shape.
    #[error("node config: {0}")]
    Yaml(String),
    /// A value is wrong; `line` is 1-based in the config file.
    #[error("node config line {line}: {message}")]
    Invalid {
        /// 1-based line of the offending value.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// `--nodes 0`, or more nodes than the automatic pod CIDRs cover.
    #[error("node config: {0}")]
    Count(String),
}

/// One simulated node, resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    /// The Node's name (also its `kubernetes.io/hostname` label).
    pub name: String,
    /// `status.capacity`.
    pub capacity: BTreeMap<String, String>,
    /// `status.allocatable` (capacity when not given).
    pub allocatable: BTreeMap<String, String>,
    /// Labels, including `kubernetes.io/hostname`, `kubernetes.io/os`,
    /// `kubernetes.io/arch`, `topology.kubernetes.io/zone` and
    /// [`SIMULATED_LABEL`].
    pub labels: BTreeMap<String, String>,
    /// `spec.taints`.
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// The network of `spec.podCIDR`: pod IPs come from it.
    pub pod_cidr: (Ipv4Addr, u8),
    /// The node's InternalIP (also every pod's hostIP).
    pub internal_ip: Ipv4Addr,
}

impl NodeSpec {
    /// `spec.podCIDR` as text (`10.64.0.0/24`).
    pub fn pod_cidr_string(&self) -> String {
        format!("{}/{}", self.pod_cidr.0, self.pod_cidr.1)
    }
}

/// The capacity of a node made by `--nodes N` (and the default for config
/// entries without `capacity`): 32 CPUs, 256 GiB, 110 pods.
pub fn default_capacity() -> BTreeMap<String, String> {
    [
        ("cpu", "32"),
        ("memory", "256Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "1Ti"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// `n` identical nodes `node-0` … `node-{n-1}` spread over
/// [`DEFAULT_ZONES`].
pub fn uniform(n: usize) -> Result<Vec<NodeSpec>, ConfigError> {
    if n == 0 {
        return Err(ConfigError::Count("--nodes must be at least 1".into()));
    }
    check_auto_count(n)?;
    let zones: Vec<String> = DEFAULT_ZONES.iter().map(|z| z.to_string()).collect();
    Ok((0..n)
        .map(|i| {
            let cap = default_capacity();
            build(
                i,
                format!("node-{i}"),
                cap.clone(),
                cap,
                BTreeMap::new(),
                Vec::new(),
                None,
                &zones,
            )
        })
        .collect())
}

/// Parse a node config file's text (see the module docs for its shape).
pub fn from_yaml(text: &str) -> Result<Vec<NodeSpec>, ConfigError> {
    let file: File = serde_saphyr::from_str(text).map_err(|e| ConfigError::Yaml(e.to_string()))?;
    let zones: Vec<String> = match file.zones {
        Some(z) if !z.is_empty() => z,
        _ => DEFAULT_ZONES.iter().map(|z| z.to_string()).collect(),
    };
    if file.nodes.is_empty() {
        return Err(ConfigError::Count("`nodes:` lists no node".into()));
    }
    let mut out = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    for entry in file.nodes {
        let line = entry.name.referenced.line();
        let base = entry.name.value.clone();
        let count = entry.count.unwrap_or(1);
        if count == 0 {
            return Err(invalid(
                line,
                format!("node {base:?}: count must be at least 1"),
            ));
        }
        let names: Vec<String> = if entry.count.is_some() {
            (0..count).map(|i| format!("{base}-{i}")).collect()
        } else {
            vec![base.clone()]
        };
        let capacity = match &entry.capacity {
            Some(c) => quantities(c)?,
            None => default_capacity(),
        };
        let allocatable = match &entry.allocatable {
            Some(a) => quantities(a)?,
            None => capacity.clone(),
        };
        let mut taints = Vec::new();
        for t in entry.taints.iter().flatten() {
            let tl = t.key.referenced.line();
            if !valid_qualified_name(&t.key.value) {
                return Err(invalid(
                    tl,
                    format!("taint key {:?} is not a valid label key", t.key.value),
                ));
            }
            if !matches!(
                t.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            ) {
                return Err(invalid(
                    tl,
                    format!(
                        "taint effect {:?}: must be NoSchedule, PreferNoSchedule or NoExecute",
                        t.effect
                    ),
                ));
            }
            taints.push(k8s_openapi::api::core::v1::Taint {
                key: t.key.value.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                time_added: None,
            });
        }
        let mut labels = BTreeMap::new();
        for (k, v) in entry.labels.iter().flatten() {
            if !valid_qualified_name(k) {
                return Err(invalid(line, format!("label key {k:?} is not valid")));
            }
            labels.insert(k.clone(), v.clone());
        }
        let cidr = match &entry.pod_cidr {
            Some(c) => {
                if names.len() > 1 {
                    return Err(invalid(
                        c.referenced.line(),
                        "podCIDR cannot be given with count (each node needs its own)".into(),
                    ));
                }
                Some(parse_cidr(&c.value).map_err(|m| invalid(c.referenced.line(), m))?)
            }
            None => None,
        };
        for name in names {
            if !valid_dns_subdomain(&name) {
                return Err(invalid(
                    line,
                    format!("node name {name:?} is not a valid DNS subdomain"),
                ));
            }
            if let Some(first) = seen.insert(name.clone(), line) {
                return Err(invalid(
                    line,
                    format!("duplicate node name {name:?} (first declared on line {first})"),
                ));
            }
            let i = out.len();
            check_auto_count(i + 1)?;
            out.push(build(
                i,
                name,
                capacity.clone(),
                allocatable.clone(),
                labels.clone(),
                taints.clone(),
                cidr,
                &zones,
            ));
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    zones: Option<Vec<String>>,
    #[serde(default)]
    nodes: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Entry {
    name: Spanned<String>,
    count: Option<usize>,
    capacity: Option<BTreeMap<String, Spanned<String>>>,
    allocatable: Option<BTreeMap<String, Spanned<String>>>,
    labels: Option<BTreeMap<String, String>>,
    taints: Option<Vec<TaintEntry>>,
    #[serde(rename = "podCIDR")]
    pod_cidr: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaintEntry {
    key: Spanned<String>,
    value: Option<String>,
    effect: String,
}

fn invalid(line: u64, message: String) -> ConfigError {
    ConfigError::Invalid { line, message }
}

fn quantities(
    m: &BTreeMap<String, Spanned<String>>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let line = v.referenced.line();
        if !valid_qualified_name(k) {
            return Err(invalid(line, format!("resource name {k:?} is not valid")));
        }
        if !valid_quantity(&v.value) {
            return Err(invalid(
                line,
                format!(
                    "{k}: {:?} is not a valid quantity (e.g. 4, 500m, 16Gi)",
                    v.value
                ),
            ));
        }
        out.insert(k.clone(), v.value.clone());
    }
    Ok(out)
}

/// Automatic pod CIDRs are `10.{64 + i/256}.{i%256}.0/24`: 49,152 nodes.
const MAX_AUTO_NODES: usize = 192 * 256;

fn check_auto_count(n: usize) -> Result<(), ConfigError> {
    if n > MAX_AUTO_NODES {
        return Err(ConfigError::Count(format!(
            "at most {MAX_AUTO_NODES} simulated nodes"
        )));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn build(
    i: usize,
    name: String,
    capacity: BTreeMap<String, String>,
    allocatable: BTreeMap<String, String>,
    mut labels: BTreeMap<String, String>,
    taints: Vec<k8s_openapi::api::core::v1::Taint>,
    cidr: Option<(Ipv4Addr, u8)>,
    zones: &[String],
) -> NodeSpec {
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    labels
        .entry("kubernetes.io/os".into())
        .or_insert_with(|| "linux".into());
    labels
        .entry("kubernetes.io/arch".into())
        .or_insert_with(|| "amd64".into());
    labels
        .entry("node.kubernetes.io/instance-type".into())
        .or_insert_with(|| "kubeforge-sim".into());
    if !zones.is_empty() {
        let zone = zones[i % zones.len()].clone();
        labels
            .entry("topology.kubernetes.io/zone".into())
            .or_insert(zone);
    }
    labels.insert(SIMULATED_LABEL.into(), "true".into());
    // i < MAX_AUTO_NODES, so both octets fit.
    let hi = u8::try_from(64 + i / 256).unwrap_or(255);
    let lo = u8::try_from(i % 256).unwrap_or(0);
    let pod_cidr = cidr.unwrap_or((Ipv4Addr::new(10, hi, lo, 0), 24));
    let internal_ip = Ipv4Addr::from(
        u32::from(Ipv4Addr::new(172, 16, 0, 0)).wrapping_add(u32::try_from(i).unwrap_or(0) + 2),
    );
    NodeSpec {
        name,
        capacity,
        allocatable,
        labels,
        taints,
        pod_cidr,
        internal_ip,
    }
}

/// Parse `a.b.c.d/p` (prefix 8–30), returning the network address.
pub fn parse_cidr(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (ip, prefix) = s
        .split_once('/')
        .ok_or_else(|| format!("podCIDR {s:?}: expected a.b.c.d/prefix"))?;
    let ip: Ipv4Addr = ip
        .parse()
        .map_err(|_| format!("podCIDR {s:?}: bad IPv4 address"))?;
    let prefix: u8 = prefix
        .parse()
        .map_err(|_| format!("podCIDR {s:?}: bad prefix length"))?;
    if !(8..=30).contains(&prefix) {
        return Err(format!("podCIDR {s:?}: prefix must be between 8 and 30"));
    }
    let mask = u32::MAX << (32 - prefix);
    Ok((Ipv4Addr::from(u32::from(ip) & mask), prefix))
}

/// A node's resource amount: a Kubernetes quantity (`128974848`, `129e6`,
/// `129M`, `123Mi`, `500m`) that is not negative.
fn valid_quantity(s: &str) -> bool {
    quantity::parse_milli(s).is_ok_and(|m| m >= 0)
}

fn valid_dns_subdomain(s: &str) -> bool {
    names::is_dns1123_subdomain(s).is_empty()
}

fn valid_qualified_name(s: &str) -> bool {
    names::is_qualified_name(s).is_empty()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn uniform_nodes_spread_over_zones() {
        let nodes = uniform(4).unwrap();
        assert_eq!(nodes[0].name, "node-0");
        assert_eq!(nodes[1].labels["topology.kubernetes.io/zone"], "zone-b");
        assert_eq!(nodes[3].labels["topology.kubernetes.io/zone"], "zone-a");
        assert_eq!(nodes[2].pod_cidr_string(), "10.64.2.0/24");
        assert_eq!(nodes[0].labels["kubernetes.io/hostname"], "node-0");
        assert!(uniform(0).is_err());
    }

    #[test]
    fn config_with_gpus_taints_and_counts() {
        let yaml = "zones: [z1]\nnodes:\n  - name: cpu\n    count: 2\n  - name: gpu\n    capacity: {cpu: \"8\", memory: 64Gi, pods: \"110\", nvidia.com/gpu: \"4\"}\n    taints: [{key: gpu, value: \"yes\", effect: NoSchedule}]\n    podCIDR: 10.250.1.7/24\n";
        let nodes = from_yaml(yaml).unwrap();
        let names: Vec<_> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["cpu-0", "cpu-1", "gpu"]);
        assert_eq!(nodes[2].capacity["nvidia.com/gpu"], "4");
        assert_eq!(nodes[2].allocatable["nvidia.com/gpu"], "4");
        assert_eq!(nodes[2].taints[0].effect, "NoSchedule");
        assert_eq!(nodes[2].pod_cidr_string(), "10.250.1.0/24");
        assert_eq!(nodes[1].labels["topology.kubernetes.io/zone"], "z1");
    }

    #[test]
    fn bad_quantity_names_its_line() {
        let yaml = "nodes:\n  - name: a\n    capacity:\n      cpu: \"4\"\n      memory: lots\n";
        let err = from_yaml(yaml).unwrap_err().to_string();
        assert!(err.contains("line 5"), "{err}");
        assert!(err.contains("lots"), "{err}");
    }

    #[test]
    fn duplicate_names_name_both_lines() {
        let yaml = "nodes:\n  - name: a\n  - name: b\n  - name: a\n";
        let err = from_yaml(yaml).unwrap_err().to_string();
        assert!(
            err.contains("line 4") && err.contains("line 2") && err.contains("duplicate"),
            "{err}"
        );
        let yaml = "nodes:\n  - name: a\n    count: 2\n  - name: a-1\n";
        let err = from_yaml(yaml).unwrap_err().to_string();
        assert!(err.contains("line 4") && err.contains("\"a-1\""), "{err}");
    }

    #[test]
    fn bad_taint_effect_and_unknown_field() {
        let err = from_yaml("nodes:\n- name: a\n  taints:\n  - key: k\n    effect: Sometimes\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 4") && err.contains("Sometimes"), "{err}");
        let err = from_yaml("nodes:\n- name: a\n  capacty: {}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("capacty"), "{err}");
    }

    #[test]
    fn quantities() {
        for ok in ["1", "500m", "1.5", "16Gi", "129e6", "1E3", "+2", "0.5Ki"] {
            assert!(valid_quantity(ok), "{ok}");
        }
        // Negative amounts are quantities, but not a node's capacity.
        for bad in ["", "lots", "-1", "-500m", "1..2", "5Gb", "1e", "Gi"] {
            assert!(!valid_quantity(bad), "{bad}");
        }
    }
}
