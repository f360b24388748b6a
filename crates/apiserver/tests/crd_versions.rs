//! A CRD with two served versions (`conversion: None`), one of them the
//! storage version: objects written through either are read through both,
//! `status.storedVersions` records the storage version, and a
//! `selectableFields` field works as a field selector.

use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeforge_apiserver::ApiServer;
use serde_json::json;

fn ar(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("demo.example.com", version, "Widget"),
        "widgets",
    )
}

#[tokio::test]
async fn two_versions_and_selectable_fields() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"color": {"type": "string"}, "size": {"type": "integer"}}}}}});
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.demo.example.com"},
        "spec": {"group": "demo.example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [
                    {"name": "v1beta1", "served": true, "storage": false, "schema": schema},
                    {"name": "v1", "served": true, "storage": true, "schema": schema,
                     "selectableFields": [{"jsonPath": ".spec.color"}]}]}
    }))
    .expect("crd");
    let created = crds
        .create(&PostParams::default(), &crd)
        .await
        .expect("crd");
    assert_eq!(
        created.data.pointer("/status/storedVersions"),
        Some(&json!(["v1"]))
    );
    // Two versions marked storage are refused.
    let mut bad = crd.clone();
    bad.metadata.name = Some("gadgets.demo.example.com".into());
    bad.data["spec"]["names"] =
        json!({"plural": "gadgets", "singular": "gadget", "kind": "Gadget"});
    bad.data["spec"]["versions"][0]["storage"] = json!(true);
    let e = crds
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("two storage versions");
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 422),
        "{e:?}"
    );

    let beta: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &ar("v1beta1"));
    let v1: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &ar("v1"));
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "demo.example.com/v1beta1", "kind": "Widget", "metadata": {"name": "red"}, "spec": {"color": "red", "size": 1}})).expect("w");
    beta.create(&PostParams::default(), &w)
        .await
        .expect("create via v1beta1");
    let w2: DynamicObject = serde_json::from_value(json!({"apiVersion": "demo.example.com/v1", "kind": "Widget", "metadata": {"name": "blue"}, "spec": {"color": "blue", "size": 2}})).expect("w");
    v1.create(&PostParams::default(), &w2)
        .await
        .expect("create via v1");
    let via_v1 = v1.get("red").await.expect("read v1beta1 object through v1");
    assert_eq!(
        via_v1.types.as_ref().map(|t| t.api_version.as_str()),
        Some("demo.example.com/v1")
    );
    let via_beta = beta
        .get("blue")
        .await
        .expect("read v1 object through v1beta1");
    assert_eq!(
        via_beta.types.as_ref().map(|t| t.api_version.as_str()),
        Some("demo.example.com/v1beta1")
    );
    assert_eq!(
        beta.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        2
    );

    // selectableFields: .spec.color selects on v1; not declared on v1beta1.
    let reds = v1
        .list(&ListParams::default().fields("spec.color=red"))
        .await
        .expect("field selector");
    assert_eq!(
        reds.items
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect::<Vec<_>>(),
        vec!["red"]
    );
    let e = beta
        .list(&ListParams::default().fields("spec.color=red"))
        .await
        .expect_err("not selectable on v1beta1");
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 400),
        "{e:?}"
    );
}
