//! CRDs in depth through kube-rs, in-process: a CRD with defaults, an
//! int-or-string field, CEL rules (`self.minReplicas <= self.replicas`, a
//! transition rule), a `set` list, printer columns, and the status and scale
//! subresources; invalid CEL in a CRD; defaulting on read.
//!
//! Which assertions depend on the server calling the schema crate's newer API:
//! - `transition_rules_on_update` needs `Validator::validate_update(new, old)` on
//!   updates and patches (rules using `oldSelf`, ratcheting);
//! - `defaults_on_read` needs `Validator::apply_defaults` on reads (get, list,
//!   watch).
//!
//! The rest runs on what the server already calls (`check_structural` for CRDs,
//! `Validator::validate` for writes).

use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kubeforge_apiserver::ApiServer;
use serde_json::{Value, json};

const CRD_NAME: &str = "widgets.depth.example.com";

fn crds(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    )
}

fn widgets(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("depth.example.com", "v1", "Widget"),
            "widgets",
        ),
    )
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    { "rule": "self.minReplicas <= self.replicas", "message": "minReplicas must not exceed replicas" },
                ],
                "properties": {
                    "replicas": { "type": "integer", "default": 1, "minimum": 0 },
                    "minReplicas": { "type": "integer", "default": 0 },
                    "maxSurge": { "x-kubernetes-int-or-string": true, "default": "25%" },
                    "image": { "type": "string" },
                    "class": {
                        "type": "string",
                        "x-kubernetes-validations": [{ "rule": "self == oldSelf", "message": "class is immutable" }],
                    },
                    "tags": { "type": "array", "x-kubernetes-list-type": "set", "items": { "type": "string" } },
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "replicas": { "type": "integer" },
                    "selector": { "type": "string" },
                },
            },
        },
    })
}

fn crd(schema: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": CRD_NAME },
        "spec": {
            "group": "depth.example.com",
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget" },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": schema },
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "additionalPrinterColumns": [
                    { "name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas" },
                    { "name": "Surge", "type": "string", "jsonPath": ".spec.maxSurge" },
                    { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
                ],
            }],
        },
    }))
    .expect("crd")
}

fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "depth.example.com/v1",
        "kind": "Widget",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .expect("widget")
}

/// A server with the Widget CRD installed.
async fn setup() -> Client {
    let client = ApiServer::in_memory().await.client();
    crds(&client)
        .create(&PostParams::default(), &crd(schema()))
        .await
        .expect("create crd");
    client
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn defaults_int_or_string_and_cel_on_create() {
    let client = setup().await;
    let api = widgets(&client);

    // Defaults are applied on create.
    let w = api
        .create(
            &PostParams::default(),
            &widget("plain", json!({ "image": "nginx" })),
        )
        .await
        .expect("create");
    assert_eq!(w.data["spec"]["replicas"], json!(1));
    assert_eq!(w.data["spec"]["minReplicas"], json!(0));
    assert_eq!(w.data["spec"]["maxSurge"], json!("25%"));

    // int-or-string: numbers and strings, not booleans.
    for (name, surge) in [("int", json!(5)), ("percent", json!("50%"))] {
        let w = api
            .create(
                &PostParams::default(),
                &widget(name, json!({ "maxSurge": surge })),
            )
            .await
            .expect("int-or-string");
        assert_eq!(w.data["spec"]["maxSurge"], surge);
    }
    let e = api_error(
        api.create(
            &PostParams::default(),
            &widget("bool", json!({ "maxSurge": true })),
        )
        .await
        .expect_err("boolean surge"),
    );
    assert_eq!(e.code, 422);
    assert!(e.message.contains("spec.maxSurge"), "{}", e.message);

    // The CEL rule refuses a violating object with its message.
    let e = api_error(
        api.create(
            &PostParams::default(),
            &widget("bad", json!({ "replicas": 2, "minReplicas": 3 })),
        )
        .await
        .expect_err("rule"),
    );
    assert_eq!(e.code, 422, "{e:?}");
    assert_eq!(e.reason, "Invalid");
    assert!(
        e.message
            .contains("spec: Invalid value: \"object\": minReplicas must not exceed replicas"),
        "{}",
        e.message
    );
    // The rule sees defaults: minReplicas 2 against the default replicas 1.
    let e = api_error(
        api.create(
            &PostParams::default(),
            &widget("bad2", json!({ "minReplicas": 2 })),
        )
        .await
        .expect_err("rule with defaults"),
    );
    assert!(
        e.message.contains("minReplicas must not exceed replicas"),
        "{}",
        e.message
    );

    // And an update that breaks it.
    let e = api_error(
        api.patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "minReplicas": 5 } })),
        )
        .await
        .expect_err("rule on update"),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("minReplicas must not exceed replicas"),
        "{}",
        e.message
    );

    // A `set` list refuses duplicates.
    let e = api_error(
        api.create(
            &PostParams::default(),
            &widget("dups", json!({ "tags": ["a", "b", "a"] })),
        )
        .await
        .expect_err("set duplicates"),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("spec.tags[2]: Duplicate value: \"a\""),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn printer_columns_scale_and_status() {
    let client = setup().await;
    let api = widgets(&client);
    api.create(
        &PostParams::default(),
        &widget("w", json!({ "replicas": 2, "maxSurge": "50%" })),
    )
    .await
    .expect("create");

    // Printer columns, as kubectl get asks for them.
    let req = http::Request::get("/apis/depth.example.com/v1/namespaces/default/widgets")
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .expect("request");
    let table: Value =
        serde_json::from_str(&client.request_text(req).await.expect("table")).expect("json");
    assert_eq!(table["kind"], json!("Table"));
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["Name", "Replicas", "Surge", "Age"]);
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], json!("w"));
    assert_eq!(cells[1], json!(2));
    assert_eq!(cells[2], json!("50%"));

    // Status writes go through /status and don't bump the generation.
    let s = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "replicas": 2, "selector": "app=w" } })),
        )
        .await
        .expect("status");
    assert_eq!(s.metadata.generation, Some(1));
    assert_eq!(s.data["status"]["replicas"], json!(2));

    // Scale subresource.
    let scale = api.get_scale("w").await.expect("scale");
    assert_eq!(scale.spec.as_ref().and_then(|s| s.replicas), Some(2));
    let status = scale.status.expect("scale status");
    assert_eq!(status.replicas, 2);
    assert_eq!(status.selector.as_deref(), Some("app=w"));
    api.patch_scale(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "replicas": 5 } })),
    )
    .await
    .expect("scale up");
    let w = api.get("w").await.expect("get");
    assert_eq!(w.data["spec"]["replicas"], json!(5));
    assert_eq!(w.metadata.generation, Some(2));
}

