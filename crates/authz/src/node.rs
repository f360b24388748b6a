//! The Node authorizer, as kube-apiserver's (`plugin/pkg/auth/authorizer/
//! node`): a node's identity (`system:node:<name>` in `system:nodes`) may
//! read a Secret, ConfigMap, PersistentVolumeClaim or PersistentVolume, or
//! ask for a ServiceAccount's token, only when a pod bound to that node
//! uses it; it reads only its own Node and Lease, lists and watches only
//! its own pods (`spec.nodeName=<node>`); everything else a node may do is
//! the `system:node` role's rules, evaluated here (no RBAC binding grants
//! them). Refusals are NoOpinion with kube's reasons (`no relationship
//! found between node 'n1' and this object`).
//!
//! [`NodeGraph`] is the relation: for each object a pod uses, the nodes
//! whose pods use it (with a count, so a second pod keeps the edge when the
//! first goes). The API server keeps it from watches of pods and claims;
//! a lookup is two hash probes.

use foldhash::HashMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec};

use crate::rbac::rules::Rule;
use crate::{Attributes, Decision, UserInfo};

/// The group every node identity is in.
pub const NODES_GROUP: &str = "system:nodes";
/// The prefix of node user names.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The namespace node Leases live in.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// kube's `NodeIdentity`: `Some(name)` for `system:node:<name>` in
/// `system:nodes` (the name may be empty: an unidentifiable node), `None`
/// for anyone else.
pub fn node_identity(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    user.in_group(NODES_GROUP).then_some(name)
}

/// The kinds of object a pod relates to its node through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A Pod itself.
    Pod,
    /// A Secret.
    Secret,
    /// A ConfigMap.
    ConfigMap,
    /// A PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// A ServiceAccount (its token).
    ServiceAccount,
}

/// One object: kind, namespace, name.
pub type ObjectKey = (Kind, String, String);

/// Strings (namespaces, names, nodes) kept once each, by number, counted
/// so a name no pod uses any more is dropped.
#[derive(Debug, Default)]
struct Interner {
    ids: HashMap<Box<str>, u32>,
    strs: Vec<(Box<str>, u32)>,
    free: Vec<u32>,
}

impl Interner {
    fn get(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    fn hold(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            self.strs[id as usize].1 += 1;
            return id;
        }
        let boxed: Box<str> = s.into();
        let id = match self.free.pop() {
            Some(id) => {
                self.strs[id as usize] = (boxed.clone(), 1);
                id
            }
            None => {
                self.strs.push((boxed.clone(), 1));
                (self.strs.len() - 1) as u32
            }
        };
        self.ids.insert(boxed, id);
        id
    }

    fn release(&mut self, id: u32) {
        let slot = &mut self.strs[id as usize];
        slot.1 -= 1;
        if slot.1 == 0 {
            let s = std::mem::take(&mut slot.0);
            self.ids.remove(&s);
            self.free.push(id);
        }
    }
}

/// Which nodes' pods use one object: (node, how many of its pods), by
/// node; almost always one.
#[derive(Debug, Default)]
struct Users(Vec<(u32, u32)>);

/// What one pod contributes to the graph: its node and what it uses, by
/// kind, namespace and name.
#[derive(Clone, Debug)]
struct PodEdges {
    node: u32,
    uses: Vec<(Kind, u32, Box<str>)>,
}

/// Which nodes' pods use which objects. Nodes and namespaces are few and
/// kept by number (so a decision's first probes stay in cache); object
/// names are looked up per kind and namespace.
#[derive(Debug, Default)]
pub struct NodeGraph {
    names: Interner,
    /// (kind, namespace) → object name → its users.
    users: HashMap<(Kind, u32), HashMap<Box<str>, Users>>,
    /// namespace → pod name → its node and what it uses.
    pods: HashMap<u32, HashMap<Box<str>, PodEdges>>,
    /// PersistentVolume → the claims (namespace, name) bound to it.
    volumes: HashMap<String, Vec<(String, String)>>,
    /// Claim (namespace, name) → its bound volume.
    claims: HashMap<(String, String), String>,
}

impl NodeGraph {
    /// An empty graph.
    pub fn new() -> NodeGraph {
        NodeGraph::default()
    }

