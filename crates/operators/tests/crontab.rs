//! The CronTab controller on TestEnv with an injected clock: one Job per
//! minute of (manual) time, Forbid/Replace, history limits, missed runs,
//! and the schema refusing a bad cronSpec. No Job controller runs in
//! TestEnv: the test marks Jobs finished, as the Job controller would.

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Running, events_for, eventually};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubeforge_operators::crontab::controller::{self, Options};
use kubeforge_operators::crontab::schedule::ManualClock;
use kubeforge_operators::crontab::{ConcurrencyPolicy, CronTab, CronTabSpec};
use kubeforge_runtime::Manager;
use kubeforge_testenv::{Faults, TestEnv};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

struct Fixture {
    env: TestEnv,
    op: Running,
    clock: ManualClock,
    cts: Api<CronTab>,
    jobs: Api<Job>,
    ns: String,
}

async fn fixture(ns: &str) -> Fixture {
    let env = common::env(Faults::new()).await;
    let client = env.client();
    common::namespace(&client, ns).await;
    // The clock starts at the real now, so creationTimestamp (set by the
    // server) is "now" on it too.
    let clock = ManualClock::new(Timestamp::now());
    let mgr = Manager::builder(client.clone())
        .handle_signals(false)
        .build();
    controller::register(
        &mgr,
        Options {
            clock: Arc::new(clock.clone()),
            max_concurrent_reconciles: 2,
        },
    );
    Fixture {
        op: Running::start(mgr),
        clock,
        cts: Api::namespaced(client.clone(), ns),
        jobs: Api::namespaced(client, ns),
        ns: ns.to_string(),
        env,
    }
}

impl Fixture {
    async fn create(&self, name: &str, spec: CronTabSpec) -> CronTab {
        let mut ct = CronTab::new(name, spec);
        ct.metadata.namespace = Some(self.ns.clone());
        let ct = self.cts.create(&PostParams::default(), &ct).await.unwrap();
        common::catch_up(&self.clock, &ct.metadata);
        ct
    }

    /// Jobs not being deleted, sorted by name.
    async fn live_jobs(&self) -> Vec<Job> {
        let mut v: Vec<Job> = self
            .jobs
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .collect();
        v.sort_by_key(|j| j.name_any());
        v
    }

    async fn wait_jobs(&self, n: usize, what: &str) -> Vec<Job> {
        eventually(10, what, || async {
            let v = self.live_jobs().await;
            (v.len() == n).then_some(v)
        })
        .await
    }

    /// Lets the controller look at the clock a few more times (it polls a
    /// manual clock every 20 ms), so "nothing happened" is a real answer.
    async fn settle(&self) {
        let before = self.op.reconciles("crontab");
        eventually(10, "three more reconciles", || async {
            (self.op.reconciles("crontab") >= before + 3).then_some(())
        })
        .await;
    }

