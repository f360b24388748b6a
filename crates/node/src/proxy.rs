//! Services for container nodes, as kube-proxy's nftables mode makes them:
//! a table of its own (`ip kubeforge-proxy`) whose `services` chain looks
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

/// The proxy's nftables table (family `ip`).
pub const TABLE: &str = "kubeforge-proxy";
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
    /// Ready endpoints: (address, target port).
    pub endpoints: Vec<(String, u16)>,
}

/// The service ports of `services` with the ready endpoints of `slices`
/// (kube-proxy's service and endpoints change trackers, whole).
pub fn service_ports(services: &[Service], slices: &[EndpointSlice]) -> Vec<ServicePort> {
    let mut out = Vec::new();
    for svc in services {
        let Some(spec) = &svc.spec else { continue };
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        if ip.is_empty() || ip == "None" || ip.contains(':') {
            continue;
        }
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
                        endpoints.push((a.clone(), tp));
                    }
                }
            }
            endpoints.sort();
            endpoints.dedup();
            let Ok(port) = u16::try_from(p.port) else {
                continue;
            };
            out.push(ServicePort {
                id: format!("{ns}/{name}:{port_name}"),
                ip: ip.clone(),
                protocol,
                port,
                endpoints,
            });
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id).then(a.port.cmp(&b.port)));
    out
}

/// The nftables transaction that replaces the proxy's table with one for
/// `ports`.
pub fn ruleset(ports: &[ServicePort]) -> String {
    let mut t = String::new();
    // Create (if missing), delete, then define: one atomic replacement.
    let _ = writeln!(
        t,
        "table ip {TABLE} {{}}\ndelete table ip {TABLE}\ntable ip {TABLE} {{"
    );
    let mut map = Vec::new();
    let mut chains = String::new();
    let mut rejects = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let key = format!("{} . {} . {}", p.ip, p.protocol, p.port);
        if p.endpoints.is_empty() {
            rejects.push(key);
            continue;
        }
        map.push(format!("{key} : goto svc-{i}"));
        let _ = writeln!(
            chains,
            "\tchain svc-{i} {{\n\t\tcomment \"{}\"",
            p.id.replace('"', "")
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
    t.push_str(&chains);
    let _ = writeln!(
        t,
        "\tchain services {{\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t}}\n\
         \tchain nat-prerouting {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}}\n\
         \tchain nat-output {{\n\t\ttype nat hook output priority -100; policy accept;\n\t\tjump services\n\t}}\n\
         \tchain nat-postrouting {{\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tmeta mark & 0x4000 == 0x4000 meta mark set meta mark & 0xffffbfff masquerade\n\t}}\n\
         \tchain filter-output {{\n\t\ttype filter hook output priority filter; policy accept;\n\t\tip daddr {SERVICE_CIDR} reject\n\t}}\n\
         \tchain filter-forward {{\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tip daddr {SERVICE_CIDR} reject\n\t}}\n\
         }}"
    );
    t
}

fn apply(text: &str) -> Result<(), NodeError> {
    use std::io::Write;
    let program = crate::host::find_program("nft", "nftables")?;
    let mut child = std::process::Command::new(program)
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| NodeError::io("running nft", e))?;
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(text.as_bytes())
            .map_err(|e| NodeError::io("writing to nft", e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| NodeError::io("running nft", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NodeError::io(
            "nft -f (the Service rules)",
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        ))
    }
}

/// A running proxy.
pub struct Proxy {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Watch Services and EndpointSlices through `client` and keep the
    /// table in step (installed empty at once).
    pub fn start(client: kube::Client) -> Result<Proxy, NodeError> {
        apply(&ruleset(&[]))?;
        let stop = CancellationToken::new();
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
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut last = String::new();
            loop {
                tokio::select! {
                    _ = changed.notified() => {}
                    _ = token.cancelled() => break,
                }
                // Let a burst of events settle into one rebuild.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let svcs: Vec<Service> = services
                    .lock()
                    .map(|m| m.values().cloned().collect())
                    .unwrap_or_default();
                let eps: Vec<EndpointSlice> = slices
                    .lock()
                    .map(|m| m.values().cloned().collect())
                    .unwrap_or_default();
                let text = ruleset(&service_ports(&svcs, &eps));
                if text != last {
                    match apply(&text) {
                        Ok(()) => last = text,
                        Err(e) => tracing::warn!(error = %e, "cannot write the Service rules"),
                    }
                }
            }
            for t in tasks {
                t.abort();
            }
        });
        Ok(Proxy { stop, task })
    }

    /// Stop and remove the table.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
        let _ = apply(&format!("table ip {TABLE} {{}}\ndelete table ip {TABLE}\n"));
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
        let rules = ruleset(&ports);
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
}
