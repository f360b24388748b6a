//! The objects a real cluster always has, kept in place by the server
//! itself as kube-apiserver's controllers do:
//!
//! - Service `default/kubernetes` (ClusterIP `10.96.0.1`, the first address
//!   of the service range; port 443 `https` to the server's port), its
//!   Endpoints and its EndpointSlice `kubernetes` pointing at the address
//!   the server listens on — kube's "bootstrap controller"
//!   (`pkg/controlplane/controller/kubernetesservice`) and endpoint
//!   reconciler;
//! - an `apiregistration.k8s.io/v1` APIService per served group-version
//!   (`v1.`, `v1.apps`, …), Local and Available, created and removed as
//!   CRD versions come and go — the aggregator's autoregister and
//!   crdregistration controllers.
//!
//! Namespace `default` is recreated when missing, as kube's controller does.
//! Everything is reconciled at start (before [`crate::ApiServer::new`]
//! returns), whenever the registry changes or the listen address is set,
//! and every [`RESYNC`] (so a deleted or edited object comes back, as kube's
//! 10 s loop brings it back). The loop holds the server weakly and ends with
//! it.

use std::sync::Weak;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::HeaderMap;
use serde_json::{Value, json};

use crate::codec::Accept;
use crate::context::{Ctx, Sub};
use crate::error::{ApiError, ApiResult};
use crate::object::{self, meta_str};
use crate::request::Query;
use crate::rest;
use crate::server::{ApiServer, Inner};

/// How often everything is checked even when nothing said it changed.
pub const RESYNC: Duration = Duration::from_secs(1);

/// The ClusterIP of `default/kubernetes`: the first address of the service
/// range (10.96.0.0/12) that `strategy.rs` allocates from.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The service range ClusterIPs are allocated from and must lie in.
pub const SERVICE_CIDR: &str = "10.96.0.0/12";

/// The label kube's autoregister controller puts on the APIServices it owns.
const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// The field manager the server's own writes are recorded under.
const MANAGER: &str = "kube-apiserver";

/// The server-side state of the loop and of what it reports.
#[derive(Default)]
pub(crate) struct State {
    /// Wakes the loop (the listen address changed); shared with the loop,
    /// which must not hold the server while it waits.
    wake: std::sync::Arc<tokio::sync::Notify>,
    /// Whether a scheduler was declared running (`componentstatuses`).
    pub scheduler: AtomicBool,
}

impl ApiServer {
    /// Declare that a scheduler runs against this server: `componentstatuses`
    /// then reports `scheduler` Healthy (kube-apiserver probes
    /// kube-scheduler's `/healthz`; kubeforge runs it in-process).
    pub fn set_scheduler_running(&self, on: bool) {
        self.inner.bootstrap.scheduler.store(on, Ordering::Relaxed);
    }

    /// Whether a scheduler was declared running.
    pub fn scheduler_running(&self) -> bool {
        self.inner.bootstrap.scheduler.load(Ordering::Relaxed)
    }
}

/// Reconcile once, then keep reconciling in the background.
pub(crate) async fn start(server: &ApiServer) -> ApiResult<()> {
    reconcile(server).await?;
    let weak = std::sync::Arc::downgrade(&server.inner);
    let changes = server.registry().subscribe();
    let wake = server.inner.bootstrap.wake.clone();
    tokio::spawn(run(weak, changes, wake));
    Ok(())
}

/// The listen address changed: the Service and endpoints follow.
pub(crate) fn advertise_changed(server: &ApiServer) {
    server.inner.bootstrap.wake.notify_one();
}

async fn run(
    weak: Weak<Inner>,
    mut changes: tokio::sync::watch::Receiver<u64>,
    wake: std::sync::Arc<tokio::sync::Notify>,
) {
    let mut tick = tokio::time::interval(RESYNC);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        // Wait without holding the server, so it can go away meanwhile.
        tokio::select! {
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
            }
            () = wake.notified() => {}
            _ = tick.tick() => {}
        }
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let server = ApiServer { inner };
        match reconcile(&server).await {
            Ok(()) => {}
            // The store is closing.
            Err(e) if e.code == 503 => return,
            // `default` is being deleted: kube waits for it too.
            Err(e) if e.code == 403 => {
                tracing::debug!(error = %e, "the kubernetes service waits for namespace default");
            }
            Err(e) => {
                tracing::warn!(error = %e, "reconciling the kubernetes service and APIServices");
            }
        }
    }
}

async fn reconcile(server: &ApiServer) -> ApiResult<()> {
    reconcile_kubernetes_service(server).await?;
    reconcile_apiservices(server).await?;
    if server.inner.access.rbac_enabled() {
        crate::access_policy::ensure_crds(server).await?;
        crate::access_policy::reconcile_status(server).await?;
    }
    Ok(())
}

