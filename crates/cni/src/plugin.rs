//! The six commands, in the reference bridge plugin's role: ADD makes the
//! bridge (if needed), a veth pair with one end in the container, the
//! addresses from our in-process host-local IPAM and the routes; DEL undoes
//! it best-effort; CHECK compares the kernel with `prevResult`; GC and
//! STATUS look after the IPAM store. [`run`] is the pure entry: environment
//! and stdin in, result JSON or a [`CniError`] out.

use std::fs::{self, File};
use std::io::{ErrorKind, Read};

use netlink_packet_route::link::LinkFlags;
use serde_json::{Value, json};

use crate::env::{CniEnv, Command};
use crate::error::CniError;
use crate::ip::IpPrefix;
use crate::ipam::Store;
use crate::netconf::{self, Network};
use crate::netlink::{Link, Netlink};
use crate::result::{self, CniResult, Interface, IpConfig, Route};
use crate::version::{SUPPORTED_VERSIONS, SpecVersion};

/// Runs one command: `Ok(Some(json))` is printed on stdout, `Ok(None)` prints nothing.
pub fn run(env: &CniEnv, stdin: &[u8]) -> Result<Option<Value>, CniError> {
    if env.command == Command::Version {
        return Ok(Some(version_info(stdin)));
    }
    let conf = netconf::parse_netconf(stdin)?;
    let version = negotiate(&conf.cni_version)?;
    let allowed = match env.command {
        Command::Check => version.has_check(),
        Command::Gc | Command::Status => version.has_gc_and_status(),
        _ => true,
    };
    if !allowed {
        return Err(CniError::IncompatibleVersion {
            msg: format!("config version does not allow {:?}", env.command).to_uppercase(),
            details: format!("config is {:?}", conf.cni_version),
        });
    }
    let net = netconf::validate(conf)?;
    match env.command {
        Command::Add => add(env, &net, version).map(|r| Some(r.to_json(version))),
        Command::Del => del(env, &net).map(|()| None),
        Command::Check => check(env, &net).map(|()| None),
        Command::Gc => gc(&net).map(|()| None),
        Command::Status => status(&net).map(|()| None),
        Command::Version => Ok(Some(version_info(stdin))),
    }
}

/// The version the error JSON should carry for this stdin: the config's if we speak it, else our newest.
pub fn error_version(stdin: &[u8]) -> &'static str {
    serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(Value::as_str)
                .and_then(SpecVersion::parse)
        })
        .unwrap_or(SpecVersion::LATEST)
        .as_str()
}

fn negotiate(requested: &str) -> Result<SpecVersion, CniError> {
    SpecVersion::parse(requested).ok_or_else(|| CniError::IncompatibleVersion {
        msg: "incompatible CNI versions".into(),
        details: format!("config is {requested:?}, plugin supports {SUPPORTED_VERSIONS:?}"),
    })
}

fn version_info(stdin: &[u8]) -> Value {
    json!({"cniVersion": error_version(stdin), "supportedVersions": SUPPORTED_VERSIONS})
}

fn open_netns(path: &str) -> Result<(File, Netlink), CniError> {
    let file =
        File::open(path).map_err(|e| CniError::io(format!("failed to open netns {path:?}"), e))?;
    let nl = Netlink::open_in(&file).map_err(|e| {
        if e.raw_os_error() == Some(nix::libc::EINVAL) {
            CniError::InvalidEnvironment(format!("CNI_NETNS {path:?} is not a network namespace"))
        } else {
            CniError::netlink(format!("entering netns {path:?}"), e)
        }
    })?;
    Ok((file, nl))
}

fn random_veth_name() -> Result<String, CniError> {
    let mut b = [0u8; 4];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| CniError::io("reading /dev/urandom", e))?;
    Ok(format!(
        "veth{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3]
    ))
}

fn is_exists(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(nix::libc::EEXIST)
}

