//! Pods per topology domain, counted incrementally in the [`Snapshot`]
//! instead of by scanning every pod each cycle.
//!
//! PodTopologySpread needs, for a pod's constraint (namespace, label
//! selector or "same controller", topology key), how many matching pods sit
//! in each domain (`zone-a`: 3, `zone-b`: 0, …) over the nodes that carry
//! every topology key the pod's constraints name. kube-scheduler recounts
//! that over all pods each cycle. Here the first cycle that asks for a
//! constraint builds an entry by one scan; from then on the snapshot keeps it
//! right as pods are added/removed and nodes are added, relabelled or
//! removed. Entries not asked for in a while are dropped (at most
//! [`MAX_ENTRIES`] are kept). Entries of the "same controller" matcher (the
//! system default constraints: one per workload, hundreds in a large
//! cluster) are indexed by controller UID, so a pod added or removed
//! touches its own controller's entries only, and are built from the
//! nodes' per-controller counts, not by scanning every pod. For a
//! well-known key an entry also keeps its counts by the snapshot's interned
//! value id ([`NodeInfo::topology_ids`]), which is how the hostname counts
//! of the default constraints are read per scored node.
//!
//! [`Snapshot`]: super::Snapshot

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use kubeforge_apimachinery::labels::Selector;

use super::types::{AffinityTerm, NO_TOPOLOGY_VALUE, NodeInfo, PodInfo, well_known_key_index};

/// How many (constraint → counts) entries are kept at most.
pub const MAX_ENTRIES: usize = 1024;

/// Which existing pods a constraint counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodMatcher {
    /// Pods whose labels match a selector.
    Labels(Selector),
    /// Pods whose controller owner reference has this UID (the system
    /// default constraints). The UID names one object, whose pods are in
    /// its namespace, so the namespace is not compared.
    Controller(String),
    /// Pods an inter-pod (anti-)affinity term selects (its own namespaces;
    /// terminating pods count, as in kube-scheduler's InterPodAffinity).
    Term(AffinityTerm),
    /// Pods every one of several terms selects: a pod's required affinity
    /// with more than one term counts only pods matching all of them
    /// (kube-scheduler's `podMatchesAllAffinityTerms`).
    AllTerms(Vec<AffinityTerm>),
}

impl PodMatcher {
    /// Whether an existing pod in `namespace` is counted: same namespace, not
    /// terminating, and matched (kube-scheduler's `countPodsMatchSelector`).
    pub fn counts(&self, namespace: &str, pod: &PodInfo) -> bool {
        match self {
            PodMatcher::Term(t) => t.matches(pod),
            PodMatcher::AllTerms(ts) => ts.iter().all(|t| t.matches(pod)),
            PodMatcher::Controller(uid) => counted_controller(pod) == Some(uid.as_str()),
            PodMatcher::Labels(s) => {
                pod.namespace == namespace
                    && pod.pod.metadata.deletion_timestamp.is_none()
                    && s.matches(&pod.labels)
            }
        }
    }
}

/// The UID of the pod's controller owner (`controller: true`), if any.
pub fn controller_uid(pod: &PodInfo) -> Option<&str> {
    controller_uid_of(&pod.pod)
}

