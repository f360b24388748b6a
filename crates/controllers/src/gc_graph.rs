//! The garbage collector's dependency graph (kube's `GraphBuilder`): the
//! watch events of every monitored resource folded into uid → node, each
//! node with its identity, ownerReferences, dependents and deletion state;
//! owners referenced but not seen are *virtual* nodes until a watch shows
//! them or a GET proves them absent. One task owns it; the workers read it.
//!
//! The graph feeds the delete and orphan queues, and remembers which owners
//! are known to be absent — by the coordinates a dependent names them with
//! (apiVersion, kind, name, uid, namespace), as kube's absent-owner cache
//! does, never by uid alone. A resource whose monitor stops (discovery no
//! longer lists it) proves nothing: its nodes stay, only marked unwatched,
//! so the workers look their owners up again instead of trusting them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use tokio::sync::mpsc;

use crate::catalog::{Resource, split_api_version};
use crate::gc::{FINALIZER_FOREGROUND, FINALIZER_ORPHAN};
use kubeforge_runtime::WorkQueue;

pub(crate) type Uid = Arc<str>;

/// What the graph builder is told.
pub(crate) enum GraphEvent {
    Apply {
        res: Arc<Resource>,
        meta: Box<ObjectMeta>,
        init: bool,
    },
    Delete {
        uid: Option<Uid>,
    },
    InitStart(Arc<str>),
    InitDone(Arc<str>),
    /// A GET proved a virtual node's object absent at these coordinates.
    VirtualDelete {
        uid: Uid,
        identity: Coordinates,
    },
    /// Discovery stopped listing the resource: its monitor stopped.
    ResourceGone(Arc<str>),
}

/// An object as a reference names it (kube's `objectReference`): apiVersion,
/// kind, name, uid, and the namespace ("" for cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Coordinates {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) uid: Uid,
    pub(crate) namespace: String,
}

impl Coordinates {
    /// The owner `r` names, in `namespace`.
    pub(crate) fn of(r: &OwnerReference, namespace: &str) -> Coordinates {
        Coordinates {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            name: r.name.clone(),
            uid: r.uid.as_str().into(),
            namespace: namespace.to_string(),
        }
    }

    /// Whether `r` names this object by the same apiVersion, kind, name
    /// and uid (kube's `ownerReferenceMatchesCoordinates`).
    fn matches(&self, r: &OwnerReference) -> bool {
        *self.uid == *r.uid
            && self.name == r.name
            && self.kind == r.kind
            && self.api_version == r.api_version
    }
}

/// Formatted as kube formats an `objectReference` in messages.
impl fmt::Display for Coordinates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}/{}, namespace: {}, name: {}, uid: {}]",
            self.api_version, self.kind, self.namespace, self.name, self.uid
        )
    }
}

/// A dependent whose owner reference names an owner in another namespace
/// (or a namespaced owner from a cluster-scoped dependent): kube reports
/// it with an `OwnerRefInvalidNamespace` warning event on the dependent.
#[derive(Debug)]
pub(crate) struct InvalidOwnerRef {
    /// The dependent.
    pub(crate) dependent: Coordinates,
    /// The owner as the dependent names it, in the dependent's namespace.
    pub(crate) owner: Coordinates,
}

/// A set remembering the last `cap` insertions.
pub(crate) struct Bounded<K> {
    set: HashSet<K>,
    order: VecDeque<K>,
    cap: usize,
}

impl<K: Clone + Eq + Hash> Bounded<K> {
    pub(crate) fn new(cap: usize) -> Bounded<K> {
        Bounded {
            set: HashSet::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    pub(crate) fn insert(&mut self, k: K) {
        if self.set.insert(k.clone()) {
            self.order.push_back(k);
            while self.order.len() > self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }

    pub(crate) fn contains(&self, k: &K) -> bool {
        self.set.contains(k)
    }
}

pub(crate) struct Node {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
    /// The watched resource it was seen on (None while virtual).
    pub(crate) res: Option<Arc<Resource>>,
    pub(crate) owners: Vec<OwnerReference>,
    pub(crate) dependents: HashSet<Uid>,
    /// Dependents whose reference to this node has `blockOwnerDeletion: true`.
    pub(crate) blocking: HashSet<Uid>,
    pub(crate) observed: bool,
    /// Its resource is still monitored (false once discovery stopped
    /// listing it: the node may be stale, nothing is inferred from it).
    pub(crate) watched: bool,
    pub(crate) deleting: bool,
    pub(crate) finalizers: Vec<String>,
    pub(crate) resource_version: Option<String>,
}

impl Node {
    fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }

    pub(crate) fn deleting_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FINALIZER_FOREGROUND)
    }