    /// Record `pod` as it is now (bound or not); replaces what it was.
    pub fn set_pod(&mut self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        self.remove_pod(ns, name);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty());
        let (Some(node), Some(spec)) = (node, pod.spec.as_ref()) else {
            return;
        };
        let mut uses = pod_uses(ns, name, spec);
        uses.sort_by(|a, b| (a.0 as u8, &a.1, &a.2).cmp(&(b.0 as u8, &b.1, &b.2)));
        uses.dedup();
        let node = self.names.hold(node);
        let mut edges = Vec::with_capacity(uses.len());
        for (kind, ns, name) in uses {
            let ns = self.names.hold(&ns);
            let users = self
                .users
                .entry((kind, ns))
                .or_default()
                .entry(name.as_str().into())
                .or_default();
            match users.0.binary_search_by_key(&node, |(n, _)| *n) {
                Ok(i) => users.0[i].1 += 1,
                Err(i) => users.0.insert(i, (node, 1)),
            }
            edges.push((kind, ns, name.into_boxed_str()));
        }
        let ns_id = self.names.hold(ns);
        self.pods
            .entry(ns_id)
            .or_default()
            .insert(name.into(), PodEdges { node, uses: edges });
    }

    /// Forget the pod `ns/name`.
    pub fn remove_pod(&mut self, ns: &str, name: &str) {
        let Some(ns_id) = self.names.get(ns) else {
            return;
        };
        let Some(in_ns) = self.pods.get_mut(&ns_id) else {
            return;
        };
        let Some(old) = in_ns.remove(name) else {
            return;
        };
        if in_ns.is_empty() {
            self.pods.remove(&ns_id);
        }
        for (kind, ns, name) in &old.uses {
            if let Some(by_name) = self.users.get_mut(&(*kind, *ns)) {
                if let Some(users) = by_name.get_mut(name) {
                    if let Ok(i) = users.0.binary_search_by_key(&old.node, |(n, _)| *n) {
                        users.0[i].1 -= 1;
                        if users.0[i].1 == 0 {
                            users.0.remove(i);
                        }
                    }
                    if users.0.is_empty() {
                        by_name.remove(name);
                    }
                }
                if by_name.is_empty() {
                    self.users.remove(&(*kind, *ns));
                }
            }
            self.names.release(*ns);
        }
        self.names.release(old.node);
        self.names.release(ns_id);
    }

    /// Record which volume the claim `ns/name` is bound to (`None`:
    /// unbound or deleted).
    pub fn set_claim(&mut self, ns: &str, name: &str, volume: Option<&str>) {
        let key = (ns.to_string(), name.to_string());
        if let Some(old) = self.claims.remove(&key)
            && let Some(list) = self.volumes.get_mut(&old)
        {
            list.retain(|c| *c != key);
            if list.is_empty() {
                self.volumes.remove(&old);
            }
        }
        if let Some(v) = volume.filter(|v| !v.is_empty()) {
            self.volumes
                .entry(v.to_string())
                .or_default()
                .push(key.clone());
            self.claims.insert(key, v.to_string());
        }
    }

    /// Whether a pod bound to `node` uses the object.
    pub fn related(&self, node: &str, kind: Kind, ns: &str, name: &str) -> bool {
        let (Some(node), Some(ns)) = (self.names.get(node), self.names.get(ns)) else {
            return false;
        };
        self.users
            .get(&(kind, ns))
            .and_then(|by_name| by_name.get(name))
            .is_some_and(|users| users.0.binary_search_by_key(&node, |(n, _)| *n).is_ok())
    }

    /// Whether a pod bound to `node` uses a claim bound to the volume.
    pub fn volume_related(&self, node: &str, volume: &str) -> bool {
        self.volumes.get(volume).is_some_and(|claims| {
            claims
                .iter()
                .any(|(ns, c)| self.related(node, Kind::PersistentVolumeClaim, ns, c))
        })
    }

    /// How many pods are recorded (bound ones).
    pub fn pod_count(&self) -> usize {
        self.pods.values().map(HashMap::len).sum()
    }

    /// How many distinct node and namespace names the graph holds (a name
    /// no pod uses any more is dropped).
    pub fn interned(&self) -> usize {
        self.names.ids.len()
    }
}