fn ensure_bridge(host: &mut Netlink, net: &Network) -> Result<Link, CniError> {
    let name = &net.bridge;
    let existing = host
        .link_by_name(name)
        .map_err(|e| CniError::netlink(format!("looking up bridge {name}"), e))?;
    let br = match existing {
        Some(l) => l,
        None => {
            match host.create_bridge(name, net.conf.mtu) {
                Ok(()) => {}
                Err(e) if is_exists(&e) => {}
                Err(e) => return Err(CniError::netlink(format!("creating bridge {name}"), e)),
            }
            host.link_by_name(name)
                .map_err(|e| CniError::netlink(format!("looking up bridge {name}"), e))?
                .ok_or_else(|| {
                    CniError::TryAgain(format!("bridge {name} vanished after creation"))
                })?
        }
    };
    if br.kind.as_deref() != Some("bridge") {
        return Err(CniError::Conflict(format!(
            "{name:?} already exists but is not a bridge"
        )));
    }
    if net.conf.promisc_mode && !br.promisc {
        host.set_flags(br.index, LinkFlags::Promisc, true)
            .map_err(|e| CniError::netlink(format!("setting {name} promiscuous"), e))?;
    }
    host.set_flags(br.index, LinkFlags::Up, true)
        .map_err(|e| CniError::netlink(format!("setting {name} up"), e))?;
    Ok(br)
}

fn write_sysctl(path: &str, value: &str) -> Result<(), CniError> {
    if fs::read_to_string(path).is_ok_and(|v| v.trim() == value) {
        return Ok(());
    }
    fs::write(path, value).map_err(|e| CniError::io(format!("writing {path}"), e))
}

/// ADD. On failure after the IPAM allocation or the veth exist, both are undone.
fn add(env: &CniEnv, net: &Network, version: SpecVersion) -> Result<CniResult, CniError> {
    let prev = net
        .conf
        .prev_result
        .as_ref()
        .map(result::parse_result)
        .transpose()?;
    let (ns_file, mut cont) = open_netns(&env.netns)?;
    let mut host = Netlink::open().map_err(|e| CniError::netlink("opening rtnetlink", e))?;
    if cont
        .link_by_name(&env.ifname)
        .map_err(|e| CniError::netlink("looking up the container interface", e))?
        .is_some()
    {
        return Err(CniError::Conflict(format!(
            "container interface {} already exists",
            env.ifname
        )));
    }
    let br = ensure_bridge(&mut host, net)?;
    let ips = if net.range_sets.is_empty() {
        Vec::new()
    } else {
        Store::lock(&net.store_dir)?.allocate(&net.range_sets, &env.container_id, &env.ifname)?
    };
    let mut host_veth: Option<u32> = None;
    let outcome = attach(
        env,
        net,
        version,
        &ns_file,
        &mut host,
        &mut cont,
        &br,
        &ips,
        &mut host_veth,
        prev,
    );
    if outcome.is_err() {
        if let Some(index) = host_veth {
            let _ = host.delete_link(index);
        }
        if !ips.is_empty()
            && let Ok(store) = Store::lock(&net.store_dir)
        {
            let _ = store.release(&env.container_id, &env.ifname);
        }
    }
    outcome
}

