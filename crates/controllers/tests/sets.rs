//! StatefulSets (ordered creation, scale-down order, rolling update to a
//! new revision), DaemonSets (one pod per eligible node, tainted and
//! unselected nodes skipped, node affinity pinning), CronJobs on an
//! injected clock, and node lifecycle (NotReady, taints, eviction).

mod workloads_common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubeforge_controllers::WorkloadOptions;
use kubeforge_controllers::workloads::{Clock, ManualClock};
use kubeforge_testenv::eventually_some;
use serde_json::json;
use workloads_common::*;

const T: Duration = Duration::from_secs(30);

async fn live_pods(client: &kube::Client, sel: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::default_namespaced(client.clone());
    let mut v: Vec<Pod> = api
        .list(&ListParams::default().labels(sel))
        .await
        .expect("list")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    v.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    v
}

/// What the test's own pod watch has recorded (`+name` added, `-name`
/// deleted), once it holds at least `n` entries starting with `sign`: the
/// watch may lag behind what a list already shows.
async fn watched(events: &Mutex<Vec<String>>, sign: char, n: usize) -> Vec<String> {
    eventually_some(
        &format!("the watch to record {n} `{sign}` events"),
        T,
        || async {
            let v = events.lock().expect("lock").clone();
            (v.iter().filter(|e| e.starts_with(sign)).count() >= n).then_some(v)
        },
    )
    .await
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulset_creates_in_order_scales_down_in_reverse_and_rolls() {
    let env = start().await;
    // Record the order pods appear and disappear.
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let ev = events.clone();
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    let w = pods.clone();
    let watch = tokio::spawn(async move {
        let mut s = std::pin::pin!(
            watcher(w, watcher::Config::default().labels("app=web")).default_backoff()
        );
        let mut known = std::collections::BTreeSet::new();
        while let Some(e) = s.next().await {
            match e {
                Ok(watcher::Event::Apply(p)) => {
                    let n = p.metadata.name.clone().unwrap_or_default();
                    if known.insert(n.clone()) {
                        ev.lock().expect("lock").push(format!("+{n}"));
                    }
                }
                Ok(watcher::Event::Delete(p)) => {
                    let n = p.metadata.name.clone().unwrap_or_default();
                    known.remove(&n);
                    ev.lock().expect("lock").push(format!("-{n}"));
                }
                _ => {}
            }
        }
    });
    let api: Api<StatefulSet> = Api::default_namespaced(env.client.clone());
    let ss: StatefulSet = obj(json!({"metadata": {"name": "web"}, "spec": {
        "replicas": 3, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]}}}}));
    api.create(&PostParams::default(), &ss)
        .await
        .expect("create");
    // Without a kubelet web-0 never gets ready: web-1 must not appear.
    eventually("web-0 created", T, || async {
        names(&live_pods(&env.client, "app=web").await) == ["web-0"]
    })
    .await;
    // Asserting an absence: nothing shows that web-1 will never come, so
    // give the controller a moment to (wrongly) create it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        names(&live_pods(&env.client, "app=web").await),
        ["web-0"],
        "web-1 created before web-0 was ready"
    );
    let p0 = pods.get("web-0").await.expect("web-0");
    let spec = p0.spec.clone().expect("spec");
    assert_eq!(
        (spec.hostname.as_deref(), spec.subdomain.as_deref()),
        (Some("web-0"), Some("web"))
    );
    assert_eq!(
        p0.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("apps.kubernetes.io/pod-index"))
            .map(String::as_str),
        Some("0")
    );
    let _k = kubelet(&env.client, all_ready);
    eventually("3 ready", T, || async {
        api.get("web")
            .await
            .expect("get")
            .status
            .is_some_and(|s| s.ready_replicas == Some(3))
    })
    .await;
    assert_eq!(
        watched(&events, '+', 3).await,
        ["+web-0", "+web-1", "+web-2"]
    );
    let s = api.get("web").await.expect("get").status.expect("status");
    assert_eq!(s.current_revision, s.update_revision);
    assert!(
        s.update_revision
            .as_deref()
            .is_some_and(|r| r.starts_with("web-"))
    );

    // Rolling update: replaced from the highest ordinal down.
    events.lock().expect("lock").clear();
    api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:2"}]}}}})))
        .await
        .expect("update");
    eventually(
        "rolled out (currentRevision == updateRevision, 3 updated)",
        T,
        || async {
            let s = api
                .get("web")
                .await
                .expect("get")
                .status
                .unwrap_or_default();
            s.updated_replicas == Some(3)
                && s.ready_replicas == Some(3)
                && s.current_revision == s.update_revision
                && s.observed_generation == Some(2)
        },
    )
    .await;
    let deleted: Vec<String> = watched(&events, '-', 3)
        .await
        .into_iter()
        .filter(|e| e.starts_with('-'))
        .collect();
    assert_eq!(deleted, ["-web-2", "-web-1", "-web-0"]);
    let imgs: Vec<String> = live_pods(&env.client, "app=web")
        .await
        .iter()
        .filter_map(|p| p.spec.as_ref()?.containers[0].image.clone())
        .collect();
    assert_eq!(imgs, ["nginx:2"; 3]);

    // Scale down: highest ordinal first.
    events.lock().expect("lock").clear();
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .expect("scale");
    eventually("1 left", T, || async {
        names(&live_pods(&env.client, "app=web").await) == ["web-0"]
    })
    .await;
    assert_eq!(watched(&events, '-', 2).await, ["-web-2", "-web-1"]);
    watch.abort();
    env.stop().await;
}

