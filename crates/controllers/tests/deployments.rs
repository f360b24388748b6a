//! Deployments and ReplicaSets on the embedded server, with a test kubelet
//! writing pod status: creation to `rollout status` success, rolling
//! updates that respect maxUnavailable/maxSurge (observed pod counts over
//! the whole rollout), rollback to an earlier revision, scaling, Recreate,
//! pause, the progress deadline, ReplicaSet adoption and deletion order,
//! and a template the server rejects (no hot loop).

mod workloads_common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use workloads_common::*;

const T: Duration = Duration::from_secs(30);

fn deployment(name: &str, replicas: i32, image: &str, strategy: serde_json::Value) -> Deployment {
    obj(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": strategy,
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "nginx", "image": image}]}}
        }
    }))
}

/// kubectl's `rollout status` rule for Deployments: done when the status
/// describes the current generation and every replica is updated and
/// available (an error if the progress deadline was exceeded).
fn rollout_done(d: &Deployment) -> Result<bool, String> {
    let s = d.status.clone().unwrap_or_default();
    if d.metadata.generation > s.observed_generation {
        return Ok(false);
    }
    if let Some(c) = s
        .conditions
        .as_ref()
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Progressing"))
        && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    {
        return Err(format!(
            "deployment {:?} exceeded its progress deadline",
            d.metadata.name
        ));
    }
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = s.updated_replicas.unwrap_or(0);
    Ok(updated >= want
        && s.replicas.unwrap_or(0) <= updated
        && s.available_replicas.unwrap_or(0) >= updated)
}

/// The `deployment.kubernetes.io/revision` annotation.
fn revision_of(meta: &kube::api::ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get("deployment.kubernetes.io/revision"))
        .map(String::as_str)
}

/// `kubectl rollout undo`: put an earlier revision's template back.
async fn rollback(
    api: &Api<Deployment>,
    name: &str,
    template: k8s_openapi::api::core::v1::PodTemplateSpec,
) {
    let ops = json!([{"op": "replace", "path": "/spec/template", "value": template}]);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(ops).expect("patch")),
    )
    .await
    .expect("undo");
}

async fn wait_rollout(api: &Api<Deployment>, name: &str) -> Deployment {
    eventually("rollout status success", T, || async {
        let d = api.get(name).await.expect("get deployment");
        rollout_done(&d).expect("rollout")
    })
    .await;
    api.get(name).await.expect("get deployment")
}

fn running_ready(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count()
}

async fn pods_of(client: &kube::Client, app: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::default_namespaced(client.clone());
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods")
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_rolls_out_with_status_conditions_and_revision() {
    let env = start().await;
    let _k = kubelet(&env.client, all_ready);
    let api: Api<Deployment> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &deployment("web", 3, "nginx", json!({})),
    )
    .await
    .expect("create");
    let d = wait_rollout(&api, "web").await;
    let s = d.status.clone().expect("status");
    assert_eq!(s.replicas, Some(3));
    assert_eq!(s.ready_replicas, Some(3));
    assert_eq!(s.updated_replicas, Some(3));
    let conds = s.conditions.expect("conditions");
    let avail = conds
        .iter()
        .find(|c| c.type_ == "Available")
        .expect("Available");
    assert_eq!(
        (avail.status.as_str(), avail.reason.as_deref()),
        ("True", Some("MinimumReplicasAvailable"))
    );
    let prog = conds
        .iter()
        .find(|c| c.type_ == "Progressing")
        .expect("Progressing");
    assert_eq!(
        (prog.status.as_str(), prog.reason.as_deref()),
        ("True", Some("NewReplicaSetAvailable"))
    );
    assert_eq!(revision_of(&d.metadata), Some("1"));
    // One ReplicaSet named after the template hash, which labels its pods.
    let rss: Api<ReplicaSet> = Api::default_namespaced(env.client.clone());
    let list = rss
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list rs")
        .items;
    assert_eq!(list.len(), 1);
    let rs = &list[0];
    let hash = rs
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"))
        .cloned()
        .expect("hash label");
    assert_eq!(
        rs.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    assert!(
        hash.chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
        "{hash}"
    );
    let pods = pods_of(&env.client, "web").await;
    assert_eq!(running_ready(&pods), 3);
    assert!(pods.iter().all(|p| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash"))
            == Some(&hash)
    }));
    assert!(pods.iter().all(|p| {
        p.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(&format!("web-{hash}-")))
    }));
    env.stop().await;
}

