//! The Deployment controller: ReplicaSets named by the pod-template hash,
//! RollingUpdate (maxSurge/maxUnavailable, ints or percentages rounded as
//! kube rounds: surge up, unavailable down, never both zero) and Recreate,
//! proportional scaling during a rollout, `paused`, revision annotations
//! (`deployment.kubernetes.io/revision`) and `revisionHistoryLimit` so
//! `kubectl rollout history` and `kubectl rollout undo` work,
//! `progressDeadlineSeconds`, the Available / Progressing / ReplicaFailure
//! conditions with kube's reasons, and the status counts `kubectl rollout
//! status` reads.
//!
//! The algorithm follows kube-controller-manager's deployment controller
//! (sync, rolling, recreate, progress); the hash is FNV-32a like kube's but
//! over the template's canonical JSON rather than Go's printed struct, so
//! ReplicaSet names differ from a real cluster's for the same template.

use crate::clients::accounts;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeforge_runtime::{Action, Manager, ReconcileError};
use serde_json::json;

use super::Ctx;
use super::util::{self, POD_TEMPLATE_HASH, controller_of, matches, selector};

/// The revision annotation on Deployments and their ReplicaSets.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Earlier revisions a ReplicaSet stood for (after a rollback to it).
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's replicas when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// The Deployment's replicas + maxSurge when the ReplicaSet was last scaled.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// Register the controller with `mgr`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    mgr.controller::<Deployment, _>("deployment", super::Shared(ctx.clone()))
        .owns::<ReplicaSet>()
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile);
}

type Err = ReconcileError;

fn kerr(e: kube::Error) -> Err {
    ReconcileError::new(e)
}

fn replicas_of(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}
fn status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}
fn available_of(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}
/// Available replicas, never more than the ReplicaSet is scaled to: right
/// after a scale-down its status still counts the pods being removed, and
/// trusting it would let a second pass scale down below minAvailable.
fn available_capped(rs: &ReplicaSet) -> i32 {
    available_of(rs).min(replicas_of(rs))
}
fn ready_of(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}
fn annotation_i32(meta: &ObjectMeta, key: &str) -> Option<i32> {
    meta.annotations.as_ref()?.get(key)?.parse().ok()
}
fn revision_of(meta: &ObjectMeta) -> i64 {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
fn created(rs: &ReplicaSet) -> (Option<jiff::Timestamp>, String) {
    (
        rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
        rs.metadata.name.clone().unwrap_or_default(),
    )
}

/// The Deployment's numbers, resolved.
struct Plan {
    replicas: i32,
    max_surge: i32,
    max_unavailable: i32,
    rolling: bool,
}

/// Resolve maxSurge / maxUnavailable against `replicas` (kube's
/// `ResolveFenceposts`, `MaxSurge`, `MaxUnavailable`).
fn plan(d: &Deployment) -> Result<Plan, String> {
    let spec = d.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1);
    let strategy = spec.strategy.clone().unwrap_or_default();
    let rolling = strategy.type_.as_deref() != Some("Recreate");
    if !rolling {
        return Ok(Plan {
            replicas,
            max_surge: 0,
            max_unavailable: 0,
            rolling,
        });
    }
    let ru = strategy.rolling_update.unwrap_or_default();
    let pct25 = k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("25%".into());
    let surge = util::scaled(
        Some(ru.max_surge.as_ref().unwrap_or(&pct25)),
        replicas,
        true,
    )?;
    let mut unavailable = util::scaled(
        Some(ru.max_unavailable.as_ref().unwrap_or(&pct25)),
        replicas,
        false,
    )?;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok(Plan {
        replicas,
        max_surge: surge,
        max_unavailable: if replicas == 0 {
            0
        } else {
            unavailable.min(replicas)
        },
        rolling,
    })
}

