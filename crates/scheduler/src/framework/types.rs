//! What plugins read: [`PodInfo`] (a pod with its requests, affinity terms and
//! ports parsed once, when it enters the scheduler) and [`NodeInfo`] (a node
//! with the aggregates of the pods on it kept up to date, so a Filter is a few
//! integer comparisons), as kube-scheduler's `framework/types.go`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinityTerm, Taint,
    Toleration,
};
use kubeforge_apimachinery::labels::Selector;

use kubeforge_apimachinery::quantity;

/// CPU (milli) counted for a container without a CPU request when scoring
/// (kube-scheduler's `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory counted for a container without a memory request when scoring
/// (`DefaultMemoryRequest`, 200 MB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// An amount of each resource: CPU in milli-cores, memory and ephemeral
/// storage in bytes, `pods` as a count, and extended/scalar resources
/// (`nvidia.com/gpu`, `hugepages-2Mi`, …) by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    /// CPU in thousandths of a core.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Number of pods (only meaningful for allocatable).
    pub allowed_pod_number: i64,
    /// Every other resource by name, in whole units.
    pub scalar: Vec<(String, i64)>,
}

impl Resource {
    /// The amount of a scalar resource (0 when absent).
    pub fn scalar(&self, name: &str) -> i64 {
        self.scalar
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }

    /// Whether a scalar resource is present at all.
    pub fn has_scalar(&self, name: &str) -> bool {
        self.scalar.iter().any(|(n, _)| n == name)
    }

    fn scalar_mut(&mut self, name: &str) -> &mut i64 {
        if let Some(i) = self.scalar.iter().position(|(n, _)| n == name) {
            &mut self.scalar[i].1
        } else {
            self.scalar.push((name.to_string(), 0));
            let last = self.scalar.len() - 1;
            &mut self.scalar[last].1
        }
    }

    /// Add one named quantity.
    pub fn add_named(&mut self, name: &str, milli_or_value: i64) {
        match name {
            "cpu" => self.milli_cpu += milli_or_value,
            "memory" => self.memory += milli_or_value,
            "ephemeral-storage" => self.ephemeral_storage += milli_or_value,
            "pods" => self.allowed_pod_number += milli_or_value,
            other => *self.scalar_mut(other) += milli_or_value,
        }
    }

    /// `self += other`.
    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pod_number += other.allowed_pod_number;
        for (n, v) in &other.scalar {
            *self.scalar_mut(n) += v;
        }
    }

    /// `self -= other`.
    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pod_number -= other.allowed_pod_number;
        for (n, v) in &other.scalar {
            *self.scalar_mut(n) -= v;
        }
    }

    /// `self = max(self, other)` per resource (init containers).
    fn max_with(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (n, v) in &other.scalar {
            let e = self.scalar_mut(n);
            *e = (*e).max(*v);
        }
    }

    /// The amount of a resource by its Kubernetes name (CPU in milli).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.milli_cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            "pods" => self.allowed_pod_number,
            other => self.scalar(other),
        }
    }

    /// Parse a `ResourceList` (`{"cpu": "100m", …}`).
    pub fn from_list(
        list: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    ) -> Result<Resource, String> {
        let mut r = Resource::default();
        for (name, q) in list {
            let v = if name == "cpu" {
                quantity::parse_milli(&q.0)
            } else {
                quantity::parse_value(&q.0)
            }
            .map_err(|e| format!("resource {name}: {e}"))?;
            r.add_named(name, v);
        }
        Ok(r)
    }
}

/// A host port a pod uses: (protocol, host IP, port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// TCP, UDP or SCTP.
    pub protocol: String,
    /// The host IP ("0.0.0.0" when unset).
    pub ip: String,
    /// The port.
    pub port: i32,
}

impl HostPort {
    /// Whether two host ports conflict (same protocol and port, and the same
    /// IP or either is the wildcard).
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// A parsed pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityTerm {
    /// Namespaces the term applies to (the pod's own when neither this nor a
    /// namespace selector is given).
    pub namespaces: Vec<String>,
    /// Namespaces chosen by labels (`None`: only `namespaces`).
    pub namespace_selector: Option<Selector>,
    /// Which pods the term matches.
    pub selector: Selector,
    /// The node label that defines a topology domain.
    pub topology_key: String,
}

impl AffinityTerm {
    /// Whether an existing pod is matched by this term (namespace + labels).
    /// Namespace selectors are matched against namespace labels the caller
    /// does not have here, so a selector only matches everything or nothing.
    pub fn matches(&self, pod: &PodInfo) -> bool {
        let ns_ok = self.namespaces.iter().any(|n| n == &pod.namespace)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| s.is_everything());
        ns_ok && self.selector.matches(&pod.labels)
    }
}

