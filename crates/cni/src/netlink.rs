//! Synchronous rtnetlink: just the requests a bridge plugin makes (links,
//! addresses, routes), one socket per network namespace. A socket opened
//! on a thread that has entered a namespace stays bound to it, so
//! [`Netlink::open_in`] enters the container's netns on a short-lived
//! thread and the rest of the plugin never changes namespace.

use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

use crate::ip::IpPrefix;

/// A link as the plugin needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Name.
    pub name: String,
    /// Hardware address, `aa:bb:…`.
    pub mac: Option<String>,
    /// `IFLA_INFO_KIND`: `bridge`, `veth`, …
    pub kind: Option<String>,
    /// Index of the bridge it is a port of.
    pub master: Option<u32>,
    /// `IFLA_LINK`: for a veth, the peer's index (in the peer's namespace).
    pub peer_index: Option<u32>,
    /// MTU.
    pub mtu: Option<u32>,
    /// Whether IFF_PROMISC is set.
    pub promisc: bool,
}

/// A route read back from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    /// Destination.
    pub dst: IpPrefix,
    /// Next hop.
    pub gw: Option<IpAddr>,
    /// Output interface.
    pub oif: Option<u32>,
}

/// An rtnetlink socket bound to one network namespace.
pub struct Netlink {
    socket: Socket,
    seq: u32,
}

