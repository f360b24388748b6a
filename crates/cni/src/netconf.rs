//! The network configuration read from stdin: the reference bridge
//! plugin's fields, host-local IPAM's fields, and the runtime's additions
//! (`prevResult`, `cni.dev/valid-attachments`). [`parse_netconf`] never
//! panics, whatever the bytes, so it is a fuzz target.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::CniError;
use crate::ip::{self, IpPrefix};
use crate::result::{Dns, Route};

/// The bridge default name, as the reference plugin's.
pub const DEFAULT_BRIDGE: &str = "cni0";
/// host-local's default data directory.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// One network configuration as the plugin sees it (after the runtime has
/// copied `name` and `cniVersion` from a conflist).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConf {
    /// The spec version the runtime speaks; decides the result's format.
    #[serde(default)]
    pub cni_version: String,
    /// The network's name: the IPAM store's directory.
    #[serde(default)]
    pub name: String,
    /// The plugin's file name (`kubeforge-cni`).
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    /// The bridge's name (default `cni0`).
    #[serde(default, rename = "bridge")]
    pub bridge_name: Option<String>,
    /// Give the bridge the gateway address and turn on IP forwarding.
    #[serde(default, rename = "isGateway")]
    pub is_gateway: bool,
    /// Also add a default route via the gateway in the container (implies `isGateway`).
    #[serde(default, rename = "isDefaultGateway")]
    pub is_default_gateway: bool,
    /// Masquerade traffic leaving the subnet (not supported: error code 2 when true).
    #[serde(default)]
    pub ip_masq: bool,
    /// MTU of the bridge and both veth ends (kernel default when absent).
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Let traffic leave a bridge port it came in on (hairpin).
    #[serde(default)]
    pub hairpin_mode: bool,
    /// Put the bridge in promiscuous mode.
    #[serde(default)]
    pub promisc_mode: bool,
    /// Address management; absent means a layer-2 only attachment.
    #[serde(default)]
    pub ipam: Option<IpamConf>,
    /// DNS settings copied into the result.
    #[serde(default)]
    pub dns: Option<Dns>,
    /// The previous plugin's result (ADD in a conflist) or the ADD result (CHECK, DEL).
    #[serde(default)]
    pub prev_result: Option<serde_json::Value>,
    /// GC: the attachments still in use; everything else is released.
    #[serde(default, rename = "cni.dev/valid-attachments")]
    pub valid_attachments: Option<Vec<Attachment>>,
}

/// An attachment named in `cni.dev/valid-attachments`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// `CNI_CONTAINERID` of the attachment.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// `CNI_IFNAME` of the attachment.
    pub ifname: String,
}

/// The `ipam` section, host-local's format.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpamConf {
    /// Must be `host-local` (handled in-process).
    #[serde(rename = "type", default)]
    pub ipam_type: String,
    /// Range sets: one address is allocated from each outer entry.
    #[serde(default)]
    pub ranges: Vec<Vec<RangeConf>>,
    /// The legacy single range: `subnet` (with optional start/end/gateway) at the top level.
    #[serde(default)]
    pub subnet: Option<String>,
    /// Legacy single range: first allocatable address.
    #[serde(default)]
    pub range_start: Option<String>,
    /// Legacy single range: last allocatable address.
    #[serde(default)]
    pub range_end: Option<String>,
    /// Legacy single range: gateway.
    #[serde(default)]
    pub gateway: Option<String>,
    /// Routes returned in the result and set in the container.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Where allocations are stored (default `/var/lib/cni/networks`).
    #[serde(default)]
    pub data_dir: Option<String>,
}

/// One range of a range set, as written in the netconf.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeConf {
    /// The subnet, `10.250.0.0/24`; host bits must be zero.
    pub subnet: String,
    /// First allocatable address (default: network + 1).
    #[serde(default)]
    pub range_start: Option<String>,
    /// Last allocatable address (default: broadcast - 1 for IPv4, the last address for IPv6).
    #[serde(default)]
    pub range_end: Option<String>,
    /// The gateway (default: network + 1); never handed out.
    #[serde(default)]
    pub gateway: Option<String>,
}

