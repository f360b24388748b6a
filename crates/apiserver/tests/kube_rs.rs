//! kube-rs against the embedded server: typed CRUD, patches, subresources,
//! watcher and reflector, a custom resource, and the error cases — both
//! in-process (no socket) and over the loopback listener.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kubeforge_apiserver::ApiServer;
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"}
    }))
    .expect("configmap")
}

fn status_code(e: &kube::Error) -> Option<(u16, String)> {
    match e {
        kube::Error::Api(s) => Some((s.code, s.reason.clone())),
        _ => None,
    }
}

async fn over_listener(server: &ApiServer) -> Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    Client::try_from(config).expect("client")
}

async fn crud(client: Client) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(&PostParams::default(), &cm("a", json!({"app": "x"})))
        .await
        .expect("create");
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    let rv1: u64 = meta
        .resource_version
        .as_deref()
        .expect("rv")
        .parse()
        .expect("numeric rv");

    // AlreadyExists.
    let e = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .expect_err("dup");
    assert_eq!(status_code(&e), Some((409, "AlreadyExists".into())));

    // Replace with the current rv succeeds, with a stale one conflicts.
    let mut next = created.clone();
    next.data = Some([("k".to_string(), "w".to_string())].into());
    let replaced = cms
        .replace("a", &PostParams::default(), &next)
        .await
        .expect("replace");
    let rv2: u64 = replaced
        .metadata
        .resource_version
        .as_deref()
        .expect("rv")
        .parse()
        .expect("rv");
    assert!(rv2 > rv1);
    let e = cms
        .replace("a", &PostParams::default(), &next)
        .await
        .expect_err("stale");
    assert_eq!(status_code(&e), Some((409, "Conflict".into())));

    // Patches: merge, JSON (with a failing test op), server-side apply.
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"m": "1"}})),
    )
    .await
    .expect("merge");
    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/m", "value": "1"},
        {"op": "add", "path": "/data/j", "value": "2"}
    ]))
    .expect("patch");
    cms.patch("a", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .expect("json patch");
    let bad: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/m", "value": "nope"}]))
            .expect("patch");
    let e = cms
        .patch("a", &PatchParams::default(), &Patch::Json::<()>(bad))
        .await
        .expect_err("test op fails");
    assert_eq!(status_code(&e).map(|s| s.0), Some(422));
    let applied = cms
        .patch("b", &PatchParams::apply("tester"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"x": "1", "y": "2"}})))
        .await
        .expect("apply create");
    assert_eq!(
        applied
            .data
            .as_ref()
            .and_then(|d| d.get("x"))
            .map(String::as_str),
        Some("1")
    );
    let applied = cms
        .patch("b", &PatchParams::apply("tester"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"x": "3"}})))
        .await
        .expect("apply update");
    let data = applied.data.expect("data");
    assert_eq!(data.get("x").map(String::as_str), Some("3"));
    assert!(
        !data.contains_key("y"),
        "a field the manager stopped applying is removed"
    );
    assert!(
        applied
            .metadata
            .managed_fields
            .is_some_and(|m| m.iter().any(|e| e.manager.as_deref() == Some("tester")))
    );
    let got = cms.get("a").await.expect("get");
    let d = got.data.expect("data");
    assert_eq!(
        (
            d.get("m").map(String::as_str),
            d.get("j").map(String::as_str)
        ),
        (Some("1"), Some("2"))
    );

    // Selectors, paging.
    for i in 0..7 {
        cms.create(
            &PostParams::default(),
            &cm(&format!("p{i}"), json!({"page": "yes", "i": i.to_string()})),
        )
        .await
        .expect("create");
    }
    let sel = cms
        .list(&ListParams::default().labels("page=yes,i notin (0,1)"))
        .await
        .expect("labels");
    assert_eq!(sel.items.len(), 5);
    let by_name = cms
        .list(&ListParams::default().fields("metadata.name=p3"))
        .await
        .expect("fields");
    assert_eq!(by_name.items.len(), 1);
    let e = cms
        .list(&ListParams::default().fields("spec.nope=1"))
        .await
        .expect_err("bad field");
    assert_eq!(status_code(&e).map(|s| s.0), Some(400));
    let e = cms
        .list(&ListParams::default().labels("a in ("))
        .await
        .expect_err("bad labels");
    assert_eq!(status_code(&e).map(|s| s.0), Some(400));
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(3).labels("page=yes");
    loop {
        let page = cms.list(&lp).await.expect("page");
        assert!(page.items.len() <= 3);
        names.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()));
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => lp = lp.continue_token(&t),
            _ => break,
        }
    }
    assert_eq!(names.len(), 7);

    // dryRun does not persist.
    cms.create(
        &PostParams {
            dry_run: true,
            ..Default::default()
        },
        &cm("dry", json!({})),
    )
    .await
    .expect("dry run");
    assert!(cms.get_opt("dry").await.expect("get").is_none());

    // deletecollection, delete, 404.
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("page=yes"),
    )
    .await
    .expect("deletecollection");
    assert_eq!(
        cms.list(&ListParams::default().labels("page=yes"))
            .await
            .expect("list")
            .items
            .len(),
        0
    );
    cms.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    let e = cms.get("a").await.expect_err("gone");
    assert_eq!(status_code(&e), Some((404, "NotFound".into())));

    // Invalid names and missing namespaces.
    let e = cms
        .create(&PostParams::default(), &cm("Bad_Name", json!({})))
        .await
        .expect_err("invalid");
    assert_eq!(status_code(&e), Some((422, "Invalid".into())));
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "missing");
    let e = other
        .create(&PostParams::default(), &cm("x", json!({})))
        .await
        .expect_err("no namespace");
    assert_eq!(status_code(&e).map(|s| s.0), Some(404));
}