/// A context for the server's own requests to one resource.
pub(crate) fn ctx<'a>(
    server: &'a ApiServer,
    (group, version, plural): (&str, &str, &str),
    ns: Option<&str>,
) -> ApiResult<Ctx<'a>> {
    let def = server
        .registry()
        .get(group, version, plural)
        .ok_or_else(|| ApiError::internal(format!("{plural} are not registered")))?;
    Ok(Ctx {
        server,
        def,
        ns: ns.map(str::to_string),
        name: None,
        query: Query::parse(Some(&format!("fieldManager={MANAGER}"))),
        headers: HeaderMap::new(),
        accept: Accept::default(),
        warnings: Vec::new(),
        user: crate::authz::loopback_identity().0,
    })
}

impl ApiServer {
    /// The `host:port` the server says it is reached at (`/api`'s
    /// `serverAddressByClientCIDRs`, the `kubernetes` endpoints).
    pub(crate) fn advertised(&self) -> String {
        self.inner
            .advertise
            .read()
            .map(|a| a.clone())
            .unwrap_or_default()
    }
}

/// The address and port the server is reached at.
fn endpoint(server: &ApiServer) -> (String, u16) {
    match server.advertised().parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => ("127.0.0.1".into(), addr.port()),
        Ok(addr) => (addr.ip().to_string(), addr.port()),
        Err(_) => ("127.0.0.1".into(), 6443),
    }
}

async fn reconcile_kubernetes_service(server: &ApiServer) -> ApiResult<()> {
    // kube's bootstrap controller recreates `default` as well.
    rest::ensure_namespace(server, "default").await?;
    let (ip, port) = endpoint(server);
    let port_spec = json!({"name": "https", "port": 443, "protocol": "TCP", "targetPort": port});
    ensure(
        server,
        ("", "v1", "services"),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": {"component": "apiserver", "provider": "kubernetes"},
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": KUBERNETES_SERVICE_IP,
                "clusterIPs": [KUBERNETES_SERVICE_IP],
                "ports": [port_spec],
                "sessionAffinity": "None",
            },
        }),
        |live| {
            let ports_ok = live.pointer("/spec/ports") == Some(&json!([port_spec]));
            let type_ok = live.pointer("/spec/type") == Some(&json!("ClusterIP"));
            (!(ports_ok && type_ok)).then(|| {
                let mut o = live.clone();
                o["spec"]["ports"] = json!([port_spec]);
                o["spec"]["type"] = json!("ClusterIP");
                o
            })
        },
    )
    .await?;
    let subsets = json!([{
        "addresses": [{"ip": ip}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }]);
    ensure(
        server,
        ("", "v1", "endpoints"),
        json!({
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
            },
            "subsets": subsets,
        }),
        |live| {
            (live.get("subsets") != Some(&subsets)).then(|| {
                let mut o = live.clone();
                o["subsets"] = subsets.clone();
                o
            })
        },
    )
    .await?;
    let family = if ip.contains(':') { "IPv6" } else { "IPv4" };
    let endpoints = json!([{"addresses": [ip], "conditions": {"ready": true}}]);
    let ports = json!([{"name": "https", "port": port, "protocol": "TCP"}]);
    ensure(
        server,
        ("discovery.k8s.io", "v1", "endpointslices"),
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"},
            },
            "addressType": family,
            "endpoints": endpoints,
            "ports": ports,
        }),
        |live| {
            let label_ok = live.pointer("/metadata/labels/kubernetes.io~1service-name")
                == Some(&json!("kubernetes"));
            let ok = live.get("endpoints") == Some(&endpoints)
                && live.get("ports") == Some(&ports)
                && live.get("addressType") == Some(&json!(family));
            (!(ok && label_ok)).then(|| {
                let mut o = live.clone();
                o["endpoints"] = endpoints.clone();
                o["ports"] = ports.clone();
                o["addressType"] = json!(family);
                object::meta_mut(&mut o)
                    .entry("labels")
                    .or_insert_with(|| json!({}))["kubernetes.io/service-name"] =
                    json!("kubernetes");
                o
            })
        },
    )
    .await
}

/// Create `want` in `default` when missing; when present, write what
/// `fix(live)` returns (nothing when it returns `None`).
async fn ensure(
    server: &ApiServer,
    gvr: (&str, &str, &str),
    want: Value,
    fix: impl Fn(&Value) -> Option<Value>,
) -> ApiResult<()> {
    let mut ctx = ctx(server, gvr, Some("default"))?;
    let name = meta_str(&want, "name").unwrap_or_default().to_string();
    let key = ctx.def.key(Some("default"), &name);
    match server.store().get(&key) {
        None => match rest::create_object(&mut ctx, want).await {
            Ok(_) => Ok(()),
            // Created meanwhile: the next pass looks at it.
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        },
        Some(current) => {
            let Some(live) = ctx.def.decode_stored(&current.value) else {
                return Ok(());
            };
            let Some(fixed) = fix(&live) else {
                return Ok(());
            };
            match rest::update_object(&mut ctx, &name, fixed, current, Some(live), Sub::Main).await
            {
                Ok(_) => Ok(()),
                Err(e) if e.code == 409 || e.code == 404 => Ok(()),
                Err(e) => Err(e),
            }
        }
    }
}

