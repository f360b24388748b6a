//! The disruption controller: keeps each PodDisruptionBudget's status
//! (`expectedPods`, `desiredHealthy`, `currentHealthy`,
//! `disruptionsAllowed`, `disruptedPods`, `observedGeneration` and the
//! `DisruptionAllowed` condition) current, which is what the API server's
//! `pods/eviction` reads, as kube-controller-manager's `disruption`
//! controller does.
//!
//! - An integer `minAvailable` counts the selected pods; a percentage, or
//!   any `maxUnavailable`, counts the scale of the pods' controllers
//!   (ReplicationController, ReplicaSet — its Deployment's when it has one —,
//!   StatefulSet, else whatever the owner's `/scale` says). A selected pod
//!   with no controller is reported with an `UnmanagedPods` event and
//!   left out; a controller that cannot be found fails the sync.
//! - Healthy pods are ready, not terminating, and not recorded in
//!   `disruptedPods` by an eviction in the last two minutes (entries for
//!   pods that are gone, terminating or older than that are dropped, and
//!   the budget is looked at again when the next entry expires).
//! - `disruptionsAllowed = currentHealthy - desiredHealthy`, never below
//!   0, and 0 while no pods are expected.
//! - A failed sync sets `disruptionsAllowed` to 0 with the condition
//!   `SyncFailed` (the "fail safe" of kube's design), so evictions stop
//!   rather than go through on a stale budget.
//!
//! Statuses are written with the budget's resourceVersion: an eviction
//! that decremented the budget meanwhile makes the write conflict and the
//! budget is synced again, so the eviction's record is never overwritten.

use crate::clients::accounts;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{GroupVersionKind, Selector};
use kube::runtime::reflector::ObjectRef;
use kubeforge_apimachinery::disruption;
use kubeforge_runtime::{Action, Cache, Manager, ReconcileError};
use serde_json::{Value, json};

use super::Ctx;
use super::util::{self, controller_of};

/// How long an eviction's entry in `disruptedPods` keeps its pod from
/// counting as healthy (kube's `DeletionTimeout`).
const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

/// Register the controller with `mgr`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    let budgets = ctx.budgets.clone();
    let mapper_ctx = ctx.clone();
    mgr.controller::<PodDisruptionBudget, _>("disruption", super::Shared(ctx.clone()))
        .watches::<Pod, _>(move |pod| {
            // Keep the pod index current even when no other controller
            // that feeds it runs.
            mapper_ctx.pod_index.observe(&mapper_ctx.pods, pod);
            budgets_for(&budgets, pod)
        })
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile);
}

/// A budget's selector as the controller reads it
/// (`LabelSelectorAsSelector`): absent selects nothing, empty everything.
fn budget_selector(sel: Option<&LabelSelector>) -> Result<Option<Selector>, String> {
    match sel {
        None => Ok(None),
        Some(s) => Selector::try_from(s.clone())
            .map(Some)
            .map_err(|e| e.to_string()),
    }
}

fn selects(sel: &Option<Selector>, pod: &Pod) -> bool {
    util::matches(sel, pod.metadata.labels.as_ref())
}

/// The budgets of the pod's namespace that select it.
fn budgets_for(
    budgets: &Cache<PodDisruptionBudget>,
    pod: &Pod,
) -> Vec<ObjectRef<PodDisruptionBudget>> {
    let ns = pod.metadata.namespace.as_deref();
    budgets
        .state()
        .iter()
        .filter(|b| b.metadata.namespace.as_deref() == ns)
        .filter(|b| {
            budget_selector(b.spec.as_ref().and_then(|s| s.selector.as_ref()))
                .is_ok_and(|sel| selects(&sel, pod))
        })
        .map(|b| ObjectRef::from_obj(&**b))
        .collect()
}

/// Why a sync could not compute the status.
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error("{0}")]
    Compute(String),
    #[error(transparent)]
    Api(#[from] kube::Error),
}

