//! The node simulator: the kubelet's part of the embedded cluster, in the
//! spirit of kwok, as a kube-rs client.
//!
//! It registers Node objects (capacity, allocatable including extended
//! resources such as `nvidia.com/gpu`, labels, taints, a podCIDR each),
//! renews their Leases in `kube-node-lease` every 10 s and their status less
//! often, and plays the kubelet for the pods bound to them: Pending →
//! Running with container statuses, conditions, a pod IP from the node's
//! podCIDR and a start time; Job pods finish Succeeded (or Failed); graceful
//! deletion completes after the grace period with a final DELETE.
//!
//! Built for 5,000 nodes and 150,000 pods in one process: one watch for all
//! bound pods, one timer heap for every pod's next step (no task per pod),
//! and status writes through a bounded pool of workers.
//!
//! Annotations steer single objects (for tests and demos):
//! - [`ANNOTATION_READY`] on a pod: `"false"` makes it not ready.
//! - [`ANNOTATION_FAIL`] on a pod: `"true"` makes it finish Failed (exit 1).
//! - [`ANNOTATION_DURATION`] on a pod: how long it runs before finishing
//!   (`"5s"`, `"300ms"`); Job pods finish after [`Delays::complete`] without it.
//! - [`ANNOTATION_HEARTBEATS`] on a node: `"stopped"` stops its heartbeats
//!   (and its kubelet: its pods stay as they are), as if it were cut off.
//!
//! Against kubeforge's own server, declare graceful deletion
//! (`ApiServer::set_graceful_pod_deletion(true)`) so deleted pods wait for
//! the simulator.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), kubeforge_controllers::nodesim::Error> {
//! use kubeforge_controllers::nodesim::{self, NodeSimulator, SimulatorOptions};
//!
//! let options = SimulatorOptions::new(nodesim::config::uniform(3)?);
//! let sim = NodeSimulator::start(client, options).await?;
//! sim.set_heartbeats("node-1", false)?; // node-1 goes NotReady
//! sim.stop().await;
//! # Ok(()) }
//! ```

pub mod config;
mod nodes;
mod pods;
mod pool;
mod sim_pod;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{ConfigError, NodeSpec};

/// Pod annotation: `"false"` makes the pod's containers not ready.
pub const ANNOTATION_READY: &str = "kubeforge.dev/ready";
/// Pod annotation: `"true"` makes the pod finish Failed (exit code 1).
pub const ANNOTATION_FAIL: &str = "kubeforge.dev/fail";
/// Pod annotation: how long the pod runs before it finishes (`"5s"`,
/// `"250ms"`, `"2m"`). Pods without it and not owned by a Job run until
/// deleted.
pub const ANNOTATION_DURATION: &str = "kubeforge.dev/duration";
/// Node annotation: `"stopped"` stops the node's heartbeats and its
/// simulated kubelet (removing it resumes both).
pub const ANNOTATION_HEARTBEATS: &str = "kubeforge.dev/heartbeats";

/// Errors of the node simulator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The node config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Registering nodes failed.
    #[error("registering node {node}: {source}")]
    Register {
        /// The node.
        node: String,
        /// The API error.
        source: kube::Error,
    },
    /// The simulator has no node of that name.
    #[error("no simulated node named {0:?}")]
    UnknownNode(String),
}

/// How long the simulated kubelet takes for each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delays {
    /// From seeing a pod bound to its node to Running (pull + start).
    pub start: Duration,
    /// How long a Job's pod (or a pod with restartPolicy Never/OnFailure
    /// and an [`ANNOTATION_DURATION`]) runs before it finishes, when the
    /// annotation does not say.
    pub complete: Duration,
    /// How long containers take to exit after a graceful delete (SIGTERM):
    /// the pod is deleted then, or when its grace period ends if that is
    /// sooner. `None` waits for the whole grace period, as for containers
    /// that ignore SIGTERM (the kubelet's worst case).
    pub exit: Option<Duration>,
}

impl Default for Delays {
    fn default() -> Self {
        Delays {
            start: Duration::from_millis(100),
            complete: Duration::from_secs(1),
            exit: Some(Duration::from_secs(1)),
        }
    }
}

impl Delays {
    /// No delays at all: pods run as soon as they are seen, Job pods finish
    /// at once, deletions complete at once.
    pub fn zero() -> Self {
        Delays {
            start: Duration::ZERO,
            complete: Duration::ZERO,
            exit: Some(Duration::ZERO),
        }
    }
}

/// How to run the simulator.
#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    /// The nodes.
    pub nodes: Vec<NodeSpec>,
    /// The kubelet's step delays.
    pub delays: Delays,
    /// Lease renewal interval (the kubelet's 10 s).
    pub lease_interval: Duration,
    /// Lease duration written in the Lease (the kubelet's 40 s).
    pub lease_duration_seconds: i32,
    /// Node status update interval (the kubelet writes status when it
    /// changes and at least every 5 minutes; 60 s here).
    pub status_interval: Duration,
    /// Workers writing pod statuses and deletions (each sends one write at
    /// a time, so this bounds the writes in flight: at 1,000 pods/s with a
    /// few milliseconds per write under load, 8 fell behind).
    pub pod_workers: usize,
    /// Workers writing Leases and node statuses.
    pub node_workers: usize,
}

