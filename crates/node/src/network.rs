//! The pod network of container nodes on one machine: a Linux bridge per
//! node (`kf-br<i>`, its gateway the first address of the node's pod
//! range), routed to one another by the host so pods of different nodes
//! reach each other, and an nftables guard so that nothing from the pod
//! ranges leaves the machine: forwarding between a pod bridge and any
//! interface that is not one is dropped.

use std::path::Path;
use std::process::Stdio;

use serde_json::json;

use crate::error::NodeError;

/// The prefix of the pod bridges' names.
pub const BRIDGE_PREFIX: &str = "kf-br";

/// The bridge of container node `i`.
pub fn bridge(i: usize) -> String {
    format!("{BRIDGE_PREFIX}{i}")
}
/// The nftables table of the egress guard.
pub const GUARD_TABLE: &str = "kubeforge-egress";

/// The CNI network list for a node whose pods attach to `bridge` and take
/// addresses from `subnet` (`10.244.1.0/24`), with host-local's state
/// under `ipam_dir`, through the reference plugins (bridge, host-local).
pub fn reference_conflist(bridge: &str, subnet: &str, ipam_dir: &Path) -> String {
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "kubeforge",
        "plugins": [
            {
                "type": "bridge",
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
        ],
    });
    serde_json::to_string_pretty(&conf).unwrap_or_default()
}

/// The guard's ruleset: forwarded packets between a pod bridge and any
/// interface that is not one are dropped, so pod traffic is never routed
/// off the machine (and nothing from outside reaches pods).
pub fn guard_ruleset() -> String {
    let b = format!("{BRIDGE_PREFIX}*");
    format!(
        "table inet {GUARD_TABLE} {{\n\
         \tchain forward {{\n\
         \t\ttype filter hook forward priority -10; policy accept;\n\
         \t\tiifname \"{b}\" oifname != \"{b}\" drop\n\
         \t\toifname \"{b}\" iifname != \"{b}\" drop\n\
         \t}}\n\
         }}\n"
    )
}

fn nft(args: &[&str], stdin: Option<&str>) -> Result<(), NodeError> {
    use std::io::Write;
    let program = crate::host::find_program("nft", "nftables")?;
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| NodeError::io("running nft", e))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
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
            format!("nft {}", args.join(" ")),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        ))
    }
}

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// What the host's network was before the guard: the bridge plugin turns
/// on IPv4 forwarding for its gateway, and the guard's removal turns it
/// back off if it was.
#[derive(Clone, Copy, Debug)]
pub struct Guard {
    forwarding_was_on: bool,
}

/// Install the egress guard (replacing an older copy).
pub fn install_guard() -> Result<Guard, NodeError> {
    let forwarding_was_on = std::fs::read_to_string(IP_FORWARD).is_ok_and(|v| v.trim() == "1");
    let _ = nft(&["delete", "table", "inet", GUARD_TABLE], None);
    nft(&["-f", "-"], Some(&guard_ruleset()))?;
    Ok(Guard { forwarding_was_on })
}

/// Remove the egress guard and the pod bridges, and restore forwarding.
pub fn remove_guard_and_bridges(guard: Guard) {
    if !guard.forwarding_was_on {
        let _ = std::fs::write(IP_FORWARD, "0");
    }
    let _ = nft(&["delete", "table", "inet", GUARD_TABLE], None);
    let bridges: Vec<String> = std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(BRIDGE_PREFIX))
        .collect();
    for b in bridges {
        let _ = std::process::Command::new("ip")
            .args(["link", "delete", &b])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
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
        let g = guard_ruleset();
        assert!(g.contains("iifname \"kf-br*\" oifname != \"kf-br*\" drop"));
        assert!(g.contains("hook forward"));
    }
}
