//! The CronTab reconciler: at each scheduled time (from the injected
//! [`Clock`]) it creates the Job for that time, owned by the CronTab, and
//! keeps `status` (`active`, `lastScheduleTime`, `lastSuccessfulTime`) and
//! the Job history up to date. The decisions are [`schedule::plan`]'s; this
//! module only reads the caches and writes what the plan says.
//!
//! Events, as the CronJob controller records them: `SuccessfulCreate`,
//! `SuccessfulDelete` (replaced or pruned Jobs), `SawCompletedJob`,
//! `MissSchedule` and `TooManyMissedTimes` (warnings), `UnparseableSchedule`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kubeforge_runtime::events::EventRecorder;
use kubeforge_runtime::{Action, Cache, Manager, ReconcileError};
use serde_json::json;
use tracing::{debug, info, warn};

use super::jobs;
use super::schedule::{self, Clock, JobState, Schedule, ScheduleInput, Skip, SystemClock};
use super::types::{CronTab, DEFAULT_FAILED_HISTORY, DEFAULT_SUCCESSFUL_HISTORY};
use kubeforge_runtime::api_errors as kube_errors;

/// The controller's name (event reporter).
pub const CONTROLLER_NAME: &str = "crontab-controller";

/// How the controller runs.
#[derive(Clone)]
pub struct Options {
    /// Where "now" comes from ([`SystemClock`] by default; tests inject a
    /// [`ManualClock`](super::schedule::ManualClock)).
    pub clock: Arc<dyn Clock>,
    /// CronTabs reconciled at once.
    pub max_concurrent_reconciles: u16,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            clock: Arc::new(SystemClock),
            max_concurrent_reconciles: 4,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("max_concurrent_reconciles", &self.max_concurrent_reconciles)
            .finish_non_exhaustive()
    }
}

/// What the reconciler works with.
pub struct Context {
    client: Client,
    events: EventRecorder,
    jobs: Cache<Job>,
    clock: Arc<dyn Clock>,
}

/// Registers the CronTab controller with `mgr` (it runs with `mgr.run()`).
pub fn register(mgr: &Manager, options: Options) {
    let ctx = Context {
        client: mgr.client(),
        events: EventRecorder::new(mgr.client(), CONTROLLER_NAME),
        jobs: mgr.store::<Job>(),
        clock: options.clock.clone(),
    };
    mgr.controller::<CronTab, _>("crontab", ctx)
        .owns::<Job>()
        .writes_status()
        .records_events()
        .max_concurrent_reconciles(options.max_concurrent_reconciles)
        .register(reconcile);
}