#[allow(clippy::too_many_arguments)]
fn attach(
    env: &CniEnv,
    net: &Network,
    version: SpecVersion,
    ns_file: &File,
    host: &mut Netlink,
    cont: &mut Netlink,
    br: &Link,
    ips: &[IpConfig],
    host_veth: &mut Option<u32>,
    prev: Option<CniResult>,
) -> Result<CniResult, CniError> {
    let mut host_name = String::new();
    for attempt in 0..5 {
        host_name = random_veth_name()?;
        match host.create_veth(&host_name, &env.ifname, ns_file, br.index, net.conf.mtu) {
            Ok(()) => break,
            Err(e) if is_exists(&e) && attempt < 4 => continue,
            Err(e) if is_exists(&e) => {
                return Err(CniError::Conflict(format!(
                    "could not find a free veth name (last tried {host_name})"
                )));
            }
            Err(e) => return Err(CniError::netlink(format!("creating veth {host_name}"), e)),
        }
    }
    let hl = host
        .link_by_name(&host_name)
        .map_err(|e| CniError::netlink("looking up the host veth", e))?
        .ok_or_else(|| CniError::TryAgain(format!("host veth {host_name} vanished")))?;
    *host_veth = Some(hl.index);
    if net.conf.hairpin_mode {
        write_sysctl(
            &format!("/sys/class/net/{host_name}/brport/hairpin_mode"),
            "1",
        )?;
    }
    host.set_flags(hl.index, LinkFlags::Up, true)
        .map_err(|e| CniError::netlink("setting the host veth up", e))?;

    let cl = cont
        .link_by_name(&env.ifname)
        .map_err(|e| CniError::netlink("looking up the container interface", e))?
        .ok_or_else(|| {
            CniError::TryAgain(format!("container interface {} vanished", env.ifname))
        })?;
    for ip in ips {
        cont.add_address(cl.index, ip.address).map_err(|e| {
            CniError::netlink(format!("adding {} to {}", ip.address, env.ifname), e)
        })?;
    }
    cont.set_flags(cl.index, LinkFlags::Up, true)
        .map_err(|e| CniError::netlink("setting the container interface up", e))?;

    let mut routes: Vec<Route> = net
        .conf
        .ipam
        .as_ref()
        .map(|i| i.routes.clone())
        .unwrap_or_default();
    if net.conf.is_default_gateway {
        for ip in ips {
            let any = IpPrefix {
                addr: if ip.address.is_ipv4() {
                    [0u8; 4].into()
                } else {
                    [0u8; 16].into()
                },
                prefix: 0,
            };
            if !routes.iter().any(|r| r.dst == any) {
                routes.push(Route::new(any, ip.gateway));
            }
        }
    }
    for r in &routes {
        let gw = r.gw.or_else(|| {
            ips.iter()
                .find(|ip| ip.address.is_ipv4() == r.dst.is_ipv4())
                .and_then(|ip| ip.gateway)
        });
        match cont.add_route(r.dst, gw, cl.index) {
            Ok(()) => {}
            Err(e) if is_exists(&e) => {}
            Err(e) => return Err(CniError::netlink(format!("adding route to {}", r.dst), e)),
        }
    }

    if net.is_gateway {
        for ip in ips {
            let Some(gw) = ip.gateway else { continue };
            match host.add_address(
                br.index,
                IpPrefix {
                    addr: gw,
                    prefix: ip.address.prefix,
                },
            ) {
                Ok(()) => {}
                Err(e) if is_exists(&e) => {}
                Err(e) => {
                    return Err(CniError::netlink(
                        format!("adding gateway {gw} to {}", net.bridge),
                        e,
                    ));
                }
            }
            if gw.is_ipv4() {
                write_sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
            } else {
                write_sysctl("/proc/sys/net/ipv6/conf/all/forwarding", "1")?;
            }
        }
    }

    // The bridge takes a port's MAC when its first port joins: read both back now.
    let br_now = host
        .link_by_name(&net.bridge)
        .ok()
        .flatten()
        .unwrap_or_else(|| br.clone());
    let hl_now = host.link_by_name(&host_name).ok().flatten().unwrap_or(hl);
    let mut result = prev.unwrap_or_default();
    let base = result.interfaces.len();
    result.interfaces.push(Interface {
        name: net.bridge.clone(),
        mac: br_now.mac,
        ..Default::default()
    });
    result.interfaces.push(Interface {
        name: host_name,
        mac: hl_now.mac,
        ..Default::default()
    });
    result.interfaces.push(Interface {
        name: env.ifname.clone(),
        mac: cl.mac,
        mtu: if version >= SpecVersion::V1_1_0 {
            cl.mtu
        } else {
            None
        },
        sandbox: Some(env.netns.clone()),
        ..Default::default()
    });
    result.ips.extend(ips.iter().map(|ip| IpConfig {
        interface: Some(base + 2),
        ..ip.clone()
    }));
    result.routes.extend(routes);
    if let Some(dns) = &net.conf.dns
        && !dns.is_empty()
    {
        result.dns = dns.clone();
    }
    Ok(result)
}

