//! Shared helpers for the operators' integration tests: a TestEnv with the
//! committed CRDs, a Manager running an operator, and polling with a
//! deadline (tests wait for what a user would see, never sleep for it).

#![allow(dead_code, missing_docs, clippy::unwrap_used)]

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use kubeforge_operators::crontab::schedule::{Clock, ManualClock};
use kubeforge_testenv::{Faults, TestEnv};

#[allow(unused_imports)] // each test binary uses some of them
pub use kubeforge_testenv::{
    RunningManager as Running, create_namespace as namespace, events_about as events_for,
};

/// Where the CRDs are committed: the repository's `config/crd/bases`
/// (CronTab) and the Memcached operator project's.
pub fn crd_dirs() -> [PathBuf; 2] {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    [
        here.join("../../config/crd/bases"),
        here.join("memcached-operator/config/crd/bases"),
    ]
}

/// A TestEnv with the committed CRDs (the YAML users apply) and the
/// built-in garbage collector.
pub async fn env(faults: Faults) -> TestEnv {
    let [crontab, memcached] = crd_dirs();
    TestEnv::builder()
        .crds_from_dir(crontab)
        .crds_from_dir(memcached)
        .faults(faults)
        .start()
        .await
        .expect("start TestEnv")
}

/// [`kubeforge_testenv::eventually_some`] with the limit in seconds first.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    kubeforge_testenv::eventually_some(what, Duration::from_secs(secs), f).await
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
