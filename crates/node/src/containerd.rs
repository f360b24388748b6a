//! A private containerd: its own root, state, socket, CRI configuration,
//! registry hosts and CNI directories under one directory (nothing written
//! to `/etc` or `/var/lib/containerd`), started and stopped with the node.
//!
//! Layout under the instance directory:
//!
//! ```text
//! config.toml         containerd's (version 2) configuration
//! containerd.sock     the CRI socket
//! root/ state/        containerd's root and state (netns mounts under state/)
//! certs.d/            registry hosts: every registry resolves to the local one
//! net.d/              the CNI network configuration
//! containerd.log      what containerd said
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::cri::{Cri, api};
use crate::error::NodeError;
use crate::host;

/// The sandbox (pause) image containerd runs each pod's namespaces in:
/// containerd 1.6's default name, resolved to the local registry.
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.6";

/// How a private containerd is set up.
#[derive(Clone, Debug)]
pub struct ContainerdConfig {
    /// The instance directory.
    pub dir: PathBuf,
    /// Where the CNI plugin binaries are (Debian: /usr/lib/cni).
    pub cni_bin_dir: PathBuf,
    /// The CNI network configuration list (JSON) to install, if any.
    pub cni_conflist: Option<String>,
    /// The registry every image name resolves to (`127.0.0.1:5000`).
    pub registry: Option<String>,
}

/// A running containerd this process started.
#[derive(Debug)]
pub struct Containerd {
    child: Child,
    dir: PathBuf,
    cri: Cri,
}

/// containerd's configuration for an instance under `dir`.
pub fn config_toml(cfg: &ContainerdConfig) -> String {
    let dir = cfg.dir.display();
    let cni_bin = cfg.cni_bin_dir.display();
    format!(
        r#"# Written by kubeforge: a private containerd for container nodes.
version = 2
root = "{dir}/root"
state = "{dir}/state"

[grpc]
address = "{dir}/containerd.sock"

[ttrpc]
address = "{dir}/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
path = "{dir}/opt"

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "{SANDBOX_IMAGE}"
stream_server_address = "127.0.0.1"
stream_server_port = "0"
netns_mounts_under_state_dir = true
disable_apparmor = true
# Lowering oom_score_adj needs CAP_SYS_RESOURCE, which a sandboxed host may
# not grant: clamp to containerd's own value instead of failing.
restrict_oom_score_adj = true
max_container_log_line_size = 16384

[plugins."io.containerd.grpc.v1.cri".containerd]
snapshotter = "overlayfs"
default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "{cni_bin}"
conf_dir = "{dir}/net.d"
max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri".registry]
config_path = "{dir}/certs.d"
"#
    )
}

/// A registry host file sending every pull to `registry` over plain HTTP:
/// `server` is the local registry itself, so no name falls through to the
/// internet (containerd appends the upstream only when `server` is unset).
pub fn hosts_toml(registry: &str) -> String {
    format!(
        "# Written by kubeforge: every image comes from the local registry.\n\
         server = \"http://{registry}\"\n\n\
         [host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    )
}

fn write(path: &Path, text: &str) -> Result<(), NodeError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| NodeError::io(format!("creating {}", parent.display()), e))?;
    }
    std::fs::write(path, text).map_err(|e| NodeError::io(format!("writing {}", path.display()), e))
}

