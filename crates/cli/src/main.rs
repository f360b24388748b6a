//! The `kubeforge` command.
//!
//! `kubeforge up` runs a whole cluster on loopback with its state in
//! `.kubeforge/`: the API server, the built-in controllers (garbage
//! collector, namespace controller), the workload controllers, the scheduler
//! and simulated nodes ([`cluster`]). `kubeforge apiserver` runs just the API
//! server.

mod authz;
mod authz_webhook;
mod clean;
mod cluster;
mod clusterdir;
mod containers;
mod image;
mod kubeclient;
mod node;
mod operator;
mod pki;
mod scaffold;
mod scheduler;
mod state_metrics;
mod webhook;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use kubeforge_apiserver::ApiServer;
use kubeforge_store::{DurableOptions, Store};

// mimalloc: the API server allocates many small JSON nodes per request;
// glibc malloc spent ~16% of a create-heavy profile in its own code.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "kubeforge",
    version,
    about = "An embedded Kubernetes control plane and tools for extending Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a whole cluster in one process: the API server, the built-in and
    /// workload controllers, the scheduler and simulated nodes (state in
    /// .kubeforge/ by default).
    Up(Box<UpArgs>),
    /// Run only the API server (no garbage collector or namespace
    /// controller: deleting a namespace then empties it at once).
    Apiserver(ServeArgs),
    /// Run a reference operator (memcached, crontab) against a cluster, or
    /// print its CRD.
    Operator(operator::OperatorArgs),
    /// Run kubeforge's scheduler (Scheduling Framework plugins, extenders)
    /// against a cluster, configured by a KubeSchedulerConfiguration file.
    Scheduler(scheduler::SchedulerArgs),
    /// Serve a cluster's object-state metrics under kube-state-metrics'
    /// names (pods, Deployments, nodes) at /metrics, on loopback.
    StateMetrics(state_metrics::StateMetricsArgs),
    /// Run the admission policy server (AdmissionPolicy CRD) as webhooks
    /// against a cluster; also keygen, sign and crd.
    Webhook(webhook::WebhookArgs),
    /// Access-policy tools: `explain` says whether a user may do
    /// something and which binding, role, parent and rule decide it.
    Authz(authz::AuthzArgs),
    /// Build images from this machine's programs into the local registry
    /// container nodes pull from (`image build busybox:1.36`).
    Image(image::ImageArgs),
    /// Run a node agent (the kubelet's role) for a container runtime's CRI
    /// socket against a cluster.
    Node(node::NodeArgs),
    /// Remove what a dead `kubeforge up --container-nodes` left on this
    /// machine (processes, shims and containers, mounts, cgroups, bridges,
    /// nftables tables); a live cluster is never touched.
    Clean(clean::CleanArgs),
    /// Scaffold an operator project on kubeforge-runtime in an empty
    /// folder (Cargo project, Manager, config/ kustomize, Dockerfile,
    /// Makefile).
    Init(scaffold::InitArgs),
    /// Add to a scaffolded project: `create api` (a kind's type and
    /// controller), `create webhook` (its defaulting and validation).
    Create(scaffold::CreateArgs),
    /// Write a scaffolded project's config/ from its code: CRDs from the
    /// Rust types, RBAC from what the controllers declare, webhook
    /// configurations (what `make manifests` runs).
    Manifests(scaffold::ManifestsArgs),
}

#[derive(Args, Clone)]
struct UpArgs {
    #[command(flatten)]
    serve: ServeArgs,
    #[command(flatten)]
    cluster: cluster::ClusterArgs,
}

