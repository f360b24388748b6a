//! Server-side apply cases taken from sigs.k8s.io/structured-merge-diff's
//! own tests and kube-apiserver's field manager, through kube-rs against
//! the in-process server: null containers (`merge/nested_test.go`
//! `struct_apply_update_dict_null`, `typed/merge_test.go` "null/empty
//! map"), atomic maps and lists, list-maps with two keys (container ports
//! by containerPort+protocol), managers of `/status` and of the main
//! resource, `before-first-apply`, `/scale` (kube's ScaleHandler), a live
//! list item without its keys, and fields mutating admission adds.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
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

fn status(e: &kube::Error) -> Value {
    match e {
        kube::Error::Api(s) => serde_json::to_value(&**s).expect("status"),
        other => panic!("not an API error: {other:?}"),
    }
}

fn js(o: &impl Serialize) -> Value {
    serde_json::to_value(o).expect("json")
}

fn entries(o: &impl Serialize) -> Vec<Value> {
    js(o)
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The entry of `manager` with `operation` (and `subresource`, "" for none).
fn entry(o: &impl Serialize, manager: &str, operation: &str, sub: &str) -> Option<Value> {
    entries(o).into_iter().find(|e| {
        e["manager"] == json!(manager)
            && e["operation"] == json!(operation)
            && e["subresource"].as_str().unwrap_or("") == sub
    })
}

fn fields(o: &impl Serialize, manager: &str, operation: &str) -> Option<Value> {
    entry(o, manager, operation, "").map(|e| e["fieldsV1"].clone())
}

fn apply(m: &str) -> PatchParams {
    PatchParams::apply(m)
}

fn update(m: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(m.into()),
        ..Default::default()
    }
}