/// A validated range: every address known and inside the subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The subnet (network address, prefix length).
    pub subnet: IpPrefix,
    /// First allocatable address.
    pub start: IpAddr,
    /// Last allocatable address.
    pub end: IpAddr,
    /// The gateway.
    pub gateway: IpAddr,
}

impl Range {
    /// Whether `ip` is allocatable from this range (inside start..=end).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.subnet.contains(ip)
            && ip::to_u128(ip) >= ip::to_u128(self.start)
            && ip::to_u128(ip) <= ip::to_u128(self.end)
    }
}

/// A validated netconf: what ADD, DEL, CHECK, GC and STATUS work from.
#[derive(Debug, Clone)]
pub struct Network {
    /// The raw netconf.
    pub conf: NetConf,
    /// The bridge's name.
    pub bridge: String,
    /// Whether the bridge gets the gateway addresses.
    pub is_gateway: bool,
    /// Range sets, empty without IPAM.
    pub range_sets: Vec<Vec<Range>>,
    /// The IPAM store directory: `<dataDir>/<name>`.
    pub store_dir: PathBuf,
}

/// Decodes a netconf; errors are code 6 (not JSON of the right shape).
pub fn parse_netconf(bytes: &[u8]) -> Result<NetConf, CniError> {
    serde_json::from_slice(bytes).map_err(|e| CniError::Decode(e.to_string()))
}

/// Whether `name` is a valid network name (the spec's rule).
pub fn valid_network_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Whether `name` is a valid Linux interface name (1-15 bytes, no `/`, `:` or whitespace, not `.`/`..`).
pub fn valid_interface_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0)
}

/// Validates a decoded netconf into a [`Network`] (code 2 or 7 on failure).
pub fn validate(conf: NetConf) -> Result<Network, CniError> {
    if !valid_network_name(&conf.name) {
        return Err(CniError::InvalidConfig(format!(
            "invalid network name {:?}",
            conf.name
        )));
    }
    let bridge = conf
        .bridge_name
        .clone()
        .unwrap_or_else(|| DEFAULT_BRIDGE.to_string());
    if !valid_interface_name(&bridge) {
        return Err(CniError::InvalidConfig(format!(
            "invalid bridge name {bridge:?}"
        )));
    }
    if conf.ip_masq {
        return Err(CniError::UnsupportedField {
            field: "ipMasq".into(),
            value: "true".into(),
        });
    }
    if let Some(mtu) = conf.mtu
        && !(68..=65535).contains(&mtu)
    {
        return Err(CniError::InvalidConfig(format!(
            "invalid mtu {mtu}: must be 68-65535"
        )));
    }
    let mut range_sets = Vec::new();
    let mut data_dir = PathBuf::from(DEFAULT_DATA_DIR);
    if let Some(ipam) = &conf.ipam {
        if ipam.ipam_type != "host-local" {
            return Err(CniError::UnsupportedField {
                field: "ipam.type".into(),
                value: ipam.ipam_type.clone(),
            });
        }
        range_sets = range_sets_of(ipam)?;
        if let Some(dir) = &ipam.data_dir {
            data_dir = PathBuf::from(dir);
        }
        for r in &ipam.routes {
            if let Some(gw) = r.gw
                && gw.is_ipv4() != r.dst.is_ipv4()
            {
                return Err(CniError::InvalidConfig(format!(
                    "route {} has a gateway of another family",
                    r.dst
                )));
            }
        }
    }
    let store_dir = data_dir.join(&conf.name);
    Ok(Network {
        bridge,
        is_gateway: conf.is_gateway || conf.is_default_gateway,
        range_sets,
        store_dir,
        conf,
    })
}