#[derive(Args, Clone)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free one). Without it,
    /// 127.0.0.1:6443, or a free loopback port when another cluster has
    /// that one (said in the output and the kubeconfig).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Directory for the durable store and the kubeconfig.
    #[arg(long, default_value = ".kubeforge")]
    data_dir: PathBuf,
    /// Name the cluster instead of giving its data directory: it lives in
    /// `~/.local/share/kubeforge/clusters/NAME` (under $XDG_DATA_HOME when
    /// set), and `clean` and `image build` find it by the same name.
    #[arg(long, conflicts_with = "data_dir", value_parser = clusterdir::named)]
    name: Option<PathBuf>,
    /// Keep everything in memory (nothing survives a restart).
    #[arg(long)]
    memory: bool,
    /// Skip fsync on commit (faster, but a crash may lose acknowledged writes).
    #[arg(long)]
    no_fsync: bool,
    /// While the store is busy, a batch of writes waits until this long
    /// after the previous fsync, so that more writes share the next one
    /// (far fewer fsyncs under load; each write may wait up to this much
    /// longer). 0 syncs each batch at once.
    #[arg(long, default_value = "2ms", value_parser = cluster::duration)]
    commit_gap: std::time::Duration,
    /// Revisions of history kept for watches and consistent lists when the
    /// store is compacted (older resourceVersions get 410 Expired).
    #[arg(long, default_value_t = 100_000)]
    history_window: u64,
    /// Seconds between compactions (kube-apiserver compacts every 300).
    #[arg(long, default_value_t = 300)]
    compaction_interval: u64,
    /// Serve plain HTTP with no authentication, every client an
    /// administrator (the first wave's behaviour, for tools that cannot do
    /// TLS). Only on a loopback address. The default is HTTPS: a cluster CA,
    /// a serving certificate and an administrator's client certificate
    /// under `<data-dir>/pki/`, written into the kubeconfig, with RBAC on.
    #[arg(long)]
    insecure_http: bool,
    /// Static bearer tokens besides client certificates (kube-apiserver's
    /// `--token-auth-file`): CSV lines `token,user,uid[,"group1,group2"]`.
    #[arg(long, value_name = "FILE")]
    token_auth_file: Option<PathBuf>,
    /// Networks of reverse proxies whose `X-Forwarded-For` header names the
    /// client address that AccessBinding `sourceCIDRs` conditions check:
    /// the first entry from the right that is not one of these proxies
    /// (entries left of it are the client's own; a missing header or an
    /// entry that is not an address fails those conditions). Anyone else's
    /// header is ignored. Repeatable or comma-separated.
    #[arg(long = "authz-trusted-proxies", value_name = "CIDR", value_delimiter = ',', value_parser = parse_cidr)]
    trusted_proxies: Vec<kubeforge_apimachinery::net::IpNet>,
    /// Write audit events (`audit.k8s.io/v1` Event JSON lines) here,
    /// chosen by --audit-policy-file (without one: every request at
    /// Metadata level).
    #[arg(long, value_name = "FILE")]
    audit_log_path: Option<PathBuf>,
    /// kube's audit Policy (`audit.k8s.io/v1`, YAML or JSON).
    #[arg(long, value_name = "FILE", requires = "audit_log_path")]
    audit_policy_file: Option<PathBuf>,
    /// Rotate the audit log when it reaches this many megabytes (0: never).
    #[arg(long, default_value_t = 100)]
    audit_log_maxsize: u64,
    /// How many rotated audit logs to keep (0: all).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// kube-apiserver's admission configuration (`AdmissionConfiguration`,
    /// YAML or JSON), or a bare `PodSecurityConfiguration`: its
    /// `PodSecurity` entry sets the cluster's default Pod Security levels
    /// and the users, namespaces and RuntimeClasses exempt from them.
    /// Without it every namespace is `privileged` until labelled.
    #[arg(long, value_name = "FILE")]
    admission_control_config_file: Option<PathBuf>,
    /// Where the API server reaches admission webhooks configured with
    /// `clientConfig.service` (there is no service network here):
    /// `NAMESPACE/NAME[:PORT]=HOST:PORT`, the service port defaulting to
    /// 443 as in Kubernetes. Repeatable. TLS still checks the name
    /// `NAME.NAMESPACE.svc`.
    #[arg(long = "webhook-service", value_name = "NS/NAME[:PORT]=HOST:PORT", value_parser = parse_webhook_service)]
    webhook_services: Vec<WebhookService>,
}

/// One `--webhook-service` mapping.
#[derive(Clone, Debug)]
struct WebhookService {
    namespace: String,
    name: String,
    port: u16,
    addr: SocketAddr,
}