/// One sync's working state: the Deployment, its ReplicaSets (updated in
/// place as they are scaled) and the conditions to write.
struct Sync<'a> {
    ctx: &'a Ctx,
    d: &'a Deployment,
    plan: Plan,
    /// Oldest first.
    rss: Vec<ReplicaSet>,
    new: Option<usize>,
    conditions: Vec<DeploymentCondition>,
    collision_count: Option<i32>,
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<super::Shared>) -> Result<Action, Err> {
    let ctx: &Ctx = &ctx;
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let spec = d.spec.clone().unwrap_or_default();
    let sel = match selector(Some(&spec.selector)) {
        Ok(Some(s)) => Some(s),
        Ok(None) => {
            let _ = ctx
                .events
                .warning(
                    &*d,
                    "SelectingAll",
                    "Sync",
                    "This deployment is selecting all pods. A non-empty selector is required.",
                )
                .await;
            return Ok(Action::await_change());
        }
        Err(e) => {
            let _ = ctx
                .events
                .warning(&*d, "InvalidSelector", "Sync", &e.to_string())
                .await;
            return Ok(Action::await_change());
        }
    };
    let plan = match plan(&d) {
        Ok(p) => p,
        Err(e) => {
            let _ = ctx.events.warning(&*d, "InvalidStrategy", "Sync", &e).await;
            return Ok(Action::await_change());
        }
    };
    let rss = claim(ctx, &d, &sel).await.map_err(kerr)?;
    // A ReplicaSet this controller scaled whose cached copy does not show
    // it yet: sizes summed now would be stale (and a fresh ReplicaSet
    // scaled on them could pass replicas + maxSurge). Its event brings the
    // next sync; the requeue is a backstop.
    let mut behind = false;
    for rs in &rss {
        let key = util::key_of(&rs.metadata);
        if let Some(written) = ctx.rs_generations.get(&key) {
            if rs.metadata.generation.unwrap_or(0) < written {
                behind = true;
            } else {
                ctx.rs_generations.forget(&key);
            }
        }
    }
    if behind {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let mut s = Sync {
        ctx,
        d: &d,
        plan,
        rss,
        new: None,
        conditions: d
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default(),
        collision_count: d.status.as_ref().and_then(|s| s.collision_count),
    };
    let paused = spec.paused.unwrap_or(false);
    s.paused_conditions(paused);
    if paused {
        return s.sync_only(true).await;
    }
    s.find_new();
    if s.is_scaling_event() {
        return s.sync_only(false).await;
    }
    if s.plan.rolling {
        s.rollout_rolling().await
    } else {
        s.rollout_recreate().await
    }
}

/// The ReplicaSets the Deployment controls, adopting matching orphans and
/// releasing ones that stopped matching; oldest first.
async fn claim(
    ctx: &Ctx,
    d: &Deployment,
    sel: &Option<kube::core::Selector>,
) -> Result<Vec<ReplicaSet>, kube::Error> {
    let ns = d.metadata.namespace.as_deref();
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let mut out = Vec::new();
    for rs in ctx.replicasets.state() {
        if rs.metadata.namespace.as_deref() != ns {
            continue;
        }
        match controller_of(&rs.metadata) {
            Some(r) if r.uid == uid => {
                if matches(sel, rs.metadata.labels.as_ref()) {
                    out.push((*rs).clone());
                } else {
                    util::release::<ReplicaSet>(
                        ctx.client(accounts::DEPLOYMENT),
                        &rs.metadata,
                        &uid,
                    )
                    .await?;
                }
            }
            None if rs.metadata.deletion_timestamp.is_none()
                && matches(sel, rs.metadata.labels.as_ref()) =>
            {
                if let Some(owner) = util::owner_ref(d) {
                    let api: Api<ReplicaSet> = Api::namespaced(
                        ctx.client(accounts::DEPLOYMENT).clone(),
                        ns.unwrap_or_default(),
                    );
                    let mut refs = rs.metadata.owner_references.clone().unwrap_or_default();
                    refs.push(owner);
                    let patch = json!({"metadata": {"ownerReferences": refs, "uid": rs.metadata.uid, "resourceVersion": rs.metadata.resource_version}});
                    let name = rs.metadata.name.clone().unwrap_or_default();
                    match api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                    {
                        Ok(adopted) => out.push(adopted),
                        Err(e) if crate::is_conflict(&e) || crate::is_not_found(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            _ => {}
        }
    }
    out.sort_by_key(created);
    Ok(out)
}

/// Set `type_` in `conds` as kube's `SetDeploymentCondition`: nothing
/// changes when status and reason are the same; the transition time is
/// kept when only the reason changes.
fn set_condition(
    conds: &mut Vec<DeploymentCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
) {
    let now = util::now_time();
    let existing = conds.iter().position(|c| c.type_ == type_);
    if let Some(i) = existing
        && conds[i].status == status
        && conds[i].reason.as_deref() == Some(reason)
    {
        return;
    }
    let mut c = DeploymentCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    };
    if let Some(i) = existing {
        if conds[i].status == status {
            c.last_transition_time = conds[i].last_transition_time.clone();
        }
        conds.remove(i);
    }
    conds.push(c);
}

fn condition<'c>(conds: &'c [DeploymentCondition], type_: &str) -> Option<&'c DeploymentCondition> {
    conds.iter().find(|c| c.type_ == type_)
}

impl Sync<'_> {
    fn ns(&self) -> String {
        self.d.metadata.namespace.clone().unwrap_or_default()
    }
    fn name(&self) -> String {
        self.d.metadata.name.clone().unwrap_or_default()
    }
    fn template(&self) -> k8s_openapi::api::core::v1::PodTemplateSpec {
        self.d
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default()
    }

    fn paused_conditions(&mut self, paused: bool) {
        if self
            .d
            .spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds)
            .is_none()
        {
            return;
        }
        let reason = condition(&self.conditions, "Progressing").and_then(|c| c.reason.clone());
        if paused && reason.as_deref() != Some("DeploymentPaused") {
            set_condition(
                &mut self.conditions,
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused".into(),
            );
        } else if !paused && reason.as_deref() == Some("DeploymentPaused") {
            set_condition(
                &mut self.conditions,
                "Progressing",
                "Unknown",
                "DeploymentResumed",
                "Deployment is resumed".into(),
            );
        }
    }

    /// The ReplicaSet whose template is the Deployment's (the oldest if
    /// several).
    fn find_new(&mut self) {
        let t = self.template();
        self.new = self.rss.iter().position(|rs| {
            rs.spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .is_some_and(|rt| util::templates_equal(rt, &t))
        });
    }

    fn olds(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.rss.len()).filter(move |i| Some(*i) != self.new)
    }

    fn is_scaling_event(&self) -> bool {
        let want = self.plan.replicas;
        self.rss.iter().any(|rs| {
            replicas_of(rs) > 0
                && annotation_i32(&rs.metadata, DESIRED_REPLICAS).is_some_and(|v| v != want)
        })
    }

    /// The annotations copied from the Deployment to its ReplicaSets.
    fn copied_annotations(&self) -> BTreeMap<String, String> {
        let skip = [
            util_last_applied(),
            REVISION,
            REVISION_HISTORY,
            DESIRED_REPLICAS,
            MAX_REPLICAS,
            "deprecated.deployment.rollback.to",
        ];
        self.d
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .collect()
    }

    /// Make sure the new ReplicaSet exists (when `create`) and carries the
    /// newest revision; keep the Deployment's revision annotation in step
    /// (kube's `getAllReplicaSetsAndSyncRevision`).
    async fn sync_revision(&mut self, create: bool) -> Result<(), Err> {
        self.find_new();
        let max_old = self
            .olds()
            .map(|i| revision_of(&self.rss[i].metadata))
            .max()
            .unwrap_or(0);
        let new_revision = max_old + 1;
        match self.new {
            Some(i) => {
                let rs = &self.rss[i];
                let mut ann = rs.metadata.annotations.clone().unwrap_or_default();
                let before = ann.clone();
                let old_rev = revision_of(&rs.metadata);
                if old_rev < new_revision {
                    if old_rev > 0 {
                        let hist = ann
                            .get(REVISION_HISTORY)
                            .map(|h| format!("{h},{old_rev}"))
                            .unwrap_or_else(|| old_rev.to_string());
                        ann.insert(REVISION_HISTORY.into(), hist);
                    }
                    ann.insert(REVISION.into(), new_revision.to_string());
                }
                for (k, v) in self.copied_annotations() {
                    ann.insert(k, v);
                }
                if ann != before {
                    let patch = json!({"metadata": {"annotations": ann}});
                    let updated = self.patch_rs(i, patch).await?;
                    self.rss[i] = updated;
                }
                let rev = revision_of(&self.rss[i].metadata);
                self.sync_deployment_revision(rev).await?;
                if condition(&self.conditions, "Progressing").is_none()
                    && self
                        .d
                        .spec
                        .as_ref()
                        .and_then(|s| s.progress_deadline_seconds)
                        .is_some()
                {
                    let msg = format!(
                        "Found new replica set {:?}",
                        self.rss[i].metadata.name.clone().unwrap_or_default()
                    );
                    set_condition(
                        &mut self.conditions,
                        "Progressing",
                        "True",
                        "FoundNewReplicaSet",
                        msg,
                    );
                }
                Ok(())
            }
            None if create => self.create_new(new_revision).await,
            None => Ok(()),
        }
    }

    async fn sync_deployment_revision(&self, rev: i64) -> Result<(), Err> {
        if revision_of(&self.d.metadata) == rev {
            return Ok(());
        }
        let api: Api<Deployment> =
            Api::namespaced(self.ctx.client(accounts::DEPLOYMENT).clone(), &self.ns());
        let patch = json!({"metadata": {"annotations": {REVISION: rev.to_string()}}});
        match api
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if crate::is_not_found(&e) => Ok(()),
            Err(e) => Err(kerr(e)),
        }
    }

    async fn create_new(&mut self, revision: i64) -> Result<(), Err> {
        let mut template = self.template();
        let hash = util::template_hash(&template, self.collision_count);
        let tm = template.metadata.get_or_insert_with(ObjectMeta::default);
        tm.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let labels = tm.labels.clone();
        let mut sel: LabelSelector = self
            .d
            .spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default();
        sel.match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let replicas = self.new_rs_replicas(0);
        let mut ann = self.copied_annotations();
        ann.insert(REVISION.into(), revision.to_string());
        ann.insert(DESIRED_REPLICAS.into(), self.plan.replicas.to_string());
        ann.insert(
            MAX_REPLICAS.into(),
            (self.plan.replicas + self.plan.max_surge).to_string(),
        );
        let name = format!("{}-{hash}", self.name());
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.ns()),
                labels,
                annotations: Some(ann),
                owner_references: util::owner_ref(self.d).map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            spec: Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
                replicas: Some(replicas),
                min_ready_seconds: self.d.spec.as_ref().and_then(|s| s.min_ready_seconds),
                selector: sel,
                template: Some(template.clone()),
            }),
            status: None,
        };
        let api: Api<ReplicaSet> =
            Api::namespaced(self.ctx.client(accounts::DEPLOYMENT).clone(), &self.ns());
        let created = match api.create(&PostParams::default(), &rs).await {
            Ok(c) => c,
            Err(e) if crate::status_code(&e) == Some(409) => {
                // A ReplicaSet of that name exists: ours with this template
                // (a stale cache) — use it; otherwise a hash collision.
                let existing = api.get(&name).await.map_err(kerr)?;
                let ours = controller_of(&existing.metadata)
                    .is_some_and(|r| Some(&r.uid) == self.d.metadata.uid.as_ref());
                let same = existing
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| util::templates_equal(t, &template));
                if ours && same {
                    existing
                } else {
                    let c = self.collision_count.unwrap_or(0).saturating_add(1);
                    self.collision_count = Some(c);
                    self.write_status(None).await?;
                    return Err(ReconcileError::new(std::io::Error::other(format!(
                        "hash collision for ReplicaSet {name}; collisionCount is now {c}"
                    ))));
                }
            }
            Err(e) => {
                if crate::status_code(&e).is_some_and(|c| c == 422 || c == 403) {
                    let msg = e.to_string();
                    set_condition(
                        &mut self.conditions,
                        "ReplicaFailure",
                        "True",
                        "FailedCreate",
                        msg.clone(),
                    );
                    let _ = self.write_status(None).await;
                    let _ = self
                        .ctx
                        .events
                        .warning(self.d, "FailedCreate", "Create", &msg)
                        .await;
                }
                return Err(kerr(e));
            }
        };
        if replicas > 0 {
            let _ = self
                .ctx
                .events
                .normal(
                    self.d,
                    "ScalingReplicaSet",
                    "Scale",
                    &format!("Scaled up replica set {name} from 0 to {replicas}"),
                )
                .await;
        }
        if self
            .d
            .spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds)
            .is_some()
        {
            set_condition(
                &mut self.conditions,
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                format!("Created new replica set {name:?}"),
            );
        }
        let rev = revision_of(&created.metadata);
        self.rss.push(created);
        self.new = Some(self.rss.len() - 1);
        self.sync_deployment_revision(rev).await
    }

    /// Write ReplicaSet `i`, guarded by the resourceVersion this sync read
    /// it at (kube writes it with Update): a decision made from a cached
    /// copy older than the controller's own last write — sizes summed over
    /// stale ReplicaSets — is refused with a conflict and made again,
    /// instead of scaling past `replicas + maxSurge`.
    async fn patch_rs(&self, i: usize, mut patch: serde_json::Value) -> Result<ReplicaSet, Err> {
        let rs = &self.rss[i];
        patch["metadata"]["resourceVersion"] = json!(rs.metadata.resource_version);
        let api: Api<ReplicaSet> =
            Api::namespaced(self.ctx.client(accounts::DEPLOYMENT).clone(), &self.ns());
        api.patch(
            rs.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(kerr)
    }

    /// Scale ReplicaSet `i` to `to`, updating its desired/max annotations.
    /// Returns whether anything changed.
    async fn scale(&mut self, i: usize, to: i32) -> Result<bool, Err> {
        let rs = &self.rss[i];
        let from = replicas_of(rs);
        let desired = self.plan.replicas.to_string();
        let max = (self.plan.replicas + self.plan.max_surge).to_string();
        let ann = rs.metadata.annotations.clone().unwrap_or_default();
        let ann_ok =
            ann.get(DESIRED_REPLICAS) == Some(&desired) && ann.get(MAX_REPLICAS) == Some(&max);
        if from == to && ann_ok {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {"annotations": {DESIRED_REPLICAS: desired, MAX_REPLICAS: max}},
            "spec": {"replicas": to},
        });
        let updated = self.patch_rs(i, patch).await?;
        let name = updated.metadata.name.clone().unwrap_or_default();
        if from != to
            && let Some(g) = updated.metadata.generation
        {
            self.ctx
                .rs_generations
                .record(util::key_of(&updated.metadata), g);
        }
        self.rss[i] = updated;
        if from != to {
            let dir = if to > from { "up" } else { "down" };
            let _ = self
                .ctx
                .events
                .normal(
                    self.d,
                    "ScalingReplicaSet",
                    "Scale",
                    &format!("Scaled {dir} replica set {name} from {from} to {to}"),
                )
                .await;
        }
        Ok(from != to)
    }

    /// The new ReplicaSet's size under the strategy (kube's
    /// `NewRSNewReplicas`), given its current size.
    fn new_rs_replicas(&self, current: i32) -> i32 {
        if !self.plan.rolling {
            return self.plan.replicas;
        }
        let total: i32 = self
            .rss
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != self.new)
            .map(|(_, rs)| replicas_of(rs))
            .sum::<i32>()
            + current;
        let max_total = self.plan.replicas + self.plan.max_surge;
        if total >= max_total {
            return current;
        }
        let up = (max_total - total).min(self.plan.replicas - current);
        current + up.max(0)
    }

    async fn rollout_rolling(mut self) -> Result<Action, Err> {
        self.sync_revision(true).await?;
        let Some(n) = self.new else {
            return self.sync_rollout_status().await;
        };
        // Scale the new ReplicaSet up (or down to the target).
        let cur = replicas_of(&self.rss[n]);
        let want = self.plan.replicas;
        let target = if cur > want {
            want
        } else {
            self.new_rs_replicas(cur)
        };
        if target != cur && self.scale(n, target).await? {
            return self.sync_rollout_status().await;
        }
        if self.reconcile_old().await? {
            return self.sync_rollout_status().await;
        }
        if self.complete(&self.calculate_status()) {
            self.cleanup().await?;
        }
        self.sync_rollout_status().await
    }

    /// Scale old ReplicaSets down as far as maxUnavailable allows (kube's
    /// `reconcileOldReplicaSets`).
    async fn reconcile_old(&mut self) -> Result<bool, Err> {
        let olds: Vec<usize> = self.olds().collect();
        let old_pods: i32 = olds.iter().map(|i| replicas_of(&self.rss[*i])).sum();
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods: i32 = self.rss.iter().map(replicas_of).sum();
        let min_available = self.plan.replicas - self.plan.max_unavailable;
        let new_unavailable = self.new.map_or(0, |n| {
            replicas_of(&self.rss[n]) - available_capped(&self.rss[n])
        });
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        // First the unhealthy replicas of old ReplicaSets.
        let mut cleaned = 0;
        for i in olds.iter().copied() {
            if cleaned >= max_scaled_down {
                break;
            }
            let r = replicas_of(&self.rss[i]);
            let avail = available_of(&self.rss[i]);
            if r == 0 || r <= avail {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(r - avail);
            self.scale(i, r - down).await?;
            cleaned += down;
        }
        // Then healthy ones, keeping minAvailable.
        let available: i32 = self.rss.iter().map(available_capped).sum();
        let mut scaled = 0;
        if available > min_available {
            let total = available - min_available;
            for i in olds {
                if scaled >= total {
                    break;
                }
                let r = replicas_of(&self.rss[i]);
                if r == 0 {
                    continue;
                }
                let down = r.min(total - scaled);
                self.scale(i, r - down).await?;
                scaled += down;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    async fn rollout_recreate(mut self) -> Result<Action, Err> {
        self.sync_revision(false).await?;
        // Scale every old ReplicaSet down to zero.
        let mut scaled = false;
        for i in self.olds().collect::<Vec<_>>() {
            if replicas_of(&self.rss[i]) > 0 {
                scaled |= self.scale(i, 0).await?;
            }
        }
        if scaled {
            return self.sync_rollout_status().await;
        }
        // Wait until their pods are gone.
        let old_running = self.olds().any(|i| {
            let uid = self.rss[i].metadata.uid.clone().unwrap_or_default();
            status_replicas(&self.rss[i]) > 0
                || self
                    .ctx
                    .pod_index
                    .owned_by_slim(&self.ctx.pods, &uid)
                    .iter()
                    .any(|p| !matches!(util::phase(p), "Succeeded" | "Failed"))
        });
        if old_running {
            return self.sync_rollout_status().await;
        }
        if self.new.is_none() {
            self.sync_revision(true).await?;
        }
        if let Some(n) = self.new {
            self.scale(n, self.plan.replicas).await?;
        }
        if self.complete(&self.calculate_status()) {
            self.cleanup().await?;
        }
        self.sync_rollout_status().await
    }

    /// Scaling (or paused): resize without rolling out (kube's `sync`).
    async fn sync_only(mut self, paused: bool) -> Result<Action, Err> {
        self.sync_revision(false).await?;
        self.proportional_scale().await?;
        if paused {
            self.cleanup().await?;
        }
        let status = self.calculate_status();
        self.write_status(Some(status)).await?;
        Ok(Action::await_change())
    }

    /// kube's `scale`: one active ReplicaSet takes the whole size; a
    /// saturated new one lets the old ones go; otherwise the difference is
    /// shared in proportion to each ReplicaSet's size.
    async fn proportional_scale(&mut self) -> Result<(), Err> {
        let want = self.plan.replicas;
        let active: Vec<usize> = (0..self.rss.len())
            .filter(|i| replicas_of(&self.rss[*i]) > 0)
            .collect();
        let single = match active.len() {
            0 => self.new.or_else(|| self.olds().last()),
            1 => Some(active[0]),
            _ => None,
        };
        if let Some(i) = single {
            self.scale(i, want).await?;
            return Ok(());
        }
        if let Some(n) = self.new {
            let rs = &self.rss[n];
            if replicas_of(rs) == want
                && annotation_i32(&rs.metadata, DESIRED_REPLICAS) == Some(want)
                && available_of(rs) == want
            {
                for i in self.olds().collect::<Vec<_>>() {
                    self.scale(i, 0).await?;
                }
                return Ok(());
            }
        }
        if !self.plan.rolling {
            return Ok(());
        }
        let total: i32 = active.iter().map(|i| replicas_of(&self.rss[*i])).sum();
        let allowed = if want > 0 {
            want + self.plan.max_surge
        } else {
            0
        };
        let to_add = allowed - total;
        let mut order = active.clone();
        // Larger first; newer first when adding, older first when removing.
        order.sort_by(|a, b| {
            let (ra, rb) = (replicas_of(&self.rss[*a]), replicas_of(&self.rss[*b]));
            rb.cmp(&ra).then_with(|| {
                let (ca, cb) = (created(&self.rss[*a]), created(&self.rss[*b]));
                if to_add > 0 { cb.cmp(&ca) } else { ca.cmp(&cb) }
            })
        });
        let mut sizes: Vec<(usize, i32)> = Vec::new();
        let mut added = 0;
        for i in order.iter().copied() {
            let r = replicas_of(&self.rss[i]);
            if to_add == 0 {
                sizes.push((i, r));
                continue;
            }
            let fraction = if want == 0 {
                -r
            } else {
                let annotated = annotation_i32(&self.rss[i].metadata, MAX_REPLICAS)
                    .unwrap_or_else(|| self.d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0))
                    .max(1);
                let size =
                    f64::from(r) * f64::from(want + self.plan.max_surge) / f64::from(annotated);
                size.round() as i32 - r
            };
            let left = to_add - added;
            let p = if to_add > 0 {
                fraction.min(left)
            } else {
                fraction.max(left)
            };
            sizes.push((i, r + p));
            added += p;
        }
        if to_add != 0
            && let Some(first) = sizes.first_mut()
        {
            first.1 = (first.1 + to_add - added).max(0);
        }
        for (i, size) in sizes {
            self.scale(i, size).await?;
        }
        Ok(())
    }

    /// Delete old ReplicaSets beyond `revisionHistoryLimit` (scaled to zero
    /// and settled), oldest revision first.
    async fn cleanup(&mut self) -> Result<(), Err> {
        let Some(limit) = self.d.spec.as_ref().and_then(|s| s.revision_history_limit) else {
            return Ok(());
        };
        let mut olds: Vec<usize> = self
            .olds()
            .filter(|i| self.rss[*i].metadata.deletion_timestamp.is_none())
            .collect();
        let excess = olds.len() as i64 - i64::from(limit.max(0));
        if excess <= 0 {
            return Ok(());
        }
        olds.sort_by_key(|i| (revision_of(&self.rss[*i].metadata), created(&self.rss[*i])));
        let api: Api<ReplicaSet> =
            Api::namespaced(self.ctx.client(accounts::DEPLOYMENT).clone(), &self.ns());
        let mut removed = Vec::new();
        for i in olds.into_iter().take(usize::try_from(excess).unwrap_or(0)) {
            let rs = &self.rss[i];
            let settled =
                rs.status.as_ref().and_then(|s| s.observed_generation) >= rs.metadata.generation;
            if replicas_of(rs) != 0 || status_replicas(rs) != 0 || !settled {
                continue;
            }
            let name = rs.metadata.name.clone().unwrap_or_default();
            self.ctx.rs_generations.forget(&util::key_of(&rs.metadata));
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => removed.push(i),
                Err(e) if crate::is_not_found(&e) => removed.push(i),
                Err(e) => return Err(kerr(e)),
            }
        }
        // Keep indices valid: remove from the back.
        removed.sort_unstable();
        for i in removed.into_iter().rev() {
            self.rss.remove(i);
            if let Some(n) = self.new
                && n > i
            {
                self.new = Some(n - 1);
            }
        }
        Ok(())
    }

    fn calculate_status(&self) -> DeploymentStatus {
        let available: i32 = self.rss.iter().map(available_of).sum();
        let total: i32 = self.rss.iter().map(status_replicas).sum();
        let mut conds = self.conditions.clone();
        if available >= self.plan.replicas - self.plan.max_unavailable {
            set_condition(
                &mut conds,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            );
        } else {
            set_condition(
                &mut conds,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            );
        }
        DeploymentStatus {
            observed_generation: self.d.metadata.generation,
            replicas: Some(total),
            updated_replicas: Some(self.new.map_or(0, |n| status_replicas(&self.rss[n]))),
            ready_replicas: Some(self.rss.iter().map(ready_of).sum()),
            available_replicas: Some(available),
            unavailable_replicas: Some((total - available).max(0)),
            collision_count: self.collision_count,
            conditions: Some(conds),
            terminating_replicas: None,
        }
    }

    /// kube's `DeploymentComplete`.
    fn complete(&self, s: &DeploymentStatus) -> bool {
        let want = self.plan.replicas;
        s.updated_replicas == Some(want)
            && s.replicas == Some(want)
            && s.available_replicas == Some(want)
            && s.observed_generation >= self.d.metadata.generation
    }

    /// kube's `DeploymentProgressing`: more updated, fewer old, more ready
    /// or more available replicas than the last status said.
    fn progressing(&self, s: &DeploymentStatus) -> bool {
        let old = self.d.status.clone().unwrap_or_default();
        let g = |v: Option<i32>| v.unwrap_or(0);
        let old_olds = g(old.replicas) - g(old.updated_replicas);
        let new_olds = g(s.replicas) - g(s.updated_replicas);
        g(s.updated_replicas) > g(old.updated_replicas)
            || new_olds < old_olds
            || g(s.ready_replicas) > g(old.ready_replicas)
            || g(s.available_replicas) > g(old.available_replicas)
    }

    /// Progress conditions, ReplicaFailure from the ReplicaSets, then the
    /// status; requeued to notice the progress deadline.
    async fn sync_rollout_status(mut self) -> Result<Action, Err> {
        let mut status = self.calculate_status();
        let deadline = self
            .d
            .spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds);
        let mut conds = status.conditions.take().unwrap_or_default();
        if deadline.is_none() {
            conds.retain(|c| c.type_ != "Progressing");
        }
        let new_name = self
            .new
            .and_then(|n| self.rss[n].metadata.name.clone())
            .unwrap_or_default();
        let current = condition(&conds, "Progressing").cloned();
        let is_complete = status.replicas == status.updated_replicas
            && current.as_ref().and_then(|c| c.reason.as_deref()) == Some("NewReplicaSetAvailable");
        let mut requeue = None;
        if let Some(deadline) = deadline
            && !is_complete
        {
            if self.complete(&status) {
                set_condition(
                    &mut conds,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet {new_name:?} has successfully progressed."),
                );
            } else if self.progressing(&status) {
                let msg = format!("ReplicaSet {new_name:?} is progressing.");
                let now = util::now_time();
                let transition = current
                    .as_ref()
                    .filter(|c| c.status == "True")
                    .and_then(|c| c.last_transition_time.clone())
                    .unwrap_or_else(|| now.clone());
                conds.retain(|c| c.type_ != "Progressing");
                conds.push(DeploymentCondition {
                    type_: "Progressing".into(),
                    status: "True".into(),
                    reason: Some("ReplicaSetUpdated".into()),
                    message: Some(msg),
                    last_update_time: Some(now),
                    last_transition_time: Some(transition),
                });
            } else if let Some(c) = current
                .as_ref()
                // kube's DeploymentTimedOut: after a finished rollout there
                // is no base to time out from (a rollback to an existing
                // ReplicaSet is seen before its replicas change); the next
                // progress resets the clock.
                .filter(|c| c.reason.as_deref() != Some("NewReplicaSetAvailable"))
            {
                let timed_out = c.reason.as_deref() == Some("ProgressDeadlineExceeded")
                    || c.last_update_time.as_ref().is_some_and(|t| {
                        let at =
                            t.0.checked_add(jiff::SignedDuration::from_secs(i64::from(deadline)));
                        at.is_ok_and(|at| at < jiff::Timestamp::now())
                    });
                if timed_out && c.reason.as_deref() != Some("DeploymentPaused") {
                    set_condition(
                        &mut conds,
                        "Progressing",
                        "False",
                        "ProgressDeadlineExceeded",
                        format!("ReplicaSet {new_name:?} has timed out progressing."),
                    );
                } else if let Some(t) = &c.last_update_time {
                    // Look again when the deadline passes.
                    let at =
                        t.0.checked_add(jiff::SignedDuration::from_secs(i64::from(deadline)));
                    if let Ok(at) = at {
                        let wait = at.duration_since(jiff::Timestamp::now());
                        if let Ok(w) = Duration::try_from(wait) {
                            requeue = Some(w + Duration::from_secs(1));
                        }
                    }
                }
            }
        }
        // ReplicaFailure mirrors the ReplicaSets'.
        let failure = self.rss.iter().find_map(|rs| {
            rs.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
                .cloned()
        });
        match failure {
            Some(f) => set_condition(
                &mut conds,
                "ReplicaFailure",
                "True",
                f.reason.as_deref().unwrap_or("FailedCreate"),
                f.message.unwrap_or_default(),
            ),
            None => conds.retain(|c| c.type_ != "ReplicaFailure"),
        }
        status.conditions = Some(conds);
        self.conditions = status.conditions.clone().unwrap_or_default();
        self.write_status(Some(status)).await?;
        Ok(match requeue {
            Some(d) => Action::requeue(d),
            None => Action::await_change(),
        })
    }

    /// Write `status` (or the current counts with the pending conditions)
    /// when it differs from what the object says.
    async fn write_status(&self, status: Option<DeploymentStatus>) -> Result<(), Err> {
        let mut status = status.unwrap_or_else(|| {
            let mut s = self.d.status.clone().unwrap_or_default();
            s.conditions = Some(self.conditions.clone());
            s.collision_count = self.collision_count;
            s
        });
        if status.conditions.as_ref().is_some_and(Vec::is_empty) {
            status.conditions = None;
        }
        if self.d.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let value = serde_json::to_value(&status).map_err(ReconcileError::new)?;
        match util::patch_status::<Deployment>(
            self.ctx.client(accounts::DEPLOYMENT),
            Some(&self.ns()),
            &self.name(),
            value,
        )
        .await
        {
            Ok(()) => Ok(()),
            Err(e) if crate::is_not_found(&e) => Ok(()),
            Err(e) => Err(kerr(e)),
        }
    }
}

