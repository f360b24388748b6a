//! The namespace lifecycle: DELETE marks the namespace Terminating, the
//! namespace controller empties it (all kinds, custom resources included),
//! objects held by other controllers' finalizers keep it Terminating (with
//! kube's conditions), and once they are gone the namespace is finalized
//! and removed. Without a namespace controller the server empties and
//! removes the namespace itself.

mod common;

use std::time::Duration;

use common::{configmap, configmap_with, crontab_crd, eventually, owner_ref, pod, start, uid};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

async fn create_ns(client: &kube::Client, name: &str) {
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    nss.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

fn condition<'a>(ns: &'a Namespace, ty: &str) -> Option<&'a str> {
    ns.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty)
        .map(|c| c.status.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_waits_for_finalizers_then_goes() {
    let env = start().await;
    let c = &env.client;
    let ar = crontab_crd(c).await;
    create_ns(c, "demo").await;
    let owner = configmap(c, "demo", "owner", vec![]).await;
    let r = owner_ref("v1", "ConfigMap", "owner", &uid(&owner), false);
    for i in 0..5 {
        pod(c, "demo", &format!("p{i}"), vec![r.clone()]).await;
        configmap(c, "demo", &format!("c{i}"), vec![]).await;
    }
    configmap_with(c, "demo", "held", vec![], vec!["example.com/hold"]).await;
    let cts: Api<DynamicObject> = Api::namespaced_with(c.clone(), "demo", &ar);
    let ct: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "stable.example.com/v1", "kind": "CronTab",
        "metadata": {"name": "ct"}, "spec": {"cronSpec": "* * * * */5"}
    }))
    .expect("crontab");
    let mut made = false;
    for _ in 0..200 {
        if cts.create(&PostParams::default(), &ct).await.is_ok() {
            made = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(made, "crontab created");

    let nss: Api<Namespace> = Api::all(c.clone());
    let out = nss
        .delete("demo", &DeleteParams::default())
        .await
        .expect("delete ns");
    let ns = out.left().expect("the namespace is returned");
    assert!(ns.metadata.deletion_timestamp.is_some());
    assert_eq!(
        ns.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Terminating")
    );
    assert_eq!(
        ns.spec.as_ref().and_then(|s| s.finalizers.clone()),
        Some(vec!["kubernetes".to_string()])
    );

    // Creates are refused while it terminates.
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "demo");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "late"}})).expect("cm");
    let err = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect_err("create in a terminating namespace");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err:?}"
    );

    // Everything but the held object goes; the namespace waits, saying why.
    let pods: Api<Pod> = Api::namespaced(c.clone(), "demo");
    eventually("the content is deleted", WAIT, || async {
        let p = pods
            .list(&Default::default())
            .await
            .map(|l| l.items.len())
            .ok();
        let m = cms
            .list(&Default::default())
            .await
            .map(|l| l.items.len())
            .ok();
        let t = cts
            .list(&Default::default())
            .await
            .map(|l| l.items.len())
            .ok();
        p == Some(0) && m == Some(1) && t == Some(0)
    })
    .await;
    eventually("the conditions name the finalizer", WAIT, || async {
        nss.get_opt("demo").await.ok().flatten().is_some_and(|ns| {
            condition(&ns, "NamespaceFinalizersRemaining") == Some("True")
                && condition(&ns, "NamespaceContentRemaining") == Some("True")
        })
    })
    .await;
    let ns = nss.get("demo").await.expect("still there");
    let msg = ns
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "NamespaceFinalizersRemaining")
        })
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    assert_eq!(
        msg,
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    let held = cms.get("held").await.expect("held");
    assert!(held.metadata.deletion_timestamp.is_some());

    // The other controller lets go: the namespace finishes.
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    eventually("the namespace is gone", WAIT, || async {
        matches!(nss.get_opt("demo").await, Ok(None))
    })
    .await;
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_namespace_is_finalized() {
    let env = start().await;
    let c = &env.client;
    create_ns(c, "empty").await;
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.delete("empty", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the namespace is gone", WAIT, || async {
        matches!(nss.get_opt("empty").await, Ok(None))
    })
    .await;
    // A namespace can be created again under the same name.
    create_ns(c, "empty").await;
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_spec_finalizers_keep_the_namespace() {
    let env = start().await;
    let c = &env.client;
    create_ns(c, "extra").await;
    let nss: Api<Namespace> = Api::all(c.clone());
    // Another finalizer in spec.finalizers, added through /finalize.
    let mut ns = nss.get("extra").await.expect("get");
    ns.spec
        .get_or_insert_with(Default::default)
        .finalizers
        .get_or_insert_with(Vec::new)
        .push("example.com/extra".into());
    nss.replace_subresource("finalize", "extra", &PostParams::default(), &ns)
        .await
        .expect("add finalizer");
    nss.delete("extra", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("kubernetes is removed", WAIT, || async {
        nss.get_opt("extra").await.ok().flatten().is_some_and(|ns| {
            ns.spec.and_then(|s| s.finalizers) == Some(vec!["example.com/extra".to_string()])
        })
    })
    .await;
    let mut ns = nss.get("extra").await.expect("get");
    if let Some(s) = ns.spec.as_mut() {
        s.finalizers = Some(vec![]);
    }
    nss.replace_subresource("finalize", "extra", &PostParams::default(), &ns)
        .await
        .expect("finalize");
    eventually("the namespace is gone", WAIT, || async {
        matches!(nss.get_opt("extra").await, Ok(None))
    })
    .await;
    env.controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_namespace_finalizers_are_refused() {
    let server = kubeforge_apiserver::ApiServer::in_memory().await;
    let c = server.client();
    create_ns(&c, "v").await;
    let nss: Api<Namespace> = Api::all(c.clone());
    let mut ns = nss.get("v").await.expect("get");
    ns.spec = Some(
        serde_json::from_value(json!({"finalizers": ["kubernetes", "notqualified"]}))
            .expect("spec"),
    );
    let err = nss
        .replace_subresource("finalize", "v", &PostParams::default(), &ns)
        .await
        .expect_err("refused");
    let kube::Error::Api(s) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(s.code, 422, "{s:?}");
    assert!(
        s.message
            .contains("name is neither a standard finalizer name nor is it fully qualified"),
        "{}",
        s.message
    );
    // metadata.finalizers must be qualified names.
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "f", "finalizers": ["not a name"]}}))
            .expect("cm");
    let err = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect_err("refused");
    let kube::Error::Api(s) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(s.code, 422, "{s:?}");
    assert!(s.message.contains("metadata.finalizers"), "{}", s.message);
    // Built-in kinds: a name without a domain must be a standard one.
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "g", "finalizers": ["example.com/ok", "orphan", "mine"]}}),
    )
    .expect("cm");
    let err = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect_err("refused");
    let kube::Error::Api(s) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(s.code, 422, "{s:?}");
    let causes = s
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].field, "metadata.finalizers[2]");
    assert!(
        causes[0]
            .message
            .contains("name is neither a standard finalizer name nor is it fully qualified"),
        "{causes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_controller_the_server_empties_the_namespace() {
    let server = kubeforge_apiserver::ApiServer::in_memory().await;
    let c = server.client();
    create_ns(&c, "sync").await;
    configmap(&c, "sync", "a", vec![]).await;
    pod(&c, "sync", "p", vec![]).await;
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.delete("sync", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(nss.get_opt("sync").await.expect("get").is_none());
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "sync");
    assert!(
        cms.list(&Default::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
}