fn parse_webhook_service(s: &str) -> Result<WebhookService, String> {
    use std::net::ToSocketAddrs;
    let (service, target) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAMESPACE/NAME[:PORT]=HOST:PORT"))?;
    let (namespace, rest) = service
        .split_once('/')
        .ok_or_else(|| format!("{service:?}: expected NAMESPACE/NAME[:PORT] before '='"))?;
    let (name, port) = match rest.split_once(':') {
        Some((name, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{port:?}: the service port must be 1-65535"))?;
            (name, port)
        }
        None => (rest, 443),
    };
    if namespace.is_empty() || name.is_empty() || name.contains('/') {
        return Err(format!(
            "{service:?}: expected NAMESPACE/NAME[:PORT], with both parts set"
        ));
    }
    let addr = target
        .to_socket_addrs()
        .map_err(|e| format!("{target:?}: {e} (expected HOST:PORT)"))?
        .next()
        .ok_or_else(|| format!("{target:?}: no address"))?;
    Ok(WebhookService {
        namespace: namespace.to_string(),
        name: name.to_string(),
        port,
        addr,
    })
}

/// The PodSecurity configuration `--admission-control-config-file` names;
/// a file that cannot be read or is invalid ends the program (exit 2)
/// saying which field is wrong.
fn pod_security_config(args: &ServeArgs) -> Option<kubeforge_podsecurity::config::Config> {
    let file = args.admission_control_config_file.as_ref()?;
    let parsed = std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|text| {
            kubeforge_podsecurity::config::Config::parse(&text).map_err(|e| e.to_string())
        });
    match parsed {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!(
                "error: --admission-control-config-file {}: {e}\nFix the file (an AdmissionConfiguration with a PodSecurity plugin entry, or a PodSecurityConfiguration) or leave the flag out.",
                file.display()
            );
            std::process::exit(2);
        }
    }
}

/// The audit log the flags ask for, if any.
fn audit_log(args: &ServeArgs) -> Result<Option<kubeforge_apiserver::audit::AuditLog>> {
    use kubeforge_apiserver::audit::{AuditLog, Level, Policy};
    let Some(path) = &args.audit_log_path else {
        return Ok(None);
    };
    let policy = match &args.audit_policy_file {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading the audit policy {}", file.display()))?;
            Policy::parse(&text).with_context(|| format!("loading {}", file.display()))?
        }
        None => Policy::everything(Level::Metadata),
    };
    Ok(Some(AuditLog::open(
        policy,
        path,
        args.audit_log_maxsize,
        args.audit_log_maxbackup,
    )?))
}

fn parse_cidr(s: &str) -> Result<kubeforge_apimachinery::net::IpNet, String> {
    kubeforge_apimachinery::net::IpNet::parse(s).map_err(|e| format!("{s:?}: {e}"))
}

fn main() -> Result<std::process::ExitCode> {
    // Called by its CNI name (a link container nodes' containerd runs),
    // this program is the kubeforge-cni plugin and nothing else.
    if std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n == kubeforge_node::network::KUBEFORGE_CNI)
        })
        .unwrap_or(false)
    {
        std::process::exit(kubeforge_cni::plugin_main());
    }
    let cli = Cli::parse();
    // Scaffolding only writes files: no logging set-up or async runtime.
    let cli = match cli.command {
        Command::Init(a) => return Ok(scaffold::init(a)),
        Command::Create(a) => return Ok(scaffold::create(a)),
        Command::Manifests(a) => return Ok(scaffold::manifests(a)),
        command => Cli { command },
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KUBEFORGE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Up(args) => {
            let UpArgs { serve: s, cluster } = *args;
            rt.block_on(serve(s, Some(cluster)))
        }
        Command::Apiserver(args) => rt.block_on(serve(args, None)),
        Command::Operator(args) => rt.block_on(operator::run(args)),
        Command::Scheduler(args) => rt.block_on(scheduler::run(args)),
        Command::StateMetrics(args) => rt.block_on(state_metrics::run(args)),
        Command::Image(args) => rt.block_on(image::run(args)),
        Command::Node(args) => rt.block_on(node::run(args)),
        Command::Clean(args) => return Ok(clean::run(args)),
        Command::Webhook(args) => rt.block_on(webhook::run(args)),
        Command::Authz(args) => rt.block_on(authz::run(args)),
        Command::Init(_) | Command::Create(_) | Command::Manifests(_) => {
            unreachable!("handled above")
        }
    }
    .map(|()| std::process::ExitCode::SUCCESS)
}

