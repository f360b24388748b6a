//! The StatefulSet controller: pods with stable names `<name>-0`,
//! `<name>-1`, … (hostname = pod name, subdomain = `serviceName`, labels
//! `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index`,
//! `controller-revision-hash`).
//!
//! `OrderedReady` creates ordinal i only once 0..i are Running, Ready and
//! available (Ready for `minReadySeconds`) and removes the highest ordinal
//! first, one at a time, each only once Ready and available unless it is
//! the first unhealthy one; `Parallel` creates
//! and deletes all at once. Template revisions are ControllerRevisions
//! (`<name>-<hash>`, numbered); `RollingUpdate` (with `partition`) replaces
//! pods from the highest ordinal down, one at a time, each waiting for the
//! previous to be Ready; `status.currentRevision` becomes the
//! `updateRevision` when every pod is updated and ready, which is what
//! `kubectl rollout status sts` waits for. Old revisions beyond
//! `revisionHistoryLimit` are deleted. volumeClaimTemplates are not
//! provisioned (there is no storage in the embedded cluster).

use crate::clients::accounts;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::{Action, Manager, ReconcileError};
use serde_json::json;

use super::Ctx;
use super::daemonset::REVISION_HASH;
use super::util::{self, controller_of};

/// Register the controller with `mgr`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    let idx = ctx.clone();
    mgr.controller::<StatefulSet, _>("statefulset", super::Shared(ctx.clone()))
        .watches::<Pod, _>(move |pod| {
            idx.pod_index.observe(&idx.pods, pod);
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            controller_of(&pod.metadata)
                .filter(|r| r.kind == "StatefulSet" && r.api_version == "apps/v1")
                .map(|r| ObjectRef::<StatefulSet>::new(&r.name).within(ns))
        })
        .owns::<ControllerRevision>()
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile);
}

fn err(e: kube::Error) -> ReconcileError {
    ReconcileError::new(e)
}

fn running_ready(p: &Pod) -> bool {
    util::phase(p) == "Running" && util::is_ready(p) && p.metadata.deletion_timestamp.is_none()
}

fn revision_label(p: &Pod) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()?
        .get(REVISION_HASH)
        .map(String::as_str)
}

/// The template a ControllerRevision stores.
fn revision_template(cr: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = cr.data.as_ref()?.0.pointer("/spec/template")?.clone();
    if let Some(m) = t.as_object_mut() {
        m.remove("$patch");
    }
    serde_json::from_value(t).ok()
}