#[tokio::test]
async fn invalid_cel_in_crd_is_refused() {
    let client = ApiServer::in_memory().await.client();
    let mut bad = schema();
    bad["properties"]["spec"]["x-kubernetes-validations"] = json!([{ "rule": "self.minReplicas <= self.replicas +" }, { "rule": "self.minReplica <= self.replicas" }]);
    let e = api_error(
        crds(&client)
            .create(&PostParams::default(), &crd(bad))
            .await
            .expect_err("invalid CEL"),
    );
    assert_eq!(e.code, 422, "{e:?}");
    assert_eq!(e.reason, "Invalid");
    let field = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations";
    assert!(
        e.message
            .contains(&format!("{field}[0].rule: Invalid value: ")),
        "{}",
        e.message
    );
    assert!(e.message.contains("compilation failed: "), "{}", e.message);
    assert!(
        e.message.contains("undefined field 'minReplica'"),
        "{}",
        e.message
    );
}

/// Needs the server to call `Validator::validate_update(new, old)` on updates.
#[tokio::test]
async fn transition_rules_on_update() {
    let client = setup().await;
    let api = widgets(&client);
    api.create(
        &PostParams::default(),
        &widget("w", json!({ "class": "gold" })),
    )
    .await
    .expect("create");
    let e = api_error(
        api.patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "class": "silver" } })),
        )
        .await
        .expect_err("class is immutable"),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains("spec.class: Invalid value: \"string\": class is immutable"),
        "{}",
        e.message
    );
    // Unchanged, it may be written again.
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "class": "gold", "image": "x" } })),
    )
    .await
    .expect("unchanged class");
}

/// Needs the server to call `Validator::apply_defaults` when reading.
#[tokio::test]
async fn defaults_on_read() {
    let client = setup().await;
    let api = widgets(&client);
    api.create(&PostParams::default(), &widget("w", json!({})))
        .await
        .expect("create");
    // A new defaulted field appears on objects stored before it existed.
    let mut current = crds(&client).get(CRD_NAME).await.expect("get crd");
    current.data["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["tier"] = json!({ "type": "string", "default": "standard" });
    crds(&client)
        .replace(CRD_NAME, &PostParams::default(), &current)
        .await
        .expect("update crd");
    let w = api.get("w").await.expect("get");
    assert_eq!(w.data["spec"]["tier"], json!("standard"));
    let list = api.list(&Default::default()).await.expect("list");
    assert_eq!(list.items[0].data["spec"]["tier"], json!("standard"));
}