/// One reconcile of one CronTab (see the module docs).
pub async fn reconcile(ct: Arc<CronTab>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    if ct.metadata.deletion_timestamp.is_some() {
        // Its Jobs are owned: the garbage collector removes them.
        return Ok(Action::await_change());
    }
    let ns = ct
        .namespace()
        .ok_or_else(|| ReconcileError::terminal("CronTab has no namespace"))?;
    let name = ct.name_any();
    let cts: Api<CronTab> = Api::namespaced(ctx.client.clone(), &ns);
    let job_api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);

    let sched = match Schedule::parse(&ct.spec.cron_spec) {
        Ok(s) => s,
        Err(e) => {
            ctx.events
                .warning(&*ct, "UnparseableSchedule", "Schedule", &e.to_string())
                .await?;
            // Nothing to do until the spec changes.
            return Ok(Action::await_change());
        }
    };

    // This CronTab's Jobs, from the shared cache.
    let uid = ct.uid();
    let mut owned: Vec<Arc<Job>> = ctx
        .jobs
        .state()
        .into_iter()
        .filter(|j| j.namespace().as_deref() == Some(ns.as_str()))
        .filter(|j| {
            j.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
        })
        .collect();
    owned.sort_by_key(|j| j.name_any());

    let status = ct.status.clone().unwrap_or_default();
    let mut last_successful = status.last_successful_time.as_ref().map(|t| t.0);
    for j in &owned {
        if let JobState::Succeeded(Some(done)) = jobs::state(j)
            && last_successful.is_none_or(|l| done > l)
        {
            last_successful = Some(done);
            let note = format!("Saw completed job: {}, status: Complete", j.name_any());
            ctx.events
                .normal(&*ct, "SawCompletedJob", "Track", &note)
                .await?;
        }
    }
    let mut active: Vec<Arc<Job>> = owned
        .iter()
        .filter(|j| jobs::state(j) == JobState::Active && j.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();

    let now = ctx.clock.now();
    let mut last_schedule = status.last_schedule_time.as_ref().map(|t| t.0);
    let created = ct
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let plan = schedule::plan(
        &sched,
        &ScheduleInput {
            created,
            last_schedule,
            now,
            starting_deadline_seconds: ct.spec.starting_deadline_seconds,
            suspend: ct.spec.suspend,
            policy: ct.spec.concurrency_policy,
            active_jobs: active.len(),
        },
    );
    if plan.too_many_missed {
        ctx.events
            .warning(
                &*ct,
                "TooManyMissedTimes",
                "Schedule",
                "too many missed start times; set or decrease .spec.startingDeadlineSeconds or check clock skew",
            )
            .await?;
    }
    match plan.skipped {
        Some(Skip::TooLate(t)) => {
            let note = format!("Missed scheduled time to start a job: {t}");
            ctx.events
                .warning(&*ct, "MissSchedule", "Schedule", &note)
                .await?;
        }
        Some(Skip::Forbidden(t)) => {
            debug!(namespace = %ns, name = %name, scheduled = %t, "Forbid: a job is still active, skipping");
        }
        None => {}
    }
    if let Some(t) = plan.run {
        let job_name = schedule::job_name(&name, t);
        // A stale cache may show this run as not made yet: its Job (named
        // after the time) tells the truth.
        let already = owned.iter().any(|j| j.name_any() == job_name);
        if !already {
            if plan.replace_active {
                for j in &active {
                    delete_job(&job_api, j, &ct, &ctx, "replaced by a newer run").await?;
                }
                active.clear();
            }
            let Some(job) = jobs::job(&ct, t) else {
                return Err(ReconcileError::terminal("CronTab has no uid"));
            };
            match job_api.create(&PostParams::default(), &job).await {
                Ok(created) => {
                    info!(namespace = %ns, name = %name, job = %job_name, scheduled = %t, "created job");
                    let note = format!("Created job {job_name}");
                    ctx.events
                        .normal(&*ct, "SuccessfulCreate", "Create", &note)
                        .await?;
                    active.push(Arc::new(created));
                }
                Err(e) if kube_errors::is_already_exists(&e) => {
                    let existing = job_api.get(&job_name).await?;
                    if jobs::state(&existing) == JobState::Active {
                        active.push(Arc::new(existing));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        last_schedule = Some(last_schedule.map_or(t, |l| l.max(t)));
    }

    // History limits over finished Jobs.
    let summaries: Vec<_> = owned.iter().map(|j| jobs::summary(j)).collect();
    let prune = schedule::history_to_delete(
        &summaries,
        ct.spec
            .successful_jobs_history_limit
            .unwrap_or(DEFAULT_SUCCESSFUL_HISTORY),
        ct.spec
            .failed_jobs_history_limit
            .unwrap_or(DEFAULT_FAILED_HISTORY),
    );
    for j in owned.iter().filter(|j| prune.contains(&j.name_any())) {
        if j.metadata.deletion_timestamp.is_none() {
            delete_job(&job_api, j, &ct, &ctx, "history limit").await?;
        }
    }

    active.sort_by_key(|j| j.name_any());
    active.dedup_by(|a, b| a.name_any() == b.name_any());
    let refs: Vec<_> = active.iter().map(|j| jobs::reference(j)).collect();
    let changed = status.last_schedule_time.as_ref().map(|t| t.0) != last_schedule
        || status.last_successful_time.as_ref().map(|t| t.0) != last_successful
        || status.active.iter().map(|r| &r.name).collect::<Vec<_>>()
            != refs.iter().map(|r| &r.name).collect::<Vec<_>>();
    if changed {
        // A merge patch of the status subresource: this controller is its
        // only writer, and the lists are replaced whole.
        let patch = json!({"status": {
            "lastScheduleTime": last_schedule.map(Time),
            "lastSuccessfulTime": last_successful.map(Time),
            "active": refs,
        }});
        match cts
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if kube_errors::is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    let wait = schedule::requeue_after(plan.next, now, ctx.clock.max_wait());
    Ok(Action::requeue(wait.max(Duration::from_millis(1))))
}

async fn delete_job(
    api: &Api<Job>,
    job: &Job,
    ct: &CronTab,
    ctx: &Context,
    why: &str,
) -> Result<(), ReconcileError> {
    let name = job.name_any();
    // Background propagation: the Job's pods go with it.
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => {
            debug!(job = %name, why, "deleted job");
            let note = format!("Deleted job {name} ({why})");
            if let Err(e) = ctx
                .events
                .normal(ct, "SuccessfulDelete", "Delete", &note)
                .await
            {
                warn!(job = %name, error = %e, "publishing event");
            }
            Ok(())
        }
        Err(e) if kube_errors::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
