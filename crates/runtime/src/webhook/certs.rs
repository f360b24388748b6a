//! Serving certificates for the webhook server: development certificates
//! made with rcgen (a CA, and a serving certificate it signs, with the CA
//! bundle written beside them for the webhook configuration's
//! `caBundle`), and a rustls certificate resolver that re-reads the files
//! when they change, so rotated certificates are served without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::WebhookError;

/// File names in a certificate directory (controller-runtime's).
pub const CERT_FILE: &str = "tls.crt";
/// The serving key.
pub const KEY_FILE: &str = "tls.key";
/// The CA bundle to put in `clientConfig.caBundle`.
pub const CA_FILE: &str = "ca.crt";

/// Development certificates in a directory.
#[derive(Clone, Debug)]
pub struct DevCerts {
    /// The directory holding `tls.crt`, `tls.key` and `ca.crt`.
    pub dir: PathBuf,
    /// The CA certificate (PEM): the webhook configuration's `caBundle`.
    pub ca_bundle: String,
}

impl DevCerts {
    /// Make a CA and a serving certificate for `hosts` (DNS names or IP
    /// addresses, e.g. `localhost`, `127.0.0.1`,
    /// `my-webhook.my-namespace.svc`) and write them to `dir`, replacing
    /// what was there.
    pub fn generate(dir: &Path, hosts: &[String]) -> Result<DevCerts, WebhookError> {
        let cert_err = |e: rcgen::Error| WebhookError::Certificate(e.to_string());
        let ca_key = rcgen::KeyPair::generate().map_err(cert_err)?;
        let mut ca_params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubeforge webhook CA");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(cert_err)?;
        let issuer = rcgen::Issuer::new(ca_params, &ca_key);
        let key = rcgen::KeyPair::generate().map_err(cert_err)?;
        let mut params = rcgen::CertificateParams::new(hosts.to_vec()).map_err(cert_err)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubeforge webhook");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &issuer).map_err(cert_err)?;
        std::fs::create_dir_all(dir).map_err(|e| WebhookError::io(dir, e))?;
        let ca_bundle = ca_cert.pem();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| WebhookError::io(&p, e))
        };
        write(CA_FILE, &ca_bundle)?;
        // Key first, certificate last: a reloader sees a complete pair.
        write(KEY_FILE, &key.serialize_pem())?;
        write(CERT_FILE, &cert.pem())?;
        Ok(DevCerts {
            dir: dir.to_path_buf(),
            ca_bundle,
        })
    }

    /// The certificates in `dir` when all three files exist, else new ones.
    pub fn load_or_generate(dir: &Path, hosts: &[String]) -> Result<DevCerts, WebhookError> {
        let ca = dir.join(CA_FILE);
        if dir.join(CERT_FILE).exists() && dir.join(KEY_FILE).exists() && ca.exists() {
            let ca_bundle = std::fs::read_to_string(&ca).map_err(|e| WebhookError::io(&ca, e))?;
            return Ok(DevCerts {
                dir: dir.to_path_buf(),
                ca_bundle,
            });
        }
        DevCerts::generate(dir, hosts)
    }
}

/// Read a certificate chain and key into what rustls serves.
pub(crate) fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, WebhookError> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| WebhookError::Certificate(format!("{}: {e}", cert.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| WebhookError::Certificate(format!("{}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(WebhookError::Certificate(format!(
            "{}: no certificate found",
            cert.display()
        )));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| WebhookError::Certificate(format!("{}: {e}", key.display())))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key_der)
        .map_err(|e| WebhookError::Certificate(format!("{}: {e}", key.display())))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// Serves the current certificate; [`Reloading::watch`] swaps it when the
/// files change.
#[derive(Debug)]
pub(crate) struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl Reloading {
    pub fn new(cert: PathBuf, key: PathBuf) -> Result<Arc<Reloading>, WebhookError> {
        let current = RwLock::new(load(&cert, &key)?);
        Ok(Arc::new(Reloading { cert, key, current }))
    }

    fn stamp(&self) -> Option<(SystemTime, SystemTime)> {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        Some((m(&self.cert)?, m(&self.key)?))
    }

    /// Poll the files every `every`; reload when either changed. A pair
    /// that fails to load is logged and the old one kept.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        let mut last = self.stamp();
        let mut ticker = tokio::time::interval(every);
        loop {
            ticker.tick().await;
            let now = self.stamp();
            if now == last || now.is_none() {
                continue;
            }
            match load(&self.cert, &self.key) {
                Ok(k) => {
                    if let Ok(mut c) = self.current.write() {
                        *c = k;
                    }
                    tracing::info!(cert = %self.cert.display(), "webhook serving certificate reloaded");
                    last = now;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "webhook certificate changed but does not load yet")
                }
            }
        }
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.clone())
    }
}
