//! Object-state metrics as kube-state-metrics exposes them for pods,
//! Deployments and nodes: names, labels, HELP texts and the one-series-per-
//! state convention (`kube_pod_status_phase` has a series for each phase,
//! 1 for the current one) of kube-state-metrics v2
//! (`docs/metrics/workload/*.md`, `docs/metrics/cluster/node-metrics.md`).
//!
//! As kube-state-metrics does, each object's series are rendered when a
//! watch delivers it and kept as text; a scrape only concatenates them,
//! family by family. Nothing is decoded at scrape time, so a scrape costs
//! a copy of the text whatever the cluster's size.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use kubeforge_runtime::sync::{read, write};
use tokio_util::sync::CancellationToken;

use crate::text::{self, sample};

/// A family: name, type, HELP text.
type Family = (&'static str, &'static str, &'static str);

const POD_FAMILIES: &[Family] = &[
    ("kube_pod_info", "gauge", "[STABLE] Information about pod."),
    (
        "kube_pod_owner",
        "gauge",
        "[STABLE] Information about the Pod's owner.",
    ),
    (
        "kube_pod_status_phase",
        "gauge",
        "[STABLE] The pods current phase.",
    ),
    (
        "kube_pod_status_ready",
        "gauge",
        "[STABLE] Describes whether the pod is ready to serve requests.",
    ),
    (
        "kube_pod_container_status_restarts_total",
        "counter",
        "[STABLE] The number of container restarts per container.",
    ),
    (
        "kube_pod_container_status_waiting_reason",
        "gauge",
        "[STABLE] Describes the reason the container is currently in waiting state.",
    ),
];

const DEPLOYMENT_FAMILIES: &[Family] = &[
    (
        "kube_deployment_spec_replicas",
        "gauge",
        "[STABLE] Number of desired pods for a deployment.",
    ),
    (
        "kube_deployment_status_replicas",
        "gauge",
        "[STABLE] The number of replicas per deployment.",
    ),
    (
        "kube_deployment_status_replicas_available",
        "gauge",
        "[STABLE] The number of available replicas per deployment.",
    ),
    (
        "kube_deployment_status_replicas_updated",
        "gauge",
        "[STABLE] The number of updated replicas per deployment.",
    ),
    (
        "kube_deployment_status_observed_generation",
        "gauge",
        "[STABLE] The generation observed by the deployment controller.",
    ),
    (
        "kube_deployment_metadata_generation",
        "gauge",
        "[STABLE] Sequence number representing a specific generation of the desired state.",
    ),
    (
        "kube_deployment_status_condition",
        "gauge",
        "[STABLE] The current status conditions of a deployment.",
    ),
];

const NODE_FAMILIES: &[Family] = &[
    (
        "kube_node_info",
        "gauge",
        "[STABLE] Information about a cluster node.",
    ),
    (
        "kube_node_spec_unschedulable",
        "gauge",
        "[STABLE] Whether a node can schedule new pods.",
    ),
    (
        "kube_node_status_condition",
        "gauge",
        "[STABLE] The condition of a cluster node.",
    ),
    (
        "kube_node_status_capacity",
        "gauge",
        "[STABLE] The capacity for different resources of a node.",
    ),
    (
        "kube_node_status_allocatable",
        "gauge",
        "[STABLE] The allocatable for different resources of a node that are available for scheduling.",
    ),
];

/// Each object's rendered series, one text per family of its kind.
#[derive(Default)]
struct Shelf {
    objects: RwLock<BTreeMap<String, Vec<String>>>,
}

impl Shelf {
    fn put(&self, key: String, rendered: Vec<String>) {
        write(&self.objects).insert(key, rendered);
    }

    fn remove(&self, key: &str) {
        write(&self.objects).remove(key);
    }

    fn replace(&self, all: BTreeMap<String, Vec<String>>) {
        *write(&self.objects) = all;
    }

    fn encode(&self, families: &[Family], out: &mut String) {
        let objects = read(&self.objects);
        for (i, (name, kind, help)) in families.iter().enumerate() {
            text::header(out, name, kind, help);
            for rendered in objects.values() {
                if let Some(t) = rendered.get(i) {
                    out.push_str(t);
                }
            }
        }
    }
}

struct Inner {
    pods: Shelf,
    deployments: Shelf,
    nodes: Shelf,
    /// How many of the three watches have listed once.
    listed: AtomicUsize,
}

/// The object-state metrics of one cluster, kept current by watches of
/// its pods, Deployments and nodes ([`StateMetrics::start`]).
#[derive(Clone)]
pub struct StateMetrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for StateMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMetrics").finish_non_exhaustive()
    }
}