/// [`controller_uid`] of a pod object.
pub fn controller_uid_of(pod: &k8s_openapi::api::core::v1::Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// The controller UID a pod counts under for the "same controller"
/// matcher and in [`NodeInfo::controllers`] ([`PodInfo::counted_controller`]).
pub fn counted_controller(pod: &PodInfo) -> Option<&str> {
    pod.counted_controller()
}

/// A small, fast hasher (the Fx hash rustc uses) for maps read once per node
/// per cycle with short string keys, where SipHash's DoS resistance buys
/// nothing (the keys are label values of the cluster's own nodes).
#[derive(Debug, Clone, Copy, Default)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Builds [`FastHasher`]s.
pub type FastBuild = BuildHasherDefault<FastHasher>;

/// Pod count per domain value; a domain is present when at least one
/// eligible node carries it (possibly with 0 pods).
pub type DomainCounts = HashMap<Arc<str>, i64, FastBuild>;

#[derive(Debug, Clone, Default)]
struct Domain {
    nodes: u32,
    pods: i64,
}

#[derive(Debug, Clone)]
struct Entry {
    namespace: String,
    matcher: PodMatcher,
    key: String,
    /// Every label a node must carry to count (includes `key`).
    required: Vec<String>,
    domains: HashMap<Arc<str>, Domain, FastBuild>,
    /// For a well-known key: its index in the nodes' topology ids, and the
    /// matching pods by interned value id (0 for ids of no counted node).
    by_id: Option<(usize, Vec<i64>)>,
    /// How many domains more than one counted node shares.
    shared: usize,
    last_used: u64,
}

impl Entry {
    /// The node's domain for this entry, when the node counts at all.
    fn domain_of<'a>(&self, node: &'a NodeInfo) -> Option<&'a String> {
        let labels = node.labels();
        if node.node.is_none() || !self.required.iter().all(|k| labels.contains_key(k)) {
            return None;
        }
        labels.get(&self.key)
    }

    fn matching_pods(&self, node: &NodeInfo) -> i64 {
        if let PodMatcher::Controller(uid) = &self.matcher {
            return i64::from(node.controllers.get(uid.as_str()).copied().unwrap_or(0));
        }
        node.pods
            .iter()
            .filter(|p| self.matcher.counts(&self.namespace, p))
            .count() as i64
    }

    /// Add `d` pods to the node's value id (a node counted by this entry).
    fn id_delta(&mut self, node: &NodeInfo, d: i64) {
        if let (Some((k, by_id)), Some((_, ids))) = (&mut self.by_id, node.topology_ids) {
            let id = ids[*k];
            if id == NO_TOPOLOGY_VALUE {
                return;
            }
            let id = id as usize;
            if by_id.len() <= id {
                by_id.resize(id + 1, 0);
            }
            by_id[id] += d;
        }
    }

    /// Add (`d = 1`) or remove (`d = -1`) a whole node's contribution.
    fn node_delta(&mut self, node: &NodeInfo, d: i64) {
        let Some(v) = self.domain_of(node) else {
            return;
        };
        let pods = self.matching_pods(node);
        self.id_delta(node, d * pods);
        let v: &str = v.as_str();
        if d > 0 {
            let dom = self.domains.entry(Arc::from(v)).or_default();
            dom.nodes += 1;
            dom.pods += pods;
            if dom.nodes == 2 {
                self.shared += 1;
            }
        } else if let Some(dom) = self.domains.get_mut(v) {
            if dom.nodes == 2 {
                self.shared -= 1;
            }
            dom.nodes = dom.nodes.saturating_sub(1);
            dom.pods -= pods;
            if dom.nodes == 0 {
                self.domains.remove(v);
            }
        }
    }

    /// A pod the entry counts was added (`d = 1`) or removed (`d = -1`).
    fn counted_pod_delta(&mut self, node: &NodeInfo, d: i64) {
        if let Some(v) = self.domain_of(node)
            && let Some(dom) = self.domains.get_mut(v.as_str())
        {
            dom.pods += d;
            self.id_delta(node, d);
        }
    }
}

/// The index: entries by constraint, updated by the snapshot.
#[derive(Debug, Clone, Default)]
pub struct TopologyCounts {
    entries: Vec<Entry>,
    /// Positions in `entries` of the "same controller" entries, by UID.
    by_controller: HashMap<String, Vec<usize>, FastBuild>,
    /// Positions of the other entries.
    others: Vec<usize>,
    clock: u64,
}

impl TopologyCounts {
    /// The counts for a constraint over `nodes`, building the entry on first
    /// use. `required` are the labels a node must carry to count (the
    /// constraint's own key is added).
    pub fn get(
        &mut self,
        nodes: &[NodeInfo],
        namespace: &str,
        matcher: &PodMatcher,
        key: &str,
        required: &[String],
    ) -> DomainCounts {
        let i = self.entry(nodes, namespace, matcher, key, required);
        let e = &self.entries[i];
        e.domains.iter().map(|(k, d)| (k.clone(), d.pods)).collect()
    }