async fn serve(mut args: ServeArgs, cluster: Option<cluster::ClusterArgs>) -> Result<()> {
    if let Some(dir) = args.name.take() {
        args.data_dir = dir;
    }
    let listen = args.listen.unwrap_or(DEFAULT_LISTEN);
    if args.insecure_http && !listen.ip().is_loopback() {
        use clap::CommandFactory;
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "refusing to serve plain HTTP without authentication on {}: anyone who reaches it would be an administrator. Drop --insecure-http (HTTPS with client certificates is the default) or listen on a loopback address",
                    listen
                ),
            )
            .exit();
    }
    if args.insecure_http
        && cluster
            .as_ref()
            .is_some_and(cluster::ClusterArgs::runs_containers)
    {
        use clap::CommandFactory;
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "refusing --insecure-http with --container-nodes: every pod with hostNetwork could reach the unauthenticated API on loopback and be an administrator. Drop --insecure-http (HTTPS with client certificates is the default)",
            )
            .exit();
    }
    if let Some(c) = &cluster {
        c.check();
    }
    let pod_security = pod_security_config(&args);
    let up = cluster.is_some();
    let started = Instant::now();
    // Before anything starts: SIGTERM and SIGHUP stop us as Ctrl-C does,
    // even while we are still starting.
    let shutdown = stop_signals()?;
    std::fs::create_dir_all(&args.data_dir).with_context(|| {
        format!(
            "creating the data directory {}; pass --data-dir to use another",
            args.data_dir.display()
        )
    })?;
    let lock = match kubeforge_node::footprint::DirLock::acquire(&args.data_dir) {
        Ok(l) => l,
        Err(e @ kubeforge_node::NodeError::InUse { .. }) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
        Err(e) => return Err(e).context("locking the data directory"),
    };
    let store = if args.memory {
        Store::memory()
    } else {
        let opts = DurableOptions {
            fsync: !args.no_fsync,
            commit_gap: args.commit_gap,
            ..DurableOptions::default()
        };
        Store::open(&args.data_dir.join("store"), opts)
            .await
            .with_context(|| {
                format!(
                    "opening the store in {}",
                    args.data_dir.join("store").display()
                )
            })?
    };
    let server = ApiServer::new(store.clone())
        .await
        .map_err(|e| anyhow::anyhow!("starting the API server: {e}"))?;
    server.set_audit(audit_log(&args)?);
    if let Some(c) = pod_security {
        server.set_pod_security(c);
    }
    for w in &args.webhook_services {
        server.set_service_address(&w.namespace, &w.name, w.port, w.addr);
    }
    let listener = match tokio::net::TcpListener::bind(listen).await {
        // kind gives each cluster its own port: so does a second `up`
        // that was not told where to listen.
        Err(e) if args.listen.is_none() && e.kind() == std::io::ErrorKind::AddrInUse => {
            let l = tokio::net::TcpListener::bind((listen.ip(), 0))
                .await
                .with_context(|| format!("listening on {}", listen.ip()))?;
            if let Ok(a) = l.local_addr() {
                eprintln!(
                    "note: {listen} is taken (another cluster?); listening on {a} instead (in the kubeconfig)"
                );
            }
            l
        }
        r => r.with_context(|| {
            format!("listening on {listen}: is another kubeforge running? pass --listen 127.0.0.1:0 for a free port")
        })?,
    };
    let addr = listener
        .local_addr()
        .context("reading the listener address")?;
    let (kubeconfig, tls, root_ca) = if args.insecure_http {
        eprintln!(
            "warning: serving plain HTTP without authentication on {addr}: every local client is an administrator (drop --insecure-http for HTTPS with client certificates)"
        );
        (write_kubeconfig(&args.data_dir, addr)?, None, None)
    } else {
        let pki = pki::load_or_create(&args.data_dir, addr)?;
        let tokens = match &args.token_auth_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the token file {}", path.display()))?;
                kubeforge_apiserver::TokenFile::parse(&text)
                    .with_context(|| format!("reading the token file {}", path.display()))?
            }
            None => kubeforge_apiserver::TokenFile::default(),
        };
        let auth = kubeforge_apiserver::Authentication::new(tokens)
            .with_client_ca(&pki.ca)
            .context("loading the cluster CA")?;
        server.set_authentication(Some(auth));
        server
            .enable_rbac(true)
            .await
            .context("installing the access-policy CRDs")?;
        server.set_trusted_proxies(args.trusted_proxies.clone());
        let sa_key = pki::service_account_key(&args.data_dir)?;
        server.set_token_issuer(
            kubeforge_apiserver::TokenIssuer::from_pkcs8(
                kubeforge_apiserver::SERVICE_ACCOUNT_ISSUER,
                &sa_key,
            )
            .context("loading the service account signing key")?,
        );
        let config = tls_config(&pki.serving)?;
        let text =
            kubeforge_apiserver::kubeconfig_tls_yaml(addr, &pki.ca, &pki.admin.0, &pki.admin.1);
        (
            write_private_kubeconfig(&args.data_dir, &text)?,
            Some(config),
            Some(pki.ca),
        )
    };
    // Pods get API credentials when the cluster CA is published for them
    // (kube-root-ca.crt); plain HTTP has none.
    server.set_service_account_tokens(up && root_ca.is_some());
    // The built-in controllers talk to the server in-process. They sync
    // their caches while the server already serves (as kube-controller-manager
    // does beside kube-apiserver): whatever happens meanwhile is in their
    // first lists.
    let controllers = if up {
        server.set_controllers_running(true);
        Some(kubeforge_controllers::start_builtin(
            kubeforge_controllers::ControllerClients::from(server.controller_clients())
                .with_token_issuer(server.token_issuer())
                .with_root_ca(root_ca),
        ))
    } else {
        None
    };
    // kube-controller-manager's csrsigning for kube-apiserver-client, with
    // the cluster CA: an approved CSR yields a client certificate.
    let signer = if up && !args.insecure_http {
        let dir = args.data_dir.join("pki");
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .with_context(|| format!("reading {}", dir.join(f).display()))
        };
        let signer =
            kubeforge_controllers::certificates::CsrSigner::new(&read("ca.crt")?, &read("ca.key")?)
                .context("loading the cluster CA for the CSR signer")?;
        let mgr = kubeforge_runtime::Manager::builder(
            server.controller_client(kubeforge_controllers::clients::accounts::CERTIFICATE),
        )
        .handle_signals(false)
        .build();
        kubeforge_controllers::certificates::register(&mgr, signer);
        let handle = mgr.shutdown_handle();
        Some((handle, tokio::spawn(mgr.run())))
    } else {
        None
    };
    let cluster = match cluster {
        Some(c) => Some(cluster::start(&server, c, &lock, tls.clone()).await?),
        None => None,
    };
    if args.compaction_interval > 0 {
        server.start_compaction(
            std::time::Duration::from_secs(args.compaction_interval),
            args.history_window,
        );
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let serving = match tls {
        Some(config) => tokio::spawn(server.serve_tls(listener, config, shutdown)),
        None => tokio::spawn(server.serve(listener, shutdown)),
    };
    let what = if up { "control plane" } else { "API server" };
    println!(
        "kubeforge {what} ready in {} ms",
        started.elapsed().as_millis()
    );
    println!("  API server: {scheme}://{addr}");
    if controllers.is_some() {
        println!("  controllers: {}", kubeforge_controllers::BUILTIN_NAMES);
    }
    if signer.is_some() {
        println!(
            "  signer:     {}",
            kubeforge_controllers::certificates::SIGNER
        );
    }
    for w in &args.webhook_services {
        println!(
            "  webhook service {}/{}:{} -> {}",
            w.namespace, w.name, w.port, w.addr
        );
    }
    for line in cluster.iter().flat_map(cluster::Cluster::describe) {
        println!("{line}");
    }
    println!(
        "  store:      {}",
        if args.memory {
            "memory".to_string()
        } else {
            args.data_dir.join("store").display().to_string()
        }
    );
    println!();
    println!("export KUBECONFIG={}", kubeconfig.display());
    println!();
    match &cluster {
        Some(c) => c.try_lines().iter().for_each(|l| println!("{l}")),
        None => println!("Try: kubectl get ns"),
    }
    serving
        .await
        .context("the server task failed")?
        .context("serving HTTP")?;
    if let Some(c) = cluster {
        c.stop().await;
    }
    if let Some((handle, task)) = signer {
        handle.shutdown();
        let _ = task.await;
    }
    if let Some(c) = controllers {
        c.stop().await;
    }
    store.close().await;
    drop(lock);
    println!("kubeforge stopped");
    Ok(())
}

