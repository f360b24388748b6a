//! The ReplicaSet controller: creates and deletes pods so that as many
//! active pods as `spec.replicas` match the selector, adopting orphans and
//! releasing pods that stopped matching, and writes `status` (replicas,
//! fullyLabeledReplicas, readyReplicas, availableReplicas with
//! `minReadySeconds`, observedGeneration, the ReplicaFailure condition).
//!
//! As kube's: expectations (pods it created or deleted that the cache has
//! not shown yet) stop it from counting again under watch lag; creations go
//! in slow-start batches (1, 2, 4, …) at most `burst_replicas` per sync, and
//! stop at the first error; deletions prefer unscheduled < scheduled,
//! pending < running, not ready < ready, ready for less time, more
//! restarts, newer. A pod it cannot create (a rejected template) sets
//! ReplicaFailure=True (reason FailedCreate), records a Warning event and
//! is retried with the runtime's per-object backoff, never in a hot loop.
//!
//! ReplicationControllers (core/v1) are run by the same code, as kube's
//! replication manager wraps its ReplicaSet controller: each is read as a
//! ReplicaSet whose `matchLabels` is the controller's label map, and its
//! pods, owner references, events and status name the
//! ReplicationController.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::Cache;
use kubeforge_runtime::{Action, Manager, ReconcileError};
use serde_json::{Value, json};

use super::Ctx;
use super::util::{self, controller_of, is_active, key_of, matches, selector};
use crate::gc_object::GcObject;

/// Which kind a sync serves: both are reconciled as ReplicaSets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// core/v1 ReplicationController.
    ReplicationController,
}

impl Flavor {
    fn kind(self) -> &'static str {
        match self {
            Flavor::ReplicaSet => "ReplicaSet",
            Flavor::ReplicationController => "ReplicationController",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Flavor::ReplicaSet => "apps/v1",
            Flavor::ReplicationController => "v1",
        }
    }

    /// The ServiceAccount its controller writes as.
    fn account(self) -> &'static str {
        match self {
            Flavor::ReplicaSet => crate::clients::accounts::REPLICASET,
            Flavor::ReplicationController => crate::clients::accounts::REPLICATION,
        }
    }

    fn key_prefix(self) -> &'static str {
        match self {
            Flavor::ReplicaSet => "rs",
            Flavor::ReplicationController => "rc",
        }
    }

    /// The controller reference its pods carry.
    fn owner(self, rs: &ReplicaSet) -> Option<OwnerReference> {
        let mut o = util::owner_ref(rs)?;
        o.kind = self.kind().into();
        o.api_version = self.api_version().into();
        Some(o)
    }

    /// The latest cached version of the object `rs` was read from.
    fn latest(self, ctx: &Ctx, rs: &ReplicaSet) -> Option<Arc<ReplicaSet>> {
        match self {
            Flavor::ReplicaSet => ctx.replicasets.get(&ObjectRef::from_obj(rs)),
            Flavor::ReplicationController => {
                let name = rs.metadata.name.as_deref().unwrap_or_default();
                let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
                ctx.replicationcontrollers
                    .get(&ObjectRef::new(name).within(ns))
                    .and_then(|rc| as_replica_set(&rc))
                    .map(Arc::new)
            }
        }
    }

    /// Record a Warning event on the object (the ReplicationController
    /// itself for that flavor).
    async fn warn(self, ctx: &Ctx, rs: &ReplicaSet, reason: &str, action: &str, note: &str) {
        use kube::Resource;
        let mut target = rs.object_ref(&());
        target.kind = Some(self.kind().into());
        target.api_version = Some(self.api_version().into());
        let ev = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Warning,
            reason: reason.into(),
            note: (!note.is_empty()).then(|| note.to_string()),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = ctx.events.recorder().publish(&ev, &target).await {
            tracing::debug!(error = %e, reason, "event not recorded");
        }
    }
}

/// A ReplicationController read as the ReplicaSet the controller syncs:
/// the same metadata, spec and status, its label map as `matchLabels`.
pub(crate) fn as_replica_set(rc: &ReplicationController) -> Option<ReplicaSet> {
    let mut v = serde_json::to_value(rc).ok()?;
    v["apiVersion"] = json!("apps/v1");
    v["kind"] = json!("ReplicaSet");
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        let labels = spec.remove("selector").unwrap_or_else(|| json!({}));
        spec.insert("selector".into(), json!({"matchLabels": labels}));
    }
    serde_json::from_value(v).ok()
}

