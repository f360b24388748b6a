//! Shared helpers: an in-process API server with the built-in controllers
//! running against it.

#![allow(dead_code, missing_docs)]

use std::future::Future;
use std::time::{Duration, Instant};

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

/// Poll `f` until it returns true, panicking with `what` after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if f().await {
            return;
        }
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

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
