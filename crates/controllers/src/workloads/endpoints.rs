//! The EndpointSlice and Endpoints controllers: for every Service with a
//! selector, the pods it selects that have an IP become endpoints —
//! `discovery.k8s.io/v1` EndpointSlices (label
//! `kubernetes.io/service-name`, managed-by
//! `endpointslice-controller.k8s.io`, owned by the Service, at most 100
//! endpoints each, conditions ready/serving/terminating) and the legacy
//! `v1` Endpoints of the same name (ready pods in `addresses`, the others
//! in `notReadyAddresses`). Named target ports are resolved per pod.
//! Services without a selector are left to their users.

use crate::clients::accounts;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::Cache;
use kubeforge_runtime::{Action, Manager, ReconcileError};
use serde_json::{Value, json};

use super::Ctx;
use super::util;

/// The label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The managed-by label value of slices this controller writes.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
const MAX_PER_SLICE: usize = 100;

/// Register the controller with `mgr`.
pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    let services = ctx.services.clone();
    let idx = ctx.clone();
    mgr.controller::<Service, _>("endpointslice", super::Shared(ctx.clone()))
        .owns::<EndpointSlice>()
        .watches::<Pod, _>(move |pod| {
            idx.pod_index.observe(&idx.pods, pod);
            services_for(&services, pod)
        })
        .max_concurrent_reconciles(ctx.opts.concurrency)
        .register(reconcile);
}

fn service_selector(svc: &Service) -> Option<Selector> {
    let sel = svc.spec.as_ref()?.selector.clone()?;
    if sel.is_empty() {
        return None;
    }
    Some(sel.into_iter().collect())
}

fn services_for(services: &Cache<Service>, pod: &Pod) -> Vec<ObjectRef<Service>> {
    let ns = pod.metadata.namespace.as_deref();
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    services
        .state()
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == ns)
        .filter(|s| service_selector(s).is_some_and(|sel| sel.matches(labels)))
        .map(|s| ObjectRef::from_obj(&**s))
        .collect()
}

/// A resolved service port: name, port number on the pod, protocol.
type Port = (Option<String>, i32, String);

fn resolve_ports(svc: &Service, pod: &Pod) -> Vec<Port> {
    let mut out = Vec::new();
    for p in svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default()
    {
        let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        let port = match &p.target_port {
            None => Some(p.port),
            Some(IntOrString::Int(i)) => Some(*i),
            Some(IntOrString::String(name)) => pod.spec.as_ref().and_then(|s| {
                s.containers.iter().find_map(|c| {
                    c.ports.as_ref()?.iter().find_map(|cp| {
                        (cp.name.as_deref() == Some(name.as_str())
                            && cp.protocol.as_deref().unwrap_or("TCP") == protocol)
                            .then_some(cp.container_port)
                    })
                })
            }),
        };
        if let Some(port) = port {
            out.push((p.name.clone(), port, protocol));
        }
    }
    out
}

async fn reconcile(svc: Arc<Service>, ctx: Arc<super::Shared>) -> Result<Action, ReconcileError> {
    let ctx: &Ctx = &ctx;
    let Some(sel) = service_selector(&svc) else {
        return Ok(Action::await_change());
    };
    if svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let publish_not_ready = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let mut pods: Vec<Arc<Pod>> = ctx
        .pod_index
        .in_namespace(&ctx.pods, &ns)
        .into_iter()
        .filter(|p| p.metadata.labels.as_ref().is_some_and(|l| sel.matches(l)))
        .filter(|p| !matches!(util::phase(p), "Succeeded" | "Failed"))
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .is_some_and(|ip| !ip.is_empty())
        })
        .collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));

    // Group pods by their resolved ports (kube makes one slice set per
    // port combination).
    let mut groups: BTreeMap<Vec<Port>, Vec<Value>> = BTreeMap::new();
    let mut subsets: BTreeMap<Vec<Port>, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for p in &pods {
        let ports = resolve_ports(&svc, p);
        let terminating = p.metadata.deletion_timestamp.is_some();
        let ready = util::is_ready(p) && !terminating;
        let ip = p
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let target =
            json!({"kind": "Pod", "namespace": ns, "name": p.metadata.name, "uid": p.metadata.uid});
        let mut ep = json!({
            "addresses": [ip],
            "conditions": {"ready": ready || publish_not_ready, "serving": util::is_ready(p), "terminating": terminating},
            "targetRef": target,
        });
        if let Some(n) = &node {
            ep["nodeName"] = json!(n);
            if let Some(zone) = ctx
                .nodes
                .get(&ObjectRef::new(n))
                .and_then(|node| node.metadata.labels.clone())
                .and_then(|l| l.get("topology.kubernetes.io/zone").cloned())
            {
                ep["zone"] = json!(zone);
            }
        }
        groups.entry(ports.clone()).or_default().push(ep);
        if !terminating || publish_not_ready {
            let mut addr = json!({"ip": ip, "targetRef": target});
            if let Some(n) = &node {
                addr["nodeName"] = json!(n);
            }
            let e = subsets.entry(ports).or_default();
            if ready || publish_not_ready {
                e.0.push(addr);
            } else {
                e.1.push(addr);
            }
        }
    }
    if groups.is_empty() {
        groups.insert(Vec::new(), Vec::new());
    }
    sync_slices(ctx, &svc, &ns, &name, groups).await?;
    sync_endpoints(ctx, &ns, &name, subsets).await?;
    Ok(Action::await_change())
}

