//! The policy server: the engine behind two webhooks (`/mutate`,
//! `/validate`) on a [`kubeforge_runtime::webhook::WebhookServer`], fed by
//! watches of `AdmissionPolicy` objects (hot-applied, each one's `Ready`
//! condition written back), namespaces and signature ConfigMaps (from one
//! namespace); and the registration of its webhook configurations (and
//! CRD) in a cluster.
//!
//! Until every watch has listed once, each review is answered with an
//! error (HTTP 400 naming what has not synced), so the API server applies
//! the webhook's `failurePolicy` instead of hearing a verdict from a
//! partial view.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::core::admission::AdmissionRequest;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{CustomResourceExt, ResourceExt};
use kubeforge_runtime::webhook::{
    ReviewFuture, ReviewHandler, WebhookServer, json_patch_between, parse_review, respond,
};
use serde_json::json;

use crate::cache::PolicyCache;
use crate::engine::{AuditRecord, ClusterView, Engine, inputs};
use crate::policy::{AdmissionPolicy, AuditEntry};
use crate::signature::SIGNATURES_LABEL;

/// Name of both webhook configurations.
pub const CONFIGURATION_NAME: &str = "kubeforge-policy";
/// The mutating webhook's name.
pub const MUTATING_WEBHOOK: &str = "mutate.policy.kubeforge.dev";
/// The validating webhook's name.
pub const VALIDATING_WEBHOOK: &str = "validate.policy.kubeforge.dev";
/// Field manager of everything the server writes.
const MANAGER: &str = "kubeforge-webhook";
/// Audit entries kept per policy.
const AUDIT_KEPT: usize = 50;

/// Why the policy server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The webhook server failed.
    #[error(transparent)]
    Webhook(#[from] kubeforge_runtime::webhook::WebhookError),
    /// A call to the cluster failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done.
        what: String,
        /// The error.
        source: kube::Error,
    },
}

fn kube_err(what: &str) -> impl FnOnce(kube::Error) -> ServerError + '_ {
    move |source| ServerError::Kube {
        what: what.to_string(),
        source,
    }
}

/// How to run the policy server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Listen address (default `127.0.0.1:9443`).
    pub listen: SocketAddr,
    /// Certificate directory (made with development certificates when empty).
    pub cert_dir: PathBuf,
    /// The server's own namespace, never subject to its policies.
    pub namespace: String,
    /// Register the CRD and the webhook configurations in the cluster.
    pub register: bool,
    /// Register with `failurePolicy: Ignore` (emergencies).
    pub fail_open: bool,
    /// Host the API server reaches the webhook on (default: the listen IP).
    pub url_host: Option<String>,
    /// The only namespace signature ConfigMaps are read from (default: the
    /// server's own `namespace`), so only who may write there can add
    /// signatures, or slow reviews down with many of them.
    pub signatures_namespace: Option<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 9443)),
            cert_dir: PathBuf::from("webhook-certs"),
            namespace: "kubeforge-system".into(),
            register: false,
            fail_open: false,
            url_host: None,
            signatures_namespace: None,
        }
    }
}