async fn reconcile(
    ss: Arc<StatefulSet>,
    ctx: Arc<super::Shared>,
) -> Result<Action, ReconcileError> {
    let ctx: &Ctx = &ctx;
    if ss.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = ss.metadata.namespace.clone().unwrap_or_default();
    let name = ss.metadata.name.clone().unwrap_or_default();
    let uid = ss.metadata.uid.clone().unwrap_or_default();
    let spec = ss.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let ordered = spec.pod_management_policy.as_deref() != Some("Parallel");
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let rolling = strategy.type_.as_deref() != Some("OnDelete");
    let partition = strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.partition)
        .unwrap_or(0)
        .max(0);
    let Some(owner) = util::owner_ref(&*ss) else {
        return Ok(Action::await_change());
    };

    // Revisions.
    let collision = ss
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .filter(|c| *c > 0);
    let hash = util::template_hash(&spec.template, collision);
    let update_rev = format!("{name}-{hash}");
    let mut revisions: Vec<Arc<ControllerRevision>> = ctx
        .revisions
        .state()
        .into_iter()
        .filter(|r| r.metadata.namespace.as_deref() == Some(&ns))
        .filter(|r| controller_of(&r.metadata).is_some_and(|o| o.uid == uid))
        .collect();
    revisions.sort_by_key(|r| r.revision);
    let max_rev = revisions.last().map_or(0, |r| r.revision);
    let crs: Api<ControllerRevision> =
        Api::namespaced(ctx.client(accounts::STATEFULSET).clone(), &ns);
    match revisions
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(&update_rev))
    {
        Some(r) if r.revision < max_rev => {
            // A rollback to an earlier template: it becomes the newest.
            crs.patch(
                &update_rev,
                &PatchParams::default(),
                &Patch::Merge(json!({"revision": max_rev + 1})),
            )
            .await
            .map_err(err)?;
        }
        Some(_) => {}
        None => {
            let mut t = serde_json::to_value(&spec.template).map_err(ReconcileError::new)?;
            t["$patch"] = json!("replace");
            let mut labels = spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.clone())
                .unwrap_or_default();
            labels.insert(REVISION_HASH.into(), hash.clone());
            let cr = ControllerRevision {
                metadata: ObjectMeta {
                    name: Some(update_rev.clone()),
                    namespace: Some(ns.clone()),
                    labels: Some(labels),
                    owner_references: Some(vec![owner.clone()]),
                    ..ObjectMeta::default()
                },
                data: Some(RawExtension(json!({"spec": {"template": t}}))),
                revision: max_rev + 1,
            };
            match crs.create(&PostParams::default(), &cr).await {
                Ok(_) => {}
                Err(e) if crate::status_code(&e) == Some(409) => {}
                Err(e) => return Err(err(e)),
            }
        }
    }
    let current_rev = ss
        .status
        .as_ref()
        .and_then(|s| s.current_revision.clone())
        .unwrap_or_else(|| update_rev.clone());
    let current_template = revisions
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(&current_rev))
        .and_then(|r| revision_template(r))
        .unwrap_or_else(|| spec.template.clone());

    // Pods by ordinal.
    let prefix = format!("{name}-");
    let mut pods: BTreeMap<i32, Arc<Pod>> = BTreeMap::new();
    for p in ctx.pod_index.owned_by(&ctx.pods, &uid) {
        if let Some(ord) = p
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|s| s.parse::<i32>().ok())
        {
            pods.insert(ord, p);
        }
    }
    let api: Api<Pod> = Api::namespaced(ctx.client(accounts::STATEFULSET).clone(), &ns);
    let now = jiff::Timestamp::now();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    // When a pod this sync waited for becomes available.
    let mut wait: Option<Duration> = None;
    let mut blocked = false;
    for ord in 0..replicas {
        match pods.get(&ord) {
            None => {
                let (t, rev) = if rolling && ord < partition && current_rev != update_rev {
                    (&current_template, current_rev.as_str())
                } else {
                    (&spec.template, update_rev.as_str())
                };
                create_pod(ctx, &api, &ss, t, rev, ord, owner.clone()).await?;
                if ordered {
                    blocked = true;
                    break;
                }
            }
            Some(p) if util::phase(p) == "Failed" => {
                delete_pod(&api, p).await?;
                if ordered {
                    blocked = true;
                    break;
                }
            }
            Some(p) if ordered && !running_ready(p) => {
                blocked = true;
                break;
            }
            // OrderedReady also waits for each pod to be available
            // (`minReadySeconds`) before its successor (kube's
            // isRunningAndAvailable).
            Some(p) if ordered => {
                let (available, at) = util::availability(p, min_ready, now);
                if !available {
                    wait = at;
                    blocked = true;
                    break;
                }
            }
            Some(_) => {}
        }
    }
    // Condemned pods (ordinal ≥ replicas), highest first. Ordered, each
    // must be Ready and available before it goes — except the first
    // unhealthy one, which would otherwise block the scale-down forever
    // (kube's processCondemned). Every ordinal below is healthy here.
    if !blocked {
        let first_unhealthy = pods
            .range(replicas..)
            .rev()
            .find(|(_, p)| !running_ready(p))
            .map(|(o, _)| *o);
        for (ord, p) in pods.range(replicas..).rev() {
            if p.metadata.deletion_timestamp.is_some() {
                if ordered {
                    blocked = true;
                    break;
                }
                continue;
            }
            if ordered && first_unhealthy != Some(*ord) {
                let (available, at) = util::availability(p, min_ready, now);
                if !running_ready(p) || !available {
                    wait = at;
                    blocked = true;
                    break;
                }
            }
            delete_pod(&api, p).await?;
            if ordered {
                blocked = true;
                break;
            }
        }
    }
    // Rolling update from the highest ordinal down to the partition.
    if !blocked && rolling {
        for ord in (partition..replicas).rev() {
            let Some(p) = pods.get(&ord) else { break };
            if revision_label(p) != Some(update_rev.as_str()) {
                if p.metadata.deletion_timestamp.is_none() {
                    delete_pod(&api, p).await?;
                }
                break;
            }
            if !running_ready(p) {
                break;
            }
        }
    }

    // Status.
    let live: Vec<&Arc<Pod>> = pods
        .values()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let count = live.len() as i32;
    let ready = live.iter().filter(|p| util::is_ready(p)).count() as i32;
    let available = live
        .iter()
        .filter(|p| util::availability(p, min_ready, now).0)
        .count() as i32;
    // availableReplicas grows without a pod event: look again then.
    for p in &live {
        if let (false, Some(at)) = util::availability(p, min_ready, now) {
            wait = Some(wait.map_or(at, |w| w.min(at)));
        }
    }
    let mut current_count = live
        .iter()
        .filter(|p| revision_label(p) == Some(current_rev.as_str()))
        .count() as i32;
    let updated = live
        .iter()
        .filter(|p| revision_label(p) == Some(update_rev.as_str()))
        .count() as i32;
    let mut status_current = current_rev.clone();
    if rolling && updated == count && count == replicas && ready == replicas {
        status_current = update_rev.clone();
        current_count = updated;
    }
    let status = json!({
        "replicas": count,
        "readyReplicas": ready,
        "availableReplicas": available,
        "currentReplicas": current_count,
        "updatedReplicas": updated,
        "currentRevision": status_current,
        "updateRevision": update_rev,
        "observedGeneration": ss.metadata.generation,
        "collisionCount": collision.unwrap_or(0),
    });
    let old = ss.status.clone().unwrap_or_default();
    let same = old.replicas == count
        && old.ready_replicas.unwrap_or(0) == ready
        && old.available_replicas.unwrap_or(0) == available
        && old.current_replicas.unwrap_or(0) == current_count
        && old.updated_replicas.unwrap_or(0) == updated
        && old.current_revision.as_deref() == Some(&status_current)
        && old.update_revision.as_deref() == Some(&update_rev)
        && old.observed_generation == ss.metadata.generation;
    if !same {
        match util::patch_status::<StatefulSet>(
            ctx.client(accounts::STATEFULSET),
            Some(&ns),
            &name,
            status,
        )
        .await
        {
            Ok(()) => {}
            Err(e) if crate::is_not_found(&e) => {}
            Err(e) => return Err(err(e)),
        }
    }
    // Revision history.
    let limit = usize::try_from(spec.revision_history_limit.unwrap_or(10).max(0)).unwrap_or(10);
    let in_use: Vec<String> = live
        .iter()
        .filter_map(|p| revision_label(p).map(|h| h.to_string()))
        .collect();
    let removable: Vec<&Arc<ControllerRevision>> = revisions
        .iter()
        .filter(|r| {
            let n = r.metadata.name.clone().unwrap_or_default();
            n != status_current
                && n != update_rev
                && !in_use
                    .iter()
                    .any(|h| n.ends_with(&format!("-{h}")) || *h == n)
        })
        .collect();
    if removable.len() > limit {
        for r in removable.iter().take(removable.len() - limit) {
            let n = r.metadata.name.clone().unwrap_or_default();
            match crs.delete(&n, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if crate::is_not_found(&e) => {}
                Err(e) => return Err(err(e)),
            }
        }
    }
    Ok(match wait {
        Some(w) => Action::requeue(w + Duration::from_millis(10)),
        None => Action::await_change(),
    })
}