async fn workloads(client: Client) {
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}
    }))
    .expect("deployment");
    let created = deploys
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    // Strategic merge patch merges containers by name.
    let patched = deploys
        .patch("web", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}})))
        .await
        .expect("smp");
    let c = &patched
        .spec
        .as_ref()
        .expect("spec")
        .template
        .spec
        .as_ref()
        .expect("pod spec")
        .containers;
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].image.as_deref(), Some("nginx:1.27"));
    assert_eq!(patched.metadata.generation, Some(2));
    // Status subresource: status writes do not bump generation, spec writes ignore status.
    let st = deploys
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2, "readyReplicas": 1}})),
        )
        .await
        .expect("status");
    assert_eq!(st.metadata.generation, Some(2));
    assert_eq!(st.status.as_ref().and_then(|s| s.ready_replicas), Some(1));
    // A status write keeps everything but status as stored, even when the
    // request carries other spec, labels or annotations (kube's status strategy).
    let st = deploys
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"sneaky": "yes"}},
                "spec": {"replicas": 9}, "status": {"readyReplicas": 2}})),
        )
        .await
        .expect("status with other fields");
    assert_eq!(st.spec.as_ref().and_then(|s| s.replicas), Some(2));
    assert!(
        st.metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key("sneaky"))
    );
    assert_eq!(st.status.as_ref().and_then(|s| s.ready_replicas), Some(2));
    assert_eq!(st.metadata.generation, Some(2));
    let managers: Vec<_> = st
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| (m.manager.clone(), m.subresource.clone()))
        .collect();
    assert!(
        managers
            .iter()
            .any(|(_, sub)| sub.as_deref() == Some("status")),
        "a manager entry for the status write: {managers:?}"
    );
    // Scale.
    let scale = deploys.get_scale("web").await.expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    deploys
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("patch scale");
    assert_eq!(
        deploys
            .get("web")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.replicas),
        Some(5)
    );

    // Pods: field selectors on spec.nodeName and binding.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).expect("pod");
    let created = pods.create(&PostParams::default(), &p).await.expect("pod");
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
    let unscheduled = pods
        .list(&ListParams::default().fields("spec.nodeName="))
        .await
        .expect("list");
    assert_eq!(unscheduled.items.len(), 1);
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let req = http::Request::post("/api/v1/namespaces/default/pods/p1/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).expect("json"))
        .expect("request");
    let _: serde_json::Value = client.request(req).await.expect("bind");
    let on_node = pods
        .list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await
        .expect("list");
    assert_eq!(on_node.items.len(), 1);
}