/// The part of a Pod the validating rules read: metadata, and each
/// container's and init container's name, image and resources. The
/// validating webhook decodes reviews into this instead of a whole
/// `k8s_openapi` Pod, and serde skips the rest of the object without
/// allocating: decoding the full Pod was the largest cost of the policy
/// path (see the admission section of docs/BENCHMARKS.md). A validating
/// rule that reads another field must add it here; the test
/// `validated_pods_give_the_verdicts_of_full_pods` compares both decodes.
#[derive(Clone, Debug, Default, serde::Deserialize)]
struct ValidatedPod {
    #[serde(default)]
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    spec: Option<ValidatedSpec>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ValidatedSpec {
    #[serde(default)]
    containers: Vec<ValidatedContainer>,
    #[serde(default)]
    init_containers: Option<Vec<ValidatedContainer>>,
    #[serde(default)]
    ephemeral_containers: Option<Vec<ValidatedContainer>>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
struct ValidatedContainer {
    name: String,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,
}

impl ValidatedContainer {
    fn into_container(self) -> k8s_openapi::api::core::v1::Container {
        k8s_openapi::api::core::v1::Container {
            name: self.name,
            image: self.image,
            resources: self.resources,
            ..Default::default()
        }
    }
}

impl ValidatedPod {
    fn into_pod(self) -> Pod {
        Pod {
            metadata: self.metadata,
            spec: self.spec.map(|s| k8s_openapi::api::core::v1::PodSpec {
                containers: s
                    .containers
                    .into_iter()
                    .map(ValidatedContainer::into_container)
                    .collect(),
                init_containers: s.init_containers.map(|c| {
                    c.into_iter()
                        .map(ValidatedContainer::into_container)
                        .collect()
                }),
                ephemeral_containers: s.ephemeral_containers.map(|c| {
                    c.into_iter()
                        .map(|c| k8s_openapi::api::core::v1::EphemeralContainer {
                            name: c.name,
                            image: c.image,
                            resources: c.resources,
                            ..Default::default()
                        })
                        .collect()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }
}

impl kube::Resource for ValidatedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.metadata
    }
}

/// Parse a review for the validating rules (see [`ValidatedPod`]).
fn parse_for_validation(body: &[u8]) -> Result<AdmissionRequest<Pod>, String> {
    let r = parse_review::<ValidatedPod>(body)?;
    Ok(AdmissionRequest {
        types: r.types,
        uid: r.uid,
        kind: r.kind,
        resource: r.resource,
        sub_resource: r.sub_resource,
        request_kind: r.request_kind,
        request_resource: r.request_resource,
        request_sub_resource: r.request_sub_resource,
        name: r.name,
        namespace: r.namespace,
        operation: r.operation,
        user_info: r.user_info,
        object: r.object.map(ValidatedPod::into_pod),
        old_object: r.old_object.map(ValidatedPod::into_pod),
        dry_run: r.dry_run,
        options: r.options,
    })
}

/// The mutating or validating side of the engine as a webhook handler.
pub struct PolicyHandler {
    engine: Arc<Engine>,
    mutating: bool,
}

impl PolicyHandler {
    /// The validating handler.
    pub fn validating(engine: Arc<Engine>) -> Arc<PolicyHandler> {
        Arc::new(PolicyHandler {
            engine,
            mutating: false,
        })
    }

    /// The mutating handler.
    pub fn mutating(engine: Arc<Engine>) -> Arc<PolicyHandler> {
        Arc::new(PolicyHandler {
            engine,
            mutating: true,
        })
    }
}

impl ReviewHandler for PolicyHandler {
    fn review<'a>(&'a self, body: &'a [u8]) -> ReviewFuture<'a> {
        Box::pin(async move {
            // Not a verdict: an error, so the API server applies failurePolicy.
            if let Some(why) = self.engine.not_ready() {
                return Err(why);
            }
            if !self.mutating {
                let req = parse_for_validation(body)?;
                let v = self.engine.validate(&req).await;
                return Ok(respond(&req, v));
            }
            let req = parse_review::<Pod>(body)?;
            let Some(original) = req.object.clone() else {
                return Ok(respond(&req, kubeforge_runtime::webhook::Verdict::allow()));
            };
            let mut pod = original.clone();
            let v = self.engine.mutate(&req, &mut pod).await;
            let allowed = v.allowed;
            let mut resp = respond(&req, v);
            if allowed {
                let patch = json_patch_between(&original, &pod)?;
                if !patch.0.is_empty() {
                    resp = resp
                        .with_patch(patch)
                        .map_err(|e| format!("encoding the patch: {e}"))?;
                }
            }
            Ok(resp)
        })
    }
}

/// The webhook configurations for a server at `base_url` (no trailing
/// slash) trusting `ca_bundle` (PEM).
pub fn webhook_configurations(
    base_url: &str,
    ca_bundle: &str,
    namespace: &str,
    fail_open: bool,
) -> (serde_json::Value, serde_json::Value) {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_bundle);
    let policy = if fail_open { "Ignore" } else { "Fail" };
    let ns_selector = json!({"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn",
        "values": ["kube-system", namespace]}]});
    let hook = |name: &str, path: &str, ops: &[&str], resources: &[&str]| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": policy,
            "timeoutSeconds": 5,
            "clientConfig": {"url": format!("{base_url}{path}"), "caBundle": ca},
            "rules": [{"operations": ops, "apiGroups": [""], "apiVersions": ["v1"], "resources": resources, "scope": "Namespaced"}],
            "namespaceSelector": ns_selector,
        })
    };
    let mut m = hook(MUTATING_WEBHOOK, "/mutate", &["CREATE"], &["pods"]);
    m["reinvocationPolicy"] = json!("IfNeeded");
    let mutating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [m],
    });
    let validating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        // Ephemeral containers (`kubectl debug`) arrive through their subresource.
        "webhooks": [hook(
            VALIDATING_WEBHOOK,
            "/validate",
            &["CREATE", "UPDATE"],
            &["pods", "pods/ephemeralcontainers"],
        )],
    });
    (mutating, validating)
}