fn util_last_applied() -> &'static str {
    kubeforge_runtime::LAST_APPLIED_ANNOTATION
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(replicas: i32, strategy: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"a": "b"}}, "strategy": strategy,
            "template": {"metadata": {"labels": {"a": "b"}}}}}))
        .unwrap_or_default()
    }

    fn fence(replicas: i32, strategy: serde_json::Value) -> (i32, i32) {
        let p = plan(&d(replicas, strategy)).unwrap_or(Plan {
            replicas: -1,
            max_surge: -1,
            max_unavailable: -1,
            rolling: false,
        });
        (p.max_surge, p.max_unavailable)
    }

    #[test]
    fn fenceposts_round_like_kube() {
        // Defaults 25%/25%: surge rounds up, unavailable down.
        assert_eq!(fence(3, json!({})), (1, 0));
        assert_eq!(fence(10, json!({})), (3, 2));
        // Both zero: one pod may be unavailable.
        let zero =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}});
        assert_eq!(fence(4, zero), (0, 1));
        // maxUnavailable never exceeds replicas; zero replicas → 0.
        let big =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 9}});
        assert_eq!(fence(2, big.clone()), (1, 2));
        assert_eq!(fence(0, big), (1, 0));
        assert_eq!(fence(5, json!({"type": "Recreate"})), (0, 0));
        let bad = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "x%"}});
        assert!(plan(&d(3, bad)).is_err());
    }
}