impl StateMetrics {
    /// Watch `client`'s cluster (list and watch of pods, Deployments and
    /// nodes, cluster-wide) until `stop` is cancelled.
    pub fn start(client: Client, stop: CancellationToken) -> StateMetrics {
        let metrics = StateMetrics {
            inner: Arc::new(Inner {
                pods: Shelf::default(),
                deployments: Shelf::default(),
                nodes: Shelf::default(),
                listed: AtomicUsize::new(0),
            }),
        };
        let m = metrics.clone();
        tokio::spawn(follow(
            Api::<Pod>::all(client.clone()),
            stop.clone(),
            m.clone(),
            |i| &i.pods,
            render_pod,
        ));
        tokio::spawn(follow(
            Api::<Deployment>::all(client.clone()),
            stop.clone(),
            m.clone(),
            |i| &i.deployments,
            render_deployment,
        ));
        tokio::spawn(follow(
            Api::<Node>::all(client),
            stop,
            m,
            |i| &i.nodes,
            render_node,
        ));
        metrics
    }

    /// Whether every watch has listed once (before that a scrape shows
    /// what has arrived so far).
    pub fn synced(&self) -> bool {
        self.inner.listed.load(Ordering::SeqCst) >= 3
    }

    /// The metrics as Prometheus text 0.0.4.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        self.inner.pods.encode(POD_FAMILIES, &mut out);
        self.inner.deployments.encode(DEPLOYMENT_FAMILIES, &mut out);
        self.inner.nodes.encode(NODE_FAMILIES, &mut out);
        out
    }
}

/// Follow one kind's watch into its shelf: a relist replaces the shelf
/// whole at its end (objects gone meanwhile disappear), events change one
/// object each.
async fn follow<K>(
    api: Api<K>,
    stop: CancellationToken,
    metrics: StateMetrics,
    shelf: fn(&Inner) -> &Shelf,
    render: fn(&K) -> Vec<String>,
) where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let key = |o: &K| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    let mut relist: Option<BTreeMap<String, Vec<String>>> = None;
    let mut listed_once = false;
    loop {
        let ev = tokio::select! {
            () = stop.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(error = %e, "state metrics: watch failed; retrying with backoff");
                continue;
            }
        };
        let s = shelf(&metrics.inner);
        match ev {
            watcher::Event::Init => relist = Some(BTreeMap::new()),
            watcher::Event::InitApply(o) => {
                if let Some(r) = relist.as_mut() {
                    r.insert(key(&o), render(&o));
                }
            }
            watcher::Event::InitDone => {
                s.replace(relist.take().unwrap_or_default());
                if !listed_once {
                    listed_once = true;
                    metrics.inner.listed.fetch_add(1, Ordering::SeqCst);
                }
            }
            watcher::Event::Apply(o) => s.put(key(&o), render(&o)),
            watcher::Event::Delete(o) => s.remove(&key(&o)),
        }
    }
}

/// `True`/`False`/anything else as kube-state-metrics' three series.
fn condition_series(
    out: &mut String,
    name: &str,
    base: &[(&str, &str)],
    condition: &str,
    status: &str,
) {
    for (value, label) in [("True", "true"), ("False", "false"), ("", "unknown")] {
        let on = match value {
            "" => status != "True" && status != "False",
            v => status == v,
        };
        let mut labels = base.to_vec();
        labels.push(("condition", condition));
        labels.push(("status", label));
        sample(out, name, &labels, f64::from(u8::from(on)));
    }
}

