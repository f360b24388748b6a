//! `kubeforge authz webhook`: kubeforge's access policies served to a real
//! cluster as a Kubernetes authorization webhook (kube-apiserver's
//! `--authorization-webhook-config-file`, or an `AuthorizationConfiguration`
//! `type: Webhook` entry before RBAC).
//!
//! It watches the cluster's AccessRoles, ClusterAccessRoles, AccessBindings,
//! ClusterAccessBindings and (for parents and role references naming them)
//! RBAC Roles and ClusterRoles, and answers each `SubjectAccessReview`
//! (`authorization.k8s.io/v1`, or `v1beta1`'s `group` field) POSTed to
//! `/authorize` as kube expects of a webhook: a Deny binding that matches
//! → `allowed: false, denied: true` (kube stops there); an Allow binding →
//! `allowed: true`; nothing → `allowed: false` without `denied`, no opinion,
//! so the next authorizer (RBAC) decides. The reason names the binding,
//! role, parents and rule. It serves only once every watch has listed, so
//! it never answers from a partial view. On `/validate` it is also the
//! validating admission webhook of the four policy kinds, refusing (422)
//! what the embedded server refuses.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use kubeforge_authz::access::{AccessAuthorizer, GROUP, SOURCE_ADDRESS_EXTRA, VERSION};
use kubeforge_authz::rbac::RbacPolicy;
use kubeforge_authz::{Attributes, Authorizer, Decision, UserInfo};
use kubeforge_runtime::webhook::{JsonFuture, JsonHandler, WebhookServer};
use serde_json::{Value, json};

/// The path reviews are POSTed to.
pub const PATH: &str = "/authorize";
/// The path of the validating admission webhook for the policy kinds.
pub const VALIDATE_PATH: &str = "/validate";

/// `kubeforge authz webhook` arguments.
#[derive(Args)]
pub struct WebhookArgs {
    /// Kubeconfig of the cluster whose policies are served (else
    /// $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// HTTPS listen address.
    #[arg(long, default_value = "127.0.0.1:9444")]
    listen: SocketAddr,
    /// Serving certificates (tls.crt, tls.key, ca.crt); development
    /// certificates are made here when missing.
    #[arg(long, default_value = ".kubeforge/authz-webhook-certs")]
    cert_dir: PathBuf,
    /// Extra names for the development certificate (the Service's DNS name
    /// in a cluster, e.g. kubeforge-authz.kubeforge-system.svc).
    #[arg(long = "host", value_name = "NAME")]
    hosts: Vec<String>,
}

/// The objects watched, by kind, keyed `namespace/name`.
#[derive(Default)]
struct View {
    objects: Mutex<BTreeMap<&'static str, BTreeMap<String, Value>>>,
    /// Bumped on every change.
    generation: AtomicU64,
    /// Watches that have listed once.
    synced: AtomicUsize,
    ready: tokio::sync::Notify,
    built: Mutex<Option<(u64, AccessAuthorizer)>>,
}

const WATCHES: usize = 6;

