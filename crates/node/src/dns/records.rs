//! The cluster zone as data: every name the Kubernetes DNS specification
//! gives a Service, built whole from Services and EndpointSlices, and the
//! answer to one question. Pure (no sockets, no clock beyond the SOA
//! serial), so the rules are unit-tested without a server.
//!
//! Edge behaviour follows CoreDNS's kubernetes plugin: a headless Service
//! with no ready endpoint is NXDOMAIN (the specification says so), an
//! endpoint without a hostname is named by its address with dashes
//! (`10-244-0-5`), SRV records have priority 0 and weight 100 shared
//! equally, `a-b-c-d.<ns>.pod.<zone>` answers any well-formed address
//! (CoreDNS's `pods insecure`, the mode kubeadm configures), and names that
//! only lead to others (`<ns>.svc.<zone>`) exist with no data.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The TTL of every answer, in seconds (the kubernetes plugin's default).
pub const TTL: u32 = 5;
/// The schema version served as `dns-version.<zone>` TXT.
pub const SCHEMA_VERSION: &str = "1.1.0";
/// How many in-zone CNAMEs an answer follows before it stops.
const MAX_CHAIN: usize = 8;

/// A zone that cannot be served.
#[derive(Debug, thiserror::Error)]
#[error("cluster DNS zone {zone:?}: {reason}")]
pub struct ZoneError {
    /// The zone as configured.
    pub zone: String,
    /// Why it is not a domain name.
    pub reason: String,
}

/// The answer to one question in the cluster zone, before it is put on
/// the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// NOERROR (with or without data) or NXDOMAIN.
    pub code: ResponseCode,
    /// The answer section.
    pub answers: Vec<Record>,
    /// The authority section: the zone's SOA for negative answers.
    pub authorities: Vec<Record>,
    /// The additional section: addresses of SRV targets.
    pub additionals: Vec<Record>,
    /// A CNAME target outside the zone still to be resolved (upstream,
    /// when there is one) for the question's type.
    pub chase: Option<Name>,
}

/// What one name holds.
#[derive(Clone, Debug, Default)]
struct Node {
    data: Vec<RData>,
}

impl Node {
    fn push(&mut self, data: RData) {
        if !self.data.contains(&data) {
            self.data.push(data);
        }
    }
}

/// Every record of the cluster zone and the reverse names of its
/// addresses, built from the watched Services and EndpointSlices.
#[derive(Clone, Debug)]
pub struct Records {
    zone: Name,
    pod_zone: Name,
    soa: Record,
    nodes: HashMap<Name, Node>,
    /// Names with no data of their own under which others exist.
    empty_non_terminals: HashSet<Name>,
    /// `…in-addr.arpa.` / `…ip6.arpa.` → the names it points to.
    reverse: HashMap<Name, Vec<Name>>,
}

/// `zone` as a fully qualified, lowercase name.
pub fn parse_zone(zone: &str) -> Result<Name, ZoneError> {
    let err = |reason: String| ZoneError {
        zone: zone.to_string(),
        reason,
    };
    let trimmed = zone.trim_end_matches('.');
    if trimmed.is_empty() {
        return Err(err("the zone is empty".into()));
    }
    let mut name = Name::from_ascii(trimmed).map_err(|e| err(e.to_string()))?;
    name.set_fqdn(true);
    Ok(name.to_lowercase())
}

fn label(s: &str) -> Option<Name> {
    Name::from_labels([s.as_bytes()]).ok()
}

/// `labels…` followed by `base`.
fn under(labels: &[&str], base: &Name) -> Option<Name> {
    let mut name = Name::from_labels(labels.iter().map(|l| l.as_bytes())).ok()?;
    name.set_fqdn(false);
    name.append_domain(base).ok()
}

/// An address as a DNS label, as CoreDNS names endpoints without a
/// hostname: `10-244-0-5`, `fd00--5`.
fn dashed(ip: &IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// The address in a dashed label (`10-244-0-5`, `fd00--5`).
fn undashed(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 && !label.contains("--") {
        label
            .replace('-', ".")
            .parse::<Ipv4Addr>()
            .ok()
            .map(IpAddr::V4)
    } else {
        label
            .replace('-', ":")
            .parse::<Ipv6Addr>()
            .ok()
            .map(IpAddr::V6)
    }
}

fn address(ip: IpAddr) -> RData {
    match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    }
}

