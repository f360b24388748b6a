//! The DaemonSet controller: one pod per eligible node. A node is eligible
//! when the template's `nodeSelector` and required node affinity match it
//! and its NoSchedule/NoExecute taints are tolerated — by the template's
//! tolerations plus the ones kube adds to every daemon pod (not-ready and
//! unreachable NoExecute; disk-, memory-, pid-pressure and unschedulable
//! NoSchedule; network-unavailable with hostNetwork). Pods are created with
//! a required node affinity on `metadata.name` for their node (not
//! `nodeName`), so the scheduler binds them, as kube does.
//!
//! Pods carry `controller-revision-hash` (the template hash); with the
//! RollingUpdate strategy, pods of an older template are deleted at most
//! `maxUnavailable` at a time while others are unavailable, then replaced.
//! Status: desired/current/updated number scheduled, misscheduled, ready,
//! available, unavailable, observedGeneration.

use crate::clients::accounts;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    Taint, Toleration,
};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::{Action, Manager, ReconcileError};
use serde_json::json;

use super::Ctx;
use super::util::{self, controller_of, is_active, key_of};

/// The label naming the template revision of a daemon or stateful pod.
pub const REVISION_HASH: &str = "controller-revision-hash";

/// Register the controller with `mgr`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    let idx = ctx.clone();
    let all = ctx.clone();
    mgr.controller::<DaemonSet, _>("daemonset", super::Shared(ctx.clone()))
        .watches::<Pod, _>(move |pod| {
            idx.pod_index.observe(&idx.pods, pod);
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            controller_of(&pod.metadata)
                .filter(|r| r.kind == "DaemonSet" && r.api_version == "apps/v1")
                .map(|r| ObjectRef::<DaemonSet>::new(&r.name).within(ns))
        })
        .watches::<Node, _>(move |_node| {
            let refs: Vec<ObjectRef<DaemonSet>> = all
                .daemonsets
                .state()
                .iter()
                .map(|d| ObjectRef::from_obj(&**d))
                .collect();
            refs
        })
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile);
}

/// Whether toleration `t` tolerates taint `taint` (kube's
/// `ToleratesTaint`).
pub(crate) fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = t.effect.as_deref()
        && !e.is_empty()
        && e != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        _ => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
    }
}

/// The tolerations kube adds to daemon pods.
fn daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let t = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Toleration::default()
    };
    let mut out = vec![
        t("node.kubernetes.io/not-ready", "NoExecute"),
        t("node.kubernetes.io/unreachable", "NoExecute"),
        t("node.kubernetes.io/disk-pressure", "NoSchedule"),
        t("node.kubernetes.io/memory-pressure", "NoSchedule"),
        t("node.kubernetes.io/pid-pressure", "NoSchedule"),
        t("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        out.push(t("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    out
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.clone().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(x)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|x| x.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if r.operator == "Gt" { v > x } else { v < x }
        }
        _ => false,
    }
}

/// Whether `node` satisfies a NodeSelector (terms ORed, requirements ANDed).
pub(crate) fn node_selector_matches(sel: &NodeSelector, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let name = node.metadata.name.clone().unwrap_or_default();
    sel.node_selector_terms
        .iter()
        .any(|term: &NodeSelectorTerm| {
            let exprs = term.match_expressions.clone().unwrap_or_default();
            let fields = term.match_fields.clone().unwrap_or_default();
            if exprs.is_empty() && fields.is_empty() {
                return false;
            }
            exprs
                .iter()
                .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
                && fields.iter().all(|r| {
                    let v = (r.key == "metadata.name").then_some(name.as_str());
                    requirement_matches(r, v)
                })
        })
}

/// Whether a daemon pod of `template_spec` should run on `node`.
fn should_run(spec: &k8s_openapi::api::core::v1::PodSpec, node: &Node) -> bool {
    if node.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if let Some(ns) = &spec.node_selector
        && !ns.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    if let Some(sel) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        && !node_selector_matches(sel, node)
    {
        return false;
    }
    let mut tolerations = spec.tolerations.clone().unwrap_or_default();
    tolerations.extend(daemon_tolerations(spec.host_network.unwrap_or(false)));
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|taint| tolerations.iter().any(|t| tolerates(t, taint)))
}