/// kube's priorities for the built-in group-versions (group priority
/// minimum, version priority), from the aggregator's table; the order of
/// `/apis` follows them.
fn priority(group: &str, version: &str) -> (i64, i64) {
    let group_priority = match group {
        "" => 18000,
        "apiregistration.k8s.io" => 17900,
        "apps" => 17800,
        "events.k8s.io" => 17750,
        "authentication.k8s.io" => 17700,
        "authorization.k8s.io" => 17600,
        "autoscaling" => 17500,
        "batch" => 17400,
        "certificates.k8s.io" => 17300,
        "networking.k8s.io" => 17200,
        "policy" => 17100,
        "rbac.authorization.k8s.io" => 17000,
        "storage.k8s.io" => 16800,
        "admissionregistration.k8s.io" => 16700,
        "apiextensions.k8s.io" => 16700,
        "scheduling.k8s.io" => 16600,
        "coordination.k8s.io" => 16500,
        "node.k8s.io" => 16300,
        "discovery.k8s.io" => 16200,
        "flowcontrol.apiserver.k8s.io" => 16100,
        // CRDs (crdregistration): low group priority, kube-aware version order.
        _ => return (1000, 100),
    };
    let version_priority = match (group, version) {
        ("", _) => 1,
        ("autoscaling", "v2") => 30,
        _ => 15,
    };
    (group_priority, version_priority)
}

/// The APIService name of a group-version: `v1.` for core, `v1.apps`.
pub(crate) fn apiservice_name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

async fn reconcile_apiservices(server: &ApiServer) -> ApiResult<()> {
    let registry = server.registry();
    let mut want: Vec<(String, String, bool)> = vec![(String::new(), "v1".into(), true)];
    for (group, versions) in registry.groups() {
        for v in versions {
            let builtin = registry
                .group_version(&group, &v)
                .iter()
                .any(|d| d.custom.is_none());
            want.push((group.clone(), v, builtin));
        }
    }
    let ctx = ctx(
        server,
        ("apiregistration.k8s.io", "v1", "apiservices"),
        None,
    )?;
    let prefix = ctx.def.key_prefix();
    let existing = server.store().range(&prefix, None, 0).kvs;
    let names: Vec<String> = want.iter().map(|(g, v, _)| apiservice_name(g, v)).collect();
    // Remove the automanaged ones whose group-version is no longer served.
    for kv in &existing {
        // Only the ones no longer wanted are read.
        let key_name = kv.key.rsplit('/').next().unwrap_or_default();
        if names.iter().any(|n| n == key_name) {
            continue;
        }
        let Some(obj) = ctx.def.decode_stored(&kv.value) else {
            continue;
        };
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let managed = obj
            .pointer("/metadata/labels")
            .and_then(|l| l.get(AUTOMANAGED))
            .is_some();
        if managed && !names.contains(&name) {
            match rest::delete_object(&ctx, &name, &rest::DeleteOptions::default()).await {
                Ok(_) => {}
                Err(e) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
    }
    let mut writes = tokio::task::JoinSet::new();
    for ((group, version, builtin), name) in want.into_iter().zip(names) {
        let key = ctx.def.key(None, &name);
        if existing.iter().any(|kv| *kv.key == *key) {
            continue;
        }
        let (group_priority, version_priority) = priority(&group, &version);
        let now = object::now_rfc3339();
        let obj = json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {
                "name": name,
                "uid": uuid::Uuid::new_v4().to_string(),
                "creationTimestamp": now,
                "labels": {AUTOMANAGED: if builtin { "onstart" } else { "true" }},
            },
            "spec": {
                "group": group,
                "version": version,
                "groupPriorityMinimum": group_priority,
                "versionPriority": version_priority,
            },
            "status": {"conditions": [{
                "type": "Available",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "Local",
                "message": "Local APIServices are always available",
            }]},
        });
        let encoded = object::Encoded::new(obj);
        let store = server.store().clone();
        writes.spawn(async move { store.create(&key, |rev| encoded.with_rv(rev)).await });
    }
    while let Some(r) = writes.join_next().await {
        match r {
            Ok(Ok(_)) | Ok(Err(kubeforge_store::StoreError::AlreadyExists { .. })) => {}
            Ok(Err(e)) => return Err(e.into()),
            Err(e) => return Err(ApiError::internal(e.to_string())),
        }
    }
    Ok(())
}
