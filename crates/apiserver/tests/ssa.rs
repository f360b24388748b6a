//! Server-side apply and managed fields through kube-rs, in-process:
//! conflicts (one cause per field, also against Update managers), `force`,
//! removal of fields a manager stopped applying, list-maps and sets (built-in
//! and CRD `x-kubernetes-list-type`), Update managers for create and patches
//! (`fieldManager` and the User-Agent fallback), `/status` applies, and
//! kubectl's client-side → server-side apply migration.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kubeforge_apiserver::ApiServer;
use serde::Serialize;
use serde_json::{Value, json};

async fn client() -> Client {
    ApiServer::in_memory().await.client()
}

/// The `Status` of a failed call, as JSON (code, reason, message, details).
fn status(e: &kube::Error) -> Value {
    match e {
        kube::Error::Api(s) => serde_json::to_value(&**s).expect("status"),
        other => panic!("not an API error: {other:?}"),
    }
}

/// The object as JSON.
fn js(o: &impl Serialize) -> Value {
    serde_json::to_value(o).expect("json")
}

/// The managedFields entries of an object.
fn entries(o: &impl Serialize) -> Vec<Value> {
    js(o)
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The entry of `manager` with `operation`.
fn entry(o: &impl Serialize, manager: &str, operation: &str) -> Option<Value> {
    entries(o)
        .into_iter()
        .find(|e| e["manager"] == json!(manager) && e["operation"] == json!(operation))
}

/// The fieldsV1 of `manager`'s entry with `operation`.
fn fields(o: &impl Serialize, manager: &str, operation: &str) -> Option<Value> {
    entry(o, manager, operation).map(|e| e["fieldsV1"].clone())
}

fn apply(m: &str) -> PatchParams {
    PatchParams::apply(m)
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
}

fn deployment(spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": spec})
}

fn web_spec(replicas: i64, containers: Value) -> Value {
    json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}
    })
}

