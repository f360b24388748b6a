//! The Job controller (NonIndexed completion mode): keeps
//! `min(parallelism, completions - succeeded)` pods active, counts
//! succeeded/failed/ready pods, sets `startTime`, fails the Job past
//! `backoffLimit` failures (BackoffLimitExceeded) or `activeDeadlineSeconds`
//! (DeadlineExceeded), completes it at `completions` successes, and deletes
//! a finished Job `ttlSecondsAfterFinished` later.
//!
//! Conditions follow Kubernetes 1.33: first `SuccessCriteriaMet` or
//! `FailureTarget`, then — once no pod is running and every finished pod
//! is counted — `Complete` or `Failed` with `completionTime` on success.
//! Pods the sync itself deletes count as no longer running (kube's
//! `active -= deleted`), so the sync that deletes a finishing Job's last
//! pods also finishes it; one that could not delete them all yet looks
//! again after a second instead of relying on a pod event. Pods get the
//! `batch.kubernetes.io/job-name` / `controller-uid` labels (and the legacy
//! `job-name` / `controller-uid`). Failed pods are replaced after an
//! exponential delay (`job_backoff_base` × 2^(failures-1), capped at 6
//! minutes; kube's is 10 s).
//!
//! Counting is kube's: every pod carries the `batch.kubernetes.io/job-tracking`
//! finalizer; a finished pod (Succeeded, Failed, or deleted before it
//! succeeded) is first recorded in `status.uncountedTerminatedPods`, then
//! loses its finalizer, then moves into `succeeded`/`failed`, with status
//! writes guarded by the resourceVersion they were computed from — so each
//! pod counts exactly once, even when it is deleted at once. Container
//! restarts of `restartPolicy: OnFailure` pods count toward
//! `backoffLimit`. Pods whose Job is gone (or finished) lose the finalizer
//! through a queue of their own (kube's orphan pods). Indexed completion
//! mode and pod failure policies are not implemented.

use crate::clients::accounts;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::{Action, BackoffConfig, Manager, ReconcileError, WorkQueue};
use serde_json::json;

use super::Ctx;
use super::util::{self, controller_of, is_active, key_of};

/// The finalizer on every pod of a Job until the pod is counted (kube's
/// `batch.kubernetes.io/job-tracking`).
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// Most pods in `uncountedTerminatedPods` at once (kube's
/// `MaxUncountedPods`): keeps the status small and one sync short.
const MAX_UNCOUNTED_PODS: usize = 500;

/// The queue of pods whose Job is gone (kube's name).
const ORPHAN_QUEUE: &str = "job_orphan_pod";

/// Register the controller with `mgr`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    let orphans: WorkQueue<String> = mgr.work_queue(ORPHAN_QUEUE, BackoffConfig::default());
    let (idx, found) = (ctx.clone(), orphans.clone());
    let (gone, lost) = (ctx.clone(), orphans.clone());
    mgr.controller::<Job, _>("job", super::Shared(ctx.clone()))
        .watches::<Pod, _>(move |pod| {
            idx.pod_index.observe(&idx.pods, pod);
            if has_tracking_finalizer(pod) && is_orphan(&idx, pod) {
                found.add(key_of(&pod.metadata));
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            controller_of(&pod.metadata)
                .filter(|r| r.kind == "Job" && r.api_version == "batch/v1")
                .map(|r| ObjectRef::<Job>::new(&r.name).within(ns))
        })
        // A deleted Job (kube's deleteJob): its pods that still carry the
        // finalizer are orphans now. The cache no longer holds the Job when
        // this runs, so a pod seen with the Job still there is found here.
        .watches::<Job, _>(move |job| {
            if job_in_cache(&gone, job).is_none() {
                let uid = job.metadata.uid.as_deref().unwrap_or_default();
                let key = format!("job/{}", key_of(&job.metadata));
                gone.expectations.forget(&key);
                gone.job_status.forget(&key);
                for p in gone.pod_index.owned_by(&gone.pods, uid) {
                    if has_tracking_finalizer(&p) {
                        lost.add(key_of(&p.metadata));
                    }
                }
            }
            None::<ObjectRef<Job>>
        })
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile);
    mgr.add_runnable(ORPHAN_QUEUE, move |stop| async move {
        let queue = orphans.clone();
        tokio::select! {
            () = release_orphans(ctx, orphans) => {}
            () = stop.cancelled() => queue.shutdown(),
        }
    });
}

