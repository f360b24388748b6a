//! What tests of controllers do around a [`TestEnv`](crate::TestEnv): run
//! a Manager in the background and stop it, count its reconciles, create a
//! namespace, read the events about an object.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams, PostParams};
use kubeforge_runtime::metrics::Metrics;
use kubeforge_runtime::{Manager, ShutdownHandle};
use tokio::task::JoinHandle;

/// A Manager running on a task of its own ([`RunningManager::start`]),
/// until [`stop`](RunningManager::stop).
pub struct RunningManager {
    shutdown: ShutdownHandle,
    metrics: Arc<Metrics>,
    task: JoinHandle<Result<(), kubeforge_runtime::Error>>,
}

impl RunningManager {
    /// Run `mgr` on a new task.
    pub fn start(mgr: Manager) -> RunningManager {
        let shutdown = mgr.shutdown_handle();
        let metrics = mgr.metrics();
        let task = tokio::spawn(mgr.run());
        RunningManager {
            shutdown,
            metrics,
            task,
        }
    }

    /// The manager's metrics (what it serves on `/metrics`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// How many reconciles `controller` has run, whatever their result
    /// (the sum of its `controller_runtime_reconcile_total`).
    pub fn reconciles(&self, controller: &str) -> u64 {
        let label = format!("controller=\"{controller}\"");
        let total: f64 = self
            .metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("controller_runtime_reconcile_total{") && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        total as u64
    }

    /// Tell the manager to stop and wait for it (at most 10 s); what its
    /// `run` returned, or `None` when it had not stopped by then.
    pub async fn stop(self) -> Option<Result<(), kubeforge_runtime::Error>> {
        self.shutdown.shutdown();
        match tokio::time::timeout(Duration::from_secs(10), self.task).await {
            Ok(Ok(result)) => Some(result),
            Ok(Err(panic)) => std::panic::resume_unwind(panic.into_panic()),
            Err(_) => None,
        }
    }
}

/// Create the namespace `name`; panics (failing the test) when the server
/// refuses.
pub async fn create_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.to_string());
    if let Err(e) = api.create(&PostParams::default(), &ns).await {
        panic!("creating namespace {name}: {e}");
    }
}

/// The core/v1 Events in `ns` about the object named `name` (empty when
/// they cannot be listed).
pub async fn events_about(client: &kube::Client, ns: &str, name: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    match api.list(&ListParams::default()).await {
        Ok(l) => l
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect(),
        Err(_) => Vec::new(),
    }
}