/// DEL: best-effort and idempotent: a missing netns, interface or allocation is success.
fn del(env: &CniEnv, net: &Network) -> Result<(), CniError> {
    if !env.netns.is_empty() {
        match File::open(&env.netns) {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CniError::io(
                    format!("failed to open netns {:?}", env.netns),
                    e,
                ));
            }
            Ok(file) => {
                // A path that is no longer a namespace (its bind mount gone) is as good as missing.
                let mut cont = match Netlink::open_in(&file) {
                    Ok(nl) => nl,
                    Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => {
                        return release_all(env, net);
                    }
                    Err(e) => {
                        return Err(CniError::netlink(
                            format!("entering netns {:?}", env.netns),
                            e,
                        ));
                    }
                };
                let link = cont
                    .link_by_name(&env.ifname)
                    .map_err(|e| CniError::netlink("looking up the container interface", e))?;
                if let Some(link) = link {
                    match cont.delete_link(link.index) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(nix::libc::ENODEV) => {}
                        Err(e) => {
                            return Err(CniError::netlink(format!("deleting {}", env.ifname), e));
                        }
                    }
                }
            }
        }
    }
    release_all(env, net)
}

/// DEL's IPAM half: gives back the attachment's addresses (none is fine).
fn release_all(env: &CniEnv, net: &Network) -> Result<(), CniError> {
    if !net.range_sets.is_empty() {
        Store::lock(&net.store_dir)?.release(&env.container_id, &env.ifname)?;
    }
    Ok(())
}