    /// As [`get`](Self::get), for a well-known key (`None` otherwise): the
    /// counts of the interned value ids `wanted` (the nodes' topology ids;
    /// 0 for an id of no counted node), in that order. `None` too when
    /// `unique` is asked and two counted nodes share a value (so a value's
    /// count is not one node's). Only the asked ids are copied out: the
    /// scored nodes are a few hundred of possibly thousands.
    #[allow(clippy::too_many_arguments)]
    pub fn get_by_id(
        &mut self,
        nodes: &[NodeInfo],
        namespace: &str,
        matcher: &PodMatcher,
        key: &str,
        required: &[String],
        unique: bool,
        wanted: &[u32],
    ) -> Option<Vec<i64>> {
        let i = self.entry(nodes, namespace, matcher, key, required);
        let e = &self.entries[i];
        if unique && e.shared > 0 {
            return None;
        }
        let (_, by_id) = e.by_id.as_ref()?;
        Some(
            wanted
                .iter()
                .map(|&id| by_id.get(id as usize).copied().unwrap_or(0))
                .collect(),
        )
    }

    /// The position of the constraint's entry, built (and indexed) if new.
    fn entry(
        &mut self,
        nodes: &[NodeInfo],
        namespace: &str,
        matcher: &PodMatcher,
        key: &str,
        required: &[String],
    ) -> usize {
        self.clock += 1;
        let clock = self.clock;
        let mut req: Vec<String> = required.to_vec();
        if !req.iter().any(|k| k == key) {
            req.push(key.to_string());
        }
        req.sort();
        req.dedup();
        let same = |e: &Entry| {
            e.key == key && e.namespace == namespace && e.required == req && e.matcher == *matcher
        };
        // A "same controller" entry is among its UID's few; the others
        // are scanned (hundreds of workloads make the former many).
        let candidates: &[usize] = match matcher {
            PodMatcher::Controller(uid) => self
                .by_controller
                .get(uid.as_str())
                .map_or(&[], Vec::as_slice),
            _ => &self.others,
        };
        let found = candidates.iter().copied().find(|&i| same(&self.entries[i]));
        let i = match found {
            Some(i) => i,
            None => {
                if self.entries.len() >= MAX_ENTRIES
                    && let Some(oldest) = self
                        .entries
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, e)| e.last_used)
                        .map(|(i, _)| i)
                {
                    self.entries.swap_remove(oldest);
                }
                let mut e = Entry {
                    namespace: namespace.to_string(),
                    matcher: matcher.clone(),
                    key: key.to_string(),
                    required: req,
                    domains: HashMap::default(),
                    by_id: well_known_key_index(key).map(|k| (k, Vec::new())),
                    shared: 0,
                    last_used: clock,
                };
                for n in nodes {
                    e.node_delta(n, 1);
                }
                self.entries.push(e);
                self.reindex();
                self.entries.len() - 1
            }
        };
        self.entries[i].last_used = clock;
        i
    }

    /// Rebuild the controller index (after an entry is added or dropped).
    fn reindex(&mut self) {
        self.by_controller.clear();
        self.others.clear();
        for (i, e) in self.entries.iter().enumerate() {
            match &e.matcher {
                PodMatcher::Controller(uid) => {
                    self.by_controller.entry(uid.clone()).or_default().push(i);
                }
                _ => self.others.push(i),
            }
        }
    }

    /// A node (with its pods) joins, or leaves with `d = -1`.
    pub fn node_delta(&mut self, node: &NodeInfo, d: i64) {
        for e in &mut self.entries {
            e.node_delta(node, d);
        }
    }

    /// A pod was added to (`d = 1`) or removed from (`d = -1`) a known node.
    pub fn pod_delta(&mut self, node: &NodeInfo, pod: &PodInfo, d: i64) {
        if let Some(uid) = counted_controller(pod)
            && let Some(own) = self.by_controller.get(uid)
        {
            for &i in own {
                self.entries[i].counted_pod_delta(node, d);
            }
        }
        for &i in &self.others {
            let e = &mut self.entries[i];
            if e.matcher.counts(&e.namespace, pod) {
                e.counted_pod_delta(node, d);
            }
        }
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Which list of an existing pod's affinity terms a group comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermKind {
    /// `podAffinity.requiredDuringScheduling…`.
    RequiredAffinity,
    /// `podAntiAffinity.requiredDuringScheduling…`.
    RequiredAntiAffinity,
    /// `podAffinity.preferredDuringScheduling…` (with its weight).
    PreferredAffinity,
    /// `podAntiAffinity.preferredDuringScheduling…` (with its weight).
    PreferredAntiAffinity,
}

