//! The garbage collector against an in-process server: Background,
//! Foreground and Orphan propagation, dependents with two owners, custom
//! resources as owners and dependents, cycles, owners that never existed,
//! and other controllers' finalizers left alone — and every case where
//! kube's collector keeps an object: an owner whose resource discovery no
//! longer lists, an owner reference at an apiVersion not served, a
//! cluster-scoped dependent of a namespaced owner, a failing API group;
//! and cross-namespace references judged by coordinates whatever the
//! order the objects are seen in.

mod common;

use std::time::Duration;

use common::{
    configmap, configmap_with, crd, crontab_crd, custom, custom_object, events_about, eventually,
    namespace, owner_ref, pod, start, uid, with_unavailable_group,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kubeforge_apiserver::ApiServer;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

async fn gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    matches!(api.get_opt(name).await, Ok(None))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_deletes_dependents() {
    let env = start().await;
    let c = &env.client;
    let owner = configmap(c, "default", "owner", vec![]).await;
    let r = owner_ref("v1", "ConfigMap", "owner", &uid(&owner), false);
    for i in 0..3 {
        pod(c, "default", &format!("dep-{i}"), vec![r.clone()]).await;
    }
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    eventually("the dependents are deleted", WAIT, || async {
        pods.list(&Default::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    // No propagation policy: background too.
    let owner = configmap(c, "default", "owner2", vec![]).await;
    let r = owner_ref("v1", "ConfigMap", "owner2", &uid(&owner), false);
    configmap(c, "default", "dep", vec![r]).await;
    cms.delete("owner2", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("dep is deleted", WAIT, || gone(&cms, "dep")).await;
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_waits_for_blocking_dependents() {
    let env = start().await;
    let c = &env.client;
    let owner = configmap(c, "default", "owner", vec![]).await;
    let r = owner_ref("v1", "ConfigMap", "owner", &uid(&owner), true);
    pod(c, "default", "a", vec![r.clone()]).await;
    pod(c, "default", "b", vec![r.clone()]).await;
    // One dependent is held by another controller's finalizer.
    configmap_with(
        c,
        "default",
        "held",
        vec![r.clone()],
        vec!["example.com/hold"],
    )
    .await;

    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let out = cms
        .delete("owner", &DeleteParams::foreground())
        .await
        .expect("delete owner");
    let obj = out.left().expect("the owner is returned while it waits");
    assert!(obj.metadata.deletion_timestamp.is_some());
    assert!(
        obj.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == "foregroundDeletion")),
        "{:?}",
        obj.metadata.finalizers
    );

    eventually("the pods are deleted", WAIT, || async {
        pods.list(&Default::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    eventually("the held dependent is marked deleting", WAIT, || async {
        cms.get_opt("held")
            .await
            .ok()
            .flatten()
            .is_some_and(|h| h.metadata.deletion_timestamp.is_some())
    })
    .await;
    // The owner waits for the blocking dependent.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let o = cms.get("owner").await.expect("owner still there");
    assert!(o.metadata.deletion_timestamp.is_some());

    // The other controller lets go: the dependent goes, then the owner.
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}]))
                .expect("patch"),
        ),
    )
    .await
    .expect("remove finalizer");
    eventually("the owner is deleted", WAIT, || gone(&cms, "owner")).await;
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_keeps_other_finalizers() {
    let env = start().await;
    let c = &env.client;
    let owner = configmap_with(c, "default", "owner", vec![], vec!["example.com/keep"]).await;
    let r = owner_ref("v1", "ConfigMap", "owner", &uid(&owner), true);
    configmap(c, "default", "dep", vec![r]).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cms.delete("owner", &DeleteParams::foreground())
        .await
        .expect("delete");
    eventually("dep is deleted", WAIT, || gone(&cms, "dep")).await;
    eventually("foregroundDeletion is removed", WAIT, || async {
        cms.get_opt("owner")
            .await
            .ok()
            .flatten()
            .is_some_and(|o| o.metadata.finalizers == Some(vec!["example.com/keep".to_string()]))
    })
    .await;
    // Only the other finalizer holds it now.
    cms.patch(
        "owner",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("let go");
    eventually("the owner is deleted", WAIT, || gone(&cms, "owner")).await;
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_removes_owner_references() {
    let env = start().await;
    let c = &env.client;
    let owner = configmap(c, "default", "owner", vec![]).await;
    let other = configmap(c, "default", "other", vec![]).await;
    let r = owner_ref("v1", "ConfigMap", "owner", &uid(&owner), true);
    let r2 = owner_ref("v1", "ConfigMap", "other", &uid(&other), false);
    for i in 0..3 {
        pod(c, "default", &format!("dep-{i}"), vec![r.clone()]).await;
    }
    pod(c, "default", "shared", vec![r.clone(), r2]).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    // As kube's own orphaning test does: a dependent the collector has not
    // yet observed cannot be orphaned, and once the owner is gone it is
    // collected for the missing owner.
    let uids: Vec<String> = (pods.list(&Default::default()).await.expect("list").items)
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect();
    assert_eq!(uids.len(), 4);
    eventually("the collector has observed every dependent", WAIT, || {
        let uids = uids.clone();
        let gc = env.controllers.gc();
        async move { uids.iter().all(|u| gc.graph_has_uid(u)) }
    })
    .await;
    cms.delete("owner", &DeleteParams::orphan())
        .await
        .expect("delete owner");
    eventually("the owner is deleted", WAIT, || gone(&cms, "owner")).await;
    let list = pods.list(&Default::default()).await.expect("list");
    assert_eq!(list.items.len(), 4, "the dependents stay");
    for p in list.items {
        let refs = p.metadata.owner_references.unwrap_or_default();
        let name = p.metadata.name.unwrap_or_default();
        if name == "shared" {
            assert_eq!(refs.len(), 1, "{refs:?}");
            assert_eq!(refs[0].name, "other");
        } else {
            assert!(refs.is_empty(), "{name}: {refs:?}");
        }
    }
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependent_with_a_live_owner_stays() {
    let env = start().await;
    let c = &env.client;
    let a = configmap(c, "default", "a", vec![]).await;
    let b = configmap(c, "default", "b", vec![]).await;
    let ra = owner_ref("v1", "ConfigMap", "a", &uid(&a), false);
    let rb = owner_ref("v1", "ConfigMap", "b", &uid(&b), false);
    pod(c, "default", "dep", vec![ra, rb]).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    cms.delete("a", &DeleteParams::background())
        .await
        .expect("delete a");
    // Like kube, the reference to the dead owner is removed; the pod stays.
    eventually("the dead owner's reference is dropped", WAIT, || async {
        pods.get_opt("dep")
            .await
            .ok()
            .flatten()
            .is_some_and(|p| p.metadata.owner_references.is_some_and(|r| r.len() == 1))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let p = pods.get("dep").await.expect("dep stays");
    assert_eq!(
        p.metadata.owner_references.expect("refs")[0].name,
        "b",
        "the live owner's reference stays"
    );
    cms.delete("b", &DeleteParams::background())
        .await
        .expect("delete b");
    eventually("dep goes with its last owner", WAIT, || gone(&pods, "dep")).await;
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_as_owners_and_dependents() {
    let env = start().await;
    let c = &env.client;
    // The CRD is created after the controllers started: they discover it.
    let ar = crontab_crd(c).await;
    let cts: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &ar);
    let ct = |name: &str, owners: Vec<serde_json::Value>| {
        let mut meta = json!({"name": name});
        if !owners.is_empty() {
            meta["ownerReferences"] = json!(owners);
        }
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": "stable.example.com/v1", "kind": "CronTab",
            "metadata": meta, "spec": {"cronSpec": "* * * * */5"}
        }))
        .expect("crontab")
    };
    let mut created = None;
    for _ in 0..200 {
        match cts.create(&PostParams::default(), &ct("top", vec![])).await {
            Ok(o) => {
                created = Some(o);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let top = created.expect("crontab served");
    let rt = owner_ref("stable.example.com/v1", "CronTab", "top", &uid(&top), false);
    // A CronTab owning a ConfigMap and a CronTab; the ConfigMap owning a CronTab.
    let mid = configmap(c, "default", "mid", vec![rt.clone()]).await;
    let rm = owner_ref("v1", "ConfigMap", "mid", &uid(&mid), false);
    cts.create(&PostParams::default(), &ct("child", vec![rt]))
        .await
        .expect("child");
    cts.create(&PostParams::default(), &ct("grandchild", vec![rm]))
        .await
        .expect("grandchild");
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cts.delete("top", &DeleteParams::background())
        .await
        .expect("delete top");
    eventually("the whole tree is deleted", WAIT, || async {
        gone(&cts, "child").await && gone(&cts, "grandchild").await && gone(&cms, "mid").await
    })
    .await;
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cycles_are_deleted_without_a_hot_loop() {
    let env = start().await;
    let c = &env.client;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    for (policy, block) in [("Background", false), ("Foreground", true)] {
        let a = configmap(c, "default", "a", vec![]).await;
        let b = configmap(
            c,
            "default",
            "b",
            vec![owner_ref("v1", "ConfigMap", "a", &uid(&a), block)],
        )
        .await;
        cms.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": [
                owner_ref("v1", "ConfigMap", "b", &uid(&b), block)
            ]}})),
        )
        .await
        .expect("a owned by b");
        let dp = if policy == "Foreground" {
            DeleteParams::foreground()
        } else {
            DeleteParams::background()
        };
        cms.delete("a", &dp).await.expect("delete a");
        eventually(&format!("{policy}: both are deleted"), WAIT, || async {
            gone(&cms, "a").await && gone(&cms, "b").await
        })
        .await;
    }
    // Quiet afterwards: no more deletes or patches.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = env.controllers.gc().stats();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = env.controllers.gc().stats();
    assert_eq!(
        (before.deleted, before.patched),
        (after.deleted, after.patched)
    );
    assert!(before.deleted <= 8, "{before:?}");
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_that_never_existed() {
    let env = start().await;
    let c = &env.client;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    // A dependent naming an owner that is not there.
    configmap(
        c,
        "default",
        "stray",
        vec![owner_ref(
            "v1",
            "ConfigMap",
            "nobody",
            "00000000-0000-0000-0000-000000000000",
            false,
        )],
    )
    .await;
    eventually("the stray dependent is collected", WAIT, || {
        gone(&cms, "stray")
    })
    .await;
    // A dependent naming a live object with another uid: that owner is not it.
    configmap(c, "default", "imposter", vec![]).await;
    let live = configmap(c, "default", "live", vec![]).await;
    configmap(
        c,
        "default",
        "d",
        vec![
            owner_ref(
                "v1",
                "ConfigMap",
                "imposter",
                "11111111-0000-0000-0000-000000000000",
                false,
            ),
            owner_ref("v1", "ConfigMap", "live", &uid(&live), false),
        ],
    )
    .await;
    eventually(
        "the wrong reference is dropped, the object kept",
        WAIT,
        || async {
            cms.get_opt("d")
                .await
                .ok()
                .flatten()
                .is_some_and(|d| d.metadata.owner_references.is_some_and(|r| r.len() == 1))
        },
    )
    .await;
    assert!(cms.get_opt("imposter").await.expect("get").is_some());
    env.controllers.stop().await;
}

fn owners_of(cm: &ConfigMap) -> Vec<String> {
    cm.metadata
        .owner_references
        .iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect()
}

/// Switch serving of the widgets CRD's only version on or off.
async fn serve_widgets(c: &kube::Client, served: bool) {
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let patch = json!([{"op": "replace", "path": "/spec/versions/0/served", "value": served}]);
    crds.patch(
        "widgets.gc.example.com",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(patch).expect("patch")),
    )
    .await
    .expect("patch widgets CRD");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_dropped_from_discovery_keeps_its_dependents() {
    let env = start().await;
    let c = &env.client;
    let initial = env.controllers.gc().stats().monitors;
    crd(c, "gc.example.com", "Widget", "widgets", true, &["v1"]).await;
    let ar = custom("gc.example.com", "v1", "Widget", "widgets");
    let w = custom_object(c, &ar, Some("default"), "w", vec![]).await;
    let other = configmap(c, "default", "other", vec![]).await;
    let rw = owner_ref("gc.example.com/v1", "Widget", "w", &uid(&w), false);
    let ro = owner_ref("v1", "ConfigMap", "other", &uid(&other), false);
    configmap(c, "default", "dep", vec![rw, ro]).await;
    eventually("widgets are watched", WAIT, || async {
        env.controllers.gc().stats().monitors > initial
    })
    .await;
    let monitors = env.controllers.gc().stats().monitors;

    // Stop serving widgets: the widget still exists, discovery just no
    // longer lists it.
    serve_widgets(c, false).await;
    eventually("the widget monitor stops", WAIT, || async {
        env.controllers.gc().stats().monitors < monitors
    })
    .await;
    // Its other owner goes: the dependent is judged, and its widget owner
    // cannot be looked up — kube retries, it never counts it absent.
    let before = env.controllers.gc().stats().unresolved;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cms.delete("other", &DeleteParams::background())
        .await
        .expect("delete other");
    eventually("the dependent's widget owner is retried", WAIT, || async {
        env.controllers.gc().stats().unresolved > before
    })
    .await;
    let dep = cms.get("dep").await.expect("the dependent stays");
    assert_eq!(
        owners_of(&dep),
        ["w", "other"],
        "nothing was patched either"
    );

    // Served again: the widget is seen, the dead owner's reference dropped.
    serve_widgets(c, true).await;
    eventually("only the live widget owns it", WAIT, || async {
        cms.get_opt("dep")
            .await
            .ok()
            .flatten()
            .is_some_and(|d| owners_of(&d) == ["w"])
    })
    .await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &ar);
    let mut deleted = false;
    for _ in 0..200 {
        if widgets
            .delete("w", &DeleteParams::background())
            .await
            .is_ok()
        {
            deleted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(deleted, "widget deleted");
    eventually("the dependent goes with it", WAIT, || gone(&cms, "dep")).await;
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_at_an_unserved_api_version_is_retried_not_guessed() {
    let env = start().await;
    let c = &env.client;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let nobody = "00000000-0000-0000-0000-0000000000aa";
    // apps/v1beta1 Deployments are no longer served (apps/v1 ones are):
    // kube cannot map the reference and keeps retrying; it never looks the
    // owner up at another version of the group.
    configmap(
        c,
        "default",
        "old-api",
        vec![owner_ref(
            "apps/v1beta1",
            "Deployment",
            "gone",
            nobody,
            false,
        )],
    )
    .await;
    // The same for the core group: there is no v2.
    configmap(
        c,
        "default",
        "v2-ref",
        vec![owner_ref(
            "v2",
            "ConfigMap",
            "missing",
            "00000000-0000-0000-0000-0000000000bb",
            false,
        )],
    )
    .await;
    // The same missing owner at a served version: collected.
    configmap(
        c,
        "default",
        "served",
        vec![owner_ref("apps/v1", "Deployment", "gone", nobody, false)],
    )
    .await;
    eventually("the dependent of a served kind is collected", WAIT, || {
        gone(&cms, "served")
    })
    .await;
    eventually("both unserved references are retried", WAIT, || async {
        env.controllers.gc().stats().unresolved >= 2
    })
    .await;
    assert!(cms.get_opt("old-api").await.expect("get").is_some());
    assert!(cms.get_opt("v2-ref").await.expect("get").is_some());
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_dependent_of_a_namespaced_owner_is_kept() {
    let env = start().await;
    let c = &env.client;
    let owner = configmap(c, "default", "owner", vec![]).await;
    let r = owner_ref("v1", "ConfigMap", "owner", &uid(&owner), false);
    let roles: Api<ClusterRole> = Api::all(c.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "owned-role", "ownerReferences": [r.clone()]}, "rules": []
    }))
    .expect("role");
    roles
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    pod(c, "default", "control", vec![r]).await;
    // kube reports the reference on the dependent (cluster-scoped: the
    // event lands in "default").
    let want = format!(
        "ownerRef [v1/ConfigMap, namespace: , name: owner, uid: {}] does not exist in namespace \"\"",
        uid(&owner)
    );
    eventually("an OwnerRefInvalidNamespace warning", WAIT, || async {
        events_about(c, "default", "owned-role", "OwnerRefInvalidNamespace")
            .await
            .contains(&("Warning".to_string(), want.clone()))
    })
    .await;
    let before = env.controllers.gc().stats().unresolved;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    eventually("the namespaced dependent goes", WAIT, || {
        gone(&pods, "control")
    })
    .await;
    eventually("the cluster-scoped one is judged", WAIT, || async {
        env.controllers.gc().stats().unresolved > before
    })
    .await;
    assert!(
        roles.get_opt("owned-role").await.expect("get").is_some(),
        "kube never deletes a cluster-scoped dependent for a namespaced owner"
    );
    env.controllers.stop().await;
}

/// The dependent in `b` names the owner in `a`: kube looks the owner up in
/// `b`, finds nothing, and collects the dependent — whether the owner or
/// the dependent is seen first — with a warning event on it.
async fn cross_namespace_reference_is_collected(
    c: &kube::Client,
    controllers: &kubeforge_controllers::Builtin,
    owner_uid: &str,
    first: bool,
) {
    let cms_a: Api<ConfigMap> = Api::namespaced(c.clone(), "a");
    let cms_b: Api<ConfigMap> = Api::namespaced(c.clone(), "b");
    eventually("the dependent in b is collected", WAIT, || {
        gone(&cms_b, "stray")
    })
    .await;
    let want = format!(
        "ownerRef [v1/ConfigMap, namespace: b, name: owner, uid: {owner_uid}] does not exist in namespace \"b\""
    );
    if first {
        eventually("an OwnerRefInvalidNamespace warning", WAIT, || async {
            events_about(c, "b", "stray", "OwnerRefInvalidNamespace")
                .await
                .contains(&("Warning".to_string(), want.clone()))
        })
        .await;
    }
    let kept = cms_a.get("kept").await.expect("the dependent in a stays");
    assert_eq!(owners_of(&kept), ["owner"]);
    // The collector counts a deletion once its DELETE returned, which can
    // be after the test already saw the object gone.
    eventually("the collector counts the deletion", WAIT, || async {
        controllers.gc().stats().deleted >= 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_namespace_reference_dependent_seen_first_or_owner_first() {
    // Both exist before the collector starts: its lists see them in
    // whatever order.
    let server = ApiServer::in_memory().await;
    server.set_controllers_running(true);
    let c = server.client();
    namespace(&c, "a").await;
    namespace(&c, "b").await;
    let owner = configmap(&c, "a", "owner", vec![]).await;
    let r = owner_ref("v1", "ConfigMap", "owner", &uid(&owner), false);
    configmap(&c, "b", "stray", vec![r.clone()]).await;
    configmap(&c, "a", "kept", vec![r.clone()]).await;
    let controllers = kubeforge_controllers::start_builtin(c.clone());
    tokio::time::timeout(Duration::from_secs(20), controllers.wait_synced())
        .await
        .expect("synced");
    cross_namespace_reference_is_collected(&c, &controllers, &uid(&owner), true).await;

    // The owner seen first, the dependent created afterwards.
    configmap(&c, "b", "stray", vec![r]).await;
    cross_namespace_reference_is_collected(&c, &controllers, &uid(&owner), false).await;
    // The collector's queues are the manager's, metered under kube's names.
    let text = controllers.metrics().encode();
    for queue in [
        "garbage_collector_attempt_to_delete",
        "garbage_collector_attempt_to_orphan",
    ] {
        assert!(
            text.contains(&format!(
                "workqueue_depth{{name=\"{queue}\",controller=\"{queue}\"}}"
            )),
            "{text}"
        );
    }
    let adds = text
        .lines()
        .find(|l| {
            l.starts_with("workqueue_adds_total{name=\"garbage_collector_attempt_to_delete\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .expect("attempt-to-delete adds");
    assert!(adds >= 2.0, "{text}");
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_api_group_does_not_stop_collection() {
    let server = ApiServer::in_memory().await;
    server.set_controllers_running(true);
    let c = server.client();
    crd(&c, "broken.example.com", "Thing", "things", true, &["v1"]).await;
    let things = custom("broken.example.com", "v1", "Thing", "things");
    let t = custom_object(&c, &things, Some("default"), "t", vec![]).await;
    let rt = owner_ref("broken.example.com/v1", "Thing", "t", &uid(&t), false);
    configmap(&c, "default", "thing-dep", vec![rt]).await;
    // The collector's view: broken.example.com answers 503 everywhere, as
    // an aggregated API whose backend is down does.
    let (faults, gc_client) = with_unavailable_group(&server, "broken.example.com");
    let controllers = kubeforge_controllers::start_builtin(gc_client);
    tokio::time::timeout(Duration::from_secs(20), controllers.wait_synced())
        .await
        .expect("the collector syncs without the failing group");

    // A resource discovered meanwhile is collected as usual.
    let monitors = controllers.gc().stats().monitors;
    crd(&c, "gc.example.com", "Gadget", "gadgets", true, &["v1"]).await;
    let gadgets = custom("gc.example.com", "v1", "Gadget", "gadgets");
    let g = custom_object(&c, &gadgets, Some("default"), "g", vec![]).await;
    let rg = owner_ref("gc.example.com/v1", "Gadget", "g", &uid(&g), false);
    configmap(&c, "default", "gadget-dep", vec![rg]).await;
    let gapi: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &gadgets);
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    eventually("gadgets are watched", WAIT, || async {
        controllers.gc().stats().monitors > monitors
    })
    .await;
    gapi.delete("g", &DeleteParams::background())
        .await
        .expect("delete gadget");
    eventually("the gadget's dependent is collected", WAIT, || {
        gone(&cms, "gadget-dep")
    })
    .await;
    // The failing group's owner cannot be looked up: its dependent stays.
    eventually("the thing's dependent is retried", WAIT, || async {
        controllers.gc().stats().unresolved >= 1
    })
    .await;
    assert!(cms.get_opt("thing-dep").await.expect("get").is_some());
    assert!(faults.stats().unavailable > 0);
    controllers.stop().await;
}

/// Run the `kubectl` on PATH against `kubeconfig` (its cache in `home`).
fn kubectl(kubeconfig: &std::path::Path, home: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .env("KUBECACHEDIR", home.join("cache"))
        .output()
        .expect("run kubectl");
    let text = if out.status.success() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_finds_the_owner_ref_invalid_namespace_warning() {
    let env = kubeforge_testenv::TestEnv::builder()
        .loopback(true)
        .start()
        .await
        .expect("start");
    let kubeconfig = env.kubeconfig_path().expect("kubeconfig").to_path_buf();
    let home = std::env::temp_dir().join(format!("kubeforge-gc-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&home).expect("home");
    let (k, h) = (kubeconfig.clone(), home.clone());
    let (owner_uid, events) = tokio::task::spawn_blocking(move || {
        for args in [
            &["create", "namespace", "a"][..],
            &["create", "namespace", "b"],
            &["create", "configmap", "owner", "-n", "a"],
        ] {
            let (ok, out) = kubectl(&k, &h, args);
            assert!(ok, "kubectl {args:?}: {out}");
        }
        let (ok, uid) = kubectl(
            &k,
            &h,
            &["get", "configmap", "owner", "-n", "a", "-o", "jsonpath={.metadata.uid}"],
        );
        assert!(ok && !uid.is_empty(), "{uid}");
        let stray = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stray\n  namespace: b\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: owner\n    uid: {uid}\n"
        );
        let path = h.join("stray.yaml");
        std::fs::write(&path, stray).expect("write manifest");
        let (ok, out) = kubectl(&k, &h, &["apply", "-f", path.to_str().unwrap_or_default()]);
        assert!(ok, "{out}");
        // As the Kubernetes docs suggest looking for it.
        let started = std::time::Instant::now();
        loop {
            let (_, events) = kubectl(
                &k,
                &h,
                &[
                    "get",
                    "events",
                    "-A",
                    "--field-selector=reason=OwnerRefInvalidNamespace",
                    "-o",
                    "jsonpath={range .items[*]}{.type} {.involvedObject.namespace}/{.involvedObject.name}: {.message}{\"\\n\"}{end}",
                ],
            );
            let (gone, _) = kubectl(&k, &h, &["get", "configmap", "stray", "-n", "b"]);
            if !events.is_empty() && !gone {
                return (uid, events);
            }
            assert!(started.elapsed() < WAIT, "no warning, or stray kept: {events}");
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .expect("kubectl task");
    assert_eq!(
        events.trim(),
        format!(
            "Warning b/stray: ownerRef [v1/ConfigMap, namespace: b, name: owner, uid: {owner_uid}] does not exist in namespace \"b\""
        )
    );
    let _ = std::fs::remove_dir_all(&home);
    env.stop().await;
}
