//! The pod network of one cluster's container nodes: a Linux bridge per
//! node (`kf<id>-<i>`, its gateway the first address of the node's pod
//! range), routed to one another by the host so pods of different nodes
//! reach each other, and an nftables guard so that nothing from the pod
//! ranges leaves the machine: forwarding between one of the cluster's
//! bridges and any interface that is not one is dropped (another
//! cluster's bridges included).
//!
//! Each cluster's nodes take /24 ranges of 10.244.0.0/16 that no interface
//! on the machine has yet, chosen and given to new bridges under a
//! machine-wide lock, so two live clusters never overlap.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::json;

use crate::error::NodeError;
use crate::footprint::ClusterId;

/// One cluster's pod network: its id (naming its bridges) and the /24 of
/// 10.244.0.0/16 each node has (`10.244.<range>.0/24`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNetwork {
    id: ClusterId,
    ranges: Vec<u8>,
}

impl PodNetwork {
    /// Choose `n` ranges no interface on this machine has and make a
    /// bridge for each, holding the machine's network lock meanwhile.
    pub fn allocate(id: &ClusterId, n: usize) -> Result<PodNetwork, NodeError> {
        let lock_path = Path::new(crate::footprint::RUN_DIR).join("network.lock");
        let file = std::fs::create_dir_all(crate::footprint::RUN_DIR)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&lock_path)
            })
            .map_err(|e| NodeError::io(format!("opening {}", lock_path.display()), e))?;
        let _lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(
            |(_, e)| {
                NodeError::io(
                    format!("locking {}", lock_path.display()),
                    std::io::Error::from(e),
                )
            },
        )?;
        let used = used_ranges()?;
        let ranges: Vec<u8> = (0..=255u8).filter(|r| !used.contains(r)).take(n).collect();
        if ranges.len() < n {
            return Err(NodeError::io(
                format!("choosing pod ranges for {n} nodes"),
                std::io::Error::other(format!(
                    "only {} /24 ranges of 10.244.0.0/16 are free on this machine; stop another cluster or use fewer nodes",
                    ranges.len()
                )),
            ));
        }
        let net = PodNetwork {
            id: id.clone(),
            ranges,
        };
        for i in 0..n {
            if let Err(e) = ensure_bridge(&net.bridge(i), net.gateway(i)) {
                for j in 0..i {
                    let _ = ip(&["link", "delete", &net.bridge(j)]);
                }
                return Err(e);
            }
        }
        Ok(net)
    }

    /// The cluster's id.
    pub fn id(&self) -> &ClusterId {
        &self.id
    }

    /// How many nodes it has ranges for.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Node `i`'s bridge (`kf<id>-<i>`).
    pub fn bridge(&self, i: usize) -> String {
        format!("{}{i}", self.id.link_prefix())
    }

    /// Every bridge's name, as nftables matches them (`kf<id>-*`).
    pub fn bridge_pattern(&self) -> String {
        format!("{}*", self.id.link_prefix())
    }

    /// Node `i`'s pod range (`10.244.<r>.0/24`).
    pub fn subnet(&self, i: usize) -> String {
        format!("10.244.{}.0/24", self.ranges[i])
    }

    /// The gateway of node `i`'s bridge: the first address of its pod
    /// range, where pods reach the host.
    pub fn gateway(&self, i: usize) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(10, 244, self.ranges[i], 1)
    }
}

/// The /24s of 10.244.0.0/16 that an interface of this machine has an
/// address in.
fn used_ranges() -> Result<std::collections::BTreeSet<u8>, NodeError> {
    let out = tool_output("ip", "iproute2", &["-4", "-o", "addr", "show"])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|t| *t == "inet")?;
            let addr: std::net::Ipv4Addr = w.next()?.split('/').next()?.parse().ok()?;
            let [a, b, c, _] = addr.octets();
            (a == 10 && b == 244).then_some(c)
        })
        .collect())
}