impl View {
    fn key(o: &Value) -> String {
        let m = |k: &str| {
            o.pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        format!("{}/{}", m("namespace"), m("name"))
    }

    fn set(&self, kind: &'static str, apply: impl FnOnce(&mut BTreeMap<String, Value>)) {
        let mut all = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        apply(all.entry(kind).or_default());
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The authorizer for the objects as of now.
    fn authorizer(&self) -> AccessAuthorizer {
        let want = self.generation.load(Ordering::Acquire);
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((g, z)) = built.as_ref()
            && *g == want
        {
            return z.clone();
        }
        let all = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        let typed = |kind: &str| -> Vec<Value> {
            all.get(kind)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default()
        };
        let roles: Vec<Role> = typed("Role")
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        let cluster_roles: Vec<ClusterRole> = typed("ClusterRole")
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        let rbac = RbacPolicy::build(&roles, &cluster_roles, &[], &[]);
        let objects = all
            .iter()
            .filter(|(k, _)| k.contains("Access"))
            .flat_map(|(k, m)| m.values().map(move |v| (*k, v)));
        let (policy, bad) = kubeforge_authz::access::policy::from_objects(objects, &rbac);
        for i in bad {
            tracing::warn!(kind = %i.kind, name = %i.name, namespace = %i.namespace, reason = %i.reason,
                "access policy does not pass its checks; it grants nothing");
        }
        let z = AccessAuthorizer::new(policy);
        *built = Some((want, z.clone()));
        z
    }
}

fn spawn_watch<K>(api: Api<K>, kind: &'static str, view: Arc<View>)
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Send
        + 'static,
{
    tokio::spawn(async move {
        let mut listed = false;
        let mut fresh: BTreeMap<String, Value> = BTreeMap::new();
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(ev) = stream.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(kind, error = %e, "watch failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            };
            let value = |o: &K| serde_json::to_value(o).ok();
            match ev {
                watcher::Event::Init => fresh.clear(),
                watcher::Event::InitApply(o) => {
                    if let Some(v) = value(&o) {
                        fresh.insert(View::key(&v), v);
                    }
                }
                watcher::Event::InitDone => {
                    let all = std::mem::take(&mut fresh);
                    view.set(kind, |m| *m = all);
                    if !listed {
                        listed = true;
                        view.synced.fetch_add(1, Ordering::AcqRel);
                        view.ready.notify_waiters();
                    }
                }
                watcher::Event::Apply(o) => {
                    if let Some(v) = value(&o) {
                        view.set(kind, |m| {
                            m.insert(View::key(&v), v);
                        });
                    }
                }
                watcher::Event::Delete(o) => {
                    if let Some(v) = value(&o) {
                        view.set(kind, |m| {
                            m.remove(&View::key(&v));
                        });
                    }
                }
            }
        }
    });
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

struct Handler(Arc<View>);

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The attributes a SubjectAccessReview (v1, or v1beta1's `group`) asks
/// about, or why it cannot be read.
pub fn review_attributes(review: &Value) -> Result<Attributes, String> {
    let spec = review
        .get("spec")
        .ok_or("the SubjectAccessReview has no spec")?;
    let text = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut groups = strings(spec.get("groups"));
    if groups.is_empty() {
        groups = strings(spec.get("group"));
    }
    let mut user = UserInfo::new(&text(spec, "user"), groups);
    user.uid = text(spec, "uid");
    let mut a = if let Some(r) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        Attributes::resource(
            user,
            &text(r, "verb"),
            &text(r, "namespace"),
            &text(r, "group"),
            &text(r, "version"),
            &text(r, "resource"),
            &text(r, "subresource"),
            &text(r, "name"),
        )
    } else if let Some(n) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        Attributes::non_resource(user, &text(n, "verb"), &text(n, "path"))
    } else {
        return Err(
            "the SubjectAccessReview has neither resourceAttributes nor nonResourceAttributes"
                .into(),
        );
    };
    a.source = spec
        .get("extra")
        .and_then(|e| e.get(SOURCE_ADDRESS_EXTRA))
        .and_then(|v| v.get(0))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok());
    Ok(a)
}

/// The answer kube-apiserver reads.
pub fn review_answer(review: &Value, d: &Decision) -> Value {
    let mut status = json!({"allowed": d.allowed()});
    if matches!(d, Decision::Deny { .. }) {
        status["denied"] = json!(true);
    }
    if !d.reason().is_empty() {
        status["reason"] = json!(d.reason());
    }
    json!({
        "apiVersion": review.get("apiVersion").cloned().unwrap_or(json!("authorization.k8s.io/v1")),
        "kind": "SubjectAccessReview",
        "status": status,
    })
}

impl JsonHandler for Handler {
    fn answer<'a>(&'a self, body: &'a [u8]) -> JsonFuture<'a> {
        Box::pin(async move {
            let review: Value =
                serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
            if review.get("kind").and_then(Value::as_str) != Some("SubjectAccessReview") {
                return Err("expected a SubjectAccessReview".into());
            }
            let a = review_attributes(&review)?;
            let d = self.0.authorizer().authorize(&a);
            Ok(review_answer(&review, &d))
        })
    }
}

/// The validating admission webhook for the four policy kinds: what the
/// embedded server refuses with a 422 (field errors, unknown time zones,
/// bad CIDRs, parents forming a cycle with the roles now in the cluster),
/// refused on a real cluster too — the CRD schema alone cannot see them.
struct PolicyValidator(Arc<View>);

impl PolicyValidator {
    fn answer(&self, body: &[u8]) -> Result<kube::core::admission::AdmissionResponse, String> {
        let req = kubeforge_runtime::webhook::parse_review::<DynamicObject>(body)?;
        let allowed = kube::core::admission::AdmissionResponse::from(&req);
        let Some(obj) = req.object.as_ref() else {
            return Ok(allowed);
        };
        let obj = serde_json::to_value(obj).map_err(|e| format!("reading the object: {e}"))?;
        let kind = req.kind.kind.as_str();
        let roles: Vec<kubeforge_authz::access::RoleObject> = if kind.ends_with("Role") {
            let all = self.0.objects.lock().unwrap_or_else(|p| p.into_inner());
            [("AccessRole", true), ("ClusterAccessRole", false)]
                .iter()
                .flat_map(|(k, namespaced)| {
                    all.get(k)
                        .into_iter()
                        .flat_map(|m| m.values())
                        .filter_map(|v| {
                            kubeforge_authz::access::RoleObject::from_value(v, *namespaced).ok()
                        })
                        .collect::<Vec<_>>()
                })
                .collect()
        } else {
            Vec::new()
        };
        let causes = kubeforge_authz::access::check::check(kind, &obj, &roles);
        if causes.is_empty() {
            return Ok(allowed);
        }
        let e = kubeforge_apiserver::error::ApiError::invalid(
            GROUP,
            kind,
            &req.name,
            causes.into_iter().map(Into::into).collect(),
        );
        let mut r = allowed.deny(e.message.clone());
        r.result.code = e.code;
        r.result.reason = e.reason.to_string();
        r.result.details = Some(kube::core::response::StatusDetails {
            name: req.name.clone(),
            group: GROUP.to_string(),
            kind: kind.to_string(),
            causes: e
                .details
                .causes
                .iter()
                .map(|c| kube::core::response::StatusCause {
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                    field: c.field.clone(),
                })
                .collect(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        Ok(r)
    }
}

impl kubeforge_runtime::webhook::ReviewHandler for PolicyValidator {
    fn review<'a>(&'a self, body: &'a [u8]) -> kubeforge_runtime::webhook::ReviewFuture<'a> {
        Box::pin(std::future::ready(self.answer(body)))
    }
}

/// Run the webhook until interrupted.
pub async fn run(a: WebhookArgs) -> Result<()> {
    let client = crate::kubeclient::client(a.kubeconfig.as_deref()).await?;
    let view = Arc::new(View::default());
    spawn_watch(Api::<Role>::all(client.clone()), "Role", view.clone());
    spawn_watch(
        Api::<ClusterRole>::all(client.clone()),
        "ClusterRole",
        view.clone(),
    );
    for (kind, plural) in [
        ("AccessRole", "accessroles"),
        ("ClusterAccessRole", "clusteraccessroles"),
        ("AccessBinding", "accessbindings"),
        ("ClusterAccessBinding", "clusteraccessbindings"),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind, plural));
        spawn_watch(api, kind, view.clone());
    }
    // Serve only from a complete view.
    let waiting = async {
        loop {
            let notified = view.ready.notified();
            if view.synced.load(Ordering::Acquire) == WATCHES {
                return;
            }
            notified.await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), waiting)
        .await
        .context("the policies did not list within 60 s (are the authz.kubeforge.dev CRDs installed? kubectl apply -f config/authz/crds.yaml; may this identity list them and RBAC roles?)")?;
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let ip = a.listen.ip().to_string();
    if !hosts.contains(&ip) && !a.listen.ip().is_unspecified() {
        hosts.push(ip);
    }
    hosts.extend(a.hosts.iter().cloned());
    let server = WebhookServer::builder()
        .addr(a.listen)
        .cert_dir(a.cert_dir.clone())
        .hosts(hosts)
        .json_handler(PATH, Arc::new(Handler(view.clone())))
        .handler(VALIDATE_PATH, Arc::new(PolicyValidator(view)))
        .bind()
        .await
        .with_context(|| format!("binding {} (is the port free?)", a.listen))?;
    println!(
        "kubeforge authz webhook ready on https://{}{PATH} (CA: {})",
        server.local_addr(),
        a.cert_dir.join("ca.crt").display()
    );
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    server.run(shutdown).await.context("serving the webhook")?;
    Ok(())
}
