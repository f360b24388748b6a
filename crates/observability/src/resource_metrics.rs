//! The Metrics API's data — `metrics.k8s.io/v1beta1` NodeMetrics and
//! PodMetrics, as metrics-server serves them (kubernetes/metrics
//! `pkg/apis/metrics/v1beta1/types.go`) — computed from watched pods and
//! nodes, so `kubectl top` and the HorizontalPodAutoscaler have something
//! to read.
//!
//! metrics-server scrapes each kubelet's resource endpoint every
//! `--metric-resolution` and answers from what it kept. Here a
//! [`UsageSource`] answers for the nodes it [serves](UsageSource::serves):
//!
//! - [`SimulatedUsage`], for simulated nodes: a container uses a share of
//!   its requests (50 % by default; small defaults without requests), or
//!   what the pod's [`USAGE_ANNOTATION`] says; a node uses the sum of its
//!   pods plus a base (its own annotation overrides the base).
//! - A second source for real container nodes (label
//!   [`RUNTIME_LABEL`]`=containerd`), reading the node agent's
//!   `/stats/summary` as metrics-server does, plugs in with
//!   [`ResourceMetrics::with_source`]; nodes no source serves have no
//!   metrics (`kubectl top node` prints `<unknown>` for them).
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! use kubeforge_observability::resource_metrics::{ResourceMetrics, UsageOptions};
//! let stop = tokio_util::sync::CancellationToken::new();
//! let metrics = ResourceMetrics::new(UsageOptions::default()).start(client, stop);
//! for m in metrics.node_metrics() {
//!     println!("{} {:?}", m.metadata.name.unwrap_or_default(), m.usage);
//! }
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, Time};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kubeforge_apimachinery::quantity;
use kubeforge_runtime::sync::{read, write};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The pod (or node) annotation that sets simulated usage; see
/// [`UsageSpec::parse`] for its grammar.
pub const USAGE_ANNOTATION: &str = "kubeforge.io/usage";

/// The node label naming a real runtime (`containerd` on container nodes).
pub const RUNTIME_LABEL: &str = "node.kubeforge.io/runtime";

/// The Metrics API's group.
pub const GROUP: &str = "metrics.k8s.io";
/// The Metrics API's version.
pub const VERSION: &str = "v1beta1";
const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// A node's usage (`NodeMetrics`), as metrics-server serves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeMetrics {
    /// `NodeMetrics`.
    pub kind: String,
    /// `metrics.k8s.io/v1beta1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// The node's name and labels, created now.
    pub metadata: ObjectMeta,
    /// The end of the window the usage was measured over.
    pub timestamp: Time,
    /// The window's length, as Go prints a duration (`15s`).
    pub window: String,
    /// `cpu` (nano-scaled DecimalSI) and `memory` (BinarySI bytes, the
    /// working set).
    pub usage: BTreeMap<String, Quantity>,
}

/// A pod's usage per container (`PodMetrics`), as metrics-server serves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PodMetrics {
    /// `PodMetrics`.
    pub kind: String,
    /// `metrics.k8s.io/v1beta1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// The pod's name, namespace and labels, created now.
    pub metadata: ObjectMeta,
    /// The end of the window the usage was measured over.
    pub timestamp: Time,
    /// The window's length, as Go prints a duration (`15s`).
    pub window: String,
    /// One entry per running container.
    #[serde(default)]
    pub containers: Vec<ContainerMetrics>,
}

/// One container's usage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerMetrics {
    /// The container's name.
    pub name: String,
    /// `cpu` and `memory`.
    pub usage: BTreeMap<String, Quantity>,
}

/// A `PodMetricsList` (what a LIST of `pods` answers).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodMetricsList {
    /// `PodMetricsList`.
    pub kind: String,
    /// `metrics.k8s.io/v1beta1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// The list's metadata.
    #[serde(default)]
    pub metadata: ListMeta,
    /// The pods' metrics.
    #[serde(default)]
    pub items: Vec<PodMetrics>,
}