async fn watching(client: Client) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().labels("w=1")),
    )
    .applied_objects()
    .boxed();
    let collected = tokio::spawn(async move {
        stream
            .try_take_while(|c| {
                futures::future::ready(Ok(c.metadata.name.as_deref() != Some("w-last")))
            })
            .try_collect::<Vec<_>>()
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..5 {
        cms.create(
            &PostParams::default(),
            &cm(&format!("w-{i}"), json!({"w": "1"})),
        )
        .await
        .expect("create");
    }
    cms.create(
        &PostParams::default(),
        &cm("not-watched", json!({"w": "2"})),
    )
    .await
    .expect("create");
    cms.create(&PostParams::default(), &cm("w-last", json!({"w": "1"})))
        .await
        .expect("create");
    let seen = tokio::time::timeout(Duration::from_secs(10), collected)
        .await
        .expect("in time")
        .expect("join")
        .expect("stream");
    let names: Vec<_> = seen
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(names, vec!["w-0", "w-1", "w-2", "w-3", "w-4"]);
    reader.wait_until_ready().await.expect("ready");
    assert!(reader.state().len() >= 5);
    assert!(reader.state().iter().all(|c| {
        c.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("w"))
            .map(String::as_str)
            == Some("1")
    }));
}

async fn custom_resource(client: Client) {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {"group": "stable.example.com", "scope": "Namespaced",
                 "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab", "shortNames": ["ct"]},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "properties": {"cronSpec": {"type": "string"}, "image": {"type": "string"}, "replicas": {"type": "integer", "minimum": 1}}},
                     "status": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}}}]}
    }))
    .expect("crd");
    let created = crds
        .create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let conds = created
        .data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .cloned()
        .unwrap_or_default();
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("stable.example.com", "v1", "CronTab"),
        "crontabs",
    );
    let cts: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "c1"}, "spec": {"cronSpec": "* * * * */5", "image": "img", "unknown": 1}})).expect("cr");
    let got = cts
        .create(&PostParams::default(), &obj)
        .await
        .expect("create cr");
    assert!(
        got.data.pointer("/spec/unknown").is_none(),
        "unknown fields are pruned"
    );
    let bad: DynamicObject = serde_json::from_value(json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "c2"}, "spec": {"cronSpec": 5, "replicas": 0}})).expect("cr");
    let e = cts
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("invalid");
    match e {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert!(s.message.contains("spec.cronSpec"), "{}", s.message);
            assert!(s.message.contains("spec.replicas"), "{}", s.message);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Strategic merge patch is refused for custom resources.
    let e = cts
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"image": "x"}})),
        )
        .await
        .expect_err("415");
    assert_eq!(status_code(&e).map(|s| s.0), Some(415));
    // Status subresource and generation.
    let s = cts
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ok": true}})),
        )
        .await
        .expect("status");
    assert_eq!(s.metadata.generation, Some(1));
    let s = cts
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "img2"}})),
        )
        .await
        .expect("spec");
    assert_eq!(s.metadata.generation, Some(2));
    assert_eq!(s.data.pointer("/status/ok"), Some(&json!(true)));
    // Watch a custom resource.
    let mut events = watcher(cts.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("event")
        .expect("some")
        .expect("ok");
    assert_eq!(first.metadata.name.as_deref(), Some("c1"));
    // Deleting the CRD deletes its objects and stops serving it.
    crds.delete("crontabs.stable.example.com", &DeleteParams::default())
        .await
        .expect("delete crd");
    let e = cts
        .list(&ListParams::default())
        .await
        .expect_err("no longer served");
    assert_eq!(status_code(&e).map(|s| s.0), Some(404));
}

#[tokio::test]
async fn in_process_crud() {
    let server = ApiServer::in_memory().await;
    crud(server.client()).await;
}

#[tokio::test]
async fn listener_crud() {
    let server = ApiServer::in_memory().await;
    crud(over_listener(&server).await).await;
}

#[tokio::test]
async fn in_process_workloads() {
    let server = ApiServer::in_memory().await;
    workloads(server.client()).await;
}