fn range_sets_of(ipam: &IpamConf) -> Result<Vec<Vec<Range>>, CniError> {
    let mut sets = ipam.ranges.clone();
    if let Some(subnet) = &ipam.subnet {
        sets.insert(
            0,
            vec![RangeConf {
                subnet: subnet.clone(),
                range_start: ipam.range_start.clone(),
                range_end: ipam.range_end.clone(),
                gateway: ipam.gateway.clone(),
            }],
        );
    }
    if sets.is_empty() {
        return Err(CniError::InvalidConfig(
            "ipam: no IP ranges specified".into(),
        ));
    }
    let mut out = Vec::with_capacity(sets.len());
    let mut all: Vec<Range> = Vec::new();
    for set in &sets {
        if set.is_empty() {
            return Err(CniError::InvalidConfig("ipam: empty range set".into()));
        }
        let mut ranges = Vec::with_capacity(set.len());
        for rc in set {
            let r = canonicalize(rc)?;
            if ranges
                .first()
                .is_some_and(|f: &Range| f.subnet.is_ipv4() != r.subnet.is_ipv4())
            {
                return Err(CniError::InvalidConfig(
                    "ipam: mixed address families in one range set".into(),
                ));
            }
            if let Some(o) = all.iter().find(|o| overlaps(o, &r)) {
                return Err(CniError::InvalidConfig(format!(
                    "ipam: range {}-{} overlaps {}-{}",
                    r.start, r.end, o.start, o.end
                )));
            }
            all.push(r);
            ranges.push(r);
        }
        out.push(ranges);
    }
    Ok(out)
}

fn overlaps(a: &Range, b: &Range) -> bool {
    a.subnet.is_ipv4() == b.subnet.is_ipv4()
        && ip::to_u128(a.start) <= ip::to_u128(b.end)
        && ip::to_u128(b.start) <= ip::to_u128(a.end)
}

fn parse_ip(field: &str, s: &str) -> Result<IpAddr, CniError> {
    s.parse()
        .map_err(|_| CniError::InvalidConfig(format!("ipam: invalid {field} {s:?}")))
}