fn ports_json(ports: &[Port]) -> Value {
    Value::Array(
        ports
            .iter()
            .map(|(n, p, proto)| json!({"name": n.clone().unwrap_or_default(), "port": p, "protocol": proto}))
            .collect(),
    )
}

async fn sync_slices(
    ctx: &Ctx,
    svc: &Service,
    ns: &str,
    name: &str,
    groups: BTreeMap<Vec<Port>, Vec<Value>>,
) -> Result<(), ReconcileError> {
    let mut desired: Vec<(Value, Vec<Value>)> = Vec::new();
    for (ports, eps) in groups {
        if eps.is_empty() {
            desired.push((ports_json(&ports), Vec::new()));
        }
        for chunk in eps.chunks(MAX_PER_SLICE) {
            desired.push((ports_json(&ports), chunk.to_vec()));
        }
    }
    let mut existing: Vec<Arc<EndpointSlice>> = ctx
        .slices
        .state()
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(ns))
        .filter(|s| {
            s.metadata.labels.as_ref().is_some_and(|l| {
                l.get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name)
                    && l.get("endpointslice.kubernetes.io/managed-by")
                        .map(String::as_str)
                        == Some(MANAGED_BY)
            })
        })
        .collect();
    existing.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client(accounts::ENDPOINTSLICE).clone(), ns);
    let owner = util::owner_ref(svc);
    for (i, (ports, eps)) in desired.iter().enumerate() {
        let mut body = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "labels": {SERVICE_NAME_LABEL: name, "endpointslice.kubernetes.io/managed-by": MANAGED_BY},
                "ownerReferences": owner.as_ref().map(|o| vec![o.clone()]),
            },
            "addressType": "IPv4",
            "endpoints": eps,
            "ports": ports,
        });
        match existing.get(i) {
            Some(cur) => {
                let same = serde_json::to_value(&cur.endpoints).ok() == Some(json!(eps))
                    && serde_json::to_value(&cur.ports).ok() == Some(ports.clone());
                if same {
                    continue;
                }
                body["metadata"]["name"] = json!(cur.metadata.name);
                body["metadata"]["resourceVersion"] = json!(cur.metadata.resource_version);
                let slice: EndpointSlice =
                    serde_json::from_value(body).map_err(ReconcileError::new)?;
                let n = cur.metadata.name.clone().unwrap_or_default();
                api.replace(&n, &PostParams::default(), &slice)
                    .await
                    .map_err(ReconcileError::new)?;
            }
            None => {
                body["metadata"]["generateName"] = json!(format!("{name}-"));
                let slice: EndpointSlice =
                    serde_json::from_value(body).map_err(ReconcileError::new)?;
                api.create(&PostParams::default(), &slice)
                    .await
                    .map_err(ReconcileError::new)?;
            }
        }
    }
    for extra in existing.iter().skip(desired.len()) {
        let n = extra.metadata.name.clone().unwrap_or_default();
        match api.delete(&n, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if crate::is_not_found(&e) => {}
            Err(e) => return Err(ReconcileError::new(e)),
        }
    }
    Ok(())
}

async fn sync_endpoints(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    subsets: BTreeMap<Vec<Port>, (Vec<Value>, Vec<Value>)>,
) -> Result<(), ReconcileError> {
    let subsets: Vec<Value> = subsets
        .into_iter()
        .map(|(ports, (ready, not_ready))| {
            let mut s = json!({"ports": Value::Array(ports.iter().map(|(n, p, proto)| {
                let mut v = json!({"port": p, "protocol": proto});
                if let Some(n) = n { v["name"] = json!(n); }
                v
            }).collect())});
            if !ready.is_empty() {
                s["addresses"] = Value::Array(ready);
            }
            if !not_ready.is_empty() {
                s["notReadyAddresses"] = Value::Array(not_ready);
            }
            s
        })
        .collect();
    let api: Api<Endpoints> = Api::namespaced(ctx.client(accounts::ENDPOINT).clone(), ns);
    let current = api.get_opt(name).await.map_err(ReconcileError::new)?;
    let body = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": name, "labels": {"endpoints.kubernetes.io/managed-by": "endpoint-controller"}},
        "subsets": subsets,
    });
    let mut ep: Endpoints = serde_json::from_value(body).map_err(ReconcileError::new)?;
    if ep.subsets.as_ref().is_some_and(Vec::is_empty) {
        ep.subsets = None;
    }
    match current {
        Some(cur) => {
            if cur.subsets == ep.subsets {
                return Ok(());
            }
            ep.metadata.resource_version = cur.metadata.resource_version.clone();
            ep.metadata.annotations = cur.metadata.annotations.clone();
            api.replace(name, &PostParams::default(), &ep)
                .await
                .map(|_| ())
                .map_err(ReconcileError::new)
        }
        None => api
            .create(&PostParams::default(), &ep)
            .await
            .map(|_| ())
            .map_err(ReconcileError::new),
    }
}