#[tokio::test]
async fn listener_workloads() {
    let server = ApiServer::in_memory().await;
    workloads(over_listener(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_watch_and_reflector() {
    let server = ApiServer::in_memory().await;
    watching(server.client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_watch_and_reflector() {
    let server = ApiServer::in_memory().await;
    watching(over_listener(&server).await).await;
}

#[tokio::test]
async fn in_process_custom_resource() {
    let server = ApiServer::in_memory().await;
    custom_resource(server.client()).await;
}

#[tokio::test]
async fn listener_custom_resource() {
    let server = ApiServer::in_memory().await;
    custom_resource(over_listener(&server).await).await;
}

/// The Priority admission plugin and PriorityClass rules, as a user of
/// kube-apiserver sees them.
#[tokio::test]
async fn pod_priority_comes_from_its_priority_class() {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pc = |name: &str, value: i64, extra: serde_json::Value| -> PriorityClass {
        let mut v = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name}, "value": value});
        if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        serde_json::from_value(v).expect("priorityclass")
    };
    let pod = |name: &str, spec_extra: serde_json::Value| -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
        if let (Some(m), Some(e)) = (spec.as_object_mut(), spec_extra.as_object()) {
            m.extend(e.clone());
        }
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name}, "spec": spec}))
        .expect("pod")
    };
    let pp = PostParams::default();

    // The system classes exist from the start, with kube's values.
    let node_critical = classes
        .get("system-node-critical")
        .await
        .expect("system class");
    assert_eq!(node_critical.value, 2_000_001_000);
    assert_eq!(
        classes
            .get("system-cluster-critical")
            .await
            .expect("system class")
            .value,
        2_000_000_000
    );

    // No class and no global default: priority 0, PreemptLowerPriority.
    let p = pods
        .create(&pp, &pod("plain", json!({})))
        .await
        .expect("pod");
    let spec = p.spec.expect("spec");
    assert_eq!(spec.priority, Some(0));
    assert_eq!(
        spec.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );

    // A class gives its value and preemption policy.
    classes
        .create(
            &pp,
            &pc("batch-low", 100, json!({"preemptionPolicy": "Never"})),
        )
        .await
        .expect("class");
    let p = pods
        .create(&pp, &pod("low", json!({"priorityClassName": "batch-low"})))
        .await
        .expect("pod with class");
    let spec = p.spec.expect("spec");
    assert_eq!(spec.priority, Some(100));
    assert_eq!(spec.preemption_policy.as_deref(), Some("Never"));
    let critical = pods
        .create(
            &pp,
            &pod(
                "critical",
                json!({"priorityClassName": "system-node-critical"}),
            ),
        )
        .await
        .expect("critical pod");
    assert_eq!(critical.spec.and_then(|s| s.priority), Some(2_000_001_000));

    // An unknown class, or a priority the class contradicts: 403 Forbidden.
    let e = pods
        .create(&pp, &pod("ghost", json!({"priorityClassName": "nope"})))
        .await
        .expect_err("unknown class");
    let kube::Error::Api(s) = &e else {
        panic!("not an API error: {e}")
    };
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert!(
        s.message
            .contains("no PriorityClass with name nope was found"),
        "{}",
        s.message
    );
    let e = pods
        .create(
            &pp,
            &pod(
                "liar",
                json!({"priorityClassName": "batch-low", "priority": 7}),
            ),
        )
        .await
        .expect_err("conflicting priority");
    assert_eq!(status_code(&e), Some((403, "Forbidden".into())));
    assert!(pods.get_opt("ghost").await.expect("get").is_none());

    // A global default applies to pods without a class; only one may exist.
    classes
        .create(&pp, &pc("default-prio", 10, json!({"globalDefault": true})))
        .await
        .expect("global default");
    let e = classes
        .create(
            &pp,
            &pc("another-default", 20, json!({"globalDefault": true})),
        )
        .await
        .expect_err("second global default");
    assert_eq!(status_code(&e), Some((403, "Forbidden".into())));
    let p = pods
        .create(&pp, &pod("defaulted", json!({})))
        .await
        .expect("pod");
    let spec = p.spec.expect("spec");
    assert_eq!(spec.priority_class_name.as_deref(), Some("default-prio"));
    assert_eq!(spec.priority, Some(10));

    // An update that leaves priority out keeps it.
    let mut p = pods.get("defaulted").await.expect("get");
    if let Some(s) = p.spec.as_mut() {
        s.priority = None;
        s.preemption_policy = None;
    }
    p.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    let p = pods.replace("defaulted", &pp, &p).await.expect("update");
    assert_eq!(p.spec.and_then(|s| s.priority), Some(10));

    // PriorityClass validation: reserved names, the user ceiling, immutability.
    for (bad, field) in [
        (pc("system-mine", 5, json!({})), "metadata.name"),
        (pc("too-high", 1_000_000_001, json!({})), "value"),
    ] {
        let e = classes.create(&pp, &bad).await.expect_err("invalid class");
        let kube::Error::Api(s) = &e else {
            panic!("not an API error: {e}")
        };
        assert_eq!(
            (s.code, s.reason.as_str()),
            (422, "Invalid"),
            "{}",
            s.message
        );
        assert!(s.message.contains(field), "{}", s.message);
    }
    let mut low = classes.get("batch-low").await.expect("get");
    low.value = 101;
    let e = classes
        .replace("batch-low", &pp, &low)
        .await
        .expect_err("value is immutable");
    assert_eq!(status_code(&e), Some((422, "Invalid".into())));
}

