//! The container runtimes of one machine's container nodes: the local
//! registry (with the base images built when missing), the egress guard,
//! and one private containerd per node on its own bridge and pod range —
//! what `kubeforge up --container-nodes N`, the tests and the benchmarks
//! start before the node agents.

use std::path::{Path, PathBuf};

use crate::containerd::{Containerd, ContainerdConfig, SANDBOX_IMAGE};
use crate::error::NodeError;
use crate::image::{self, ImageRef};
use crate::network;
use crate::registry::{LocalRegistry, RegistryClient};

/// Where Debian's reference CNI plugins are.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The images every container node needs (preset, name), built when
/// missing.
pub const BASE_IMAGES: [(&str, &str); 2] = [("pause", SANDBOX_IMAGE), ("busybox", "busybox:1.36")];

/// The pod range of container node `i`.
pub fn node_subnet(i: usize) -> String {
    format!("10.244.{i}.0/24")
}

/// Build `images` (preset, name) into `registry` unless already there.
pub async fn ensure_images(
    registry: &RegistryClient,
    images: &[(&str, &str)],
) -> Result<(), NodeError> {
    for (preset, name) in images {
        let r = ImageRef::parse(name).map_err(|e| NodeError::Build {
            image: name.to_string(),
            reason: e.to_string(),
        })?;
        if !registry.has_manifest(&r.path, &r.tag).await? {
            image::preset(preset)?.push(registry, &r).await?;
        }
    }
    Ok(())
}

/// The runtimes of a machine's container nodes.
#[derive(Debug)]
pub struct Runtimes {
    registry: LocalRegistry,
    guard: network::Guard,
    runtimes: Vec<Containerd>,
}

impl Runtimes {
    /// Start the registry (storage under `<dir>/registry`), the guard and
    /// `n` containerd instances (under `<dir>/containerd/<name>`, named by
    /// `name(i)`); on failure what was started is stopped again.
    pub async fn start(
        dir: &Path,
        n: usize,
        name: impl Fn(usize) -> String,
    ) -> Result<Runtimes, NodeError> {
        let dir = std::path::absolute(dir)
            .map_err(|e| NodeError::io(format!("resolving {}", dir.display()), e))?;
        let registry = LocalRegistry::start(&dir.join("registry"), 0).await?;
        if let Err(e) = ensure_images(&RegistryClient::new(registry.addr()), &BASE_IMAGES).await {
            registry.stop().await;
            return Err(e);
        }
        let guard = match network::install_guard() {
            Ok(g) => g,
            Err(e) => {
                registry.stop().await;
                return Err(e);
            }
        };
        let mut out = Runtimes {
            registry,
            guard,
            runtimes: Vec::new(),
        };
        for i in 0..n {
            let rdir: PathBuf = dir.join("containerd").join(name(i));
            let cfg = ContainerdConfig {
                dir: rdir.clone(),
                cni_bin_dir: CNI_BIN_DIR.into(),
                cni_conflist: Some(network::reference_conflist(
                    &network::bridge(i),
                    &node_subnet(i),
                    &rdir.join("ipam"),
                )),
                registry: Some(out.registry.addr().to_string()),
            };
            match Containerd::start(&cfg).await {
                Ok(r) => out.runtimes.push(r),
                Err(e) => {
                    out.stop().await;
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Runtime `i`.
    pub fn runtime(&self, i: usize) -> &Containerd {
        &self.runtimes[i]
    }

    /// How many runtimes run.
    pub fn len(&self) -> usize {
        self.runtimes.len()
    }

    /// Whether none runs.
    pub fn is_empty(&self) -> bool {
        self.runtimes.is_empty()
    }

    /// The registry's `127.0.0.1:PORT`.
    pub fn registry_addr(&self) -> &str {
        self.registry.addr()
    }

    /// Stop the runtimes (and whatever pods they still run), the registry,
    /// and remove the bridges, the guard and the nodes' cgroups.
    pub async fn stop(self) {
        for r in self.runtimes {
            r.stop().await;
        }
        self.registry.stop().await;
        network::remove_guard_and_bridges(self.guard);
        crate::host::remove_cgroup("/kubeforge");
    }
}