/// host-local's canonicalization: defaults and bounds checks.
fn canonicalize(rc: &RangeConf) -> Result<Range, CniError> {
    let subnet: IpPrefix = rc
        .subnet
        .parse()
        .map_err(|_| CniError::InvalidConfig(format!("ipam: invalid subnet {:?}", rc.subnet)))?;
    if subnet.network() != subnet.addr {
        return Err(CniError::InvalidConfig(format!(
            "ipam: network {} has host bits set; the network address is {}",
            rc.subnet,
            subnet.network()
        )));
    }
    if subnet.prefix > ip::max_prefix(subnet.addr).saturating_sub(2) {
        return Err(CniError::InvalidConfig(format!(
            "ipam: network {} too small to allocate from",
            rc.subnet
        )));
    }
    let network = subnet.network();
    let first = ip::next(network);
    let last = if subnet.is_ipv4() {
        ip::from_u128(network, ip::to_u128(subnet.last()) - 1)
    } else {
        subnet.last()
    };
    let within = |field: &str, s: &Option<String>, default: IpAddr| -> Result<IpAddr, CniError> {
        match s {
            None => Ok(default),
            Some(s) => {
                let a = parse_ip(field, s)?;
                if !subnet.contains(a)
                    || ip::to_u128(a) < ip::to_u128(first)
                    || ip::to_u128(a) > ip::to_u128(last)
                {
                    return Err(CniError::InvalidConfig(format!(
                        "ipam: {field} {a} not in network {}",
                        rc.subnet
                    )));
                }
                Ok(a)
            }
        }
    };
    let start = within("rangeStart", &rc.range_start, first)?;
    let end = within("rangeEnd", &rc.range_end, last)?;
    if ip::to_u128(start) > ip::to_u128(end) {
        return Err(CniError::InvalidConfig(format!(
            "ipam: rangeStart {start} is after rangeEnd {end}"
        )));
    }
    let gateway = match &rc.gateway {
        None => first,
        Some(s) => {
            let g = parse_ip("gateway", s)?;
            if !subnet.contains(g) {
                return Err(CniError::InvalidConfig(format!(
                    "ipam: gateway {g} not in network {}",
                    rc.subnet
                )));
            }
            g
        }
    };
    Ok(Range {
        subnet,
        start,
        end,
        gateway,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn net(json: &str) -> Result<Network, CniError> {
        validate(parse_netconf(json.as_bytes())?)
    }

    #[test]
    fn parses_the_reference_fields() {
        let n = net(r#"{"cniVersion":"1.0.0","name":"kfnet","type":"kubeforge-cni","bridge":"kfcni0",
            "isDefaultGateway":true,"mtu":1400,"hairpinMode":true,"promiscMode":false,
            "ipam":{"type":"host-local","ranges":[[{"subnet":"10.250.0.0/24","rangeStart":"10.250.0.10","rangeEnd":"10.250.0.20"}]],
              "routes":[{"dst":"0.0.0.0/0"}],"dataDir":"/tmp/x"}}"#)
        .unwrap();
        assert_eq!(n.bridge, "kfcni0");
        assert!(n.is_gateway);
        assert_eq!(n.conf.mtu, Some(1400));
        assert!(n.conf.hairpin_mode);
        let r = n.range_sets[0][0];
        assert_eq!(r.start.to_string(), "10.250.0.10");
        assert_eq!(r.end.to_string(), "10.250.0.20");
        assert_eq!(r.gateway.to_string(), "10.250.0.1");
        assert_eq!(n.store_dir, PathBuf::from("/tmp/x/kfnet"));
    }

    #[test]
    fn defaults_like_host_local() {
        let n = net(r#"{"cniVersion":"0.4.0","name":"n","type":"kubeforge-cni","ipam":{"type":"host-local","subnet":"10.250.0.0/24"}}"#).unwrap();
        assert_eq!(n.bridge, "cni0");
        assert!(!n.is_gateway);
        let r = n.range_sets[0][0];
        assert_eq!(
            (r.start.to_string(), r.end.to_string()),
            ("10.250.0.1".into(), "10.250.0.254".into())
        );
        assert_eq!(n.store_dir, PathBuf::from("/var/lib/cni/networks/n"));
    }

    #[test]
    fn rejects_bad_configs_with_the_right_code() {
        let cases = [
            ("not json", 6),
            (r#"{"name":5}"#, 6),
            (r#"{"name":"bad name","type":"kubeforge-cni"}"#, 7),
            (r#"{"name":"n","bridge":"a-very-long-bridge-name"}"#, 7),
            (r#"{"name":"n","ipMasq":true}"#, 2),
            (r#"{"name":"n","ipam":{"type":"dhcp"}}"#, 2),
            (r#"{"name":"n","ipam":{"type":"host-local"}}"#, 7),
            (
                r#"{"name":"n","ipam":{"type":"host-local","subnet":"10.0.0.1/24"}}"#,
                7,
            ),
            (
                r#"{"name":"n","ipam":{"type":"host-local","subnet":"10.0.0.0/31"}}"#,
                7,
            ),
            (
                r#"{"name":"n","ipam":{"type":"host-local","subnet":"10.0.0.0/24","rangeStart":"10.0.1.1"}}"#,
                7,
            ),
            (
                r#"{"name":"n","ipam":{"type":"host-local","ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.0.0.0/25"}]]}}"#,
                7,
            ),
            (r#"{"name":"n","mtu":10}"#, 7),
        ];
        for (json, code) in cases {
            match net(json) {
                Err(e) => assert_eq!(e.code(), code, "{json}: {e}"),
                Ok(_) => panic!("{json} accepted"),
            }
        }
    }

    #[test]
    fn never_panics_on_garbage() {
        for bytes in [
            &b"\xff\xfe"[..],
            b"{",
            b"[]",
            b"null",
            b"{\"ipam\":{\"ranges\":[[{}]]}}",
            b"{\"ipam\":{\"routes\":[{\"dst\":\"x\"}]}}",
        ] {
            let _ = parse_netconf(bytes).and_then(validate);
        }
    }

    #[test]
    fn names() {
        assert!(valid_network_name("a.b_c-d"));
        assert!(!valid_network_name("-a"));
        assert!(!valid_network_name(""));
        assert!(valid_interface_name("eth0"));
        assert!(!valid_interface_name("a/b"));
        assert!(!valid_interface_name("0123456789abcdef"));
    }
}
