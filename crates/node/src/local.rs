//! The container runtimes of one cluster's container nodes: the local
//! registry (with the base images built when missing), the egress guard,
//! and one private containerd per node on its own bridge and pod range —
//! what `kubeforge up --container-nodes N`, the tests and the benchmarks
//! start before the node agents. Everything is recorded in the data
//! directory first ([`crate::footprint`]), and a dead earlier
//! run's leftovers there are removed before anything starts.

use std::path::{Path, PathBuf};

use crate::containerd::{Containerd, ContainerdConfig, SANDBOX_IMAGE};
use crate::error::NodeError;
use crate::footprint::{self, ClusterId, DirLock, Record};
use crate::image::{self, ImageRef};
use crate::network;
use crate::registry::{LocalRegistry, RegistryClient};

/// Where Debian's reference CNI plugins are.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The images every container node needs (preset, name), built when
/// missing.
pub const BASE_IMAGES: [(&str, &str); 2] = [("pause", SANDBOX_IMAGE), ("busybox", "busybox:1.36")];

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
    record: Record,
    network: network::PodNetwork,
    registry: Option<LocalRegistry>,
    runtimes: Vec<Containerd>,
}

impl Runtimes {
    /// Start the registry (storage under `<dir>/registry`), the guard and
    /// `n` containerd instances (under `<dir>/containerd/<name>`, named by
    /// `name(i)`) for the data directory `lock` holds; on failure what was
    /// started is removed again.
    pub async fn start(
        lock: &DirLock,
        n: usize,
        name: impl Fn(usize) -> String,
    ) -> Result<Runtimes, NodeError> {
        Self::start_with(lock, n, name, &network::CniPlugin::Reference).await
    }

    /// [`Runtimes::start`] with pods attached by `cni`.
    pub async fn start_with(
        lock: &DirLock,
        n: usize,
        name: impl Fn(usize) -> String,
        cni: &network::CniPlugin,
    ) -> Result<Runtimes, NodeError> {
        crate::host::check_container_host(Path::new(CNI_BIN_DIR))?;
        let dir = lock.dir().to_path_buf();
        let id = ClusterId::of(&dir);
        // We hold the lock: whatever an earlier run recorded here is dead.
        if let Some(old) = Record::read(&dir) {
            let old_id = old.id.clone().unwrap_or_else(|| id.clone());
            let report = footprint::clean_dead(&old_id, &dir, Some(&old));
            for what in &report.removed {
                tracing::warn!(%what, "removed what an earlier run left");
            }
            if let Some((what, why)) = report.failed.first() {
                return Err(NodeError::io(
                    format!(
                        "removing what an earlier run left in {} ({what})",
                        dir.display()
                    ),
                    std::io::Error::other(format!(
                        "{why}; run `kubeforge clean --data-dir {}`",
                        dir.display()
                    )),
                ));
            }
        }
        let mut record = Record {
            id: Some(id.clone()),
            data_dir: dir.clone(),
            pid: std::process::id(),
            links: Vec::new(),
            tables: vec![
                ("inet".into(), id.guard_table()),
                ("ip".into(), id.proxy_table()),
            ],
            cgroup_parent: id.cgroup_parent(),
            registry: None,
        };
        // Recorded before anything exists, so a kill at any point below
        // leaves a record to clean by.
        record.write()?;
        footprint::note_forwarding();
        let network = match network::PodNetwork::allocate(&id, n) {
            Ok(net) => net,
            Err(e) => {
                footprint::clean_dead(&id, &dir, Some(&record));
                return Err(e);
            }
        };
        record.links = (0..n).map(|i| network.bridge(i)).collect();
        let mut out = Runtimes {
            record,
            network,
            registry: None,
            runtimes: Vec::new(),
        };
        if let Err(e) = out.record.write() {
            out.stop().await;
            return Err(e);
        }
        if let Err(e) = network::install_guard(&out.network) {
            out.stop().await;
            return Err(e);
        }
        let registry_addr = match LocalRegistry::start(&dir.join("registry"), 0).await {
            Ok(r) => out.registry.insert(r).addr().to_string(),
            Err(e) => {
                out.stop().await;
                return Err(e);
            }
        };
        out.record.registry = Some(registry_addr.clone());
        if let Err(e) = out.record.write() {
            out.stop().await;
            return Err(e);
        }
        if let Err(e) = ensure_images(&RegistryClient::new(&registry_addr), &BASE_IMAGES).await {
            out.stop().await;
            return Err(e);
        }
        let cni_bin_dir = match cni.bin_dir(Path::new(CNI_BIN_DIR), &dir.join("cni").join("bin")) {
            Ok(d) => d,
            Err(e) => {
                out.stop().await;
                return Err(e);
            }
        };
        for i in 0..n {
            let rdir: PathBuf = dir.join("containerd").join(name(i));
            let cfg = ContainerdConfig {
                dir: rdir.clone(),
                cni_bin_dir: cni_bin_dir.clone(),
                cni_conflist: Some(cni.conflist(
                    &out.network.bridge(i),
                    &out.network.subnet(i),
                    &rdir.join("ipam"),
                )),
                registry: Some(registry_addr.clone()),
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
        self.registry.as_ref().map_or("", |r| r.addr())
    }

    /// The cluster's pod network (bridges, ranges, gateways).
    pub fn network(&self) -> &network::PodNetwork {
        &self.network
    }

    /// The cluster's id on this machine.
    pub fn id(&self) -> &ClusterId {
        self.network.id()
    }

    /// The cgroup the nodes' pods go under.
    pub fn cgroup_parent(&self) -> &str {
        &self.record.cgroup_parent
    }

    /// Stop the runtimes (and whatever pods they still run) and the
    /// registry, then remove whatever of this cluster is left on the
    /// machine (bridges, tables, cgroups; IPv4 forwarding restored when no
    /// other cluster routes) and its record. What could not be removed
    /// is logged, and stays recorded for `kubeforge clean`.
    pub async fn stop(self) {
        for r in self.runtimes {
            r.stop().await;
        }
        if let Some(r) = self.registry {
            r.stop().await;
        }
        let report =
            footprint::clean_dead(self.network.id(), &self.record.data_dir, Some(&self.record));
        for (what, why) in &report.failed {
            tracing::warn!(%what, %why, "cannot remove; `kubeforge clean` retries");
        }
    }
}