    /// Plays the Job controller: marks `job` finished.
    async fn finish(&self, job: &str, succeeded: bool) {
        let now = Timestamp::now().to_string();
        let (t, extra) = if succeeded {
            ("Complete", json!({"completionTime": now, "succeeded": 1}))
        } else {
            ("Failed", json!({"failed": 1}))
        };
        let mut status = json!({"startTime": now, "conditions": [
            {"type": t, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
        ]});
        if succeeded {
            status["conditions"]
                .as_array_mut()
                .unwrap()
                .insert(0, json!({"type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}));
        } else {
            status["conditions"]
                .as_array_mut()
                .unwrap()
                .insert(0, json!({"type": "FailureTarget", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}));
        }
        for (k, v) in extra.as_object().unwrap() {
            status[k] = v.clone();
        }
        self.jobs
            .patch_status(
                job,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .unwrap();
    }

    async fn stop(self) {
        self.op.stop().await;
        self.env.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_job_per_minute_with_history_limits() {
    let f = fixture("ct-minute").await;
    let mut spec = CronTabSpec::new("*/1 * * * *", "busybox:1.36");
    spec.successful_jobs_history_limit = Some(2);
    spec.failed_jobs_history_limit = Some(1);
    let ct = f.create("tick", spec).await;
    f.settle().await;
    assert!(
        f.live_jobs().await.is_empty(),
        "no Job before the first minute"
    );

    let mut names = Vec::new();
    for i in 1..=4 {
        f.clock.advance(MINUTE);
        let jobs = f.wait_jobs(i, "one more Job after a minute").await;
        f.settle().await;
        assert_eq!(f.live_jobs().await.len(), i, "exactly one Job per minute");
        let newest = jobs
            .iter()
            .find(|j| !names.contains(&j.name_any()))
            .unwrap();
        names.push(newest.name_any());
        let owner = &newest.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), Some(&owner.uid)),
            ("CronTab", ct.metadata.uid.as_ref())
        );
    }
    let got = f.cts.get("tick").await.unwrap();
    let status = got.status.unwrap();
    assert!(status.last_schedule_time.is_some());
    assert_eq!(status.active.len(), 4);

    // Three succeed, one fails: 2 successful are kept, the failed one too.
    for n in &names[..3] {
        f.finish(n, true).await;
    }
    f.finish(&names[3], false).await;
    let left = f
        .wait_jobs(3, "history pruned to 2 successful + 1 failed")
        .await;
    let left: Vec<String> = left.iter().map(|j| j.name_any()).collect();
    assert_eq!(
        left,
        vec![names[1].clone(), names[2].clone(), names[3].clone()]
    );
    let status = eventually(10, "lastSuccessfulTime and no active Jobs", || async {
        let s = f.cts.get("tick").await.unwrap().status?;
        (s.last_successful_time.is_some() && s.active.is_empty()).then_some(s)
    })
    .await;
    assert!(status.last_schedule_time.is_some());
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbid_skips_while_a_job_runs() {
    let f = fixture("ct-forbid").await;
    let mut spec = CronTabSpec::new("*/1 * * * *", "busybox:1.36");
    spec.concurrency_policy = ConcurrencyPolicy::Forbid;
    f.create("solo", spec).await;
    f.clock.advance(MINUTE);
    let first = f.wait_jobs(1, "the first Job").await;
    f.clock.advance(MINUTE);
    f.settle().await;
    assert_eq!(
        f.live_jobs().await.len(),
        1,
        "Forbid: no second Job while one runs"
    );
    f.finish(&first[0].name_any(), true).await;
    f.clock.advance(MINUTE);
    let jobs = f.wait_jobs(2, "a new Job once the first finished").await;
    assert!(jobs.iter().any(|j| j.name_any() != first[0].name_any()));
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_deletes_the_running_job() {
    let f = fixture("ct-replace").await;
    let mut spec = CronTabSpec::new("*/1 * * * *", "busybox:1.36");
    spec.concurrency_policy = ConcurrencyPolicy::Replace;
    f.create("fresh", spec).await;
    f.clock.advance(MINUTE);
    let first = f.wait_jobs(1, "the first Job").await;
    f.clock.advance(MINUTE);
    let now = eventually(10, "the first Job replaced", || async {
        let v = f.live_jobs().await;
        (v.len() == 1 && v[0].name_any() != first[0].name_any()).then_some(v)
    })
    .await;
    let status = eventually(10, "status.active naming the new Job", || async {
        let s = f.cts.get("fresh").await.unwrap().status?;
        (s.active.len() == 1 && s.active[0].name == now[0].metadata.name).then_some(s)
    })
    .await;
    assert_eq!(status.active[0].kind.as_deref(), Some("Job"));
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_runs_catch_up_once_and_warn_when_too_many() {
    let f = fixture("ct-missed").await;
    f.create("late", CronTabSpec::new("*/1 * * * *", "busybox:1.36"))
        .await;
    // Ten minutes pass at once: one catch-up run, for the latest time.
    f.clock.advance(10 * MINUTE);
    let jobs = f.wait_jobs(1, "one catch-up Job").await;
    f.settle().await;
    assert_eq!(
        f.live_jobs().await.len(),
        1,
        "only the most recent missed time runs"
    );
    let st = f.cts.get("late").await.unwrap().status.unwrap();
    let last = st.last_schedule_time.unwrap().0;
    assert_eq!(
        jobs[0].name_any(),
        format!("late-{}", last.as_second() / 60),
        "the Job is the latest missed time's"
    );
    // Three hours: more than 100 missed times → warning, still one run.
    f.clock.advance(180 * MINUTE);
    f.wait_jobs(2, "one more catch-up Job").await;
    let client = f.env.client();
    let ns = f.ns.clone();
    eventually(10, "a TooManyMissedTimes warning", || async {
        let evs = events_for(&client, &ns, "late").await;
        evs.iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("TooManyMissedTimes")
            })
            .then_some(())
    })
    .await;
    f.settle().await;
    assert_eq!(f.live_jobs().await.len(), 2);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_crontabs_run_nothing() {
    let f = fixture("ct-suspend").await;
    let mut spec = CronTabSpec::new("*/1 * * * *", "busybox:1.36");
    spec.suspend = true;
    f.create("paused", spec).await;
    f.clock.advance(3 * MINUTE);
    f.settle().await;
    assert!(f.live_jobs().await.is_empty());
    f.cts
        .patch(
            "paused",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    f.clock.advance(MINUTE);
    f.wait_jobs(1, "a Job once resumed").await;
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_cron_spec_is_refused_naming_the_field() {
    let env = common::env(Faults::new()).await;
    let cts: Api<CronTab> = Api::namespaced(env.client(), "default");
    let mut ct = CronTab::new("bad", CronTabSpec::new("61 * * * *", "busybox"));
    ct.metadata.namespace = Some("default".into());
    let err = cts.create(&PostParams::default(), &ct).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("spec.cronSpec"),
        "{}",
        status.message
    );
    assert!(status.message.contains("61 * * * *"), "{}", status.message);
    let ok = CronTab::new("good", CronTabSpec::new("0 3 * * sun", "busybox"));
    cts.create(&PostParams::default(), &ok).await.unwrap();
    env.stop().await;
}
