//! Scheduler metrics with kube-scheduler's names, rendered in the Prometheus
//! text format: `scheduler_schedule_attempts_total{result,profile}`,
//! `scheduler_scheduling_attempt_duration_seconds` (histogram),
//! `scheduler_pending_pods{queue}` and `scheduler_preemption_attempts_total`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use crate::queue::QueueLengths;

/// Histogram buckets (seconds): kube-scheduler's exponential 1 ms × 2^n.
const BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];

#[derive(Default)]
struct Inner {
    attempts: BTreeMap<(String, String), u64>,
    buckets: [u64; 15],
    count: u64,
    sum: f64,
    preemption_attempts: u64,
    pending: QueueLengths,
}

/// The scheduler's metrics.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    /// Count an attempt: result is `scheduled`, `unschedulable` or `error`.
    pub fn attempt(&self, result: &str, profile: &str, took: Duration) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *m.attempts
            .entry((result.to_string(), profile.to_string()))
            .or_default() += 1;
        let s = took.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                m.buckets[i] += 1;
            }
        }
        m.count += 1;
        m.sum += s;
    }

    /// Count a preemption attempt.
    pub fn preemption_attempt(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .preemption_attempts += 1;
    }

    /// Record the queue sizes.
    pub fn pending(&self, l: QueueLengths) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).pending = l;
    }

    /// Attempts so far with this result (all profiles).
    pub fn attempts(&self, result: &str) -> u64 {
        let m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.attempts
            .iter()
            .filter(|((r, _), _)| r == result)
            .map(|(_, v)| v)
            .sum()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP scheduler_schedule_attempts_total Number of attempts to schedule pods, by the result."
        );
        let _ = writeln!(out, "# TYPE scheduler_schedule_attempts_total counter");
        for ((r, p), v) in &m.attempts {
            let _ = writeln!(
                out,
                "scheduler_schedule_attempts_total{{profile=\"{p}\",result=\"{r}\"}} {v}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP scheduler_scheduling_attempt_duration_seconds Scheduling attempt latency in seconds (scheduling algorithm + binding)"
        );
        let _ = writeln!(
            out,
            "# TYPE scheduler_scheduling_attempt_duration_seconds histogram"
        );
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "scheduler_scheduling_attempt_duration_seconds_bucket{{le=\"{b}\"}} {}",
                m.buckets[i]
            );
        }
        let _ = writeln!(
            out,
            "scheduler_scheduling_attempt_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            m.count
        );
        let _ = writeln!(
            out,
            "scheduler_scheduling_attempt_duration_seconds_sum {}",
            m.sum
        );
        let _ = writeln!(
            out,
            "scheduler_scheduling_attempt_duration_seconds_count {}",
            m.count
        );
        let _ = writeln!(
            out,
            "# HELP scheduler_pending_pods Number of pending pods, by the queue type."
        );
        let _ = writeln!(out, "# TYPE scheduler_pending_pods gauge");
        for (q, v) in [
            ("active", m.pending.active),
            ("backoff", m.pending.backoff),
            ("unschedulable", m.pending.unschedulable),
            ("gated", m.pending.gated),
        ] {
            let _ = writeln!(out, "scheduler_pending_pods{{queue=\"{q}\"}} {v}");
        }
        let _ = writeln!(
            out,
            "# HELP scheduler_preemption_attempts_total Total preemption attempts in the cluster till now"
        );
        let _ = writeln!(out, "# TYPE scheduler_preemption_attempts_total counter");
        let _ = writeln!(
            out,
            "scheduler_preemption_attempts_total {}",
            m.preemption_attempts
        );
        out
    }
}