/// CPU and memory in use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU, in nanocores.
    pub cpu_nanos: i64,
    /// Memory (working set), in bytes.
    pub memory_bytes: i64,
}

impl Usage {
    /// As the Metrics API writes it: `cpu` in nano-scaled DecimalSI,
    /// `memory` in BinarySI (kube's canonical forms: `250m`, `64Mi`).
    pub fn to_quantities(self) -> BTreeMap<String, Quantity> {
        BTreeMap::from([
            (
                "cpu".to_string(),
                Quantity(quantity::format_nanos(self.cpu_nanos)),
            ),
            (
                "memory".to_string(),
                Quantity(quantity::format_bytes(self.memory_bytes)),
            ),
        ])
    }

    fn add(self, other: Usage) -> Usage {
        Usage {
            cpu_nanos: self.cpu_nanos.saturating_add(other.cpu_nanos),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }
}

/// One value of a [`UsageSpec`]: an amount, or a percentage of the
/// container's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    /// Nanocores (cpu) or bytes (memory).
    Absolute(i64),
    /// Percent of the container's request (of the no-request default when
    /// it has none).
    PercentOfRequest(i64),
}

/// What a [`USAGE_ANNOTATION`] asks for: defaults for every container and
/// overrides per container name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageSpec {
    /// For containers without their own entry.
    pub all: ResourceAmounts,
    /// By container name.
    pub containers: BTreeMap<String, ResourceAmounts>,
}

/// The cpu and memory amounts of one [`UsageSpec`] entry; `None` keeps
/// the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceAmounts {
    /// CPU.
    pub cpu: Option<Amount>,
    /// Memory.
    pub memory: Option<Amount>,
}

impl UsageSpec {
    /// Parse an annotation value: entries separated by `;`, each
    /// `[CONTAINER:]cpu=Q,memory=Q` where `Q` is a quantity (`250m`,
    /// `64Mi`) or a percentage of the container's request (`150%`). An
    /// entry without a container name applies to every container without
    /// one of its own. Examples: `cpu=250m,memory=64Mi`, `cpu=150%`,
    /// `web:cpu=1;sidecar:cpu=5m,memory=16Mi`.
    pub fn parse(value: &str) -> Result<UsageSpec, String> {
        let mut spec = UsageSpec::default();
        for entry in value.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (container, pairs) = match entry.split_once(':') {
                Some((c, rest)) if !c.contains('=') => (Some(c.trim()), rest),
                _ => (None, entry),
            };
            let mut amounts = ResourceAmounts::default();
            for pair in pairs.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (key, q) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("{pair:?} is not RESOURCE=QUANTITY"))?;
                let (key, q) = (key.trim(), q.trim());
                let amount = parse_amount(key, q)?;
                match key {
                    "cpu" => amounts.cpu = Some(amount),
                    "memory" => amounts.memory = Some(amount),
                    other => return Err(format!("unknown resource {other:?} (cpu or memory)")),
                }
            }
            match container {
                Some("") => return Err(format!("{entry:?} has an empty container name")),
                Some(c) => {
                    spec.containers.insert(c.to_string(), amounts);
                }
                None => spec.all = amounts,
            }
        }
        Ok(spec)
    }

    fn for_container(&self, name: &str) -> ResourceAmounts {
        let own = self.containers.get(name).copied().unwrap_or_default();
        ResourceAmounts {
            cpu: own.cpu.or(self.all.cpu),
            memory: own.memory.or(self.all.memory),
        }
    }
}