impl SimulatorOptions {
    /// Defaults for these nodes.
    pub fn new(nodes: Vec<NodeSpec>) -> Self {
        SimulatorOptions {
            nodes,
            delays: Delays::default(),
            lease_interval: Duration::from_secs(10),
            lease_duration_seconds: 40,
            status_interval: Duration::from_secs(60),
            pod_workers: 64,
            node_workers: 4,
        }
    }

    /// With these delays.
    #[must_use]
    pub fn delays(mut self, delays: Delays) -> Self {
        self.delays = delays;
        self
    }
}

/// Counters of the simulator's work (for `kubeforge up`, tests and
/// benchmarks).
#[derive(Debug, Default)]
pub struct Stats {
    /// Pods moved to Running.
    pub pods_started: AtomicU64,
    /// Pods finished (Succeeded or Failed).
    pub pods_finished: AtomicU64,
    /// Pods deleted at the end of their grace period.
    pub pods_deleted: AtomicU64,
    /// Lease renewals sent.
    pub lease_renewals: AtomicU64,
    /// Writes that failed after retries.
    pub write_errors: AtomicU64,
}

/// State shared by the simulator's tasks.
pub(crate) struct Shared {
    pub(crate) nodes: Vec<NodeSpec>,
    /// Per node: heartbeats stopped (by the API).
    pub(crate) stopped_api: Vec<AtomicBool>,
    /// Per node: heartbeats stopped (by the annotation).
    pub(crate) stopped_annotation: Vec<AtomicBool>,
    pub(crate) stats: Stats,
    pub(crate) index: std::collections::HashMap<String, u32>,
    /// Wakes the heartbeat loop when a node's state changes.
    pub(crate) changed: tokio::sync::Notify,
}

impl Shared {
    pub(crate) fn stopped(&self, node: u32) -> bool {
        let i = node as usize;
        self.stopped_api
            .get(i)
            .is_some_and(|a| a.load(Ordering::Relaxed))
            || self
                .stopped_annotation
                .get(i)
                .is_some_and(|a| a.load(Ordering::Relaxed))
    }
}

/// Entry point: [`NodeSimulator::start`].
pub struct NodeSimulator;

impl NodeSimulator {
    /// Register the nodes (creating them, or refreshing the status of
    /// those that already exist, e.g. after a restart), then start the
    /// heartbeats and the pod loop on the current Tokio runtime.
    pub async fn start(
        client: Client,
        options: SimulatorOptions,
    ) -> Result<RunningSimulator, Error> {
        let index = options
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();
        let n = options.nodes.len();
        let shared = Arc::new(Shared {
            nodes: options.nodes.clone(),
            stopped_api: (0..n).map(|_| AtomicBool::new(false)).collect(),
            stopped_annotation: (0..n).map(|_| AtomicBool::new(false)).collect(),
            stats: Stats::default(),
            index,
            changed: tokio::sync::Notify::new(),
        });
        nodes::register(&client, &shared, &options).await?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let node_pool =
            pool::Pool::start(client.clone(), options.node_workers.max(1), shared.clone());
        let pod_pool =
            pool::Pool::start(client.clone(), options.pod_workers.max(1), shared.clone());
        let mut tasks = vec![
            tokio::spawn(nodes::heartbeats(
                client.clone(),
                shared.clone(),
                options.clone(),
                node_pool.sender(),
                stop_rx.clone(),
            )),
            tokio::spawn(pods::run(
                client,
                shared.clone(),
                options.delays,
                pod_pool.sender(),
                stop_rx,
            )),
        ];
        tasks.extend(node_pool.into_tasks());
        tasks.extend(pod_pool.into_tasks());
        Ok(RunningSimulator {
            shared,
            stop: stop_tx,
            tasks,
        })
    }
}

/// A running simulator; [`RunningSimulator::stop`] ends it.
pub struct RunningSimulator {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningSimulator {
    /// The simulated nodes.
    pub fn nodes(&self) -> &[NodeSpec] {
        &self.shared.nodes
    }

    /// Counters of the work done so far.
    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// Stop (`false`) or resume (`true`) a node's heartbeats. A stopped node
    /// renews neither its Lease nor its status, and its simulated kubelet
    /// does nothing (pods stay as they are), so the node lifecycle
    /// controller marks it NotReady and evicts its pods.
    pub fn set_heartbeats(&self, node: &str, on: bool) -> Result<(), Error> {
        let i = *self
            .shared
            .index
            .get(node)
            .ok_or_else(|| Error::UnknownNode(node.to_string()))?;
        self.shared.stopped_api[i as usize].store(!on, Ordering::Relaxed);
        self.shared.changed.notify_one();
        Ok(())
    }

    /// Stop the heartbeats and the pod loop and wait for them (writes
    /// already queued are finished first).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Resolves once `stop` says so (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Parse a duration annotation: `"5s"`, `"250ms"`, `"2m"`, `"1h"`, or plain
/// seconds (`"3"`, `"0.5"`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().ok()?;
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("soon"), None);
        assert_eq!(parse_duration("-1s"), None);
    }
}
