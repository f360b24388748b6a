//! Randomized invariant tests: many short scenarios against the built-in
//! controllers and the scheduler on the embedded server, each pod state the
//! server goes through checked as it is watched —
//!
//! - rolling Deployments (random replicas, maxSurge, maxUnavailable, pod
//!   readiness delays, a scale change mid-rollout): never more than
//!   replicas + maxSurge pods, never fewer than replicas − maxUnavailable
//!   available;
//! - OrderedReady StatefulSets scaled up and down: ordinals always a prefix
//!   `0..n`, ordinal N+1 created only while N is Ready;
//! - Jobs with random parallelism, completions, backoffLimit, failures and
//!   finished pods deleted at once: never more than `parallelism` active,
//!   every finished pod counted exactly once, the Job finished as its
//!   counts say;
//! - the scheduler placing random pods on random nodes while some are
//!   deleted: no node ever over its allocatable CPU;
//! - the first three again with a tenth of the controllers' requests
//!   failing and their watches ending every few seconds: still converging,
//!   still no violation.
//!
//! `KUBEFORGE_INVARIANT_SEED` and `KUBEFORGE_INVARIANT_SCENARIOS` (per
//! kind; default 3 so CI stays short) set the run; a violation names the
//! seed and scenario that reproduce it. The totals are printed for
//! docs/BENCHMARKS.md.

mod workloads_common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubeforge_controllers::WorkloadOptions;
use kubeforge_testenv::{FaultHandle, Faults, Rng, eventually_some};
use serde_json::json;
use workloads_common::*;

const T: Duration = Duration::from_secs(60);

/// The run: (seed, scenarios per kind).
fn budget() -> (u64, usize) {
    let seed = std::env::var("KUBEFORGE_INVARIANT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_2026);
    let n = std::env::var("KUBEFORGE_INVARIANT_SCENARIOS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    (seed, n)
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn live(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
}

/// What the delayed kubelet does with a new pod, and after how long.
type Decide = Box<dyn FnMut(&Pod, &mut Rng) -> (Fate, Duration) + Send>;

/// Every pod turns Ready 0–40 ms after it is seen.
fn ready_within_40ms() -> Decide {
    Box::new(|_, rng| (Fate::Ready, Duration::from_millis(rng.range(0, 40) as u64)))
}

/// A kubelet that writes each new pod's status after a delay it picks,
/// unless the pod is being deleted by then (guarded by resourceVersion, so
/// a deleted pod never turns Succeeded afterwards).
fn delayed_kubelet(client: &kube::Client, seed: u64, mut decide: Decide) -> DelayedKubelet {
    let client = client.clone();
    let task = tokio::spawn(async move {
        let mut rng = Rng::new(seed);
        let api: Api<Pod> = Api::all(client.clone());
        let mut seen = std::collections::HashSet::new();
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = stream.next().await {
            let (Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p))) = ev else {
                continue;
            };
            if !live(&p) || phase(&p) != "Pending" {
                continue;
            }
            if !seen.insert(p.metadata.uid.clone().unwrap_or_default()) {
                continue;
            }
            let (fate, delay) = decide(&p, &mut rng);
            let client = client.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                let name = p.metadata.name.clone().unwrap_or_default();
                let pods: Api<Pod> = Api::namespaced(client, &ns);
                for _ in 0..8 {
                    let Ok(Some(now)) = pods.get_opt(&name).await else {
                        return;
                    };
                    if !live(&now) || now.metadata.uid != p.metadata.uid {
                        return;
                    }
                    let patch = json!({
                        "metadata": {"resourceVersion": now.metadata.resource_version},
                        "status": status_for(fate, "10.244.0.9"),
                    });
                    match pods
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                    {
                        Err(kube::Error::Api(s)) if s.code == 409 => continue,
                        _ => return,
                    }
                }
            });
        }
    });
    DelayedKubelet { task }
}

