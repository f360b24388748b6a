//! CronTab scheduling as pure functions of an injected clock: which run is
//! due, which missed runs are dropped, what the concurrency policy allows,
//! and which finished Jobs fall out of the history. The rules follow
//! Kubernetes' CronJob controller (`pkg/controller/cronjob`):
//!
//! - Only the **most recent** missed time is run; older ones are dropped.
//! - With `startingDeadlineSeconds`, a run whose time is further back than
//!   the deadline is skipped, and times before `now - deadline` are not even
//!   counted as missed.
//! - More than [`TOO_MANY_MISSED`] missed times produce a warning (the
//!   controller emits a `TooManyMissedTimes` event) but still run the most
//!   recent one.
//!
//! Schedules are parsed with the `croner` crate (standard 5-field syntax,
//! `0`/`7` = Sunday, day-of-month OR day-of-week as in Vixie cron and
//! robfig/cron) and evaluated in UTC.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::types::ConcurrencyPolicy;

/// Missed start times beyond which a warning is raised (Kubernetes uses 100).
pub const TOO_MANY_MISSED: u32 = 100;

/// A source of "now", so tests move time instead of sleeping.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
    /// The longest a controller should wait before looking at the clock
    /// again. The wall clock lets it sleep until the next run; a manual
    /// clock can jump at any moment, so it asks for frequent looks.
    fn max_wait(&self) -> Option<Duration> {
        None
    }
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to (for tests and demos).
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Timestamp>>,
    poll: Duration,
}

impl ManualClock {
    /// A clock standing at `start`; controllers using it look at it every
    /// 20 ms of real time.
    pub fn new(start: Timestamp) -> ManualClock {
        ManualClock {
            now: Arc::new(Mutex::new(start)),
            poll: Duration::from_millis(20),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        let span = jiff::SignedDuration::try_from(by).unwrap_or(jiff::SignedDuration::MAX);
        *now = now.saturating_add(span).unwrap_or(*now);
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: Timestamp) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn max_wait(&self) -> Option<Duration> {
        Some(self.poll)
    }
}

/// A schedule that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error("invalid cronSpec {spec:?}: {reason}")]
    Invalid {
        /// The expression as given.
        spec: String,
        /// What the parser said.
        reason: String,
    },
}

/// A parsed cron schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: croner::Cron,
}

impl Schedule {
    /// Parses a standard 5-field expression or a macro (`@hourly`, ...).
    /// Seconds and years are refused, as Kubernetes does.
    pub fn parse(spec: &str) -> Result<Schedule, ScheduleError> {
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        parser
            .parse(spec.trim())
            .map(|cron| Schedule { cron })
            .map_err(|e| ScheduleError::Invalid {
                spec: spec.to_string(),
                reason: e.to_string(),
            })
    }

    /// The first scheduled time strictly after `t`.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let z = t.to_zoned(TimeZone::UTC);
        self.cron
            .find_next_occurrence(&z, false)
            .ok()
            .map(|z| z.timestamp())
    }

    /// The last scheduled time at or before `t`.
    pub fn latest_at_or_before(&self, t: Timestamp) -> Option<Timestamp> {
        let z = t.to_zoned(TimeZone::UTC);
        self.cron
            .find_previous_occurrence(&z, true)
            .ok()
            .map(|z| z.timestamp())
    }
}

