//! An index over the shared pod cache: pods by controller UID, orphans by
//! namespace, pods by node and by namespace, so "my pods" is O(my pods)
//! instead of O(all pods).
//!
//! Entries are added as pods are seen (the controllers' watch mappers call
//! [`PodIndex::observe`]) and checked against the cache when read, so stale
//! ones fall out; the first read seeds the index from the cache.
//!
//! The index also keeps a *slim* copy of each pod — its metadata, node
//! name, phase, Ready condition and container restart counts — for the
//! hottest reader, the ReplicaSet controller, which looks at every one of
//! its pods on every sync. The shared cache keeps pods as compact JSON and
//! decodes one on each cold read (~30 µs for a typical pod), so a sync of a
//! 1,000-pod ReplicaSet was ~30 ms of decoding; the slim copies are built
//! once per pod change, from the object the watch already decoded.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::Cache;

use super::util::{controller_of, lock};

/// How often slim copies of pods gone from the cache are swept out.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// See the module documentation.
#[derive(Default)]
pub(crate) struct PodIndex {
    seeded: AtomicBool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Index key → the cache keys of the pods under it (cache keys, so a
    /// read looks pods up without building one).
    keys: HashMap<String, HashSet<ObjectRef<Pod>>>,
    /// Cache key → the pod's slim copy.
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
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        match controller_of(&pod.metadata) {
            Some(r) => {
                self.keys
                    .entry(owner_key(&r.uid))
                    .or_default()
                    .insert(id.clone());
            }
            None => {
                self.keys
                    .entry(orphan_key(&ns))
                    .or_default()
                    .insert(id.clone());
            }
        }
        if let Some(n) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            self.keys.entry(node_key(n)).or_default().insert(id.clone());
        }
        self.keys.entry(ns_key(&ns)).or_default().insert(id.clone());
        self.slim.insert(id, Arc::new(slim(pod)));
    }

    /// Drop slim copies of pods the cache no longer has (their index
    /// entries fall out when next read).
    fn sweep(&mut self, pods: &Cache<Pod>) {
        let now = Instant::now();
        if self.last_sweep.is_some_and(|t| now - t < SWEEP_EVERY) {
            return;
        }
        self.last_sweep = Some(now);
        self.slim.retain(|r, _| pods.contains(r));
    }
}

impl PodIndex {
    /// Record `pod` under its keys and keep its slim copy.
    pub(crate) fn observe(&self, pod: &Pod) {
        lock(&self.inner).add(pod);
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

    /// The entries under `key` that the cache still has and `keep` accepts,
    /// as full pods from the cache (`slim == false`) or slim copies.
    fn read(
        &self,
        pods: &Cache<Pod>,
        key: &str,
        slim_copies: bool,
        keep: impl Fn(&Pod) -> bool,
    ) -> Vec<Arc<Pod>> {
        self.seed(pods);
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        inner.sweep(pods);
        let Some(set) = inner.keys.get_mut(key) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let slim_map = &mut inner.slim;
        set.retain(|r| {
            let pod = if slim_copies && pods.contains(r) {
                match slim_map.get(r) {
                    Some(p) => Some(p.clone()),
                    // Not observed yet (or swept in a race): build it.
                    None => pods.get(r).map(|p| {
                        let s = Arc::new(slim(&p));
                        slim_map.insert(r.clone(), s.clone());
                        s
                    }),
                }
            } else if slim_copies {
                None
            } else {
                pods.get(r)
            };
            match pod {
                Some(p) if keep(&p) => {
                    out.push(p);
                    true
                }
                _ => false,
            }
        });
        if set.is_empty() {
            inner.keys.remove(key);
        }
        out
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
        assert!(inner.keys[&owner_key("rs-uid")].contains(&key));
        assert!(inner.keys[&node_key("node-1")].contains(&key));
    }
}
