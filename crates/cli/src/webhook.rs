//! `kubeforge webhook …`: the admission policy server of
//! kubeforge-admission against any cluster, and the tools around it
//! (signing keys, image signatures, the AdmissionPolicy CRD).
//!
//! ```text
//! kubeforge webhook --kubeconfig .kubeforge/kubeconfig --register
//! kubeforge webhook keygen --out cosign.key      # prints the public key
//! kubeforge webhook sign --key cosign.key sha256:…  # prints the signature
//! kubeforge webhook crd | kubectl apply -f -
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use kube::CustomResourceExt;
use kubeforge_admission::server::{PolicyServer, ServerOptions};
use kubeforge_admission::signature::{Algorithm, SigningKey};

/// `kubeforge webhook` arguments.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WebhookArgs {
    #[command(subcommand)]
    command: Option<WebhookCommand>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum WebhookCommand {
    /// Make a signing key (PKCS#8 PEM) and print its public key.
    Keygen {
        /// Key type.
        #[arg(long, value_enum, default_value = "ed25519")]
        algorithm: KeyAlgorithm,
        /// Where to write the private key.
        #[arg(long)]
        out: PathBuf,
    },
    /// Sign an image digest (`sha256:<hex>`) and print the base64 signature
    /// to store in a ConfigMap labelled kubeforge.dev/image-signatures=true
    /// under the key `sha256-<hex>`.
    Sign {
        /// The private key (from `keygen`).
        #[arg(long)]
        key: PathBuf,
        /// The image's manifest digest.
        digest: String,
    },
    /// Print the AdmissionPolicy CRD (JSON, for `kubectl apply -f -`).
    Crd,
}

#[derive(Clone, Copy, ValueEnum)]
enum KeyAlgorithm {
    Ed25519,
    EcdsaP256,
}

#[derive(Args)]
struct ServeArgs {
    /// Kubeconfig to use (default: $KUBECONFIG or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// HTTPS listen address of the webhooks.
    #[arg(long, default_value = "127.0.0.1:9443")]
    listen: SocketAddr,
    /// Serving certificates (tls.crt, tls.key, ca.crt); development
    /// certificates are made here when missing.
    #[arg(long, default_value = ".kubeforge/webhook-certs")]
    cert_dir: PathBuf,
    /// The server's own namespace (never subject to its policies, like
    /// kube-system).
    #[arg(long, default_value = "kubeforge-system")]
    namespace: String,
    /// Install the AdmissionPolicy CRD and register the mutating and
    /// validating webhook configurations (URL and caBundle of this server).
    #[arg(long)]
    register: bool,
    /// Register with failurePolicy Ignore: if this server is down, pods are
    /// admitted unchecked (for emergencies).
    #[arg(long)]
    fail_open: bool,
    /// Host the API server uses to reach this server (default: the listen IP).
    #[arg(long)]
    url_host: Option<String>,
    /// The only namespace image-signature ConfigMaps are read from
    /// (default: --namespace).
    #[arg(long)]
    signatures_namespace: Option<String>,
    /// Serve /metrics (controller_runtime_webhook_*) and /readyz (200 once
    /// every cache has synced, else 503 naming what has not) over plain
    /// HTTP here.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
}

/// Run `kubeforge webhook`.
pub async fn run(args: WebhookArgs) -> Result<()> {
    match args.command {
        Some(WebhookCommand::Keygen { algorithm, out }) => {
            let alg = match algorithm {
                KeyAlgorithm::Ed25519 => Algorithm::Ed25519,
                KeyAlgorithm::EcdsaP256 => Algorithm::EcdsaP256,
            };
            let (key, pem) = SigningKey::generate(alg).context("generating the key")?;
            std::fs::write(&out, pem).with_context(|| format!("writing {}", out.display()))?;
            print!("{}", key.public_key_pem());
            Ok(())
        }
        Some(WebhookCommand::Sign { key, digest }) => {
            let pem = std::fs::read_to_string(&key)
                .with_context(|| format!("reading the key {}", key.display()))?;
            let key = SigningKey::from_pem(&pem)
                .with_context(|| format!("loading the key {}", key.display()))?;
            println!("{}", key.sign_digest(&digest).context("signing")?);
            Ok(())
        }
        Some(WebhookCommand::Crd) => {
            let crd = kubeforge_admission::AdmissionPolicy::crd();
            println!("{}", serde_json::to_string_pretty(&crd)?);
            Ok(())
        }
        None => serve(args.serve).await,
    }
}

async fn serve(a: ServeArgs) -> Result<()> {
    let client = crate::kubeclient::client(a.kubeconfig.as_deref()).await?;
    let opts = ServerOptions {
        listen: a.listen,
        cert_dir: a.cert_dir.clone(),
        namespace: a.namespace.clone(),
        register: a.register,
        fail_open: a.fail_open,
        url_host: a.url_host.clone(),
        signatures_namespace: a.signatures_namespace.clone(),
    };
    let server = PolicyServer::start(client, &opts).await.with_context(|| {
        format!(
            "starting the policy server on {} (is the port free? pass --listen 127.0.0.1:0 for a free one)",
            a.listen
        )
    })?;
    if let Some(addr) = a.metrics_addr {
        let metrics = server.metrics();
        let ready = server.engine.clone();
        let app = axum::Router::new()
            .route(
                "/readyz",
                axum::routing::get(move || {
                    let why = ready.not_ready();
                    async move {
                        match why {
                            None => (axum::http::StatusCode::OK, "ok".to_string()),
                            Some(why) => (axum::http::StatusCode::SERVICE_UNAVAILABLE, why),
                        }
                    }
                }),
            )
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let m = metrics.clone();
                    async move {
                        (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            m.encode(),
                        )
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} for metrics"))?;
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    println!("kubeforge webhook ready on https://{}", server.local_addr());
    if let Some(why) = server.not_ready() {
        println!("  {why}: reviews fail (and failurePolicy decides) until it has");
    }
    println!(
        "  webhooks: /mutate, /validate (CA bundle in {})",
        a.cert_dir.join("ca.crt").display()
    );
    if a.register {
        println!(
            "  registered: MutatingWebhookConfiguration and ValidatingWebhookConfiguration {} (failurePolicy {})",
            kubeforge_admission::server::CONFIGURATION_NAME,
            if a.fail_open { "Ignore" } else { "Fail" }
        );
    }
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    server.run(shutdown).await.context("serving the webhooks")?;
    println!("kubeforge webhook stopped");
    Ok(())
}