    fn orphaning(&self) -> bool {
        self.deleting && self.has_finalizer(FINALIZER_ORPHAN)
    }

    /// Its identity (for a virtual node: as its first dependent named it).
    fn identity(&self, uid: &Uid) -> Coordinates {
        Coordinates {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            uid: uid.clone(),
            namespace: self.namespace.clone().unwrap_or_default(),
        }
    }

    /// Whether a watch shows this object at the coordinates `r` names from
    /// a dependent in `dep_ns`, so a GET by those coordinates would find
    /// it: same uid, name, group and kind, in the dependent's namespace
    /// when namespaced. (The apiVersion may differ: every served version
    /// reaches the same object.)
    pub(crate) fn vouches_for(&self, r: &OwnerReference, dep_ns: &str) -> bool {
        self.observed
            && self.watched
            && self.name == r.name
            && self.kind == r.kind
            && split_api_version(&self.api_version).0 == split_api_version(&r.api_version).0
            && self.namespace.as_deref().is_none_or(|ns| ns == dep_ns)
    }
}

pub(crate) struct Graph {
    pub(crate) nodes: HashMap<Uid, Node>,
    /// Observed nodes per monitored resource.
    pub(crate) by_res: HashMap<Arc<str>, HashSet<Uid>>,
    /// Resources whose monitor stopped; their nodes are kept, unwatched.
    pub(crate) unwatched: HashSet<Arc<str>>,
    /// Owners known to be absent at these coordinates: deletions observed
    /// (of objects with dependents), and GETs that found nothing or
    /// another uid (kube's absentOwnerCache).
    pub(crate) absent: Bounded<Coordinates>,
    /// Uids seen during a resource's current (re)list.
    listing: HashMap<Arc<str>, HashSet<Uid>>,
}

impl Default for Graph {
    fn default() -> Self {
        Graph {
            nodes: HashMap::new(),
            by_res: HashMap::new(),
            unwatched: HashSet::new(),
            absent: Bounded::new(100_000),
            listing: HashMap::new(),
        }
    }
}

/// The queues the graph builder feeds.
pub(crate) struct Queues<'a> {
    pub(crate) delete: &'a WorkQueue<Uid>,
    pub(crate) orphan: &'a WorkQueue<Uid>,
    pub(crate) invalid: &'a mpsc::UnboundedSender<InvalidOwnerRef>,
}

impl Graph {
    /// Apply one event; the resource whose first list just completed, if
    /// any.
    pub(crate) fn handle(&mut self, ev: GraphEvent, q: &Queues<'_>) -> Option<Arc<str>> {
        match ev {
            GraphEvent::Apply { res, meta, init } => {
                let key: Arc<str> = res.key().into();
                if let Some(uid) = meta.uid.clone() {
                    let uid: Uid = uid.into();
                    if init && let Some(seen) = self.listing.get_mut(&key) {
                        seen.insert(uid.clone());
                    }
                    self.apply(uid, res, *meta, q);
                }
            }
            GraphEvent::Delete { uid } => {
                if let Some(uid) = uid {
                    self.remove(&uid, q);
                }
            }
            GraphEvent::InitStart(key) => {
                self.unwatched.remove(&key);
                self.listing.insert(key, HashSet::new());
            }
            GraphEvent::InitDone(key) => {
                // A complete list: what it lacks is gone.
                let seen = self.listing.remove(&key).unwrap_or_default();
                let gone: Vec<Uid> = self
                    .by_res
                    .get(&key)
                    .map(|s| s.iter().filter(|u| !seen.contains(*u)).cloned().collect())
                    .unwrap_or_default();
                for uid in gone {
                    self.remove(&uid, q);
                }
                self.by_res.entry(key.clone()).or_default();
                return Some(key);
            }
            GraphEvent::VirtualDelete { uid, identity } => self.virtual_delete(uid, identity, q),
            GraphEvent::ResourceGone(key) => {
                // Not a deletion of anything: the objects may well exist.
                // Keep the nodes (kube keeps them too) but stop trusting
                // them; the dependents' owners are looked up again when
                // they are next judged.
                if let Some(uids) = self.by_res.get(&key) {
                    for uid in uids {
                        if let Some(n) = self.nodes.get_mut(uid) {
                            n.watched = false;
                        }
                    }
                }
                self.listing.remove(&key);
                self.unwatched.insert(key);
            }
        }
        None
    }

