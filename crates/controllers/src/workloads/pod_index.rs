//! An index over the shared pod cache: pods by controller UID, orphans by
//! namespace, pods by node and by namespace, so "my pods" is O(my pods)
//! instead of O(all pods).
//!
//! Entries are kept as pods are seen (the controllers' watch mappers call
//! [`PodIndex::observe`] for every change and deletion, after the cache has
//! applied it); the first read seeds the index from the cache, and pods the
//! cache lost without the index seeing it are swept out every 30 s.
//!
//! The index also keeps a *slim* copy of each pod — its metadata, node
//! name, phase, Ready condition and container restart counts — for the
//! hottest reader, the ReplicaSet controller, which looks at every one of
//! its pods on every sync. The shared cache keeps pods as compact JSON and
//! decodes one on each cold read (~30 µs for a typical pod), so a sync of a
//! 1,000-pod ReplicaSet was ~30 ms of decoding; the slim copies are built
//! once per pod change, from the object the watch already decoded.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::Cache;

use super::util::{controller_of, lock};

/// How often pods gone from the cache unseen are swept out.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// See the module documentation.
#[derive(Default)]
pub(crate) struct PodIndex {
    seeded: AtomicBool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Index key → the pods under it, by cache key, with their slim
    /// copies. Kept exact as pods change, move or go.
    keys: HashMap<String, HashMap<ObjectRef<Pod>, Arc<Pod>>>,
    /// Cache key → the pod's latest slim copy.
    slim: HashMap<ObjectRef<Pod>, Arc<Pod>>,
    last_sweep: Option<Instant>,
}

fn owner_key(uid: &str) -> String {
    format!("o\0{uid}")
}
fn orphan_key(ns: &str) -> String {
    format!("n\0{ns}")
}
fn node_key(node: &str) -> String {
    format!("h\0{node}")
}
fn ns_key(ns: &str) -> String {
    format!("a\0{ns}")
}

/// What the ReplicaSet controller reads of a pod: all of its metadata
/// (labels, owners, deletion-cost annotation, timestamps, resourceVersion
/// for adoption and release), `spec.nodeName`, and of its status the
/// phase, the Ready condition and each container's name, readiness and
/// restart count.
pub(crate) fn slim(pod: &Pod) -> Pod {
    let mut metadata = pod.metadata.clone();
    metadata.managed_fields = None;
    let spec = pod.spec.as_ref().map(|s| PodSpec {
        node_name: s.node_name.clone(),
        ..PodSpec::default()
    });
    let status = pod.status.as_ref().map(|s| PodStatus {
        phase: s.phase.clone(),
        conditions: s
            .conditions
            .as_ref()
            .map(|cs| cs.iter().filter(|c| c.type_ == "Ready").cloned().collect()),
        container_statuses: s.container_statuses.as_ref().map(|cs| {
            cs.iter()
                .map(|c| ContainerStatus {
                    name: c.name.clone(),
                    ready: c.ready,
                    restart_count: c.restart_count,
                    ..ContainerStatus::default()
                })
                .collect()
        }),
        ..PodStatus::default()
    });
    Pod {
        metadata,
        spec,
        status,
    }
}

fn id_of(pod: &Pod) -> ObjectRef<Pod> {
    ObjectRef::new(pod.metadata.name.as_deref().unwrap_or_default())
        .within(pod.metadata.namespace.as_deref().unwrap_or_default())
}

/// Whether `a` is a later version of the object than `b`: resource
/// versions are opaque to clients, but this API server's and etcd's are
/// integers that grow; anything else counts as newer when it differs.
fn newer(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    let (Some(x), Some(y)) = (&a.resource_version, &b.resource_version) else {
        return true;
    };
    match (x.parse::<u64>(), y.parse::<u64>()) {
        (Ok(x), Ok(y)) => x > y,
        _ => x != y,
    }
}

/// The index keys a pod is filed under.
fn keys_of(pod: &Pod) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut keys = Vec::with_capacity(3);
    keys.push(match controller_of(&pod.metadata) {
        Some(r) => owner_key(&r.uid),
        None => orphan_key(ns),
    });
    if let Some(n) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        keys.push(node_key(n));
    }
    keys.push(ns_key(ns));
    keys
}