/// OrderedReady with `minReadySeconds`: ordinal 1 is created only once
/// ordinal 0 has been Ready that long (kube's isRunningAndAvailable), and
/// `availableReplicas` catches up without a pod event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_ready_waits_for_min_ready_seconds() {
    let env = start().await;
    let _k = kubelet(&env.client, all_ready);
    let api: Api<StatefulSet> = Api::default_namespaced(env.client.clone());
    let ss: StatefulSet = obj(json!({"metadata": {"name": "slow"}, "spec": {
        "replicas": 2, "minReadySeconds": 2, "serviceName": "slow",
        "selector": {"matchLabels": {"app": "slow"}},
        "template": {"metadata": {"labels": {"app": "slow"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}}));
    api.create(&PostParams::default(), &ss)
        .await
        .expect("create");
    eventually("2 available", T, || async {
        api.get("slow")
            .await
            .expect("get")
            .status
            .is_some_and(|s| s.available_replicas == Some(2))
    })
    .await;
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    let p0 = pods.get("slow-0").await.expect("slow-0");
    let ready_at = p0
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time)
        .expect("slow-0 Ready since")
        .0;
    let created = pods
        .get("slow-1")
        .await
        .expect("slow-1")
        .metadata
        .creation_timestamp
        .expect("created")
        .0;
    // Whole seconds: either timestamp may have been truncated.
    assert!(
        created.as_second() >= ready_at.as_second() + 2,
        "slow-1 created at {created}, slow-0 Ready at {ready_at}: before minReadySeconds"
    );
    env.stop().await;
}

async fn node(
    client: &kube::Client,
    name: &str,
    labels: serde_json::Value,
    taints: serde_json::Value,
) {
    let api: Api<Node> = Api::all(client.clone());
    let n: Node =
        obj(json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}));
    api.create(&PostParams::default(), &n).await.expect("node");
    let now = jiff::Timestamp::now().to_string();
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now, "lastTransitionTime": now}]}})))
        .await
        .expect("node status");
}