fn container_names(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn conflicts_have_one_cause_per_field_and_force_moves_ownership() {
    let cms: Api<ConfigMap> = Api::default_namespaced(client().await);
    cms.patch(
        "c",
        &apply("alice"),
        &Patch::Apply(cm(json!({"a": "1", "b": "2", "c": "3"}))),
    )
    .await
    .expect("alice applies");
    // Bob shares `c` (same value: no conflict) and wants other a and b.
    let e = cms
        .patch(
            "c",
            &apply("bob"),
            &Patch::Apply(cm(json!({"a": "x", "b": "y", "c": "3"}))),
        )
        .await
        .expect_err("conflicts");
    let s = status(&e);
    assert_eq!(
        (s["code"].clone(), s["reason"].clone()),
        (json!(409), json!("Conflict"))
    );
    assert_eq!(
        s["message"],
        json!("Apply failed with 2 conflicts: conflicts with \"alice\":\n- .data.a\n- .data.b")
    );
    assert_eq!(
        s["details"]["causes"],
        json!([
            {"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".data.a"},
            {"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".data.b"}
        ])
    );
    let e = cms
        .patch(
            "c",
            &apply("bob"),
            &Patch::Apply(cm(json!({"a": "x", "c": "3"}))),
        )
        .await
        .expect_err("one conflict");
    assert_eq!(
        status(&e)["message"],
        json!("Apply failed with 1 conflict: conflict with \"alice\": .data.a")
    );

    // Force: bob takes a and b; c stays shared.
    let forced = cms
        .patch(
            "c",
            &apply("bob").force(),
            &Patch::Apply(cm(json!({"a": "x", "b": "y", "c": "3"}))),
        )
        .await
        .expect("force");
    assert_eq!(
        fields(&forced, "alice", "Apply"),
        Some(json!({"f:data": {"f:c": {}}}))
    );
    assert_eq!(
        fields(&forced, "bob", "Apply"),
        Some(json!({"f:data": {"f:a": {}, "f:b": {}, "f:c": {}}}))
    );
    for e in entries(&forced) {
        assert!(e["time"].is_string(), "{e}");
        assert_eq!(e["fieldsType"], json!("FieldsV1"));
        assert_eq!(e["apiVersion"], json!("v1"));
    }
    // Now alice conflicts with bob.
    let e = cms
        .patch(
            "c",
            &apply("alice"),
            &Patch::Apply(cm(json!({"a": "1", "c": "3"}))),
        )
        .await
        .expect_err("alice lost a");
    assert_eq!(
        status(&e)["details"]["causes"][0]["message"],
        json!("conflict with \"bob\"")
    );
}

#[tokio::test]
async fn dropped_fields_are_removed_unless_another_manager_owns_them() {
    let cms: Api<ConfigMap> = Api::default_namespaced(client().await);
    cms.patch(
        "c",
        &apply("alice"),
        &Patch::Apply(cm(json!({"a": "1", "b": "2", "c": "3"}))),
    )
    .await
    .expect("alice");
    cms.patch("c", &apply("bob"), &Patch::Apply(cm(json!({"b": "2"}))))
        .await
        .expect("bob shares b");
    // Alice stops applying b and c: c goes, b stays (bob owns it).
    let got = cms
        .patch("c", &apply("alice"), &Patch::Apply(cm(json!({"a": "1"}))))
        .await
        .expect("alice drops");
    let data = got.data.clone().unwrap_or_default();
    assert_eq!(data.get("a").map(String::as_str), Some("1"));
    assert_eq!(data.get("b").map(String::as_str), Some("2"));
    assert!(!data.contains_key("c"), "{data:?}");
    // A field set by an Update manager is kept too.
    cms.patch(
        "c",
        &PatchParams {
            field_manager: Some("editor".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"data": {"e": "5"}})),
    )
    .await
    .expect("editor");
    let got = cms
        .patch(
            "c",
            &apply("alice"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            ),
        )
        .await
        .expect("alice drops all");
    let data = got.data.clone().unwrap_or_default();
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        ["b", "e"]
    );
    assert!(
        entry(&got, "alice", "Apply").is_none(),
        "empty entry dropped"
    );
}

#[tokio::test]
async fn containers_are_a_list_map_keyed_by_name() {
    let deps: Api<Deployment> = Api::default_namespaced(client().await);
    deps.patch(
        "web",
        &apply("a"),
        &Patch::Apply(deployment(web_spec(
            1,
            json!([{"name": "a", "image": "img-a", "ports": [{"containerPort": 80}]}]),
        ))),
    )
    .await
    .expect("a");
    let got = deps
        .patch(
            "web",
            &apply("b"),
            &Patch::Apply(deployment(json!({"template": {"spec": {"containers": [
                {"name": "b", "image": "img-b", "env": [{"name": "X", "value": "1"}]}
            ]}}}))),
        )
        .await
        .expect("b adds a container");
    assert_eq!(container_names(&got), ["a", "b"]);
    assert_eq!(
        fields(&got, "b", "Apply"),
        Some(
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"b\"}": {".": {}, "f:name": {}, "f:image": {},
                    "f:env": {"k:{\"name\":\"X\"}": {".": {}, "f:name": {}, "f:value": {}}}}
            }}}}})
        )
    );
    // Port keys are containerPort and protocol (defaulted to TCP).
    let a = fields(&got, "a", "Apply").expect("a's fields");
    assert!(
        a.pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"a\"}/f:ports/k:{\"containerPort\":80,\"protocol\":\"TCP\"}")
            .is_some(),
        "{a}"
    );
    assert_eq!(a.pointer("/f:spec/f:selector"), Some(&json!({})));
    // B changing a's image conflicts on that field only.
    let e = deps
        .patch(
            "web",
            &apply("b"),
            &Patch::Apply(deployment(json!({"template": {"spec": {"containers": [
                {"name": "b", "image": "img-b", "env": [{"name": "X", "value": "1"}]},
                {"name": "a", "image": "other"}
            ]}}}))),
        )
        .await
        .expect_err("conflict");
    assert_eq!(
        status(&e)["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"a\"",
                "field": ".spec.template.spec.containers[name=\"a\"].image"}])
    );
    // A drops its container: only b remains.
    let got = deps
        .patch(
            "web",
            &apply("a"),
            &Patch::Apply(deployment(json!({
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}}
            }))),
        )
        .await
        .expect("a drops a");
    assert_eq!(container_names(&got), ["b"]);
    // Duplicate keys in an applied list are refused, naming the field.
    let e = deps
        .patch(
            "web",
            &apply("b"),
            &Patch::Apply(deployment(json!({"template": {"spec": {"containers": [
                {"name": "b", "image": "x"}, {"name": "b", "image": "y"}
            ]}}}))),
        )
        .await
        .expect_err("duplicate");
    let s = status(&e);
    assert_eq!(s["code"], json!(422));
    assert_eq!(
        s["details"]["causes"][0]["field"],
        json!("spec.template.spec.containers")
    );
}