async fn reconcile(
    pdb: Arc<PodDisruptionBudget>,
    ctx: Arc<super::Shared>,
) -> Result<Action, ReconcileError> {
    let ctx: &Ctx = &ctx;
    match try_sync(ctx, &pdb).await {
        Ok(next) => Ok(next.map_or_else(Action::await_change, Action::requeue)),
        Err(SyncError::Api(e)) if crate::is_conflict(&e) => Err(ReconcileError::new(e)),
        Err(SyncError::Api(e)) if crate::is_not_found(&e) => Ok(Action::await_change()),
        Err(e) => {
            tracing::warn!(budget = %util::key_of(&pdb.metadata), error = %e, "PodDisruptionBudget sync failed");
            fail_safe(ctx, &pdb, &e.to_string())
                .await
                .map_err(ReconcileError::new)?;
            Err(ReconcileError::new(e))
        }
    }
}

/// Compute and write the status; returns when to look again (the first
/// `disruptedPods` entry to expire).
async fn try_sync(ctx: &Ctx, pdb: &PodDisruptionBudget) -> Result<Option<Duration>, SyncError> {
    let ns = pdb.metadata.namespace.as_deref().unwrap_or_default();
    let spec = pdb.spec.clone().unwrap_or_default();
    let sel = budget_selector(spec.selector.as_ref()).map_err(SyncError::Compute)?;
    let pods: Vec<Arc<Pod>> = ctx
        .pod_index
        .in_namespace(&ctx.pods, ns)
        .into_iter()
        .filter(|p| selects(&sel, p))
        .collect();
    let (expected, desired, unmanaged) = expected_count(ctx, &spec, &pods, ns).await?;
    let now = jiff::Timestamp::now();
    let (disrupted, recheck) = disrupted_pods(pdb, &pods, now);
    let healthy = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            !disrupted.contains_key(name)
        })
        .filter(|p| util::is_ready(p))
        .count();
    let healthy = i32::try_from(healthy).unwrap_or(i32::MAX);
    let mut allowed = healthy - desired;
    if expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let old = serde_json::to_value(pdb).map_err(|e| SyncError::Compute(e.to_string()))?;
    let st = old.get("status").cloned().unwrap_or_else(|| json!({}));
    let int = |f: &str| st.get(f).and_then(Value::as_i64).unwrap_or(0);
    let old_disrupted: BTreeMap<String, String> = pdb
        .status
        .as_ref()
        .and_then(|s| s.disrupted_pods.as_ref())
        .map(|m| m.iter().map(|(k, t)| (k.clone(), time_string(t))).collect())
        .unwrap_or_default();
    let generation = pdb.metadata.generation.unwrap_or(0);
    if int("currentHealthy") == i64::from(healthy)
        && int("desiredHealthy") == i64::from(desired)
        && int("expectedPods") == i64::from(expected)
        && int("disruptionsAllowed") == i64::from(allowed)
        && old_disrupted == disrupted
        && int("observedGeneration") == generation
        && disruption::conditions_up_to_date(&old)
    {
        return Ok(recheck.map(|t| to_duration(t, now)));
    }
    if pods.is_empty() {
        let _ = ctx
            .events
            .normal(pdb, "NoPods", "Sync", "No matching pods found")
            .await;
    }
    if !unmanaged.is_empty() {
        let selector = serde_json::to_string(&spec.selector).unwrap_or_default();
        let _ = ctx
            .events
            .warning(
                pdb,
                "UnmanagedPods",
                "Sync",
                &format!(
                    "Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value."
                ),
            )
            .await;
    }
    let mut status = json!({
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
        "observedGeneration": generation,
        "conditions": st.get("conditions").cloned().unwrap_or_else(|| json!([])),
    });
    if !disrupted.is_empty() {
        status["disruptedPods"] = json!(disrupted);
    }
    disruption::update_disruption_allowed(&mut status, &now_string());
    write_status(ctx, old, status).await?;
    Ok(recheck.map(|t| to_duration(t, now)))
}

