//! The certificates `kubeforge up` serves and logs in with, kept under
//! `<data-dir>/pki/` (kubeadm's layout, in small): a cluster CA made once
//! (`ca.crt`, `ca.key`), an administrator's client certificate it signs
//! once (`admin.crt`, `admin.key`: CN `kubernetes-admin`, O
//! `system:masters`, as kubeadm's `admin.conf`), and a serving certificate
//! made at every start for the addresses the server is reached at
//! (`apiserver.crt`, `apiserver.key`), so a new `--listen` needs no manual
//! step. Keys are written owner-only.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// What a start needs: PEM texts of the CA, the serving pair and the
/// administrator's pair.
pub struct Pki {
    /// The CA certificate (clients trust it; client certificates chain to it).
    pub ca: String,
    /// The serving certificate and key.
    pub serving: (String, String),
    /// The administrator's client certificate and key.
    pub admin: (String, String),
}

/// Write `text` to `path` readable by its owner only.
pub fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn ca_params() -> Result<CertificateParams> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, "kubeforge-ca");
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = rcgen::date_time_ymd(2025, 1, 1);
    p.not_after = rcgen::date_time_ymd(2035, 1, 1);
    Ok(p)
}

/// The CA in `dir`, made when missing: (certificate PEM, issuer).
fn ca(dir: &Path) -> Result<(String, Issuer<'static, KeyPair>)> {
    let (cert_path, key_path) = (dir.join("ca.crt"), dir.join("ca.key"));
    if let (Some(cert), Some(key)) = (read(&cert_path), read(&key_path)) {
        let key = KeyPair::from_pem(&key).with_context(|| {
            format!(
                "reading {}: remove the pki directory to make a new CA",
                key_path.display()
            )
        })?;
        // The CA's subject is fixed, so the stored key and these parameters
        // sign certificates that chain to the stored certificate.
        return Ok((cert, Issuer::new(ca_params()?, key)));
    }
    let key = KeyPair::generate()?;
    let params = ca_params()?;
    let cert = params.self_signed(&key)?.pem();
    write_private(&key_path, &key.serialize_pem())?;
    std::fs::write(&cert_path, &cert)
        .with_context(|| format!("writing {}", cert_path.display()))?;
    Ok((cert, Issuer::new(params, key)))
}

fn sign(params: CertificateParams, issuer: &Issuer<'_, KeyPair>) -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The ServiceAccount token signing key (P-256, PKCS#8 DER) in
/// `<data-dir>/pki/sa.key`, made when missing, so tokens issued before a
/// restart still authenticate after it.
pub fn service_account_key(data_dir: &Path) -> Result<Vec<u8>> {
    let dir = data_dir.join("pki");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("sa.key");
    if let Some(pem) = read(&path) {
        let key = KeyPair::from_pem(&pem).with_context(|| {
            format!(
                "reading {}: remove it to make a new signing key (issued tokens stop working)",
                path.display()
            )
        })?;
        return Ok(key.serialize_der());
    }
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    write_private(&path, &key.serialize_pem())?;
    Ok(key.serialize_der())
}

/// Load or make the certificates for a server reached at `addr`.
pub fn load_or_create(data_dir: &Path, addr: SocketAddr) -> Result<Pki> {
    let dir: PathBuf = data_dir.join("pki");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (ca, issuer) = ca(&dir)?;

    let (admin_crt, admin_key) = (dir.join("admin.crt"), dir.join("admin.key"));
    let admin = match (read(&admin_crt), read(&admin_key)) {
        (Some(c), Some(k)) => (c, k),
        _ => {
            let mut p = CertificateParams::new(Vec::<String>::new())?;
            p.distinguished_name = DistinguishedName::new();
            p.distinguished_name
                .push(DnType::OrganizationName, "system:masters");
            p.distinguished_name
                .push(DnType::CommonName, "kubernetes-admin");
            p.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            p.not_before = rcgen::date_time_ymd(2025, 1, 1);
            p.not_after = rcgen::date_time_ymd(2035, 1, 1);
            let pair = sign(p, &issuer)?;
            write_private(&admin_key, &pair.1)?;
            std::fs::write(&admin_crt, &pair.0)
                .with_context(|| format!("writing {}", admin_crt.display()))?;
            pair
        }
    };

    let mut names = vec![
        "localhost".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
        // Pods reach the server through the `kubernetes` Service's
        // ClusterIP, which in-cluster clients verify (kube-apiserver puts
        // the first service address in its certificate too).
        kubeforge_apiserver::KUBERNETES_SERVICE_IP.to_string(),
    ];
    // Listening on 0.0.0.0 names no address: the loopback names are in,
    // and clients elsewhere should be given --listen with the address they
    // reach.
    let ip: IpAddr = addr.ip();
    if !ip.is_unspecified() && !names.contains(&ip.to_string()) {
        names.push(ip.to_string());
    }
    let mut p = CertificateParams::new(names)?;
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving = sign(p, &issuer)?;
    write_private(&dir.join("apiserver.key"), &serving.1)?;
    std::fs::write(dir.join("apiserver.crt"), &serving.0)
        .with_context(|| format!("writing {}", dir.join("apiserver.crt").display()))?;
    Ok(Pki { ca, serving, admin })
}