impl Netlink {
    /// A socket in the calling thread's namespace.
    pub fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        // Extended acks carry the kernel's reason for a refusal; not required.
        let _ = socket.set_ext_ack(true);
        Ok(Self { socket, seq: 0 })
    }

    /// A socket in the namespace behind `netns` (a `/var/run/netns/…` or `/proc/<pid>/ns/net` file).
    pub fn open_in(netns: &File) -> io::Result<Self> {
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(netns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(io::Error::from)?;
                Self::open()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("netns thread panicked")))
        })
    }

    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket.send(&buf, 0)?;
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut out = Vec::new();
        loop {
            let (data, _) = self.socket.recv_from_full()?;
            let mut offset = 0;
            while offset < data.len() {
                let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[offset..])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                let len = reply.header.length as usize;
                if len == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "zero-length netlink message",
                    ));
                }
                offset += (len + 3) & !3;
                if reply.header.sequence_number != self.seq {
                    continue;
                }
                match reply.payload {
                    NetlinkPayload::InnerMessage(m) => out.push(m),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                            None => Ok(out),
                        };
                    }
                    NetlinkPayload::Done(_) => return Ok(out),
                    _ => {}
                }
            }
            if !dump && flags & NLM_F_ACK == 0 && !out.is_empty() {
                return Ok(out);
            }
        }
    }

    /// The link named `name`, `None` if there is none.
    pub fn link_by_name(&mut self, name: &str) -> io::Result<Option<Link>> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        match self.request(RouteNetlinkMessage::GetLink(msg), 0) {
            Ok(replies) => Ok(replies.into_iter().find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(link_of(&l)),
                _ => None,
            })),
            Err(e) if e.raw_os_error() == Some(nix::libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates a bridge (EEXIST when someone was faster).
    pub fn create_bridge(&mut self, name: &str, mtu: Option<u32>) -> io::Result<()> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        self.request(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
        .map(drop)
    }

    /// Creates a veth pair: `host` here, a port of `master`, and `peer` created directly inside `peer_netns`.
    pub fn create_veth(
        &mut self,
        host: &str,
        peer: &str,
        peer_netns: &File,
        master: u32,
        mtu: Option<u32>,
    ) -> io::Result<()> {
        let mut peer_msg = LinkMessage::default();
        peer_msg
            .attributes
            .push(LinkAttribute::IfName(peer.to_string()));
        peer_msg
            .attributes
            .push(LinkAttribute::NetNsFd(peer_netns.as_raw_fd()));
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(host.to_string()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
            peer_msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        msg.attributes.push(LinkAttribute::Controller(master));
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_msg))),
        ]));
        self.request(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
        .map(drop)
    }

    /// Sets or clears flags (`IFF_UP`, `IFF_PROMISC`) on link `index`.
    pub fn set_flags(&mut self, index: u32, flags: LinkFlags, on: bool) -> io::Result<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.header.flags = if on { flags } else { LinkFlags::empty() };
        msg.header.change_mask = flags;
        self.request(RouteNetlinkMessage::SetLink(msg), NLM_F_ACK)
            .map(drop)
    }

    /// Deletes link `index` (a veth takes its peer with it).
    pub fn delete_link(&mut self, index: u32) -> io::Result<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        self.request(RouteNetlinkMessage::DelLink(msg), NLM_F_ACK)
            .map(drop)
    }

    /// Adds an address to link `index` (with the broadcast address for IPv4).
    pub fn add_address(&mut self, index: u32, addr: IpPrefix) -> io::Result<()> {
        let mut msg = AddressMessage::default();
        msg.header.family = family(addr.addr);
        msg.header.prefix_len = addr.prefix;
        msg.header.index = index;
        msg.attributes.push(AddressAttribute::Local(addr.addr));
        msg.attributes.push(AddressAttribute::Address(addr.addr));
        if addr.addr.is_ipv4()
            && let IpAddr::V4(b) = addr.last()
        {
            msg.attributes.push(AddressAttribute::Broadcast(b));
        }
        self.request(
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
        .map(drop)
    }

    /// The addresses on link `index`.
    pub fn addresses(&mut self, index: u32) -> io::Result<Vec<IpPrefix>> {
        let msg = AddressMessage::default();
        let replies = self.request(RouteNetlinkMessage::GetAddress(msg), NLM_F_DUMP)?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) if a.header.index == index => {
                    a.attributes.iter().find_map(|attr| match attr {
                        AddressAttribute::Address(ip) => IpPrefix::new(*ip, a.header.prefix_len),
                        _ => None,
                    })
                }
                _ => None,
            })
            .collect())
    }

    /// Adds a route to `dst` via `gw` (or directly on the link) out of link `oif`, in the main table.
    pub fn add_route(&mut self, dst: IpPrefix, gw: Option<IpAddr>, oif: u32) -> io::Result<()> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = family(dst.addr);
        msg.header.destination_prefix_length = dst.prefix;
        msg.header.table = RouteHeader::RT_TABLE_MAIN;
        msg.header.protocol = RouteProtocol::Boot;
        msg.header.scope = if gw.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
        msg.header.kind = RouteType::Unicast;
        if dst.prefix > 0 {
            msg.attributes
                .push(RouteAttribute::Destination(RouteAddress::from(
                    dst.network(),
                )));
        }
        if let Some(gw) = gw {
            msg.attributes
                .push(RouteAttribute::Gateway(RouteAddress::from(gw)));
        }
        msg.attributes.push(RouteAttribute::Oif(oif));
        self.request(
            RouteNetlinkMessage::NewRoute(msg),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
        .map(drop)
    }

    /// The routes of the main table, both families.
    pub fn routes(&mut self) -> io::Result<Vec<KernelRoute>> {
        let mut out = Vec::new();
        for fam in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut msg = RouteMessage::default();
            msg.header.address_family = fam;
            for m in self.request(RouteNetlinkMessage::GetRoute(msg), NLM_F_DUMP)? {
                let RouteNetlinkMessage::NewRoute(r) = m else {
                    continue;
                };
                if r.header.table != RouteHeader::RT_TABLE_MAIN {
                    continue;
                }
                let any: IpAddr = if fam == AddressFamily::Inet {
                    [0u8; 4].into()
                } else {
                    [0u8; 16].into()
                };
                let mut route = KernelRoute {
                    dst: IpPrefix {
                        addr: any,
                        prefix: r.header.destination_prefix_length,
                    },
                    gw: None,
                    oif: None,
                };
                for a in &r.attributes {
                    match a {
                        RouteAttribute::Destination(d) => {
                            if let Some(ip) = route_ip(d) {
                                route.dst.addr = ip;
                            }
                        }
                        RouteAttribute::Gateway(g) => route.gw = route_ip(g),
                        RouteAttribute::Oif(i) => route.oif = Some(*i),
                        _ => {}
                    }
                }
                out.push(route);
            }
        }
        Ok(out)
    }
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn family(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

fn link_of(m: &LinkMessage) -> Link {
    let mut link = Link {
        index: m.header.index,
        name: String::new(),
        mac: None,
        kind: None,
        master: None,
        peer_index: None,
        mtu: None,
        promisc: m.header.flags.contains(LinkFlags::Promisc),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => link.name = n.clone(),
            LinkAttribute::Address(mac) => link.mac = Some(format_mac(mac)),
            LinkAttribute::Controller(i) => link.master = Some(*i),
            LinkAttribute::Link(i) => link.peer_index = Some(*i),
            LinkAttribute::Mtu(mtu) => link.mtu = Some(*mtu),
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    if let LinkInfo::Kind(k) = info {
                        link.kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    link
}

/// `aa:bb:cc:dd:ee:ff`, as Go's `net.HardwareAddr.String()`.
pub fn format_mac(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