/// A time as the API writes it (the one serializer for old and new
/// entries, so that comparing them compares instants).
fn time_string(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> String {
    match serde_json::to_value(t) {
        Ok(Value::String(s)) => s,
        _ => t.0.to_string(),
    }
}

fn now_string() -> String {
    time_string(&util::now_time())
}

fn to_duration(at: jiff::Timestamp, now: jiff::Timestamp) -> Duration {
    let ms = (at.as_millisecond() - now.as_millisecond()).max(0);
    Duration::from_millis(u64::try_from(ms).unwrap_or(0) + 10)
}

/// The pods expected and how many of them must be healthy
/// (`getExpectedPodCount`), with the selected pods that have no
/// controller.
async fn expected_count(
    ctx: &Ctx,
    spec: &k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec,
    pods: &[Arc<Pod>],
    ns: &str,
) -> Result<(i32, i32, Vec<String>), SyncError> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    if let Some(max) = &spec.max_unavailable {
        let (expected, unmanaged) = expected_scale(ctx, pods, ns).await?;
        let max = util::scaled(Some(max), expected, true).map_err(SyncError::Compute)?;
        return Ok((expected, (expected - max).max(0), unmanaged));
    }
    match &spec.min_available {
        Some(IntOrString::Int(n)) => Ok((
            i32::try_from(pods.len()).unwrap_or(i32::MAX),
            *n,
            Vec::new(),
        )),
        Some(min) => {
            let (expected, unmanaged) = expected_scale(ctx, pods, ns).await?;
            let min = util::scaled(Some(min), expected, true).map_err(SyncError::Compute)?;
            Ok((expected, min, unmanaged))
        }
        None => Ok((0, 0, Vec::new())),
    }
}

/// The sum of the scales of the pods' controllers (`getExpectedScale`).
async fn expected_scale(
    ctx: &Ctx,
    pods: &[Arc<Pod>],
    ns: &str,
) -> Result<(i32, Vec<String>), SyncError> {
    let mut scales: HashMap<String, i32> = HashMap::new();
    let mut unmanaged = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(owner) = controller_of(&pod.metadata) else {
            unmanaged.push(name);
            continue;
        };
        if seen.contains(&owner.uid) {
            continue;
        }
        seen.push(owner.uid.clone());
        match controller_scale(ctx, owner, ns).await? {
            Some((uid, scale)) => {
                scales.insert(uid, scale);
            }
            None => {
                return Err(SyncError::Compute(format!(
                    "found no controllers for pod {name:?}"
                )));
            }
        }
    }
    Ok((scales.values().sum(), unmanaged))
}

/// The UID and desired replicas of the workload that `owner` names,
/// if it exists with that UID (kube's finders, in their order).
async fn controller_scale(
    ctx: &Ctx,
    owner: &OwnerReference,
    ns: &str,
) -> Result<Option<(String, i32)>, SyncError> {
    let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
    let same = |uid: Option<&String>| uid == Some(&owner.uid);
    match (group, owner.kind.as_str()) {
        ("", "ReplicationController") => {
            let rc = ctx
                .replicationcontrollers
                .get(&ObjectRef::<ReplicationController>::new(&owner.name).within(ns));
            Ok(rc.filter(|rc| same(rc.metadata.uid.as_ref())).map(|rc| {
                (
                    owner.uid.clone(),
                    rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                )
            }))
        }
        ("apps", "ReplicaSet") => {
            let Some(rs) = ctx
                .replicasets
                .get(&ObjectRef::<ReplicaSet>::new(&owner.name).within(ns))
                .filter(|rs| same(rs.metadata.uid.as_ref()))
            else {
                return Ok(None);
            };
            match controller_of(&rs.metadata) {
                // A Deployment's ReplicaSet counts as the Deployment.
                Some(d) if d.kind == "Deployment" => {
                    let dep = ctx
                        .deployments
                        .get(&ObjectRef::<Deployment>::new(&d.name).within(ns))
                        .filter(|dep| dep.metadata.uid.as_deref() == Some(d.uid.as_str()));
                    Ok(dep.map(|dep| {
                        (
                            d.uid.clone(),
                            dep.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                        )
                    }))
                }
                _ => Ok(Some((
                    owner.uid.clone(),
                    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                ))),
            }
        }
        ("apps", "StatefulSet") => {
            let sts = ctx
                .statefulsets
                .get(&ObjectRef::<StatefulSet>::new(&owner.name).within(ns));
            Ok(sts.filter(|s| same(s.metadata.uid.as_ref())).map(|s| {
                (
                    owner.uid.clone(),
                    s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                )
            }))
        }
        _ => generic_scale(ctx, owner, ns).await,
    }
}