fn parse_amount(key: &str, q: &str) -> Result<Amount, String> {
    if let Some(p) = q.strip_suffix('%') {
        return p
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|p| *p >= 0)
            .map(Amount::PercentOfRequest)
            .ok_or_else(|| format!("{key}={q}: not a whole, non-negative percentage"));
    }
    let milli = quantity::parse_milli(q).map_err(|e| format!("{key}={q}: {e}"))?;
    if milli < 0 {
        return Err(format!("{key}={q}: usage cannot be negative"));
    }
    Ok(Amount::Absolute(match key {
        "cpu" => milli.saturating_mul(1_000_000),
        _ => milli / 1000 + i64::from(milli % 1000 != 0),
    }))
}

/// What the provider keeps of a pod: enough to compute and label its
/// metrics.
#[derive(Clone, Debug, Default)]
pub struct PodInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels (copied to the PodMetrics, as metrics-server does).
    pub labels: BTreeMap<String, String>,
    /// The node it is bound to.
    pub node: Option<String>,
    /// `status.phase`.
    pub phase: String,
    /// Its containers (and restartable init containers), with requests.
    pub containers: Vec<ContainerInfo>,
    /// The parsed [`USAGE_ANNOTATION`], if any (an invalid one is logged
    /// and ignored).
    pub usage: Option<UsageSpec>,
}

/// A container's name and requests.
#[derive(Clone, Debug, Default)]
pub struct ContainerInfo {
    /// Name.
    pub name: String,
    /// CPU request, nanocores.
    pub cpu_request: Option<i64>,
    /// Memory request, bytes.
    pub memory_request: Option<i64>,
}

/// What the provider keeps of a node.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    /// Name.
    pub name: String,
    /// Labels (copied to the NodeMetrics; [`RUNTIME_LABEL`] picks the source).
    pub labels: BTreeMap<String, String>,
    /// The node's own [`USAGE_ANNOTATION`] (its base usage), if any.
    pub usage: Option<UsageSpec>,
}

/// A measurement: when, over what window, and the value.
#[derive(Clone, Debug)]
pub struct Sample<T> {
    /// The window's end.
    pub timestamp: jiff::Timestamp,
    /// The window's length.
    pub window: Duration,
    /// The value.
    pub value: T,
}

/// Where usage comes from for some nodes (metrics-server's scrape of a
/// kubelet, or the simulator's model). Answers are synchronous: a source
/// that measures keeps its last scrape and answers from it, as
/// metrics-server does.
pub trait UsageSource: Send + Sync {
    /// Whether this source answers for `node`.
    fn serves(&self, node: &NodeInfo) -> bool;
    /// A running pod's usage per container, `None` while unknown.
    fn pod_usage(&self, node: &NodeInfo, pod: &PodInfo) -> Option<Sample<Vec<(String, Usage)>>>;
    /// The node's usage, given its running pods; `None` while unknown.
    fn node_usage(&self, node: &NodeInfo, pods: &[&PodInfo]) -> Option<Sample<Usage>>;
}

/// The simulated model's settings.
#[derive(Clone, Debug)]
pub struct UsageOptions {
    /// The share of its requests a container uses, in percent (default 50).
    pub request_share_percent: i64,
    /// A container's usage when it requests nothing (default 1m CPU, 8Mi).
    pub no_request: Usage,
    /// What a node uses besides its pods (default 100m CPU, 256Mi).
    pub node_base: Usage,
    /// The window reported (metrics-server's `--metric-resolution`,
    /// default 15 s).
    pub window: Duration,
}

impl Default for UsageOptions {
    fn default() -> Self {
        UsageOptions {
            request_share_percent: 50,
            no_request: Usage {
                cpu_nanos: 1_000_000,
                memory_bytes: 8 << 20,
            },
            node_base: Usage {
                cpu_nanos: 100_000_000,
                memory_bytes: 256 << 20,
            },
            window: Duration::from_secs(15),
        }
    }
}

/// Usage on simulated nodes (every node without [`RUNTIME_LABEL`]): see
/// the module docs.
#[derive(Clone, Debug, Default)]
pub struct SimulatedUsage {
    opts: UsageOptions,
}