/// Register the ReplicationController flavor with `mgr`.
pub(crate) fn register_replication_controllers(mgr: &Manager, ctx: Arc<Ctx>) {
    let rc_store = ctx.replicationcontrollers.clone();
    let mapper_ctx = ctx.clone();
    mgr.controller::<ReplicationController, _>("replicationcontroller", super::Shared(ctx.clone()))
        .watches::<Pod, _>(move |pod| {
            mapper_ctx.pod_index.observe(&mapper_ctx.pods, pod);
            rc_pod_owners(&rc_store, pod)
        })
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile_rc);
}

/// The ReplicationControllers to reconcile when `pod` changes (as
/// [`pod_owners`]).
fn rc_pod_owners(
    store: &Cache<ReplicationController>,
    pod: &Pod,
) -> Vec<ObjectRef<ReplicationController>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    match controller_of(&pod.metadata) {
        Some(r) if r.kind == "ReplicationController" && r.api_version == "v1" => {
            vec![ObjectRef::new(&r.name).within(ns)]
        }
        Some(_) => Vec::new(),
        None => store
            .state()
            .iter()
            .filter(|rc| rc.metadata.namespace.as_deref() == Some(ns))
            .filter(|rc| {
                let set = rc.spec.as_ref().and_then(|s| s.selector.as_ref());
                // An empty selector is refused by validation; never adopt with one.
                set.is_some_and(|set| {
                    !set.is_empty()
                        && set.iter().all(|(k, v)| {
                            pod.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v)
                        })
                })
            })
            .map(|rc| ObjectRef::from_obj(&**rc))
            .collect(),
    }
}

async fn reconcile_rc(
    rc: Arc<ReplicationController>,
    ctx: Arc<super::Shared>,
) -> Result<Action, ReconcileError> {
    match as_replica_set(&rc) {
        Some(rs) => sync(&ctx, Flavor::ReplicationController, Arc::new(rs)).await,
        None => Ok(Action::await_change()),
    }
}

/// Register the controller with `mgr`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    let rs_store = ctx.replicasets.clone();
    let mapper_ctx = ctx.clone();
    mgr.controller::<ReplicaSet, _>("replicaset", super::Shared(ctx.clone()))
        .watches::<Pod, _>(move |pod| {
            mapper_ctx.pod_index.observe(&mapper_ctx.pods, pod);
            pod_owners(&rs_store, pod)
        })
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile);
}

/// The ReplicaSets to reconcile when `pod` changes: its controller if a
/// ReplicaSet, else (an orphan) every ReplicaSet of its namespace whose
/// selector matches it.
fn pod_owners(rs_store: &Cache<ReplicaSet>, pod: &Pod) -> Vec<ObjectRef<ReplicaSet>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    match controller_of(&pod.metadata) {
        Some(r) if r.kind == "ReplicaSet" && r.api_version == "apps/v1" => {
            vec![ObjectRef::new(&r.name).within(ns)]
        }
        Some(_) => Vec::new(),
        None => rs_store
            .state()
            .iter()
            .filter(|rs| rs.metadata.namespace.as_deref() == Some(ns))
            .filter(|rs| {
                selector(rs.spec.as_ref().map(|s| &s.selector))
                    .ok()
                    .flatten()
                    .is_some_and(|s| matches(&Some(s), pod.metadata.labels.as_ref()))
            })
            .map(|rs| ObjectRef::from_obj(&**rs))
            .collect(),
    }
}

/// Delete preference (kube's `ActivePods` ordering): the first pods are
/// deleted first.
pub(crate) fn deletion_order(a: &Pod, b: &Pod) -> Ordering {
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    let phase_rank = |p: &Pod| match util::phase(p) {
        "Pending" | "" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    };
    let cost = |p: &Pod| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost"))
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(0)
    };
    let restarts = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map_or(0, |cs| {
                cs.iter().map(|c| c.restart_count).max().unwrap_or(0)
            })
    };
    let ready_at = |p: &Pod| util::ready_since(p).flatten();
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    node(a)
        .cmp(&node(b))
        .then(phase_rank(a).cmp(&phase_rank(b)))
        .then(util::is_ready(a).cmp(&util::is_ready(b)))
        .then(cost(a).cmp(&cost(b)))
        // Ready for less time (a later transition) first.
        .then_with(|| match (ready_at(a), ready_at(b)) {
            (Some(x), Some(y)) if util::is_ready(a) && util::is_ready(b) => y.cmp(&x),
            _ => Ordering::Equal,
        })
        .then(restarts(b).cmp(&restarts(a)))
        // Newer first.
        .then(created(b).cmp(&created(a)))
}

async fn reconcile(rs: Arc<ReplicaSet>, ctx: Arc<super::Shared>) -> Result<Action, ReconcileError> {
    sync(&ctx, Flavor::ReplicaSet, rs).await
}