/// The cached Job `job` names, if it is the same object (same UID).
fn job_in_cache(ctx: &Ctx, job: &Job) -> Option<Arc<Job>> {
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    ctx.jobs
        .get(&ObjectRef::new(name).within(ns))
        .filter(|j| j.metadata.uid == job.metadata.uid)
}

/// kube's orphan test (`syncOrphanPod`): no controller, or a Job
/// controller that is gone or finished. A pod controlled by anything else
/// keeps the finalizer.
fn is_orphan(ctx: &Ctx, pod: &Pod) -> bool {
    let Some(owner) = controller_of(&pod.metadata) else {
        return true;
    };
    if owner.kind != "Job" || owner.api_version != "batch/v1" {
        return false;
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    match ctx.jobs.get(&ObjectRef::new(&owner.name).within(ns)) {
        Some(job) if job.metadata.uid.as_deref() == Some(&*owner.uid) => {
            let conds = job
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or_default();
            cond_true(conds, "Complete") || cond_true(conds, "Failed")
        }
        _ => true,
    }
}

/// Remove the finalizer from orphan pods, judged again from synced caches
/// when their turn comes.
async fn release_orphans(ctx: Arc<Ctx>, queue: WorkQueue<String>) {
    if ctx.jobs.wait_until_ready().await.is_err() || ctx.pods.wait_until_ready().await.is_err() {
        return;
    }
    while let Some(key) = queue.get().await {
        let (ns, name) = key.split_once('/').unwrap_or(("", &key));
        let pod = ctx.pods.get(&ObjectRef::new(name).within(ns));
        let result = match pod {
            Some(p) if has_tracking_finalizer(&p) && is_orphan(&ctx, &p) => {
                let api: Api<Pod> = Api::namespaced(ctx.client(accounts::JOB).clone(), ns);
                release(&api, &p).await
            }
            _ => Ok(()),
        };
        match result {
            Ok(()) => queue.forget(&key),
            Err(e) if crate::is_not_found(&e) => queue.forget(&key),
            Err(e) => {
                tracing::debug!(pod = %key, error = %e, "job: orphan pod finalizer removal will retry");
                queue.add_rate_limited(key.clone());
            }
        }
        queue.done(&key);
    }
}

fn has_tracking_finalizer(p: &Pod) -> bool {
    p.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
}

fn uid_of(p: &Pod) -> &str {
    p.metadata.uid.as_deref().unwrap_or_default()
}

/// A pod count as a status counter.
fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// kube's `isPodFailed`: Failed, or deleted before it succeeded (it may
/// never reach Failed), unless only failed pods are replaced.
fn counts_as_failed(p: &Pod, spec: &JobSpec) -> bool {
    let phase = util::phase(p);
    if phase == "Failed" {
        return true;
    }
    let only_failed = spec.pod_failure_policy.is_some()
        || spec.pod_replacement_policy.as_deref() == Some("Failed");
    !only_failed && p.metadata.deletion_timestamp.is_some() && phase != "Succeeded"
}

/// kube's `pastBackoffLimitOnFailure`: `restartPolicy: OnFailure` pods
/// restart their containers in place, and those restarts count toward
/// `backoffLimit`.
fn past_backoff_limit_on_failure(spec: &JobSpec, pods: &[Arc<Pod>]) -> bool {
    let policy = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref());
    if policy != Some("OnFailure") {
        return false;
    }
    let restarts: i64 = pods
        .iter()
        .filter(|p| matches!(util::phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            let init = s.init_container_statuses.iter().flatten();
            init.chain(s.container_statuses.iter().flatten())
        })
        .map(|c| i64::from(c.restart_count))
        .sum();
    match spec.backoff_limit.unwrap_or(6) {
        0 => restarts > 0,
        limit => restarts >= i64::from(limit),
    }
}

/// `status.succeeded` / `status.failed`.
struct Counters {
    succeeded: i32,
    failed: i32,
}

/// `status.uncountedTerminatedPods`: finished pods recorded, not yet
/// counted.
#[derive(Debug, Default, PartialEq, Eq)]
struct Uncounted {
    succeeded: Vec<String>,
    failed: Vec<String>,
}