impl Inner {
    fn add(&mut self, pod: &Pod) {
        let id = id_of(pod);
        // Every controller's pod mapper reports the same event (the first
        // does the work), and mappers see an update's old object after its
        // new one: keep the newest.
        if let Some(old) = self.slim.get(&id)
            && old.metadata.uid == pod.metadata.uid
            && !newer(&pod.metadata, &old.metadata)
        {
            return;
        }
        let copy = Arc::new(slim(pod));
        let new_keys = keys_of(&copy);
        if let Some(old) = self.slim.insert(id.clone(), copy.clone()) {
            for k in keys_of(&old) {
                if !new_keys.contains(&k) {
                    self.unfile(&k, &id);
                }
            }
        }
        for k in new_keys {
            self.keys
                .entry(k)
                .or_default()
                .insert(id.clone(), copy.clone());
        }
    }

    fn unfile(&mut self, key: &str, id: &ObjectRef<Pod>) {
        if let Some(set) = self.keys.get_mut(key) {
            set.remove(id);
            if set.is_empty() {
                self.keys.remove(key);
            }
        }
    }

    /// The pod left the cache: take it out of the index.
    fn remove(&mut self, id: &ObjectRef<Pod>) {
        if let Some(old) = self.slim.remove(id) {
            for k in keys_of(&old) {
                self.unfile(&k, id);
            }
        }
    }

    /// Take out pods the cache no longer has whose deletion the index
    /// missed (a safety net: deletions are seen by `observe`).
    fn sweep(&mut self, pods: &Cache<Pod>) {
        let now = Instant::now();
        if self.last_sweep.is_some_and(|t| now - t < SWEEP_EVERY) {
            return;
        }
        self.last_sweep = Some(now);
        let gone: Vec<ObjectRef<Pod>> = self
            .slim
            .keys()
            .filter(|r| !pods.contains(r))
            .cloned()
            .collect();
        for r in &gone {
            self.remove(r);
        }
    }
}

impl PodIndex {
    /// Record `pod` (as a watch event reports it; `pods` is the cache the
    /// event was applied to) under its keys and keep its slim copy; a pod
    /// the cache no longer has is taken out.
    pub(crate) fn observe(&self, pods: &Cache<Pod>, pod: &Pod) {
        let mut inner = lock(&self.inner);
        let id = id_of(pod);
        if pods.contains(&id) {
            inner.add(pod);
        } else {
            inner.remove(&id);
        }
    }

    fn seed(&self, pods: &Cache<Pod>) {
        if !self.seeded.swap(true, Ordering::SeqCst) {
            let all = pods.state();
            let mut inner = lock(&self.inner);
            for p in all {
                inner.add(&p);
            }
        }
    }

    /// The pods under `key` that `keep` accepts, as full pods from the
    /// cache (`slim_copies == false`) or as slim copies.
    fn read(
        &self,
        pods: &Cache<Pod>,
        key: &str,
        slim_copies: bool,
        keep: impl Fn(&Pod) -> bool,
    ) -> Vec<Arc<Pod>> {
        self.seed(pods);
        let mut inner = lock(&self.inner);
        inner.sweep(pods);
        let Some(set) = inner.keys.get(key) else {
            return Vec::new();
        };
        if slim_copies {
            return set.values().filter(|p| keep(p)).cloned().collect();
        }
        let refs: Vec<ObjectRef<Pod>> = set.keys().cloned().collect();
        drop(inner);
        refs.iter()
            .filter_map(|r| pods.get(r))
            .filter(|p| keep(p))
            .collect()
    }

    /// The slim copy of pod `id` as the index has it (what the pod lists
    /// below are built from; the cache may already hold a newer version).
    pub(crate) fn lookup(&self, pods: &Cache<Pod>, id: &ObjectRef<Pod>) -> Option<Arc<Pod>> {
        self.seed(pods);
        lock(&self.inner).slim.get(id).cloned()
    }

    /// Pods whose controller has UID `uid`.
    pub(crate) fn owned_by(&self, pods: &Cache<Pod>, uid: &str) -> Vec<Arc<Pod>> {
        self.read(pods, &owner_key(uid), false, |p| {
            controller_of(&p.metadata).is_some_and(|r| r.uid == uid)
        })
    }