/// Ready, non-terminating pods and all pods of `app` over time, from a watch.
struct Observed {
    min_ready: usize,
    max_total: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_respects_max_unavailable_and_surge_then_undo() {
    let env = start().await;
    let _k = kubelet(&env.client, all_ready);
    let api: Api<Deployment> = Api::default_namespaced(env.client.clone());
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}});
    api.create(
        &PostParams::default(),
        &deployment("roll", 4, "nginx:1.26", strategy),
    )
    .await
    .expect("create");
    wait_rollout(&api, "roll").await;

    // Watch every pod of the app while the image changes.
    let state: Arc<Mutex<(BTreeMap<String, Pod>, Observed)>> = Arc::new(Mutex::new((
        BTreeMap::new(),
        Observed {
            min_ready: usize::MAX,
            max_total: 0,
        },
    )));
    // And the ReplicaSets' desired replicas: maxSurge bounds their sum (kube's
    // guarantee; pods of a ReplicaSet just scaled down may still exist for
    // the moment its controller takes to delete them, on kube as here).
    let max_desired = Arc::new(Mutex::new((BTreeMap::<String, i32>::new(), 0i32)));
    let rs_api: Api<ReplicaSet> = Api::default_namespaced(env.client.clone());
    let md = max_desired.clone();
    let rs_watch = tokio::spawn(async move {
        let mut s = std::pin::pin!(
            watcher(rs_api, watcher::Config::default().labels("app=roll")).default_backoff()
        );
        while let Some(ev) = s.next().await {
            let mut g = md.lock().expect("lock");
            match ev {
                Ok(watcher::Event::InitApply(r) | watcher::Event::Apply(r)) => {
                    let n = r.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    g.0.insert(r.metadata.name.clone().unwrap_or_default(), n);
                }
                Ok(watcher::Event::Delete(r)) => {
                    g.0.remove(&r.metadata.name.clone().unwrap_or_default());
                }
                _ => continue,
            }
            let sum: i32 = g.0.values().sum();
            g.1 = g.1.max(sum);
        }
    });
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    let st = state.clone();
    let watch = tokio::spawn(async move {
        let mut s = std::pin::pin!(
            watcher(pods, watcher::Config::default().labels("app=roll")).default_backoff()
        );
        while let Some(ev) = s.next().await {
            let mut g = st.lock().expect("lock");
            match ev {
                Ok(watcher::Event::InitApply(p)) => {
                    // The initial list: counted once complete.
                    g.0.insert(p.metadata.name.clone().unwrap_or_default(), p);
                    continue;
                }
                Ok(watcher::Event::Apply(p)) => {
                    g.0.insert(p.metadata.name.clone().unwrap_or_default(), p);
                }
                Ok(watcher::Event::Delete(p)) => {
                    g.0.remove(&p.metadata.name.clone().unwrap_or_default());
                }
                _ => continue,
            }
            let all: Vec<Pod> = g.0.values().cloned().collect();
            let ready = running_ready(&all);
            let total = all
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            g.1.min_ready = g.1.min_ready.min(ready);
            g.1.max_total = g.1.max_total.max(total);
        }
    });
    eventually("watch saw the 4 pods", T, || async {
        state.lock().expect("lock").0.len() == 4
    })
    .await;

    api.patch(
        "roll",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}})),
    )
    .await
    .expect("set image");
    let d = wait_rollout(&api, "roll").await;
    watch.abort();
    rs_watch.abort();
    let (min_ready, max_total) = {
        let g = state.lock().expect("lock");
        (g.1.min_ready, g.1.max_total)
    };
    let max_desired = max_desired.lock().expect("lock").1;
    assert!(
        min_ready >= 3,
        "ready pods dropped to {min_ready} (< replicas - maxUnavailable = 3)"
    );
    assert!(
        max_desired <= 5,
        "the ReplicaSets asked for {max_desired} pods at once (> replicas + maxSurge = 5)"
    );
    assert!(
        max_total > 4,
        "the rollout never surged ({max_total} pods at most): maxSurge 1 allows a fifth pod"
    );
    assert_eq!(revision_of(&d.metadata), Some("2"));
    let images = |pods: &[Pod]| -> BTreeSet<String> {
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                p.spec
                    .as_ref()
                    .map(|s| s.containers[0].image.clone().unwrap_or_default())
            })
            .collect()
    };
    eventually("only new pods left", T, || async {
        images(&pods_of(&env.client, "roll").await) == BTreeSet::from(["nginx:1.27".to_string()])
    })
    .await;

    // `kubectl rollout undo`: copy revision 1's template back.
    let rss: Api<ReplicaSet> = Api::default_namespaced(env.client.clone());
    let list = rss
        .list(&ListParams::default().labels("app=roll"))
        .await
        .expect("list")
        .items;
    assert_eq!(list.len(), 2, "old ReplicaSet kept for history");
    let rev1 = list
        .iter()
        .find(|rs| revision_of(&rs.metadata) == Some("1"))
        .expect("revision 1");
    assert_eq!(rev1.spec.as_ref().and_then(|s| s.replicas), Some(0));
    let mut template = rev1
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .expect("template");
    if let Some(l) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove("pod-template-hash");
    }
    rollback(&api, "roll", template).await;
    let d = wait_rollout(&api, "roll").await;
    assert_eq!(
        revision_of(&d.metadata),
        Some("3"),
        "a rollback makes the old ReplicaSet the newest revision"
    );
    eventually("back to the old image", T, || async {
        images(&pods_of(&env.client, "roll").await) == BTreeSet::from(["nginx:1.26".to_string()])
    })
    .await;
    let list = rss
        .list(&ListParams::default().labels("app=roll"))
        .await
        .expect("list")
        .items;
    assert_eq!(
        list.len(),
        2,
        "the rollback reused the revision-1 ReplicaSet"
    );
    let back = list
        .iter()
        .find(|rs| rs.metadata.uid == rev1.metadata.uid)
        .expect("same RS");
    let ann = back.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(
        ann.get("deployment.kubernetes.io/revision-history")
            .map(String::as_str),
        Some("1")
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_up_and_down_and_revision_history_limit() {
    let env = start().await;
    let _k = kubelet(&env.client, all_ready);
    let api: Api<Deployment> = Api::default_namespaced(env.client.clone());
    let mut d = deployment("sc", 2, "nginx:1", json!({}));
    d.spec.as_mut().expect("spec").revision_history_limit = Some(1);
    api.create(&PostParams::default(), &d)
        .await
        .expect("create");
    wait_rollout(&api, "sc").await;
    api.patch(
        "sc",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .expect("scale");
    wait_rollout(&api, "sc").await;
    assert_eq!(running_ready(&pods_of(&env.client, "sc").await), 5);
    api.patch(
        "sc",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .expect("scale");
    wait_rollout(&api, "sc").await;
    eventually("1 pod left", T, || async {
        pods_of(&env.client, "sc")
            .await
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count()
            == 1
    })
    .await;
    // Three more revisions with a history limit of 1: two ReplicaSets stay.
    for image in ["nginx:2", "nginx:3", "nginx:4"] {
        api.patch(
            "sc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}}})),
        )
        .await
        .expect("set image");
        wait_rollout(&api, "sc").await;
    }
    let rss: Api<ReplicaSet> = Api::default_namespaced(env.client.clone());
    eventually("history trimmed to 1 old ReplicaSet", T, || async {
        rss.list(&ListParams::default().labels("app=sc"))
            .await
            .expect("list")
            .items
            .len()
            == 2
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_removes_old_pods_before_creating_new() {
    let env = start().await;
    let _k = kubelet(&env.client, all_ready);
    let api: Api<Deployment> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &deployment("rec", 3, "nginx:1", json!({"type": "Recreate"})),
    )
    .await
    .expect("create");
    wait_rollout(&api, "rec").await;
    let mixed = Arc::new(Mutex::new(false));
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    let m = mixed.clone();
    let watch = tokio::spawn(async move {
        let mut live: BTreeMap<String, String> = BTreeMap::new();
        let mut s = std::pin::pin!(
            watcher(pods, watcher::Config::default().labels("app=rec")).default_backoff()
        );
        while let Some(ev) = s.next().await {
            match ev {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => {
                    let img = p
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers[0].image.clone())
                        .unwrap_or_default();
                    live.insert(p.metadata.name.clone().unwrap_or_default(), img);
                }
                Ok(watcher::Event::Delete(p)) => {
                    live.remove(&p.metadata.name.clone().unwrap_or_default());
                }
                _ => continue,
            }
            let imgs: BTreeSet<&String> = live.values().collect();
            if imgs.len() > 1 {
                *m.lock().expect("lock") = true;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    api.patch(
        "rec",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:2"}]}}}})),
    )
    .await
    .expect("set image");
    wait_rollout(&api, "rec").await;
    eventually("3 new pods", T, || async {
        let p = pods_of(&env.client, "rec").await;
        running_ready(&p) == 3
            && p.iter().all(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.containers[0].image.as_deref())
                    == Some("nginx:2")
            })
    })
    .await;
    watch.abort();
    assert!(
        !*mixed.lock().expect("lock"),
        "old and new pods existed at the same time under Recreate"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_deployment_does_not_roll_out_and_deadline_is_reported() {
    let env = start().await;
    // Pods of "stuck" never become ready.
    let _k = kubelet(&env.client, |p: &Pod| {
        if p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str)
            == Some("stuck")
        {
            Fate::NotReady
        } else {
            Fate::Ready
        }
    });
    let api: Api<Deployment> = Api::default_namespaced(env.client.clone());
    api.create(
        &PostParams::default(),
        &deployment("pz", 2, "nginx:1", json!({})),
    )
    .await
    .expect("create");
    wait_rollout(&api, "pz").await;
    api.patch(
        "pz",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": true, "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:2"}]}}}})),
    )
    .await
    .expect("pause + change");
    eventually("Progressing=Unknown DeploymentPaused", T, || async {
        let d = api.get("pz").await.expect("get");
        d.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "Progressing"
                    && c.status == "Unknown"
                    && c.reason.as_deref() == Some("DeploymentPaused")
            })
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss: Api<ReplicaSet> = Api::default_namespaced(env.client.clone());
    assert_eq!(
        rss.list(&ListParams::default().labels("app=pz"))
            .await
            .expect("list")
            .items
            .len(),
        1,
        "no rollout while paused"
    );
    api.patch(
        "pz",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": false}})),
    )
    .await
    .expect("resume");
    wait_rollout(&api, "pz").await;
    assert_eq!(
        rss.list(&ListParams::default().labels("app=pz"))
            .await
            .expect("list")
            .items
            .len(),
        2
    );

    // A deadline of 1 s with pods that never get ready.
    let mut d = deployment("stuck", 1, "nginx:1", json!({}));
    d.spec.as_mut().expect("spec").progress_deadline_seconds = Some(1);
    api.create(&PostParams::default(), &d)
        .await
        .expect("create");
    eventually("ProgressDeadlineExceeded", T, || async {
        let d = api.get("stuck").await.expect("get");
        d.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "Progressing"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
            })
        })
    })
    .await;
    assert!(rollout_done(&api.get("stuck").await.expect("get")).is_err());
    env.stop().await;
}

/// `kubectl rollout undo` to an existing ReplicaSet long after the last
/// rollout finished: the first sync sees the old ReplicaSet as new with no
/// replicas yet, which is no progress, but a finished rollout is no base to
/// time out from (kube's DeploymentTimedOut), so `rollout status` succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_undo_after_the_progress_deadline_does_not_time_out() {
    let env = start().await;
    let _k = kubelet(&env.client, all_ready);
    let api: Api<Deployment> = Api::default_namespaced(env.client.clone());
    let mut d = deployment("undo", 2, "nginx:1.26", json!({}));
    d.spec.as_mut().expect("spec").progress_deadline_seconds = Some(1);
    api.create(&PostParams::default(), &d)
        .await
        .expect("create");
    let first = wait_rollout(&api, "undo").await;
    let template = first
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .expect("template");
    api.patch(
        "undo",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}})),
    )
    .await
    .expect("update image");
    wait_rollout(&api, "undo").await;
    // Let the deadline pass since the rollout finished.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Every Progressing condition the Deployment shows from here on, with
    // the resourceVersion that showed it.
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let rv = api
        .get("undo")
        .await
        .expect("get")
        .metadata
        .resource_version
        .expect("resourceVersion");
    let mut events = api
        .watch(
            &kube::api::WatchParams::default().fields("metadata.name=undo"),
            &rv,
        )
        .await
        .expect("watch")
        .boxed();
    let record = seen.clone();
    let watch = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            let Ok(kube::api::WatchEvent::Modified(d)) = ev else {
                continue;
            };
            let rv = d.metadata.resource_version.clone().unwrap_or_default();
            for c in d.status.and_then(|s| s.conditions).unwrap_or_default() {
                if c.type_ == "Progressing" {
                    record
                        .lock()
                        .expect("lock")
                        .push((rv.clone(), c.reason.unwrap_or_default()));
                }
            }
        }
    });

    rollback(&api, "undo", template).await;
    let d = wait_rollout(&api, "undo").await;
    assert_eq!(
        revision_of(&d.metadata),
        Some("3"),
        "the rollback reused revision 1's ReplicaSet"
    );
    let progressing = |d: &Deployment| {
        d.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Progressing"))
            .and_then(|c| c.reason.clone())
    };
    eventually("Progressing=True NewReplicaSetAvailable", T, || async {
        progressing(&api.get("undo").await.expect("get")).as_deref()
            == Some("NewReplicaSetAvailable")
    })
    .await;
    let last = api
        .get("undo")
        .await
        .expect("get")
        .metadata
        .resource_version
        .expect("resourceVersion");
    eventually("the watch reached the finished rollout", T, || async {
        seen.lock().expect("lock").iter().any(|(rv, _)| *rv == last)
    })
    .await;
    watch.abort();
    let reasons: Vec<String> = seen
        .lock()
        .expect("lock")
        .iter()
        .map(|(_, r)| r.clone())
        .collect();
    assert!(
        !reasons.iter().any(|r| r == "ProgressDeadlineExceeded"),
        "the rollback was reported as timed out: {reasons:?}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_template_sets_replica_failure_without_hot_looping() {
    let env = start().await;
    let api: Api<Deployment> = Api::default_namespaced(env.client.clone());
    // A PriorityClass that does not exist passes Deployment validation (as
    // in kube) but the Priority admission plugin rejects its pods.
    let d: Deployment = obj(json!({
        "metadata": {"name": "bad"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bad"}},
            "template": {"metadata": {"labels": {"app": "bad"}},
                "spec": {"priorityClassName": "no-such-class", "containers": [{"name": "c", "image": "nginx"}]}}}
    }));
    api.create(&PostParams::default(), &d)
        .await
        .expect("create");
    eventually("ReplicaFailure=True FailedCreate", T, || async {
        let d = api.get("bad").await.expect("get");
        d.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "ReplicaFailure"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("FailedCreate")
            })
        })
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_adopts_orphans_and_deletes_unready_first() {
    let env = start().await;
    let pods: Api<Pod> = Api::default_namespaced(env.client.clone());
    // Two orphans matching the selector: one Ready, one not.
    for name in ["orphan-ready", "orphan-unready"] {
        let p: Pod = obj(json!({"metadata": {"name": name, "labels": {"app": "rsa"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}));
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    set_pod_status(
        &env.client,
        "default",
        "orphan-ready",
        Fate::Ready,
        "10.0.0.1",
    )
    .await;
    set_pod_status(
        &env.client,
        "default",
        "orphan-unready",
        Fate::NotReady,
        "10.0.0.2",
    )
    .await;
    let rss: Api<ReplicaSet> = Api::default_namespaced(env.client.clone());
    let rs: ReplicaSet = obj(json!({"metadata": {"name": "rsa"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "rsa"}},
            "template": {"metadata": {"labels": {"app": "rsa"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}));
    rss.create(&PostParams::default(), &rs).await.expect("rs");
    eventually("one pod left, the ready one, adopted", T, || async {
        let list = pods_of(&env.client, "rsa").await;
        let live: Vec<&Pod> = list
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        live.len() == 1
            && live[0].metadata.name.as_deref() == Some("orphan-ready")
            && live[0]
                .metadata
                .owner_references
                .as_ref()
                .is_some_and(|o| o.iter().any(|r| r.kind == "ReplicaSet" && r.name == "rsa"))
    })
    .await;
    eventually("status replicas 1, ready 1", T, || async {
        let rs = rss.get("rsa").await.expect("rs");
        rs.status.is_some_and(|s| {
            s.replicas == 1
                && s.ready_replicas == Some(1)
                && s.available_replicas == Some(1)
                && s.fully_labeled_replicas == Some(1)
        })
    })
    .await;
    // A pod whose labels stop matching is released and replaced.
    pods.patch(
        "orphan-ready",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await
    .expect("relabel");
    eventually("released and replaced", T, || async {
        let p = pods.get("orphan-ready").await.expect("pod");
        let released = p
            .metadata
            .owner_references
            .as_ref()
            .is_none_or(|o| o.is_empty());
        released
            && pods_of(&env.client, "rsa")
                .await
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count()
                == 1
    })
    .await;
    // Deleting the ReplicaSet garbage-collects its pods.
    rss.delete("rsa", &DeleteParams::foreground())
        .await
        .expect("delete");
    eventually("pods collected", T, || async {
        pods_of(&env.client, "rsa").await.is_empty()
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_not_matching_template_is_422() {
    let env = start().await;
    let api: Api<Deployment> = Api::default_namespaced(env.client.clone());
    let mut d = deployment("mismatch", 1, "nginx", json!({}));
    d.spec.as_mut().expect("spec").selector.match_labels =
        Some(BTreeMap::from([("app".to_string(), "other".to_string())]));
    let err = api
        .create(&PostParams::default(), &d)
        .await
        .expect_err("rejected");
    let kube::Error::Api(s) = err else {
        panic!("not an API error: {err}")
    };
    assert_eq!(s.code, 422);
    assert!(
        s.message
            .contains("`selector` does not match template `labels`"),
        "{}",
        s.message
    );
    let mut d = deployment("nosel", 1, "nginx", json!({}));
    d.spec.as_mut().expect("spec").selector = Default::default();
    let err = api
        .create(&PostParams::default(), &d)
        .await
        .expect_err("rejected");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );
    env.stop().await;
}

/// As kube's ReplicaSet controller: a create refused because the namespace
/// is being deleted is no failure (no `ReplicaFailure`, no retries), since
/// every create there fails until the namespace is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_namespace_is_no_replica_failure() {
    let server = kubeforge_apiserver::ApiServer::in_memory().await;
    // Namespaces wait for a namespace controller that is not running: the
    // namespace stays Terminating with its ReplicaSet in it.
    server.set_controllers_running(true);
    let client = server.client();
    let workloads = kubeforge_controllers::workloads::start(client.clone(), Default::default())
        .await
        .expect("workload controllers start");
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "ending"}})),
    )
    .await
    .expect("create namespace");
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), "ending");
    let rs: ReplicaSet = obj(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }));
    api.create(&PostParams::default(), &rs)
        .await
        .expect("create replicaset");
    nss.delete("ending", &DeleteParams::default())
        .await
        .expect("delete namespace");
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .expect("scale up");
    let synced = kubeforge_testenv::eventually_some("the scale-up is observed", T, || async {
        let rs = api.get("web").await.expect("get");
        rs.status
            .as_ref()
            .is_some_and(|s| s.observed_generation == rs.metadata.generation)
            .then_some(rs)
    })
    .await;
    let conditions = synced.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        conditions.iter().all(|c| c.type_ != "ReplicaFailure"),
        "{conditions:?}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ending");
    assert!(
        pods.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    workloads.stop().await;
}