/// Make bridge `name` with `gateway` as its address (up, and kept when it
/// exists), before any pod: the host is reached from pods at the gateway
/// (the API server's pod-facing listener), and the bridge plugin finds the
/// bridge and its address in place.
fn ensure_bridge(name: &str, gateway: std::net::Ipv4Addr) -> Result<(), NodeError> {
    if !std::path::Path::new("/sys/class/net").join(name).exists() {
        ip(&["link", "add", name, "type", "bridge"])?;
    }
    ip(&["addr", "replace", &format!("{gateway}/24"), "dev", name])?;
    ip(&["link", "set", name, "up"])
}

/// The CNI network list for a node whose pods attach to `bridge` and take
/// addresses from `subnet` (`10.244.1.0/24`), with host-local's state
/// under `ipam_dir`, through the reference plugins (bridge, host-local),
/// with portmap chained for `hostPort`s.
pub fn reference_conflist(bridge: &str, subnet: &str, ipam_dir: &Path) -> String {
    conflist("bridge", bridge, subnet, ipam_dir)
}

/// The network list with `plugin` (`bridge` or [`KUBEFORGE_CNI`], which
/// take the same fields) attaching pods.
fn conflist(plugin: &str, bridge: &str, subnet: &str, ipam_dir: &Path) -> String {
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "kubeforge",
        "plugins": [
            {
                "type": plugin,
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": ipam_dir.display().to_string(),
                },
            },
            // hostPort: containerd hands the sandbox's port mappings to
            // the plugins that declare the capability, as the kubelet's
            // CNI set-up does.
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    });
    serde_json::to_string_pretty(&conf).unwrap_or_default()
}

/// Which CNI plugin attaches pods to their node's bridge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CniPlugin {
    /// Debian's reference plugins (`bridge` with `host-local` IPAM).
    #[default]
    Reference,
    /// kubeforge's own plugin (`kubeforge-cni`: bridge with host-local
    /// IPAM built in): the program to run as it (the `kubeforge-cni`
    /// binary, or a multi-call binary that acts as it when called by that
    /// name).
    Kubeforge(PathBuf),
}

/// The name containerd runs kubeforge's plugin by (the netconf `type`).
pub const KUBEFORGE_CNI: &str = "kubeforge-cni";

impl CniPlugin {
    /// The CNI network list for a node's bridge and pod range.
    pub fn conflist(&self, bridge: &str, subnet: &str, ipam_dir: &Path) -> String {
        match self {
            CniPlugin::Reference => reference_conflist(bridge, subnet, ipam_dir),
            CniPlugin::Kubeforge(_) => conflist(KUBEFORGE_CNI, bridge, subnet, ipam_dir),
        }
    }

    /// The CNI bin directory for containerd: Debian's for the reference
    /// plugins; for ours, `dir` holding `kubeforge-cni` (a link to the
    /// program) beside links to Debian's plugins (`loopback`, which
    /// containerd always runs for a sandbox's `lo`, and the others a
    /// conflist may chain).
    pub fn bin_dir(&self, reference: &Path, dir: &Path) -> Result<PathBuf, NodeError> {
        let CniPlugin::Kubeforge(program) = self else {
            return Ok(reference.to_path_buf());
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| NodeError::io(format!("creating {}", dir.display()), e))?;
        let mut links = vec![(KUBEFORGE_CNI.to_string(), program.clone())];
        links.extend(
            ["loopback", "bridge", "host-local", "portmap"]
                .map(|p| (p.to_string(), reference.join(p))),
        );
        for (name, target) in links {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&target, &link).map_err(|e| {
                NodeError::io(
                    format!("linking {} to {}", link.display(), target.display()),
                    e,
                )
            })?;
        }
        Ok(dir.to_path_buf())
    }
}

