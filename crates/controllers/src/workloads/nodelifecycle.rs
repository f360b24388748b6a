//! Node lifecycle (kube's node-lifecycle controller and NoExecute taint
//! manager): a node whose heartbeats stop — its Lease in `kube-node-lease`
//! is not renewed and its Ready condition's `lastHeartbeatTime` does not
//! move — for longer than `node_monitor_grace_period` (40 s by default)
//! gets its conditions set to Unknown (reason NodeStatusUnknown, "Kubelet
//! stopped posting node status."), its pods marked not Ready, and the
//! `node.kubernetes.io/unreachable` NoExecute and NoSchedule taints
//! (`not-ready` ones while Ready is False). Taints go when Ready is True
//! again.
//!
//! Pods on a node with NoExecute taints are deleted at once unless they
//! tolerate every such taint, else once the shortest matching
//! `tolerationSeconds` has passed since the taint's `timeAdded` (the API
//! server gives pods 300 s tolerations for not-ready/unreachable by
//! default, as kube's DefaultTolerationSeconds admission). Their
//! controllers replace them; the scheduler avoids the tainted node.
//!
//! Like kube, heartbeat ages are measured on this controller's clock from
//! when it last saw the heartbeat change, so clock skew does not matter.

use crate::clients::accounts;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::{Action, Manager, ReconcileError};
use serde_json::json;

use super::Ctx;
use super::daemonset::tolerates;
use super::util;

/// The taint of a node whose heartbeats stopped.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint of a node whose Ready condition is False.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// Heartbeats seen per node: what they said, when that changed, and
/// whether the node was last found stale.
#[derive(Default)]
pub(crate) struct Health {
    seen: Mutex<HashMap<String, Beat>>,
}

struct Beat {
    /// The Lease's `renewTime` and the Ready condition's
    /// `lastHeartbeatTime`, as last seen.
    said: (Option<String>, Option<String>),
    changed: Instant,
    stale: bool,
}

impl Health {
    /// Record what node `name`'s heartbeats say now (`None` for a part not
    /// seen this time: it keeps its last value); returns how long ago they
    /// last changed and whether the node was last found stale (`None` the
    /// first time the node is seen).
    fn saw(
        &self,
        name: &str,
        lease: Option<String>,
        status: Option<String>,
    ) -> (Duration, Option<bool>) {
        let mut seen = util::lock(&self.seen);
        let now = Instant::now();
        let Some(b) = seen.get_mut(name) else {
            seen.insert(
                name.to_string(),
                Beat {
                    said: (lease, status),
                    changed: now,
                    stale: false,
                },
            );
            return (Duration::ZERO, None);
        };
        let said = (
            lease.or_else(|| b.said.0.clone()),
            status.or_else(|| b.said.1.clone()),
        );
        if said != b.said {
            b.said = said;
            b.changed = now;
        }
        (now - b.changed, Some(b.stale))
    }

    fn set_stale(&self, name: &str, stale: bool) {
        if let Some(b) = util::lock(&self.seen).get_mut(name) {
            b.stale = stale;
        }
    }
}

struct NodeCtx {
    ctx: Arc<Ctx>,
    health: Arc<Health>,
}

/// Register the controller with `mgr`.
///
/// A healthy node is synced when it changes and once more when its
/// heartbeats would go stale; a Lease renewal only moves that deadline (the
/// renewal is recorded by the watch mapper, as kube's controller reads it
/// from its informer), so 5,000 nodes renewing every 10 s cost no sync
/// each. A node found stale is synced on every renewal and every
/// `node_monitor_period`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    let idx = ctx.clone();
    let health = Arc::new(Health::default());
    let beats = health.clone();
    mgr.controller::<Node, _>(
        "node-lifecycle",
        NodeCtx {
            ctx: ctx.clone(),
            health,
        },
    )
    .watches::<Lease, _>(move |lease| {
        if lease.metadata.namespace.as_deref() != Some("kube-node-lease") {
            return None;
        }
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let (_, stale) = beats.saw(name, renew_of(lease), None);
        // Unseen nodes and stale ones need a look; healthy ones wait for
        // their deadline.
        (stale != Some(false)).then(|| ObjectRef::<Node>::new(name))
    })
    .watches::<Pod, _>(move |pod| {
        // Keep the pod index fed; pod changes need no node sync.
        idx.pod_index.observe(&idx.pods, pod);
        None::<ObjectRef<Node>>
    })
    .max_concurrent_reconciles(ctx.opts.concurrency)
    .register(reconcile);
}

fn renew_of(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0.to_string())
}

fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