fn service_port_protocol(protocol: Option<&str>) -> String {
    format!("_{}", protocol.unwrap_or("TCP").to_ascii_lowercase())
}

/// The ready endpoints of a Service's slices: (address, hostname or
/// none, slice ports as (name, protocol, port)).
type Endpoint = (IpAddr, Option<String>, Vec<(String, String, u16)>);

fn ready_endpoints(ns: &str, name: &str, slices: &[&EndpointSlice]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for s in slices {
        if s.metadata.namespace.as_deref() != Some(ns)
            || s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .map(String::as_str)
                != Some(name)
            || !matches!(s.address_type.as_str(), "IPv4" | "IPv6")
        {
            continue;
        }
        let ports: Vec<(String, String, u16)> = s
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p.name.clone().unwrap_or_default(),
                    service_port_protocol(p.protocol.as_deref()),
                    u16::try_from(p.port?).ok()?,
                ))
            })
            .collect();
        for e in &s.endpoints {
            // A missing condition means ready (the API's documented reading);
            // publishNotReadyAddresses is already folded in by the slice
            // controller.
            if !e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true) {
                continue;
            }
            let hostname = e.hostname.clone().filter(|h| label(h).is_some());
            for a in &e.addresses {
                if let Ok(ip) = a.parse::<IpAddr>() {
                    out.push((ip, hostname.clone(), ports.clone()));
                }
            }
        }
    }
    out
}

impl Records {
    /// An empty zone (nothing but `dns-version` and the apex).
    pub fn empty(zone: &str) -> Result<Records, ZoneError> {
        Records::build(zone, &[], &[])
    }