/// The guard's ruleset for `net`: forwarded packets between one of its
/// bridges and any interface that is not one are dropped, so pod traffic
/// is never routed off the machine nor to another cluster (and nothing
/// from outside reaches pods).
pub fn guard_ruleset(net: &PodNetwork) -> String {
    let b = net.bridge_pattern();
    let table = net.id.guard_table();
    format!(
        "table inet {table} {{\n\
         \tchain forward {{\n\
         \t\ttype filter hook forward priority -10; policy accept;\n\
         \t\tiifname \"{b}\" oifname != \"{b}\" drop\n\
         \t\toifname \"{b}\" iifname != \"{b}\" drop\n\
         \t}}\n\
         }}\n"
    )
}

/// Run `program` (from Debian's `package`) with `args` and `stdin`; its
/// stderr is the error when it fails.
fn tool(program: &str, package: &str, args: &[&str], stdin: Option<&str>) -> Result<(), NodeError> {
    tool_with(program, package, args, stdin).map(|_| ())
}

/// Run `program` with `args`; its stdout.
fn tool_output(program: &str, package: &str, args: &[&str]) -> Result<String, NodeError> {
    tool_with(program, package, args, None)
}

/// [`tool`], returning what the program printed.
fn tool_with(
    program: &str,
    package: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, NodeError> {
    use std::io::Write;
    let path = crate::host::find_program(program, package)?;
    let mut child = std::process::Command::new(path)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| NodeError::io(format!("running {program}"), e))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| NodeError::io(format!("writing to {program}"), e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| NodeError::io(format!("running {program}"), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(NodeError::io(
            format!("{program} {}", args.join(" ")),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        ))
    }
}

/// `nft` with `args` (and a ruleset on stdin).
pub(crate) fn nft(args: &[&str], stdin: Option<&str>) -> Result<(), NodeError> {
    tool("nft", "nftables", args, stdin)
}

/// `nft` with `args`; what it printed.
pub(crate) fn nft_output(args: &[&str]) -> Result<String, NodeError> {
    tool_output("nft", "nftables", args)
}

/// `ip` with `args`.
pub(crate) fn ip(args: &[&str]) -> Result<(), NodeError> {
    tool("ip", "iproute2", args, None)
}

/// IPv4 forwarding's switch.
pub(crate) const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// Whether IPv4 forwarding is on: the bridge plugin turns it on for its
/// gateway, and the last cluster to stop turns it back off if it was off
/// before the first one started.
pub fn forwarding_is_on() -> bool {
    std::fs::read_to_string(IP_FORWARD).is_ok_and(|v| v.trim() == "1")
}

/// Install `net`'s egress guard (replacing an older copy).
pub fn install_guard(net: &PodNetwork) -> Result<(), NodeError> {
    let _ = nft(&["delete", "table", "inet", &net.id.guard_table()], None);
    nft(&["-f", "-"], Some(&guard_ruleset(net)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_network_stays_on_the_bridge() {
        let c: serde_json::Value = serde_json::from_str(&reference_conflist(
            "kf-br1",
            "10.244.1.0/24",
            Path::new("/x/ipam"),
        ))
        .unwrap();
        assert_eq!(c["plugins"][0]["bridge"], "kf-br1");
        assert_eq!(c["plugins"][0]["ipMasq"], false);
        assert_eq!(c["plugins"][0]["ipam"]["dataDir"], "/x/ipam");
        assert_eq!(c["plugins"][1]["type"], "portmap");
        let net = PodNetwork {
            id: ClusterId::parse("0123abcd").unwrap(),
            ranges: vec![7, 9],
        };
        assert_eq!(net.bridge(1), "kf0123abcd-1");
        assert_eq!(net.subnet(1), "10.244.9.0/24");
        assert_eq!(net.gateway(0).to_string(), "10.244.7.1");
        let g = guard_ruleset(&net);
        assert!(g.contains("table inet kubeforge-0123abcd-egress"), "{g}");
        assert!(g.contains("iifname \"kf0123abcd-*\" oifname != \"kf0123abcd-*\" drop"));
        assert!(g.contains("hook forward"));
    }
}
