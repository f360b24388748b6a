//! The ADD result and its wire formats. One model (spec 1.1.0) inside;
//! [`CniResult::to_json`] writes it in the `cniVersion` the runtime asked
//! for (0.3.x/0.4.0 add `"version"` to every `ips` entry, 1.1.0 fields are
//! dropped below 1.1.0), and [`parse_result`] reads any of them back
//! (`prevResult`).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::CniError;
use crate::ip::IpPrefix;
use crate::version::SpecVersion;

/// A plugin result (`interfaces`, `ips`, `routes`, `dns`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct CniResult {
    /// Interfaces created or used: bridge, host veth, container interface.
    #[serde(default)]
    pub interfaces: Vec<Interface>,
    /// Addresses with their gateways and the interface they sit on.
    #[serde(default)]
    pub ips: Vec<IpConfig>,
    /// Routes set in the container.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// DNS settings for the container.
    #[serde(default)]
    pub dns: Dns,
}

/// An entry of `interfaces`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    /// Interface name.
    pub name: String,
    /// Hardware address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// MTU (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The netns path for interfaces inside the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// vhost-user socket path (1.1.0; passed through only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_path: Option<String>,
    /// PCI id (1.1.0; passed through only).
    #[serde(default, rename = "pciID", skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
}

/// An entry of `ips`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct IpConfig {
    /// The address with the subnet's prefix length.
    pub address: IpPrefix,
    /// The subnet's gateway.
    #[serde(default)]
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    #[serde(default)]
    pub interface: Option<usize>,
}

/// An entry of `routes` (also `ipam.routes` in the netconf).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    /// Destination.
    pub dst: IpPrefix,
    /// Next hop (default: the gateway of the same family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    /// Route MTU (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Advertised MSS (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    /// Metric (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Routing table (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// Scope (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
}

