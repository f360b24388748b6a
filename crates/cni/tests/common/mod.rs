//! Shared by the integration tests and the bench: run a CNI plugin binary
//! for real, and a fixture that removes every netns, bridge and data
//! directory it made, even when the test fails (Drop).

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// Our plugin binary.
pub const OURS: &str = env!("CARGO_BIN_EXE_kubeforge-cni");
/// Debian's reference bridge plugin.
pub const REFERENCE_BRIDGE: &str = "/usr/lib/cni/bridge";

/// Runs `cmd args`, panicking (not skipping) if the tool is missing or fails.
pub fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} is required ({e}); install iproute2/iputils-ping"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `ip netns exec <ns> ping -c1 -W1 <addr>` gets an answer.
pub fn ping(ns: &str, addr: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-c1", "-W1", addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("ip and ping are required")
        .success()
}

/// One plugin invocation's outcome.
#[derive(Debug)]
pub struct Outcome {
    /// Exit code.
    pub code: i32,
    /// stdout as JSON (Null when empty).
    pub json: Value,
}

/// Runs `plugin` with `CNI_COMMAND=command` and the given attachment, `conf` on stdin.
pub fn cni(
    plugin: &str,
    command: &str,
    id: &str,
    netns: &str,
    ifname: &str,
    conf: &Value,
) -> Outcome {
    cni_env(
        plugin,
        &[
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", ifname),
            ("CNI_PATH", "/usr/lib/cni"),
        ],
        conf.to_string().as_bytes(),
    )
}

/// Runs `plugin` with exactly these `CNI_*` variables and stdin.
pub fn cni_env(plugin: &str, env: &[(&str, &str)], stdin: &[u8]) -> Outcome {
    let mut cmd = Command::new(plugin);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {plugin}: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("writing stdin");
    let out = child.wait_with_output().expect("waiting for the plugin");
    let json = if out.stdout.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{plugin} wrote non-JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    };
    Outcome {
        code: out.status.code().unwrap_or(-1),
        json,
    }
}

/// Namespaces, bridges and a data directory that are removed on drop.
pub struct Fixture {
    /// Names of the namespaces made (`kfcni-test-…`).
    pub netns: Vec<String>,
    /// Bridges (and other links) to delete.
    pub links: Vec<String>,
    /// The IPAM data directory.
    pub data_dir: tempfile::TempDir,
}

impl Fixture {
    /// A fixture with `n` fresh namespaces named `kfcni-test-<tag>-<i>`.
    pub fn new(tag: &str, n: usize) -> Self {
        let mut f = Fixture {
            netns: Vec::new(),
            links: Vec::new(),
            data_dir: tempfile::tempdir().expect("tempdir"),
        };
        for i in 0..n {
            let name = format!("kfcni-test-{tag}-{i}");
            // A leftover from a killed run is removed first.
            let _ = Command::new("ip")
                .args(["netns", "del", &name])
                .stderr(Stdio::null())
                .status();
            sh("ip", &["netns", "add", &name]);
            f.netns.push(name);
        }
        f
    }

    /// Deletes `link` now (if it exists) and again on drop.
    pub fn own_link(&mut self, link: &str) {
        let _ = Command::new("ip")
            .args(["link", "del", link])
            .stderr(Stdio::null())
            .status();
        self.links.push(link.to_string());
    }

    /// The netns path of namespace `i`.
    pub fn path(&self, i: usize) -> String {
        format!("/var/run/netns/{}", self.netns[i])
    }

    /// The IPAM data directory.
    pub fn dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// The files of network `name` in the data directory.
    pub fn store_files(&self, name: &str) -> Vec<String> {
        let dir: PathBuf = self.dir().join(name);
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends, which deletes the host ends.
        for ns in &self.netns {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        for l in &self.links {
            let _ = Command::new("ip")
                .args(["link", "del", l])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A bridge netconf for network `name` on `bridge` with `subnet`, stored under `dir`.
pub fn netconf(
    plugin_type: &str,
    version: &str,
    name: &str,
    bridge: &str,
    subnet: &str,
    dir: &Path,
) -> Value {
    serde_json::json!({
        "cniVersion": version,
        "name": name,
        "type": plugin_type,
        "bridge": bridge,
        "isGateway": true,
        "isDefaultGateway": true,
        "hairpinMode": true,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": subnet}]],
            "dataDir": dir.to_string_lossy(),
        }
    })
}

/// `conf` with `prevResult` set.
pub fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = prev.clone();
    c
}