impl SimulatedUsage {
    /// The model with `opts`.
    pub fn new(opts: UsageOptions) -> SimulatedUsage {
        SimulatedUsage { opts }
    }

    /// A container's usage: its annotation entry, else the share of its
    /// requests, else the no-request default.
    pub fn container_usage(&self, c: &ContainerInfo, spec: Option<&UsageSpec>) -> Usage {
        let amounts = spec.map(|s| s.for_container(&c.name)).unwrap_or_default();
        let pick = |amount: Option<Amount>, request: Option<i64>, fallback: i64| {
            let base = request.unwrap_or(fallback);
            match amount {
                Some(Amount::Absolute(v)) => v,
                Some(Amount::PercentOfRequest(p)) => percent(base, p),
                None => match request {
                    Some(r) => percent(r, self.opts.request_share_percent),
                    None => fallback,
                },
            }
        };
        Usage {
            cpu_nanos: pick(amounts.cpu, c.cpu_request, self.opts.no_request.cpu_nanos),
            memory_bytes: pick(
                amounts.memory,
                c.memory_request,
                self.opts.no_request.memory_bytes,
            ),
        }
    }

    fn sample<T>(&self, value: T) -> Sample<T> {
        Sample {
            timestamp: jiff::Timestamp::now(),
            window: self.opts.window,
            value,
        }
    }
}

fn percent(base: i64, p: i64) -> i64 {
    i64::try_from(i128::from(base) * i128::from(p) / 100).unwrap_or(i64::MAX)
}

impl UsageSource for SimulatedUsage {
    fn serves(&self, node: &NodeInfo) -> bool {
        !node.labels.contains_key(RUNTIME_LABEL)
    }

    fn pod_usage(&self, _: &NodeInfo, pod: &PodInfo) -> Option<Sample<Vec<(String, Usage)>>> {
        let value = pod
            .containers
            .iter()
            .map(|c| (c.name.clone(), self.container_usage(c, pod.usage.as_ref())))
            .collect();
        Some(self.sample(value))
    }

    fn node_usage(&self, node: &NodeInfo, pods: &[&PodInfo]) -> Option<Sample<Usage>> {
        let base = node.usage.as_ref().map(|s| s.all);
        let base = Usage {
            cpu_nanos: match base.and_then(|b| b.cpu) {
                Some(Amount::Absolute(v)) => v,
                Some(Amount::PercentOfRequest(p)) => percent(self.opts.node_base.cpu_nanos, p),
                None => self.opts.node_base.cpu_nanos,
            },
            memory_bytes: match base.and_then(|b| b.memory) {
                Some(Amount::Absolute(v)) => v,
                Some(Amount::PercentOfRequest(p)) => percent(self.opts.node_base.memory_bytes, p),
                None => self.opts.node_base.memory_bytes,
            },
        };
        let total = pods
            .iter()
            .flat_map(|p| {
                p.containers
                    .iter()
                    .map(|c| self.container_usage(c, p.usage.as_ref()))
            })
            .fold(base, Usage::add);
        Some(self.sample(total))
    }
}

/// The Metrics API's provider: pods and nodes from watches, usage from
/// the [`UsageSource`]s. Cheap to clone.
#[derive(Clone)]
pub struct ResourceMetrics {
    inner: Arc<Inner>,
}

struct Inner {
    sources: Vec<Arc<dyn UsageSource>>,
    pods: RwLock<HashMap<(String, String), PodInfo>>,
    nodes: RwLock<HashMap<String, NodeInfo>>,
    /// Watches (pods, nodes) that listed at least once.
    listed: AtomicUsize,
}

impl std::fmt::Debug for ResourceMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceMetrics")
            .field("sources", &self.inner.sources.len())
            .finish_non_exhaustive()
    }
}