async fn reconcile(node: Arc<Node>, nctx: Arc<NodeCtx>) -> Result<Action, ReconcileError> {
    let ctx: &Ctx = &nctx.ctx;
    let name = node.metadata.name.clone().unwrap_or_default();
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let grace = ctx.opts.node_monitor_grace_period;
    let renew = ctx
        .leases
        .get(&ObjectRef::new(&name).within("kube-node-lease"))
        .and_then(|l| renew_of(&l));
    let hb = ready_condition(&node)
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .map(|t| t.0.to_string());
    let (age, _) = nctx.health.saw(&name, renew, hb);
    let mut conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let stale = age > grace;
    nctx.health.set_stale(&name, stale);
    if stale && ready_condition(&node).is_none_or(|c| c.status != "Unknown") {
        let now = util::now_time();
        if !conditions.iter().any(|c| c.type_ == "Ready") {
            conditions.push(NodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                ..NodeCondition::default()
            });
        }
        for c in conditions.iter_mut() {
            if matches!(
                c.type_.as_str(),
                "Ready" | "MemoryPressure" | "DiskPressure" | "PIDPressure"
            ) && c.status != "Unknown"
            {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(now.clone());
            }
        }
        let api: Api<Node> = Api::all(ctx.client(accounts::NODE).clone());
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conditions}})),
        )
        .await
        .map_err(ReconcileError::new)?;
        tracing::info!(node = %name, "node stopped posting status; marked NotReady (Unknown)");
        let _ = ctx
            .events
            .normal(
                &*node,
                "NodeNotReady",
                "NodeNotReady",
                &format!("Node {name} status is now: NodeNotReady"),
            )
            .await;
        mark_pods_not_ready(ctx, &name).await;
    }
    let mut requeue = Some(if stale {
        ctx.opts.node_monitor_period
    } else {
        grace.saturating_sub(age) + Duration::from_millis(50)
    });

    // Taints from the Ready condition.
    let ready = conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone());
    let want: Vec<(&str, &str)> = match ready.as_deref() {
        Some("False") => vec![(NOT_READY, "NoExecute"), (NOT_READY, "NoSchedule")],
        Some("Unknown") => vec![(UNREACHABLE, "NoExecute"), (UNREACHABLE, "NoSchedule")],
        _ => vec![],
    };
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let ours = |t: &Taint| t.key == NOT_READY || t.key == UNREACHABLE;
    let mut next: Vec<Taint> = taints
        .iter()
        .filter(|t| !ours(t) || want.contains(&(t.key.as_str(), t.effect.as_str())))
        .cloned()
        .collect();
    for (k, e) in &want {
        if !next.iter().any(|t| t.key == *k && t.effect == *e) {
            next.push(Taint {
                key: (*k).into(),
                effect: (*e).into(),
                time_added: (*e == "NoExecute").then(util::now_time),
                value: None,
            });
        }
    }
    if next != taints {
        let api: Api<Node> = Api::all(ctx.client(accounts::NODE).clone());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": next}})),
        )
        .await
        .map_err(ReconcileError::new)?;
    }

    // NoExecute evictions.
    let no_exec: Vec<&Taint> = next.iter().filter(|t| t.effect == "NoExecute").collect();
    if !no_exec.is_empty() {
        let now = jiff::Timestamp::now();
        for p in ctx.pod_index.on_node(&ctx.pods, &name) {
            if p.metadata.deletion_timestamp.is_some()
                || matches!(util::phase(&p), "Succeeded" | "Failed")
            {
                continue;
            }
            let tolerations = p
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.clone())
                .unwrap_or_default();
            let mut evict_at: Option<jiff::Timestamp> = None;
            let mut now_evict = false;
            for taint in &no_exec {
                let matching: Vec<_> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
                if matching.is_empty() {
                    now_evict = true;
                    break;
                }
                let secs = matching.iter().filter_map(|t| t.toleration_seconds).min();
                if let Some(secs) = secs {
                    let added = taint.time_added.as_ref().map_or(now, |t| t.0);
                    let at = added
                        .checked_add(jiff::SignedDuration::from_secs(secs.max(0)))
                        .unwrap_or(added);
                    evict_at = Some(evict_at.map_or(at, |e| e.min(at)));
                }
            }
            let due = now_evict || evict_at.is_some_and(|at| at <= now);
            if due {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                let pn = p.metadata.name.clone().unwrap_or_default();
                let api: Api<Pod> = Api::namespaced(ctx.client(accounts::NODE).clone(), &ns);
                match api.delete(&pn, &DeleteParams::default()).await {
                    Ok(_) => {
                        tracing::info!(node = %name, pod = %format!("{ns}/{pn}"), "evicted by NoExecute taint")
                    }
                    Err(e) if crate::is_not_found(&e) => {}
                    Err(e) => return Err(ReconcileError::new(e)),
                }
            } else if let Some(at) = evict_at {
                let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default()
                    + Duration::from_millis(20);
                requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
            }
        }
    }
    Ok(match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

/// Set Ready=False on the pods of a node that stopped reporting (kube's
/// `MarkPodsNotReady`), so endpoints drop them at once.
async fn mark_pods_not_ready(ctx: &Ctx, node: &str) {
    for p in ctx.pod_index.on_node(&ctx.pods, node) {
        if !util::is_ready(&p) {
            continue;
        }
        let mut conds = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        for c in conds.iter_mut() {
            if c.type_ == "Ready" {
                c.status = "False".into();
                c.last_transition_time = Some(util::now_time());
            }
        }
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(ctx.client(accounts::NODE).clone(), &ns);
        let _ = api
            .patch_status(
                p.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": conds}})),
            )
            .await;
    }
}