async fn create_pod(
    ctx: &Ctx,
    api: &Api<Pod>,
    ss: &StatefulSet,
    template: &PodTemplateSpec,
    revision: &str,
    ord: i32,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Result<(), ReconcileError> {
    let set = ss.metadata.name.clone().unwrap_or_default();
    let pod_name = format!("{set}-{ord}");
    let mut t = template.clone();
    let labels = t
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(BTreeMap::new);
    labels.insert(REVISION_HASH.into(), revision.to_string());
    labels.insert(
        "statefulset.kubernetes.io/pod-name".into(),
        pod_name.clone(),
    );
    labels.insert("apps.kubernetes.io/pod-index".into(), ord.to_string());
    let mut pod = util::pod_from_template(&t, owner, Some(pod_name.clone()), &set);
    if let Some(spec) = pod.spec.as_mut() {
        spec.hostname = Some(pod_name.clone());
        if let Some(svc) = ss
            .spec
            .as_ref()
            .and_then(|s| s.service_name.clone())
            .filter(|s| !s.is_empty())
        {
            spec.subdomain = Some(svc);
        }
    }
    match api.create(&PostParams::default(), &pod).await {
        Ok(_) => Ok(()),
        Err(e) if crate::status_code(&e) == Some(409) => Ok(()),
        Err(e) => {
            let _ = ctx
                .events
                .warning(
                    ss,
                    "FailedCreate",
                    "Create",
                    &format!("create Pod {pod_name} in StatefulSet {set} failed: {e}"),
                )
                .await;
            Err(err(e))
        }
    }
}

async fn delete_pod(api: &Api<Pod>, p: &Pod) -> Result<(), ReconcileError> {
    let n = p.metadata.name.clone().unwrap_or_default();
    match api.delete(&n, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if crate::is_not_found(&e) => Ok(()),
        Err(e) => Err(err(e)),
    }
}