/// CHECK: the allocations, bridge, veth pair, addresses and routes of `prevResult` are all still there.
fn check(env: &CniEnv, net: &Network) -> Result<(), CniError> {
    let prev = net
        .conf
        .prev_result
        .as_ref()
        .ok_or_else(|| CniError::InvalidConfig("required prevResult missing".into()))?;
    let prev = result::parse_result(prev)?;
    let fail = |m: String| Err(CniError::CheckFailed(m));
    let cont_pos = prev
        .interfaces
        .iter()
        .position(|i| i.name == env.ifname && i.sandbox.as_deref() == Some(env.netns.as_str()));
    let Some(cont_pos) = cont_pos else {
        return fail(format!(
            "prevResult has no interface {} in sandbox {}",
            env.ifname, env.netns
        ));
    };
    let cont_ips: Vec<&IpConfig> = prev
        .ips
        .iter()
        .filter(|ip| ip.interface == Some(cont_pos))
        .collect();
    if !net.range_sets.is_empty() {
        let store = Store::lock(&net.store_dir)?;
        for ip in &cont_ips {
            if net
                .range_sets
                .iter()
                .flatten()
                .any(|r| r.subnet.contains(ip.address.addr))
                && !store.holds(ip.address.addr, &env.container_id, &env.ifname)?
            {
                return fail(format!(
                    "{} is not allocated to {}/{}",
                    ip.address.addr, env.container_id, env.ifname
                ));
            }
        }
    }
    let mut host = Netlink::open().map_err(|e| CniError::netlink("opening rtnetlink", e))?;
    let br = host
        .link_by_name(&net.bridge)
        .map_err(|e| CniError::netlink("looking up the bridge", e))?;
    let Some(br) = br.filter(|b| b.kind.as_deref() == Some("bridge")) else {
        return fail(format!("bridge {} not found", net.bridge));
    };
    if br.promisc != net.conf.promisc_mode {
        return fail(format!(
            "bridge {} promiscuous mode is {}, configured {}",
            net.bridge, br.promisc, net.conf.promisc_mode
        ));
    }
    let (_f, mut cont) = open_netns(&env.netns)?;
    let cl = cont
        .link_by_name(&env.ifname)
        .map_err(|e| CniError::netlink("looking up the container interface", e))?;
    let Some(cl) = cl.filter(|l| l.kind.as_deref() == Some("veth")) else {
        return fail(format!("container veth {} not found", env.ifname));
    };
    if let Some(mac) = &prev.interfaces[cont_pos].mac
        && cl.mac.as_ref() != Some(mac)
    {
        return fail(format!(
            "interface {} mac {:?} does not match {mac}",
            env.ifname, cl.mac
        ));
    }
    let mut veth_found = false;
    for i in prev
        .interfaces
        .iter()
        .filter(|i| i.sandbox.is_none() && i.name != net.bridge)
    {
        if let Ok(Some(l)) = host.link_by_name(&i.name)
            && l.master == Some(br.index)
            && l.peer_index == Some(cl.index)
            && cl.peer_index == Some(l.index)
        {
            veth_found = true;
        }
    }
    if !veth_found {
        return fail(format!(
            "host veth of {} on bridge {} not found",
            env.ifname, net.bridge
        ));
    }
    let addrs = cont
        .addresses(cl.index)
        .map_err(|e| CniError::netlink("listing addresses", e))?;
    for ip in &cont_ips {
        if !addrs.contains(&ip.address) {
            return fail(format!("address {} missing on {}", ip.address, env.ifname));
        }
    }
    let routes = cont
        .routes()
        .map_err(|e| CniError::netlink("listing routes", e))?;
    for r in &prev.routes {
        let found = routes.iter().any(|k| {
            k.dst.prefix == r.dst.prefix
                && k.dst.network() == r.dst.network()
                && r.gw.is_none_or(|gw| k.gw == Some(gw))
        });
        if !found {
            return fail(format!("route to {} missing", r.dst));
        }
    }
    Ok(())
}

/// GC: releases the allocations of attachments not in `cni.dev/valid-attachments`.
fn gc(net: &Network) -> Result<(), CniError> {
    let Some(valid) = &net.conf.valid_attachments else {
        return Err(CniError::InvalidConfig(
            "GC needs cni.dev/valid-attachments".into(),
        ));
    };
    if !net.range_sets.is_empty() {
        Store::lock(&net.store_dir)?.gc(valid)?;
    }
    Ok(())
}

/// STATUS: code 50 when ADD cannot succeed (store unusable, a range set full, the bridge name taken).
fn status(net: &Network) -> Result<(), CniError> {
    if !net.range_sets.is_empty() {
        let store = Store::lock(&net.store_dir)
            .map_err(|e| CniError::NotAvailable(format!("IPAM store: {e}")))?;
        if let Some(i) = store.exhausted_set(&net.range_sets)? {
            let ranges: Vec<String> = net.range_sets[i]
                .iter()
                .map(|r| format!("{}-{}", r.start, r.end))
                .collect();
            return Err(CniError::NotAvailable(format!(
                "no free address in range set {}",
                ranges.join(",")
            )));
        }
    }
    let mut host =
        Netlink::open().map_err(|e| CniError::NotAvailable(format!("rtnetlink: {e}")))?;
    match host.link_by_name(&net.bridge) {
        Ok(Some(l)) if l.kind.as_deref() != Some("bridge") => Err(CniError::NotAvailable(format!(
            "{:?} exists but is not a bridge",
            net.bridge
        ))),
        Ok(_) => Ok(()),
        Err(e) => Err(CniError::NotAvailable(format!(
            "looking up bridge {}: {e}",
            net.bridge
        ))),
    }
}