fn cm(metadata: Value, data: Value) -> Value {
    let mut meta = json!({"name": "c"});
    if let (Some(m), Some(extra)) = (meta.as_object_mut(), metadata.as_object()) {
        m.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
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

/// The report: alice applies a label, bob applies the same
/// ConfigMap with `labels:` empty (null) — alice's label stays, no
/// conflict, and bob owns the (empty) map itself but none of its keys.
#[tokio::test]
async fn a_null_map_in_an_applied_config_keeps_the_live_content() {
    let cms: Api<ConfigMap> = Api::default_namespaced(client().await);
    cms.patch(
        "c",
        &apply("alice"),
        &Patch::Apply(cm(json!({"labels": {"team": "a"}}), json!({"k": "v"}))),
    )
    .await
    .expect("alice");
    let got = cms
        .patch(
            "c",
            &apply("bob"),
            &Patch::Apply(cm(json!({"labels": null}), json!({"k": "v"}))),
        )
        .await
        .expect("bob: no conflict");
    assert_eq!(
        got.metadata.labels.as_ref().and_then(|l| l.get("team")),
        Some(&"a".to_string())
    );
    assert_eq!(
        fields(&got, "bob", "Apply"),
        Some(json!({"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {}}}))
    );
    assert_eq!(
        fields(&got, "alice", "Apply"),
        Some(json!({"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:team": {}}}}))
    );
    // An empty map is the same as null.
    let got = cms
        .patch(
            "c",
            &apply("carol"),
            &Patch::Apply(cm(json!({"labels": {}}), json!({}))),
        )
        .await
        .expect("carol");
    assert_eq!(
        got.metadata.labels.as_ref().and_then(|l| l.get("team")),
        Some(&"a".to_string())
    );
}

/// SMD `struct_apply_update_dict_null`: the applier's own field goes when
/// it applies null for the map, another manager's stays.
#[tokio::test]
async fn a_null_map_drops_only_what_the_applier_owned() {
    let cms: Api<ConfigMap> = Api::default_namespaced(client().await);
    cms.patch(
        "c",
        &apply("default"),
        &Patch::Apply(cm(json!({"annotations": {"name": "a"}}), json!({}))),
    )
    .await
    .expect("apply");
    cms.patch(
        "c",
        &update("controller"),
        &Patch::Merge(json!({"metadata": {"annotations": {"value": "1"}}})),
    )
    .await
    .expect("update");
    let got = cms
        .patch(
            "c",
            &apply("default"),
            &Patch::Apply(cm(json!({"annotations": null}), json!({}))),
        )
        .await
        .expect("apply null");
    let annotations = got.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("value"), Some(&"1".to_string()));
    assert_eq!(annotations.get("name"), None, "{annotations:?}");
}

/// An atomic map (`x-kubernetes-map-type: atomic`: a Deployment's
/// selector) is owned and replaced whole; a granular one is shared.
#[tokio::test]
async fn atomic_maps_and_lists_are_owned_whole() {
    let deps: Api<Deployment> = Api::default_namespaced(client().await);
    let containers = json!([{"name": "c", "image": "nginx", "args": ["a"]}]);
    deps.patch(
        "web",
        &apply("a"),
        &Patch::Apply(deployment(web_spec(1, containers))),
    )
    .await
    .expect("a");
    let got = deps.get("web").await.expect("get");
    let a = fields(&got, "a", "Apply").expect("a");
    assert_eq!(a.pointer("/f:spec/f:selector"), Some(&json!({})), "{a}");
    assert_eq!(
        a.pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"c\"}/f:args"),
        Some(&json!({})),
        "{a}"
    );
    // Another selector conflicts on the selector as a whole.
    let mut spec = web_spec(1, json!([{"name": "c", "image": "nginx", "args": ["b"]}]));
    spec["selector"] = json!({"matchLabels": {"app": "web", "tier": "x"}});
    spec["template"]["metadata"]["labels"]["tier"] = json!("x");
    let e = deps
        .patch("web", &apply("b"), &Patch::Apply(deployment(spec.clone())))
        .await
        .expect_err("conflicts");
    let fields_in_conflict: Vec<Value> = status(&e)["details"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| c["field"].clone())
        .collect();
    assert_eq!(
        fields_in_conflict,
        [
            json!(".spec.selector"),
            json!(".spec.template.spec.containers[name=\"c\"].args")
        ]
    );
    // Forced: replaced whole, not merged.
    let got = deps
        .patch("web", &apply("b").force(), &Patch::Apply(deployment(spec)))
        .await
        .expect("force");
    let s = got.spec.expect("spec");
    assert_eq!(
        js(&s.selector),
        json!({"matchLabels": {"app": "web", "tier": "x"}})
    );
    assert_eq!(
        js(&s.template.spec.expect("pod").containers[0].args),
        json!(["b"])
    );
}

/// Container ports are a list-map keyed by containerPort and protocol: 53/UDP
/// and 53/TCP are two items with two owners; `protocol` defaults to TCP.
#[tokio::test]
async fn container_ports_are_keyed_by_port_and_protocol() {
    let deps: Api<Deployment> = Api::default_namespaced(client().await);
    let dns = |ports: Value| {
        web_spec(
            1,
            json!([{"name": "dns", "image": "coredns", "ports": ports}]),
        )
    };
    deps.patch(
        "web",
        &apply("udp"),
        &Patch::Apply(deployment(dns(
            json!([{"containerPort": 53, "protocol": "UDP", "name": "dns"}]),
        ))),
    )
    .await
    .expect("udp");
    let got = deps
        .patch(
            "web",
            &apply("tcp").force(),
            &Patch::Apply(deployment(dns(
                json!([{"containerPort": 53, "name": "dns-tcp"}]),
            ))),
        )
        .await
        .expect("tcp");
    let ports = js(&got
        .spec
        .as_ref()
        .expect("spec")
        .template
        .spec
        .as_ref()
        .expect("pod")
        .containers[0]
        .ports);
    assert_eq!(
        ports,
        json!([
            {"containerPort": 53, "protocol": "UDP", "name": "dns"},
            {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"}
        ])
    );
    let tcp = fields(&got, "tcp", "Apply").expect("tcp");
    assert!(
        tcp.pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"dns\"}/f:ports/k:{\"containerPort\":53,\"protocol\":\"TCP\"}/f:name")
            .is_some(),
        "{tcp}"
    );
    // Renaming the UDP port conflicts on that item only.
    let e = deps
        .patch(
            "web",
            &apply("tcp"),
            &Patch::Apply(deployment(dns(json!([
                {"containerPort": 53, "name": "dns-tcp"},
                {"containerPort": 53, "protocol": "UDP", "name": "renamed"}
            ])))),
        )
        .await
        .expect_err("conflict");
    assert_eq!(
        status(&e)["message"],
        json!(
            "Apply failed with 1 conflict: conflict with \"udp\": .spec.template.spec.containers[name=\"dns\"].ports[containerPort=53,protocol=\"UDP\"].name"
        )
    );
}

/// One manager name on the main resource and on `/status` is two managers:
/// they never conflict, and each owns only its part.
#[tokio::test]
async fn status_and_main_resource_managers_are_distinct() {
    let deps: Api<Deployment> = Api::default_namespaced(client().await);
    let spec = web_spec(1, json!([{"name": "c", "image": "nginx"}]));
    deps.patch("web", &apply("m"), &Patch::Apply(deployment(spec.clone())))
        .await
        .expect("main");
    let mut cfg = deployment(json!({}));
    cfg["status"] = json!({"replicas": 3});
    let got = deps
        .patch_status("web", &apply("m"), &Patch::Apply(cfg))
        .await
        .expect("status");
    let main = entry(&got, "m", "Apply", "").expect("main entry");
    let st = entry(&got, "m", "Apply", "status").expect("status entry");
    assert!(main["fieldsV1"].get("f:status").is_none());
    assert_eq!(st["fieldsV1"], json!({"f:status": {"f:replicas": {}}}));
    // Re-applying the main config keeps the status (not this manager's there).
    let got = deps
        .patch("web", &apply("m"), &Patch::Apply(deployment(spec)))
        .await
        .expect("main again");
    assert_eq!(got.status.and_then(|s| s.replicas), Some(3));
}

/// An object whose managedFields were reset has its fields owned by
/// `before-first-apply` at the first apply, which then conflicts with it.
#[tokio::test]
async fn before_first_apply_owns_an_untracked_objects_fields() {
    let cms: Api<ConfigMap> = Api::default_namespaced(client().await);
    let obj: ConfigMap =
        serde_json::from_value(cm(json!({}), json!({"k": "1", "other": "x"}))).expect("cm");
    cms.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    let reset = cms
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"managedFields": [{}]}})),
        )
        .await
        .expect("reset");
    assert!(entries(&reset).is_empty());
    let e = cms
        .patch(
            "c",
            &apply("a"),
            &Patch::Apply(cm(json!({}), json!({"k": "2"}))),
        )
        .await
        .expect_err("conflict");
    assert_eq!(
        status(&e)["message"],
        json!(
            "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .data.k"
        )
    );
    let got = cms
        .patch(
            "c",
            &apply("a"),
            &Patch::Apply(cm(json!({}), json!({"k": "1"}))),
        )
        .await
        .expect("same value");
    assert_eq!(
        fields(&got, "before-first-apply", "Update"),
        Some(json!({"f:data": {".": {}, "f:k": {}, "f:other": {}}}))
    );
}