/// The built-in components' client reads objects without managedFields —
/// in get, list, watch events and write responses — while other clients
/// see them, and its writes keep the stored entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_client_reads_without_managed_fields() {
    let server = ApiServer::in_memory().await;
    let user: Api<ConfigMap> = Api::default_namespaced(server.client());
    let builtin: Api<ConfigMap> = Api::default_namespaced(server.builtin_client());
    let mut events = watcher(builtin.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let created = user
        .create(&PostParams::default(), &cm("a", json!({"app": "x"})))
        .await
        .expect("create");
    assert!(created.metadata.managed_fields.is_some());
    let seen = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("a watch event")
        .expect("stream open")
        .expect("event");
    assert_eq!(seen.metadata.name.as_deref(), Some("a"));
    assert!(seen.metadata.managed_fields.is_none(), "watch event");
    // A user's watch of the same objects, receiving the same store events.
    let mut user_events = watcher(user.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), user_events.next())
        .await
        .expect("a user watch event")
        .expect("stream open")
        .expect("event");
    assert!(first.metadata.managed_fields.is_some(), "user watch");
    let got = builtin.get("a").await.expect("get");
    assert!(got.metadata.managed_fields.is_none(), "get");
    assert_eq!(got.data, created.data);
    assert_eq!(got.metadata.labels, created.metadata.labels);
    let listed = builtin.list(&ListParams::default()).await.expect("list");
    assert!(
        listed
            .items
            .iter()
            .all(|c| c.metadata.managed_fields.is_none())
    );
    // An update of the object as read (no managedFields) by another
    // manager: its response has none, the stored object has both entries.
    let mut changed = got.clone();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    let pp = PostParams {
        field_manager: Some("builtin".into()),
        ..PostParams::default()
    };
    let replaced = builtin.replace("a", &pp, &changed).await.expect("replace");
    assert!(replaced.metadata.managed_fields.is_none(), "write response");
    let stored = user.get("a").await.expect("get");
    let managers: Vec<String> = stored
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.contains(&"builtin".to_string()), "{managers:?}");
    assert!(managers.len() >= 2, "{managers:?}");
    let next = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("a second watch event")
        .expect("stream open")
        .expect("event");
    assert!(next.metadata.managed_fields.is_none());
    assert_eq!(next.data, changed.data);
    // The user's watch got the same change with its managedFields (the
    // cut form is shared only among the watchers that asked for it).
    let theirs = tokio::time::timeout(Duration::from_secs(5), user_events.next())
        .await
        .expect("a second user watch event")
        .expect("stream open")
        .expect("event");
    assert_eq!(theirs.data, changed.data);
    assert_eq!(
        theirs.metadata.managed_fields.map(|m| m.len()),
        Some(managers.len()),
        "user watch event"
    );
}