#[tokio::test]
async fn finalizers_are_a_set() {
    let cms: Api<ConfigMap> = Api::default_namespaced(client().await);
    let with = |f: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": f}});
    cms.patch(
        "c",
        &apply("a"),
        &Patch::Apply(with(json!(["example.com/a"]))),
    )
    .await
    .expect("a");
    let got = cms
        .patch(
            "c",
            &apply("b"),
            &Patch::Apply(with(json!(["example.com/b"]))),
        )
        .await
        .expect("b");
    assert_eq!(
        got.metadata.finalizers.clone().unwrap_or_default(),
        ["example.com/a", "example.com/b"]
    );
    assert_eq!(
        fields(&got, "b", "Apply"),
        Some(json!({"f:metadata": {"f:finalizers": {"v:\"example.com/b\"": {}}}}))
    );
    let got = cms
        .patch(
            "c",
            &apply("a"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            ),
        )
        .await
        .expect("a drops its finalizer");
    assert_eq!(
        got.metadata.finalizers.clone().unwrap_or_default(),
        ["example.com/b"]
    );
}

#[tokio::test]
async fn updates_record_their_managers() {
    let client = client().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = cms
        .create(
            &PostParams {
                field_manager: Some("creator".into()),
                ..Default::default()
            },
            &serde_json::from_value(json!({"metadata": {"name": "c", "labels": {"app": "x"}}, "data": {"k": "1", "j": "2"}}))
                .expect("cm"),
        )
        .await
        .expect("create");
    let e = entry(&created, "creator", "Update").expect("creator entry");
    assert_eq!(e["apiVersion"], json!("v1"));
    assert!(e["time"].is_string());
    assert_eq!(
        e["fieldsV1"],
        json!({"f:data": {".": {}, "f:j": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
    );
    // A merge patch by another manager takes the field it changed.
    let patched = cms
        .patch(
            "c",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"k": "9"}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(
        fields(&patched, "editor", "Update"),
        Some(json!({"f:data": {"f:k": {}}}))
    );
    assert_eq!(
        fields(&patched, "creator", "Update"),
        Some(
            json!({"f:data": {".": {}, "f:j": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
        )
    );
    // Without fieldManager: the User-Agent's prefix.
    let req = http::Request::patch("/api/v1/namespaces/default/configmaps/c")
        .header("Content-Type", "application/merge-patch+json")
        .header("User-Agent", "my-tool/1.2.3 (linux/amd64)")
        .body(br#"{"data":{"j":"3"}}"#.to_vec())
        .expect("request");
    let got: Value = client.request(req).await.expect("patch with UA");
    assert_eq!(
        fields(&got, "my-tool", "Update"),
        Some(json!({"f:data": {"f:j": {}}}))
    );
    // An apply then conflicts with these Update managers, naming their apiVersion.
    let e = cms
        .patch("c", &apply("applier"), &Patch::Apply(cm(json!({"k": "0"}))))
        .await
        .expect_err("conflict with an updater");
    assert_eq!(
        status(&e)["message"],
        json!("Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.k")
    );
    // A no-op update changes nothing (same resourceVersion).
    let rv = got["metadata"]["resourceVersion"].clone();
    let same = cms
        .patch(
            "c",
            &PatchParams {
                field_manager: Some("noop".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"j": "3"}})),
        )
        .await
        .expect("no-op");
    assert_eq!(json!(same.metadata.resource_version), rv);
    assert!(entry(&same, "noop", "Update").is_none());
    // managedFields: [{}] resets them.
    let reset = cms
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"managedFields": [{}]}})),
        )
        .await
        .expect("reset");
    assert!(entries(&reset).is_empty(), "{:?}", entries(&reset));
}

