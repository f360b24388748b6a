//! The garbage collector against an in-process server: Background,
//! Foreground and Orphan propagation, dependents with two owners, custom
//! resources as owners and dependents, cycles, owners that never existed,
//! and other controllers' finalizers left alone.

mod common;

use std::time::Duration;

use common::{configmap, configmap_with, crontab_crd, eventually, owner_ref, pod, start, uid};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
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