    fn apply(&mut self, uid: Uid, res: Arc<Resource>, meta: ObjectMeta, q: &Queues<'_>) {
        let key: Arc<str> = res.key().into();
        let owners = meta.owner_references.unwrap_or_default();
        let finalizers = meta.finalizers.unwrap_or_default();
        let deleting = meta.deletion_timestamp.is_some();
        let namespace = meta.namespace.filter(|n| !n.is_empty());
        let name = meta.name.unwrap_or_default();
        let (old_owners, was_dd, was_orphaning) = match self.nodes.get_mut(&uid) {
            Some(n) => {
                let was = (n.deleting_dependents(), n.orphaning());
                let was_virtual = !n.observed;
                let was_unwatched = !n.watched;
                n.api_version = res.ar.api_version.clone();
                n.kind = res.ar.kind.clone();
                n.namespace = namespace.clone();
                n.name = name;
                n.res = Some(res);
                n.observed = true;
                n.watched = true;
                n.deleting = deleting;
                n.finalizers = finalizers;
                n.resource_version = meta.resource_version;
                let old = std::mem::replace(&mut n.owners, owners.clone());
                if was_virtual {
                    self.check_dependents_of_observed(&uid, q);
                } else if was_unwatched {
                    // Watched again: dependents waiting on it can be judged.
                    for d in &self.nodes[&uid].dependents {
                        q.delete.add(d.clone());
                    }
                }
                (old, was.0, was.1)
            }
            None => {
                self.nodes.insert(
                    uid.clone(),
                    Node {
                        api_version: res.ar.api_version.clone(),
                        kind: res.ar.kind.clone(),
                        namespace: namespace.clone(),
                        name,
                        res: Some(res),
                        owners: owners.clone(),
                        dependents: HashSet::new(),
                        blocking: HashSet::new(),
                        observed: true,
                        watched: true,
                        deleting,
                        finalizers,
                        resource_version: meta.resource_version,
                    },
                );
                (Vec::new(), false, false)
            }
        };
        self.by_res.entry(key).or_default().insert(uid.clone());

        // Owner reference changes.
        for r in &owners {
            match old_owners.iter().find(|o| o.uid == r.uid) {
                None => self.add_dependent(&uid, r, namespace.as_deref(), q),
                Some(o) => {
                    let was = o.block_owner_deletion == Some(true);
                    let now = r.block_owner_deletion == Some(true);
                    if was != now {
                        if let Some(owner) = self.nodes.get_mut(r.uid.as_str()) {
                            if now {
                                owner.blocking.insert(uid.clone());
                            } else {
                                owner.blocking.remove(&uid);
                            }
                        }
                        if was {
                            self.enqueue_if_waiting(&r.uid, q);
                        }
                    }
                }
            }
        }
        for o in &old_owners {
            if !owners.iter().any(|r| r.uid == o.uid) {
                self.remove_dependent(&uid, &o.uid);
                self.enqueue_if_waiting(&o.uid, q);
            }
        }

        // Deletion transitions.
        let Some(n) = self.nodes.get(&uid) else {
            return;
        };
        if n.orphaning() && !was_orphaning {
            q.orphan.add(uid.clone());
        }
        if n.deleting_dependents() && !was_dd {
            for d in &n.dependents {
                q.delete.add(d.clone());
            }
            q.delete.add(uid);
        }
    }