/// A preferred (weighted) affinity term.
#[derive(Debug, Clone)]
pub struct WeightedAffinityTerm {
    /// The term.
    pub term: AffinityTerm,
    /// Its weight (1–100).
    pub weight: i64,
}

/// A node selector requirement with its operator checked.
#[derive(Debug, Clone)]
pub struct NodeRequirement {
    /// Label key (or field name for matchFields).
    pub key: String,
    /// The operator.
    pub op: NodeOp,
    /// Values.
    pub values: Vec<String>,
}

/// Node selector operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeOp {
    /// Value in the set.
    In,
    /// Value not in the set (or key absent).
    NotIn,
    /// Key present.
    Exists,
    /// Key absent.
    DoesNotExist,
    /// Integer greater than.
    Gt,
    /// Integer less than.
    Lt,
}

impl NodeRequirement {
    fn parse(r: &NodeSelectorRequirement, field: &str) -> Result<NodeRequirement, String> {
        let op = match r.operator.as_str() {
            "In" => NodeOp::In,
            "NotIn" => NodeOp::NotIn,
            "Exists" => NodeOp::Exists,
            "DoesNotExist" => NodeOp::DoesNotExist,
            "Gt" => NodeOp::Gt,
            "Lt" => NodeOp::Lt,
            other => {
                return Err(format!(
                    "{field}.operator: Unsupported value: \"{other}\": supported values: \"DoesNotExist\", \"Exists\", \"Gt\", \"In\", \"Lt\", \"NotIn\""
                ));
            }
        };
        let values = r.values.clone().unwrap_or_default();
        match op {
            NodeOp::In | NodeOp::NotIn if values.is_empty() => {
                return Err(format!(
                    "{field}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
                ));
            }
            NodeOp::Exists | NodeOp::DoesNotExist if !values.is_empty() => {
                return Err(format!(
                    "{field}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                ));
            }
            NodeOp::Gt | NodeOp::Lt if values.len() != 1 || values[0].parse::<i64>().is_err() => {
                return Err(format!(
                    "{field}.values: Invalid value: must be specified single integer value when `operator` is 'Lt' or 'Gt'"
                ));
            }
            _ => {}
        }
        Ok(NodeRequirement {
            key: r.key.clone(),
            op,
            values,
        })
    }

    /// Whether a value (None: key absent) satisfies the requirement.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self.op {
            NodeOp::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            NodeOp::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            NodeOp::Exists => value.is_some(),
            NodeOp::DoesNotExist => value.is_none(),
            NodeOp::Gt | NodeOp::Lt => {
                let (Some(v), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|b| b.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.op == NodeOp::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

/// A node selector term: label expressions and field expressions, all ANDed.
#[derive(Debug, Clone, Default)]
pub struct NodeTerm {
    /// matchExpressions.
    pub expressions: Vec<NodeRequirement>,
    /// matchFields (only `metadata.name` is supported, as in Kubernetes).
    pub fields: Vec<NodeRequirement>,
}

impl NodeTerm {
    /// Parse a `NodeSelectorTerm`; `field` names it in errors.
    pub fn parse(t: &NodeSelectorTerm, field: &str) -> Result<NodeTerm, String> {
        let mut out = NodeTerm::default();
        for (i, r) in t.match_expressions.iter().flatten().enumerate() {
            out.expressions.push(NodeRequirement::parse(
                r,
                &format!("{field}.matchExpressions[{i}]"),
            )?);
        }
        for (i, r) in t.match_fields.iter().flatten().enumerate() {
            let f = format!("{field}.matchFields[{i}]");
            if r.key != "metadata.name" {
                return Err(format!(
                    "{f}.key: Invalid value: \"{}\": not a valid field selector key",
                    r.key
                ));
            }
            out.fields.push(NodeRequirement::parse(r, &f)?);
        }
        Ok(out)
    }

    /// Whether a node matches the term (an empty term matches nothing).
    pub fn matches(&self, node: &NodeInfo) -> bool {
        if self.expressions.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.expressions
            .iter()
            .all(|r| r.matches(node.labels().get(&r.key).map(String::as_str)))
            && self.fields.iter().all(|r| r.matches(Some(&node.name)))
    }
}

/// A pod as the scheduler sees it: the object and everything parsed from it
/// once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// The pod object.
    pub pod: Arc<Pod>,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Effective requests: max(Σ containers, max init container) + overhead.
    pub requests: Resource,
    /// CPU and memory with the scoring defaults for missing requests.
    pub non_zero_cpu: i64,
    /// See `non_zero_cpu`.
    pub non_zero_memory: i64,
    /// Priority (resolved from the PriorityClass by the scheduler).
    pub priority: i32,
    /// Whether the pod may preempt (`preemptionPolicy` not `Never`).
    pub may_preempt: bool,
    /// Host ports used.
    pub host_ports: Vec<HostPort>,
    /// Images of the containers, normalized (`:latest` added when untagged).
    pub images: Vec<String>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// nodeSelector.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity terms (`None`: no requirement).
    pub required_node_terms: Option<Vec<NodeTerm>>,
    /// Preferred node affinity terms with weights.
    pub preferred_node_terms: Vec<(i64, NodeTerm)>,
    /// Required pod affinity terms.
    pub required_affinity: Vec<AffinityTerm>,
    /// Required pod anti-affinity terms.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// Preferred pod affinity terms.
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    /// Preferred pod anti-affinity terms.
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    /// Why the pod cannot be scheduled whatever the nodes (malformed input).
    pub parse_error: Option<String>,
    /// Creation time (for preemption's "latest start" rule), seconds.
    pub start_time: i64,
    /// The controller owner UID the pod counts under in
    /// [`NodeInfo::controllers`] (`None` when it has no controller or is
    /// terminating), read from the object once: adding and removing pods
    /// (preemption's dry runs do it by the hundred per cycle) then never
    /// touches the pod object, which is rarely in the CPU cache.
    counted_controller: Option<Box<str>>,
    /// A hash of `uid`, so telling two pods apart rarely compares the
    /// UID strings ([`PodInfo::same_uid`]).
    uid_hash: u64,
}

fn uid_hash(uid: &str) -> u64 {
    use std::hash::BuildHasher;
    super::topology_counts::FastBuild::default().hash_one(uid)
}

fn normalize_image(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

fn container_requests(c: &Container) -> Result<Resource, String> {
    match c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        Some(req) => Resource::from_list(req),
        None => Ok(Resource::default()),
    }
}

fn parse_affinity_term(
    t: &PodAffinityTerm,
    own_ns: &str,
    field: &str,
) -> Result<AffinityTerm, String> {
    if t.topology_key.is_empty() {
        return Err(format!(
            "{field}.topologyKey: Required value: can not be empty"
        ));
    }
    let selector = match &t.label_selector {
        None => Selector::nothing(),
        Some(s) => {
            let v = serde_json::to_value(s).map_err(|e| format!("{field}.labelSelector: {e}"))?;
            Selector::from_label_selector(&v).map_err(|e| format!("{field}.labelSelector: {e}"))?
        }
    };
    let namespace_selector = match &t.namespace_selector {
        None => None,
        Some(s) => {
            let v =
                serde_json::to_value(s).map_err(|e| format!("{field}.namespaceSelector: {e}"))?;
            Some(
                Selector::from_label_selector(&v)
                    .map_err(|e| format!("{field}.namespaceSelector: {e}"))?,
            )
        }
    };
    let mut namespaces = t.namespaces.clone().unwrap_or_default();
    if namespaces.is_empty() && namespace_selector.is_none() {
        namespaces.push(own_ns.to_string());
    }
    Ok(AffinityTerm {
        namespaces,
        namespace_selector,
        selector,
        topology_key: t.topology_key.clone(),
    })
}

impl PodInfo {
    /// The controller UID the pod counts under for the "same controller"
    /// matcher and in [`NodeInfo::controllers`]: its controller owner's,
    /// unless the pod is terminating.
    pub fn counted_controller(&self) -> Option<&str> {
        self.counted_controller.as_deref()
    }

    /// Parse a pod. Malformed parts (bad quantities, operators, selectors) do
    /// not fail here: they are kept in `parse_error`, and the pod is reported
    /// unschedulable with that message.
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let meta = &pod.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let mut errors: Vec<String> = Vec::new();
        let mut requests = Resource::default();
        let mut non_zero_cpu = 0;
        let mut non_zero_memory = 0;
        let mut host_ports = Vec::new();
        let mut images = Vec::new();
        for (i, c) in spec.containers.iter().enumerate() {
            match container_requests(c) {
                Ok(r) => {
                    let (cpu, memory) = non_zero_requests(c, &r);
                    non_zero_cpu += cpu;
                    non_zero_memory += memory;
                    requests.add(&r);
                }
                Err(e) => errors.push(format!("spec.containers[{i}].resources.requests: {e}")),
            }
            for p in c.ports.iter().flatten() {
                if let Some(hp) = p.host_port.filter(|p| *p > 0) {
                    host_ports.push(HostPort {
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        ip: p
                            .host_ip
                            .clone()
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| "0.0.0.0".into()),
                        port: hp,
                    });
                }
            }
            if let Some(img) = &c.image {
                images.push(normalize_image(img));
            }
        }
        // Init containers run one at a time: the pod needs the largest of
        // them (with the sidecars started before it), or the sum of the app
        // containers and sidecars, whichever is bigger. Restartable
        // "sidecar" init containers count as app containers — in the
        // non-zero requests used for scoring too (kube's PodRequests with
        // NonMissingContainerRequests).
        let mut init_max = Resource::default();
        let mut sidecars = Resource::default();
        let (mut nz_init_max, mut nz_sidecars) = ((0, 0), (0, 0));
        for (i, c) in spec.init_containers.iter().flatten().enumerate() {
            match container_requests(c) {
                Ok(r) => {
                    let (cpu, memory) = non_zero_requests(c, &r);
                    if c.restart_policy.as_deref() == Some("Always") {
                        sidecars.add(&r);
                        nz_sidecars = (nz_sidecars.0 + cpu, nz_sidecars.1 + memory);
                    } else {
                        let mut with_sidecars = r.clone();
                        with_sidecars.add(&sidecars);
                        init_max.max_with(&with_sidecars);
                        nz_init_max = (
                            nz_init_max.0.max(cpu + nz_sidecars.0),
                            nz_init_max.1.max(memory + nz_sidecars.1),
                        );
                    }
                }
                Err(e) => errors.push(format!("spec.initContainers[{i}].resources.requests: {e}")),
            }
        }
        requests.add(&sidecars);
        requests.max_with(&init_max);
        non_zero_cpu = (non_zero_cpu + nz_sidecars.0).max(nz_init_max.0);
        non_zero_memory = (non_zero_memory + nz_sidecars.1).max(nz_init_max.1);
        if let Some(overhead) = &spec.overhead {
            match Resource::from_list(overhead) {
                Ok(o) => {
                    requests.add(&o);
                    non_zero_cpu += o.milli_cpu;
                    non_zero_memory += o.memory;
                }
                Err(e) => errors.push(format!("spec.overhead: {e}")),
            }
        }

        let mut required_node_terms = None;
        let mut preferred_node_terms = Vec::new();
        let mut required_affinity = Vec::new();
        let mut required_anti_affinity = Vec::new();
        let mut preferred_affinity = Vec::new();
        let mut preferred_anti_affinity = Vec::new();
        if let Some(aff) = &spec.affinity {
            if let Some(na) = &aff.node_affinity {
                if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                    let mut terms = Vec::new();
                    for (i, t) in req.node_selector_terms.iter().enumerate() {
                        match NodeTerm::parse(
                            t,
                            &format!(
                                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                            ),
                        ) {
                            Ok(t) => terms.push(t),
                            Err(e) => errors.push(e),
                        }
                    }
                    if req.node_selector_terms.is_empty() {
                        errors.push("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: Required value: must have at least one node selector term".into());
                    }
                    required_node_terms = Some(terms);
                }
                for (i, p) in na
                    .preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .enumerate()
                {
                    match NodeTerm::parse(
                        &p.preference,
                        &format!(
                            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
                        ),
                    ) {
                        Ok(t) => preferred_node_terms.push((i64::from(p.weight), t)),
                        Err(e) => errors.push(e),
                    }
                }
            }
            let pa = aff.pod_affinity.as_ref();
            let paa = aff.pod_anti_affinity.as_ref();
            for (list, out, field) in [
                (
                    pa.and_then(|a| {
                        a.required_during_scheduling_ignored_during_execution
                            .as_ref()
                    }),
                    &mut required_affinity,
                    "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
                ),
                (
                    paa.and_then(|a| {
                        a.required_during_scheduling_ignored_during_execution
                            .as_ref()
                    }),
                    &mut required_anti_affinity,
                    "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
                ),
            ] {
                for (i, t) in list.into_iter().flatten().enumerate() {
                    match parse_affinity_term(t, &namespace, &format!("{field}[{i}]")) {
                        Ok(t) => out.push(t),
                        Err(e) => errors.push(e),
                    }
                }
            }
            for (list, out, field) in [
                (
                    pa.and_then(|a| {
                        a.preferred_during_scheduling_ignored_during_execution
                            .as_ref()
                    }),
                    &mut preferred_affinity,
                    "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution",
                ),
                (
                    paa.and_then(|a| {
                        a.preferred_during_scheduling_ignored_during_execution
                            .as_ref()
                    }),
                    &mut preferred_anti_affinity,
                    "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution",
                ),
            ] {
                for (i, w) in list.into_iter().flatten().enumerate() {
                    match parse_affinity_term(
                        &w.pod_affinity_term,
                        &namespace,
                        &format!("{field}[{i}].podAffinityTerm"),
                    ) {
                        Ok(t) => out.push(WeightedAffinityTerm {
                            term: t,
                            weight: i64::from(w.weight),
                        }),
                        Err(e) => errors.push(e),
                    }
                }
            }
        }
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .or(meta.creation_timestamp.as_ref())
            .map_or(0, |t| t.0.as_second());
        PodInfo {
            namespace,
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            requests,
            non_zero_cpu,
            non_zero_memory,
            priority: spec.priority.unwrap_or(0),
            may_preempt: spec.preemption_policy.as_deref() != Some("Never"),
            host_ports,
            images,
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required_node_terms,
            preferred_node_terms,
            required_affinity,
            required_anti_affinity,
            preferred_affinity,
            preferred_anti_affinity,
            parse_error: if errors.is_empty() {
                None
            } else {
                Some(errors.join("; "))
            },
            start_time,
            uid_hash: uid_hash(meta.uid.as_deref().unwrap_or_default()),
            counted_controller: if meta.deletion_timestamp.is_some() {
                None
            } else {
                super::topology_counts::controller_uid_of(&pod).map(Box::from)
            },
            pod,
        }
    }

    /// Whether `other` has the same UID (the same pod, perhaps another
    /// version of it): the kept hashes first, the strings only when they
    /// agree.
    pub fn same_uid(&self, other: &PodInfo) -> bool {
        self.uid_hash == other.uid_hash && self.uid == other.uid
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The node the pod is bound to, if any.
    pub fn node_name(&self) -> Option<&str> {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// Whether the pod has any pod affinity or anti-affinity terms.
    pub fn has_pod_affinity(&self) -> bool {
        !(self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty())
    }
}

/// A container's CPU (millicores) and memory requests for scoring: kube's
/// defaults (100m, 200 MiB) where a request is missing.
fn non_zero_requests(c: &Container, r: &Resource) -> (i64, i64) {
    let cpu = if r.milli_cpu == 0 && !has_req(c, "cpu") {
        DEFAULT_MILLI_CPU_REQUEST
    } else {
        r.milli_cpu
    };
    let memory = if r.memory == 0 && !has_req(c, "memory") {
        DEFAULT_MEMORY_REQUEST
    } else {
        r.memory
    };
    (cpu, memory)
}

fn has_req(c: &Container, name: &str) -> bool {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|r| r.contains_key(name))
}

/// Whether a toleration tolerates a taint (key/operator/value/effect rules).
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty())
        && e != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    let op = t.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        return op == "Exists";
    }
    if key != taint.key {
        return false;
    }
    match op {
        "Exists" => true,
        "Equal" | "" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// A node and the aggregates of the pods assigned (or assumed) to it.
#[derive(Debug, Default)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// The same name, cheap to clone (for score lists).
    pub id: Arc<str>,
    /// The node object (`None` while only its pods are known).
    pub node: Option<Arc<Node>>,
    /// Allocatable resources (`status.allocatable`).
    pub allocatable: Resource,
    /// Sum of the requests of the pods on the node.
    pub requested: Resource,
    /// CPU requested with the scoring defaults for missing requests.
    pub non_zero_cpu: i64,
    /// Memory requested with the scoring defaults.
    pub non_zero_memory: i64,
    /// Pods on the node (bound or assumed).
    pub pods: Vec<Arc<PodInfo>>,
    /// How many of `pods` have pod (anti-)affinity terms.
    pub pods_with_affinity: usize,
    /// Per controller owner UID, how many of `pods` it controls that are
    /// not terminating: PodTopologySpread's per-node count for the default
    /// constraints (by hostname) without scanning the node's pods for every
    /// scored node.
    pub controllers: HashMap<Box<str>, u32, super::topology_counts::FastBuild>,
    /// How many of `pods` have required anti-affinity terms.
    pub pods_with_required_anti_affinity: usize,
    /// Host ports in use.
    pub used_ports: Vec<HostPort>,
    /// Images present on the node with their sizes in bytes.
    pub images: HashMap<String, i64>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// Bumped on every change (snapshots copy only what changed).
    pub generation: u64,
    /// The node's values of the well-known topology keys
    /// ([`WELL_KNOWN_TOPOLOGY_KEYS`]) as ids interned by the snapshot that
    /// holds the node, with that snapshot's id; `None` outside a snapshot.
    /// Lets a per-node Filter find the node's domain without string lookups.
    pub topology_ids: Option<(u64, [u32; 3])>,
    /// The lowest priority among `pods` with the latest start among the
    /// pods of that priority, kept as pods are added; stale once a pod was
    /// removed (worked out again by [`NodeInfo::lowest_priority`]).
    lowest: Lowest,
}

