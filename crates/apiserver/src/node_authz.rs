//! The Node authorizer in this server: [`kubeforge_authz::node`] decides,
//! over a [`NodeGraph`] this module keeps from the store (every pod and
//! every PersistentVolumeClaim: listed at start, then watched; listed again
//! if the watch falls behind compaction). A node request the graph does not
//! relate (the watch may be a few writes behind the request, say right
//! after a pod was bound) is checked against the stored pods of its
//! namespace before it is refused, so a node never sees a refusal the
//! store would not justify.
//!
//! Nodes (`system:node:<name>` in `system:nodes`) are authorized here
//! first; what this leaves undecided goes on to the access policies and
//! RBAC, where no default binding grants nodes anything (kube's
//! `--authorization-mode=Node,RBAC`).

use std::sync::{Arc, RwLock, Weak};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kubeforge_authz::node::{self, Kind, NodeGraph};
use kubeforge_authz::rbac::rules::Rule;
use kubeforge_authz::{Attributes, Decision};
use kubeforge_store::{EventKind, Store};

use crate::server::{ApiServer, Inner};

const PODS: &str = "/registry/core/pods/";
const CLAIMS: &str = "/registry/core/persistentvolumeclaims/";

/// The graph and the node rules.
pub(crate) struct NodeAuthz {
    graph: RwLock<NodeGraph>,
    rules: Vec<Rule>,
}

impl Default for NodeAuthz {
    fn default() -> Self {
        NodeAuthz {
            graph: RwLock::new(NodeGraph::new()),
            rules: crate::rbac_components::node_rules(),
        }
    }
}

/// Build the graph from the store and keep it current.
pub(crate) fn start(server: &ApiServer) {
    let authz = Arc::clone(&server.inner.access.nodes);
    let Some(rev) = relist(&authz, server.store()) else {
        return;
    };
    let weak = Arc::downgrade(&server.inner);
    let (Ok(pods), Ok(claims)) = (
        server.store().watch(PODS, rev),
        server.store().watch(CLAIMS, rev),
    ) else {
        return;
    };
    tokio::spawn(follow(weak, authz, pods, claims));
}

/// Replace the graph with the store's current pods and claims; the
/// revision they were read at.
fn relist(authz: &NodeAuthz, store: &Store) -> Option<u64> {
    let pods = store.range(PODS, None, 0);
    let claims = store.range(CLAIMS, None, 0);
    let mut g = NodeGraph::new();
    for kv in &pods.kvs {
        if let Ok(p) = serde_json::from_slice::<Pod>(&kv.value) {
            g.set_pod(&p);
        }
    }
    for kv in &claims.kvs {
        if let Ok(c) = serde_json::from_slice::<PersistentVolumeClaim>(&kv.value) {
            set_claim(&mut g, &c);
        }
    }
    *authz.graph.write().ok()? = g;
    Some(pods.revision.min(claims.revision))
}

fn set_claim(g: &mut NodeGraph, c: &PersistentVolumeClaim) {
    let ns = c.metadata.namespace.as_deref().unwrap_or_default();
    let name = c.metadata.name.as_deref().unwrap_or_default();
    let volume = c.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    g.set_claim(ns, name, volume);
}

/// `ns` and `name` of a key `<prefix><ns>/<name>`.
fn key_parts<'a>(key: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    key.strip_prefix(prefix)?.split_once('/')
}

async fn follow(
    weak: Weak<Inner>,
    authz: Arc<NodeAuthz>,
    mut pods: kubeforge_store::Watcher,
    mut claims: kubeforge_store::Watcher,
) {
    loop {
        let (ev, prefix) = tokio::select! {
            ev = pods.next() => (ev, PODS),
            ev = claims.next() => (ev, CLAIMS),
        };
        let ev = match ev {
            None => return,
            Some(Ok(ev)) => ev,
            Some(Err(_)) => {
                // Behind compaction (or the store is closing): list again.
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let store = inner.store.clone();
                drop(inner);
                let Some(rev) = relist(&authz, &store) else {
                    return;
                };
                match (store.watch(PODS, rev), store.watch(CLAIMS, rev)) {
                    (Ok(p), Ok(c)) => (pods, claims) = (p, c),
                    _ => return,
                }
                continue;
            }
        };
        let Ok(mut g) = authz.graph.write() else {
            return;
        };
        let Some((ns, name)) = key_parts(&ev.kv.key, prefix) else {
            continue;
        };
        match (ev.kind, prefix) {
            (EventKind::Delete, PODS) => g.remove_pod(ns, name),
            (EventKind::Delete, _) => g.set_claim(ns, name, None),
            (_, PODS) => match serde_json::from_slice::<Pod>(&ev.kv.value) {
                Ok(p) => g.set_pod(&p),
                Err(_) => g.remove_pod(ns, name),
            },
            _ => {
                if let Ok(c) = serde_json::from_slice::<PersistentVolumeClaim>(&ev.kv.value) {
                    set_claim(&mut g, &c);
                }
            }
        }
    }
}

/// The Node authorizer's decision, `None` when the user is not a node.
pub(crate) fn decide(server: &ApiServer, a: &Attributes) -> Option<Decision> {
    let node_name = node::node_identity(&a.user)?;
    let authz = &server.inner.access.nodes;
    let decision = {
        let g = authz.graph.read().unwrap_or_else(|p| p.into_inner());
        node::authorize(&g, &authz.rules, a)
    };
    let Decision::NoOpinion { reason } = &decision else {
        return Some(decision);
    };
    if !reason.starts_with("no relationship found") {
        return Some(decision);
    }
    // The graph may be behind the store: ask the stored pods.
    let kind = match (a.api_group.as_str(), a.resource.as_str()) {
        ("", "secrets") => Kind::Secret,
        ("", "configmaps") => Kind::ConfigMap,
        ("", "persistentvolumeclaims") => Kind::PersistentVolumeClaim,
        ("", "serviceaccounts") => Kind::ServiceAccount,
        ("", "pods") => Kind::Pod,
        _ => return Some(decision),
    };
    let page = server
        .store()
        .range(&format!("{PODS}{}/", a.namespace), None, 0);
    let want = (kind, a.namespace.clone(), a.name.clone());
    let related = page.kvs.iter().any(|kv| {
        let Ok(p) = serde_json::from_slice::<Pod>(&kv.value) else {
            return false;
        };
        let Some(spec) = p.spec.as_ref() else {
            return false;
        };
        spec.node_name.as_deref() == Some(node_name)
            && node::pod_uses(
                &a.namespace,
                p.metadata.name.as_deref().unwrap_or_default(),
                spec,
            )
            .contains(&want)
    });
    Some(if related {
        Decision::Allow {
            reason: String::new(),
        }
    } else {
        decision
    })
}