struct DelayedKubelet {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DelayedKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A check of one observed state: the objects now (by UID) and the one
/// the event was about (`deleted` if it left). `Some(why)` is a violation.
type Check<K> = Box<dyn FnMut(&BTreeMap<String, K>, &K, bool) -> Option<String> + Send>;

/// Watches objects of kind `K` with `labels` and runs `check` on every
/// state.
struct Observer<K> {
    states: Arc<AtomicUsize>,
    violations: Arc<Mutex<Vec<String>>>,
    objects: Arc<Mutex<BTreeMap<String, K>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Observer<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    async fn start(client: &kube::Client, labels: &str, mut check: Check<K>) -> Observer<K> {
        let api: Api<K> = Api::default_namespaced(client.clone());
        let states = Arc::new(AtomicUsize::new(0));
        let violations: Arc<Mutex<Vec<String>>> = Arc::default();
        let objects: Arc<Mutex<BTreeMap<String, K>>> = Arc::default();
        let (st, vi, os) = (states.clone(), violations.clone(), objects.clone());
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let cfg = watcher::Config::default().labels(labels);
        let task = tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
            while let Some(ev) = stream.next().await {
                let (obj, deleted) = match ev {
                    Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => (o, false),
                    Ok(watcher::Event::Delete(o)) => (o, true),
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                let uid = obj.meta().uid.clone().unwrap_or_default();
                let mut map = os.lock().expect("lock");
                if deleted {
                    map.remove(&uid);
                } else {
                    map.insert(uid, obj.clone());
                }
                st.fetch_add(1, Ordering::Relaxed);
                if let Some(why) = check(&map, &obj, deleted) {
                    vi.lock().expect("lock").push(why);
                }
            }
        });
        let _ = synced_rx.await;
        Observer {
            states,
            violations,
            objects,
            task,
        }
    }

    /// Stop; the states checked (fails the test on violations).
    fn finish(self, what: &str) -> usize {
        self.task.abort();
        let v = self.violations.lock().expect("lock").clone();
        assert!(v.is_empty(), "{what}: {} violation(s): {v:#?}", v.len());
        self.states.load(Ordering::Relaxed)
    }
}

/// Scenarios and states checked, over the whole test.
#[derive(Default)]
struct Tally {
    scenarios: usize,
    states: usize,
}

impl Tally {
    fn report(&self, kind: &str, seed: u64) {
        println!(
            "invariants[{kind}] seed {seed:#x}: {} scenarios, {} states checked, violations: 0",
            self.scenarios, self.states
        );
    }
}