/// [`NodeInfo::lowest_priority`] as kept.
#[derive(Debug, Clone, Copy)]
enum Lowest {
    /// Known: `None` for no pods.
    Known(Option<(i32, i64)>),
    /// A pod was removed since it was worked out.
    Stale,
}

impl Default for Lowest {
    fn default() -> Self {
        Lowest::Known(None)
    }
}

/// Topology keys whose values the snapshot interns per node:
/// `kubernetes.io/hostname`, `topology.kubernetes.io/zone`,
/// `topology.kubernetes.io/region`.
pub const WELL_KNOWN_TOPOLOGY_KEYS: [&str; 3] = [
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// The index of `key` in [`WELL_KNOWN_TOPOLOGY_KEYS`] (the slot of
/// [`NodeInfo::topology_ids`] holding its value), if it is one of them.
pub fn well_known_key_index(key: &str) -> Option<usize> {
    WELL_KNOWN_TOPOLOGY_KEYS.iter().position(|k| *k == key)
}

/// In [`NodeInfo::topology_ids`]: the node lacks the key.
pub const NO_TOPOLOGY_VALUE: u32 = u32::MAX;

static EMPTY_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl Clone for NodeInfo {
    fn clone(&self) -> Self {
        let mut copy = NodeInfo::default();
        copy.clone_from(self);
        copy
    }

    /// Reuses this info's allocations (preemption's dry runs copy one node
    /// after another into the same scratch info).
    fn clone_from(&mut self, source: &Self) {
        let pods = self.copy_all_but_pods(source);
        self.pods.clone_from(pods);
    }
}

impl NodeInfo {
    /// A node info for a node object.
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut n = NodeInfo {
            id: Arc::from(name.as_str()),
            name,
            ..NodeInfo::default()
        };
        n.set_node(node);
        n
    }

    /// Replace the node object (pods stay).
    pub fn set_node(&mut self, node: Arc<Node>) {
        let status = node.status.as_ref();
        self.allocatable = status
            .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
            .map(|a| Resource::from_list(a).unwrap_or_default())
            .unwrap_or_default();
        self.images.clear();
        for img in status.and_then(|s| s.images.as_ref()).into_iter().flatten() {
            for name in img.names.iter().flatten() {
                self.images
                    .insert(normalize_image(name), img.size_bytes.unwrap_or(0));
            }
        }
        let spec = node.spec.as_ref();
        self.taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        self.node = Some(node);
        self.topology_ids = None;
        self.generation += 1;
    }

    /// The node's labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref())
            .unwrap_or(&EMPTY_LABELS)
    }

    /// Account for a pod on this node.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_cpu += pod.non_zero_cpu;
        self.non_zero_memory += pod.non_zero_memory;
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if pod.has_pod_affinity() {
            self.pods_with_affinity += 1;
        }
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity += 1;
        }
        if let Some(uid) = pod.counted_controller() {
            match self.controllers.get_mut(uid) {
                Some(n) => *n += 1,
                None => {
                    self.controllers.insert(uid.into(), 1);
                }
            }
        }
        if let Lowest::Known(lowest) = &mut self.lowest {
            *lowest = Some(match *lowest {
                Some((prio, start)) if prio < pod.priority => (prio, start),
                Some((prio, start)) if prio == pod.priority => (prio, start.max(pod.start_time)),
                _ => (pod.priority, pod.start_time),
            });
        }
        self.pods.push(pod);
        self.generation += 1;
    }

    /// The lowest priority among the node's pods and the latest start
    /// among the pods with that priority (`None`: no pods). Kept as pods
    /// are added; after a removal, worked out from the pods (the snapshot
    /// does that once per removal, see [`NodeInfo::refresh_lowest_priority`]).
    pub fn lowest_priority(&self) -> Option<(i32, i64)> {
        match self.lowest {
            Lowest::Known(l) => l,
            Lowest::Stale => lowest_of(&self.pods),
        }
    }

    /// Work out [`lowest_priority`](Self::lowest_priority) again after
    /// removals, so reading it is a field read.
    pub fn refresh_lowest_priority(&mut self) {
        if matches!(self.lowest, Lowest::Stale) {
            self.lowest = Lowest::Known(lowest_of(&self.pods));
        }
    }

    /// Remove a pod by UID; returns it if it was there.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let i = self.pods.iter().position(|p| p.uid == uid)?;
        Some(self.remove_pod_at(i))
    }

    /// Take back the pod added last (undoes [`NodeInfo::add_pod`] without
    /// reordering the other pods).
    pub fn pop_pod(&mut self) -> Option<Arc<PodInfo>> {
        let last = self.pods.len().checked_sub(1)?;
        Some(self.remove_pod_at(last))
    }

    /// Remove the pod at position `i` of `pods` (the last pod takes its
    /// place). Panics if `i` is out of range.
    pub(crate) fn remove_pod_at(&mut self, i: usize) -> Arc<PodInfo> {
        let pod = self.pods.swap_remove(i);
        self.take_off(&pod);
        pod
    }

    /// Copy `source` into this info (reusing its allocations, as
    /// `clone_from` does) without the pods `remove` picks; each of those is
    /// passed to `removed`, in the node's order. The result is what
    /// `clone_from` followed by removing those pods gives, but the pods
    /// taken out are never copied (no reference count touched) and the
    /// kept ones stay in the node's order. Preemption's dry runs start
    /// from a node without its lower-priority pods.
    pub fn clone_without<'s>(
        &mut self,
        source: &'s NodeInfo,
        mut remove: impl FnMut(&PodInfo) -> bool,
        mut removed: impl FnMut(&'s Arc<PodInfo>),
    ) {
        let pods = self.copy_all_but_pods(source);
        self.pods.clear();
        for p in pods {
            if remove(p) {
                self.take_off(p);
                removed(p);
            } else {
                self.pods.push(Arc::clone(p));
            }
        }
    }

    /// Copy every field of `source` but the pod list (which is returned,
    /// for the caller to copy whole or in part), reusing this info's
    /// allocations.
    fn copy_all_but_pods<'s>(&mut self, source: &'s NodeInfo) -> &'s Vec<Arc<PodInfo>> {
        // Destructured so that a new field cannot be forgotten here.
        let NodeInfo {
            name,
            id,
            node,
            allocatable,
            requested,
            non_zero_cpu,
            non_zero_memory,
            pods,
            pods_with_affinity,
            controllers,
            pods_with_required_anti_affinity,
            used_ports,
            images,
            taints,
            unschedulable,
            generation,
            topology_ids,
            lowest,
        } = source;
        self.name.clone_from(name);
        self.id.clone_from(id);
        self.node.clone_from(node);
        self.allocatable.clone_from(allocatable);
        self.requested.clone_from(requested);
        self.non_zero_cpu = *non_zero_cpu;
        self.non_zero_memory = *non_zero_memory;
        self.pods_with_affinity = *pods_with_affinity;
        self.controllers.clone_from(controllers);
        self.pods_with_required_anti_affinity = *pods_with_required_anti_affinity;
        self.used_ports.clone_from(used_ports);
        self.images.clone_from(images);
        self.taints.clone_from(taints);
        self.unschedulable = *unschedulable;
        self.generation = *generation;
        self.topology_ids = *topology_ids;
        self.lowest = *lowest;
        pods
    }

    /// Take a pod's share off the node's aggregates (the pod list is the
    /// caller's business); a change like any other (generation bumped,
    /// lowest priority to be worked out again).
    fn take_off(&mut self, pod: &PodInfo) {
        self.requested.sub(&pod.requests);
        self.non_zero_cpu -= pod.non_zero_cpu;
        self.non_zero_memory -= pod.non_zero_memory;
        for hp in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|u| u == hp) {
                self.used_ports.swap_remove(j);
            }
        }
        if pod.has_pod_affinity() {
            self.pods_with_affinity -= 1;
        }
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity -= 1;
        }
        // With no controller counted on this node there is nothing to take
        // off (and no hashing): preemption's dry runs remove pods from node
        // copies by the hundred.
        if !self.controllers.is_empty()
            && let Some(uid) = pod.counted_controller()
            && let Some(n) = self.controllers.get_mut(uid)
        {
            *n -= 1;
            if *n == 0 {
                self.controllers.remove(uid);
            }
        }
        self.lowest = Lowest::Stale;
        self.generation += 1;
    }
}

