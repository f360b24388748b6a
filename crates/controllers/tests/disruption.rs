//! ReplicationControllers, PodDisruptionBudgets and `pods/eviction` on
//! the embedded server with a test kubelet, through kube-rs as an
//! operator or a drain tool calls them: an RC keeps its replicas (selector
//! and labels defaulted from the template, scaled through `/scale`, pods
//! owned by it), the disruption controller keeps budget status as kube's
//! does (integer and percentage budgets over Deployments and RCs,
//! unmanaged pods, a controller it cannot find), and evictions honour the
//! budget: one allowed, the next a 429 with kube's Status until a
//! replacement is ready; pending and not-ready pods, two budgets, a budget
//! whose status lags its spec, dry run and a missing pod as kube answers
//! them.

mod workloads_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kubeforge_controllers::workloads::{WorkloadController, WorkloadOptions};
use serde_json::{Value, json};
use workloads_common::*;

const T: Duration = Duration::from_secs(30);

fn deployment(name: &str, replicas: i32) -> Deployment {
    obj(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
        }
    }))
}

fn budget(name: &str, app: &str, rule: Value) -> PodDisruptionBudget {
    let mut spec = json!({"selector": {"matchLabels": {"app": app}}});
    for (k, v) in rule.as_object().expect("rule is an object") {
        spec[k] = v.clone();
    }
    obj(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name}, "spec": spec}),
    )
}

