//! Convergence under faults: the Memcached operator and the CronTab
//! controller reach the right state while 5 % of their API requests fail
//! (500/409/429) and their watches are dropped every fraction of a second.
//! The test checks through a client without faults.

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Running, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubeforge_operators::crontab::schedule::ManualClock;
use kubeforge_operators::crontab::{CronTab, CronTabSpec, controller as crontab};
use kubeforge_operators::memcached::Memcached;
use kubeforge_operators::memcached::controller::{self as memcached, FINALIZER};
use kubeforge_runtime::Manager;
use kubeforge_testenv::Faults;
use serde_json::json;

const N: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_with_api_errors_and_dropped_watches() {
    let faults = Faults::new()
        .error_rate(0.05)
        .drop_watches_between(Duration::from_millis(50), Duration::from_millis(200))
        .seed(7);
    let env = common::env(faults).await;
    let ns = "converge";
    let check = env.client_without_faults();
    common::namespace(&check, ns).await;
    let clock = ManualClock::new(jiff::Timestamp::now());
    let mgr = Manager::builder(env.client()).handle_signals(false).build();
    memcached::register_with(
        &mgr,
        memcached::Options {
            image: "example.test/memcached:1".into(),
            resync: Duration::from_secs(2),
            max_concurrent_reconciles: 4,
        },
    );
    crontab::register(
        &mgr,
        crontab::Options {
            clock: Arc::new(clock.clone()),
            max_concurrent_reconciles: 2,
        },
    );
    let op = Running::start(mgr);

    let mcs: Api<Memcached> = Api::namespaced(check.clone(), ns);
    let deps: Api<Deployment> = Api::namespaced(check.clone(), ns);
    for i in 0..N {
        let size = (i % 5) as i32 + 1;
        mcs.create(
            &PostParams::default(),
            &Memcached::with_size(ns, &format!("m{i}"), size),
        )
        .await
        .unwrap();
    }
    let mut ct = CronTab::new("tick", CronTabSpec::new("*/1 * * * *", "busybox"));
    ct.metadata.namespace = Some(ns.into());
    let ct = Api::<CronTab>::namespaced(check.clone(), ns)
        .create(&PostParams::default(), &ct)
        .await
        .unwrap();
    common::catch_up(&clock, &ct.metadata);

    let converged = |want: Vec<(String, i32)>| {
        let mcs = mcs.clone();
        let deps = deps.clone();
        async move {
            for (name, size) in &want {
                let m = mcs.get_opt(name).await.ok()??;
                let d = deps.get_opt(name).await.ok()??;
                if d.spec.as_ref()?.replicas != Some(*size) {
                    return None;
                }
                let st = m.status.as_ref()?;
                if st.observed_generation != m.metadata.generation
                    || !m.finalizers().iter().any(|f| f == FINALIZER)
                    || st.conditions.len() != 3
                {
                    return None;
                }
            }
            Some(())
        }
    };
    let want: Vec<(String, i32)> = (0..N)
        .map(|i| (format!("m{i}"), (i % 5) as i32 + 1))
        .collect();
    eventually(60, "all Memcacheds reconciled under faults", || {
        converged(want.clone())
    })
    .await;

    // The changes below must reach the operator through re-established
    // watches: wait until fault injection has dropped one (a fast first
    // convergence can finish inside the 50–200 ms every watch is given).
    eventually(60, "a watch dropped by fault injection", || async {
        (env.faults().stats().watches_dropped > 0).then_some(())
    })
    .await;

    // Resize half of them, delete a quarter.
    for i in (0..N).step_by(2) {
        mcs.patch(
            &format!("m{i}"),
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"size": 5 - (i % 5) as i32}})),
        )
        .await
        .unwrap();
    }
    for i in (1..N).step_by(4) {
        mcs.delete(&format!("m{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    let want: Vec<(String, i32)> = (0..N)
        .filter(|i| i % 4 != 1)
        .map(|i| {
            let size = if i % 2 == 0 {
                5 - (i % 5) as i32
            } else {
                (i % 5) as i32 + 1
            };
            (format!("m{i}"), size)
        })
        .collect();
    eventually(60, "resizes applied under faults", || {
        converged(want.clone())
    })
    .await;
    eventually(
        60,
        "deleted Memcacheds gone with their Deployments",
        || async {
            for i in (1..N).step_by(4) {
                let name = format!("m{i}");
                if mcs.get_opt(&name).await.ok()?.is_some()
                    || deps.get_opt(&name).await.ok()?.is_some()
                {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;

    // The CronTab: three minutes, one at a time → three Jobs, no duplicates.
    let jobs: Api<Job> = Api::namespaced(check.clone(), ns);
    for minute in 1..=3 {
        clock.advance(Duration::from_secs(60));
        eventually(60, "one Job per minute under faults", || async {
            let l = jobs.list(&ListParams::default()).await.ok()?;
            (l.items.len() == minute).then_some(())
        })
        .await;
    }
    let names: Vec<String> = jobs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|j| j.name_any())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let stats = env.faults().stats();
    assert!(stats.errors() > 0, "errors were injected: {stats:?}");
    assert!(stats.watches_dropped > 0, "watches were dropped: {stats:?}");
    op.stop().await;
    env.stop().await;
}