/// The scheduling facts [`plan`] decides from.
#[derive(Debug, Clone)]
pub struct ScheduleInput {
    /// When the CronTab was created (the earliest time a run can be due).
    pub created: Timestamp,
    /// `status.lastScheduleTime`.
    pub last_schedule: Option<Timestamp>,
    /// Now, from the injected clock.
    pub now: Timestamp,
    /// `spec.startingDeadlineSeconds`.
    pub starting_deadline_seconds: Option<i64>,
    /// `spec.suspend`.
    pub suspend: bool,
    /// `spec.concurrencyPolicy`.
    pub policy: ConcurrencyPolicy,
    /// Jobs of this CronTab that have not finished.
    pub active_jobs: usize,
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Create the Job for this scheduled time.
    pub run: Option<Timestamp>,
    /// Delete the active Jobs first (`Replace`).
    pub replace_active: bool,
    /// A due run that is not made, and why.
    pub skipped: Option<Skip>,
    /// How many scheduled times were missed (more than one means runs were dropped).
    pub missed: u32,
    /// More than [`TOO_MANY_MISSED`] were missed.
    pub too_many_missed: bool,
    /// The next scheduled time after now (when to look again).
    pub next: Option<Timestamp>,
}

/// Why a due run was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Its time is more than `startingDeadlineSeconds` in the past.
    TooLate(Timestamp),
    /// `Forbid` and a Job is still active.
    Forbidden(Timestamp),
}

/// Decides what to do now (see the module docs for the rules).
pub fn plan(schedule: &Schedule, input: &ScheduleInput) -> Plan {
    let now = input.now;
    let next = schedule.next_after(now);
    let mut plan = Plan {
        run: None,
        replace_active: false,
        skipped: None,
        missed: 0,
        too_many_missed: false,
        next,
    };
    if input.suspend {
        return plan;
    }
    let mut earliest = input.last_schedule.unwrap_or(input.created);
    let deadline = input
        .starting_deadline_seconds
        .and_then(|s| jiff::SignedDuration::from_secs(s).checked_neg())
        .and_then(|d| now.checked_add(d).ok());
    if let Some(d) = deadline
        && d > earliest
    {
        earliest = d;
    }
    let Some(first) = schedule.next_after(earliest) else {
        return plan;
    };
    if first > now {
        return plan;
    }
    let Some(scheduled) = schedule.latest_at_or_before(now) else {
        return plan;
    };
    // Count missed times up to the warning threshold (never all of them:
    // a minutely schedule idle for a year has half a million).
    let mut missed = 1u32;
    let mut t = first;
    while missed <= TOO_MANY_MISSED {
        match schedule.next_after(t) {
            Some(n) if n <= now => {
                missed += 1;
                t = n;
            }
            _ => break,
        }
    }
    plan.missed = missed;
    plan.too_many_missed = missed > TOO_MANY_MISSED;
    if let Some(d) = deadline
        && scheduled < d
    {
        plan.skipped = Some(Skip::TooLate(scheduled));
        return plan;
    }
    if input.active_jobs > 0 {
        match input.policy {
            ConcurrencyPolicy::Allow => {}
            ConcurrencyPolicy::Forbid => {
                plan.skipped = Some(Skip::Forbidden(scheduled));
                return plan;
            }
            ConcurrencyPolicy::Replace => plan.replace_active = true,
        }
    }
    plan.run = Some(scheduled);
    plan
}

/// How long to wait (from `now`) before looking again.
pub fn requeue_after(
    next: Option<Timestamp>,
    now: Timestamp,
    clock_max: Option<Duration>,
) -> Duration {
    // Without a next time (an impossible date such as 30 Feb), look again
    // hourly: the spec may change.
    let until = next
        .and_then(|n| Duration::try_from(n.duration_since(now)).ok())
        .unwrap_or(Duration::from_secs(3600))
        // a little after the time, so the run is due when we look
        .saturating_add(Duration::from_millis(100));
    match clock_max {
        Some(m) => until.min(m),
        None => until,
    }
}

/// The Job name for a run: `<crontab>-<scheduled time in minutes since
/// the epoch>`, as the CronJob controller names Jobs. The same time always
/// gives the same name, so a retried create finds `AlreadyExists` instead
/// of making a second Job.
pub fn job_name(crontab: &str, scheduled: Timestamp) -> String {
    format!("{crontab}-{}", scheduled.as_second().div_euclid(60))
}

/// Where a Job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Not finished.
    Active,
    /// Finished with a `Complete` condition (at this time, if known).
    Succeeded(Option<Timestamp>),
    /// Finished with a `Failed` condition.
    Failed,
}