#[derive(Clone, Copy, Default)]
struct RollBounds {
    checking: bool,
    min_replicas: i32,
    max_replicas: i32,
    surge: i32,
    unavailable: i32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_updates_keep_surge_and_availability() {
    let (seed, n) = budget();
    let env = start().await;
    rolling_updates(&env, seed, n)
        .await
        .report("deployment", seed);
    env.stop().await;
}

async fn rolling_updates(env: &Env, seed: u64, n: usize) -> Tally {
    let mut rng = Rng::new(seed);
    let _k = delayed_kubelet(&env.client, seed ^ 1, ready_within_40ms());
    let api: Api<Deployment> = Api::default_namespaced(env.client.clone());
    let mut tally = Tally::default();
    for i in 0..n {
        let name = format!("roll-{i}");
        let replicas = rng.range(1, 5) as i32;
        let surge = rng.range(0, 2) as i32;
        let unavailable = match rng.range(0, 2) as i32 {
            0 if surge == 0 => 1,
            u => u,
        };
        let scale_to = rng.chance(50).then(|| rng.range(1, 6) as i32);
        let what = format!(
            "seed {seed:#x} scenario {i}: replicas {replicas}, maxSurge {surge}, maxUnavailable {unavailable}, scale to {scale_to:?}"
        );
        let bounds = Arc::new(Mutex::new(RollBounds::default()));
        // The surge is kube's: the ReplicaSets' replicas (pods the
        // ReplicaSet controller has yet to delete are not counted).
        let b = bounds.clone();
        let sets = Observer::<ReplicaSet>::start(
            &env.client,
            &format!("app={name}"),
            Box::new(move |sets, _, _| {
                let b = *b.lock().expect("lock");
                let total: i32 = sets
                    .values()
                    .filter_map(|rs| rs.spec.as_ref().and_then(|s| s.replicas))
                    .sum();
                (b.checking && total > b.max_replicas + b.surge).then(|| {
                    format!(
                        "ReplicaSets want {total} pods > {} replicas + maxSurge {}",
                        b.max_replicas, b.surge
                    )
                })
            }),
        )
        .await;
        let b = bounds.clone();
        let observer = Observer::<Pod>::start(
            &env.client,
            &format!("app={name}"),
            Box::new(move |pods, _, _| {
                let b = *b.lock().expect("lock");
                if !b.checking {
                    return None;
                }
                let available = pods.values().filter(|p| live(p) && ready(p)).count() as i32;
                let describe = |pods: &BTreeMap<String, Pod>| -> Vec<String> {
                    pods.values()
                        .map(|p| {
                            format!(
                                "{} ready={} live={}",
                                p.metadata.name.as_deref().unwrap_or_default(),
                                ready(p),
                                live(p)
                            )
                        })
                        .collect()
                };
                if available < b.min_replicas - b.unavailable {
                    return Some(format!(
                        "{available} available < {} replicas - maxUnavailable {}: {:?}",
                        b.min_replicas,
                        b.unavailable,
                        describe(pods)
                    ));
                }
                None
            }),
        )
        .await;
        let d: Deployment = obj(json!({
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "app:1"}]}}}
        }));
        api.create(&PostParams::default(), &d)
            .await
            .expect("create");
        wait_complete(&api, &name, replicas, &what).await;
        *bounds.lock().expect("lock") = RollBounds {
            checking: true,
            min_replicas: replicas,
            max_replicas: replicas,
            surge,
            unavailable,
        };
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "app:2"}]}}}})),
        )
        .await
        .expect("new image");
        let mut want = replicas;
        if let Some(to) = scale_to {
            tokio::time::sleep(Duration::from_millis(rng.range(0, 60) as u64)).await;
            {
                let mut b = bounds.lock().expect("lock");
                b.min_replicas = b.min_replicas.min(to);
                b.max_replicas = b.max_replicas.max(to);
            }
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": to}})),
            )
            .await
            .expect("scale");
            want = to;
        }
        wait_complete(&api, &name, want, &what).await;
        tally.states += observer.finish(&what) + sets.finish(&what);
        tally.scenarios += 1;
        api.delete(&name, &DeleteParams::background())
            .await
            .expect("delete");
    }
    tally
}

/// kubectl's rollout-status rule with every pod on the new template.
async fn wait_complete(api: &Api<Deployment>, name: &str, replicas: i32, what: &str) {
    eventually(&format!("{what}: rollout complete"), T, || async {
        let d = api.get(name).await.expect("get");
        let s = d.status.unwrap_or_default();
        s.observed_generation >= d.metadata.generation
            && s.updated_replicas == Some(replicas)
            && s.replicas == Some(replicas)
            && s.available_replicas == Some(replicas)
    })
    .await;
}

fn ordinal(p: &Pod, prefix: &str) -> Option<i64> {
    p.metadata
        .name
        .as_deref()?
        .strip_prefix(prefix)?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_statefulsets_keep_their_order() {
    let (seed, n) = budget();
    let env = start().await;
    ordered_statefulsets(&env, seed, n)
        .await
        .report("statefulset", seed);
    env.stop().await;
}

async fn ordered_statefulsets(env: &Env, seed: u64, n: usize) -> Tally {
    let mut rng = Rng::new(seed ^ 2);
    let _k = delayed_kubelet(&env.client, seed ^ 3, ready_within_40ms());
    let api: Api<StatefulSet> = Api::default_namespaced(env.client.clone());
    let mut tally = Tally::default();
    for i in 0..n {
        let name = format!("ord-{i}");
        let prefix = format!("{name}-");
        let sizes: Vec<i32> = (0..3).map(|_| rng.range(0, 4) as i32).collect();
        let what = format!("seed {seed:#x} scenario {i}: replicas {sizes:?}");
        let p = prefix.clone();
        let mut seen = std::collections::HashSet::new();
        let observer = Observer::<Pod>::start(
            &env.client,
            &format!("app={name}"),
            Box::new(move |pods, pod, deleted| {
                let mut ords: Vec<i64> = pods.values().filter_map(|q| ordinal(q, &p)).collect();
                ords.sort_unstable();
                if ords.iter().enumerate().any(|(i, o)| *o != i as i64) {
                    return Some(format!("ordinals not a prefix: {ords:?}"));
                }
                let k = ordinal(pod, &p)?;
                let first_sight = !deleted && seen.insert(pod.metadata.uid.clone());
                if first_sight && k > 0 {
                    let before = pods.values().find(|q| ordinal(q, &p) == Some(k - 1));
                    if !before.is_some_and(|b| live(b) && ready(b)) {
                        return Some(format!("ordinal {k} exists while {} is not Ready", k - 1));
                    }
                }
                None
            }),
        )
        .await;
        for (step, size) in sizes.iter().enumerate() {
            if step == 0 {
                let ss: StatefulSet = obj(json!({"metadata": {"name": name}, "spec": {
                    "replicas": size, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "c", "image": "db:1"}]}}}}));
                api.create(&PostParams::default(), &ss)
                    .await
                    .expect("create");
            } else {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": size}})),
                )
                .await
                .expect("scale");
            }
            let pods = observer.objects.clone();
            eventually(&format!("{what}: {size} ready"), T, || async {
                let s = api
                    .get(&name)
                    .await
                    .expect("get")
                    .status
                    .unwrap_or_default();
                let here = pods
                    .lock()
                    .expect("lock")
                    .values()
                    .filter(|p| live(p))
                    .count();
                s.ready_replicas.unwrap_or(0) == *size
                    && s.replicas == *size
                    && here == *size as usize
            })
            .await;
        }
        tally.states += observer.finish(&what);
        tally.scenarios += 1;
        api.delete(&name, &DeleteParams::background())
            .await
            .expect("delete");
    }
    tally
}

