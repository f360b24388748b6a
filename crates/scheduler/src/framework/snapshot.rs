//! The nodes as one scheduling cycle sees them: every [`NodeInfo`] with its
//! precomputed aggregates, an index by name, and how many nodes hold each
//! image (ImageLocality's spread factor).
//!
//! The scheduling loop applies cluster events between cycles, so within a
//! cycle the snapshot does not change and plugins read it without locks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;

use super::topology_counts::FastBuild;
use super::topology_counts::{DomainCounts, ExistingTerms, PodMatcher, TermGroup, TopologyCounts};
use super::types::{NO_TOPOLOGY_VALUE, NodeInfo, PodInfo, WELL_KNOWN_TOPOLOGY_KEYS};

/// The incremental topology counts behind a lock, so a plugin holding
/// `&Snapshot` can build an entry on first use.
#[derive(Debug, Default)]
struct Topology(Mutex<TopologyCounts>);

impl Topology {
    fn get_mut(&mut self) -> &mut TopologyCounts {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// The counts behind the lock, for a reader holding `&Snapshot`.
    fn lock(&self) -> std::sync::MutexGuard<'_, TopologyCounts> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clone for Topology {
    fn clone(&self) -> Self {
        Topology(Mutex::new(self.lock().clone()))
    }
}

/// Nodes with the pods on them.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize, FastBuild>,
    image_nodes: HashMap<String, usize>,
    /// Pods on nodes not (yet) known, by node name.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    with_affinity: usize,
    with_required_anti_affinity: usize,
    topology: Topology,
    terms: ExistingTerms,
    interner: Interner,
}

static NEXT_SNAPSHOT_ID: AtomicU64 = AtomicU64::new(1);

/// Ids for the values of the well-known topology keys, per key.
#[derive(Debug)]
struct Interner {
    id: u64,
    values: [HashMap<Arc<str>, u32, FastBuild>; 3],
}

impl Default for Interner {
    fn default() -> Self {
        Interner {
            id: NEXT_SNAPSHOT_ID.fetch_add(1, Ordering::Relaxed),
            values: Default::default(),
        }
    }
}

impl Clone for Interner {
    /// A copy gets its own id: its nodes (stamped with the original's) then
    /// take the string path until restamped, never a wrong id.
    fn clone(&self) -> Self {
        Interner {
            id: NEXT_SNAPSHOT_ID.fetch_add(1, Ordering::Relaxed),
            values: self.values.clone(),
        }
    }
}

impl Interner {
    fn stamp(&mut self, node: &mut NodeInfo) {
        let mut ids = [NO_TOPOLOGY_VALUE; 3];
        let labels = node.node.as_ref().and_then(|n| n.metadata.labels.as_ref());
        for (k, key) in WELL_KNOWN_TOPOLOGY_KEYS.iter().enumerate() {
            if let Some(v) = labels.and_then(|l| l.get(*key)) {
                let map = &mut self.values[k];
                let next = map.len() as u32;
                ids[k] = match map.get(v.as_str()) {
                    Some(&id) => id,
                    None => {
                        map.insert(Arc::from(v.as_str()), next);
                        next
                    }
                };
            }
        }
        node.topology_ids = Some((self.id, ids));
    }
}

impl Snapshot {
    /// An empty snapshot.
    pub fn new() -> Snapshot {
        Snapshot::default()
    }