/// Create or update the AdmissionPolicy CRD.
pub async fn install_crd(client: &kube::Client) -> Result<(), ServerError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = AdmissionPolicy::crd();
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .map_err(kube_err("installing the AdmissionPolicy CRD"))?;
    Ok(())
}

/// Register both webhook configurations.
pub async fn register(
    client: &kube::Client,
    base_url: &str,
    ca_bundle: &str,
    namespace: &str,
    fail_open: bool,
) -> Result<(), ServerError> {
    let (m, v) = webhook_configurations(base_url, ca_bundle, namespace, fail_open);
    let pp = PatchParams::apply(MANAGER).force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(CONFIGURATION_NAME, &pp, &Patch::Apply(&m))
        .await
        .map_err(kube_err("registering the MutatingWebhookConfiguration"))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(CONFIGURATION_NAME, &pp, &Patch::Apply(&v))
        .await
        .map_err(kube_err("registering the ValidatingWebhookConfiguration"))?;
    Ok(())
}

/// Watch policies: feed every watch event to the [`PolicyCache`], hand
/// what is in effect to the engine, mark the engine synced after the first
/// complete list, and write each policy's `Ready` condition and
/// `status.effective` when they change.
async fn watch_policies(client: kube::Client, engine: Arc<Engine>) {
    let api: Api<AdmissionPolicy> = Api::all(client);
    let mut cache = PolicyCache::default();
    let mut stream =
        std::pin::pin!(watcher(api.clone(), watcher::Config::default()).default_backoff());
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(error = %e, "watching AdmissionPolicies");
                continue;
            }
        };
        let changed = cache.apply(ev);
        if changed.policies && cache.synced() {
            engine.set_compiled(cache.effective());
            engine.synced(inputs::POLICIES);
        }
        for name in changed.statuses {
            write_status(&api, &cache, &name).await;
        }
    }
}

/// Write `name`'s Ready condition and effective version when they differ
/// from what it reports.
async fn write_status(api: &Api<AdmissionPolicy>, cache: &PolicyCache, name: &str) {
    let (Some(policy), Some(wanted)) = (cache.policy(name), cache.wanted_status(name)) else {
        return;
    };
    let status = policy.status.as_ref();
    let current = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    let current_effective = status.and_then(|s| s.effective.as_ref());
    if current == Some(&wanted.condition) && current_effective == wanted.effective.as_ref() {
        return;
    }
    let patch =
        json!({"status": {"conditions": [wanted.condition], "effective": wanted.effective}});
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(policy = %name, error = %e, "writing the policy status");
    }
}

