//! The CronJob controller (batch/v1): at each scheduled time (standard
//! 5-field cron or `@hourly`-style macros, parsed with `croner`; UTC, or
//! `spec.timeZone` when it names a zone the system knows) it creates the
//! Job `<name>-<minutes since the epoch>` from `jobTemplate`, owned by the
//! CronJob and annotated with `batch.kubernetes.io/cronjob-scheduled-timestamp`.
//!
//! `concurrencyPolicy` Allow / Forbid (skip while a Job runs) / Replace
//! (delete the running Job first); `startingDeadlineSeconds` (a start
//! missed by more is skipped, with a Warning event); `suspend`;
//! `successfulJobsHistoryLimit` / `failedJobsHistoryLimit` (older finished
//! Jobs deleted); `status.active`, `lastScheduleTime` and
//! `lastSuccessfulTime`. Only the most recent missed start is run, as
//! kube does; more than 100 missed starts raise a TooManyMissedTimes
//! warning. "Now" comes from [`WorkloadOptions::clock`](super::WorkloadOptions),
//! so tests move time.

use crate::clients::accounts;
use std::sync::Arc;
use std::time::Duration;

use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kubeforge_runtime::{Action, Manager, ReconcileError};
use serde_json::json;

use super::Ctx;
use super::util::{self, controller_of};

/// The annotation with a Job's scheduled time.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Register the controller with `mgr`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    mgr.controller::<CronJob, _>("cronjob", super::Shared(ctx.clone()))
        .owns::<Job>()
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile);
}

fn finished(j: &Job) -> Option<(&'static str, Option<Timestamp>)> {
    let conds = j.status.as_ref()?.conditions.as_ref()?;
    for c in conds {
        if c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed") {
            let kind = if c.type_ == "Complete" {
                "Complete"
            } else {
                "Failed"
            };
            let at = j
                .status
                .as_ref()
                .and_then(|s| s.completion_time.as_ref())
                .or(c.last_transition_time.as_ref())
                .map(|t| t.0);
            return Some((kind, at));
        }
    }
    None
}