impl Uncounted {
    fn of(status: &JobStatus) -> Uncounted {
        let u = status.uncounted_terminated_pods.as_ref();
        Uncounted {
            succeeded: u.and_then(|u| u.succeeded.clone()).unwrap_or_default(),
            failed: u.and_then(|u| u.failed.clone()).unwrap_or_default(),
        }
    }

    fn has_succeeded(&self, p: &Pod) -> bool {
        self.succeeded.iter().any(|u| u == uid_of(p))
    }

    fn has_failed(&self, p: &Pod) -> bool {
        self.failed.iter().any(|u| u == uid_of(p))
    }

    fn len(&self) -> usize {
        self.succeeded.len() + self.failed.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// kube's `cleanUncountedPodsWithoutFinalizers`: the recorded pods
    /// that no longer carry the finalizer move into the counters. Returns
    /// whether any did.
    fn settle(&mut self, with_finalizer: &HashSet<String>, counted: &mut Counters) -> bool {
        let before = self.len();
        let (s, f) = (self.succeeded.len(), self.failed.len());
        self.succeeded.retain(|u| with_finalizer.contains(u));
        self.failed.retain(|u| with_finalizer.contains(u));
        counted.succeeded += count(s - self.succeeded.len());
        counted.failed += count(f - self.failed.len());
        self.len() != before
    }

    /// The merge-patch value: an emptied list is removed.
    fn to_json(&self) -> serde_json::Value {
        let list = |l: &Vec<String>| if l.is_empty() { json!(null) } else { json!(l) };
        json!({"succeeded": list(&self.succeeded), "failed": list(&self.failed)})
    }
}

/// How soon a finishing Job with pods it could not delete yet is looked at
/// again.
const FINISH_RETRY: Duration = Duration::from_secs(1);

fn ts_add(t: jiff::Timestamp, secs: i64) -> jiff::Timestamp {
    t.checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or(t)
}

fn until(at: jiff::Timestamp, now: jiff::Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or_default()
}

fn cond_true(conds: &[JobCondition], t: &str) -> bool {
    conds.iter().any(|c| c.type_ == t && c.status == "True")
}

fn set_cond(conds: &mut Vec<JobCondition>, t: &str, reason: &str, message: &str) {
    if cond_true(conds, t) {
        return;
    }
    conds.retain(|c| c.type_ != t);
    let now = util::now_time();
    conds.push(JobCondition {
        type_: t.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now),
    });
}

