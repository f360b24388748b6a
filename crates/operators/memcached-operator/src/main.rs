//! The memcached-operator manager.
//!
//! ```text
//! memcached-operator run [--metrics-bind-address ADDR] [--leader-elect] [--webhook-bind-address ADDR]
//!              [--webhook-cert-dir DIR] [--dev-webhooks]
//! memcached-operator manifests [--config DIR]
//! ```
//!
//! `run` reconciles against the cluster of `KUBECONFIG` (or the in-cluster
//! configuration). `--dev-webhooks` is for `make run` on your machine: it
//! makes development certificates in `.dev-certs/` and points the cluster's
//! webhook configurations at this process. Deployed, the webhook
//! certificates come from `--webhook-cert-dir` (cert-manager's Secret) or
//! are made at start-up and their CA put in the webhook configurations.
//! `manifests` writes `config/` from the code. This file is yours.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use kubeforge_runtime::webhook::{DevCerts, WebhookServer, inject_ca_bundle};
use memcached_operator::{NAMESPACE, Options, webhooks};

/// A command line that cannot be understood (exit code 2).
#[derive(Debug)]
struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\nusage: memcached-operator run [--metrics-bind-address ADDR] [--leader-elect] [--webhook-bind-address ADDR] [--webhook-cert-dir DIR] [--dev-webhooks] | memcached-operator manifests [--config DIR]",
            self.0
        )
    }
}

impl std::error::Error for Usage {}

struct Args {
    command: String,
    metrics: Option<SocketAddr>,
    leader_elect: bool,
    webhook_addr: SocketAddr,
    cert_dir: PathBuf,
    dev_webhooks: bool,
    config: PathBuf,
}

fn parse() -> Result<Args, Usage> {
    let mut it = std::env::args().skip(1);
    let mut args = Args {
        command: "run".into(),
        metrics: None,
        leader_elect: false,
        webhook_addr: ([0, 0, 0, 0], 9443).into(),
        cert_dir: "/tmp/k8s-webhook-server/serving-certs".into(),
        dev_webhooks: false,
        config: "config".into(),
    };
    let mut first = true;
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| Usage(format!("{flag} needs {what}")))
        };
        let addr = |s: String, flag: &str| {
            s.parse::<SocketAddr>().map_err(|e| {
                Usage(format!(
                    "{flag} {s:?}: {e}; give host:port, e.g. 127.0.0.1:8080"
                ))
            })
        };
        match flag.as_str() {
            "run" | "manifests" if first => args.command = flag,
            "--metrics-bind-address" => args.metrics = Some(addr(value("an address")?, &flag)?),
            "--webhook-bind-address" => args.webhook_addr = addr(value("an address")?, &flag)?,
            "--webhook-cert-dir" => args.cert_dir = value("a directory")?.into(),
            "--config" => args.config = value("a directory")?.into(),
            "--leader-elect" => args.leader_elect = true,
            "--dev-webhooks" => args.dev_webhooks = true,
            other => return Err(Usage(format!("unknown argument {other:?}"))),
        }
        first = false;
    }
    Ok(args)
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result = match parse() {
        Ok(args) if args.command == "manifests" => manifests(&args).await,
        Ok(args) => run(args).await,
        Err(usage) => Err(usage.into()),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(if e.is::<Usage>() { 2 } else { 1 });
    }
}

/// Write `config/` from the code.
async fn manifests(args: &Args) -> Result<()> {
    // The manager is only asked what it needs; this client never connects.
    let offline = kube::Config::new("https://127.0.0.1:1".parse()?);
    let client = kube::Client::try_from(offline)?;
    let changed =
        kubeforge_runtime::manifests::write(&args.config, &memcached_operator::manifests(client))?;
    for path in changed {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Run the manager until SIGTERM/SIGINT.
async fn run(args: Args) -> Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster (set KUBECONFIG, or run in a pod)")?;
    let mut options = Options {
        metrics_addr: args.metrics,
        ..Options::default()
    };
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| NAMESPACE.to_string());
    if args.leader_elect {
        options.leader_election_namespace = Some(namespace.clone());
    }
    if webhooks::ANY {
        let (certs, addr) = if args.dev_webhooks {
            let hosts = ["localhost".to_string(), "127.0.0.1".to_string()];
            let certs = DevCerts::load_or_generate(".dev-certs".as_ref(), &hosts)?;
            (
                certs,
                SocketAddr::from(([127, 0, 0, 1], args.webhook_addr.port())),
            )
        } else {
            let service = format!("{}.{namespace}.svc", webhooks::SERVICE);
            let hosts = [service.clone(), format!("{service}.cluster.local")];
            let certs = if args.cert_dir.join("tls.crt").exists() {
                DevCerts::load_or_generate(&args.cert_dir, &hosts)?
            } else {
                // No mounted certificate (no cert-manager): make one here.
                DevCerts::load_or_generate(
                    &std::env::temp_dir().join("memcached-operator-certs"),
                    &hosts,
                )?
            };
            (certs, args.webhook_addr)
        };
        let server = webhooks::register(
            WebhookServer::builder()
                .addr(addr)
                .cert_dir(certs.dir.clone()),
        )
        .bind()
        .await?;
        if args.dev_webhooks {
            let endpoint = webhooks::Endpoint::Url {
                base: format!("https://{}", server.local_addr()),
                ca_bundle: certs.ca_bundle.clone(),
            };
            webhooks::install(client.clone(), &endpoint).await?;
        } else {
            inject_ca_bundle(client.clone(), webhooks::CA_SELECTOR, &certs.ca_bundle).await?;
        }
        options.webhooks = Some(server);
    }
    memcached_operator::manager(client, options).run().await?;
    Ok(())
}