/// What a pod uses (kube's graph_populator `AddPod`): itself, its
/// ServiceAccount, image pull Secrets, and the Secrets, ConfigMaps and
/// claims its volumes (projected sources and generic ephemeral volumes
/// too) and every container's env and envFrom name.
pub fn pod_uses(ns: &str, pod_name: &str, spec: &PodSpec) -> Vec<ObjectKey> {
    let mut out = Vec::new();
    let mut add = |kind: Kind, name: &str| {
        if !name.is_empty() {
            out.push((kind, ns.to_string(), name.to_string()));
        }
    };
    add(Kind::Pod, pod_name);
    if let Some(sa) = spec.service_account_name.as_deref() {
        add(Kind::ServiceAccount, sa);
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        add(Kind::Secret, &s.name);
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) {
            add(Kind::Secret, s);
        }
        if let Some(c) = &v.config_map {
            add(Kind::ConfigMap, &c.name);
        }
        if let Some(c) = &v.persistent_volume_claim {
            add(Kind::PersistentVolumeClaim, &c.claim_name);
        }
        if v.ephemeral.is_some() {
            add(
                Kind::PersistentVolumeClaim,
                &format!("{pod_name}-{}", v.name),
            );
        }
        for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &source.secret {
                add(Kind::Secret, &s.name);
            }
            if let Some(c) = &source.config_map {
                add(Kind::ConfigMap, &c.name);
            }
        }
        // Secrets named by volume plugins (CSI, Ceph, …).
        let plugin_secrets = [
            v.csi
                .as_ref()
                .and_then(|c| c.node_publish_secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.cephfs
                .as_ref()
                .and_then(|c| c.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.rbd
                .as_ref()
                .and_then(|c| c.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.iscsi
                .as_ref()
                .and_then(|c| c.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.flex_volume
                .as_ref()
                .and_then(|c| c.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.scale_io.as_ref().map(|c| c.secret_ref.name.as_str()),
            v.storageos
                .as_ref()
                .and_then(|c| c.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.azure_file.as_ref().map(|c| c.secret_name.as_str()),
        ];
        for s in plugin_secrets.into_iter().flatten() {
            add(Kind::Secret, s);
        }
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    let ephemeral = spec.ephemeral_containers.iter().flatten();
    let envs = containers
        .map(|c| (c.env.as_deref(), c.env_from.as_deref()))
        .chain(ephemeral.map(|c| (c.env.as_deref(), c.env_from.as_deref())));
    for (env, env_from) in envs {
        for e in env.unwrap_or_default() {
            let from = e.value_from.as_ref();
            if let Some(r) = from.and_then(|f| f.secret_key_ref.as_ref()) {
                add(Kind::Secret, &r.name);
            }
            if let Some(r) = from.and_then(|f| f.config_map_key_ref.as_ref()) {
                add(Kind::ConfigMap, &r.name);
            }
        }
        for e in env_from.unwrap_or_default() {
            if let Some(r) = &e.secret_ref {
                add(Kind::Secret, &r.name);
            }
            if let Some(r) = &e.config_map_ref {
                add(Kind::ConfigMap, &r.name);
            }
        }
    }
    out
}

fn no_opinion(reason: impl Into<String>) -> Decision {
    Decision::NoOpinion {
        reason: reason.into(),
    }
}

fn allow() -> Decision {
    Decision::Allow {
        reason: String::new(),
    }
}

/// The Node authorizer's decision for `a`; `NoOpinion` with an empty
/// reason for anyone who is not a node. `rules` are the `system:node`
/// role's, used for what the graph does not subdivide.
pub fn authorize(graph: &NodeGraph, rules: &[Rule], a: &Attributes) -> Decision {
    let Some(node) = node_identity(&a.user) else {
        return no_opinion("");
    };
    if node.is_empty() {
        return no_opinion(format!("unknown node for user {:?}", a.user.name));
    }
    if a.resource_request {
        let related = |kind: Kind| {
            if a.name.is_empty() {
                return no_opinion("No Object name found");
            }
            if graph.related(node, kind, &a.namespace, &a.name) {
                allow()
            } else {
                no_opinion(format!(
                    "no relationship found between node '{node}' and this object"
                ))
            }
        };
        let get_only = |kind: Kind| {
            if a.verb != "get" {
                no_opinion("can only get individual resources of this type")
            } else if !a.subresource.is_empty() {
                no_opinion("cannot get subresource")
            } else {
                related(kind)
            }
        };
        match (a.api_group.as_str(), a.resource.as_str()) {
            ("", "secrets" | "configmaps") => {
                let kind = if a.resource == "secrets" {
                    Kind::Secret
                } else {
                    Kind::ConfigMap
                };
                return if !matches!(a.verb.as_str(), "get" | "list" | "watch") {
                    no_opinion("can only read resources of this type")
                } else if !a.subresource.is_empty() {
                    no_opinion("cannot read subresource")
                } else if a.namespace.is_empty() {
                    no_opinion("can only read namespaced object of this type")
                } else {
                    related(kind)
                };
            }
            ("", "persistentvolumeclaims") => {
                if a.subresource == "status" {
                    return if !matches!(a.verb.as_str(), "update" | "patch") {
                        no_opinion("can only get/update/patch this type")
                    } else {
                        related(Kind::PersistentVolumeClaim)
                    };
                }
                return get_only(Kind::PersistentVolumeClaim);
            }
            ("", "persistentvolumes") => {
                return if a.verb != "get" {
                    no_opinion("can only get individual resources of this type")
                } else if !a.subresource.is_empty() {
                    no_opinion("cannot get subresource")
                } else if a.name.is_empty() {
                    no_opinion("No Object name found")
                } else if graph.volume_related(node, &a.name) {
                    allow()
                } else {
                    no_opinion(format!(
                        "no relationship found between node '{node}' and this object"
                    ))
                };
            }
            ("", "serviceaccounts") => {
                return if a.verb != "create" || a.name.is_empty() {
                    no_opinion("can only create tokens for individual service accounts")
                } else if a.subresource != "token" {
                    no_opinion("can only create token subresource of serviceaccount")
                } else {
                    related(Kind::ServiceAccount)
                };
            }
            ("coordination.k8s.io", "leases") => {
                return if !matches!(
                    a.verb.as_str(),
                    "get" | "create" | "update" | "patch" | "delete"
                ) {
                    no_opinion("can only get, create, update, patch, or delete a node lease")
                } else if a.namespace != NODE_LEASE_NAMESPACE {
                    no_opinion(format!(
                        "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
                    ))
                } else if a.verb != "create" && a.name != node {
                    no_opinion(
                        "can only access node lease with the same name as the requesting node",
                    )
                } else {
                    allow()
                };
            }
            ("", "nodes") => return authorize_node(node, a),
            ("", "pods") => return authorize_pod(graph, node, a),
            _ => {}
        }
    }
    if rules.iter().any(|r| r.allows(a)) {
        allow()
    } else {
        no_opinion("")
    }
}

/// kube's `authorizeNode` (AuthorizeNodeWithSelectors, on since 1.32).
fn authorize_node(node: &str, a: &Attributes) -> Decision {
    match (a.subresource.as_str(), a.verb.as_str()) {
        // NodeRestriction limits these to the node's own object.
        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => allow(),
        ("", "get" | "list" | "watch") => {
            if a.name == node {
                allow()
            } else if a.name.is_empty() {
                no_opinion(format!(
                    "node '{node}' cannot read all nodes, only its own Node object"
                ))
            } else {
                no_opinion(format!(
                    "node '{node}' cannot read '{}', only its own Node object",
                    a.name
                ))
            }
        }
        _ => no_opinion(""),
    }
}

/// kube's `authorizePod`.
fn authorize_pod(graph: &NodeGraph, node: &str, a: &Attributes) -> Decision {
    let related = || {
        if graph.related(node, Kind::Pod, &a.namespace, &a.name) {
            allow()
        } else {
            no_opinion(format!(
                "no relationship found between node '{node}' and this object"
            ))
        }
    };
    match (a.subresource.as_str(), a.verb.as_str()) {
        ("", "get") => {
            if a.name.is_empty() {
                no_opinion("No Object name found")
            } else {
                related()
            }
        }
        ("", "list" | "watch") => {
            if a.field_equals
                .iter()
                .any(|(f, v)| f == "spec.nodeName" && v == node)
            {
                allow()
            } else if !a.name.is_empty() {
                related()
            } else {
                no_opinion("can only list/watch pods with spec.nodeName field selector")
            }
        }
        // NodeRestriction limits these to pods bound to the node.
        ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => {
            allow()
        }
        _ => no_opinion(""),
    }
}

#[cfg(test)]
mod tests;