/// How each pod a Job ran ended, as the watch saw it: its last state, and
/// whether it was seen deleted before it finished while still carrying the
/// tracking finalizer (a failure, kube's isPodFailed; a pod the controller
/// removes on purpose loses the finalizer first and is not counted).
#[derive(Default)]
struct Outcomes {
    succeeded: usize,
    failed: usize,
    /// Succeeded pods the Job may have counted as failed: deleted once it
    /// was failing, from a view where they still ran (kube counts every
    /// pod it sees running then as failed).
    racing: usize,
}

const TRACKING: &str = "batch.kubernetes.io/job-tracking";

fn deleted_unfinished(p: &Pod) -> bool {
    !live(p)
        && !matches!(phase(p), "Succeeded" | "Failed")
        && p.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == TRACKING))
}

fn outcomes(pods: &HashMap<String, (Pod, bool)>, failed_job: bool) -> Outcomes {
    let mut o = Outcomes::default();
    for (p, deleted_unfinished) in pods.values() {
        match phase(p) {
            "Succeeded" => {
                o.succeeded += 1;
                if failed_job && !live(p) {
                    o.racing += 1;
                }
            }
            "Failed" => o.failed += 1,
            _ if *deleted_unfinished => o.failed += 1,
            _ => {}
        }
    }
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_count_every_pod_once() {
    let (seed, n) = budget();
    let env = start_with(WorkloadOptions {
        job_backoff_base: Duration::ZERO,
        ..WorkloadOptions::default()
    })
    .await;
    jobs(&env, seed, n).await.report("job", seed);
    env.stop().await;
}

async fn jobs(env: &Env, seed: u64, n: usize) -> Tally {
    let mut rng = Rng::new(seed ^ 4);
    let _k = delayed_kubelet(
        &env.client,
        seed ^ 5,
        Box::new(|_, rng| {
            let fate = if rng.chance(70) {
                Fate::Succeed
            } else {
                Fate::Fail
            };
            (fate, Duration::from_millis(rng.range(0, 30) as u64))
        }),
    );
    let api: Api<Job> = Api::default_namespaced(env.client.clone());
    let pods_api: Api<Pod> = Api::default_namespaced(env.client.clone());
    let mut tally = Tally::default();
    for i in 0..n {
        let name = format!("batch-{i}");
        let completions = rng.range(1, 6) as i32;
        let parallelism = rng.range(1, 3) as i32;
        let backoff = rng.range(0, 3) as i32;
        let reap = rng.chance(50);
        let what = format!(
            "seed {seed:#x} scenario {i}: completions {completions}, parallelism {parallelism}, backoffLimit {backoff}, reap {reap}"
        );
        // Every pod the Job ever had: last state seen (the final one for a
        // deleted pod) and whether it was deleted unfinished.
        let history: Arc<Mutex<HashMap<String, (Pod, bool)>>> = Arc::default();
        let h = history.clone();
        let observer = Observer::<Pod>::start(
            &env.client,
            &format!("job-name={name}"),
            Box::new(move |pods, pod, _| {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let mut h = h.lock().expect("lock");
                let entry = h.entry(uid).or_insert_with(|| (pod.clone(), false));
                entry.0 = pod.clone();
                entry.1 |= deleted_unfinished(pod);
                drop(h);
                let active = pods
                    .values()
                    .filter(|p| live(p) && !matches!(phase(p), "Succeeded" | "Failed"))
                    .count() as i32;
                (active > parallelism)
                    .then(|| format!("{active} pods active > parallelism {parallelism}"))
            }),
        )
        .await;
        let reaper = reap.then(|| {
            let (pods_api, pods) = (pods_api.clone(), observer.objects.clone());
            tokio::spawn(async move {
                loop {
                    let done: Vec<String> = pods
                        .lock()
                        .expect("lock")
                        .values()
                        .filter(|p| live(p) && matches!(phase(p), "Succeeded" | "Failed"))
                        .filter_map(|p| p.metadata.name.clone())
                        .collect();
                    for n in done {
                        let _ = pods_api.delete(&n, &DeleteParams::default()).await;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        });
        let job: Job = obj(json!({"metadata": {"name": name}, "spec": {
            "completions": completions, "parallelism": parallelism, "backoffLimit": backoff,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}));
        api.create(&PostParams::default(), &job)
            .await
            .expect("create");
        let finished = |j: &Job| {
            j.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| {
                            (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True"
                        })
                        .map(|c| c.type_.clone())
                })
        };
        let end = eventually_some(&format!("{what}: finished"), T, || async {
            finished(&api.get(&name).await.expect("get"))
        })
        .await;
        // The watch may still be catching up with the last pods.
        let deadline = tokio::time::Instant::now() + T;
        let status = loop {
            let s = api
                .get(&name)
                .await
                .expect("get")
                .status
                .unwrap_or_default();
            let o = outcomes(&history.lock().expect("lock"), end == "Failed");
            // Each pod counted once, and as it ended unless it raced.
            let (succeeded, failed) = (
                s.succeeded.unwrap_or(0) as usize,
                s.failed.unwrap_or(0) as usize,
            );
            if succeeded + failed == o.succeeded + o.failed
                && succeeded <= o.succeeded
                && succeeded + o.racing >= o.succeeded
            {
                break s;
            }
            if tokio::time::Instant::now() > deadline {
                let pods: Vec<String> = history
                    .lock()
                    .expect("lock")
                    .values()
                    .map(|(p, d)| {
                        format!(
                            "{} {} deleted={} finalizers={:?} deleted_unfinished={d}",
                            p.metadata.name.as_deref().unwrap_or_default(),
                            phase(p),
                            !live(p),
                            p.metadata.finalizers
                        )
                    })
                    .collect();
                panic!(
                    "{what}: the Job counted succeeded {:?} failed {:?}, its pods say {} and {}: {pods:#?}",
                    s.succeeded, s.failed, o.succeeded, o.failed
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if let Some(r) = reaper {
            r.abort();
        }
        match end.as_str() {
            "Complete" => assert!(
                status.succeeded.unwrap_or(0) >= completions,
                "{what}: Complete with {status:?}"
            ),
            _ => assert!(
                status.failed.unwrap_or(0) > backoff,
                "{what}: Failed with {status:?}"
            ),
        }
        tally.states += observer.finish(&what);
        tally.scenarios += 1;
        api.delete(&name, &DeleteParams::background())
            .await
            .expect("delete");
    }
    tally
}

/// The same invariants while a tenth of the controllers' requests fail
/// (500, 409 on writes, 429 with Retry-After) and their watches end every
/// 1–3 s: each controller keeps making progress, and never breaks an
/// invariant to do it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_invariants_hold_under_api_errors() {
    let (seed, n) = budget();
    let faults = FaultHandle::new(
        Faults::new()
            .error_rate(0.1)
            .retry_after(Duration::from_millis(20))
            .drop_watches_between(Duration::from_secs(1), Duration::from_secs(3))
            .seed(seed),
    );
    let env = start_with_faults(
        WorkloadOptions {
            job_backoff_base: Duration::ZERO,
            ..WorkloadOptions::default()
        },
        &faults,
    )
    .await;
    rolling_updates(&env, seed ^ 0x10, n)
        .await
        .report("deployment, API errors", seed);
    ordered_statefulsets(&env, seed ^ 0x11, n)
        .await
        .report("statefulset, API errors", seed);
    jobs(&env, seed ^ 0x12, n)
        .await
        .report("job, API errors", seed);
    let stats = faults.stats();
    assert!(stats.errors() > 0, "no error was injected: {stats:?}");
    println!("injected: {stats:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_never_overcommits_a_node() {
    let (seed, n) = budget();
    let env = start().await;
    let sched = kubeforge_scheduler::SchedulerBuilder::new(env.client.clone())
        .start()
        .expect("scheduler");
    let mut rng = Rng::new(seed ^ 6);
    let nodes_api: Api<Node> = Api::all(env.client.clone());
    let pods_api: Api<Pod> = Api::default_namespaced(env.client.clone());
    let mut tally = Tally::default();
    for i in 0..n {
        let app = format!("fill-{i}");
        let mut capacity: HashMap<String, i64> = HashMap::new();
        for k in 0..rng.range(1, 4) {
            let name = format!("{app}-n{k}");
            let milli = rng.range(1, 4) * 1000;
            capacity.insert(name.clone(), milli);
            let now = jiff::Timestamp::now().to_string();
            let node: Node = obj(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "pool": app}},
                "spec": {},
            }));
            nodes_api
                .create(&PostParams::default(), &node)
                .await
                .expect("node");
            nodes_api
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                    "allocatable": {"cpu": format!("{milli}m"), "memory": "64Gi", "pods": "110"},
                    "capacity": {"cpu": format!("{milli}m"), "memory": "64Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}]}})),
                )
                .await
                .expect("node status");
        }
        let what = format!("seed {seed:#x} scenario {i}: nodes {capacity:?}");
        let requests: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
        let (req, cap) = (requests.clone(), capacity.clone());
        let observer = Observer::<Pod>::start(
            &env.client,
            &format!("app={app}"),
            Box::new(move |pods, _, _| {
                let req = req.lock().expect("lock");
                let mut used: HashMap<&str, i64> = HashMap::new();
                for p in pods.values() {
                    let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                    let name = p.metadata.name.as_deref().unwrap_or_default();
                    if let (Some(node), Some(m)) = (node, req.get(name)) {
                        *used.entry(node).or_default() += m;
                    }
                }
                used.into_iter()
                    .find(|(node, m)| cap.get(*node).is_some_and(|c| m > c))
                    .map(|(node, m)| format!("node {node}: {m}m requested > {}m", cap[node]))
            }),
        )
        .await;
        let count = rng.range(4, 16);
        let mut names = Vec::new();
        for k in 0..count {
            let name = format!("{app}-p{k}");
            let milli = rng.range(1, 15) * 100;
            requests.lock().expect("lock").insert(name.clone(), milli);
            let pod: Pod = obj(json!({
                "metadata": {"name": name, "labels": {"app": app}},
                "spec": {"nodeSelector": {"pool": app},
                    "containers": [{"name": "c", "image": "app:1",
                        "resources": {"requests": {"cpu": format!("{milli}m")}}}]}
            }));
            pods_api
                .create(&PostParams::default(), &pod)
                .await
                .expect("pod");
            names.push(name.clone());
            if rng.chance(30) && k > 0 {
                let victim = &names[rng.below(names.len() as u64) as usize];
                let _ = pods_api
                    .delete(victim, &DeleteParams::default().grace_period(0))
                    .await;
            }
        }
        // Settled: every pod left is bound or reported unschedulable.
        let pods = observer.objects.clone();
        eventually(&format!("{what}: every pod decided"), T, || async {
            pods.lock().expect("lock").values().all(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                    || p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                        })
            })
        })
        .await;
        tally.states += observer.finish(&what);
        tally.scenarios += 1;
    }
    tally.report("scheduler", seed);
    sched.stop().await;
    env.stop().await;
}