fn render_pod(p: &Pod) -> Vec<String> {
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let uid = p.uid().unwrap_or_default();
    let base = [
        ("namespace", ns.as_str()),
        ("pod", name.as_str()),
        ("uid", uid.as_str()),
    ];
    let spec = p.spec.as_ref();
    let status = p.status.as_ref();
    let owners = p.owner_references();
    let controller = owners.iter().find(|o| o.controller == Some(true));
    let mut out = vec![String::new(); POD_FAMILIES.len()];

    let host_ip = status.and_then(|s| s.host_ip.clone()).unwrap_or_default();
    let pod_ip = status.and_then(|s| s.pod_ip.clone()).unwrap_or_default();
    let node = spec.and_then(|s| s.node_name.clone()).unwrap_or_default();
    let priority_class = spec
        .and_then(|s| s.priority_class_name.clone())
        .unwrap_or_default();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let mut labels = base.to_vec();
    labels.extend([
        ("host_ip", host_ip.as_str()),
        ("pod_ip", pod_ip.as_str()),
        ("node", node.as_str()),
        (
            "created_by_kind",
            controller.map_or("", |o| o.kind.as_str()),
        ),
        (
            "created_by_name",
            controller.map_or("", |o| o.name.as_str()),
        ),
        ("priority_class", priority_class.as_str()),
        ("host_network", if host_network { "true" } else { "false" }),
    ]);
    sample(&mut out[0], POD_FAMILIES[0].0, &labels, 1.0);

    if owners.is_empty() {
        let mut labels = base.to_vec();
        labels.extend([
            ("owner_kind", "<none>"),
            ("owner_name", "<none>"),
            ("owner_is_controller", "<none>"),
        ]);
        sample(&mut out[1], POD_FAMILIES[1].0, &labels, 1.0);
    }
    for o in owners {
        let mut labels = base.to_vec();
        labels.extend([
            ("owner_kind", o.kind.as_str()),
            ("owner_name", o.name.as_str()),
            (
                "owner_is_controller",
                if o.controller == Some(true) {
                    "true"
                } else {
                    "false"
                },
            ),
        ]);
        sample(&mut out[1], POD_FAMILIES[1].0, &labels, 1.0);
    }

    if let Some(phase) = status.and_then(|s| s.phase.as_deref()) {
        for each in ["Pending", "Succeeded", "Failed", "Unknown", "Running"] {
            let mut labels = base.to_vec();
            labels.push(("phase", each));
            sample(
                &mut out[2],
                POD_FAMILIES[2].0,
                &labels,
                f64::from(u8::from(each == phase)),
            );
        }
    }

    for c in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_ == "Ready")
    {
        for (value, label) in [("True", "true"), ("False", "false"), ("Unknown", "unknown")] {
            let mut labels = base.to_vec();
            labels.push(("condition", label));
            sample(
                &mut out[3],
                POD_FAMILIES[3].0,
                &labels,
                f64::from(u8::from(c.status == value)),
            );
        }
    }

    for cs in status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        let mut labels = base.to_vec();
        labels.push(("container", cs.name.as_str()));
        sample(
            &mut out[4],
            POD_FAMILIES[4].0,
            &labels,
            f64::from(cs.restart_count),
        );
        if let Some(reason) = cs
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref())
        {
            labels.push(("reason", reason));
            sample(&mut out[5], POD_FAMILIES[5].0, &labels, 1.0);
        }
    }
    out
}

