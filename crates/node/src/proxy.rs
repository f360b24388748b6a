//! Services for container nodes, as kube-proxy's nftables mode makes them:
//! a table of its own (`ip kubeforge-<cluster id>-proxy`) whose `services` chain looks
//! up `daddr . l4proto . dport` in a verdict map of ClusterIPs, a chain per
//! service port picking a ready endpoint at random (`numgen random mod N`),
//! and a chain per endpoint doing the DNAT. The table is rebuilt whole from
//! the Services and EndpointSlices on every change and replaced in one
//! `nft -f` transaction.
//!
//! Departures, on purpose: every connection to a Service is masqueraded
//! (kube-proxy's `--masquerade-all`), because without `br_netfilter` a pod
//! answering a client on its own bridge would bypass the host's
//! connection tracking; and the service range is rejected when no endpoint
//! matches, so it is never routed off the machine.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::error::NodeError;

/// Where a proxy's rules go: its cluster's table (family `ip`), and which
/// interfaces its pods come from: connections from those and from this
/// host reach the cluster's Services; another cluster's pods on the same
/// machine never match this cluster's ClusterIPs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyTarget {
    /// The table's name.
    pub table: String,
    /// The pods' interfaces, as nftables matches them (`kf<id>-*`).
    pub pod_interfaces: String,
}

impl ProxyTarget {
    /// The target of the cluster whose pods are on `net`.
    pub fn of(net: &crate::network::PodNetwork) -> ProxyTarget {
        ProxyTarget {
            table: net.id().proxy_table(),
            pod_interfaces: net.bridge_pattern(),
        }
    }
}
/// The Service range the API server allocates ClusterIPs from.
pub const SERVICE_CIDR: &str = "10.96.0.0/12";

/// One service port and where it leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    /// `namespace/name:port-name`, for the chain's comment.
    pub id: String,
    /// The ClusterIP.
    pub ip: String,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
    /// The Service port.
    pub port: u16,
    /// The NodePort (NodePort and LoadBalancer Services).
    pub node_port: Option<u16>,
    /// Ready endpoints: (address, target port).
    pub endpoints: Vec<(String, u16)>,
}

/// The service ports of `services` with the ready endpoints of `slices`
/// (kube-proxy's service and endpoints change trackers, whole).
pub fn service_ports(services: &[Service], slices: &[EndpointSlice]) -> Vec<ServicePort> {
    let mut out = Vec::new();
    for svc in services {
        let Some(spec) = &svc.spec else { continue };
        // Only what parses as an address reaches the rules: the API
        // validates ClusterIPs, and a value stored before that (or by a
        // server that does not) must not break or inject into the ruleset.
        let Some(ip) = spec
            .cluster_ip
            .as_deref()
            .and_then(|ip| ip.parse::<std::net::Ipv4Addr>().ok())
            .map(|ip| ip.to_string())
        else {
            continue;
        };
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let mine: Vec<&EndpointSlice> = slices
            .iter()
            .filter(|s| {
                s.metadata.namespace.as_deref() == Some(ns.as_str())
                    && s.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("kubernetes.io/service-name"))
                        == Some(&name)
                    && s.address_type == "IPv4"
            })
            .collect();
        for p in spec.ports.iter().flatten() {
            let protocol = p
                .protocol
                .clone()
                .unwrap_or_else(|| "TCP".into())
                .to_lowercase();
            if !matches!(protocol.as_str(), "tcp" | "udp" | "sctp") {
                continue;
            }
            let port_name = p.name.clone().unwrap_or_default();
            let mut endpoints = Vec::new();
            for s in &mine {
                // The slice's port of the same name and protocol.
                let Some(target) = s.ports.iter().flatten().find(|sp| {
                    sp.name.clone().unwrap_or_default() == port_name
                        && sp
                            .protocol
                            .clone()
                            .unwrap_or_else(|| "TCP".into())
                            .to_lowercase()
                            == protocol
                }) else {
                    continue;
                };
                let Some(tp) = target.port.and_then(|p| u16::try_from(p).ok()) else {
                    continue;
                };
                for e in &s.endpoints {
                    let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                    if !ready {
                        continue;
                    }
                    for a in &e.addresses {
                        if let Ok(addr) = a.parse::<std::net::Ipv4Addr>() {
                            endpoints.push((addr.to_string(), tp));
                        }
                    }
                }
            }
            endpoints.sort();
            endpoints.dedup();
            let Ok(port) = u16::try_from(p.port) else {
                continue;
            };
            let node_port = p.node_port.and_then(|n| u16::try_from(n).ok()).filter(|n| {
                *n > 0 && matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"))
            });
            out.push(ServicePort {
                id: format!("{ns}/{name}:{port_name}"),
                ip: ip.clone(),
                protocol,
                port,
                node_port,
                endpoints,
            });
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id).then(a.port.cmp(&b.port)));
    out
}