/// The lowest priority among `pods` with the latest start among those
/// pods (`None`: no pods).
fn lowest_of(pods: &[Arc<PodInfo>]) -> Option<(i32, i64)> {
    let mut best: Option<(i32, i64)> = None;
    for p in pods {
        best = Some(match best {
            Some((prio, start)) if prio < p.priority => (prio, start),
            Some((prio, start)) if prio == p.priority => (prio, start.max(p.start_time)),
            _ => (p.priority, p.start_time),
        });
    }
    best
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! `NodeInfo::clone_without` against `clone_from` plus removals.

    use super::*;
    use serde_json::json;

    use crate::test_rng::Rng;

    fn pod(rng: &mut Rng, i: usize) -> Arc<PodInfo> {
        let mut container = json!({"name": "c", "resources": {"requests": {
            "cpu": format!("{}m", 100 * rng.next(10)),
            "memory": format!("{}Mi", 100 * rng.next(10)),
            "nvidia.com/gpu": rng.next(2).to_string()}}});
        if rng.next(3) == 0 {
            container["ports"] = json!([{"containerPort": 80, "hostPort": 8000 + rng.next(3)}]);
        }
        let mut spec = json!({"priority": rng.next(4), "containers": [container]});
        if rng.next(4) == 0 {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}]}});
        } else if rng.next(4) == 0 {
            spec["affinity"] = json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}}]}});
        }
        let mut meta = json!({"name": format!("p{i}"), "namespace": "default", "uid": format!("u{i}"),
            "creationTimestamp": format!("2026-01-01T00:00:{:02}Z", rng.next(60))});
        if rng.next(2) == 0 {
            meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "rs", "uid": format!("rs-{}", rng.next(3)), "controller": true}]);
        }
        if rng.next(5) == 0 {
            meta["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
        }
        Arc::new(PodInfo::new(Arc::new(
            serde_json::from_value(json!({"metadata": meta, "spec": spec})).unwrap(),
        )))
    }

    /// Everything a filter could read, with the pods and ports as sets.
    fn view(n: &NodeInfo) -> String {
        let mut pods: Vec<&str> = n.pods.iter().map(|p| p.uid.as_str()).collect();
        pods.sort();
        let mut ports: Vec<String> = n.used_ports.iter().map(|p| format!("{p:?}")).collect();
        ports.sort();
        let mut controllers: Vec<(&str, u32)> =
            n.controllers.iter().map(|(k, v)| (&**k, *v)).collect();
        controllers.sort();
        format!(
            "{} {:?} {:?} {} {} {pods:?} {} {} {controllers:?} {ports:?} {:?} {:?} {} {:?}",
            n.name,
            n.allocatable,
            n.requested,
            n.non_zero_cpu,
            n.non_zero_memory,
            n.pods_with_affinity,
            n.pods_with_required_anti_affinity,
            n.taints,
            n.unschedulable,
            n.generation,
            n.lowest_priority(),
        )
    }

    /// kube's PodRequests with NonMissingContainerRequests, from its
    /// sidecar KEP's examples: sidecars add to the app containers, each
    /// init container needs itself plus the sidecars started before it, and
    /// a missing request counts as 100m / 200Mi.
    #[test]
    fn non_zero_requests_count_sidecars() {
        let info = |spec: serde_json::Value| {
            PodInfo::new(Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap(),
            ))
        };
        let c = |name: &str, cpu: Option<&str>| match cpu {
            Some(cpu) => {
                json!({"name": name, "resources": {"requests": {"cpu": cpu, "memory": "1Mi"}}})
            }
            None => json!({"name": name}),
        };
        let sidecar = |name: &str, cpu: Option<&str>| {
            let mut s = c(name, cpu);
            s["restartPolicy"] = json!("Always");
            s
        };
        // App 300m + sidecar 200m = 500m > init 200m + the sidecar 200m.
        let p = info(
            json!({"initContainers": [sidecar("log", Some("200m")), c("init", Some("200m"))],
            "containers": [c("app", Some("300m"))]}),
        );
        assert_eq!(p.non_zero_cpu, 500);
        // Init 900m + the sidecar before it 200m = 1100m > 500m.
        let p = info(
            json!({"initContainers": [sidecar("log", Some("200m")), c("init", Some("900m"))],
            "containers": [c("app", Some("300m"))]}),
        );
        assert_eq!(p.non_zero_cpu, 1100);
        // A sidecar after the init container does not run beside it.
        let p = info(
            json!({"initContainers": [c("init", Some("900m")), sidecar("log", Some("200m"))],
            "containers": [c("app", Some("300m"))]}),
        );
        assert_eq!(p.non_zero_cpu, 900);
        // Sidecar and app without requests: 100m each, 200Mi each.
        let p =
            info(json!({"initContainers": [sidecar("log", None)], "containers": [c("app", None)]}));
        assert_eq!(
            (p.non_zero_cpu, p.non_zero_memory),
            (200, 2 * DEFAULT_MEMORY_REQUEST)
        );
        assert_eq!(p.requests.milli_cpu, 0);
    }

    #[test]
    fn clone_without_is_clone_then_remove() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut scratch = NodeInfo::default();
        for round in 0..300 {
            let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
                "metadata": {"name": format!("n{round}")},
                "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}}
            }))
            .unwrap();
            let mut n = NodeInfo::new(Arc::new(node));
            for i in 0..rng.next(8) {
                n.add_pod(pod(&mut rng, i as usize));
            }
            let below = rng.next(5) as i32;
            // The reference: a copy, then each pod below `below` removed.
            let mut reference = n.clone();
            let mut expected = Vec::new();
            for i in (0..reference.pods.len()).rev() {
                if reference.pods[i].priority < below {
                    expected.push(reference.remove_pod_at(i).uid.clone());
                }
            }
            expected.reverse();
            // The scratch info still holds the previous round's node.
            let mut removed = Vec::new();
            scratch.clone_without(&n, |p| p.priority < below, |p| removed.push(p.uid.clone()));
            assert_eq!(view(&scratch), view(&reference), "round {round}");
            assert_eq!(
                removed, expected,
                "round {round}: removed, in the node's order"
            );
            let kept: Vec<&str> = n
                .pods
                .iter()
                .filter(|p| p.priority >= below)
                .map(|p| p.uid.as_str())
                .collect();
            let got: Vec<&str> = scratch.pods.iter().map(|p| p.uid.as_str()).collect();
            assert_eq!(got, kept, "round {round}: kept, in the node's order");
        }
    }
}
