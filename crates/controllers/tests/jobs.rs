//! Jobs on the embedded server with a test kubelet finishing their pods:
//! completions 5 / parallelism 2 never runs more than 2 at once and
//! completes with 1.33's conditions; backoffLimit and activeDeadlineSeconds
//! fail a Job; ttlSecondsAfterFinished deletes it; a work-queue Job (no
//! completions) lets its other workers finish after the first success;
//! every finished pod counts exactly once (successes of pods deleted at
//! once, running pods deleted count as failed, OnFailure restarts toward
//! backoffLimit), and deleting a Job releases its pods' finalizers.

mod workloads_common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubeforge_controllers::WorkloadOptions;
use kubeforge_testenv::eventually_some;
use serde_json::json;
use workloads_common::*;

const T: Duration = Duration::from_secs(30);

fn job(name: &str, spec: serde_json::Value) -> Job {
    let mut s = json!({
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}
    });
    if let (Some(m), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    obj(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": s}))
}

fn opts() -> WorkloadOptions {
    WorkloadOptions {
        job_backoff_base: Duration::ZERO,
        ..WorkloadOptions::default()
    }
}

fn cond(j: &Job, t: &str) -> Option<(String, Option<String>)> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_5_parallelism_2_completes() {
    let env = start_with(opts()).await;
    // The kubelet leaves pods Running; the test finishes them one by one
    // while watching how many run at once.
    let _k = kubelet(&env.client, |_| Fate::NotReady);
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &job("pi", json!({"completions": 5, "parallelism": 2})),
    )
    .await
    .expect("create");
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    let max_active = Arc::new(Mutex::new(0usize));
    let mut finished = 0;
    while finished < 5 {
        let list = pods
            .list(&ListParams::default().labels("job-name=pi"))
            .await
            .expect("list")
            .items;
        let running: Vec<&Pod> = list
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded"))
            .collect();
        {
            let mut m = max_active.lock().expect("lock");
            *m = (*m).max(running.len());
        }
        if let Some(p) = running
            .iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        {
            set_pod_status(
                &env.client,
                "default",
                p.metadata.name.as_deref().unwrap_or_default(),
                Fate::Succeed,
                "",
            )
            .await;
            finished += 1;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(finished <= 5);
    }
    eventually("Complete=True", T, || async {
        let j = api.get("pi").await.expect("get");
        cond(&j, "Complete") == Some(("True".into(), Some("CompletionsReached".into())))
    })
    .await;
    let j = api.get("pi").await.expect("get");
    let s = j.status.clone().expect("status");
    assert_eq!(s.succeeded, Some(5));
    assert_eq!(s.active, None);
    assert!(s.start_time.is_some() && s.completion_time.is_some());
    assert_eq!(
        cond(&j, "SuccessCriteriaMet").map(|c| c.0),
        Some("True".into())
    );
    assert!(
        *max_active.lock().expect("lock") <= 2,
        "more than parallelism=2 pods ran at once"
    );
    let all = pods
        .list(&ListParams::default().labels("job-name=pi"))
        .await
        .expect("list")
        .items;
    assert_eq!(all.len(), 5, "exactly 5 pods were created");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_work_queue_job_lets_its_workers_finish() {
    let env = start_with(opts()).await;
    let _k = kubelet(&env.client, |_| Fate::Ready);
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &job("queue", json!({"parallelism": 3})),
    )
    .await
    .expect("create");
    let running = || async {
        pods.list(&ListParams::default().labels("job-name=queue"))
            .await
            .expect("list")
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect::<Vec<_>>()
    };
    eventually("3 running workers", T, || async {
        running().await.len() == 3
    })
    .await;
    let workers = running().await;
    set_pod_status(&env.client, "default", &workers[0], Fate::Succeed, "").await;
    // The sync that counts the success leaves the two others running (kube
    // used to be copied as killing them: active 0 in that same sync).
    eventually("succeeded 1, active 2", T, || async {
        let s = api
            .get("queue")
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        s.succeeded == Some(1) && s.active == Some(2)
    })
    .await;
    let left = running().await;
    assert_eq!(left.len(), 2, "the other workers were stopped: {left:?}");
    assert!(
        left.iter().all(|n| workers[1..].contains(n)),
        "{left:?} vs {workers:?}"
    );
    let j = api.get("queue").await.expect("get");
    assert_eq!(cond(&j, "Complete"), None, "complete while workers run");
    for w in &workers[1..] {
        set_pod_status(&env.client, "default", w, Fate::Succeed, "").await;
    }
    eventually("Complete=True", T, || async {
        let j = api.get("queue").await.expect("get");
        cond(&j, "Complete") == Some(("True".into(), Some("CompletionsReached".into())))
    })
    .await;
    let s = api.get("queue").await.expect("get").status.expect("status");
    assert_eq!(s.succeeded, Some(3));
    let all = pods
        .list(&ListParams::default().labels("job-name=queue"))
        .await
        .expect("list")
        .items;
    assert_eq!(all.len(), 3, "no worker was replaced or added");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_jobs_deadline_waits_and_restarts_on_resume() {
    let env = start_with(opts()).await;
    let _k = kubelet(&env.client, |_| Fate::Ready);
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &job("pause", json!({"activeDeadlineSeconds": 2})),
    )
    .await
    .expect("create");
    eventually("started with one active pod", T, || async {
        let s = api
            .get("pause")
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        s.start_time.is_some() && s.active == Some(1)
    })
    .await;
    let first_start = api
        .get("pause")
        .await
        .expect("get")
        .status
        .and_then(|s| s.start_time)
        .expect("startTime");
    let patch = |suspend: bool| json!({"spec": {"suspend": suspend}});
    api.patch(
        "pause",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(patch(true)),
    )
    .await
    .expect("suspend");
    eventually("Suspended=True, nothing active", T, || async {
        let j = api.get("pause").await.expect("get");
        cond(&j, "Suspended") == Some(("True".into(), Some("JobSuspended".into())))
            && j.status.and_then(|s| s.active).is_none()
    })
    .await;
    // Past the deadline while suspended: a suspended Job's deadline does
    // not run.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let j = api.get("pause").await.expect("get");
    assert_eq!(cond(&j, "Failed"), None, "failed while suspended");
    api.patch(
        "pause",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(patch(false)),
    )
    .await
    .expect("resume");
    eventually(
        "resumed: Suspended=False JobResumed, a new startTime, a pod",
        T,
        || async {
            let j = api.get("pause").await.expect("get");
            let s = j.status.clone().unwrap_or_default();
            cond(&j, "Suspended") == Some(("False".into(), Some("JobResumed".into())))
                && s.start_time.as_ref().is_some_and(|t| t.0 > first_start.0)
                && s.active == Some(1)
        },
    )
    .await;
    assert_eq!(cond(&api.get("pause").await.expect("get"), "Failed"), None);
    // The deadline counts again from the resume.
    eventually("Failed=True DeadlineExceeded", T, || async {
        let j = api.get("pause").await.expect("get");
        cond(&j, "Failed") == Some(("True".into(), Some("DeadlineExceeded".into())))
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_limit_fails_the_job() {
    let env = start_with(opts()).await;
    let _k = kubelet(&env.client, |_| Fate::Fail);
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &job("boom", json!({"backoffLimit": 2})),
    )
    .await
    .expect("create");
    eventually("Failed=True BackoffLimitExceeded", T, || async {
        let j = api.get("boom").await.expect("get");
        cond(&j, "Failed") == Some(("True".into(), Some("BackoffLimitExceeded".into())))
    })
    .await;
    let j = api.get("boom").await.expect("get");
    assert_eq!(
        j.status.as_ref().and_then(|s| s.failed),
        Some(3),
        "backoffLimit 2 → the third failure fails it"
    );
    assert_eq!(cond(&j, "FailureTarget").map(|c| c.0), Some("True".into()));
    assert!(cond(&j, "Complete").is_none());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline_fails_and_ttl_deletes() {
    let env = start_with(opts()).await;
    let _k = kubelet(&env.client, |p: &Pod| {
        if p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("job-name"))
            .map(String::as_str)
            == Some("quick")
        {
            Fate::Succeed
        } else {
            Fate::NotReady
        }
    });
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &job("slow", json!({"activeDeadlineSeconds": 1})),
    )
    .await
    .expect("create");
    eventually("Failed=True DeadlineExceeded", T, || async {
        let j = api.get("slow").await.expect("get");
        cond(&j, "Failed") == Some(("True".into(), Some("DeadlineExceeded".into())))
    })
    .await;
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    eventually("running pod deleted", T, || async {
        pods.list(&ListParams::default().labels("job-name=slow"))
            .await
            .expect("list")
            .items
            .is_empty()
    })
    .await;

    api.create(
        &PostParams::default(),
        &job("quick", json!({"ttlSecondsAfterFinished": 1})),
    )
    .await
    .expect("create");
    eventually("Complete", T, || async {
        api.get_opt("quick")
            .await
            .expect("get")
            .is_none_or(|j| cond(&j, "Complete").is_some())
    })
    .await;
    eventually("deleted by TTL", T, || async {
        api.get_opt("quick").await.expect("get").is_none()
    })
    .await;
    env.stop().await;
}

/// Every pod of `app` (any state), by the `job-name` label.
async fn job_pods(client: &kube::Client, name: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .expect("list pods")
        .items
}

async fn delete_pod(client: &kube::Client, name: &str) {
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    match pods.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("delete pod {name}: {e}"),
    }
}

/// A pod garbage collector far more eager than kube's deletes every pod
/// the moment it succeeds: each success is still counted exactly once
/// (the job-tracking finalizer holds the pod until it is), so the Job
/// completes with succeeded 4 from exactly 4 pods. Counted from the cache
/// alone, the later successes were absorbed and pods kept being created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successes_count_once_when_finished_pods_are_deleted_at_once() {
    let env = start_with(opts()).await;
    let _k = kubelet(&env.client, |_| Fate::Succeed);
    let created: Arc<Mutex<std::collections::BTreeSet<String>>> = Arc::default();
    let (client, seen) = (env.client.clone(), created.clone());
    let reaper = tokio::spawn(async move {
        loop {
            for p in job_pods(&client, "reap").await {
                seen.lock()
                    .expect("lock")
                    .insert(p.metadata.uid.clone().unwrap_or_default());
                let done = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded");
                if done && p.metadata.deletion_timestamp.is_none() {
                    delete_pod(&client, p.metadata.name.as_deref().unwrap_or_default()).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &job("reap", json!({"completions": 4, "parallelism": 2})),
    )
    .await
    .expect("create");
    eventually("Complete=True", T, || async {
        let j = api.get("reap").await.expect("get");
        cond(&j, "Complete") == Some(("True".into(), Some("CompletionsReached".into())))
    })
    .await;
    let s = api.get("reap").await.expect("get").status.expect("status");
    assert_eq!(s.succeeded, Some(4), "{s:?}");
    assert_eq!(s.failed, None, "{s:?}");
    assert!(
        s.uncounted_terminated_pods.as_ref().is_none_or(|u| u
            .succeeded
            .as_ref()
            .is_none_or(Vec::is_empty)
            && u.failed.as_ref().is_none_or(Vec::is_empty)),
        "{s:?}"
    );
    eventually("every pod released and gone", T, || async {
        job_pods(&env.client, "reap").await.is_empty()
    })
    .await;
    reaper.abort();
    assert_eq!(
        created.lock().expect("lock").len(),
        4,
        "exactly 4 pods were created"
    );
    env.stop().await;
}

/// `kubectl delete pod` on a running worker counts as a failure (kube's
/// isPodFailed: deleted before it succeeded), so two deletions exceed
/// backoffLimit 1. Before, a deleted pod vanished uncounted and the Job
/// replaced it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_deleted_while_running_count_as_failed() {
    let env = start_with(opts()).await;
    let _k = kubelet(&env.client, |_| Fate::NotReady);
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &job("evicted", json!({"backoffLimit": 1})),
    )
    .await
    .expect("create");
    let mut deleted = std::collections::BTreeSet::new();
    for round in 1..=2 {
        let victim = eventually_some("a running worker", T, || async {
            job_pods(&env.client, "evicted")
                .await
                .into_iter()
                .find(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
        })
        .await;
        let name = victim.metadata.name.clone().unwrap_or_default();
        assert!(
            victim
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == "batch.kubernetes.io/job-tracking")),
            "the pod carries the tracking finalizer: {:?}",
            victim.metadata.finalizers
        );
        assert!(deleted.insert(name.clone()), "round {round}: {name} again");
        delete_pod(&env.client, &name).await;
        eventually("the deletion counted", T, || async {
            let s = api
                .get("evicted")
                .await
                .expect("get")
                .status
                .unwrap_or_default();
            s.failed == Some(round)
        })
        .await;
    }
    eventually("Failed=True BackoffLimitExceeded", T, || async {
        let j = api.get("evicted").await.expect("get");
        cond(&j, "Failed") == Some(("True".into(), Some("BackoffLimitExceeded".into())))
    })
    .await;
    let s = api
        .get("evicted")
        .await
        .expect("get")
        .status
        .expect("status");
    assert_eq!(s.failed, Some(2), "{s:?}");
    assert_eq!(s.succeeded, None, "{s:?}");
    eventually("no pod left", T, || async {
        job_pods(&env.client, "evicted").await.is_empty()
    })
    .await;
    env.stop().await;
}

/// With `restartPolicy: OnFailure` the kubelet restarts containers in
/// place; kube counts those restarts toward backoffLimit
/// (pastBackoffLimitOnFailure), so a crash-looping pod fails its Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_restarts_count_toward_the_backoff_limit() {
    let env = start_with(opts()).await;
    let _k = kubelet(&env.client, |_| Fate::NotReady);
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    let mut j = job("crashloop", json!({"backoffLimit": 2}));
    if let Some(t) = j.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        t.restart_policy = Some("OnFailure".into());
    }
    api.create(&PostParams::default(), &j)
        .await
        .expect("create");
    let pod = eventually_some("a running worker", T, || async {
        job_pods(&env.client, "crashloop")
            .await
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    let restarted = |n: i32| {
        json!({"status": {"containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": false,
            "restartCount": n, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})
    };
    pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(restarted(1)))
        .await
        .expect("one restart");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let j = api.get("crashloop").await.expect("get");
    assert_eq!(
        cond(&j, "FailureTarget"),
        None,
        "one restart is under the limit"
    );
    pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(restarted(2)))
        .await
        .expect("two restarts");
    eventually("Failed=True BackoffLimitExceeded", T, || async {
        let j = api.get("crashloop").await.expect("get");
        cond(&j, "Failed") == Some(("True".into(), Some("BackoffLimitExceeded".into())))
    })
    .await;
    eventually("the crash-looping pod is deleted", T, || async {
        job_pods(&env.client, "crashloop").await.is_empty()
    })
    .await;
    env.stop().await;
}