/// The nftables transaction that replaces the proxy's table with one for
/// `ports`.
pub fn ruleset(target: &ProxyTarget, ports: &[ServicePort]) -> String {
    let table = &target.table;
    let pods = &target.pod_interfaces;
    let mut t = String::new();
    // Create (if missing), delete, then define: one atomic replacement.
    let _ = writeln!(
        t,
        "table ip {table} {{}}\ndelete table ip {table}\ntable ip {table} {{"
    );
    let mut map = Vec::new();
    let mut node_ports = Vec::new();
    let mut chains = String::new();
    let mut rejects = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let key = format!("{} . {} . {}", p.ip, p.protocol, p.port);
        if p.endpoints.is_empty() {
            rejects.push(key);
            continue;
        }
        map.push(format!("{key} : goto svc-{i}"));
        if let Some(n) = p.node_port {
            node_ports.push(format!("{} . {n} : goto svc-{i}", p.protocol));
        }
        let _ = writeln!(
            chains,
            "\tchain svc-{i} {{\n\t\tcomment \"{}\"",
            p.id.chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '/' | ':' | '_'))
                .collect::<String>()
        );
        let _ = writeln!(chains, "\t\tmeta mark set meta mark | 0x4000");
        let arms: Vec<String> = (0..p.endpoints.len())
            .map(|j| format!("{j} : goto ep-{i}-{j}"))
            .collect();
        let _ = writeln!(
            chains,
            "\t\tnumgen random mod {} vmap {{ {} }}\n\t}}",
            p.endpoints.len(),
            arms.join(", ")
        );
        for (j, (addr, port)) in p.endpoints.iter().enumerate() {
            let _ = writeln!(
                chains,
                "\tchain ep-{i}-{j} {{\n\t\tmeta l4proto {} dnat to {addr}:{port}\n\t}}",
                p.protocol
            );
        }
    }
    let _ = writeln!(
        t,
        "\tmap service-ips {{\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n{}\t}}",
        if map.is_empty() {
            String::new()
        } else {
            format!("\t\telements = {{ {} }}\n", map.join(", "))
        }
    );
    let _ = writeln!(
        t,
        "\tset no-endpoint-services {{\n\t\ttype ipv4_addr . inet_proto . inet_service\n{}\t}}",
        if rejects.is_empty() {
            String::new()
        } else {
            format!("\t\telements = {{ {} }}\n", rejects.join(", "))
        }
    );
    let _ = writeln!(
        t,
        "\tmap service-nodeports {{\n\t\ttype inet_proto . inet_service : verdict\n{}\t}}",
        if node_ports.is_empty() {
            String::new()
        } else {
            format!("\t\telements = {{ {} }}\n", node_ports.join(", "))
        }
    );
    t.push_str(&chains);
    // NodePorts answer on the host's own addresses but loopback, as
    // kube-proxy's nftables mode (a DNAT from 127.0.0.1 to a pod would
    // need route_localnet); from outside the machine, the egress guard
    // drops what would be forwarded to a pod.
    let _ = writeln!(
        t,
        "\tchain services {{\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t\tfib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports\n\t}}\n\
         \tchain nat-prerouting {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tiifname \"{pods}\" jump services\n\t}}\n\
         \tchain nat-output {{\n\t\ttype nat hook output priority -100; policy accept;\n\t\tjump services\n\t}}\n\
         \tchain nat-postrouting {{\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tmeta mark & 0x4000 == 0x4000 meta mark set meta mark & 0xffffbfff masquerade\n\t}}\n\
         \tchain filter-output {{\n\t\ttype filter hook output priority filter; policy accept;\n\t\tip daddr {SERVICE_CIDR} reject\n\t}}\n\
         \tchain filter-forward {{\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tiifname \"{pods}\" ip daddr {SERVICE_CIDR} reject\n\t}}\n\
         }}"
    );
    t
}

