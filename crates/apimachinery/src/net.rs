//! Network address grammar as Kubernetes validates it: a CIDR is an IPv4 or
//! IPv6 address, `/`, and a prefix length no longer than the address
//! (kube's `netutils.ParseCIDRSloppy`, which also takes host bits and
//! masks them away). [`IpNet::contains`] answers whether an address lies
//! in the network; an IPv4 address written as IPv6 (`::ffff:10.0.0.1`)
//! counts as the IPv4 address, as Go's `net.IPNet.Contains` treats it.

use std::net::IpAddr;

/// The wording of kube's `IsValidCIDR` for a value that is not a CIDR.
pub const INVALID_CIDR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

/// A network: its address with host bits cleared, and the prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

/// A CIDR that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{INVALID_CIDR}")]
pub struct CidrError;

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl IpNet {
    /// Parse `a.b.c.d/p` or `x::y/p`.
    pub fn parse(s: &str) -> Result<IpNet, CidrError> {
        let (ip, prefix) = s.split_once('/').ok_or(CidrError)?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 3 {
            return Err(CidrError);
        }
        let addr: IpAddr = ip.parse().map_err(|_| CidrError)?;
        let prefix: u8 = prefix.parse().map_err(|_| CidrError)?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > bits {
            return Err(CidrError);
        }
        Ok(IpNet {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// The network address (host bits cleared).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(ip, self.prefix) == self.addr
            }
            _ => false,
        }
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & m).into())
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & m).into())
        }
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_masks_as_parse_cidr_sloppy() {
        let n = IpNet::parse("10.1.2.3/8").unwrap();
        assert_eq!(n.to_string(), "10.0.0.0/8");
        assert!(n.contains(ip("10.200.0.1")));
        assert!(!n.contains(ip("11.0.0.1")));
        assert!(n.contains(ip("::ffff:10.0.0.9")));
        let all = IpNet::parse("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("192.168.1.1")));
        assert!(!all.contains(ip("::1")));
        let host = IpNet::parse("127.0.0.1/32").unwrap();
        assert!(host.contains(ip("127.0.0.1")) && !host.contains(ip("127.0.0.2")));
        let v6 = IpNet::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(ip("2001:db8:1::5")) && !v6.contains(ip("2001:db9::1")));
        assert!(IpNet::parse("::/0").unwrap().contains(ip("::1")));
    }

    #[test]
    fn refuses_what_kube_refuses() {
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "a/8",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "10.0.0.0/8/1",
            " 10.0.0.0/8",
        ] {
            assert_eq!(IpNet::parse(bad), Err(CidrError), "{bad}");
        }
        assert_eq!(
            CidrError.to_string(),
            "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
        );
    }
}