/// kube's ScaleHandler: a `/scale` write is recorded as the `scale`
/// subresource's manager of `spec.replicas`, and an apply to the parent
/// conflicts with it; an apply to `/scale` conflicts with the parent's
/// manager of replicas, and forced, takes it over.
#[tokio::test]
async fn scale_writes_own_replicas_as_the_scale_subresource() {
    let deps: Api<Deployment> = Api::default_namespaced(client().await);
    let spec = |r| web_spec(r, json!([{"name": "c", "image": "nginx"}]));
    deps.patch("web", &apply("kubectl"), &Patch::Apply(deployment(spec(2))))
        .await
        .expect("apply");
    deps.patch_scale(
        "web",
        &update("kubectl-scale"),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .expect("scale");
    let got = deps.get("web").await.expect("get");
    assert_eq!(got.spec.as_ref().and_then(|s| s.replicas), Some(5));
    let e = entry(&got, "kubectl-scale", "Update", "scale").expect("scale entry");
    assert_eq!(e["apiVersion"], json!("apps/v1"));
    assert_eq!(e["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    let kubectl = fields(&got, "kubectl", "Apply").expect("kubectl");
    assert!(kubectl.pointer("/f:spec/f:replicas").is_none(), "{kubectl}");
    let err = deps
        .patch("web", &apply("kubectl"), &Patch::Apply(deployment(spec(3))))
        .await
        .expect_err("conflict");
    assert_eq!(
        status(&err)["message"],
        json!(
            "Apply failed with 1 conflict: conflict with \"kubectl-scale\" with subresource \"scale\" using apps/v1: .spec.replicas"
        )
    );
    // An apply to /scale conflicts with the scale's manager, and forced,
    // owns replicas alone.
    let scale = |r: i64| json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web"}, "spec": {"replicas": r}});
    let err = deps
        .patch_scale("web", &apply("hpa"), &Patch::Apply(scale(7)))
        .await
        .expect_err("scale apply conflicts");
    assert_eq!(
        status(&err)["message"],
        json!(
            "Apply failed with 1 conflict: conflict with \"kubectl-scale\" with subresource \"scale\" using apps/v1: .spec.replicas"
        )
    );
    let s = deps
        .patch_scale("web", &apply("hpa").force(), &Patch::Apply(scale(7)))
        .await
        .expect("forced");
    assert_eq!(s.spec.and_then(|s| s.replicas), Some(7));
    let got = deps.get("web").await.expect("get");
    assert_eq!(got.spec.as_ref().and_then(|s| s.replicas), Some(7));
    assert!(entry(&got, "kubectl-scale", "Update", "scale").is_none());
    let hpa = entry(&got, "hpa", "Apply", "scale").expect("hpa");
    assert_eq!(hpa["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    // The wrong apiVersion is refused.
    let mut wrong = scale(1);
    wrong["apiVersion"] = json!("apps/v1");
    let err = deps
        .patch_scale("web", &apply("hpa"), &Patch::Apply(wrong))
        .await
        .expect_err("version");
    assert_eq!(
        status(&err)["message"],
        json!(
            "Incorrect version specified in apply patch. Specified patch version: apps/v1, expected: autoscaling/v1"
        )
    );
}

fn crd(items: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gateways.net.example.com"},
        "spec": {"group": "net.example.com", "scope": "Namespaced",
                 "names": {"plural": "gateways", "singular": "gateway", "kind": "Gateway"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "properties": {
                       "items": items,
                       "m": {"type": "object", "x-kubernetes-map-type": "atomic",
                             "additionalProperties": {"type": "string"}}}}}}}}]}
    }))
    .expect("crd")
}