/// Existing pods that carry the same (anti-)affinity term, counted per
/// domain of the term's topology key.
#[derive(Debug, Clone)]
pub struct TermGroup {
    /// Which list the term is in.
    pub kind: TermKind,
    /// The weight (preferred terms; 0 for required ones).
    pub weight: i64,
    /// The term.
    pub term: AffinityTerm,
    /// Pods carrying it, per value of `term.topology_key` of their node.
    pub domains: HashMap<Arc<str>, i64, FastBuild>,
    signature: String,
}

/// The (anti-)affinity terms of the pods on known nodes, grouped by equal
/// term: InterPodAffinity asks "which existing pods' terms select the
/// incoming pod, and where are they" once per distinct term instead of once
/// per pod.
#[derive(Debug, Clone, Default)]
pub struct ExistingTerms {
    groups: Vec<TermGroup>,
    lookup: HashMap<String, usize>,
}

fn pod_terms(pod: &PodInfo) -> impl Iterator<Item = (TermKind, i64, &AffinityTerm)> {
    pod.required_affinity
        .iter()
        .map(|t| (TermKind::RequiredAffinity, 0, t))
        .chain(
            pod.required_anti_affinity
                .iter()
                .map(|t| (TermKind::RequiredAntiAffinity, 0, t)),
        )
        .chain(
            pod.preferred_affinity
                .iter()
                .map(|w| (TermKind::PreferredAffinity, w.weight, &w.term)),
        )
        .chain(
            pod.preferred_anti_affinity
                .iter()
                .map(|w| (TermKind::PreferredAntiAffinity, w.weight, &w.term)),
        )
}

impl ExistingTerms {
    /// The groups (each with at least one pod on a node carrying its key).
    pub fn groups(&self) -> &[TermGroup] {
        &self.groups
    }

    /// A pod with affinity terms added to (`d = 1`) or removed from
    /// (`d = -1`) a known node.
    pub fn pod_delta(&mut self, node: &NodeInfo, pod: &PodInfo, d: i64) {
        if node.node.is_none() || !pod.has_pod_affinity() {
            return;
        }
        let labels = node.labels();
        for (kind, weight, term) in pod_terms(pod) {
            let Some(v) = labels.get(&term.topology_key) else {
                continue;
            };
            let signature = format!("{kind:?}/{weight}/{term:?}");
            let i = match self.lookup.get(&signature) {
                Some(&i) => i,
                None if d < 0 => continue,
                None => {
                    self.groups.push(TermGroup {
                        kind,
                        weight,
                        term: term.clone(),
                        domains: HashMap::default(),
                        signature: signature.clone(),
                    });
                    self.lookup.insert(signature, self.groups.len() - 1);
                    self.groups.len() - 1
                }
            };
            let g = &mut self.groups[i];
            match g.domains.get_mut(v.as_str()) {
                Some(c) => {
                    *c += d;
                    if *c == 0 {
                        g.domains.remove(v.as_str());
                    }
                }
                None => {
                    g.domains.insert(Arc::from(v.as_str()), d);
                }
            }
            if g.domains.is_empty() {
                let gone = self.groups.swap_remove(i);
                self.lookup.remove(&gone.signature);
                if let Some(moved) = self.groups.get(i) {
                    self.lookup.insert(moved.signature.clone(), i);
                }
            }
        }
    }