/// Deleting a Job releases its pods: with background propagation the
/// garbage collector deletes them and the tracking finalizer goes with the
/// Job (kube's orphan pods); with `--cascade=orphan` they stay, without the
/// finalizer, so nothing is left stuck in Terminating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_job_releases_its_pods() {
    let env = start_with(opts()).await;
    let _k = kubelet(&env.client, |_| Fate::Ready);
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    for name in ["bg", "orphaned"] {
        api.create(
            &PostParams::default(),
            &job(name, json!({"parallelism": 2, "completions": 2})),
        )
        .await
        .expect("create");
        eventually("two running workers", T, || async {
            job_pods(&env.client, name)
                .await
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count()
                == 2
        })
        .await;
    }
    api.delete("bg", &DeleteParams::background())
        .await
        .expect("delete bg");
    api.delete("orphaned", &DeleteParams::orphan())
        .await
        .expect("delete orphaned");
    eventually("the background-deleted Job's pods are gone", T, || async {
        job_pods(&env.client, "bg").await.is_empty()
    })
    .await;
    eventually("the orphaned pods lost owner and finalizer", T, || async {
        let left = job_pods(&env.client, "orphaned").await;
        left.len() == 2
            && left.iter().all(|p| {
                p.metadata
                    .owner_references
                    .as_ref()
                    .is_none_or(Vec::is_empty)
                    && p.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
                    && p.metadata.deletion_timestamp.is_none()
            })
    })
    .await;
    env.stop().await;
}