impl Containerd {
    /// Write the configuration and start containerd; returns once its CRI
    /// answers.
    pub async fn start(cfg: &ContainerdConfig) -> Result<Containerd, NodeError> {
        host::check_container_host(&cfg.cni_bin_dir)?;
        let program = host::find_program("containerd", "containerd")?;
        let dir = std::path::absolute(&cfg.dir)
            .map_err(|e| NodeError::io(format!("resolving {}", cfg.dir.display()), e))?;
        let cfg = ContainerdConfig {
            dir: dir.clone(),
            ..cfg.clone()
        };
        // A socket path over 107 bytes cannot be bound.
        let socket = dir.join("containerd.sock");
        if socket.as_os_str().len() > 100 {
            return Err(NodeError::io(
                format!("the containerd socket path {}", socket.display()),
                std::io::Error::other(
                    "longer than a Unix socket path may be; use a shorter data directory",
                ),
            ));
        }
        // Whatever a previous instance left mounted here is gone now.
        host::unmount_all(&dir.join("state"));
        let _ = std::fs::remove_file(&socket);
        write(&dir.join("config.toml"), &config_toml(&cfg))?;
        let certs = dir.join("certs.d");
        let _ = std::fs::remove_dir_all(&certs);
        if let Some(registry) = &cfg.registry {
            for host in ["_default", "docker.io", "registry.k8s.io"] {
                write(&certs.join(host).join("hosts.toml"), &hosts_toml(registry))?;
            }
        }
        let netd = dir.join("net.d");
        let _ = std::fs::remove_dir_all(&netd);
        std::fs::create_dir_all(&netd)
            .map_err(|e| NodeError::io(format!("creating {}", netd.display()), e))?;
        if let Some(conflist) = &cfg.cni_conflist {
            write(&netd.join("10-kubeforge.conflist"), conflist)?;
        }
        let log_path = dir.join("containerd.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| NodeError::io(format!("creating {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| NodeError::io("duplicating the log file", e))?;
        let mut child = Command::new(&program)
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(true)
            // Its own process group: a terminal's Ctrl-C reaches only us,
            // and we stop it after the pods it runs.
            .process_group(0)
            .spawn()
            .map_err(|e| NodeError::io(format!("starting {}", program.display()), e))?;
        let cri = Cri::connect(&socket);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child
                .try_wait()
                .map_err(|e| NodeError::io("waiting for containerd", e))?
            {
                return Err(NodeError::Exited {
                    program: "containerd".into(),
                    status: status.to_string(),
                    log: log_path,
                });
            }
            if socket.exists() && cri.version().await.is_ok() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill().await;
                return Err(NodeError::Exited {
                    program: "containerd".into(),
                    status: "no answer on its socket within 30s".into(),
                    log: log_path,
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        tracing::info!(socket = %socket.display(), "containerd started");
        Ok(Containerd { child, dir, cri })
    }

    /// The CRI socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// A CRI client of this instance.
    pub fn cri(&self) -> Cri {
        self.cri.clone()
    }

    /// The instance directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stop and remove every pod sandbox (containers go with them), stop
    /// containerd, and unmount whatever it left under its directory.
    pub async fn stop(mut self) {
        remove_all_sandboxes(&self.cri).await;
        if let Some(pid) = self.child.id() {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.kill().await;
            }
        }
        // Shims exit once their tasks are gone; wait for them (and end any
        // that a failed removal left), so nothing of this instance remains.
        let socket = self.socket().display().to_string();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let left = host::processes_mentioning(&socket);
            if left.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                for pid in left {
                    tracing::warn!(pid, "ending a shim that outlived containerd");
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = host::unmount_all(&self.dir);
        if left > 0 {
            tracing::debug!(mounts = left, "unmounted what containerd left");
        }
        let _ = std::fs::remove_file(self.socket());
    }
}

/// Stop and remove every sandbox the runtime has (its containers with it).
pub async fn remove_all_sandboxes(cri: &Cri) {
    let mut rt = cri.runtime.clone();
    let Ok(list) = rt
        .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await
    else {
        return;
    };
    for sb in list.into_inner().items {
        let id = sb.id;
        if let Err(e) = rt
            .stop_pod_sandbox(api::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
        {
            tracing::warn!(sandbox = %id, error = %e.message(), "cannot stop sandbox");
        }
        if let Err(e) = rt
            .remove_pod_sandbox(api::RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
        {
            tracing::warn!(sandbox = %id, error = %e.message(), "cannot remove sandbox");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_registry_host_resolves_locally() {
        let t = hosts_toml("127.0.0.1:5000");
        assert!(t.contains("server = \"http://127.0.0.1:5000\""));
        assert!(t.contains("[host.\"http://127.0.0.1:5000\"]"));
    }

    #[test]
    fn config_keeps_everything_under_the_directory() {
        let cfg = ContainerdConfig {
            dir: "/x/ctd".into(),
            cni_bin_dir: "/usr/lib/cni".into(),
            cni_conflist: None,
            registry: None,
        };
        let t = config_toml(&cfg);
        for line in t.lines().filter(|l| l.contains("\"/")) {
            assert!(
                line.contains("/x/ctd") || line.contains("/usr/lib/cni") || line.starts_with('#'),
                "{line}"
            );
        }
        assert!(t.contains("netns_mounts_under_state_dir = true"));
    }
}