impl Route {
    /// A plain route: destination and optional next hop.
    pub fn new(dst: IpPrefix, gw: Option<IpAddr>) -> Self {
        Self {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

/// The `dns` section (netconf and result).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    /// Name servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// Local domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Search domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    /// Resolver options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_none()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// Reads a result in any supported version's format (`prevResult`); code 6 if it isn't one.
pub fn parse_result(value: &Value) -> Result<CniResult, CniError> {
    if value.get("ip4").is_some() || value.get("ip6").is_some() {
        return Err(CniError::Decode(
            "prevResult in the 0.2.0 format (ip4/ip6) is not supported".into(),
        ));
    }
    let r: CniResult = serde_json::from_value(value.clone())
        .map_err(|e| CniError::Decode(format!("prevResult: {e}")))?;
    for ip in &r.ips {
        if let Some(i) = ip.interface
            && i >= r.interfaces.len()
        {
            return Err(CniError::Decode(format!(
                "prevResult: ips interface index {i} out of range"
            )));
        }
    }
    Ok(r)
}

impl CniResult {
    /// The result in `version`'s wire format.
    pub fn to_json(&self, version: SpecVersion) -> Value {
        let v11 = version >= SpecVersion::V1_1_0;
        let interfaces: Vec<Value> = self
            .interfaces
            .iter()
            .map(|i| {
                let mut i = i.clone();
                if !v11 {
                    (i.mtu, i.socket_path, i.pci_id) = (None, None, None);
                }
                serde_json::to_value(i).unwrap_or(Value::Null)
            })
            .collect();
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|ip| {
                let mut m = Map::new();
                if version.ips_have_version() {
                    m.insert(
                        "version".into(),
                        json!(if ip.address.is_ipv4() { "4" } else { "6" }),
                    );
                }
                if let Some(i) = ip.interface {
                    m.insert("interface".into(), json!(i));
                }
                m.insert("address".into(), json!(ip.address.to_string()));
                if let Some(gw) = ip.gateway {
                    m.insert("gateway".into(), json!(gw.to_string()));
                }
                Value::Object(m)
            })
            .collect();
        let routes: Vec<Value> = self
            .routes
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if !v11 {
                    (r.mtu, r.advmss, r.priority, r.table, r.scope) =
                        (None, None, None, None, None);
                }
                serde_json::to_value(r).unwrap_or(Value::Null)
            })
            .collect();
        let mut out = Map::new();
        out.insert("cniVersion".into(), json!(version.as_str()));
        if !interfaces.is_empty() {
            out.insert("interfaces".into(), Value::Array(interfaces));
        }
        if !ips.is_empty() {
            out.insert("ips".into(), Value::Array(ips));
        }
        if !routes.is_empty() {
            out.insert("routes".into(), Value::Array(routes));
        }
        // libcni always writes `dns` (a struct under omitempty), so do we.
        out.insert(
            "dns".into(),
            serde_json::to_value(&self.dns).unwrap_or_else(|_| json!({})),
        );
        Value::Object(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> CniResult {
        CniResult {
            interfaces: vec![
                Interface {
                    name: "kfcni0".into(),
                    mac: Some("aa:bb:cc:dd:ee:ff".into()),
                    ..Default::default()
                },
                Interface {
                    name: "veth01234567".into(),
                    mac: Some("aa:bb:cc:dd:ee:01".into()),
                    ..Default::default()
                },
                Interface {
                    name: "eth0".into(),
                    mac: Some("aa:bb:cc:dd:ee:02".into()),
                    mtu: Some(1500),
                    sandbox: Some("/var/run/netns/x".into()),
                    ..Default::default()
                },
            ],
            ips: vec![IpConfig {
                address: "10.250.0.2/24".parse().unwrap(),
                gateway: Some("10.250.0.1".parse().unwrap()),
                interface: Some(2),
            }],
            routes: vec![Route {
                priority: Some(5),
                ..Route::new(
                    "0.0.0.0/0".parse().unwrap(),
                    Some("10.250.0.1".parse().unwrap()),
                )
            }],
            dns: Dns::default(),
        }
    }

    #[test]
    fn old_versions_carry_ip_version() {
        for v in [
            SpecVersion::V0_3_0,
            SpecVersion::V0_3_1,
            SpecVersion::V0_4_0,
        ] {
            let j = sample().to_json(v);
            assert_eq!(j["cniVersion"], v.as_str());
            assert_eq!(j["ips"][0]["version"], "4");
            assert_eq!(j["ips"][0]["interface"], 2);
            assert!(j["interfaces"][2].get("mtu").is_none());
            assert!(j["routes"][0].get("priority").is_none());
        }
    }

    #[test]
    fn new_versions_drop_ip_version() {
        let j = sample().to_json(SpecVersion::V1_0_0);
        assert!(j["ips"][0].get("version").is_none());
        assert_eq!(j["ips"][0]["gateway"], "10.250.0.1");
        assert!(j["interfaces"][2].get("mtu").is_none());
        assert_eq!(j["dns"], json!({}));
        let j = sample().to_json(SpecVersion::V1_1_0);
        assert_eq!(j["interfaces"][2]["mtu"], 1500);
        assert_eq!(j["routes"][0]["priority"], 5);
    }

    #[test]
    fn round_trips_through_every_version() {
        for v in crate::version::SUPPORTED_VERSIONS {
            let v = SpecVersion::parse(v).unwrap();
            let back = parse_result(&sample().to_json(v)).unwrap();
            assert_eq!(back.ips, sample().ips);
            assert_eq!(back.interfaces.len(), 3);
        }
    }

    #[test]
    fn bad_prev_results() {
        assert_eq!(
            parse_result(&json!({"ip4": {"ip": "10.0.0.2/24"}}))
                .unwrap_err()
                .code(),
            6
        );
        assert_eq!(
            parse_result(&json!({"ips": [{"address": "nope"}]}))
                .unwrap_err()
                .code(),
            6
        );
        assert_eq!(
            parse_result(&json!({"ips": [{"address": "10.0.0.2/24", "interface": 3}]}))
                .unwrap_err()
                .code(),
            6
        );
        assert_eq!(parse_result(&json!("x")).unwrap_err().code(), 6);
    }
}
