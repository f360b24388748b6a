//! IP prefixes in CIDR notation (`10.250.0.5/24`), the one address type the
//! CNI wire format, the IPAM store and the netlink calls share.
//!
//! Arithmetic is done on `u128` so IPv4 and IPv6 ranges go through the same
//! code; an IPv4 address is its 32-bit value.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An address with a prefix length: `10.250.0.5/24` (an interface address)
/// or `10.250.0.0/24` (a subnet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPrefix {
    /// The address, host bits included.
    pub addr: IpAddr,
    /// The prefix length (0-32 for IPv4, 0-128 for IPv6).
    pub prefix: u8,
}

/// Why a string is not an [`IpPrefix`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR address {0:?}")]
pub struct InvalidPrefix(pub String);

impl IpPrefix {
    /// A prefix from an address and a length; `None` if the length is too long for the family.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        (prefix <= max_prefix(addr)).then_some(Self { addr, prefix })
    }

    /// The network address: host bits cleared.
    pub fn network(&self) -> IpAddr {
        from_u128(self.addr, to_u128(self.addr) & mask(self.addr, self.prefix))
    }

    /// The last address of the subnet (the IPv4 broadcast address).
    pub fn last(&self) -> IpAddr {
        from_u128(
            self.addr,
            to_u128(self.addr) | !mask(self.addr, self.prefix) & family_max(self.addr),
        )
    }

    /// Whether `ip` lies inside this subnet (same family and network).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4()
            && to_u128(ip) & mask(ip, self.prefix) == to_u128(self.network())
    }

    /// Whether this is an IPv4 prefix.
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for IpPrefix {
    type Err = InvalidPrefix;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidPrefix(s.to_string());
        let (addr, prefix) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        // Only plain decimal digits: "+24" or "024" are not CIDR.
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        Self::new(addr, prefix).ok_or_else(bad)
    }
}

impl serde::Serialize for IpPrefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for IpPrefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The longest prefix of the address's family (32 or 128).
pub fn max_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// The address as an integer (IPv4 in the low 32 bits).
pub fn to_u128(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The integer as an address of the same family as `like`.
pub fn from_u128(like: IpAddr, value: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from((value & u32::MAX as u128) as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

/// The address after `addr`, wrapping within its family.
pub fn next(addr: IpAddr) -> IpAddr {
    from_u128(addr, to_u128(addr).wrapping_add(1) & family_max(addr))
}

fn family_max(addr: IpAddr) -> u128 {
    if addr.is_ipv4() {
        u32::MAX as u128
    } else {
        u128::MAX
    }
}

fn mask(addr: IpAddr, prefix: u8) -> u128 {
    let bits = u32::from(max_prefix(addr));
    let host = bits.saturating_sub(u32::from(prefix));
    let all = family_max(addr);
    if host >= 128 {
        0
    } else {
        all & !((1u128 << host) - 1)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_arithmetic() {
        let p: IpPrefix = "10.250.0.5/24".parse().unwrap();
        assert_eq!(p.network().to_string(), "10.250.0.0");
        assert_eq!(p.last().to_string(), "10.250.0.255");
        assert!(p.contains("10.250.0.200".parse().unwrap()));
        assert!(!p.contains("10.250.1.1".parse().unwrap()));
        assert!(!p.contains("::1".parse().unwrap()));
        assert_eq!(p.to_string(), "10.250.0.5/24");
        let z: IpPrefix = "0.0.0.0/0".parse().unwrap();
        assert!(z.contains("8.8.8.8".parse().unwrap()));
        let v6: IpPrefix = "fd00::1/64".parse().unwrap();
        assert_eq!(v6.network().to_string(), "fd00::");
        assert_eq!(next("10.0.0.255".parse().unwrap()).to_string(), "10.0.1.0");
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0.0/+1",
            "x/24",
            "10.0.0.0/",
            "::/129",
        ] {
            assert!(bad.parse::<IpPrefix>().is_err(), "{bad}");
        }
    }
}