/// A finished or running Job, as the history rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    /// Job name.
    pub name: String,
    /// Its scheduled (or creation) time, for ordering.
    pub started: Timestamp,
    /// Where it stands.
    pub state: JobState,
}

/// Names of finished Jobs to delete so at most `successful_limit`
/// successful and `failed_limit` failed ones remain (the oldest go first).
pub fn history_to_delete(
    jobs: &[JobSummary],
    successful_limit: i32,
    failed_limit: i32,
) -> Vec<String> {
    let mut out = Vec::new();
    for (limit, is_kind) in [
        (
            successful_limit,
            (|s: &JobState| matches!(s, JobState::Succeeded(_))) as fn(&JobState) -> bool,
        ),
        (failed_limit, |s: &JobState| matches!(s, JobState::Failed)),
    ] {
        let mut finished: Vec<&JobSummary> = jobs.iter().filter(|j| is_kind(&j.state)).collect();
        finished.sort_by(|a, b| a.started.cmp(&b.started).then(a.name.cmp(&b.name)));
        let keep = usize::try_from(limit.max(0)).unwrap_or(0);
        let excess = finished.len().saturating_sub(keep);
        out.extend(finished.iter().take(excess).map(|j| j.name.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn input(created: &str, last: Option<&str>, now: &str) -> ScheduleInput {
        ScheduleInput {
            created: ts(created),
            last_schedule: last.map(ts),
            now: ts(now),
            starting_deadline_seconds: None,
            suspend: false,
            policy: ConcurrencyPolicy::Allow,
            active_jobs: 0,
        }
    }

    #[test]
    fn parses_standard_syntax_and_refuses_the_rest() {
        for ok in [
            "*/1 * * * *",
            "0 0 * * 0",
            "0 0 * * 7",
            "@hourly",
            "0 9 * jan mon-fri",
        ] {
            Schedule::parse(ok).unwrap();
        }
        for bad in ["61 * * * *", "* * * *", "0 * * * * *", "", "hello"] {
            let e = Schedule::parse(bad).unwrap_err();
            assert!(e.to_string().contains("invalid cronSpec"), "{e}");
        }
    }

    #[test]
    fn next_and_latest() {
        let s = Schedule::parse("*/15 * * * *").unwrap();
        assert_eq!(
            s.next_after(ts("2026-01-01T10:00:00Z")),
            Some(ts("2026-01-01T10:15:00Z"))
        );
        assert_eq!(
            s.next_after(ts("2026-01-01T10:07:30Z")),
            Some(ts("2026-01-01T10:15:00Z"))
        );
        assert_eq!(
            s.latest_at_or_before(ts("2026-01-01T10:15:00Z")),
            Some(ts("2026-01-01T10:15:00Z"))
        );
        assert_eq!(
            s.latest_at_or_before(ts("2026-01-01T10:29:59Z")),
            Some(ts("2026-01-01T10:15:00Z"))
        );
        // 7 is Sunday, like 0; 2026-01-04 is a Sunday.
        let sunday = Schedule::parse("0 0 * * 7").unwrap();
        assert_eq!(
            sunday.next_after(ts("2026-01-01T00:00:00Z")),
            Some(ts("2026-01-04T00:00:00Z"))
        );
    }

    #[test]
    fn nothing_due_before_the_first_time() {
        let s = Schedule::parse("*/1 * * * *").unwrap();
        let p = plan(
            &s,
            &input("2026-01-01T10:00:10Z", None, "2026-01-01T10:00:50Z"),
        );
        assert_eq!(p.run, None);
        assert_eq!(p.missed, 0);
        assert_eq!(p.next, Some(ts("2026-01-01T10:01:00Z")));
    }

    #[test]
    fn one_run_per_minute() {
        let s = Schedule::parse("*/1 * * * *").unwrap();
        let p = plan(
            &s,
            &input("2026-01-01T10:00:10Z", None, "2026-01-01T10:01:00Z"),
        );
        assert_eq!(p.run, Some(ts("2026-01-01T10:01:00Z")));
        assert_eq!(p.missed, 1);
        // After that run, nothing until 10:02.
        let p = plan(
            &s,
            &input(
                "2026-01-01T10:00:10Z",
                Some("2026-01-01T10:01:00Z"),
                "2026-01-01T10:01:40Z",
            ),
        );
        assert_eq!(p.run, None);
        assert_eq!(p.next, Some(ts("2026-01-01T10:02:00Z")));
    }

    #[test]
    fn only_the_most_recent_missed_time_runs() {
        let s = Schedule::parse("*/1 * * * *").unwrap();
        let p = plan(
            &s,
            &input(
                "2026-01-01T10:00:00Z",
                Some("2026-01-01T10:01:00Z"),
                "2026-01-01T10:05:30Z",
            ),
        );
        assert_eq!(p.run, Some(ts("2026-01-01T10:05:00Z")));
        assert_eq!(p.missed, 4);
        assert!(!p.too_many_missed);
    }

    #[test]
    fn too_many_missed_warns_but_still_runs_the_latest() {
        let s = Schedule::parse("*/1 * * * *").unwrap();
        let p = plan(
            &s,
            &input(
                "2026-01-01T00:00:00Z",
                Some("2026-01-01T00:00:00Z"),
                "2026-01-02T00:00:30Z",
            ),
        );
        assert!(p.too_many_missed);
        assert_eq!(p.run, Some(ts("2026-01-02T00:00:00Z")));
    }

    #[test]
    fn starting_deadline_limits_what_counts_and_what_runs() {
        let s = Schedule::parse("*/1 * * * *").unwrap();
        // A day missed, but a 200 s deadline: only the last 3 minutes count,
        // so no warning, and the 10:00 run (30 s late) still runs.
        let mut i = input(
            "2026-01-01T00:00:00Z",
            Some("2026-01-01T00:00:00Z"),
            "2026-01-02T10:00:30Z",
        );
        i.starting_deadline_seconds = Some(200);
        let p = plan(&s, &i);
        assert!(!p.too_many_missed);
        assert_eq!(p.missed, 3);
        assert_eq!(p.run, Some(ts("2026-01-02T10:00:00Z")));
        // An hourly run 10 minutes late with a 60 s deadline: skipped, and the
        // time is not even counted once the deadline window is past it.
        let h = Schedule::parse("0 * * * *").unwrap();
        let mut i = input("2026-01-01T09:30:00Z", None, "2026-01-01T10:10:00Z");
        i.starting_deadline_seconds = Some(60);
        let p = plan(&h, &i);
        assert_eq!(p.run, None);
        assert_eq!(p.skipped, None);
        // 30 s late with a 20 s deadline, counting from a creation long before.
        let mut i = input("2026-01-01T09:30:00Z", None, "2026-01-01T10:00:30Z");
        i.starting_deadline_seconds = Some(20);
        let p = plan(&h, &i);
        assert_eq!(p.run, None);
        // the deadline window (10:00:10..10:00:30) holds no time: nothing due
        assert_eq!(p.missed, 0);
    }

    #[test]
    fn deadline_window_edge() {
        // 30 s after 10:00: a 31 s deadline still reaches 10:00, 30 s does
        // not (the window starts after now - deadline, as in Kubernetes).
        let s = Schedule::parse("*/10 * * * *").unwrap();
        let mut i = input("2026-01-01T09:55:00Z", None, "2026-01-01T10:00:30Z");
        i.starting_deadline_seconds = Some(31);
        assert_eq!(plan(&s, &i).run, Some(ts("2026-01-01T10:00:00Z")));
        i.starting_deadline_seconds = Some(30);
        assert_eq!(plan(&s, &i).run, None);
    }

    #[test]
    fn concurrency_policies() {
        let s = Schedule::parse("*/1 * * * *").unwrap();
        let mut i = input(
            "2026-01-01T10:00:10Z",
            Some("2026-01-01T10:01:00Z"),
            "2026-01-01T10:02:00Z",
        );
        i.active_jobs = 1;
        let p = plan(&s, &i);
        assert_eq!(
            (p.run, p.replace_active),
            (Some(ts("2026-01-01T10:02:00Z")), false)
        );
        i.policy = ConcurrencyPolicy::Forbid;
        let p = plan(&s, &i);
        assert_eq!(p.run, None);
        assert_eq!(p.skipped, Some(Skip::Forbidden(ts("2026-01-01T10:02:00Z"))));
        i.policy = ConcurrencyPolicy::Replace;
        let p = plan(&s, &i);
        assert_eq!(
            (p.run, p.replace_active),
            (Some(ts("2026-01-01T10:02:00Z")), true)
        );
        i.active_jobs = 0;
        let p = plan(&s, &i);
        assert!(!p.replace_active);
    }

    #[test]
    fn suspend_runs_nothing() {
        let s = Schedule::parse("*/1 * * * *").unwrap();
        let mut i = input("2026-01-01T10:00:00Z", None, "2026-01-01T10:05:00Z");
        i.suspend = true;
        let p = plan(&s, &i);
        assert_eq!(p.run, None);
        assert_eq!(p.next, Some(ts("2026-01-01T10:06:00Z")));
    }

    #[test]
    fn requeue_waits_for_the_next_time_or_the_clock_limit() {
        let now = ts("2026-01-01T10:00:30Z");
        let next = Some(ts("2026-01-01T10:01:00Z"));
        assert_eq!(
            requeue_after(next, now, None),
            Duration::from_millis(30_100)
        );
        assert_eq!(
            requeue_after(next, now, Some(Duration::from_millis(20))),
            Duration::from_millis(20)
        );
        assert_eq!(
            requeue_after(None, now, None),
            Duration::from_millis(3_600_100)
        );
    }

    #[test]
    fn job_names_are_stable_per_scheduled_minute() {
        assert_eq!(job_name("backup", ts("1970-01-01T01:00:00Z")), "backup-60");
        assert_eq!(
            job_name("backup", ts("2026-01-01T10:01:00Z")),
            job_name("backup", ts("2026-01-01T10:01:00Z"))
        );
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(ts("2026-01-01T10:00:00Z"));
        assert_eq!(c.now(), ts("2026-01-01T10:00:00Z"));
        c.advance(Duration::from_secs(90));
        assert_eq!(c.now(), ts("2026-01-01T10:01:30Z"));
        c.set(ts("2027-01-01T00:00:00Z"));
        assert_eq!(c.now(), ts("2027-01-01T00:00:00Z"));
        assert!(c.max_wait().is_some());
        assert!(SystemClock.max_wait().is_none());
    }

    #[test]
    fn history_keeps_the_newest_finished_jobs() {
        let j = |name: &str, min: i64, state| JobSummary {
            name: name.into(),
            started: Timestamp::from_second(min * 60).unwrap(),
            state,
        };
        let jobs = vec![
            j("a", 1, JobState::Succeeded(None)),
            j("b", 2, JobState::Failed),
            j("c", 3, JobState::Succeeded(None)),
            j("d", 4, JobState::Failed),
            j("e", 5, JobState::Succeeded(None)),
            j("f", 6, JobState::Active),
            j("g", 7, JobState::Succeeded(None)),
        ];
        let mut del = history_to_delete(&jobs, 2, 1);
        del.sort();
        assert_eq!(del, vec!["a", "b", "c"]);
        let mut del = history_to_delete(&jobs, 0, 0);
        del.sort();
        assert_eq!(del, vec!["a", "b", "c", "d", "e", "g"]);
        assert!(history_to_delete(&jobs, 10, 10).is_empty());
    }
}