    /// The zone for `services` and `slices`.
    pub fn build(
        zone: &str,
        services: &[Service],
        slices: &[EndpointSlice],
    ) -> Result<Records, ZoneError> {
        let zone = parse_zone(zone)?;
        let bad = |reason: &str| ZoneError {
            zone: zone.to_ascii(),
            reason: reason.to_string(),
        };
        let svc_zone = under(&["svc"], &zone).ok_or_else(|| bad("too long"))?;
        let pod_zone = under(&["pod"], &zone).ok_or_else(|| bad("too long"))?;
        let ns_name = under(&["ns", "dns"], &zone).ok_or_else(|| bad("too long"))?;
        let hostmaster = under(&["hostmaster"], &zone).ok_or_else(|| bad("too long"))?;
        let serial = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        let soa = Record::from_rdata(
            zone.clone(),
            TTL,
            RData::SOA(SOA::new(
                ns_name, hostmaster, serial, 7200, 1800, 86400, TTL,
            )),
        );
        let mut r = Records {
            zone: zone.clone(),
            pod_zone,
            soa,
            nodes: HashMap::new(),
            empty_non_terminals: HashSet::new(),
            reverse: HashMap::new(),
        };
        if let Some(version) = under(&["dns-version"], &zone) {
            r.node(version)
                .push(RData::TXT(TXT::new(vec![SCHEMA_VERSION.to_string()])));
        }

        // Slices by (namespace, service) so each Service looks at its own.
        let mut by_service: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
        for s in slices {
            let Some(svc) = s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
            else {
                continue;
            };
            let ns = s.metadata.namespace.as_deref().unwrap_or_default();
            by_service.entry((ns, svc.as_str())).or_default().push(s);
        }

        for svc in services {
            let (Some(name), Some(ns), Some(spec)) = (
                svc.metadata.name.as_deref(),
                svc.metadata.namespace.as_deref(),
                svc.spec.as_ref(),
            ) else {
                continue;
            };
            let Some(base) = under(&[name, ns], &svc_zone) else {
                continue;
            };
            if spec.type_.as_deref() == Some("ExternalName") {
                let target = spec.external_name.as_deref().unwrap_or_default();
                let target = target.trim_end_matches('.');
                // An address is not a name (CoreDNS serves nothing for it).
                if let Ok(mut t) = Name::from_ascii(target)
                    && !target.is_empty()
                    && target.parse::<IpAddr>().is_err()
                {
                    t.set_fqdn(true);
                    r.node(base).push(RData::CNAME(CNAME(t)));
                }
                continue;
            }
            let mut ips: Vec<String> = spec.cluster_ips.clone().unwrap_or_default();
            if ips.is_empty()
                && let Some(ip) = &spec.cluster_ip
            {
                ips.push(ip.clone());
            }
            let headless = ips.iter().any(|i| i == "None");
            let named_ports: Vec<(String, String, u16)> = spec
                .ports
                .iter()
                .flatten()
                .filter_map(|p| {
                    let n = p.name.as_deref().filter(|n| !n.is_empty())?;
                    Some((
                        n.to_string(),
                        service_port_protocol(p.protocol.as_deref()),
                        u16::try_from(p.port).ok()?,
                    ))
                })
                .collect();
            if !headless {
                let addrs: Vec<IpAddr> = ips.iter().filter_map(|i| i.parse().ok()).collect();
                if addrs.is_empty() {
                    continue; // no ClusterIP allocated yet
                }
                for ip in &addrs {
                    r.node(base.clone()).push(address(*ip));
                    r.add_reverse(*ip, base.clone());
                }
                for (port, proto, number) in &named_ports {
                    if let Some(srv) = under(&[&format!("_{port}"), proto], &base) {
                        r.node(srv)
                            .push(RData::SRV(SRV::new(0, 100, *number, base.clone())));
                    }
                }
                continue;
            }
            // Headless: the ready endpoints themselves.
            let mine = by_service.get(&(ns, name)).cloned().unwrap_or_default();
            for (ip, hostname, ports) in ready_endpoints(ns, name, &mine) {
                let host = hostname.unwrap_or_else(|| dashed(&ip));
                let Some(host_name) = under(&[&host], &base) else {
                    continue;
                };
                r.node(base.clone()).push(address(ip));
                r.node(host_name.clone()).push(address(ip));
                r.add_reverse(ip, host_name.clone());
                for (port, proto, number) in &ports {
                    if port.is_empty() {
                        continue;
                    }
                    if let Some(srv) = under(&[&format!("_{port}"), proto], &base) {
                        r.node(srv)
                            .push(RData::SRV(SRV::new(0, 100, *number, host_name.clone())));
                    }
                }
            }
        }

        // Weights shared equally within each SRV set (CoreDNS: 100/N).
        for node in r.nodes.values_mut() {
            let n = node
                .data
                .iter()
                .filter(|d| matches!(d, RData::SRV(_)))
                .count();
            if n > 1 {
                let weight = u16::try_from((100 / n).max(1)).unwrap_or(1);
                for d in &mut node.data {
                    if let RData::SRV(s) = d {
                        *s = SRV::new(s.priority, weight, s.port, s.target.clone());
                    }
                }
            }
            if node.data.len() > 1 {
                node.data.sort_by_key(|d| d.to_string());
            }
        }
        for names in r.reverse.values_mut() {
            names.sort();
            names.dedup();
        }
        let mut ents = HashSet::new();
        for name in r.nodes.keys() {
            let mut parent = name.base_name();
            // Once a parent is known, so are all of its own.
            while parent.num_labels() > r.zone.num_labels() && ents.insert(parent.clone()) {
                parent = parent.base_name();
            }
        }
        ents.insert(r.pod_zone.clone());
        r.empty_non_terminals = ents;
        Ok(r)
    }

    fn node(&mut self, name: Name) -> &mut Node {
        self.nodes.entry(name).or_default()
    }

    fn add_reverse(&mut self, ip: IpAddr, target: Name) {
        self.reverse.entry(Name::from(ip)).or_default().push(target);
    }

    /// The zone served (fully qualified, lowercase).
    pub fn zone(&self) -> &Name {
        &self.zone
    }

    /// How many names hold data (for logs and benchmarks).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the zone holds nothing but its fixed names.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// Whether `name` is answered here: in the zone, or a reverse name of
    /// an address this zone knows. Anything else is forwarded (or refused).
    pub fn is_authoritative(&self, name: &Name) -> bool {
        self.zone.zone_of(name) || self.reverse.contains_key(name)
    }