fn job_ref(j: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: j.metadata.name.clone(),
        namespace: j.metadata.namespace.clone(),
        uid: j.metadata.uid.clone(),
        resource_version: j.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

async fn reconcile(cj: Arc<CronJob>, ctx: Arc<super::Shared>) -> Result<Action, ReconcileError> {
    let ctx: &Ctx = &ctx;
    if cj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = cj.metadata.namespace.clone().unwrap_or_default();
    let name = cj.metadata.name.clone().unwrap_or_default();
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let spec = cj.spec.clone().unwrap_or_default();
    let now = ctx.opts.clock.now();
    let jobs_api: Api<Job> = Api::namespaced(ctx.client(accounts::CRONJOB).clone(), &ns);

    let mut jobs: Vec<Arc<Job>> = ctx
        .jobs
        .state()
        .into_iter()
        .filter(|j| j.metadata.namespace.as_deref() == Some(&ns))
        .filter(|j| controller_of(&j.metadata).is_some_and(|r| r.uid == uid))
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .collect();
    jobs.sort_by_key(|j| j.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let old = cj.status.clone().unwrap_or_default();
    let mut last_success = old.last_successful_time.as_ref().map(|t| t.0);
    let mut active: Vec<ObjectReference> = Vec::new();
    let (mut succeeded, mut failed) = (Vec::new(), Vec::new());
    for j in &jobs {
        match finished(j) {
            None => active.push(job_ref(j)),
            Some(("Complete", at)) => {
                if let Some(at) = at {
                    last_success = Some(last_success.map_or(at, |l| l.max(at)));
                }
                succeeded.push(j.clone());
            }
            Some(_) => failed.push(j.clone()),
        }
    }
    // History limits: delete the oldest finished Jobs beyond them.
    for (list, limit) in [
        (&succeeded, spec.successful_jobs_history_limit.unwrap_or(3)),
        (&failed, spec.failed_jobs_history_limit.unwrap_or(1)),
    ] {
        let limit = usize::try_from(limit.max(0)).unwrap_or(0);
        if list.len() > limit {
            for j in list.iter().take(list.len() - limit) {
                let n = j.metadata.name.clone().unwrap_or_default();
                match jobs_api.delete(&n, &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(e) if crate::is_not_found(&e) => {}
                    Err(e) => return Err(ReconcileError::new(e)),
                }
            }
        }
    }

    let mut last_schedule = old.last_schedule_time.as_ref().map(|t| t.0);
    // Our Jobs say when they were scheduled: a reconcile reading a CronJob
    // older than its Jobs (the status write not yet in the cache) must not
    // move lastScheduleTime back, or Forbid would never record it again.
    for j in &jobs {
        if let Some(t) = j
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SCHEDULED_TIMESTAMP))
            .and_then(|v| v.parse::<jiff::Timestamp>().ok())
        {
            last_schedule = Some(last_schedule.map_or(t, |l| l.max(t)));
        }
    }
    let mut next_wake: Option<Duration> = None;
    let parsed = parse(&spec.schedule, spec.time_zone.as_deref());
    match (&parsed, spec.suspend.unwrap_or(false)) {
        (Err(msg), _) => {
            let _ = ctx
                .events
                .warning(&*cj, "UnparseableSchedule", "Schedule", msg)
                .await;
        }
        (Ok(_), true) => {}
        (Ok((cron, tz)), false) => {
            let created = cj.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
            let mut earliest = last_schedule.unwrap_or(created);
            if let Some(sds) = spec.starting_deadline_seconds {
                let floor = now
                    .checked_sub(jiff::SignedDuration::from_secs(sds))
                    .unwrap_or(now);
                earliest = earliest.max(floor);
            }
            // The most recent start time in (earliest, now].
            let mut scheduled = None;
            let mut missed = 0u32;
            let mut t = earliest;
            while let Some(n) = next_after(cron, tz, t) {
                if n > now {
                    break;
                }
                scheduled = Some(n);
                missed += 1;
                t = n;
                if missed > 100_000 {
                    break;
                }
            }
            if missed > 100 {
                let _ = ctx
                    .events
                    .warning(&*cj, "TooManyMissedTimes", "Schedule", &format!("too many missed start times: {missed}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"))
                    .await;
            }
            if let Some(at) = scheduled {
                let too_late = spec.starting_deadline_seconds.is_some_and(|sds| {
                    at.checked_add(jiff::SignedDuration::from_secs(sds))
                        .is_ok_and(|deadline| deadline < now)
                });
                let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
                if too_late {
                    let _ = ctx
                        .events
                        .warning(
                            &*cj,
                            "MissSchedule",
                            "Schedule",
                            &format!("Missed scheduled time to start a job: {at}"),
                        )
                        .await;
                } else if policy == "Forbid" && !active.is_empty() {
                    // Not now; looked at again when the running Job finishes.
                } else {
                    if policy == "Replace" {
                        for r in active.drain(..) {
                            let n = r.name.unwrap_or_default();
                            match jobs_api.delete(&n, &DeleteParams::background()).await {
                                Ok(_) => {}
                                Err(e) if crate::is_not_found(&e) => {}
                                Err(e) => return Err(ReconcileError::new(e)),
                            }
                        }
                    }
                    let job = job_for(&cj, at);
                    match jobs_api.create(&PostParams::default(), &job).await {
                        Ok(j) => {
                            active.push(job_ref(&j));
                            let _ = ctx
                                .events
                                .normal(
                                    &*cj,
                                    "SuccessfulCreate",
                                    "Create",
                                    &format!("Created job {}", j.metadata.name.unwrap_or_default()),
                                )
                                .await;
                        }
                        // Created before (our Job cache is behind): it is
                        // still this schedule's Job, so it counts as active —
                        // else this status write would clear `active`.
                        Err(e) if crate::status_code(&e) == Some(409) => {
                            let n = job.metadata.name.clone().unwrap_or_default();
                            match jobs_api.get(&n).await {
                                Ok(j)
                                    if controller_of(&j.metadata).is_some_and(|r| r.uid == uid) =>
                                {
                                    if !active.iter().any(|r| r.name.as_deref() == Some(n.as_str()))
                                    {
                                        active.push(job_ref(&j));
                                    }
                                }
                                Ok(_) => {}
                                Err(e) if crate::is_not_found(&e) => {}
                                Err(e) => return Err(ReconcileError::new(e)),
                            }
                        }
                        Err(e) => {
                            let _ = ctx
                                .events
                                .warning(&*cj, "FailedCreate", "Create", &e.to_string())
                                .await;
                            return Err(ReconcileError::new(e));
                        }
                    }
                    last_schedule = Some(at);
                }
            }
            if let Some(n) = next_after(cron, tz, now) {
                next_wake = Some(
                    Duration::try_from(n.duration_since(now)).unwrap_or_default()
                        + Duration::from_millis(100),
                );
            }
        }
    }

    let status = json!({
        "active": if active.is_empty() { json!(null) } else { json!(active) },
        "lastScheduleTime": last_schedule.map(|t| t.to_string()),
        "lastSuccessfulTime": last_success.map(|t| t.to_string()),
    });
    let old_names: Vec<Option<String>> = old
        .active
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    let new_names: Vec<Option<String>> = active.iter().map(|r| r.name.clone()).collect();
    let same = old_names == new_names
        && old.last_schedule_time.as_ref().map(|t| t.0) == last_schedule
        && old.last_successful_time.as_ref().map(|t| t.0) == last_success;
    if !same {
        match util::patch_status::<CronJob>(ctx.client(accounts::CRONJOB), Some(&ns), &name, status)
            .await
        {
            Ok(()) => {}
            Err(e) if crate::is_not_found(&e) => {}
            Err(e) => return Err(ReconcileError::new(e)),
        }
    }
    let wake = match (next_wake, ctx.opts.clock.max_wait()) {
        (Some(n), Some(m)) => Some(n.min(m)),
        (None, Some(m)) if parsed.is_ok() => Some(m),
        (n, _) => n,
    };
    Ok(match wake {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

fn parse(schedule: &str, tz: Option<&str>) -> Result<(croner::Cron, TimeZone), String> {
    let parser = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build();
    let cron = parser
        .parse(schedule.trim())
        .map_err(|e| format!("unparseable schedule {schedule:?}: {e}"))?;
    let tz = match tz {
        None | Some("UTC") | Some("Etc/UTC") | Some("") => TimeZone::UTC,
        Some(name) => {
            TimeZone::get(name).map_err(|e| format!("unknown time zone {name:?}: {e}"))?
        }
    };
    Ok((cron, tz))
}

fn next_after(cron: &croner::Cron, tz: &TimeZone, t: Timestamp) -> Option<Timestamp> {
    cron.find_next_occurrence(&t.to_zoned(tz.clone()), false)
        .ok()
        .map(|z| z.timestamp())
}

fn job_for(cj: &CronJob, at: Timestamp) -> Job {
    let name = cj.metadata.name.clone().unwrap_or_default();
    let tmpl = cj
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let tm = tmpl.metadata.unwrap_or_default();
    let mut annotations = tm.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIMESTAMP.into(), at.to_string());
    Job {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{}", at.as_second().div_euclid(60))),
            namespace: cj.metadata.namespace.clone(),
            labels: tm.labels,
            annotations: Some(annotations),
            owner_references: util::owner_ref(cj).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: tmpl.spec,
        status: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn named_time_zones_are_known() {
        // 09:00 in Berlin is 08:00 UTC in December (jiff reads the system's
        // zoneinfo, with a bundled copy when it has none).
        let (cron, tz) = parse("0 9 * * *", Some("Europe/Berlin")).unwrap();
        let next = next_after(&cron, &tz, "2026-12-01T00:00:00Z".parse().unwrap()).unwrap();
        assert_eq!(next.to_string(), "2026-12-01T08:00:00Z");
        assert!(parse("0 9 * * *", Some("Mars/Olympus")).is_err());
    }
}