    /// A virtual node was just observed: dependents that named it by other
    /// coordinates get a look (kube's "bad child → good parent" order), and
    /// those in another namespace than a namespaced owner are reported.
    fn check_dependents_of_observed(&self, uid: &Uid, q: &Queues<'_>) {
        let Some(owner) = self.nodes.get(uid) else {
            return;
        };
        let identity = owner.identity(uid);
        for d in &owner.dependents {
            let Some(dep) = self.nodes.get(d) else {
                continue;
            };
            let dep_ns = dep.namespace.as_deref().unwrap_or_default();
            let namespace_mismatch = owner.namespace.as_deref().is_some_and(|ns| ns != dep_ns);
            let mismatch = namespace_mismatch
                || dep
                    .owners
                    .iter()
                    .any(|r| *r.uid == **uid && !identity.matches(r));
            if !mismatch {
                continue;
            }
            if namespace_mismatch {
                report_invalid(d, dep, uid, q);
            }
            q.delete.add(d.clone());
        }
    }

    /// Record `dep` as a dependent of the owner `r` names (kube's
    /// `addDependentToOwners`).
    fn add_dependent(&mut self, dep: &Uid, r: &OwnerReference, ns: Option<&str>, q: &Queues<'_>) {
        let owner: Uid = r.uid.as_str().into();
        let blocks = r.block_owner_deletion == Some(true);
        if let Some(o) = self.nodes.get_mut(&owner) {
            o.dependents.insert(dep.clone());
            if blocks {
                o.blocking.insert(dep.clone());
            }
            let dep_ns = ns.unwrap_or_default();
            let o = &self.nodes[&owner];
            let owner_ns = o.namespace.as_deref();
            if owner_ns.is_some_and(|ons| ons != dep_ns) {
                // A namespaced owner in another namespace: wrong for sure
                // once the owner was seen there.
                if o.observed
                    && let Some(d) = self.nodes.get(dep)
                {
                    report_invalid(dep, d, &owner, q);
                }
                q.delete.add(dep.clone());
            } else if !o.identity(&owner).matches(r)
                || (owner_ns.is_none() && !o.observed && !dep_ns.is_empty())
            {
                // Other coordinates than the owner was seen (or first
                // named) with, or a virtual cluster-scoped owner named from
                // a namespace (it may be a namespaced kind): verify.
                q.delete.add(dep.clone());
            } else if o.deleting_dependents() {
                q.delete.add(dep.clone());
            }
            return;
        }
        // Not seen: a virtual node, verified by a worker.
        self.nodes.insert(
            owner.clone(),
            Node {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                namespace: ns.map(str::to_string),
                name: r.name.clone(),
                res: None,
                owners: Vec::new(),
                dependents: HashSet::from([dep.clone()]),
                blocking: if blocks {
                    HashSet::from([dep.clone()])
                } else {
                    HashSet::new()
                },
                observed: false,
                watched: true,
                deleting: false,
                finalizers: Vec::new(),
                resource_version: None,
            },
        );
        q.delete.add(owner);
    }

    fn remove_dependent(&mut self, dep: &Uid, owner: &str) {
        let owner: Uid = owner.into();
        let drop_virtual = match self.nodes.get_mut(&owner) {
            Some(o) => {
                o.dependents.remove(dep);
                o.blocking.remove(dep);
                !o.observed && o.dependents.is_empty()
            }
            None => false,
        };
        if drop_virtual {
            self.nodes.remove(&owner);
        }
    }

    fn enqueue_if_waiting(&self, owner: &str, q: &Queues<'_>) {
        if let Some((uid, o)) = self.nodes.get_key_value(owner)
            && o.deleting_dependents()
        {
            q.delete.add(uid.clone());
        }
    }