    /// All known nodes.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// A node by name.
    pub fn get(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|i| &self.nodes[*i])
    }

    /// A node's position in [`nodes`](Self::nodes), by name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// How many nodes hold an image (normalized name).
    pub fn image_num_nodes(&self, image: &str) -> usize {
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    /// How many pods have pod (anti-)affinity terms (plugins skip work at 0).
    pub fn pods_with_affinity(&self) -> usize {
        self.with_affinity
    }

    /// How many pods have required anti-affinity terms.
    pub fn pods_with_required_anti_affinity(&self) -> usize {
        self.with_required_anti_affinity
    }

    /// Matching pods per domain of `key` over the nodes carrying every
    /// label in `required` (and `key`), kept up to date incrementally (see
    /// [`TopologyCounts`]). Every domain of such a node is present, with 0
    /// when no pod there matches.
    pub fn topology_counts(
        &self,
        namespace: &str,
        matcher: &PodMatcher,
        key: &str,
        required: &[String],
    ) -> DomainCounts {
        self.topology
            .lock()
            .get(&self.nodes, namespace, matcher, key, required)
    }

    /// As [`topology_counts`](Self::topology_counts) for a well-known key
    /// (`None` for another key): the counts of the interned value ids
    /// `wanted` (as in the [`NodeInfo::topology_ids`] this snapshot
    /// stamps), in that order; an unknown id counts 0. With `unique`,
    /// `None` too when two counted nodes share a value.
    #[allow(clippy::too_many_arguments)]
    pub fn topology_counts_by_id(
        &self,
        namespace: &str,
        matcher: &PodMatcher,
        key: &str,
        required: &[String],
        unique: bool,
        wanted: &[u32],
    ) -> Option<Vec<i64>> {
        self.topology.lock().get_by_id(
            &self.nodes,
            namespace,
            matcher,
            key,
            required,
            unique,
            wanted,
        )
    }

    /// This snapshot's id and the interned id of `value` for the well-known
    /// topology key at `key_index` in [`WELL_KNOWN_TOPOLOGY_KEYS`] (`None`
    /// when no node has that value), to compare with
    /// [`NodeInfo::topology_ids`].
    pub fn topology_value_id(&self, key_index: usize, value: &str) -> (u64, Option<u32>) {
        (
            self.interner.id,
            self.interner
                .values
                .get(key_index)
                .and_then(|m| m.get(value).copied()),
        )
    }

    /// How many values the well-known topology key at `key_index` has had.
    pub fn topology_value_count(&self, key_index: usize) -> usize {
        self.interner.values.get(key_index).map_or(0, |m| m.len())
    }

    /// This snapshot's id (as stamped in [`NodeInfo::topology_ids`]).
    pub fn id(&self) -> u64 {
        self.interner.id
    }

    /// The (anti-)affinity terms of the pods on known nodes, grouped by
    /// equal term and counted per domain (see [`ExistingTerms`]).
    pub fn existing_terms(&self) -> &[TermGroup] {
        self.terms.groups()
    }

    fn count(&mut self, pod: &PodInfo, d: isize) {
        if pod.has_pod_affinity() {
            self.with_affinity = self.with_affinity.saturating_add_signed(d);
        }
        if !pod.required_anti_affinity.is_empty() {
            self.with_required_anti_affinity =
                self.with_required_anti_affinity.saturating_add_signed(d);
        }
    }

    /// Add or update a node object.
    pub fn apply_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(&i) = self.index.get(&name) {
            let old: Vec<String> = self.nodes[i].images.keys().cloned().collect();
            for img in old {
                self.dec_image(&img);
            }
            // Domains depend on the labels only: a status-only update (a
            // heartbeat, conditions, allocatable) moves no count, and redoing
            // every kept count for every pod of the node on each heartbeat
            // was most of the scheduler's time in a large cluster.
            let relabelled = self.nodes[i].node.is_none()
                || node
                    .metadata
                    .labels
                    .as_ref()
                    .map_or(!self.nodes[i].labels().is_empty(), |l| {
                        l != self.nodes[i].labels()
                    });
            let topology = self.topology.get_mut();
            if relabelled {
                topology.node_delta(&self.nodes[i], -1);
                self.terms.node_delta(&self.nodes[i], -1);
            }
            self.nodes[i].set_node(node);
            self.interner.stamp(&mut self.nodes[i]);
            if relabelled {
                topology.node_delta(&self.nodes[i], 1);
                self.terms.node_delta(&self.nodes[i], 1);
            }
            for img in self.nodes[i].images.keys() {
                *self.image_nodes.entry(img.clone()).or_default() += 1;
            }
        } else {
            let mut info = NodeInfo::new(node);
            self.interner.stamp(&mut info);
            for pod in self.orphans.remove(&name).unwrap_or_default() {
                info.add_pod(pod);
            }
            for img in info.images.keys() {
                *self.image_nodes.entry(img.clone()).or_default() += 1;
            }
            self.topology.get_mut().node_delta(&info, 1);
            self.terms.node_delta(&info, 1);
            self.index.insert(name, self.nodes.len());
            self.nodes.push(info);
        }
    }

    fn dec_image(&mut self, img: &str) {
        if let Some(c) = self.image_nodes.get_mut(img) {
            *c -= 1;
            if *c == 0 {
                self.image_nodes.remove(img);
            }
        }
    }

    /// Remove a node; its pods are kept aside until it comes back or they go.
    pub fn remove_node(&mut self, name: &str) {
        let Some(i) = self.index.remove(name) else {
            return;
        };
        let info = self.nodes.swap_remove(i);
        self.topology.get_mut().node_delta(&info, -1);
        self.terms.node_delta(&info, -1);
        if i < self.nodes.len() {
            let moved = self.nodes[i].name.clone();
            self.index.insert(moved, i);
        }
        for img in info.images.keys() {
            self.dec_image(img);
        }
        if !info.pods.is_empty() {
            self.orphans.insert(info.name, info.pods);
        }
    }

    /// Account for a pod on a node.
    pub fn add_pod(&mut self, node: &str, pod: Arc<PodInfo>) {
        self.count(&pod, 1);
        match self.index.get(node) {
            Some(&i) => {
                self.topology.get_mut().pod_delta(&self.nodes[i], &pod, 1);
                self.terms.pod_delta(&self.nodes[i], &pod, 1);
                self.nodes[i].add_pod(pod);
            }
            None => self.orphans.entry(node.to_string()).or_default().push(pod),
        }
    }

    /// Remove a pod from a node.
    pub fn remove_pod(&mut self, node: &str, uid: &str) {
        match self.index.get(node) {
            Some(&i) => {
                let removed = self.nodes[i].remove_pod(uid);
                self.nodes[i].refresh_lowest_priority();
                if let Some(p) = removed {
                    self.count(&p, -1);
                    self.topology.get_mut().pod_delta(&self.nodes[i], &p, -1);
                    self.terms.pod_delta(&self.nodes[i], &p, -1);
                }
            }
            None => {
                let found = self
                    .orphans
                    .get(node)
                    .and_then(|l| l.iter().find(|p| p.uid == uid).cloned());
                if let Some(p) = found {
                    self.count(&p, -1);
                }
                if let Some(list) = self.orphans.get_mut(node) {
                    list.retain(|p| p.uid != uid);
                    if list.is_empty() {
                        self.orphans.remove(node);
                    }
                }
            }
        }
    }
}