/// Load `text` into nftables in one transaction.
fn apply(text: &str) -> Result<(), NodeError> {
    crate::network::nft(&["-f", "-"], Some(text))
}

/// A running proxy.
pub struct Proxy {
    target: ProxyTarget,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Watch Services and EndpointSlices through `client` and keep the
    /// table in step (installed empty at once).
    pub fn start(client: kube::Client, target: ProxyTarget) -> Result<Proxy, NodeError> {
        apply(&ruleset(&target, &[]))?;
        let stop = CancellationToken::new();
        let watch = ServiceWatch::start(client);
        let token = stop.clone();
        let rules_target = target.clone();
        let task = tokio::spawn(async move {
            let mut last = String::new();
            while let Some((svcs, eps)) = watch.next(&token).await {
                let text = ruleset(&rules_target, &service_ports(&svcs, &eps));
                if text != last {
                    match apply(&text) {
                        Ok(()) => last = text,
                        Err(e) => tracing::warn!(error = %e, "cannot write the Service rules"),
                    }
                }
            }
        });
        Ok(Proxy { target, stop, task })
    }

    /// Stop and remove the table.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
        let table = &self.target.table;
        let _ = apply(&format!("table ip {table} {{}}\ndelete table ip {table}\n"));
    }
}

/// All Services and EndpointSlices, kept by two watches, for the parts
/// that rebuild from the whole set on every change (this proxy and the
/// cluster DNS server). The watches stop when it is dropped.
pub(crate) struct ServiceWatch {
    services: Arc<std::sync::Mutex<HashMap<String, Service>>>,
    slices: Arc<std::sync::Mutex<HashMap<String, EndpointSlice>>>,
    changed: Arc<Notify>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ServiceWatch {
    /// Start watching through `client`.
    pub(crate) fn start(client: kube::Client) -> ServiceWatch {
        let services: Arc<std::sync::Mutex<HashMap<String, Service>>> = Arc::default();
        let slices: Arc<std::sync::Mutex<HashMap<String, EndpointSlice>>> = Arc::default();
        let changed = Arc::new(Notify::new());
        let tasks = vec![
            tokio::spawn(follow(
                Api::<Service>::all(client.clone()),
                services.clone(),
                changed.clone(),
            )),
            tokio::spawn(follow(
                Api::<EndpointSlice>::all(client),
                slices.clone(),
                changed.clone(),
            )),
        ];
        ServiceWatch {
            services,
            slices,
            changed,
            tasks,
        }
    }

    /// After the next change (a burst settled into one), everything; `None`
    /// once `stop` is cancelled.
    pub(crate) async fn next(
        &self,
        stop: &CancellationToken,
    ) -> Option<(Vec<Service>, Vec<EndpointSlice>)> {
        tokio::select! {
            _ = self.changed.notified() => {}
            _ = stop.cancelled() => return None,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let services = self
            .services
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let slices = self
            .slices
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        Some((services, slices))
    }
}

impl Drop for ServiceWatch {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Keep `into` equal to the objects `api` lists, notifying `changed`.
async fn follow<K>(
    api: Api<K>,
    into: Arc<std::sync::Mutex<HashMap<String, K>>>,
    changed: Arc<Notify>,
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let key = |o: &K| {
        let m = o.meta();
        format!(
            "{}/{}",
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default()
        )
    };
    let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
    let mut fresh: BTreeMap<String, K> = BTreeMap::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Apply(o)) => {
                if let Ok(mut m) = into.lock() {
                    m.insert(key(&o), o);
                }
            }
            Ok(watcher::Event::Delete(o)) => {
                if let Ok(mut m) = into.lock() {
                    m.remove(&key(&o));
                }
            }
            Ok(watcher::Event::Init) => fresh.clear(),
            Ok(watcher::Event::InitApply(o)) => {
                fresh.insert(key(&o), o);
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                if let Ok(mut m) = into.lock() {
                    *m = std::mem::take(&mut fresh).into_iter().collect();
                }
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        }
        changed.notify_one();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn target() -> ProxyTarget {
        ProxyTarget {
            table: "kubeforge-0123abcd-proxy".into(),
            pod_interfaces: "kf0123abcd-*".into(),
        }
    }
    use serde_json::json;

    #[test]
    fn ready_endpoints_become_dnat_rules() {
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "d"},
            "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})).unwrap();
        let empty: Service =
            serde_json::from_value(json!({"metadata": {"name": "none", "namespace": "d"},
            "spec": {"clusterIP": "10.96.0.21", "ports": [{"port": 81}]}}))
            .unwrap();
        let slice: EndpointSlice =
            serde_json::from_value(json!({"metadata": {"name": "web-x", "namespace": "d",
            "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true}},
                          {"addresses": ["10.244.1.7"], "conditions": {"ready": false}}]}))
            .unwrap();
        let ports = service_ports(&[svc, empty], &[slice]);
        assert_eq!(ports.len(), 2);
        let web = ports.iter().find(|p| p.id == "d/web:http").unwrap();
        assert_eq!(
            web.endpoints,
            [("10.244.0.5".to_string(), 8080)],
            "the unready endpoint is left out"
        );
        let rules = ruleset(&target(), &ports);
        assert!(
            rules.contains("10.96.0.20 . tcp . 80 : goto svc-"),
            "{rules}"
        );
        assert!(rules.contains("dnat to 10.244.0.5:8080"), "{rules}");
        assert!(
            rules.contains("10.96.0.21 . tcp . 81"),
            "the empty service is in no-endpoint-services: {rules}"
        );
        assert!(rules.contains(&format!("ip daddr {SERVICE_CIDR} reject")));
    }

    #[test]
    fn node_ports_lead_to_the_service_chain() {
        let svc: Service =
            serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "d"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.30",
                "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080}]}}))
            .unwrap();
        let plain: Service =
            serde_json::from_value(json!({"metadata": {"name": "in", "namespace": "d"},
            "spec": {"clusterIP": "10.96.0.31", "ports": [{"port": 81, "nodePort": 30081}]}}))
            .unwrap();
        let slice = |svc: &str| -> EndpointSlice {
            serde_json::from_value(
                json!({"metadata": {"name": format!("{svc}-x"), "namespace": "d",
                "labels": {"kubernetes.io/service-name": svc}}, "addressType": "IPv4",
                "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["10.244.0.9"], "conditions": {"ready": true}}]}),
            )
            .unwrap()
        };
        let ports = service_ports(&[svc, plain], &[slice("web"), slice("in")]);
        let web = ports.iter().find(|p| p.id == "d/web:").unwrap();
        assert_eq!(web.node_port, Some(30080));
        let inner = ports.iter().find(|p| p.id == "d/in:").unwrap();
        assert_eq!(inner.node_port, None, "a ClusterIP Service has no NodePort");
        let rules = ruleset(&target(), &ports);
        let i = ports.iter().position(|p| p.id == "d/web:").unwrap();
        assert!(
            rules.contains(&format!("tcp . 30080 : goto svc-{i}")),
            "{rules}"
        );
        assert!(!rules.contains("30081"), "{rules}");
        assert!(
            rules.contains("fib daddr type local ip daddr != 127.0.0.0/8"),
            "{rules}"
        );
    }
}