/// A live list-map item without any of its keys (the CRD's list became a
/// list-map after the object was stored): the apply fails as on kube, with
/// SMD's error in a reason-less 500, and the object is left as it was.
#[tokio::test]
async fn a_live_item_without_its_keys_fails_the_apply() {
    let client = client().await;
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let atomic = json!({"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "port": {"type": "integer"}}}});
    crds.create(&PostParams::default(), &crd(atomic))
        .await
        .expect("crd");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("net.example.com", "v1", "Gateway"),
        "gateways",
    );
    let gws: Api<DynamicObject> = Api::default_namespaced_with(client, &ar);
    let gw = |spec: Value| json!({"apiVersion": "net.example.com/v1", "kind": "Gateway", "metadata": {"name": "g"}, "spec": spec});
    gws.patch(
        "g",
        &apply("a"),
        &Patch::Apply(gw(json!({"items": [{"port": 1}], "m": {"k1": "1"}}))),
    )
    .await
    .expect("create");
    // An atomic map conflicts whole and is replaced whole.
    let e = gws
        .patch(
            "g",
            &apply("b"),
            &Patch::Apply(gw(json!({"m": {"k2": "2"}}))),
        )
        .await
        .expect_err("atomic map");
    assert_eq!(
        status(&e)["message"],
        json!("Apply failed with 1 conflict: conflict with \"a\": .spec.m")
    );
    let got = gws
        .patch(
            "g",
            &apply("b").force(),
            &Patch::Apply(gw(json!({"m": {"k2": "2"}}))),
        )
        .await
        .expect("forced");
    assert_eq!(got.data.pointer("/spec/m"), Some(&json!({"k2": "2"})));

    let mut current = crds.get("gateways.net.example.com").await.expect("get crd");
    current.data["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["items"] = json!({"type": "array", "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "port": {"type": "integer"}}}});
    crds.replace("gateways.net.example.com", &PostParams::default(), &current)
        .await
        .expect("list-map now");
    let e = gws
        .patch(
            "g",
            &apply("a"),
            &Patch::Apply(gw(json!({"items": [{"name": "x", "port": 2}]}))),
        )
        .await
        .expect_err("live item without keys");
    let s = status(&e);
    assert_eq!(s["code"], json!(500));
    assert_eq!(
        s["message"],
        json!(
            "failed to create typed live object (default/g; net.example.com/v1, Kind=Gateway): .spec.items: element 0: associative list with keys has an element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)"
        )
    );
    let got = gws.get("g").await.expect("get");
    assert_eq!(got.data.pointer("/spec/items"), Some(&json!([{"port": 1}])));
}

/// kube-apiserver records a write's manager before admission: what the
/// Priority plugin sets (`spec.priority`, `spec.preemptionPolicy`) is
/// nobody's, while the request's fields and their defaults are the
/// creator's.
#[tokio::test]
async fn fields_admission_adds_belong_to_no_manager() {
    let pods: Api<Pod> = Api::default_namespaced(client().await);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    }))
    .expect("pod");
    let got = pods
        .create(
            &PostParams {
                field_manager: Some("creator".into()),
                ..Default::default()
            },
            &pod,
        )
        .await
        .expect("create");
    let spec = got.spec.as_ref().expect("spec");
    assert_eq!(spec.priority, Some(0));
    assert!(spec.preemption_policy.is_some());
    let creator = fields(&got, "creator", "Update").expect("creator");
    let owned = creator.get("f:spec").expect("spec fields");
    assert!(owned.get("f:priority").is_none(), "{creator}");
    assert!(owned.get("f:preemptionPolicy").is_none(), "{creator}");
    assert!(owned.get("f:containers").is_some(), "{creator}");
    assert!(owned.get("f:dnsPolicy").is_some(), "{creator}");
}
