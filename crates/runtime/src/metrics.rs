//! Prometheus metrics with controller-runtime's names and labels, encoded as
//! OpenMetrics text by `prometheus-client`.
//!
//! Counters are registered without their `_total` suffix because the
//! OpenMetrics encoder appends it: `controller_runtime_reconcile` is exposed
//! as `controller_runtime_reconcile_total`. The families and buckets follow
//! controller-runtime's `pkg/internal/controller/metrics` and
//! `pkg/metrics/workqueue.go`, and client-go's leader election gauge.

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::encode`]'s output.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`.
const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Label set `{controller}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// The controller's name.
    pub controller: String,
}

/// Label set `{controller, result}` of `controller_runtime_reconcile_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The controller's name.
    pub controller: String,
    /// `success`, `error`, `requeue` or `requeue_after`.
    pub result: String,
}

/// Label set `{name, controller}` of the workqueue families (both are the
/// controller's name, as in controller-runtime).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// The queue's name.
    pub name: String,
    /// The controller's name.
    pub controller: String,
}

impl QueueLabels {
    /// The labels of queue `name` (its controller's name too).
    pub fn of(name: &str) -> QueueLabels {
        QueueLabels {
            name: name.to_string(),
            controller: name.to_string(),
        }
    }
}

/// Label set `{name}` of `leader_election_master_status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabels {
    /// The Lease's name.
    pub name: String,
}

fn reconcile_time_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS)
}

fn queue_histogram() -> Histogram {
    // prometheus.ExponentialBuckets(10e-9, 10, 12): 1e-8 s … 1e3 s.
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// Something that knows a queue's current depth at scrape time.
pub(crate) trait DepthSource: Send + Sync {
    fn depth(&self) -> i64;
}

/// Encodes `workqueue_depth` from the live queues on each scrape.
#[derive(Default)]
struct DepthCollector {
    queues: Mutex<Vec<(String, Arc<dyn DepthSource>)>>,
}

impl std::fmt::Debug for DepthCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DepthCollector")
    }
}