async fn reconcile(job: Arc<Job>, ctx: Arc<super::Shared>) -> Result<Action, ReconcileError> {
    let ctx: &Ctx = &ctx;
    let key = format!("job/{}", key_of(&job.metadata));
    // A cached Job older than this controller's last status write would
    // miss pods already counted and gone, and start their work again: read
    // it from the server until the cache has caught up.
    let job = match ctx.job_status.get(&key) {
        Some(rv) if job.metadata.resource_version.as_deref() != Some(&*rv) => {
            let ns = job.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Job> = Api::namespaced(ctx.client(accounts::JOB).clone(), &ns);
            match api
                .get_opt(job.metadata.name.as_deref().unwrap_or_default())
                .await
            {
                Ok(Some(live)) if live.metadata.uid == job.metadata.uid => Arc::new(live),
                Ok(_) => {
                    ctx.job_status.forget(&key);
                    return Ok(Action::await_change());
                }
                Err(e) => return Err(ReconcileError::new(e)),
            }
        }
        Some(_) => {
            ctx.job_status.forget(&key);
            job
        }
        None => job,
    };
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let spec = job.spec.clone().unwrap_or_default();
    let old = job.status.clone().unwrap_or_default();
    let mut conds = old.conditions.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();

    // Finished: only the TTL is left to handle.
    if cond_true(&conds, "Complete") || cond_true(&conds, "Failed") {
        let Some(ttl) = spec.ttl_seconds_after_finished else {
            return Ok(Action::await_change());
        };
        let finished = old
            .completion_time
            .as_ref()
            .map(|t| t.0)
            .or_else(|| {
                conds
                    .iter()
                    .filter(|c| c.type_ == "Complete" || c.type_ == "Failed")
                    .find_map(|c| c.last_transition_time.as_ref().map(|t| t.0))
            })
            .unwrap_or(now);
        let expire = ts_add(finished, i64::from(ttl));
        if expire > now {
            return Ok(Action::requeue(
                until(expire, now) + Duration::from_millis(10),
            ));
        }
        // kube's ttl-after-finished controller, under its own identity.
        let api: Api<Job> = Api::namespaced(ctx.client(accounts::TTL_AFTER_FINISHED).clone(), &ns);
        let mut dp = DeleteParams::background();
        dp.preconditions = Some(kube::api::Preconditions {
            uid: job.metadata.uid.clone(),
            resource_version: None,
        });
        match api.delete(&name, &dp).await {
            Ok(_) => {}
            Err(e) if crate::is_not_found(&e) || crate::is_conflict(&e) => {}
            Err(e) => return Err(ReconcileError::new(e)),
        }
        return Ok(Action::await_change());
    }

    let deleting = job.metadata.deletion_timestamp.is_some();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    // Expectations first, against the index the pods are then read from.
    let satisfied = ctx
        .expectations
        .satisfied(&key, |id| ctx.pod_index.lookup(&ctx.pods, id));
    let pods = ctx.pod_index.owned_by(&ctx.pods, &uid);
    let active: Vec<&Arc<Pod>> = pods.iter().filter(|p| is_active(p)).collect();
    // Pods whose finalizer this controller already removed, though the
    // cache still shows it: counted before, not again.
    let showing: HashSet<&str> = pods
        .iter()
        .filter(|p| has_tracking_finalizer(p))
        .map(|p| uid_of(p))
        .collect();
    let removing = ctx
        .expectations
        .pending_finalizer_removals(&key, |id| showing.contains(id));
    let tracked = |p: &Pod| has_tracking_finalizer(p) && !removing.contains(uid_of(p));
    let mut uncounted = Uncounted::of(&old);
    let mut counted = Counters {
        succeeded: old.succeeded.unwrap_or(0),
        failed: old.failed.unwrap_or(0),
    };
    // kube's getStatus: the counters, the pods recorded as finished but not
    // yet counted, and the finished pods that still carry the finalizer.
    let new_succeeded = pods
        .iter()
        .filter(|p| tracked(p) && util::phase(p) == "Succeeded" && !uncounted.has_succeeded(p))
        .count();
    let new_failed = pods
        .iter()
        .filter(|p| tracked(p) && counts_as_failed(p, &spec) && !uncounted.has_failed(p))
        .count();
    let succeeded = counted.succeeded + count(new_succeeded + uncounted.succeeded.len());
    let failed = counted.failed + count(new_failed + uncounted.failed.len());
    let ready = active.iter().filter(|p| util::is_ready(p)).count() as i32;
    let suspended = spec.suspend.unwrap_or(false);
    // Resumed from suspension: the deadline counts from now (kube resets
    // `startTime`, so `activeDeadlineSeconds` restarts).
    let resumed = !suspended && cond_true(&conds, "Suspended");
    let start_time = if resumed {
        Some(util::now_time())
    } else {
        old.start_time
            .clone()
            .or_else(|| (!suspended).then(util::now_time))
    };

    let completions = spec.completions;
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);

    // Decide success or failure targets.
    let mut requeue: Option<Duration> = None;
    if !deleting && !cond_true(&conds, "FailureTarget") && !cond_true(&conds, "SuccessCriteriaMet")
    {
        // Once nothing runs (kube): pods beyond the completions still
        // running are removed first, as excess, and not counted.
        let complete = match completions {
            Some(c) => succeeded >= c && active.is_empty(),
            None => succeeded > 0 && active.is_empty(),
        };
        if complete {
            set_cond(
                &mut conds,
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
        } else if failed > backoff_limit || past_backoff_limit_on_failure(&spec, &pods) {
            set_cond(
                &mut conds,
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            );
        } else if let (Some(ads), Some(st), false) =
            (spec.active_deadline_seconds, start_time.as_ref(), suspended)
        {
            // (A suspended Job's deadline does not run: `pastActiveDeadline`.)
            let deadline = ts_add(st.0, ads);
            if deadline <= now {
                set_cond(
                    &mut conds,
                    "FailureTarget",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                );
            } else {
                requeue = Some(until(deadline, now) + Duration::from_millis(10));
            }
        }
    }
    let finishing = cond_true(&conds, "FailureTarget") || cond_true(&conds, "SuccessCriteriaMet");

    let api: Api<Pod> = Api::namespaced(ctx.client(accounts::JOB).clone(), &ns);
    let mut manage_err = None;
    // Pods this sync deleted: no longer active from here on (kube's
    // `active -= deleted`), so the sync that deletes a finishing Job's last
    // pods also finishes it instead of leaving that to a later sync.
    let mut deleted_now: HashSet<String> = HashSet::new();
    // kube's finishedCondition survives the sync only when every active pod
    // could be deleted and no pod event is outstanding.
    let mut finished_now = finishing && satisfied;
    if finishing && !deleting {
        // kube's deleteActivePods: finalizers stay, so the pods are counted
        // below (as failed when the Job fails).
        for p in &active {
            let pn = p.metadata.name.clone().unwrap_or_default();
            match api.delete(&pn, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(e) if crate::is_not_found(&e) => {}
                Err(e) => {
                    finished_now = false;
                    manage_err = manage_err.or(Some(e));
                    continue;
                }
            }
            deleted_now.insert(pn);
        }
    } else if satisfied && !deleting {
        let have = active.len() as i32;
        let want: i32 = if suspended {
            0
        } else {
            match completions {
                Some(c) => (c - succeeded).clamp(0, parallelism),
                // A work queue: once one worker succeeded, the others run
                // to their end (kube's `wantActive = active`); none is
                // started and none is killed.
                None if succeeded > 0 => have,
                None => parallelism,
            }
        };
        if have > want {
            let mut victims = active.clone();
            victims.sort_by(|a, b| super::replicaset::deletion_order(a, b));
            victims.truncate((have - want) as usize);
            for p in victims {
                // kube's deleteJobPods: the finalizer goes first, so a pod
                // removed on purpose never counts as failed.
                let pn = p.metadata.name.clone().unwrap_or_default();
                let removed = match release(&api, p).await {
                    Ok(()) => api
                        .delete(&pn, &DeleteParams::background())
                        .await
                        .map(|_| ()),
                    Err(e) => Err(e),
                };
                match removed {
                    Ok(()) => ctx.expectations.expect_del(&key, format!("{ns}/{pn}")),
                    Err(e) if crate::is_not_found(&e) => {}
                    Err(e) => return Err(ReconcileError::new(e)),
                }
                deleted_now.insert(pn);
            }
        } else if have < want {
            // Delay replacements after failures.
            let delay = replacement_delay(ctx, &pods, failed, now);
            if delay > Duration::ZERO {
                requeue = Some(requeue.map_or(delay, |r| r.min(delay)));
            } else if let Err(e) = create_pods(ctx, &job, &key, &api, (want - have) as usize).await
            {
                let _ = ctx
                    .events
                    .warning(&*job, "FailedCreate", "Create", &e.to_string())
                    .await;
                manage_err = Some(e);
            }
        }
    }

    // kube's trackJobStatusAndRemoveFinalizers: record finished pods in
    // `uncountedTerminatedPods`, then remove their finalizers, then move
    // them into the counters — so a pod is counted once, whatever is
    // deleted or crashes in between.
    let mut with_finalizer: HashSet<String> = pods
        .iter()
        .filter(|p| tracked(p))
        .map(|p| uid_of(p).to_string())
        .collect();
    let mut flush = uncounted.settle(&with_finalizer, &mut counted);
    let release_all = deleting || finished_now;
    let failing = finished_now && cond_true(&conds, "FailureTarget");
    let mut to_release: Vec<&Arc<Pod>> = Vec::new();
    let mut reached_max = false;
    for p in pods.iter().filter(|p| tracked(p)) {
        let failed_pod = counts_as_failed(p, &spec);
        let phase = util::phase(p);
        if !(release_all || phase == "Succeeded" || failed_pod) {
            continue;
        }
        to_release.push(p);
        if phase == "Succeeded" && !uncounted.has_failed(p) {
            if !uncounted.has_succeeded(p) {
                uncounted.succeeded.push(uid_of(p).to_string());
                flush = true;
            }
        } else if (failed_pod || failing) && !uncounted.has_failed(p) {
            // When the Job fails, every pod still running counts as failed.
            uncounted.failed.push(uid_of(p).to_string());
            flush = true;
        }
        if uncounted.len() >= MAX_UNCOUNTED_PODS {
            // The rest waits for the next sync, which this one's status
            // and pod changes bring.
            reached_max = true;
            break;
        }
    }

    let mut completion_time = old.completion_time.clone();
    let running = |p: &&Arc<Pod>| {
        is_active(p) && !deleted_now.contains(p.metadata.name.as_deref().unwrap_or_default())
    };
    let still_active = pods.iter().filter(running).count() as i32;
    if finishing && still_active > 0 {
        // Pods this sync could not delete (expectations not yet met): look
        // again rather than wait for an event that may already have passed.
        requeue = Some(requeue.map_or(FINISH_RETRY, |r| r.min(FINISH_RETRY)));
    }
    if suspended {
        set_cond(&mut conds, "Suspended", "JobSuspended", "Job suspended");
    } else if resumed {
        // kube keeps the condition, False, with why.
        let now = util::now_time();
        conds.retain(|c| c.type_ != "Suspended");
        conds.push(JobCondition {
            type_: "Suspended".into(),
            status: "False".into(),
            reason: Some("JobResumed".into()),
            message: Some("Job resumed".into()),
            last_probe_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
    }
    let active_now = if finishing {
        still_active
    } else {
        active.len() as i32
    };
    let status_of = |counted: &Counters,
                     uncounted: &Uncounted,
                     conds: &[JobCondition],
                     completion_time: &Option<Time>| {
        json!({
            "active": if active_now > 0 { json!(active_now) } else { json!(null) },
            "succeeded": if counted.succeeded > 0 { json!(counted.succeeded) } else { json!(null) },
            "failed": if counted.failed > 0 { json!(counted.failed) } else { json!(null) },
            "ready": ready,
            "startTime": start_time.as_ref().map(|t: &Time| t.0.to_string()),
            "completionTime": completion_time.as_ref().map(|t| t.0.to_string()),
            "conditions": if conds.is_empty() { json!(null) } else { serde_json::to_value(conds).unwrap_or_default() },
            "uncountedTerminatedPods": uncounted.to_json(),
        })
    };
    let mut rv = job.metadata.resource_version.clone().unwrap_or_default();
    let mut written = None;
    if flush {
        // The finished pods are on record before their finalizers go.
        let status = status_of(&counted, &uncounted, &conds, &completion_time);
        match write_status(ctx, &key, &job, &rv, status.clone()).await {
            Ok(next) => {
                rv = next;
                written = Some(status);
            }
            Err(e) if crate::is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(ReconcileError::new(e)),
        }
    }
    if !to_release.is_empty() {
        ctx.expectations
            .expect_finalizers_removed(&key, to_release.iter().map(|p| uid_of(p).to_string()));
        let results = join_all(to_release.iter().map(|p| release(&api, p))).await;
        for (p, r) in to_release.iter().zip(results) {
            let id = uid_of(p);
            match r {
                Ok(()) => {}
                Err(e) => {
                    ctx.expectations.finalizer_removal_failed(&key, id);
                    if !crate::is_not_found(&e) {
                        manage_err = manage_err.or(Some(e));
                        continue;
                    }
                }
            }
            with_finalizer.remove(id);
        }
    }
    uncounted.settle(&with_finalizer, &mut counted);

    // Terminal conditions once nothing runs and every pod is counted.
    if finished_now && still_active == 0 && uncounted.is_empty() && !reached_max {
        if cond_true(&conds, "SuccessCriteriaMet") {
            set_cond(
                &mut conds,
                "Complete",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
            completion_time = completion_time.or_else(|| Some(util::now_time()));
        } else if let Some(ft) = conds.iter().find(|c| c.type_ == "FailureTarget").cloned() {
            set_cond(
                &mut conds,
                "Failed",
                ft.reason.as_deref().unwrap_or("BackoffLimitExceeded"),
                ft.message.as_deref().unwrap_or_default(),
            );
        }
        if let Some(ttl) = spec.ttl_seconds_after_finished {
            requeue = Some(
                Duration::from_secs(u64::try_from(ttl).unwrap_or(0)) + Duration::from_millis(10),
            );
        }
    }
    let status = status_of(&counted, &uncounted, &conds, &completion_time);
    let unchanged = match &written {
        Some(w) => *w == status,
        None => {
            old.active.unwrap_or(0) == active_now
                && old.succeeded.unwrap_or(0) == counted.succeeded
                && old.failed.unwrap_or(0) == counted.failed
                && Uncounted::of(&old) == uncounted
                && old.ready.unwrap_or(0) == ready
                && old.start_time == start_time
                && old.completion_time == completion_time
                && old.conditions.clone().unwrap_or_default() == conds
        }
    };
    if !unchanged {
        match write_status(ctx, &key, &job, &rv, status).await {
            Ok(_) => {}
            Err(e) if crate::is_not_found(&e) => {}
            Err(e) => return Err(ReconcileError::new(e)),
        }
    }
    if let Some(e) = manage_err {
        return Err(ReconcileError::new(e));
    }
    Ok(match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

/// Write the Job's status, guarded by the resourceVersion it was computed
/// from (kube updates it so), so counts computed from a stale copy are
/// refused rather than written; returns the new resourceVersion.
async fn write_status(
    ctx: &Ctx,
    key: &str,
    job: &Job,
    rv: &str,
    status: serde_json::Value,
) -> Result<String, kube::Error> {
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<Job> = Api::namespaced(ctx.client(accounts::JOB).clone(), ns);
    let written = api
        .patch_status(
            job.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": rv}, "status": status})),
        )
        .await?;
    let rv = written.metadata.resource_version.unwrap_or_default();
    ctx.job_status.record(key.to_string(), rv.clone());
    Ok(rv)
}

/// Remove the tracking finalizer from `pod` (kube's
/// `removeTrackingFinalizerPatch`).
async fn release(api: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    if !has_tracking_finalizer(pod) {
        return Ok(());
    }
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}
        })),
    )
    .await
    .map(|_| ())
}

