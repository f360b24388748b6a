//! Shared helpers for the operators' integration tests: a TestEnv with the
//! committed CRDs, a Manager running an operator, and polling with a
//! deadline (tests wait for what a user would see, never sleep for it).

#![allow(dead_code, missing_docs, clippy::unwrap_used)]

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams, PostParams};
use kubeforge_operators::crontab::schedule::{Clock, ManualClock};
use kubeforge_runtime::{Manager, ShutdownHandle};
use kubeforge_testenv::{Faults, TestEnv};
use tokio::task::JoinHandle;

pub fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/crd/bases")
}

/// A TestEnv with the committed CRDs (the YAML users apply) and the
/// built-in garbage collector.
pub async fn env(faults: Faults) -> TestEnv {
    TestEnv::builder()
        .crds_from_dir(crd_dir())
        .faults(faults)
        .start()
        .await
        .expect("start TestEnv")
}

pub async fn namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))
    .unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
}

/// A running Manager; stops on `stop()`.
pub struct Running {
    pub shutdown: ShutdownHandle,
    pub metrics: std::sync::Arc<kubeforge_runtime::metrics::Metrics>,
    pub task: JoinHandle<Result<(), kubeforge_runtime::Error>>,
}

impl Running {
    pub fn start(mgr: Manager) -> Running {
        let shutdown = mgr.shutdown_handle();
        let metrics = mgr.metrics();
        let task = tokio::spawn(mgr.run());
        Running {
            shutdown,
            metrics,
            task,
        }
    }

    /// Reconciles of `controller` this manager ran (any result).
    pub fn reconciles(&self, controller: &str) -> u64 {
        let text = self.metrics.encode();
        let label = format!("controller=\"{controller}\"");
        text.lines()
            .filter(|l| l.starts_with("controller_runtime_reconcile_total{") && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    pub async fn stop(self) {
        self.shutdown.shutdown();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

/// [`kubeforge_testenv::eventually_some`] with the limit in seconds first.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    kubeforge_testenv::eventually_some(what, Duration::from_secs(secs), f).await
}

/// Events in `ns` about the object named `name` (core/v1 view).
pub async fn events_for(client: &kube::Client, ns: &str, name: &str) -> Vec<Event> {
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

/// Moves `clock` forward to the object's creationTimestamp if it is behind.
/// The server stamps that time from the wall clock, which has moved on since
/// the manual clock was made; a schedule boundary between the two would
/// leave no start time in (created, clock + one period].
pub fn catch_up(clock: &ManualClock, meta: &kube::api::ObjectMeta) {
    let created = meta
        .creation_timestamp
        .as_ref()
        .expect("creationTimestamp")
        .0;
    if created > clock.now() {
        clock.set(created);
    }
}