impl ResourceMetrics {
    /// A provider with the simulated source only (add others with
    /// [`with_source`](Self::with_source), which are asked first).
    pub fn new(opts: UsageOptions) -> ResourceMetrics {
        ResourceMetrics {
            inner: Arc::new(Inner {
                sources: vec![Arc::new(SimulatedUsage::new(opts))],
                pods: RwLock::default(),
                nodes: RwLock::default(),
                listed: AtomicUsize::new(0),
            }),
        }
    }

    /// Ask `source` before the ones already there (e.g. a `/stats/summary`
    /// scraper for container nodes). Call before [`start`](Self::start).
    #[must_use]
    pub fn with_source(self, source: Arc<dyn UsageSource>) -> ResourceMetrics {
        let mut sources = vec![source];
        sources.extend(self.inner.sources.iter().cloned());
        ResourceMetrics {
            inner: Arc::new(Inner {
                sources,
                pods: RwLock::default(),
                nodes: RwLock::default(),
                listed: AtomicUsize::new(0),
            }),
        }
    }

    /// Watch pods and nodes through `client` (list and watch on both is
    /// all it needs) until `stop`.
    pub fn start(self, client: Client, stop: CancellationToken) -> ResourceMetrics {
        tokio::spawn(watch_pods(
            Api::all(client.clone()),
            self.inner.clone(),
            stop.clone(),
        ));
        tokio::spawn(watch_nodes(Api::all(client), self.inner.clone(), stop));
        self
    }

    /// Whether both watches have listed.
    pub fn synced(&self) -> bool {
        self.inner.listed.load(Ordering::SeqCst) >= 2
    }

    /// Put a pod as a watch would (for tests and other feeds).
    pub fn put_pod(&self, pod: &Pod) {
        let Ok(pod) = serde_json::to_value(pod).and_then(serde_json::from_value::<UsagePod>) else {
            return;
        };
        let info = pod_info(&pod);
        write(&self.inner.pods).insert((info.namespace.clone(), info.name.clone()), info);
    }

    /// Put a node as a watch would.
    pub fn put_node(&self, node: &Node) {
        let info = node_info(node);
        write(&self.inner.nodes).insert(info.name.clone(), info);
    }

    fn source_for(&self, node: &NodeInfo) -> Option<&Arc<dyn UsageSource>> {
        self.inner.sources.iter().find(|s| s.serves(node))
    }

