//! Shared helpers: an in-process API server with the built-in controllers
//! running against it.

#![allow(dead_code, missing_docs)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, PostParams};
use kubeforge_apiserver::ApiServer;
use kubeforge_controllers::Builtin;
use serde_json::{Value, json};

pub struct Env {
    pub server: ApiServer,
    pub client: Client,
    pub controllers: Builtin,
}

/// A memory-backed server with the controllers declared and running.
pub async fn start() -> Env {
    let server = ApiServer::in_memory().await;
    server.set_controllers_running(true);
    let client = server.client();
    let controllers = kubeforge_controllers::start_builtin(client.clone());
    tokio::time::timeout(Duration::from_secs(20), controllers.wait_synced())
        .await
        .expect("controllers synced");
    Env {
        server,
        client,
        controllers,
    }
}

pub use kubeforge_testenv::eventually;

pub fn owner_ref(api_version: &str, kind: &str, name: &str, uid: &str, block: bool) -> Value {
    let mut r = json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid});
    if block {
        r["blockOwnerDeletion"] = json!(true);
    }
    r
}

pub async fn configmap(client: &Client, ns: &str, name: &str, owners: Vec<Value>) -> ConfigMap {
    configmap_with(client, ns, name, owners, vec![]).await
}

pub async fn configmap_with(
    client: &Client,
    ns: &str,
    name: &str,
    owners: Vec<Value>,
    finalizers: Vec<&str>,
) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut meta = json!({"name": name});
    if !owners.is_empty() {
        meta["ownerReferences"] = json!(owners);
    }
    if !finalizers.is_empty() {
        meta["finalizers"] = json!(finalizers);
    }
    let cm: ConfigMap = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": "b"}}),
    )
    .expect("configmap");
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create configmap")
}

pub async fn pod(client: &Client, ns: &str, name: &str, owners: Vec<Value>) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut meta = json!({"name": name});
    if !owners.is_empty() {
        meta["ownerReferences"] = json!(owners);
    }
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    }))
    .expect("pod");
    api.create(&PostParams::default(), &p)
        .await
        .expect("create pod")
}

pub fn uid<K: kube::Resource>(o: &K) -> String {
    o.meta().uid.clone().expect("uid")
}

/// The CronTab CRD (namespaced) and its ApiResource.
pub async fn crontab_crd(client: &Client) -> ApiResource {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {"group": "stable.example.com", "scope": "Namespaced",
            "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"cronSpec": {"type": "string"}}}}}}}]}
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    ApiResource {
        group: "stable.example.com".into(),
        version: "v1".into(),
        api_version: "stable.example.com/v1".into(),
        kind: "CronTab".into(),
        plural: "crontabs".into(),
    }
}

/// A CRD `{plural}.{group}` of kind `kind` served at `versions` (the first
/// is the storage version), namespaced or cluster-scoped, with an
/// open schema. Returns once the server serves it at every version.
pub async fn crd(
    client: &Client,
    group: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    versions: &[&str],
) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let vs: Vec<Value> = versions
        .iter()
        .enumerate()
        .map(|(i, v)| {
            json!({"name": v, "served": true, "storage": i == 0,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}})
        })
        .collect();
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": vs}
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    for v in versions {
        let path = format!("{group}/{v}");
        eventually(
            &format!("{plural} served at {path}"),
            Duration::from_secs(10),
            || async {
                client
                    .list_api_group_resources(&path)
                    .await
                    .is_ok_and(|l| l.resources.iter().any(|r| r.name == plural))
            },
        )
        .await;
    }
}

/// The ApiResource of a custom resource.
pub fn custom(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Create a custom object `name` (in `ns`, or cluster-scoped when `None`).
pub async fn custom_object(
    client: &Client,
    ar: &ApiResource,
    ns: Option<&str>,
    name: &str,
    owners: Vec<Value>,
) -> kube::api::DynamicObject {
    let api: Api<kube::api::DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let mut meta = json!({"name": name});
    if !owners.is_empty() {
        meta["ownerReferences"] = json!(owners);
    }
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": ar.api_version, "kind": ar.kind, "metadata": meta, "spec": {"size": 1}
    }))
    .expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create custom object")
}

/// Create namespace `name`.
pub async fn namespace(client: &Client, name: &str) {
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    nss.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// The core/v1 Events about `name` in `ns` with `reason`, as
/// (type, message) pairs.
pub async fn events_about(
    client: &Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.type_.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// A client of `server` to which API group `group` is unavailable (503
/// everywhere under `/apis/{group}`, as kube-aggregator answers for an
/// APIService whose backend is down), and the fault handle to clear it.
pub fn with_unavailable_group(
    server: &ApiServer,
    group: &str,
) -> (kubeforge_testenv::FaultHandle, Client) {
    use tower::Layer;
    let faults = kubeforge_testenv::FaultHandle::new(
        kubeforge_testenv::Faults::new().unavailable_groups([group]),
    );
    let client = Client::new(faults.layer().layer(server.service()), "default");
    (faults, client)
}