    /// A worker's GET found nothing at `identity` (kube's virtual delete
    /// event): the dependents naming the owner so are looked at again; a
    /// virtual node some dependents name by other coordinates stays, to be
    /// verified by those.
    fn virtual_delete(&mut self, uid: Uid, identity: Coordinates, q: &Queues<'_>) {
        let Some(node) = self.nodes.get(&uid) else {
            return;
        };
        let observed = node.observed;
        let (matching, other) = self.partition_dependents(node, &identity);
        if !matching.is_empty() {
            self.absent.insert(identity.clone());
        }
        for d in &matching {
            q.delete.add(d.clone());
        }
        if observed {
            // A watch shows the object: only the dependents that name it
            // wrongly are affected.
            return;
        }
        match other.first() {
            None => {
                self.nodes.remove(&uid);
            }
            Some((_, alternate)) => {
                // Verify the next identity a dependent names it by.
                if let Some(n) = self.nodes.get_mut(&uid) {
                    n.api_version = alternate.api_version.clone();
                    n.kind = alternate.kind.clone();
                    n.name = alternate.name.clone();
                    n.namespace = Some(alternate.namespace.clone()).filter(|s| !s.is_empty());
                }
                q.delete.add_rate_limited(uid);
            }
        }
    }

    /// The dependents of `node` naming it by `identity`, and those naming
    /// it otherwise (with how they name it).
    fn partition_dependents(
        &self,
        node: &Node,
        identity: &Coordinates,
    ) -> (Vec<Uid>, Vec<(Uid, Coordinates)>) {
        let mut matching = Vec::new();
        let mut other = Vec::new();
        for d in &node.dependents {
            let Some(dep) = self.nodes.get(d) else {
                continue;
            };
            let dep_ns = dep.namespace.as_deref().unwrap_or_default();
            for r in dep.owners.iter().filter(|r| *r.uid == *identity.uid) {
                let same_ns = identity.namespace.is_empty() || identity.namespace == dep_ns;
                if same_ns && identity.matches(r) {
                    matching.push(d.clone());
                } else {
                    other.push((d.clone(), Coordinates::of(r, dep_ns)));
                }
            }
        }
        other.retain(|(_, c)| *c != *identity);
        (matching, other)
    }

    /// An object is gone: its dependents need a look, and owners waiting
    /// for it may finish.
    fn remove(&mut self, uid: &Uid, q: &Queues<'_>) {
        let Some(node) = self.nodes.remove(uid) else {
            return;
        };
        if let Some(res) = &node.res
            && let Some(set) = self.by_res.get_mut(res.key().as_str())
        {
            set.remove(uid);
        }
        if !node.dependents.is_empty() && node.observed {
            self.absent.insert(node.identity(uid));
        }
        for o in &node.owners {
            self.remove_dependent(uid, &o.uid);
            self.enqueue_if_waiting(&o.uid, q);
        }
        for d in node.dependents {
            q.delete.add(d);
        }
    }
}

/// Report that `dep` names the owner `owner_uid` in a namespace the owner
/// is not in.
fn report_invalid(dep_uid: &Uid, dep: &Node, owner_uid: &Uid, q: &Queues<'_>) {
    let dep_ns = dep.namespace.clone().unwrap_or_default();
    let Some(r) = dep.owners.iter().find(|r| *r.uid == **owner_uid) else {
        return;
    };
    let _ = q.invalid.send(InvalidOwnerRef {
        dependent: dep.identity(dep_uid),
        owner: Coordinates::of(r, &dep_ns),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_set_forgets_oldest() {
        let mut b = Bounded::new(2);
        b.insert(1);
        b.insert(2);
        b.insert(3);
        assert!(!b.contains(&1));
        assert!(b.contains(&2) && b.contains(&3));
    }

    #[test]
    fn coordinates_print_as_kube_prints_an_object_reference() {
        let c = Coordinates {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: "u1".into(),
            namespace: "b".into(),
        };
        assert_eq!(
            c.to_string(),
            "[v1/ConfigMap, namespace: b, name: owner, uid: u1]"
        );
    }
}