fn pinned_node(p: &Pod) -> Option<String> {
    let terms = &p
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let f = terms.first()?.match_fields.as_ref()?.first()?;
    (f.key == "metadata.name")
        .then(|| f.values.as_ref()?.first().cloned())
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_one_pod_per_eligible_node() {
    let env = start().await;
    let _k = kubelet(&env.client, all_ready);
    node(&env.client, "n1", json!({"disk": "ssd"}), json!([])).await;
    node(
        &env.client,
        "n2",
        json!({"disk": "ssd"}),
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    )
    .await;
    node(&env.client, "n3", json!({"disk": "hdd"}), json!([])).await;
    // unschedulable (cordoned) nodes still run daemons.
    node(
        &env.client,
        "n4",
        json!({"disk": "ssd"}),
        json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
    )
    .await;
    let api: Api<DaemonSet> = Api::default_namespaced(env.client.clone());
    let ds: DaemonSet = obj(json!({"metadata": {"name": "agent"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
            "nodeSelector": {"disk": "ssd"},
            "containers": [{"name": "a", "image": "agent:1"}]}}}}));
    api.create(&PostParams::default(), &ds)
        .await
        .expect("create");
    eventually("pods on n1 and n4 only", T, || async {
        let mut nodes: Vec<String> = live_pods(&env.client, "app=agent")
            .await
            .iter()
            .filter_map(pinned_node)
            .collect();
        nodes.sort();
        nodes == ["n1", "n4"]
    })
    .await;
    eventually("status", T, || async {
        api.get("agent")
            .await
            .expect("get")
            .status
            .is_some_and(|s| {
                s.desired_number_scheduled == 2
                    && s.current_number_scheduled == 2
                    && s.number_ready == 2
                    && s.updated_number_scheduled == Some(2)
            })
    })
    .await;
    let p = &live_pods(&env.client, "app=agent").await[0];
    let tol = p
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    assert!(tol.iter().any(
        |t| t.key.as_deref() == Some("node.kubernetes.io/unreachable")
            && t.effect.as_deref() == Some("NoExecute")
    ));
    assert!(
        p.spec.as_ref().and_then(|s| s.node_name.clone()).is_none(),
        "left to the scheduler"
    );
    // A new eligible node gets a pod; tolerating the taint adds n2.
    node(&env.client, "n5", json!({"disk": "ssd"}), json!([])).await;
    eventually("n5 gets a pod", T, || async {
        live_pods(&env.client, "app=agent")
            .await
            .iter()
            .filter_map(pinned_node)
            .any(|n| n == "n5")
    })
    .await;
    api.patch("agent", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}}})))
        .await
        .expect("tolerate");
    eventually(
        "n2 joins and all pods are on the new template",
        T,
        || async {
            let ps = live_pods(&env.client, "app=agent").await;
            let mut nodes: Vec<String> = ps.iter().filter_map(pinned_node).collect();
            nodes.sort();
            nodes == ["n1", "n2", "n4", "n5"]
                && ps.iter().all(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.tolerations.as_ref())
                        .is_some_and(|t| t.iter().any(|t| t.key.as_deref() == Some("dedicated")))
                })
        },
    )
    .await;
    env.stop().await;
}

/// A daemon pod that is still terminating holds its node: the replacement
/// is created once it is gone, never beside it (kube's podsShouldBeOnNode
/// counts terminating pods that have not finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_replaces_a_terminating_pod_only_once_it_is_gone() {
    let env = start().await;
    let _k = kubelet(&env.client, all_ready);
    node(&env.client, "solo", json!({}), json!([])).await;
    let api: Api<DaemonSet> = Api::default_namespaced(env.client.clone());
    let ds: DaemonSet = obj(json!({"metadata": {"name": "hold"}, "spec": {
        "selector": {"matchLabels": {"app": "hold"}},
        "template": {"metadata": {"labels": {"app": "hold"}}, "spec": {
            "containers": [{"name": "a", "image": "agent:1"}]}}}}));
    api.create(&PostParams::default(), &ds)
        .await
        .expect("create");
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    let all = || async {
        pods.list(&ListParams::default().labels("app=hold"))
            .await
            .expect("list")
            .items
    };
    let first = eventually_some("the daemon pod", T, || async {
        all().await.into_iter().next()
    })
    .await;
    let name = first.metadata.name.clone().expect("name");
    // A finalizer keeps the deleted pod around, terminating.
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
    )
    .await
    .expect("add finalizer");
    pods.delete(&name, &Default::default())
        .await
        .expect("delete");
    // Asserting an absence (no replacement beside the terminating pod):
    // nothing shows it will never come, so give the controller a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let now = all().await;
    assert_eq!(
        names(&now),
        std::slice::from_ref(&name),
        "a replacement was created beside the terminating pod"
    );
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    eventually("the replacement, once the old pod is gone", T, || async {
        let now = all().await;
        now.len() == 1 && now[0].metadata.uid != first.metadata.uid
    })
    .await;
    env.stop().await;
}