/// Where `up` and `apiserver` listen unless told.
const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 6443);

/// A future that completes on the first SIGINT, SIGTERM or SIGHUP (what a
/// terminal, `kill`, systemd and closed terminals send). The handlers are
/// installed now, so a signal during start-up is not lost: it stops the
/// process once it serves, after which everything it started is stopped.
fn stop_signals() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut hup = signal(SignalKind::hangup()).context("handling SIGHUP")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
    })
}

/// The rustls configuration for the serving pair (PEM).
fn tls_config((cert, key): &(String, String)) -> Result<std::sync::Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("reading the serving certificate")?;
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).context("reading the serving key")?;
    kubeforge_apiserver::tls::server_config(chain, key).context("loading the serving certificate")
}

/// Write the kubeconfig (it holds the administrator's key) owner-only.
fn write_private_kubeconfig(dir: &Path, text: &str) -> Result<PathBuf> {
    let path =
        std::path::absolute(dir.join("kubeconfig")).context("resolving the kubeconfig path")?;
    pki::write_private(&path, text)?;
    Ok(path)
}

fn write_kubeconfig(dir: &Path, addr: SocketAddr) -> Result<PathBuf> {
    let path =
        std::path::absolute(dir.join("kubeconfig")).context("resolving the kubeconfig path")?;
    let text = kubeforge_apiserver::kubeconfig_yaml(addr);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