impl Collector for DepthCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let queues: Vec<(String, Arc<dyn DepthSource>)> = match self.queues.lock() {
            Ok(q) => q.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let mut family = encoder.encode_descriptor(
            "workqueue_depth",
            "Current depth of workqueue",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (name, source) in queues {
            let labels = QueueLabels::of(&name);
            let gauge = ConstGauge::new(source.depth());
            gauge.encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The manager's metrics: controller-runtime's families plus whatever the
/// user registered through
/// [`ManagerBuilder::register_metrics`](crate::ManagerBuilder::register_metrics).
pub struct Metrics {
    registry: Registry,
    depth: Arc<DepthCollector>,
    pub(crate) reconcile_total: Family<ResultLabels, Counter>,
    pub(crate) reconcile_errors: Family<ControllerLabels, Counter>,
    pub(crate) terminal_reconcile_errors: Family<ControllerLabels, Counter>,
    pub(crate) reconcile_panics: Family<ControllerLabels, Counter>,
    pub(crate) reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    pub(crate) max_concurrent_reconciles: Family<ControllerLabels, Gauge>,
    pub(crate) active_workers: Family<ControllerLabels, Gauge>,
    pub(crate) workqueue_adds: Family<QueueLabels, Counter>,
    pub(crate) workqueue_queue_duration: Family<QueueLabels, Histogram, fn() -> Histogram>,
    pub(crate) workqueue_work_duration: Family<QueueLabels, Histogram, fn() -> Histogram>,
    pub(crate) workqueue_retries: Family<QueueLabels, Counter>,
    pub(crate) leader_election_master_status: Family<NameLabels, Gauge>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// The families, registered in `registry` (which may already hold the
    /// user's own metrics).
    pub(crate) fn new(mut registry: Registry) -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            depth: Arc::default(),
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            terminal_reconcile_errors: Family::default(),
            reconcile_panics: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_time_histogram),
            max_concurrent_reconciles: Family::default(),
            active_workers: Family::default(),
            workqueue_adds: Family::default(),
            workqueue_queue_duration: Family::new_with_constructor(queue_histogram),
            workqueue_work_duration: Family::new_with_constructor(queue_histogram),
            workqueue_retries: Family::default(),
            leader_election_master_status: Family::default(),
        };
        let r = &mut registry;
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            m.reconcile_total.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            m.reconcile_errors.clone(),
        );
        r.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            m.terminal_reconcile_errors.clone(),
        );
        r.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            m.reconcile_panics.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            m.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            m.max_concurrent_reconciles.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            m.active_workers.clone(),
        );
        r.register_collector(Box::new(m.depth.clone()));
        r.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            m.workqueue_adds.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            m.workqueue_queue_duration.clone(),
        );
        r.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            m.workqueue_work_duration.clone(),
        );
        r.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            m.workqueue_retries.clone(),
        );
        r.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            m.leader_election_master_status.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The metrics as OpenMetrics text (ending in `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Declare a controller: its families start at zero for every label
    /// value, as controller-runtime initialises them.
    pub(crate) fn init_controller(
        &self,
        name: &str,
        max_concurrent: u16,
        depth: Arc<dyn DepthSource>,
    ) {
        self.init_reconciles(name, max_concurrent);
        self.init_queue(name, depth);
    }

    /// Declare a controller's `controller_runtime_*` families (not its
    /// queue's: a [dynamic controller](crate::dynamic)'s queue is
    /// kube-runtime's, whose depth cannot be read).
    pub(crate) fn init_reconciles(&self, name: &str, max_concurrent: u16) {
        let c = ControllerLabels {
            controller: name.to_string(),
        };
        for result in ["success", "error", "requeue", "requeue_after"] {
            let _ = self.reconcile_total.get_or_create(&ResultLabels {
                controller: name.to_string(),
                result: result.to_string(),
            });
        }
        let _ = self.reconcile_errors.get_or_create(&c);
        let _ = self.terminal_reconcile_errors.get_or_create(&c);
        let _ = self.reconcile_panics.get_or_create(&c);
        let _ = self.reconcile_time.get_or_create(&c);
        self.max_concurrent_reconciles
            .get_or_create(&c)
            .set(i64::from(max_concurrent));
        self.active_workers.get_or_create(&c).set(0);
    }

    /// Count a finished reconcile of controller `c` as controller-runtime
    /// does: its result (`success`, `requeue` for a requeue with no delay,
    /// `requeue_after`, `error`), and an error in `reconcile_errors_total`
    /// (and `terminal_reconcile_errors_total` when terminal).
    pub(crate) fn count_outcome(
        &self,
        c: &ControllerLabels,
        outcome: &Result<crate::Action, crate::ReconcileError>,
    ) {
        let result = match outcome {
            Ok(action) => match action.requeue_after() {
                None => "success",
                Some(d) if d.is_zero() => "requeue",
                Some(_) => "requeue_after",
            },
            Err(_) => "error",
        };
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: c.controller.clone(),
                result: result.to_string(),
            })
            .inc();
        if let Err(e) = outcome {
            self.reconcile_errors.get_or_create(c).inc();
            if e.is_terminal() {
                self.terminal_reconcile_errors.get_or_create(c).inc();
            }
        }
    }

    /// Declare a work queue named `name` (a controller's, or a
    /// [`WorkQueue`](crate::workqueue::WorkQueue) of its own): its
    /// `workqueue_*` families start at zero and `workqueue_depth` reads
    /// `depth` on each scrape.
    pub(crate) fn init_queue(&self, name: &str, depth: Arc<dyn DepthSource>) {
        let q = QueueLabels::of(name);
        let _ = self.workqueue_adds.get_or_create(&q);
        let _ = self.workqueue_queue_duration.get_or_create(&q);
        let _ = self.workqueue_work_duration.get_or_create(&q);
        let _ = self.workqueue_retries.get_or_create(&q);
        let mut queues = match self.depth.queues.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        queues.retain(|(n, _)| n != name);
        queues.push((name.to_string(), depth));
    }

    /// Set `leader_election_master_status{name}`.
    pub(crate) fn set_leader(&self, lease: &str, leading: bool) {
        self.leader_election_master_status
            .get_or_create(&NameLabels {
                name: lease.to_string(),
            })
            .set(i64::from(leading));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Three;
    impl DepthSource for Three {
        fn depth(&self) -> i64 {
            3
        }
    }

    #[test]
    fn names_match_controller_runtime_without_double_total() {
        let m = Metrics::new(Registry::default());
        m.init_controller("cm", 2, Arc::new(Three));
        m.set_leader("lock", true);
        let text = m.encode();
        for line in [
            "controller_runtime_reconcile_total{controller=\"cm\",result=\"success\"} 0",
            "controller_runtime_reconcile_total{controller=\"cm\",result=\"requeue_after\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"cm\"} 0",
            "controller_runtime_reconcile_panics_total{controller=\"cm\"} 0",
            "controller_runtime_max_concurrent_reconciles{controller=\"cm\"} 2",
            "controller_runtime_active_workers{controller=\"cm\"} 0",
            "workqueue_depth{name=\"cm\",controller=\"cm\"} 3",
            "workqueue_adds_total{name=\"cm\",controller=\"cm\"} 0",
            "workqueue_retries_total{name=\"cm\",controller=\"cm\"} 0",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"60.0\",controller=\"cm\"} 0",
            "workqueue_queue_duration_seconds_bucket{le=\"1000.0\",name=\"cm\",controller=\"cm\"} 0",
            "workqueue_work_duration_seconds_count{name=\"cm\",controller=\"cm\"} 0",
            "leader_election_master_status{name=\"lock\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("_total_total"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