/// Move `clock` forward to the object's creationTimestamp if it is behind.
fn catch_up(clock: &ManualClock, meta: &kube::api::ObjectMeta) {
    let created = meta
        .creation_timestamp
        .as_ref()
        .expect("creationTimestamp")
        .0;
    if created > clock.now() {
        clock.set(created);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjob_runs_on_schedule_with_injected_clock() {
    let clock = ManualClock::new(jiff::Timestamp::now());
    let env = start_with(WorkloadOptions {
        clock: Arc::new(clock.clone()),
        job_backoff_base: Duration::ZERO,
        ..WorkloadOptions::default()
    })
    .await;
    let api: Api<CronJob> = Api::default_namespaced(env.client.clone());
    let cj: CronJob = obj(json!({"metadata": {"name": "tick"}, "spec": {
        "schedule": "*/5 * * * *", "concurrencyPolicy": "Forbid",
        "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}}));
    let created = api
        .create(&PostParams::default(), &cj)
        .await
        .expect("create");
    // The server stamps creationTimestamp from the wall clock, which has
    // moved on since the manual clock was made: bring the manual clock up
    // to it, or a 5-minute boundary between the two would leave no start
    // time in (created, now + 300 s].
    catch_up(&clock, &created.metadata);
    let jobs: Api<Job> = Api::default_namespaced(env.client.clone());
    // Asserting an absence (no job yet): give the controller a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        jobs.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty(),
        "no job before the first scheduled time"
    );
    clock.advance(Duration::from_secs(300));
    eventually("a job is created", T, || async {
        jobs.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len()
            == 1
    })
    .await;
    let j = &jobs.list(&ListParams::default()).await.expect("list").items[0];
    let jname = j.metadata.name.clone().expect("name");
    let scheduled = j
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("batch.kubernetes.io/cronjob-scheduled-timestamp"))
        .cloned()
        .expect("annotation");
    let ts: jiff::Timestamp = scheduled.parse().expect("timestamp");
    assert_eq!(ts.as_second() % 300, 0, "on a 5-minute boundary");
    assert_eq!(jname, format!("tick-{}", ts.as_second() / 60));
    eventually("status.active and lastScheduleTime", T, || async {
        api.get("tick").await.expect("get").status.is_some_and(|s| {
            s.active.as_ref().is_some_and(|a| a.len() == 1)
                && s.last_schedule_time.is_some_and(|t| t.0 == ts)
        })
    })
    .await;
    // Forbid: the next time passes while the job runs: no second job.
    clock.advance(Duration::from_secs(300));
    // Asserting an absence (no second job): give the controller a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        jobs.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    // The job's pod succeeds → Complete → lastSuccessfulTime.
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    eventually("job pod exists", T, || async {
        !pods
            .list(&ListParams::default().labels(&format!("job-name={jname}")))
            .await
            .expect("list")
            .items
            .is_empty()
    })
    .await;
    for p in pods
        .list(&ListParams::default().labels(&format!("job-name={jname}")))
        .await
        .expect("list")
        .items
    {
        set_pod_status(
            &env.client,
            "default",
            p.metadata.name.as_deref().unwrap_or_default(),
            Fate::Succeed,
            "",
        )
        .await;
    }
    eventually("lastSuccessfulTime set", T, || async {
        api.get("tick")
            .await
            .expect("get")
            .status
            .is_some_and(|s| s.last_successful_time.is_some())
    })
    .await;
    // The start Forbid held back is still within its window: it runs now
    // (once), as kube does.
    eventually("the held-back start runs", T, || async {
        jobs.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len()
            == 2
    })
    .await;
    // Asserting an absence (it runs once, no third job): give the
    // controller a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        jobs.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        2
    );
    let s = api.get("tick").await.expect("get").status.expect("status");
    assert_eq!(s.active.map(|a| a.len()), Some(1));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_lifecycle_marks_unreachable_and_evicts() {
    let env = start_with(WorkloadOptions {
        node_monitor_grace_period: Duration::from_millis(800),
        node_monitor_period: Duration::from_millis(100),
        ..WorkloadOptions::default()
    })
    .await;
    node(&env.client, "sick", json!({}), json!([])).await;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    let _ = ns_api
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "kube-node-lease"}})),
        )
        .await;
    leases
        .create(&PostParams::default(), &obj(json!({"metadata": {"name": "sick"}, "spec": {"holderIdentity": "sick", "leaseDurationSeconds": 40, "renewTime": jiff::Timestamp::now().to_string()}})))
        .await
        .expect("lease");
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    let pod = |name: &str, tolerations: serde_json::Value| -> Pod {
        let mut spec = json!({"nodeName": "sick", "containers": [{"name": "c", "image": "nginx"}]});
        if !tolerations.is_null() {
            spec["tolerations"] = tolerations;
        }
        obj(json!({"metadata": {"name": name}, "spec": spec}))
    };
    pods.create(&PostParams::default(), &pod("short", json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}]))).await.expect("pod");
    pods.create(
        &PostParams::default(),
        &pod("none", json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}])),
    )
    .await
    .expect("pod");
    pods.create(
        &PostParams::default(),
        &pod("default", serde_json::Value::Null),
    )
    .await
    .expect("pod");
    // DefaultTolerationSeconds: a pod with unrelated tolerations still gets
    // the 300 s not-ready/unreachable ones.
    let custom = pods
        .create(
            &PostParams::default(),
            &pod("custom", json!([{"key": "other", "operator": "Exists"}])),
        )
        .await
        .expect("pod");
    let tol = custom.spec.and_then(|s| s.tolerations).unwrap_or_default();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        assert!(
            tol.iter()
                .any(|t| t.key.as_deref() == Some(key) && t.toleration_seconds == Some(300)),
            "{key} toleration added: {tol:?}"
        );
    }
    for n in ["short", "none", "default"] {
        set_pod_status(&env.client, "default", n, Fate::Ready, "10.9.0.1").await;
    }
    let nodes: Api<Node> = Api::all(env.client.clone());
    // Heartbeats stop: Unknown + taints after the grace period.
    eventually("Ready=Unknown and unreachable taints", T, || async {
        let n = nodes.get("sick").await.expect("node");
        let unknown = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "Ready"
                        && c.status == "Unknown"
                        && c.reason.as_deref() == Some("NodeStatusUnknown")
                })
            });
        let taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
        unknown
            && taints
                .iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute")
            && taints
                .iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoSchedule")
    })
    .await;
    eventually(
        "pod tolerating 0 s evicted at once",
        Duration::from_secs(5),
        || async { pods.get_opt("none").await.expect("get").is_none() },
    )
    .await;
    eventually(
        "1 s toleration pod evicted",
        Duration::from_secs(10),
        || async { pods.get_opt("short").await.expect("get").is_none() },
    )
    .await;
    let d = pods
        .get("default")
        .await
        .expect("300 s default toleration keeps the pod");
    assert!(
        d.spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.toleration_seconds == Some(300)))
    );
    let ready = d
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone());
    assert_eq!(
        ready.as_deref(),
        Some("False"),
        "pods of an unreachable node are marked not ready"
    );

    // Heartbeats resume: the kubelet posts Ready, the taints go.
    leases
        .patch(
            "sick",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"renewTime": jiff::Timestamp::now().to_string()}})),
        )
        .await
        .expect("renew");
    let now = jiff::Timestamp::now().to_string();
    nodes.patch_status("sick", &PatchParams::default(), &Patch::Merge(json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now, "lastTransitionTime": now}]}})))
        .await
        .expect("ready");
    eventually("taints removed", T, || async {
        nodes
            .get("sick")
            .await
            .expect("node")
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .all(|t| t.key != "node.kubernetes.io/unreachable")
    })
    .await;
    env.stop().await;
}
