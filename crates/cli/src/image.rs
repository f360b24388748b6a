//! `kubeforge image build NAME[:TAG]`: an OCI image from this machine's
//! programs (a preset named like the image — busybox, pause, memcached,
//! redis — or `--binary` programs with their shared libraries), pushed to
//! the local registry container nodes pull from (storage under
//! `<data-dir>/registry`, shared with a running `kubeforge up`).
//!
//! ```sh
//! sudo kubeforge image build busybox:1.36
//! sudo kubeforge image build tools:v1 --binary /usr/bin/curl --entrypoint /usr/bin/curl
//! ```

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use kubeforge_node::image::{self, ImageBuilder, ImageRef};
use kubeforge_node::registry::{LocalRegistry, RegistryClient};

#[derive(Args, Clone)]
pub struct ImageArgs {
    #[command(subcommand)]
    command: ImageCommand,
}

#[derive(Subcommand, Clone)]
enum ImageCommand {
    /// Build an image and push it to the local registry.
    Build(BuildArgs),
}

#[derive(Args, Clone)]
struct BuildArgs {
    /// The image name as pods name it (`busybox:1.36`,
    /// `docker.io/library/memcached:1.6`, `registry.k8s.io/pause:3.6`).
    name: String,
    /// Build this preset instead of the one named like the image:
    /// busybox, pause, memcached, redis.
    #[arg(long)]
    preset: Option<String>,
    /// Put this program (with its shared libraries) in the image;
    /// repeatable. Busybox's shell and tools are added too.
    #[arg(long = "binary", value_name = "PATH")]
    binaries: Vec<PathBuf>,
    /// The image's entrypoint (repeat for its arguments).
    #[arg(long = "entrypoint", value_name = "ARG")]
    entrypoint: Vec<String>,
    /// The data directory of the cluster whose registry to push to.
    #[arg(long, default_value = ".kubeforge")]
    data_dir: PathBuf,
    /// The cluster `up --name NAME` started.
    #[arg(long = "name", id = "cluster", value_name = "NAME", conflicts_with = "data_dir", value_parser = crate::clusterdir::named)]
    cluster: Option<PathBuf>,
}

fn usage_error(message: String) -> ! {
    clap::Error::raw(
        clap::error::ErrorKind::ValueValidation,
        format!("{message}\n"),
    )
    .exit()
}

pub async fn run(args: ImageArgs) -> Result<()> {
    let ImageCommand::Build(mut args) = args.command;
    if let Some(dir) = args.cluster.take() {
        args.data_dir = dir;
    }
    let reference = ImageRef::parse(&args.name).unwrap_or_else(|e| usage_error(e.to_string()));
    let mut builder = if args.binaries.is_empty() {
        let preset = args.preset.clone().unwrap_or_else(|| {
            reference
                .path
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string()
        });
        image::preset(&preset).unwrap_or_else(|e| usage_error(e.to_string()))
    } else {
        let mut b = ImageBuilder::new();
        b.busybox()?;
        for bin in &args.binaries {
            if !bin.is_file() {
                usage_error(format!("--binary {}: no such program", bin.display()));
            }
            b.binary(bin)
                .with_context(|| format!("adding {}", bin.display()))?;
        }
        b
    };
    if !args.entrypoint.is_empty() {
        builder.config("Entrypoint", serde_json::json!(args.entrypoint));
    }
    // The cluster's own registry while it runs; its storage otherwise,
    // served for the push by a registry of our own.
    let live = kubeforge_node::footprint::DirLock::holder(&args.data_dir)
        .and_then(|_| kubeforge_node::footprint::Record::read(&args.data_dir))
        .and_then(|r| r.registry);
    let (addr, ours) = match live {
        Some(addr) => (addr, None),
        None => {
            if !args.data_dir.join("registry").is_dir() {
                usage_error(format!(
                    "no cluster in {}: it has no image registry. Pass the --data-dir of a cluster that ran `kubeforge up --container-nodes N`, or start one there first",
                    args.data_dir.display()
                ));
            }
            let registry = LocalRegistry::start(&args.data_dir.join("registry"), 0)
                .await
                .context("starting the local registry (Debian package docker-registry)")?;
            (registry.addr().to_string(), Some(registry))
        }
    };
    let pushed = builder.push(&RegistryClient::new(&addr), &reference).await;
    if let Some(registry) = ours {
        registry.stop().await;
    }
    let digest = pushed.with_context(|| format!("pushing {}", reference.full()))?;
    println!("{} {digest}", reference.full());
    Ok(())
}