/// The node a daemon pod is for: its nodeName, else its required
/// `metadata.name` node affinity.
fn pod_node(p: &Pod) -> Option<String> {
    let spec = p.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    let sel = spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?;
    sel.node_selector_terms.iter().find_map(|t| {
        t.match_fields.as_ref()?.iter().find_map(|f| {
            (f.key == "metadata.name" && f.operator == "In")
                .then(|| f.values.as_ref().and_then(|v| v.first().cloned()))
                .flatten()
        })
    })
}

async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<super::Shared>) -> Result<Action, ReconcileError> {
    let ctx: &Ctx = &ctx;
    let key = format!("ds/{}", key_of(&ds.metadata));
    if ds.metadata.deletion_timestamp.is_some() {
        ctx.expectations.forget(&key);
        return Ok(Action::await_change());
    }
    let ns = ds.metadata.namespace.clone().unwrap_or_default();
    let name = ds.metadata.name.clone().unwrap_or_default();
    let spec = ds.spec.clone().unwrap_or_default();
    let template = spec.template.clone();
    let pod_spec = template.spec.clone().unwrap_or_default();
    let hash = util::template_hash(
        &template,
        ds.status
            .as_ref()
            .and_then(|s| s.collision_count)
            .filter(|c| *c > 0),
    );
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    // Expectations first, against the index the pods are then read from.
    let satisfied = ctx
        .expectations
        .satisfied(&key, |id| ctx.pod_index.lookup(&ctx.pods, id));
    let pods = ctx.pod_index.owned_by(&ctx.pods, &uid);
    // A pod still terminating holds its node (kube's getNodesToDaemonPods
    // leaves out only deleted pods already in a terminal phase): its
    // replacement waits until it is gone, never runs beside it.
    let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
    for p in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() || !util::is_terminal(p))
    {
        if let Some(n) = pod_node(p) {
            by_node.entry(n).or_default().push(p.clone());
        }
    }
    let nodes = ctx.nodes.state();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let now = jiff::Timestamp::now();

    let mut create_on: Vec<String> = Vec::new();
    let mut delete: Vec<Arc<Pod>> = Vec::new();
    let (mut desired, mut current, mut misscheduled, mut ready, mut available, mut updated) =
        (0, 0, 0, 0, 0, 0);
    let mut old_pods: Vec<Arc<Pod>> = Vec::new();
    let mut unavailable_now = 0;
    for node in &nodes {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let run = should_run(&pod_spec, node);
        let here = by_node.remove(&node_name).unwrap_or_default();
        if run {
            desired += 1;
            // Finished pods are deleted and replaced once gone; so are
            // terminating ones (kube's podsShouldBeOnNode).
            let exists = !here.is_empty();
            let (finished, live): (Vec<_>, Vec<_>) = here
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .partition(|p| util::is_terminal(p));
            delete.extend(finished);
            match live.len() {
                0 if !exists => create_on.push(node_name),
                0 => {}
                _ => {
                    current += 1;
                    let mut live = live;
                    live.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
                    let keep = live.remove(0);
                    delete.extend(live);
                    if util::is_ready(&keep) {
                        ready += 1;
                    }
                    let avail = util::availability(&keep, min_ready, now).0;
                    if avail {
                        available += 1;
                    } else {
                        unavailable_now += 1;
                    }
                    let fresh = keep
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(REVISION_HASH))
                        == Some(&hash);
                    if fresh {
                        updated += 1;
                    } else {
                        old_pods.push(keep);
                    }
                }
            }
        } else if !here.is_empty() {
            // Nodes, as kube's numberMisscheduled counts.
            misscheduled += 1;
            delete.extend(here.into_iter().filter(|p| is_active(p)));
        }
    }
    // Pods on nodes that no longer exist.
    for (_, gone) in by_node {
        delete.extend(
            gone.into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none()),
        );
    }
    // Rolling update: replace old pods, at most maxUnavailable unavailable.
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    if strategy.type_.as_deref() != Some("OnDelete") {
        let max_unavailable = util::scaled(
            strategy
                .rolling_update
                .as_ref()
                .and_then(|r| r.max_unavailable.as_ref())
                .or(Some(
                    &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1),
                )),
            desired,
            true,
        )
        .unwrap_or(1)
        .max(1);
        // Old pods that are unavailable go first, freely.
        old_pods.sort_by_key(|p| util::availability(p, min_ready, now).0);
        let mut budget = max_unavailable - unavailable_now - create_on.len() as i32;
        for p in old_pods {
            if !util::availability(&p, min_ready, now).0 {
                delete.push(p);
            } else if budget > 0 {
                budget -= 1;
                delete.push(p);
            }
        }
    }

    let api: Api<Pod> = Api::namespaced(ctx.client(accounts::DAEMONSET).clone(), &ns);
    let mut failure = None;
    if satisfied {
        if let Some(owner) = util::owner_ref(&*ds) {
            let mut t = template.clone();
            t.metadata
                .get_or_insert_with(Default::default)
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(REVISION_HASH.into(), hash.clone());
            let pp = PostParams::default();
            let results = join_all(create_on.iter().take(ctx.opts.burst_replicas.max(1)).map(
                |node| {
                    let mut pod = util::pod_from_template(&t, owner.clone(), None, &name);
                    pin_to_node(&mut pod, node);
                    let api = api.clone();
                    let pp = &pp;
                    async move { api.create(pp, &pod).await }
                },
            ))
            .await;
            for r in results {
                match r {
                    Ok(p) => ctx.expectations.expect_add(&key, key_of(&p.metadata)),
                    // As kube's daemon controller: every create in a
                    // namespace being deleted fails; nothing to retry.
                    Err(e) if crate::is_namespace_terminating(&e) => {}
                    Err(e) => failure = failure.or(Some(e)),
                }
            }
        }
        for p in &delete {
            let pn = p.metadata.name.clone().unwrap_or_default();
            match api.delete(&pn, &DeleteParams::default()).await {
                Ok(_) => ctx.expectations.expect_del(&key, format!("{ns}/{pn}")),
                Err(e) if crate::is_not_found(&e) => {}
                Err(e) => failure = failure.or(Some(e)),
            }
        }
    }
    let status = json!({
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "numberAvailable": available,
        "numberUnavailable": (desired - available).max(0),
        "updatedNumberScheduled": updated,
        "observedGeneration": ds.metadata.generation,
    });
    let old = ds.status.clone().unwrap_or_default();
    let same = old.desired_number_scheduled == desired
        && old.current_number_scheduled == current
        && old.number_misscheduled == misscheduled
        && old.number_ready == ready
        && old.number_available.unwrap_or(0) == available
        && old.number_unavailable.unwrap_or(0) == (desired - available).max(0)
        && old.updated_number_scheduled.unwrap_or(0) == updated
        && old.observed_generation == ds.metadata.generation;
    if !same {
        match util::patch_status::<DaemonSet>(
            ctx.client(accounts::DAEMONSET),
            Some(&ns),
            &name,
            status,
        )
        .await
        {
            Ok(()) => {}
            Err(e) if crate::is_not_found(&e) => {}
            Err(e) => return Err(ReconcileError::new(e)),
        }
    }
    if let Some(e) = failure {
        let _ = ctx
            .events
            .warning(&*ds, "FailedCreate", "Create", &e.to_string())
            .await;
        return Err(ReconcileError::new(e));
    }
    Ok(if min_ready > 0 && available < current {
        Action::requeue(Duration::from_secs(u64::try_from(min_ready).unwrap_or(1)))
    } else {
        Action::await_change()
    })
}

/// Replace the pod's required node affinity by one term selecting `node`
/// by name (kube's `ReplaceDaemonSetPodNodeNameNodeAffinity`), and add
/// the daemon tolerations.
fn pin_to_node(pod: &mut Pod, node: &str) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.to_string()]),
        }]),
        match_expressions: None,
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let na = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    na.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![term],
    });
    let mut tolerations = spec.tolerations.clone().unwrap_or_default();
    for t in daemon_tolerations(spec.host_network.unwrap_or(false)) {
        if !tolerations
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect)
        {
            tolerations.push(t);
        }
    }
    spec.tolerations = Some(tolerations);
}