    /// The answer to `name`/`qtype`, or `None` when the name is not
    /// answered here (see [`Records::is_authoritative`]).
    pub fn lookup(&self, name: &Name, qtype: RecordType) -> Option<Answer> {
        if let Some(targets) = self.reverse.get(name) {
            let answers = if matches!(qtype, RecordType::PTR | RecordType::ANY) {
                targets
                    .iter()
                    .map(|t| Record::from_rdata(name.clone(), TTL, RData::PTR(PTR(t.clone()))))
                    .collect()
            } else {
                Vec::new()
            };
            return Some(Answer {
                code: ResponseCode::NoError,
                answers,
                authorities: Vec::new(),
                additionals: Vec::new(),
                chase: None,
            });
        }
        if !self.zone.zone_of(name) {
            return None;
        }
        let mut answer = Answer {
            code: ResponseCode::NoError,
            answers: Vec::new(),
            authorities: Vec::new(),
            additionals: Vec::new(),
            chase: None,
        };
        let mut current = name.clone();
        for _ in 0..MAX_CHAIN {
            match self.data_at(&current) {
                Some(data) => {
                    let cname = data.iter().find_map(|d| match d {
                        RData::CNAME(c) => Some(c.0.clone()),
                        _ => None,
                    });
                    if let Some(target) = cname {
                        answer.answers.push(Record::from_rdata(
                            current.clone(),
                            TTL,
                            RData::CNAME(CNAME(target.clone())),
                        ));
                        if qtype == RecordType::CNAME {
                            return Some(answer);
                        }
                        if self.zone.zone_of(&target) {
                            current = target;
                            continue;
                        }
                        answer.chase = Some(target);
                        return Some(answer);
                    }
                    for d in data {
                        if qtype == RecordType::ANY || d.record_type() == qtype {
                            answer.answers.push(Record::from_rdata(
                                current.clone(),
                                TTL,
                                d.clone(),
                            ));
                        }
                    }
                    if qtype == RecordType::SRV {
                        self.add_srv_addresses(&mut answer);
                    }
                }
                None if current == self.zone => {
                    if matches!(qtype, RecordType::SOA | RecordType::ANY) {
                        let mut soa = self.soa.clone();
                        soa.name = current.clone();
                        answer.answers.push(soa);
                    }
                }
                // Names that lead to others exist with no data; so does
                // every `<ns>.pod.<zone>` (CoreDNS: NODATA for a namespace).
                None if self.empty_non_terminals.contains(&current)
                    || (self.pod_zone.zone_of(&current)
                        && current.num_labels() == self.pod_zone.num_labels() + 1) => {}
                // RFC 6604: the code is that of the last name in a chain.
                None => answer.code = ResponseCode::NXDomain,
            }
            break;
        }
        if answer.answers.is_empty()
            || (answer.code == ResponseCode::NXDomain)
            || (answer
                .answers
                .iter()
                .all(|r| r.record_type() == RecordType::CNAME)
                && qtype != RecordType::CNAME
                && answer.chase.is_none())
        {
            answer.authorities.push(self.soa.clone());
        }
        Some(answer)
    }

    /// What `name` holds, with `a-b-c-d.<ns>.pod.<zone>` computed.
    fn data_at(&self, name: &Name) -> Option<Vec<RData>> {
        if let Some(node) = self.nodes.get(name) {
            return Some(node.data.clone());
        }
        // <dashed-ip>.<ns>.pod.<zone>
        if self.pod_zone.zone_of(name) && name.num_labels() == self.pod_zone.num_labels() + 2 {
            let first = name.iter().next()?;
            let ip = undashed(std::str::from_utf8(first).ok()?)?;
            return Some(vec![address(ip)]);
        }
        None
    }