    /// Slim copies (see [`slim`]) of the pods whose controller has UID
    /// `uid`.
    pub(crate) fn owned_by_slim(&self, pods: &Cache<Pod>, uid: &str) -> Vec<Arc<Pod>> {
        self.read(pods, &owner_key(uid), true, |p| {
            controller_of(&p.metadata).is_some_and(|r| r.uid == uid)
        })
    }

    /// Pods of namespace `ns` without a controller.
    pub(crate) fn orphans(&self, pods: &Cache<Pod>, ns: &str) -> Vec<Arc<Pod>> {
        self.read(pods, &orphan_key(ns), false, |p| {
            controller_of(&p.metadata).is_none() && p.metadata.namespace.as_deref() == Some(ns)
        })
    }

    /// Pods bound to node `node`.
    pub(crate) fn on_node(&self, pods: &Cache<Pod>, node: &str) -> Vec<Arc<Pod>> {
        self.read(pods, &node_key(node), false, |p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        })
    }

    /// Pods of namespace `ns`.
    pub(crate) fn in_namespace(&self, pods: &Cache<Pod>, ns: &str) -> Vec<Arc<Pod>> {
        self.read(pods, &ns_key(ns), false, |p| {
            p.metadata.namespace.as_deref() == Some(ns)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(rv: &str, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": rv,
                "labels": {"app": "web"},
                "annotations": {"controller.kubernetes.io/pod-deletion-cost": "5"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                    "uid": "rs-uid", "controller": true}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx"}]},
            "status": {"phase": phase, "podIP": "10.0.0.1",
                "conditions": [{"type": "PodScheduled", "status": "True"},
                               {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": true,
                    "restartCount": 2, "state": {"running": {}}}]}
        }))
        .expect("pod")
    }

    #[test]
    fn slim_keeps_what_the_replicaset_controller_reads() {
        let p = pod("7", "Running");
        let s = slim(&p);
        assert_eq!(s.metadata, p.metadata);
        assert_eq!(
            s.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("node-1")
        );
        let st = s.status.as_ref().expect("status");
        assert_eq!(st.phase.as_deref(), Some("Running"));
        let conds = st.conditions.as_ref().expect("conditions");
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].type_, "Ready");
        assert_eq!(
            conds[0],
            p.status
                .as_ref()
                .expect("s")
                .conditions
                .as_ref()
                .expect("c")[1]
        );
        let cs = &st.container_statuses.as_ref().expect("containers")[0];
        assert_eq!(
            (cs.name.as_str(), cs.ready, cs.restart_count),
            ("c", true, 2)
        );
        assert!(st.pod_ip.is_none() && cs.state.is_none());
        assert!(s.spec.as_ref().is_some_and(|s| s.containers.is_empty()));
    }

    #[test]
    fn an_update_seen_old_after_new_keeps_the_new() {
        let mut inner = Inner::default();
        inner.add(&pod("7", "Pending"));
        inner.add(&pod("9", "Running"));
        // Mappers see an update's old object after the new one.
        inner.add(&pod("7", "Pending"));
        let key = ObjectRef::<Pod>::new("p").within("ns");
        let phase = |i: &Inner| {
            i.slim[&key]
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default()
        };
        assert_eq!(phase(&inner), "Running");
        // A pod recreated under the same name (new UID) replaces it even
        // with a lower resourceVersion.
        let mut again = pod("3", "Pending");
        again.metadata.uid = Some("u2".into());
        inner.add(&again);
        assert_eq!(phase(&inner), "Pending");
        assert!(inner.keys[&owner_key("rs-uid")].contains_key(&key));
        assert!(inner.keys[&node_key("node-1")].contains_key(&key));
        // Released by its ReplicaSet: filed as an orphan, not under the
        // owner any more; gone from the cache: out of the index.
        let mut released = pod("11", "Running");
        released.metadata.uid = Some("u2".into());
        released.metadata.owner_references = None;
        inner.add(&released);
        assert!(!inner.keys.contains_key(&owner_key("rs-uid")));
        assert!(inner.keys[&orphan_key("ns")].contains_key(&key));
        inner.remove(&key);
        assert!(inner.keys.is_empty() && inner.slim.is_empty());
    }
}