/// Any other controller: its `/scale` subresource, found through
/// discovery (a kind without one is no controller kube can count).
async fn generic_scale(
    ctx: &Ctx,
    owner: &OwnerReference,
    ns: &str,
) -> Result<Option<(String, i32)>, SyncError> {
    let (group, version) = match owner.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", owner.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &owner.kind);
    let Ok((ar, _)) = kube::discovery::pinned_kind(ctx.client(accounts::DISRUPTION), &gvk).await
    else {
        return Ok(None);
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client(accounts::DISRUPTION).clone(), ns, &ar);
    match api.get_scale(&owner.name).await {
        Ok(scale) if scale.metadata.uid.as_deref() == Some(owner.uid.as_str()) => Ok(Some((
            owner.uid.clone(),
            scale.spec.and_then(|s| s.replicas).unwrap_or(0),
        ))),
        Ok(_) => Ok(None),
        Err(e) if crate::is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The `disruptedPods` entries still in force (`buildDisruptedPodMap`)
/// and when the first of them expires.
fn disrupted_pods(
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    now: jiff::Timestamp,
) -> (BTreeMap<String, String>, Option<jiff::Timestamp>) {
    let mut out = BTreeMap::new();
    let mut recheck: Option<jiff::Timestamp> = None;
    let Some(recorded) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
        return (out, recheck);
    };
    let timeout = jiff::SignedDuration::try_from(DELETION_TIMEOUT).unwrap_or_default();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(at) = recorded.get(&name) else {
            continue;
        };
        let Ok(expires) = at.0.checked_add(timeout) else {
            continue;
        };
        if expires < now {
            tracing::info!(pod = %name, "pod was expected to be deleted but it wasn't, updating PDB");
        } else {
            recheck = Some(recheck.map_or(expires, |r| r.min(expires)));
            out.insert(name, time_string(at));
        }
    }
    (out, recheck)
}

/// Replace the status, conditional on the resourceVersion `old` was read at.
async fn write_status(ctx: &Ctx, mut old: Value, status: Value) -> Result<(), SyncError> {
    let ns = old
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let name = old
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    old["status"] = status;
    let api: Api<PodDisruptionBudget> =
        Api::namespaced(ctx.client(accounts::DISRUPTION).clone(), &ns);
    let body: PodDisruptionBudget =
        serde_json::from_value(old).map_err(|e| SyncError::Compute(e.to_string()))?;
    api.replace_status(&name, &PostParams::default(), &body)
        .await
        .map(|_| ())
        .map_err(SyncError::from)
}

/// After a failed sync: no disruptions, condition SyncFailed with the
/// reason (kube's `failSafe`).
async fn fail_safe(ctx: &Ctx, pdb: &PodDisruptionBudget, why: &str) -> Result<(), kube::Error> {
    let Ok(old) = serde_json::to_value(pdb) else {
        return Ok(());
    };
    let mut status = old.get("status").cloned().unwrap_or_else(|| json!({}));
    disruption::sync_failed(&mut status, why, &now_string());
    match write_status(ctx, old, status).await {
        Ok(()) => Ok(()),
        Err(SyncError::Api(e)) => Err(e),
        Err(SyncError::Compute(_)) => Ok(()),
    }
}