/// Write audit records into the policies' status (the policy report).
async fn write_audits(
    client: kube::Client,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<AuditRecord>,
) {
    let api: Api<AdmissionPolicy> = Api::all(client);
    let mut kept: HashMap<String, (VecDeque<AuditEntry>, u64)> = HashMap::new();
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut touched = BTreeMap::new();
        for r in batch {
            let e = kept.entry(r.policy.clone()).or_default();
            e.0.push_back(AuditEntry {
                time: jiff::Timestamp::now().to_string(),
                namespace: r.namespace,
                name: r.name,
                operation: r.operation,
                message: r.message,
            });
            while e.0.len() > AUDIT_KEPT {
                e.0.pop_front();
            }
            e.1 += 1;
            touched.insert(r.policy, ());
        }
        for policy in touched.keys() {
            let Some((entries, total)) = kept.get(policy) else {
                continue;
            };
            let patch = json!({"status": {"audit": entries, "auditTotal": total}});
            if let Err(e) = api
                .patch_status(policy, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(%policy, error = %e, "writing audit results");
            }
        }
    }
}

/// Tell `engine` that `input` has synced once `store` has listed.
fn mark_when_ready<K>(store: reflector::Store<K>, engine: Arc<Engine>, input: u8)
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    tokio::spawn(async move {
        if store.wait_until_ready().await.is_ok() {
            engine.synced(input);
        }
    });
}

fn spawn_cache<K>(api: Api<K>, config: watcher::Config) -> reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Err(e) = ev {
                tracing::debug!(error = %e, "cache watch");
            }
        }
    });
    reader
}

/// A bound policy server: [`PolicyServer::run`] serves it.
pub struct PolicyServer {
    server: WebhookServer,
    /// The engine (its policies follow the cluster's AdmissionPolicies).
    pub engine: Arc<Engine>,
}

impl PolicyServer {
    /// Start the caches and watches, bind the webhook server and (with
    /// `register`) install the CRD and the webhook configurations.
    pub async fn start(
        client: kube::Client,
        opts: &ServerOptions,
    ) -> Result<PolicyServer, ServerError> {
        if opts.register {
            install_crd(&client).await?;
        }
        let signatures_ns = opts
            .signatures_namespace
            .clone()
            .unwrap_or_else(|| opts.namespace.clone());
        let namespaces = spawn_cache(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default(),
        );
        let signatures = spawn_cache(
            Api::<ConfigMap>::namespaced(client.clone(), &signatures_ns),
            watcher::Config::default().labels(&format!("{SIGNATURES_LABEL}=true")),
        );
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let engine = Arc::new(
            Engine::new(
                vec!["kube-system".into(), opts.namespace.clone()],
                ClusterView {
                    namespaces: Some(namespaces.clone()),
                    signatures: Some(signatures.clone()),
                    client: Some(client.clone()),
                },
            )
            .with_audit(tx)
            .waiting_for(inputs::POLICIES | inputs::NAMESPACES | inputs::SIGNATURES),
        );
        mark_when_ready(namespaces, engine.clone(), inputs::NAMESPACES);
        mark_when_ready(signatures, engine.clone(), inputs::SIGNATURES);
        tokio::spawn(watch_policies(client.clone(), engine.clone()));
        tokio::spawn(write_audits(client.clone(), rx));
        // Reviews are refused until everything has synced; give a fresh
        // start a moment so it usually serves ready.
        let wait = std::time::Duration::from_secs(10);
        let _ = tokio::time::timeout(wait, engine.until_ready()).await;
        let host = opts
            .url_host
            .clone()
            .unwrap_or_else(|| opts.listen.ip().to_string());
        let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        if !hosts.contains(&host) {
            hosts.push(host.clone());
        }
        hosts.push(format!("kubeforge-webhook.{}.svc", opts.namespace));
        let server = WebhookServer::builder()
            .addr(opts.listen)
            .cert_dir(opts.cert_dir.clone())
            .hosts(hosts)
            .handler("/mutate", PolicyHandler::mutating(engine.clone()))
            .handler("/validate", PolicyHandler::validating(engine.clone()))
            .bind()
            .await?;
        if opts.register {
            let port = server.local_addr().port();
            let base = if host.contains(':') {
                format!("https://[{host}]:{port}")
            } else {
                format!("https://{host}:{port}")
            };
            register(
                &client,
                &base,
                server.ca_bundle(),
                &opts.namespace,
                opts.fail_open,
            )
            .await?;
        }
        Ok(PolicyServer { server, engine })
    }