#[tokio::test]
async fn kubectl_scale_then_server_side_apply_conflicts() {
    let deps: Api<Deployment> = Api::default_namespaced(client().await);
    let spec = || web_spec(2, json!([{"name": "nginx", "image": "nginx"}]));
    deps.patch("web", &apply("kubectl"), &Patch::Apply(deployment(spec())))
        .await
        .expect("apply");
    deps.patch(
        "web",
        &PatchParams {
            field_manager: Some("kubectl-scale".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .expect("scale");
    let e = deps
        .patch("web", &apply("kubectl"), &Patch::Apply(deployment(spec())))
        .await
        .expect_err("replicas conflict");
    assert_eq!(
        status(&e)["message"],
        json!(
            "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1: .spec.replicas"
        )
    );
    // Applying the live value shares the field.
    let mut same = spec();
    same["replicas"] = json!(5);
    deps.patch("web", &apply("kubectl"), &Patch::Apply(deployment(same)))
        .await
        .expect("same value");
    let got = deps
        .patch(
            "web",
            &apply("kubectl").force(),
            &Patch::Apply(deployment(spec())),
        )
        .await
        .expect("force");
    assert_eq!(got.spec.as_ref().and_then(|s| s.replicas), Some(2));
    assert!(entry(&got, "kubectl-scale", "Update").is_none());
}

#[tokio::test]
async fn status_applies_own_only_status() {
    let deps: Api<Deployment> = Api::default_namespaced(client().await);
    let spec = web_spec(1, json!([{"name": "nginx", "image": "nginx"}]));
    // An apply to the main resource ignores status.
    let mut with_status = deployment(spec.clone());
    with_status["status"] = json!({"replicas": 7});
    let got = deps
        .patch("web", &apply("owner"), &Patch::Apply(with_status))
        .await
        .expect("apply");
    let owner = fields(&got, "owner", "Apply").expect("owner");
    assert!(owner.get("f:status").is_none(), "{owner}");
    assert_ne!(got.status.as_ref().and_then(|s| s.replicas), Some(7));
    // Through /status: only status is taken and owned.
    let mut status_cfg = deployment(json!({"replicas": 9}));
    status_cfg["status"] = json!({"replicas": 1, "observedGeneration": 1});
    let got = deps
        .patch_status("web", &apply("status-writer"), &Patch::Apply(status_cfg))
        .await
        .expect("status apply");
    assert_eq!(got.status.as_ref().and_then(|s| s.replicas), Some(1));
    assert_eq!(got.spec.as_ref().and_then(|s| s.replicas), Some(1));
    let e = entry(&got, "status-writer", "Apply").expect("status entry");
    assert_eq!(e["subresource"], json!("status"));
    assert_eq!(
        e["fieldsV1"],
        json!({"f:status": {"f:observedGeneration": {}, "f:replicas": {}}})
    );
    assert!(entry(&got, "owner", "Apply").is_some());
    // Status updates record a status Update entry.
    let got = deps
        .patch_status(
            "web",
            &PatchParams {
                field_manager: Some("controller".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"status": {"readyReplicas": 1}})),
        )
        .await
        .expect("status patch");
    let e = entry(&got, "controller", "Update").expect("controller");
    assert_eq!(e["subresource"], json!("status"));
    assert_eq!(e["fieldsV1"], json!({"f:status": {"f:readyReplicas": {}}}));
}

#[tokio::test]
async fn crd_list_map_keys() {
    let client = client().await;
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gateways.net.example.com"},
        "spec": {"group": "net.example.com", "scope": "Namespaced",
                 "names": {"plural": "gateways", "singular": "gateway", "kind": "Gateway"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "properties": {
                       "listeners": {"type": "array", "x-kubernetes-list-type": "map",
                         "x-kubernetes-list-map-keys": ["name", "port"],
                         "items": {"type": "object", "required": ["name"], "properties": {
                           "name": {"type": "string"}, "port": {"type": "integer", "default": 80},
                           "host": {"type": "string"}}}},
                       "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                       "plain": {"type": "array", "items": {"type": "string"}}}}}}}}]}
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("net.example.com", "v1", "Gateway"),
        "gateways",
    );
    let gws: Api<DynamicObject> = Api::default_namespaced_with(client, &ar);
    let gw = |spec: Value| json!({"apiVersion": "net.example.com/v1", "kind": "Gateway", "metadata": {"name": "g"}, "spec": spec});
    gws.patch(
        "g",
        &apply("a"),
        &Patch::Apply(gw(json!({"listeners": [{"name": "http", "host": "a.example"}], "tags": ["a"], "plain": ["a"]}))),
    )
    .await
    .expect("a");
    let got = gws
        .patch(
            "g",
            &apply("b"),
            &Patch::Apply(gw(json!({"listeners": [{"name": "https", "port": 443, "host": "b.example"}], "tags": ["b"]}))),
        )
        .await
        .expect("b");
    assert_eq!(
        got.data.pointer("/spec/listeners"),
        Some(&json!([
            {"name": "http", "port": 80, "host": "a.example"},
            {"name": "https", "port": 443, "host": "b.example"}
        ]))
    );
    assert_eq!(got.data.pointer("/spec/tags"), Some(&json!(["a", "b"])));
    // The key uses the schema default of port.
    let a = fields(&got, "a", "Apply").expect("a");
    assert!(
        a.pointer("/f:spec/f:listeners/k:{\"name\":\"http\",\"port\":80}/f:host")
            .is_some(),
        "{a}"
    );
    // B changing a's listener conflicts on its field.
    let e = gws
        .patch(
            "g",
            &apply("b"),
            &Patch::Apply(gw(json!({"listeners": [
                {"name": "https", "port": 443, "host": "b.example"},
                {"name": "http", "host": "b.example"}]}))),
        )
        .await
        .expect_err("conflict on a's listener");
    assert_eq!(
        status(&e)["details"]["causes"][0]["field"],
        json!(".spec.listeners[name=\"http\",port=80].host")
    );
    // An atomic list is replaced and owned whole.
    let got = gws
        .patch("g", &apply("a"), &Patch::Apply(gw(json!({"plain": ["a"]}))))
        .await
        .expect("a drops its listener and tag");
    assert_eq!(
        got.data.pointer("/spec/listeners"),
        Some(&json!([{"name": "https", "port": 443, "host": "b.example"}]))
    );
    assert_eq!(got.data.pointer("/spec/tags"), Some(&json!(["b"])));
    assert_eq!(
        fields(&got, "a", "Apply"),
        Some(json!({"f:spec": {"f:plain": {}}}))
    );
}

fn last_applied(obj: &Value) -> String {
    let mut o = obj.clone();
    if let Some(m) = o["metadata"].as_object_mut() {
        m.remove("annotations");
    }
    o.to_string()
}

/// What `kubectl apply` (client-side) creates.
fn client_side_applied(image: &str) -> Value {
    let mut d = deployment(web_spec(2, json!([{"name": "nginx", "image": image}])));
    let la = last_applied(&d);
    d["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": la});
    d
}

#[tokio::test]
async fn kubectl_client_side_then_server_side_apply() {
    let client = client().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let csa = PostParams {
        field_manager: Some("kubectl-client-side-apply".into()),
        ..Default::default()
    };
    // 1. kubectl without the managedFields upgrade (the server allows
    //    conflicts on fields the last-applied configuration set).
    deps.create(
        &csa,
        &serde_json::from_value(client_side_applied("nginx:1.25")).expect("d"),
    )
    .await
    .expect("client-side create");
    let mut ssa = deployment(web_spec(
        3,
        json!([{"name": "nginx", "image": "nginx:1.27"}]),
    ));
    let got = deps
        .patch("web", &apply("kubectl"), &Patch::Apply(ssa.clone()))
        .await
        .expect("server-side apply after client-side apply");
    assert_eq!(got.spec.as_ref().and_then(|s| s.replicas), Some(3));
    // kubectl's server-side apply keeps the annotation in sync.
    let la: Value = serde_json::from_str(
        got.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubectl.kubernetes.io/last-applied-configuration"))
            .expect("annotation"),
    )
    .expect("json");
    assert_eq!(la["spec"]["replicas"], json!(3));
    ssa["spec"]["replicas"] = json!(4);
    let got = deps
        .patch("web", &apply("kubectl"), &Patch::Apply(ssa))
        .await
        .expect("apply again");
    assert_eq!(got.spec.as_ref().and_then(|s| s.replicas), Some(4));

    // 2. kubectl ≥ 1.26: it first moves kubectl-client-side-apply's fields
    //    to a `kubectl` Apply entry with a JSON patch (csaupgrade).
    let deps2: Api<Deployment> = Api::namespaced(client.clone(), "kube-public");
    let created = deps2
        .create(
            &csa,
            &serde_json::from_value(client_side_applied("nginx:1.25")).expect("d"),
        )
        .await
        .expect("client-side create");
    let mut upgraded = entries(&created);
    for e in &mut upgraded {
        if e["manager"] == json!("kubectl-client-side-apply") {
            e["manager"] = json!("kubectl");
            e["operation"] = json!("Apply");
        }
    }
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/metadata/managedFields", "value": upgraded},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": created.metadata.resource_version},
    ]))
    .expect("patch");
    let got = deps2
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("kubectl".into()),
                ..Default::default()
            },
            &Patch::Json::<()>(patch),
        )
        .await
        .expect("managedFields upgrade");
    assert!(entry(&got, "kubectl-client-side-apply", "Update").is_none());
    assert!(entry(&got, "kubectl", "Apply").is_some());
    let mut ssa = deployment(web_spec(
        2,
        json!([{"name": "nginx", "image": "nginx:1.25"}]),
    ));
    deps2
        .patch("web", &apply("kubectl"), &Patch::Apply(ssa.clone()))
        .await
        .expect("same file, no conflicts");
    ssa["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    let got = deps2
        .patch("web", &apply("kubectl"), &Patch::Apply(ssa))
        .await
        .expect("changed file");
    let image = got
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone());
    assert_eq!(image.as_deref(), Some("nginx:1.27"));
    assert_eq!(
        entries(&got)
            .iter()
            .map(|e| e["manager"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>(),
        ["kubectl"]
    );
}

#[tokio::test]
async fn apply_refuses_managed_fields_in_the_configuration() {
    let cms: Api<ConfigMap> = Api::default_namespaced(client().await);
    let mut c = cm(json!({"a": "1"}));
    c["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
    let e = cms
        .patch("c", &apply("a"), &Patch::Apply(c))
        .await
        .expect_err("400");
    let s = status(&e);
    assert_eq!(s["code"], json!(400));
    assert_eq!(s["message"], json!("metadata.managedFields must be nil"));
}