async fn pods_of(client: &Client, app: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Wait until the budget's status shows these counts for its generation.
async fn wait_budget(
    api: &Api<PodDisruptionBudget>,
    name: &str,
    (expected, desired, healthy, allowed): (i32, i32, i32, i32),
) -> PodDisruptionBudget {
    eventually(
        &format!("budget {name} at {expected}/{desired}/{healthy}/{allowed}"),
        T,
        || async {
            let b = api.get(name).await.expect("get budget");
            let s = b.status.clone().unwrap_or_default();
            s.observed_generation == b.metadata.generation
                && (
                    s.expected_pods,
                    s.desired_healthy,
                    s.current_healthy,
                    s.disruptions_allowed,
                ) == (expected, desired, healthy, allowed)
        },
    )
    .await;
    api.get(name).await.expect("get budget")
}

fn condition(b: &PodDisruptionBudget) -> (String, String) {
    let c = b
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionAllowed"))
        .expect("DisruptionAllowed condition");
    (c.status.clone(), c.reason.clone())
}

/// POST an eviction and return the status code and the raw body.
async fn evict_raw(client: &Client, pod: &str, body: Value) -> (u16, Value) {
    let req = http::Request::post(format!("/api/v1/namespaces/default/pods/{pod}/eviction"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("encode").into())
        .expect("request");
    let resp = client.send(req).await.expect("send");
    let code = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    (code, serde_json::from_slice(&bytes).expect("a JSON body"))
}

fn eviction(pod: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_controller_keeps_replicas_and_scales() {
    let env = start().await;
    let _kubelet = kubelet(&env.client, all_ready);
    let rcs: Api<ReplicationController> = Api::namespaced(env.client.clone(), "default");
    // No selector and no labels: both default to the template's labels.
    let rc: ReplicationController =
        obj(json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}));
    let created = rcs
        .create(&PostParams::default(), &rc)
        .await
        .expect("create rc");
    let spec = created.spec.clone().expect("spec");
    assert_eq!(
        spec.selector,
        Some([("app".to_string(), "web".to_string())].into())
    );
    assert_eq!(
        created.metadata.labels,
        Some([("app".to_string(), "web".to_string())].into())
    );
    eventually("3 ready replicas", T, || async {
        let s = rcs
            .get("web")
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        s.replicas == 3 && s.ready_replicas == Some(3) && s.available_replicas == Some(3)
    })
    .await;
    let pods = pods_of(&env.client, "web").await;
    assert_eq!(pods.len(), 3);
    for p in &pods {
        let owner = &p.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.api_version.as_str(),
                owner.controller
            ),
            ("ReplicationController", "v1", Some(true))
        );
        assert!(p.metadata.generate_name.as_deref() == Some("web-"));
    }
    // The scale subresource shows the label map as a selector string.
    let scale = rcs.get_scale("web").await.expect("get scale");
    assert_eq!(
        scale.status.as_ref().and_then(|s| s.selector.as_deref()),
        Some("app=web")
    );
    rcs.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .expect("scale to 1");
    eventually("1 pod left", T, || async {
        pods_of(&env.client, "web").await.len() == 1
            && rcs
                .get("web")
                .await
                .expect("get")
                .status
                .unwrap_or_default()
                .replicas
                == 1
    })
    .await;
    // A selector that does not match the template is refused as kube does.
    let bad: ReplicationController =
        obj(json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "bad"},
        "spec": {"selector": {"app": "other"}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}));
    match rcs.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422);
            assert!(
                e.message.contains("spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`"),
                "{}",
                e.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
    rcs.delete("web", &DeleteParams::background())
        .await
        .expect("delete rc");
    eventually("pods collected with their RC", T, || async {
        pods_of(&env.client, "web").await.is_empty()
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_honours_the_budget() {
    let env = start().await;
    // Replacements stay not ready until the test says so, so the budget
    // cannot recover between two evictions behind the test's back.
    let hold = Arc::new(AtomicBool::new(false));
    let held = hold.clone();
    let _kubelet = kubelet(&env.client, move |_| {
        if held.load(Ordering::SeqCst) {
            Fate::NotReady
        } else {
            Fate::Ready
        }
    });
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    deps.create(&PostParams::default(), &deployment("app", 3))
        .await
        .expect("create deployment");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(env.client.clone(), "default");
    budgets
        .create(
            &PostParams::default(),
            &budget("app-pdb", "app", json!({"minAvailable": 2})),
        )
        .await
        .expect("create budget");
    let b = wait_budget(&budgets, "app-pdb", (3, 2, 3, 1)).await;
    assert_eq!(condition(&b), ("True".into(), "SufficientPods".into()));

    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let names: Vec<String> = pods_of(&env.client, "app")
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    // Dry run: allowed, nothing changes.
    let (code, _) = evict_raw(
        &env.client,
        &names[0],
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": names[0]},
               "deleteOptions": {"dryRun": ["All"]}}),
    )
    .await;
    assert_eq!(code, 201);
    assert!(pods.get_opt(&names[0]).await.expect("get").is_some());
    assert_eq!(
        budgets
            .get("app-pdb")
            .await
            .expect("get")
            .status
            .expect("status")
            .disruptions_allowed,
        1
    );

    // The first eviction is allowed: kube's Success Status, the pod gone,
    // the budget spent.
    hold.store(true, Ordering::SeqCst);
    let (code, body) = evict_raw(&env.client, &names[0], eviction(&names[0])).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    );
    // The second, before a replacement is ready, would break the budget.
    let (code, body) = evict_raw(&env.client, &names[1], eviction(&names[1])).await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(
        body["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let cause = &body["details"]["causes"][0];
    assert_eq!(cause["reason"], "DisruptionBudget");
    assert!(
        cause["message"].as_str().is_some_and(
            |m| m.starts_with("The disruption budget app-pdb needs 2 healthy pods and has ")
        ),
        "{cause}"
    );
    assert!(pods.get_opt(&names[1]).await.expect("get").is_some());
    // kube-rs sees the same refusal.
    match pods.evict(&names[1], &EvictParams::default()).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"))
        }
        other => panic!("expected 429, got {other:?}"),
    }

    // The Deployment replaces the evicted pod; once it is ready the budget
    // allows one disruption again, and a drain can go on.
    let replacement = || async {
        pods_of(&env.client, "app")
            .await
            .into_iter()
            .find(|p| !names.contains(p.metadata.name.as_ref().expect("name")))
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    };
    eventually("a replacement pod", T, || async {
        replacement().await.is_some()
    })
    .await;
    let replacement = replacement()
        .await
        .and_then(|p| p.metadata.name)
        .expect("replacement");
    set_pod_status(
        &env.client,
        "default",
        &replacement,
        Fate::Ready,
        "10.0.0.99",
    )
    .await;
    let b = wait_budget(&budgets, "app-pdb", (3, 2, 3, 1)).await;
    assert_eq!(condition(&b), ("True".into(), "SufficientPods".into()));
    pods.evict(&names[1], &EvictParams::default())
        .await
        .expect("second eviction once the budget allows it");
    assert!(pods.get_opt(&names[1]).await.expect("get").is_none());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_count_controllers_and_report_problems() {
    let env = start().await;
    // Pods of "slow" stay Pending; everything else becomes ready.
    let _kubelet = kubelet(&env.client, |p: &Pod| {
        match p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str)
        {
            Some("slow") => Fate::Ignore,
            Some("sick") => Fate::NotReady,
            _ => Fate::Ready,
        }
    });
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(env.client.clone(), "default");
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");

    // maxUnavailable 50% of a 4-replica Deployment: the Deployment's
    // scale is what is expected, 2 must stay healthy.
    deps.create(&PostParams::default(), &deployment("four", 4))
        .await
        .expect("create");
    budgets
        .create(
            &PostParams::default(),
            &budget("four", "four", json!({"maxUnavailable": "50%"})),
        )
        .await
        .expect("create budget");
    wait_budget(&budgets, "four", (4, 2, 4, 2)).await;

    // No matching pods: nothing expected, nothing allowed.
    budgets
        .create(
            &PostParams::default(),
            &budget("none", "nothing", json!({"minAvailable": 1})),
        )
        .await
        .expect("create budget");
    let b = wait_budget(&budgets, "none", (0, 1, 0, 0)).await;
    assert_eq!(condition(&b), ("False".into(), "InsufficientPods".into()));

    // A bare pod under a percentage budget is unmanaged: left out of the
    // count and reported.
    let bare: Pod = obj(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bare", "labels": {"app": "bare"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}));
    pods.create(&PostParams::default(), &bare)
        .await
        .expect("create pod");
    budgets
        .create(
            &PostParams::default(),
            &budget("bare", "bare", json!({"minAvailable": "50%"})),
        )
        .await
        .expect("create budget");
    wait_budget(&budgets, "bare", (0, 0, 1, 0)).await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), "default");
    eventually("UnmanagedPods event", T, || async {
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("UnmanagedPods")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bare")
            })
    })
    .await;

    // A controller with no scale (a ConfigMap, which the garbage
    // collector sees exists): the sync fails safe.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.client.clone(), "default");
    let holder = cms
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "holder"}})),
        )
        .await
        .expect("create configmap");
    let ghost: Pod = obj(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ghost", "labels": {"app": "ghost"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "holder",
                "uid": holder.metadata.uid, "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}));
    pods.create(&PostParams::default(), &ghost)
        .await
        .expect("create pod");
    budgets
        .create(
            &PostParams::default(),
            &budget("ghost", "ghost", json!({"maxUnavailable": 1})),
        )
        .await
        .expect("create budget");
    eventually("SyncFailed", T, || async {
        let b = budgets.get("ghost").await.expect("get");
        b.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.reason == "SyncFailed"
                        && c.status == "False"
                        && c.message == "found no controllers for pod \"ghost\""
                })
            })
            && b.status
                .as_ref()
                .is_some_and(|s| s.disruptions_allowed == 0)
    })
    .await;

    // Pending pods are evicted without asking their budget, even one that
    // allows nothing.
    deps.create(&PostParams::default(), &deployment("slow", 1))
        .await
        .expect("create");
    budgets
        .create(
            &PostParams::default(),
            &budget("slow", "slow", json!({"minAvailable": 1})),
        )
        .await
        .expect("create budget");
    wait_budget(&budgets, "slow", (1, 1, 0, 0)).await;
    let slow = pods_of(&env.client, "slow").await;
    let name = slow[0].metadata.name.clone().expect("name");
    pods.evict(&name, &EvictParams::default())
        .await
        .expect("a pending pod is evicted");

    // Not-ready pods go while the budget is met, without spending it.
    deps.create(&PostParams::default(), &deployment("sick", 2))
        .await
        .expect("create");
    budgets
        .create(
            &PostParams::default(),
            &budget(
                "sick",
                "sick",
                json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
            ),
        )
        .await
        .expect("create budget");
    wait_budget(&budgets, "sick", (2, 1, 0, 0)).await;
    let sick = pods_of(&env.client, "sick").await;
    assert!(sick.iter().all(|p| !is_ready(p)));
    let name = sick[0].metadata.name.clone().expect("name");
    pods.evict(&name, &EvictParams::default())
        .await
        .expect("AlwaysAllow evicts an unhealthy pod");

    // Two budgets over one pod: kube's 500.
    budgets
        .create(
            &PostParams::default(),
            &budget("four-b", "four", json!({"minAvailable": 1})),
        )
        .await
        .expect("create budget");
    let four = pods_of(&env.client, "four").await;
    let name = four[0].metadata.name.clone().expect("name");
    let (code, body) = evict_raw(&env.client, &name, eviction(&name)).await;
    assert_eq!(code, 500, "{body}");
    assert_eq!(
        body["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );

    // Bad input: a name that is not the URL's, a pod that does not exist.
    let (code, body) = evict_raw(&env.client, &name, eviction("other")).await;
    assert_eq!(
        (code, body["message"].as_str()),
        (
            400,
            Some("name in URL does not match name in Eviction object")
        )
    );
    let (code, body) = evict_raw(&env.client, "missing", eviction("missing")).await;
    assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(body["message"], "pods \"missing\" not found");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_not_yet_observed_refuses_evictions() {
    // Without the disruption controller the budget's status never catches
    // up with its spec.
    let opts = WorkloadOptions {
        enabled: WorkloadController::ALL
            .into_iter()
            .filter(|c| *c != WorkloadController::Disruption)
            .collect(),
        ..WorkloadOptions::default()
    };
    let env = start_with(opts).await;
    let _kubelet = kubelet(&env.client, all_ready);
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    deps.create(&PostParams::default(), &deployment("web", 1))
        .await
        .expect("create");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(env.client.clone(), "default");
    budgets
        .create(
            &PostParams::default(),
            &budget("web", "web", json!({"maxUnavailable": 1})),
        )
        .await
        .expect("create budget");
    eventually("a ready pod", T, || async {
        pods_of(&env.client, "web").await.iter().any(is_ready)
    })
    .await;
    let pod = pods_of(&env.client, "web").await[0]
        .metadata
        .name
        .clone()
        .expect("name");
    let (code, body) = evict_raw(&env.client, &pod, eviction(&pod)).await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(
        body["details"],
        json!({"causes": [{"reason": "DisruptionBudget",
            "message": "The disruption budget web is still being processed by the server."}],
            "retryAfterSeconds": 10})
    );
    env.stop().await;
}