fn render_deployment(d: &Deployment) -> Vec<String> {
    let ns = d.namespace().unwrap_or_default();
    let name = d.name_any();
    let base = [("namespace", ns.as_str()), ("deployment", name.as_str())];
    let status = d.status.as_ref();
    let mut out = vec![String::new(); DEPLOYMENT_FAMILIES.len()];
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let values = [
        f64::from(replicas),
        f64::from(status.and_then(|s| s.replicas).unwrap_or(0)),
        f64::from(status.and_then(|s| s.available_replicas).unwrap_or(0)),
        f64::from(status.and_then(|s| s.updated_replicas).unwrap_or(0)),
        status.and_then(|s| s.observed_generation).unwrap_or(0) as f64,
        d.metadata.generation.unwrap_or(0) as f64,
    ];
    for (i, v) in values.iter().enumerate() {
        sample(&mut out[i], DEPLOYMENT_FAMILIES[i].0, &base, *v);
    }
    for c in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        condition_series(
            &mut out[6],
            DEPLOYMENT_FAMILIES[6].0,
            &base,
            &c.type_,
            &c.status,
        );
    }
    out
}

/// A resource name as kube-state-metrics labels it (`nvidia.com/gpu` →
/// `nvidia_com_gpu`), with its unit and value.
fn resource_sample(resource: &str, q: &Quantity) -> Option<(String, &'static str, f64)> {
    let label: String = resource
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    match resource {
        "cpu" => {
            let milli = kubeforge_apimachinery::quantity::parse_milli(&q.0).ok()?;
            Some((label, "core", milli as f64 / 1000.0))
        }
        "memory" | "ephemeral-storage" => {
            let v = kubeforge_apimachinery::quantity::parse_value(&q.0).ok()?;
            Some((label, "byte", v as f64))
        }
        r if r.starts_with("hugepages-") => {
            let v = kubeforge_apimachinery::quantity::parse_value(&q.0).ok()?;
            Some((label, "byte", v as f64))
        }
        _ => {
            let v = kubeforge_apimachinery::quantity::parse_value(&q.0).ok()?;
            Some((label, "integer", v as f64))
        }
    }
}

fn render_node(n: &Node) -> Vec<String> {
    let name = n.name_any();
    let base = [("node", name.as_str())];
    let status = n.status.as_ref();
    let info = status.and_then(|s| s.node_info.as_ref());
    let mut out = vec![String::new(); NODE_FAMILIES.len()];
    let field = |f: fn(&k8s_openapi::api::core::v1::NodeSystemInfo) -> &String| {
        info.map(f).cloned().unwrap_or_default()
    };
    let (kernel, os, runtime, kubelet, proxy, uuid) = (
        field(|i| &i.kernel_version),
        field(|i| &i.os_image),
        field(|i| &i.container_runtime_version),
        field(|i| &i.kubelet_version),
        field(|i| &i.kube_proxy_version),
        field(|i| &i.system_uuid),
    );
    let spec = n.spec.as_ref();
    let provider = spec.and_then(|s| s.provider_id.clone()).unwrap_or_default();
    let pod_cidr = spec.and_then(|s| s.pod_cidr.clone()).unwrap_or_default();
    let internal_ip = status
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .unwrap_or_default();
    let mut labels = base.to_vec();
    labels.extend([
        ("kernel_version", kernel.as_str()),
        ("os_image", os.as_str()),
        ("container_runtime_version", runtime.as_str()),
        ("kubelet_version", kubelet.as_str()),
        ("kubeproxy_version", proxy.as_str()),
        ("provider_id", provider.as_str()),
        ("pod_cidr", pod_cidr.as_str()),
        ("system_uuid", uuid.as_str()),
        ("internal_ip", internal_ip.as_str()),
    ]);
    sample(&mut out[0], NODE_FAMILIES[0].0, &labels, 1.0);
    let unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    sample(
        &mut out[1],
        NODE_FAMILIES[1].0,
        &base,
        f64::from(u8::from(unschedulable)),
    );
    for c in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        condition_series(&mut out[2], NODE_FAMILIES[2].0, &base, &c.type_, &c.status);
    }
    for (i, list) in [
        (3, status.and_then(|s| s.capacity.as_ref())),
        (4, status.and_then(|s| s.allocatable.as_ref())),
    ] {
        for (resource, q) in list.into_iter().flatten() {
            if let Some((label, unit, v)) = resource_sample(resource, q) {
                let mut labels = base.to_vec();
                labels.extend([("resource", label.as_str()), ("unit", unit)]);
                sample(&mut out[i], NODE_FAMILIES[i].0, &labels, v);
            }
        }
    }
    out
}

