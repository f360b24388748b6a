//! The namespace lifecycle: DELETE marks the namespace Terminating, the
//! namespace controller empties it (all kinds, custom resources included),
//! objects held by other controllers' finalizers keep it Terminating (with
//! kube's conditions), and once they are gone the namespace is finalized
//! and removed. Without a namespace controller the server empties and
//! removes the namespace itself.

mod common;

use std::time::Duration;

use common::{
    configmap, configmap_with, crd, crontab_crd, custom, custom_object, eventually, namespace,
    owner_ref, pod, start, uid, with_unavailable_group,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kubeforge_apiserver::ApiServer;
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
    // kube's NamespaceLifecycle answer: the cause clients test for.
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403
            && s.message == "configmaps \"late\" is forbidden: unable to create new content in namespace demo because it is being terminated"
            && s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"
                && c.field == "metadata.namespace"
                && c.message == "namespace demo is being terminated"))),
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

fn condition_of(ns: &Namespace, ty: &str) -> Option<(String, String, String)> {
    let c = ns
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty)?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_group_and_non_preferred_versions() {
    let server = ApiServer::in_memory().await;
    server.set_controllers_running(true);
    let c = server.client();
    // multi.example.com serves widgets at v2 and v1, gadgets at v1 only:
    // the group prefers v2, so gadgets exist only at a non-preferred
    // version.
    crd(
        &c,
        "multi.example.com",
        "Widget",
        "widgets",
        true,
        &["v1", "v2"],
    )
    .await;
    crd(&c, "multi.example.com", "Gadget", "gadgets", true, &["v1"]).await;
    crd(&c, "broken.example.com", "Thing", "things", true, &["v1"]).await;
    let group = c
        .list_api_groups()
        .await
        .expect("groups")
        .groups
        .into_iter()
        .find(|g| g.name == "multi.example.com")
        .expect("multi.example.com listed");
    assert_eq!(
        group.preferred_version.map(|v| v.version).as_deref(),
        Some("v2")
    );
    namespace(&c, "doomed").await;
    let widgets = custom("multi.example.com", "v2", "Widget", "widgets");
    let gadgets = custom("multi.example.com", "v1", "Gadget", "gadgets");
    let things = custom("broken.example.com", "v1", "Thing", "things");
    custom_object(&c, &widgets, Some("doomed"), "w", vec![]).await;
    custom_object(&c, &gadgets, Some("doomed"), "g", vec![]).await;
    custom_object(&c, &things, Some("doomed"), "t", vec![]).await;
    configmap(&c, "doomed", "cm", vec![]).await;

    // The controllers' view: broken.example.com answers 503, as an
    // aggregated API whose backend is down does.
    let (faults, client) = with_unavailable_group(&server, "broken.example.com");
    let controllers = kubeforge_controllers::start_builtin(client);
    tokio::time::timeout(Duration::from_secs(20), controllers.wait_synced())
        .await
        .expect("synced");
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.delete("doomed", &DeleteParams::default())
        .await
        .expect("delete namespace");

    // Everything discovery reaches is deleted, the gadget at v1 included.
    let w: Api<DynamicObject> = Api::namespaced_with(c.clone(), "doomed", &widgets);
    let g: Api<DynamicObject> = Api::namespaced_with(c.clone(), "doomed", &gadgets);
    let t: Api<DynamicObject> = Api::namespaced_with(c.clone(), "doomed", &things);
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "doomed");
    eventually("the reachable content is deleted", WAIT, || async {
        matches!(w.get_opt("w").await, Ok(None))
            && matches!(g.get_opt("g").await, Ok(None))
            && matches!(cms.get_opt("cm").await, Ok(None))
    })
    .await;
    // …but the namespace is not finalized while a group cannot be listed.
    let want = (
        "True".to_string(),
        "DiscoveryFailed".to_string(),
        "Discovery failed for some groups, 1 failing: unable to retrieve the complete list \
         of server APIs: broken.example.com/v1: the server is currently unable to handle the \
         request"
            .to_string(),
    );
    eventually("NamespaceDeletionDiscoveryFailure", WAIT, || async {
        nss.get_opt("doomed")
            .await
            .ok()
            .flatten()
            .and_then(|ns| condition_of(&ns, "NamespaceDeletionDiscoveryFailure"))
            == Some(want.clone())
    })
    .await;
    let ns = nss.get("doomed").await.expect("still there");
    assert_eq!(
        ns.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Terminating")
    );
    assert!(t.get_opt("t").await.expect("get").is_some());

    // The group comes back: the rest goes, then the namespace.
    faults.clear();
    eventually("the namespace is gone", Duration::from_secs(20), || async {
        matches!(nss.get_opt("doomed").await, Ok(None))
    })
    .await;
    assert!(matches!(t.get_opt("t").await, Ok(None)));
    controllers.stop().await;
}