    fn add_srv_addresses(&self, answer: &mut Answer) {
        let mut seen = HashSet::new();
        for r in &answer.answers {
            if let RData::SRV(srv) = &r.data
                && seen.insert(srv.target.clone())
                && let Some(node) = self.nodes.get(&srv.target)
            {
                for d in &node.data {
                    if matches!(d, RData::A(_) | RData::AAAA(_)) {
                        answer.additionals.push(Record::from_rdata(
                            srv.target.clone(),
                            TTL,
                            d.clone(),
                        ));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    fn n(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn zone() -> Records {
        let services = [
            svc(json!({"metadata": {"name": "web", "namespace": "d"},
                "spec": {"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00::20"],
                    "ports": [{"name": "http", "port": 80}, {"port": 81}, {"name": "dns", "port": 53, "protocol": "UDP"}]}})),
            svc(json!({"metadata": {"name": "db", "namespace": "d"},
                "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}})),
            svc(json!({"metadata": {"name": "empty", "namespace": "d"},
                "spec": {"clusterIP": "None"}})),
            svc(json!({"metadata": {"name": "ext", "namespace": "d"},
                "spec": {"type": "ExternalName", "externalName": "example.org"}})),
            svc(json!({"metadata": {"name": "ipext", "namespace": "d"},
                "spec": {"type": "ExternalName", "externalName": "192.0.2.7"}})),
            svc(json!({"metadata": {"name": "alias", "namespace": "d"},
                "spec": {"type": "ExternalName", "externalName": "web.d.svc.cluster.local"}})),
        ];
        let slices = [slice(json!({"metadata": {"name": "db-1", "namespace": "d",
            "labels": {"kubernetes.io/service-name": "db"}}, "addressType": "IPv4",
            "ports": [{"name": "pg", "port": 5433, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.244.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.244.1.7"]},
                {"addresses": ["10.244.2.9"], "conditions": {"ready": false}}]}))];
        Records::build("cluster.local", &services, &slices).unwrap()
    }

    fn rdata(a: &Answer) -> Vec<String> {
        a.answers.iter().map(|r| r.data.to_string()).collect()
    }

    #[test]
    fn cluster_ip_services_have_a_aaaa_srv_and_ptr() {
        let z = zone();
        let a = z
            .lookup(&n("web.d.svc.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(a.code, ResponseCode::NoError);
        assert_eq!(rdata(&a), ["10.96.0.20"]);
        assert_eq!(a.answers[0].ttl, TTL);
        let aaaa = z
            .lookup(&n("WEB.d.svc.Cluster.Local."), RecordType::AAAA)
            .unwrap();
        assert_eq!(rdata(&aaaa), ["fd00::20"], "case-insensitive");
        assert_eq!(
            aaaa.answers[0].name.to_ascii(),
            "WEB.d.svc.Cluster.Local.",
            "the owner is the name as asked"
        );
        let srv = z
            .lookup(&n("_http._tcp.web.d.svc.cluster.local."), RecordType::SRV)
            .unwrap();
        assert_eq!(rdata(&srv), ["0 100 80 web.d.svc.cluster.local."]);
        assert_eq!(srv.additionals.len(), 2, "A and AAAA of the target");
        let udp = z
            .lookup(&n("_dns._udp.web.d.svc.cluster.local."), RecordType::SRV)
            .unwrap();
        assert_eq!(rdata(&udp), ["0 100 53 web.d.svc.cluster.local."]);
        // The unnamed port has no SRV; _tcp under the service is an empty non-terminal.
        let tcp = z
            .lookup(&n("_tcp.web.d.svc.cluster.local."), RecordType::SRV)
            .unwrap();
        assert_eq!(tcp.code, ResponseCode::NoError);
        assert!(tcp.answers.is_empty());
        let ptr = z
            .lookup(&n("20.0.96.10.in-addr.arpa."), RecordType::PTR)
            .unwrap();
        assert_eq!(rdata(&ptr), ["web.d.svc.cluster.local."]);
        let ptr6 = z
            .lookup(
                &Name::from("fd00::20".parse::<IpAddr>().unwrap()),
                RecordType::PTR,
            )
            .unwrap();
        assert_eq!(rdata(&ptr6), ["web.d.svc.cluster.local."]);
    }

    #[test]
    fn headless_services_answer_their_ready_endpoints() {
        let z = zone();
        let a = z
            .lookup(&n("db.d.svc.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(rdata(&a), ["10.244.0.5", "10.244.1.7"], "unready left out");
        let host = z
            .lookup(&n("db-0.db.d.svc.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(rdata(&host), ["10.244.0.5"]);
        let dashed = z
            .lookup(&n("10-244-1-7.db.d.svc.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(rdata(&dashed), ["10.244.1.7"]);
        let srv = z
            .lookup(&n("_pg._tcp.db.d.svc.cluster.local."), RecordType::SRV)
            .unwrap();
        assert_eq!(
            rdata(&srv),
            [
                "0 50 5433 10-244-1-7.db.d.svc.cluster.local.",
                "0 50 5433 db-0.db.d.svc.cluster.local."
            ],
            "the endpoint's port, weights shared"
        );
        assert_eq!(srv.additionals.len(), 2);
        let ptr = z
            .lookup(&n("5.0.244.10.in-addr.arpa."), RecordType::PTR)
            .unwrap();
        assert_eq!(rdata(&ptr), ["db-0.db.d.svc.cluster.local."]);
        // No ready endpoint: NXDOMAIN, as the specification says.
        let empty = z
            .lookup(&n("empty.d.svc.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(empty.code, ResponseCode::NXDomain);
        assert_eq!(empty.authorities[0].record_type(), RecordType::SOA);
        assert!(
            z.lookup(&n("9.2.244.10.in-addr.arpa."), RecordType::PTR)
                .is_none(),
            "an unready address is not ours: forwarded"
        );
    }

    #[test]
    fn external_names_are_cnames() {
        let z = zone();
        let a = z
            .lookup(&n("ext.d.svc.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(rdata(&a), ["example.org."]);
        assert_eq!(a.chase, Some(n("example.org.")));
        assert!(a.authorities.is_empty());
        let c = z
            .lookup(&n("ext.d.svc.cluster.local."), RecordType::CNAME)
            .unwrap();
        assert_eq!(c.chase, None);
        // A target in the zone is followed here.
        let alias = z
            .lookup(&n("alias.d.svc.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(rdata(&alias), ["web.d.svc.cluster.local.", "10.96.0.20"]);
        assert_eq!(alias.chase, None);
        // An address as externalName is no name: nothing is served (as CoreDNS).
        let ip = z
            .lookup(&n("ipext.d.svc.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(ip.code, ResponseCode::NXDomain);
    }

    #[test]
    fn fixed_names_pods_and_negative_answers() {
        let z = zone();
        let v = z
            .lookup(&n("dns-version.cluster.local."), RecordType::TXT)
            .unwrap();
        assert_eq!(rdata(&v), ["1.1.0"]);
        let pod = z
            .lookup(&n("10-244-0-9.any.pod.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(rdata(&pod), ["10.244.0.9"]);
        let pod6 = z
            .lookup(&n("fd00--9.any.pod.cluster.local."), RecordType::AAAA)
            .unwrap();
        assert_eq!(rdata(&pod6), ["fd00::9"]);
        let bad = z
            .lookup(&n("10-244-0-999.any.pod.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(bad.code, ResponseCode::NXDomain);
        let nx = z
            .lookup(&n("nope.d.svc.cluster.local."), RecordType::A)
            .unwrap();
        assert_eq!(nx.code, ResponseCode::NXDomain);
        assert_eq!(nx.authorities.len(), 1);
        assert_eq!(nx.authorities[0].ttl, TTL);
        // An existing name with another type: NODATA with the SOA.
        let nodata = z
            .lookup(&n("web.d.svc.cluster.local."), RecordType::MX)
            .unwrap();
        assert_eq!(nodata.code, ResponseCode::NoError);
        assert!(nodata.answers.is_empty());
        assert_eq!(nodata.authorities[0].record_type(), RecordType::SOA);
        for ent in [
            "d.svc.cluster.local.",
            "svc.cluster.local.",
            "pod.cluster.local.",
            "any.pod.cluster.local.",
        ] {
            let a = z.lookup(&n(ent), RecordType::A).unwrap();
            assert_eq!(a.code, ResponseCode::NoError, "{ent}");
            assert!(a.answers.is_empty(), "{ent}");
        }
        let soa = z.lookup(&n("cluster.local."), RecordType::SOA).unwrap();
        assert_eq!(soa.answers[0].record_type(), RecordType::SOA);
        assert!(z.lookup(&n("example.org."), RecordType::A).is_none());
        assert!(!z.is_authoritative(&n("1.1.1.1.in-addr.arpa.")));
    }

    #[test]
    fn zones_are_checked() {
        assert!(Records::empty("").is_err());
        assert!(Records::empty("a..b").is_err());
        let z = Records::empty("Example.Test.").unwrap();
        assert_eq!(z.zone().to_ascii(), "example.test.");
    }
}