/// Serve `metrics` at `/metrics` (and `/healthz`) on `listener` until
/// `stop` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: StateMetrics,
    stop: CancellationToken,
) -> std::io::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, text::CONTENT_TYPE)],
                        m.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("pod")
    }

    #[test]
    fn a_running_pod_has_one_series_per_phase_and_its_restarts() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "default", "uid": "u1",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c",
                    "uid": "r1", "controller": true}]},
            "spec": {"nodeName": "node-0", "containers": [{"name": "web", "image": "nginx"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.5", "hostIP": "192.168.0.2",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "web", "image": "nginx", "imageID": "", "ready": true,
                    "restartCount": 2, "state": {"running": {}}}]}
        }));
        let r = render_pod(&p).concat();
        for line in [
            r#"kube_pod_status_phase{namespace="default",pod="web-1",uid="u1",phase="Running"} 1"#,
            r#"kube_pod_status_phase{namespace="default",pod="web-1",uid="u1",phase="Pending"} 0"#,
            r#"kube_pod_status_ready{namespace="default",pod="web-1",uid="u1",condition="true"} 1"#,
            r#"kube_pod_status_ready{namespace="default",pod="web-1",uid="u1",condition="false"} 0"#,
            r#"kube_pod_container_status_restarts_total{namespace="default",pod="web-1",uid="u1",container="web"} 2"#,
            r#"kube_pod_owner{namespace="default",pod="web-1",uid="u1",owner_kind="ReplicaSet",owner_name="web-7c",owner_is_controller="true"} 1"#,
            r#"kube_pod_info{namespace="default",pod="web-1",uid="u1",host_ip="192.168.0.2",pod_ip="10.0.0.5",node="node-0",created_by_kind="ReplicaSet",created_by_name="web-7c",priority_class="",host_network="false"} 1"#,
        ] {
            assert!(r.lines().any(|l| l == line), "{line} in\n{r}");
        }
        assert_eq!(r.matches("kube_pod_status_phase{").count(), 5);
    }

    #[test]
    fn a_waiting_container_names_its_reason_and_a_bare_pod_has_no_owner() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "c", "image": "x",
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
        }));
        let r = render_pod(&p).concat();
        assert!(r.contains(r#"kube_pod_container_status_waiting_reason{namespace="ns",pod="p",uid="u",container="c",reason="CrashLoopBackOff"} 1"#), "{r}");
        assert!(
            r.contains(
                r#"owner_kind="<none>",owner_name="<none>",owner_is_controller="<none>"} 1"#
            ),
            "{r}"
        );
    }

    #[test]
    fn nodes_report_conditions_and_resources_with_units() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-0"},
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "Ready", "status": "Unknown"}],
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "2"},
                "allocatable": {"cpu": "3500m"}
            }
        }))
        .expect("node");
        let r = render_node(&n).concat();
        for line in [
            r#"kube_node_spec_unschedulable{node="node-0"} 1"#,
            r#"kube_node_status_condition{node="node-0",condition="Ready",status="unknown"} 1"#,
            r#"kube_node_status_condition{node="node-0",condition="Ready",status="true"} 0"#,
            r#"kube_node_status_capacity{node="node-0",resource="cpu",unit="core"} 4"#,
            r#"kube_node_status_capacity{node="node-0",resource="memory",unit="byte"} 8589934592"#,
            r#"kube_node_status_capacity{node="node-0",resource="pods",unit="integer"} 110"#,
            r#"kube_node_status_capacity{node="node-0",resource="nvidia_com_gpu",unit="integer"} 2"#,
            r#"kube_node_status_allocatable{node="node-0",resource="cpu",unit="core"} 3.5"#,
        ] {
            assert!(r.lines().any(|l| l == line), "{line} in\n{r}");
        }
    }
}
