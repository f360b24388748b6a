//! The Job controller (NonIndexed completion mode): keeps
//! `min(parallelism, completions - succeeded)` pods active, counts
//! succeeded/failed/ready pods, sets `startTime`, fails the Job past
//! `backoffLimit` failures (BackoffLimitExceeded) or `activeDeadlineSeconds`
//! (DeadlineExceeded), completes it at `completions` successes, and deletes
//! a finished Job `ttlSecondsAfterFinished` later.
//!
//! Conditions follow Kubernetes 1.33: first `SuccessCriteriaMet` or
//! `FailureTarget`, then — once no pod is running — `Complete` or
//! `Failed` with `completionTime` on success. Pods the sync itself deletes
//! count as no longer running (kube's `active -= deleted`), so the sync that
//! deletes a finishing Job's last pods also finishes it; one that could not
//! delete them all yet looks again after a second instead of relying on a
//! pod event. Pods get the
//! `batch.kubernetes.io/job-name` / `controller-uid` labels (and the legacy
//! `job-name` / `controller-uid`). Failed pods are replaced after an
//! exponential delay (`job_backoff_base` × 2^(failures-1), capped at 6
//! minutes; kube's is 10 s). Finished pods are counted from the cache (no
//! job-tracking finalizer), so counts survive only while the pods do;
//! counts never go down. Indexed completion mode and pod failure policies
//! are not implemented.

use crate::clients::accounts;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::{Action, Manager, ReconcileError};
use serde_json::json;

use super::Ctx;
use super::util::{self, controller_of, is_active, key_of};

/// Register the controller with `mgr`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    let idx = ctx.clone();
    mgr.controller::<Job, _>("job", super::Shared(ctx.clone()))
        .watches::<Pod, _>(move |pod| {
            idx.pod_index.observe(&idx.pods, pod);
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            controller_of(&pod.metadata)
                .filter(|r| r.kind == "Job" && r.api_version == "batch/v1")
                .map(|r| ObjectRef::<Job>::new(&r.name).within(ns))
        })
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile);
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
    if job.metadata.deletion_timestamp.is_some() {
        ctx.expectations.forget(&key);
        return Ok(Action::await_change());
    }
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

    let uid = job.metadata.uid.clone().unwrap_or_default();
    // Expectations first, against the index the pods are then read from.
    let satisfied = ctx
        .expectations
        .satisfied(&key, |id| ctx.pod_index.lookup(&ctx.pods, id));
    let pods = ctx.pod_index.owned_by(&ctx.pods, &uid);
    let active: Vec<&Arc<Pod>> = pods.iter().filter(|p| is_active(p)).collect();
    let succeeded_seen = pods
        .iter()
        .filter(|p| util::phase(p) == "Succeeded")
        .count() as i32;
    let failed_seen = pods.iter().filter(|p| util::phase(p) == "Failed").count() as i32;
    let succeeded = old.succeeded.unwrap_or(0).max(succeeded_seen);
    let failed = old.failed.unwrap_or(0).max(failed_seen);
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
    if !cond_true(&conds, "FailureTarget") && !cond_true(&conds, "SuccessCriteriaMet") {
        let complete = match completions {
            Some(c) => succeeded >= c,
            None => succeeded > 0 && active.is_empty(),
        };
        if complete {
            set_cond(
                &mut conds,
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
        } else if failed > backoff_limit {
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
    let mut create_err = None;
    // Pods this sync deleted: no longer active from here on (kube's
    // `active -= deleted`), so the sync that deletes a finishing Job's last
    // pods also finishes it instead of leaving that to a later sync.
    let mut deleted_now: HashSet<String> = HashSet::new();
    if satisfied {
        let have = active.len() as i32;
        let want: i32 = if finishing || suspended {
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
                let pn = p.metadata.name.clone().unwrap_or_default();
                match api.delete(&pn, &DeleteParams::background()).await {
                    Ok(_) => ctx.expectations.expect_del(&key, format!("{ns}/{pn}")),
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
            } else {
                match create_pods(ctx, &job, &key, &api, (want - have) as usize).await {
                    Ok(()) => {}
                    Err(e) => create_err = Some(e),
                }
            }
        }
    }

    // Terminal conditions once nothing runs any more.
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
    if finishing && still_active == 0 {
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
    let status = json!({
        "active": if active_now > 0 { json!(active_now) } else { json!(null) },
        "succeeded": if succeeded > 0 { json!(succeeded) } else { json!(null) },
        "failed": if failed > 0 { json!(failed) } else { json!(null) },
        "ready": ready,
        "startTime": start_time.as_ref().map(|t: &Time| t.0.to_string()),
        "completionTime": completion_time.as_ref().map(|t| t.0.to_string()),
        "conditions": if conds.is_empty() { json!(null) } else { serde_json::to_value(&conds).unwrap_or_default() },
        "uncountedTerminatedPods": {},
    });
    let same = old.active.unwrap_or(0) == active_now
        && old.succeeded.unwrap_or(0) == succeeded
        && old.failed.unwrap_or(0) == failed
        && old.ready.unwrap_or(0) == ready
        && old.start_time == start_time
        && old.completion_time == completion_time
        && old.conditions.clone().unwrap_or_default() == conds;
    if !same {
        match util::patch_status::<Job>(ctx.client(accounts::JOB), Some(&ns), &name, status).await {
            Ok(()) => {}
            Err(e) if crate::is_not_found(&e) => {}
            Err(e) => return Err(ReconcileError::new(e)),
        }
    }
    if let Some(e) = create_err {
        let _ = ctx
            .events
            .warning(&*job, "FailedCreate", "Create", &e.to_string())
            .await;
        return Err(ReconcileError::new(e));
    }
    Ok(match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
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