    /// A node (with its pods) joins, or leaves with `d = -1`.
    pub fn node_delta(&mut self, node: &NodeInfo, d: i64) {
        if node.pods_with_affinity == 0 {
            return;
        }
        for p in &node.pods {
            self.pod_delta(node, p, d);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::framework::Snapshot;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn node(name: &str, zone: Option<&str>) -> Arc<Node> {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if let Some(z) = zone {
            labels["topology.kubernetes.io/zone"] = json!(z);
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
            }))
            .unwrap(),
        )
    }

    fn pod(uid: &str, ns: &str, app: &str, owner: Option<&str>) -> Arc<PodInfo> {
        let mut meta = json!({"name": uid, "namespace": ns, "uid": uid, "labels": {"app": app}});
        if let Some(o) = owner {
            meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "rs", "uid": o, "controller": true}]);
        }
        let p: Pod = serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    const ZONE: &str = "topology.kubernetes.io/zone";
    const HOSTNAME: &str = "kubernetes.io/hostname";

    fn web() -> PodMatcher {
        PodMatcher::Labels(
            Selector::from_label_selector(&json!({"matchLabels": {"app": "web"}})).unwrap(),
        )
    }

    fn sorted(c: &DomainCounts) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> = c.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        v.sort();
        v
    }

    /// The counts the index keeps must equal a fresh scan (a new entry built
    /// from the same nodes) after every kind of change.
    fn check(s: &Snapshot, m: &PodMatcher, expect: &[(&str, i64)]) {
        let kept = s.topology_counts("default", m, ZONE, &[]);
        let fresh = TopologyCounts::default().get(s.nodes(), "default", m, ZONE, &[]);
        assert_eq!(sorted(&kept), sorted(&fresh), "incremental vs scan");
        // A scan of every pod with the matcher (the build from the nodes'
        // per-controller counts must agree with it).
        let mut scanned: Vec<(String, i64)> = Vec::new();
        for n in s.nodes() {
            let Some(z) = n.labels().get(ZONE) else {
                continue;
            };
            let c = n.pods.iter().filter(|p| m.counts("default", p)).count() as i64;
            match scanned.iter_mut().find(|(k, _)| k == z) {
                Some((_, v)) => *v += c,
                None => scanned.push((z.clone(), c)),
            }
        }
        scanned.sort();
        assert_eq!(sorted(&kept), scanned, "incremental vs pod scan");
        // By hostname id: each node's own matching pods.
        let ids: Vec<u32> = s
            .nodes()
            .iter()
            .map(|n| {
                let (sid, ids) = n.topology_ids.unwrap();
                assert_eq!(sid, s.id());
                ids[0]
            })
            .collect();
        let by_id = s
            .topology_counts_by_id("default", m, HOSTNAME, &[], true, &ids)
            .unwrap();
        for (n, got) in s.nodes().iter().zip(by_id) {
            let c = n.pods.iter().filter(|p| m.counts("default", p)).count() as i64;
            assert_eq!(got, c, "node {}", n.name);
        }
        let want: Vec<(String, i64)> = expect.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(sorted(&kept), want);
    }

    #[test]
    fn counts_follow_pods_and_nodes() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", Some("a")));
        s.apply_node(node("n2", Some("a")));
        s.apply_node(node("n3", Some("b")));
        s.apply_node(node("n4", None)); // no zone: never counted
        s.add_pod("n1", pod("p1", "default", "web", None));
        s.add_pod("n4", pod("p2", "default", "web", None));
        let m = web();
        // the entry is built here by a scan; later checks use the kept one
        check(&s, &m, &[("a", 1), ("b", 0)]);

        // pods added and deleted
        s.add_pod("n2", pod("p3", "default", "web", None));
        s.add_pod("n3", pod("p4", "default", "web", None));
        s.add_pod("n3", pod("p5", "other", "web", None)); // other namespace
        s.add_pod("n3", pod("p6", "default", "db", None)); // not matched
        check(&s, &m, &[("a", 2), ("b", 1)]);
        s.remove_pod("n1", "p1");
        check(&s, &m, &[("a", 1), ("b", 1)]);

        // a node relabelled to another zone takes its pods along
        s.apply_node(node("n2", Some("b")));
        check(&s, &m, &[("a", 0), ("b", 2)]);
        // the same labels again (a heartbeat) change nothing
        s.apply_node(node("n2", Some("b")));
        s.apply_node(node("n3", Some("b")));
        check(&s, &m, &[("a", 0), ("b", 2)]);
        // a node losing its zone label drops out; the last node of a
        // domain leaving removes the domain
        s.apply_node(node("n1", None));
        check(&s, &m, &[("b", 2)]);
        // a zone added to a node that already has pods counts them
        s.apply_node(node("n4", Some("c")));
        check(&s, &m, &[("b", 2), ("c", 1)]);

        // a node removed keeps its pods aside and brings them back
        s.remove_node("n3");
        check(&s, &m, &[("b", 1), ("c", 1)]);
        s.apply_node(node("n3", Some("a")));
        check(&s, &m, &[("a", 1), ("b", 1), ("c", 1)]);
    }

    #[test]
    fn terminating_pods_and_controllers() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", Some("a")));
        s.apply_node(node("n2", Some("b")));
        let owned = PodMatcher::Controller("rs-1".into());
        s.add_pod("n1", pod("p1", "default", "web", Some("rs-1")));
        s.add_pod("n2", pod("p2", "default", "web", Some("rs-2")));
        check(&s, &owned, &[("a", 1), ("b", 0)]);
        s.add_pod("n2", pod("p3", "default", "web", Some("rs-1")));
        check(&s, &owned, &[("a", 1), ("b", 1)]);
        // the same pod seen again as terminating is no longer counted
        let mut p: Pod = (*pod("p3", "default", "web", Some("rs-1")).pod).clone();
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        s.remove_pod("n2", "p3");
        s.add_pod("n2", Arc::new(PodInfo::new(Arc::new(p))));
        check(&s, &owned, &[("a", 1), ("b", 0)]);
    }

    /// A node's per-controller counts equal a scan of its pods with the
    /// controller matcher, through adds, removals and terminating pods.
    #[test]
    fn node_controller_counts_match_a_scan() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", Some("a")));
        let scan = |s: &Snapshot, uid: &str| {
            let n = s.get("n1").unwrap();
            let m = PodMatcher::Controller(uid.into());
            let scanned = n.pods.iter().filter(|p| m.counts("default", p)).count() as u32;
            let kept = n.controllers.get(uid).copied().unwrap_or(0);
            assert_eq!(kept, scanned, "{uid}");
            kept
        };
        s.add_pod("n1", pod("p1", "default", "web", Some("rs-1")));
        s.add_pod("n1", pod("p2", "default", "web", Some("rs-1")));
        s.add_pod("n1", pod("p3", "default", "web", Some("rs-2")));
        s.add_pod("n1", pod("p4", "default", "web", None));
        assert_eq!(scan(&s, "rs-1"), 2);
        assert_eq!(scan(&s, "rs-2"), 1);
        s.remove_pod("n1", "p1");
        assert_eq!(scan(&s, "rs-1"), 1);
        // a terminating pod is not counted, and its removal changes nothing
        let mut p: Pod = (*pod("p5", "default", "web", Some("rs-2")).pod).clone();
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        s.add_pod("n1", Arc::new(PodInfo::new(Arc::new(p))));
        assert_eq!(scan(&s, "rs-2"), 1);
        s.remove_pod("n1", "p5");
        s.remove_pod("n1", "p3");
        assert_eq!(scan(&s, "rs-2"), 0);
        assert!(!s.get("n1").unwrap().controllers.contains_key("rs-2"));
        // a copy carries the counts
        let copy = s.get("n1").unwrap().clone();
        assert_eq!(copy.controllers.get("rs-1"), Some(&1));
    }

    #[test]
    fn entries_are_bounded() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", Some("a")));
        for i in 0..MAX_ENTRIES + 10 {
            let m = PodMatcher::Controller(format!("rs-{i}"));
            s.topology_counts("default", &m, ZONE, &[]);
        }
        // the newest entries were kept and updated; the oldest were dropped
        // and are rebuilt by a scan when asked for again
        s.add_pod("n1", pod("p1", "default", "web", Some("rs-265")));
        s.add_pod("n1", pod("p2", "default", "web", Some("rs-0")));
        check(&s, &PodMatcher::Controller("rs-265".into()), &[("a", 1)]);
        check(&s, &PodMatcher::Controller("rs-0".into()), &[("a", 1)]);
    }
}