async fn sync(ctx: &Ctx, flavor: Flavor, rs: Arc<ReplicaSet>) -> Result<Action, ReconcileError> {
    let key = format!("{}/{}", flavor.key_prefix(), key_of(&rs.metadata));
    let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let share = f64::from(replicas.clamp(0, 1000)) / 1000.0;
    let waited = ctx
        .pacer
        .pace(&key, ctx.opts.replicaset_sync_interval.mul_f64(share))
        .await;
    // After a wait, read the latest object: it may have changed meanwhile.
    let rs = match waited {
        false => rs,
        true => match flavor.latest(ctx, &rs) {
            Some(latest) => latest,
            None => {
                ctx.pacer.forget(&key);
                return Ok(Action::await_change());
            }
        },
    };
    if rs.metadata.deletion_timestamp.is_some() {
        ctx.expectations.forget(&key);
        ctx.pacer.forget(&key);
        return Ok(Action::await_change());
    }
    // Expectations first, against the index the pods are then read from.
    let satisfied = ctx
        .expectations
        .satisfied(&key, |id| ctx.pod_index.lookup(&ctx.pods, id));
    let spec = rs.spec.clone().unwrap_or_default();
    let sel = match selector(Some(&spec.selector)) {
        Ok(s) => s,
        Err(e) => {
            flavor
                .warn(ctx, &rs, "InvalidSelector", "Sync", &e.to_string())
                .await;
            return Ok(Action::await_change());
        }
    };
    let pods = claim_pods(ctx, flavor, &rs, &sel)
        .await
        .map_err(ReconcileError::new)?;
    let active: Vec<Arc<Pod>> = pods.into_iter().filter(|p| is_active(p)).collect();

    let mut failure: Option<String> = None;
    if satisfied {
        let want = spec.replicas.unwrap_or(1).max(0) as usize;
        if let Err(e) = manage(ctx, flavor, &rs, &key, &active, want).await {
            failure = Some(e.to_string());
        }
    }
    // The event first, as kube's pod control records it at the failed
    // create: the status write may be refused for the same reason.
    if let Some(msg) = &failure {
        flavor.warn(ctx, &rs, "FailedCreate", "Create", msg).await;
    }
    let requeue = write_status(ctx, flavor, &rs, &active, failure.as_deref()).await?;
    if let Some(msg) = failure {
        return Err(ReconcileError::new(std::io::Error::other(msg)));
    }
    Ok(match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

/// The pods the ReplicaSet controls after adopting matching orphans and
/// releasing pods that no longer match (kube's `ClaimPods`): its own as
/// the pod index's slim copies, adopted ones as read from the cache.
pub(crate) async fn claim_pods(
    ctx: &Ctx,
    flavor: Flavor,
    rs: &ReplicaSet,
    sel: &Option<kube::core::Selector>,
) -> Result<Vec<Arc<Pod>>, kube::Error> {
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let ns = rs.metadata.namespace.clone().unwrap_or_default();
    let mut out = Vec::new();
    for p in ctx.pod_index.owned_by_slim(&ctx.pods, &uid) {
        if matches(sel, p.metadata.labels.as_ref()) {
            out.push(p);
        } else {
            util::release::<Pod>(ctx.client(flavor.account()), &p.metadata, &uid).await?;
        }
    }
    let Some(owner) = flavor.owner(rs) else {
        return Ok(out);
    };
    for p in ctx.pod_index.orphans(&ctx.pods, &ns) {
        if p.metadata.deletion_timestamp.is_none()
            && matches(sel, p.metadata.labels.as_ref())
            && util::adopt_pod(ctx.client(flavor.account()), &p, owner.clone()).await?
        {
            out.push(p);
        }
    }
    Ok(out)
}

/// Create or delete pods so that `want` are active.
async fn manage(
    ctx: &Ctx,
    flavor: Flavor,
    rs: &ReplicaSet,
    key: &str,
    active: &[Arc<Pod>],
    want: usize,
) -> Result<(), kube::Error> {
    let ns = rs.metadata.namespace.clone().unwrap_or_default();
    let name = rs.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client(flavor.account()).clone(), &ns);
    let burst = ctx.opts.burst_replicas.max(1);
    if active.len() < want {
        let mut left = (want - active.len()).min(burst);
        let Some(owner) = flavor.owner(rs) else {
            return Ok(());
        };
        let template = rs
            .spec
            .as_ref()
            .and_then(|s| s.template.clone())
            .unwrap_or_default();
        let pod = util::pod_from_template(&template, owner, None, &name);
        // One body for every create; of each answer only the metadata the
        // collector's narrow type keeps (name, namespace, uid …) is read.
        let body = serde_json::to_vec(&pod).map_err(kube::Error::SerdeError)?;
        let request = kube::core::Request::new(api.resource_url());
        let pp = PostParams::default();
        let mut batch = 1usize;
        while left > 0 {
            let n = batch.min(left);
            let results = join_all((0..n).map(|_| async {
                let req = request
                    .create(&pp, body.clone())
                    .map_err(kube::Error::BuildRequest)?;
                crate::send_read::<GcObject>(ctx.client(flavor.account()), req).await
            }))
            .await;
            let mut first_err = None;
            let mut terminating = false;
            for r in results {
                match r {
                    Ok(p) => ctx.expectations.expect_add(key, key_of(&p.metadata)),
                    // As kube's slowStartBatch: every create in a namespace
                    // being deleted fails, and that is no error to retry.
                    Err(e) if crate::is_namespace_terminating(&e) => terminating = true,
                    Err(e) => {
                        if first_err.is_none() {
                            first_err = Some(e);
                        }
                    }
                }
            }
            if let Some(e) = first_err {
                return Err(e);
            }
            if terminating {
                break;
            }
            left -= n;
            batch *= 2;
        }
    } else if active.len() > want {
        let mut victims: Vec<&Arc<Pod>> = active.iter().collect();
        victims.sort_by(|a, b| deletion_order(a, b));
        victims.truncate((active.len() - want).min(burst));
        let results = join_all(victims.iter().map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let api = api.clone();
            async move { (api.delete(&name, &DeleteParams::default()).await, name) }
        }))
        .await;
        for (r, pod) in results {
            match r {
                Ok(_) => ctx.expectations.expect_del(key, format!("{ns}/{pod}")),
                Err(e) if crate::is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Compute and write the status; returns when to look again for pods
/// about to become available.
async fn write_status(
    ctx: &Ctx,
    flavor: Flavor,
    rs: &ReplicaSet,
    active: &[Arc<Pod>],
    failure: Option<&str>,
) -> Result<Option<Duration>, ReconcileError> {
    let spec = rs.spec.clone().unwrap_or_default();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let now = jiff::Timestamp::now();
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    let template_labels = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref())
        .unwrap_or(&NO_LABELS);
    let mut ready = 0;
    let mut available = 0;
    let mut fully_labeled = 0;
    let mut requeue: Option<Duration> = None;
    for p in active {
        let labels = p.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
        if template_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            fully_labeled += 1;
        }
        if util::is_ready(p) {
            ready += 1;
        }
        match util::availability(p, min_ready, now) {
            (true, _) => available += 1,
            (false, Some(wait)) => {
                let wait = wait + Duration::from_millis(10);
                requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
            }
            (false, None) => {}
        }
    }
    let old = rs.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone().unwrap_or_default();
    match failure {
        Some(msg) => {
            let c = ReplicaSetCondition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                reason: Some("FailedCreate".into()),
                message: Some(msg.to_string()),
                last_transition_time: Some(util::now_time()),
            };
            match conditions.iter_mut().find(|c| c.type_ == "ReplicaFailure") {
                Some(existing) if existing.message.as_deref() == Some(msg) => {}
                Some(existing) => *existing = c,
                None => conditions.push(c),
            }
        }
        None => conditions.retain(|c| c.type_ != "ReplicaFailure"),
    }
    let replicas = i32::try_from(active.len()).unwrap_or(i32::MAX);
    let unchanged = old.replicas == replicas
        && old.ready_replicas.unwrap_or(0) == ready
        && old.available_replicas.unwrap_or(0) == available
        && old.fully_labeled_replicas.unwrap_or(0) == fully_labeled
        && old.observed_generation == rs.metadata.generation
        && old.conditions.clone().unwrap_or_default() == conditions;
    if !unchanged {
        let status = json!({
            "replicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": available,
            "fullyLabeledReplicas": fully_labeled,
            "observedGeneration": rs.metadata.generation,
            "conditions": if conditions.is_empty() { Value::Null } else { serde_json::to_value(&conditions).unwrap_or(Value::Null) },
        });
        let ns = rs.metadata.namespace.as_deref();
        let name = rs.metadata.name.as_deref().unwrap_or_default();
        let written = match flavor {
            Flavor::ReplicaSet => {
                util::patch_status::<ReplicaSet>(ctx.client(flavor.account()), ns, name, status)
                    .await
            }
            Flavor::ReplicationController => {
                util::patch_status::<ReplicationController>(
                    ctx.client(flavor.account()),
                    ns,
                    name,
                    status,
                )
                .await
            }
        };
        match written {
            Ok(()) => {}
            Err(e) if crate::is_not_found(&e) => {}
            Err(e) => return Err(ReconcileError::new(e)),
        }
    }
    Ok(requeue)
}