    /// The webhook server's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The CA bundle (PEM) webhook configurations must trust.
    pub fn ca_bundle(&self) -> &str {
        self.server.ca_bundle()
    }

    /// Why the server refuses reviews yet (its caches have not all
    /// synced), or `None` when it is ready: what a readiness probe reports.
    pub fn not_ready(&self) -> Option<String> {
        self.engine.not_ready()
    }

    /// The webhook metrics.
    pub fn metrics(&self) -> kubeforge_runtime::webhook::MetricsHandle {
        self.server.metrics()
    }

    /// Serve until `shutdown` resolves.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        Ok(self.server.run(shutdown).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterView, compile};

    fn review(pod: serde_json::Value, op: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "p", "namespace": "prod", "operation": op, "userInfo": {"username": "me"},
                "object": pod.clone(), "oldObject": if op == "UPDATE" { pod } else { json!(null) }}
        }))
        .expect("json")
    }

    #[tokio::test]
    async fn validated_pods_give_the_verdicts_of_full_pods() {
        let spec = serde_json::from_value(json!({
            "requireResources": {},
            "images": {"disallowLatest": true, "allowedRegistries": ["docker.io", "registry.k8s.io"]},
            "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}
        }))
        .expect("spec");
        let warn =
            serde_json::from_value(json!({"mode": "Warn", "images": {"disallowLatest": true}}))
                .expect("spec");
        let engine = Engine::new(vec!["kube-system".into()], ClusterView::default());
        engine.set_policies(vec![
            compile("enforce", &spec).expect("compile"),
            compile("warn", &warn).expect("compile"),
        ]);
        let limited = json!({"requests": {"cpu": "1", "memory": "1Mi"}, "limits": {"cpu": "1", "memory": "1Mi"}});
        let pods = [
            json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "a", "image": "nginx:1.27", "resources": limited}]}}),
            json!({"metadata": {"name": "b"}, "spec": {"containers": [{"name": "b", "image": "nginx", "env": [{"name": "X", "value": "1"}]}],
                "tolerations": [{"key": "k", "operator": "Exists"}], "nodeSelector": {"a": "b"}}}),
            json!({"metadata": {"name": "c", "labels": {"skip": "yes"}}, "spec": {"containers": [{"name": "c", "image": "quay.io/x:latest"}]}}),
            json!({"metadata": {"generateName": "d-"}, "spec": {
                "initContainers": [{"name": "init", "image": "ghcr.io/i:1", "resources": {"limits": {"cpu": "1"}}}],
                "containers": [{"name": "d", "image": "registry.k8s.io/pause:3.9", "resources": limited}]}}),
            json!({"metadata": {"name": "e"}}),
        ];
        let mut denied = 0;
        for pod in pods {
            for op in ["CREATE", "UPDATE"] {
                let body = review(pod.clone(), op);
                let full = parse_review::<Pod>(&body).expect("full decode");
                let lean = parse_for_validation(&body).expect("lean decode");
                assert_eq!(
                    lean.object.as_ref().map(|p| &p.metadata),
                    full.object.as_ref().map(|p| &p.metadata)
                );
                let (a, b) = (engine.validate(&full).await, engine.validate(&lean).await);
                assert_eq!(a, b, "{pod}");
                denied += usize::from(!a.allowed);
            }
        }
        assert_eq!(denied, 4, "pods b and d are denied, on create and update");
        assert!(parse_for_validation(b"{\"kind\": 1}").is_err());
    }
}
