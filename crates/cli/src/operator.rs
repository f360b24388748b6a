//! `kubeforge operator …`: runs the reference operators of
//! kubeforge-operators against any cluster (a kubeconfig, `$KUBECONFIG`, or
//! in-cluster config), and prints their CRDs.
//!
//! ```text
//! kubeforge operator crd memcached | kubectl apply -f -
//! kubeforge operator memcached --kubeconfig .kubeforge/kubeconfig --leader-elect
//! kubeforge operator crontab --metrics-addr 127.0.0.1:8081
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use kubeforge_operators::{crontab, memcached};
use kubeforge_runtime::{LeaderElection, Manager};

/// `kubeforge operator` arguments.
#[derive(Args)]
pub struct OperatorArgs {
    #[command(subcommand)]
    command: OperatorCommand,
}

#[derive(Subcommand)]
enum OperatorCommand {
    /// Run the Memcached operator (memcacheds.cache.example.com).
    Memcached(MemcachedArgs),
    /// Run the CronTab controller (crontabs.stable.example.com).
    Crontab(RunArgs),
    /// Print a CRD as YAML: `memcached` or `crontab` (what
    /// config/crd/bases/ holds).
    Crd {
        /// `memcached` or `crontab` (or the full CRD name).
        name: String,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the
    /// in-cluster service account).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Elect a leader on a Lease so several replicas can run; only the
    /// leader reconciles.
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "default")]
    leader_election_namespace: String,
    /// This replica's identity in the Lease (default: hostname + random).
    #[arg(long)]
    leader_election_identity: Option<String>,
    /// Serve /metrics, /healthz and /readyz here.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Objects reconciled at once (default: the operator's own default).
    #[arg(long)]
    max_concurrent_reconciles: Option<u16>,
    /// Install (server-side apply) the operator's CRD before starting.
    #[arg(long)]
    install_crd: bool,
}

#[derive(Args)]
struct MemcachedArgs {
    #[command(flatten)]
    run: RunArgs,
    /// memcached image (default: $MEMCACHED_IMAGE or the built-in default).
    #[arg(long)]
    image: Option<String>,
    /// Seconds between resyncs of each Memcached (RequeueAfter).
    #[arg(long, default_value_t = memcached::controller::DEFAULT_RESYNC.as_secs())]
    resync_seconds: u64,
}

/// Runs `kubeforge operator …`.
pub async fn run(args: OperatorArgs) -> Result<()> {
    match args.command {
        OperatorCommand::Crd { name } => {
            let crd = kubeforge_operators::crd_by_name(&name)?;
            print!("{}", kubeforge_operators::crd_yaml(&crd)?);
            Ok(())
        }
        OperatorCommand::Memcached(a) => {
            let mut options = memcached::controller::Options::default();
            if let Some(image) = a.image {
                options.image = image;
            }
            options.resync = Duration::from_secs(a.resync_seconds.max(1));
            if let Some(n) = a.run.max_concurrent_reconciles {
                options.max_concurrent_reconciles = n;
            }
            let mgr = manager(&a.run, "memcached-operator-lock", "memcached").await?;
            memcached::controller::register_with(&mgr, options);
            println!("memcached operator running");
            mgr.run().await.context("running the memcached operator")
        }
        OperatorCommand::Crontab(a) => {
            let mut options = crontab::controller::Options::default();
            if let Some(n) = a.max_concurrent_reconciles {
                options.max_concurrent_reconciles = n;
            }
            let mgr = manager(&a, "crontab-controller-lock", "crontab").await?;
            crontab::controller::register(&mgr, options);
            println!("crontab controller running");
            mgr.run().await.context("running the crontab controller")
        }
    }
}

async fn manager(a: &RunArgs, lock: &str, crd: &str) -> Result<Manager> {
    let client = crate::kubeclient::client(a.kubeconfig.as_deref()).await?;
    if a.install_crd {
        install_crd(&client, crd).await?;
    }
    let mut b = Manager::builder(client);
    if let Some(addr) = a.metrics_addr {
        b = b.metrics_addr(addr);
    }
    if a.leader_elect {
        let mut le = LeaderElection::new(lock, &a.leader_election_namespace);
        if let Some(id) = &a.leader_election_identity {
            le = le.identity(id);
        }
        b = b.leader_election_with(le);
    }
    Ok(b.build())
}

pub(crate) async fn install_crd(client: &kube::Client, name: &str) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams};
    let crd = kubeforge_operators::crd_by_name(name)?;
    let crd_name = crd.metadata.name.clone().unwrap_or_default();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &crd_name,
        &PatchParams::apply("kubeforge-operator").force(),
        &Patch::Apply(&crd),
    )
    .await
    .with_context(|| format!("installing the CRD {crd_name}"))?;
    Ok(())
}