    /// Every node's metrics (nodes no source has numbers for are left out).
    pub fn node_metrics(&self) -> Vec<NodeMetrics> {
        let nodes = read(&self.inner.nodes);
        let pods = read(&self.inner.pods);
        let mut by_node: HashMap<&str, Vec<&PodInfo>> = HashMap::new();
        for p in pods.values().filter(|p| counted(p)) {
            if let Some(n) = &p.node {
                by_node.entry(n.as_str()).or_default().push(p);
            }
        }
        let mut out: Vec<NodeMetrics> = nodes
            .values()
            .filter_map(|n| {
                let pods = by_node
                    .get(n.name.as_str())
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                let s = self.source_for(n)?.node_usage(n, pods)?;
                Some(NodeMetrics {
                    kind: "NodeMetrics".into(),
                    api_version: API_VERSION.into(),
                    metadata: metadata(&n.name, None, &n.labels),
                    timestamp: Time(second(s.timestamp)),
                    window: go_duration(s.window),
                    usage: s.value.to_quantities(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        out
    }

    /// The running pods' metrics in `namespace` (every namespace with
    /// `None`), sorted by namespace and name.
    pub fn pod_metrics(&self, namespace: Option<&str>) -> Vec<PodMetrics> {
        let nodes = read(&self.inner.nodes);
        let pods = read(&self.inner.pods);
        let mut out: Vec<PodMetrics> = pods
            .values()
            .filter(|p| namespace.is_none_or(|ns| p.namespace == ns) && counted(p))
            .filter_map(|p| {
                let node = nodes.get(p.node.as_deref()?)?;
                let s = self.source_for(node)?.pod_usage(node, p)?;
                Some(PodMetrics {
                    kind: "PodMetrics".into(),
                    api_version: API_VERSION.into(),
                    metadata: metadata(&p.name, Some(&p.namespace), &p.labels),
                    timestamp: Time(second(s.timestamp)),
                    window: go_duration(s.window),
                    containers: s
                        .value
                        .into_iter()
                        .map(|(name, u)| ContainerMetrics {
                            name,
                            usage: u.to_quantities(),
                        })
                        .collect(),
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        out
    }
}

/// metrics-server reports pods whose containers run: bound, Running, not
/// being deleted.
fn counted(p: &PodInfo) -> bool {
    p.node.is_some() && p.phase == "Running"
}

fn metadata(name: &str, namespace: Option<&str>, labels: &BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: (!labels.is_empty()).then(|| labels.clone()),
        // metrics-server stamps each object as created when served.
        creation_timestamp: Some(Time(second(jiff::Timestamp::now()))),
        ..ObjectMeta::default()
    }
}

/// `metav1.Time` carries whole seconds on the wire.
fn second(t: jiff::Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// A duration as Go's `time.Duration.String()` prints it (`15s`, `1.5s`,
/// `500ms`), which is how `metav1.Duration` travels.
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        let (unit, div) = if nanos < 1_000 {
            ("ns", 1)
        } else if nanos < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", trim_fraction(nanos, div));
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let frac = u128::from(s) * 1_000_000_000 + u128::from(d.subsec_nanos());
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{}s", trim_fraction(frac, 1_000_000_000)));
    out
}

fn trim_fraction(value: u128, div: u128) -> String {
    let (whole, frac) = (value / div, value % div);
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

fn parse_usage(
    kind: &str,
    name: &str,
    annotations: &BTreeMap<String, String>,
) -> Option<UsageSpec> {
    let value = annotations.get(USAGE_ANNOTATION)?;
    match UsageSpec::parse(value) {
        Ok(spec) => Some(spec),
        Err(e) => {
            tracing::warn!(%kind, %name, annotation = USAGE_ANNOTATION, error = %e, "ignoring an invalid usage annotation");
            None
        }
    }
}

/// The pod type the provider watches: only what [`PodInfo`] is made
/// from. Every pod event reaches the provider; decoding each into a full
/// `Pod` would build probes, volumes and environments only to drop them,
/// while serde skips those here as it parses.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UsagePod {
    /// Name, namespace, labels, annotations, deletion.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Node and containers.
    pub spec: Option<UsagePodSpec>,
    /// Phase.
    pub status: Option<UsagePodStatus>,
}

/// The spec fields kept.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsagePodSpec {
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// Containers.
    #[serde(default)]
    pub containers: Vec<UsageContainer>,
    /// Init containers (restartable ones run beside the others).
    pub init_containers: Option<Vec<UsageContainer>>,
}

/// A container's name, restart policy and requests.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageContainer {
    /// Name.
    pub name: String,
    /// `Always` for a sidecar init container.
    pub restart_policy: Option<String>,
    /// Requests.
    pub resources: Option<UsageResources>,
}

/// A container's requests.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UsageResources {
    /// `requests`.
    pub requests: Option<BTreeMap<String, Quantity>>,
}

/// The status field kept.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UsagePodStatus {
    /// `status.phase`.
    pub phase: Option<String>,
}

impl kube::Resource for UsagePod {
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

fn container_info(c: &UsageContainer) -> ContainerInfo {
    let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    ContainerInfo {
        name: c.name.clone(),
        cpu_request: req
            .and_then(|m| m.get("cpu"))
            .and_then(|q| quantity::parse_milli(&q.0).ok())
            .map(|m| m.saturating_mul(1_000_000)),
        memory_request: req
            .and_then(|m| m.get("memory"))
            .and_then(|q| quantity::parse_value(&q.0).ok()),
    }
}

/// The provider's view of `pod`: running containers are the regular ones
/// plus restartable init containers (sidecars).
pub fn pod_info(pod: &UsagePod) -> PodInfo {
    let spec = pod.spec.as_ref();
    let mut containers: Vec<ContainerInfo> = spec
        .map(|s| s.containers.iter().map(container_info).collect())
        .unwrap_or_default();
    if let Some(init) = spec.and_then(|s| s.init_containers.as_ref()) {
        containers.extend(
            init.iter()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                .map(container_info),
        );
    }
    let name = pod.name_any();
    let namespace = pod.namespace().unwrap_or_default();
    PodInfo {
        usage: parse_usage("Pod", &format!("{namespace}/{name}"), pod.annotations()),
        namespace,
        name,
        labels: pod.labels().clone(),
        node: spec.and_then(|s| s.node_name.clone()),
        phase: match pod.metadata.deletion_timestamp {
            // Terminating pods drop out, as their containers stop.
            Some(_) => "Terminating".into(),
            None => pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
        },
        containers,
    }
}

/// The provider's view of `node`.
pub fn node_info(node: &Node) -> NodeInfo {
    NodeInfo {
        name: node.name_any(),
        labels: node.labels().clone(),
        usage: parse_usage("Node", &node.name_any(), node.annotations()),
    }
}

async fn watch_pods(api: Api<UsagePod>, inner: Arc<Inner>, stop: CancellationToken) {
    let key = |p: &PodInfo| (p.namespace.clone(), p.name.clone());
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    let mut relist: Option<HashMap<(String, String), PodInfo>> = None;
    let mut listed = false;
    loop {
        let ev = tokio::select! {
            () = stop.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::debug!(error = %e, "metrics provider pod watch");
                continue;
            }
        };
        match ev {
            watcher::Event::Init => relist = Some(HashMap::new()),
            watcher::Event::InitApply(p) => {
                let info = pod_info(&p);
                if let Some(r) = relist.as_mut() {
                    r.insert(key(&info), info);
                }
            }
            watcher::Event::InitDone => {
                *write(&inner.pods) = relist.take().unwrap_or_default();
                if !listed {
                    listed = true;
                    inner.listed.fetch_add(1, Ordering::SeqCst);
                }
            }
            watcher::Event::Apply(p) => {
                let info = pod_info(&p);
                write(&inner.pods).insert(key(&info), info);
            }
            watcher::Event::Delete(p) => {
                write(&inner.pods).remove(&(p.namespace().unwrap_or_default(), p.name_any()));
            }
        }
    }
}

async fn watch_nodes(api: Api<Node>, inner: Arc<Inner>, stop: CancellationToken) {
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    let mut relist: Option<HashMap<String, NodeInfo>> = None;
    let mut listed = false;
    loop {
        let ev = tokio::select! {
            () = stop.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::debug!(error = %e, "metrics provider node watch");
                continue;
            }
        };
        match ev {
            watcher::Event::Init => relist = Some(HashMap::new()),
            watcher::Event::InitApply(n) => {
                let info = node_info(&n);
                if let Some(r) = relist.as_mut() {
                    r.insert(info.name.clone(), info);
                }
            }
            watcher::Event::InitDone => {
                *write(&inner.nodes) = relist.take().unwrap_or_default();
                if !listed {
                    listed = true;
                    inner.listed.fetch_add(1, Ordering::SeqCst);
                }
            }
            watcher::Event::Apply(n) => {
                let info = node_info(&n);
                write(&inner.nodes).insert(info.name.clone(), info);
            }
            watcher::Event::Delete(n) => {
                write(&inner.nodes).remove(&n.name_any());
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotation: Option<&str>) -> Pod {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "node-0", "containers": [
                {"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}}},
                {"name": "sidecar", "image": "busybox"}
            ]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        if let Some(a) = annotation {
            p.metadata.annotations = Some(BTreeMap::from([(USAGE_ANNOTATION.into(), a.into())]));
        }
        p
    }

    fn node() -> Node {
        serde_json::from_value(json!({"metadata": {"name": "node-0", "labels": {"zone": "a"}}}))
            .unwrap()
    }

    fn usage(m: &PodMetrics, container: &str) -> (String, String) {
        let c = m.containers.iter().find(|c| c.name == container).unwrap();
        (c.usage["cpu"].0.clone(), c.usage["memory"].0.clone())
    }

    #[test]
    fn half_the_requests_by_default_and_small_defaults_without() {
        let m = ResourceMetrics::new(UsageOptions::default());
        m.put_node(&node());
        m.put_pod(&pod(None));
        let pods = m.pod_metrics(Some("default"));
        assert_eq!(pods.len(), 1);
        assert_eq!(usage(&pods[0], "web"), ("100m".into(), "64Mi".into()));
        assert_eq!(usage(&pods[0], "sidecar"), ("1m".into(), "8Mi".into()));
        assert_eq!(pods[0].window, "15s");
        let v = serde_json::to_value(&pods[0]).unwrap();
        assert_eq!(v["kind"], "PodMetrics");
        assert_eq!(v["apiVersion"], "metrics.k8s.io/v1beta1");
        assert_eq!(v["metadata"]["labels"]["app"], "web");
        // Node: 100m + 1m + base 100m; 64Mi + 8Mi + 256Mi.
        let nodes = m.node_metrics();
        assert_eq!(nodes[0].usage["cpu"].0, "201m");
        assert_eq!(nodes[0].usage["memory"].0, "328Mi");
        assert_eq!(m.pod_metrics(Some("other")).len(), 0);
    }

    #[test]
    fn the_annotation_sets_usage_per_pod_or_container() {
        let m = ResourceMetrics::new(UsageOptions::default());
        m.put_node(&node());
        m.put_pod(&pod(Some("cpu=150%,memory=100Mi;sidecar:cpu=5m")));
        let p = &m.pod_metrics(None)[0];
        assert_eq!(usage(p, "web"), ("300m".into(), "100Mi".into()));
        assert_eq!(usage(p, "sidecar"), ("5m".into(), "100Mi".into()));
        // An invalid annotation is ignored: the defaults apply.
        m.put_pod(&pod(Some("cpu=lots")));
        assert_eq!(
            usage(&m.pod_metrics(None)[0], "web"),
            ("100m".into(), "64Mi".into())
        );
    }

    #[test]
    fn pods_not_running_or_on_container_nodes_have_no_metrics() {
        let m = ResourceMetrics::new(UsageOptions::default());
        let mut n = node();
        n.metadata.labels = Some(BTreeMap::from([(
            RUNTIME_LABEL.into(),
            "containerd".into(),
        )]));
        m.put_node(&n);
        m.put_pod(&pod(None));
        assert!(m.pod_metrics(None).is_empty());
        assert!(m.node_metrics().is_empty());
        m.put_node(&node());
        let mut pending = pod(None);
        pending.status = None;
        m.put_pod(&pending);
        assert!(m.pod_metrics(None).is_empty());
    }

    #[test]
    fn annotation_grammar() {
        let s = UsageSpec::parse("web: cpu=1, memory=1Gi ; cpu=10%").unwrap();
        assert_eq!(s.all.cpu, Some(Amount::PercentOfRequest(10)));
        assert_eq!(
            s.containers["web"].cpu,
            Some(Amount::Absolute(1_000_000_000))
        );
        assert_eq!(s.containers["web"].memory, Some(Amount::Absolute(1 << 30)));
        assert!(UsageSpec::parse("gpu=1").is_err());
        assert!(UsageSpec::parse("cpu").is_err());
        assert!(UsageSpec::parse("cpu=-1").is_err());
        assert!(UsageSpec::parse(":cpu=1").is_err());
    }

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(15)), "15s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
    }
}