/// How long to wait before replacing failed pods: base × 2^(failures-1)
/// after the newest failure, capped at 6 minutes.
fn replacement_delay(ctx: &Ctx, pods: &[Arc<Pod>], failed: i32, now: jiff::Timestamp) -> Duration {
    let base = ctx.opts.job_backoff_base;
    if failed == 0 || base.is_zero() {
        return Duration::ZERO;
    }
    let last_failure = pods
        .iter()
        .filter(|p| util::phase(p) == "Failed")
        .filter_map(|p| {
            p.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0))
                .max()
        })
        .max();
    let Some(last) = last_failure else {
        return Duration::ZERO;
    };
    let exp = u32::try_from(failed - 1).unwrap_or(0).min(16);
    let delay = base
        .saturating_mul(1u32 << exp)
        .min(Duration::from_secs(360));
    let at = last
        .checked_add(jiff::SignedDuration::try_from(delay).unwrap_or_default())
        .unwrap_or(last);
    if at > now {
        until(at, now)
    } else {
        Duration::ZERO
    }
}

async fn create_pods(
    ctx: &Ctx,
    job: &Job,
    key: &str,
    api: &Api<Pod>,
    n: usize,
) -> Result<(), kube::Error> {
    let Some(owner) = util::owner_ref(job) else {
        return Ok(());
    };
    let name = job.metadata.name.clone().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let mut template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let labels = template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(BTreeMap::new);
    for (k, v) in [
        ("batch.kubernetes.io/controller-uid", &uid),
        ("batch.kubernetes.io/job-name", &name),
        ("controller-uid", &uid),
        ("job-name", &name),
    ] {
        labels.insert(k.into(), v.clone());
    }
    let finalizers = template
        .metadata
        .get_or_insert_with(Default::default)
        .finalizers
        .get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.into());
    }
    let pod = util::pod_from_template(&template, owner, None, &name);
    let pp = PostParams::default();
    let results =
        join_all((0..n.min(ctx.opts.burst_replicas.max(1))).map(|_| api.create(&pp, &pod))).await;
    let mut first = None;
    for r in results {
        match r {
            Ok(p) => ctx.expectations.expect_add(key, key_of(&p.metadata)),
            // As kube's job controller: the namespace is being deleted, so
            // every create fails; nothing to retry.
            Err(e) if crate::is_namespace_terminating(&e) => {}
            Err(e) => first = first.or(Some(e)),
        }
    }
    first.map_or(Ok(()), Err)
}
