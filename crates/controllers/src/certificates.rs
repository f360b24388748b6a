//! The CSR signing controller for `kubernetes.io/kube-apiserver-client`:
//! kube-controller-manager's `csrsigning` for the signer whose certificates
//! the API server accepts as client certificates. An approved, not yet
//! issued or failed CertificateSigningRequest for that signer is checked as
//! kube checks it — the request's signature, usages limited to `client
//! auth` (required), `digital signature` and `key encipherment`, no CA —
//! and signed with the cluster CA: the request's subject and names, valid
//! from five minutes ago (kube's backdating) for `spec.expirationSeconds`
//! (at least 10 minutes, at most the signer's duration, a year by
//! default). The certificate is written to `status.certificate` through
//! `/status`; a request that fails the checks gets kube's `Failed`
//! condition (reason `SignerValidationFailure`) instead.
//!
//! Like every built-in controller it is a kube-rs client only, so it signs
//! against any cluster whose CA it is given.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kubeforge_runtime::{Action, Manager, ReconcileError};

/// The signer this controller serves.
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client";

/// How old a certificate is made (kube backdates by five minutes so clocks
/// slightly behind accept it).
const BACKDATE: Duration = Duration::from_secs(300);

/// The shortest `expirationSeconds` kube honours.
const MIN_DURATION: Duration = Duration::from_secs(600);

/// Why the signer cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    /// The CA certificate or key does not parse.
    #[error("the signing CA does not load: {0}")]
    Ca(String),
}

/// The CA and policy of the signer.
pub struct CsrSigner {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// The longest validity given (kube's `--cluster-signing-duration`).
    pub duration: Duration,
}

impl std::fmt::Debug for CsrSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsrSigner")
            .field("duration", &self.duration)
            .finish_non_exhaustive()
    }
}

impl CsrSigner {
    /// A signer with the CA certificate and its private key (PEM).
    pub fn new(ca_cert_pem: &str, ca_key_pem: &str) -> Result<CsrSigner, SignerError> {
        let key =
            rcgen::KeyPair::from_pem(ca_key_pem).map_err(|e| SignerError::Ca(e.to_string()))?;
        let issuer = rcgen::Issuer::from_ca_cert_pem(ca_cert_pem, key)
            .map_err(|e| SignerError::Ca(e.to_string()))?;
        Ok(CsrSigner {
            issuer,
            duration: Duration::from_secs(365 * 24 * 3600),
        })
    }

    /// Sign `csr` (its `spec.request` PEM, usages and expiration): the
    /// certificate PEM, or why kube's signer would refuse it.
    pub fn sign(
        &self,
        csr: &CertificateSigningRequest,
        now: jiff::Timestamp,
    ) -> Result<String, String> {
        let usages = csr.spec.usages.clone().unwrap_or_default();
        let mut client_auth = false;
        for u in &usages {
            match u.as_str() {
                "digital signature" | "key encipherment" => {}
                "client auth" => client_auth = true,
                other => return Err(format!("invalid usage for client certificate: {other}")),
            }
        }
        if !client_auth {
            return Err("missing required usage for client certificate: client auth".into());
        }
        let pem = std::str::from_utf8(&csr.spec.request.0)
            .map_err(|_| "unable to parse csr: not PEM".to_string())?;
        let request = rcgen::CertificateSigningRequestParams::from_pem(pem)
            .map_err(|e| format!("unable to parse csr: {e}"))?;
        let mut params = request.params.clone();
        if !matches!(params.is_ca, rcgen::IsCa::NoCa | rcgen::IsCa::ExplicitNoCa) {
            return Err("a client certificate cannot be a CA".into());
        }
        params.is_ca = rcgen::IsCa::ExplicitNoCa;
        params.key_usages = usages
            .iter()
            .filter_map(|u| match u.as_str() {
                "digital signature" => Some(rcgen::KeyUsagePurpose::DigitalSignature),
                "key encipherment" => Some(rcgen::KeyUsagePurpose::KeyEncipherment),
                _ => None,
            })
            .collect();
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let mut duration = self.duration;
        if let Some(s) = csr.spec.expiration_seconds {
            let asked = Duration::from_secs(u64::try_from(s).unwrap_or(0)).max(MIN_DURATION);
            duration = duration.min(asked);
        }
        let start = now.as_second() - BACKDATE.as_secs() as i64;
        let end = now.as_second() + duration.as_secs() as i64;
        params.not_before = time_at(start)?;
        params.not_after = time_at(end)?;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(
            &uuid::Uuid::new_v4().into_bytes(),
        ));
        let signed = rcgen::CertificateSigningRequestParams {
            params,
            public_key: request.public_key,
        }
        .signed_by(&self.issuer)
        .map_err(|e| format!("signing failed: {e}"))?;
        Ok(signed.pem())
    }
}

fn time_at(secs: i64) -> Result<time::OffsetDateTime, String> {
    time::OffsetDateTime::from_unix_timestamp(secs).map_err(|e| e.to_string())
}

fn condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

struct Ctx {
    api: Api<CertificateSigningRequest>,
    signer: CsrSigner,
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Ctx>,
) -> Result<Action, ReconcileError> {
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    if csr.spec.signer_name != SIGNER
        || !condition(&csr, "Approved")
        || condition(&csr, "Denied")
        || condition(&csr, "Failed")
        || issued
    {
        return Ok(Action::await_change());
    }
    let name = csr.metadata.name.clone().unwrap_or_default();
    let mut updated = (*csr).clone();
    let status = updated.status.get_or_insert_with(Default::default);
    match ctx.signer.sign(&csr, jiff::Timestamp::now()) {
        Ok(pem) => status.certificate = Some(ByteString(pem.into_bytes())),
        Err(why) => {
            tracing::info!(csr = %name, %why, "refusing to sign");
            let now = Time(jiff::Timestamp::now());
            status.conditions.get_or_insert_with(Vec::new).push(
                CertificateSigningRequestCondition {
                    type_: "Failed".into(),
                    status: "True".into(),
                    reason: Some("SignerValidationFailure".into()),
                    message: Some(why),
                    last_update_time: Some(now.clone()),
                    last_transition_time: Some(now),
                },
            );
        }
    }
    match ctx
        .api
        .replace_status(&name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        // Changed meanwhile: the watch brings the new version.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(ReconcileError::new(e)),
    }
}

/// Register the signer with `mgr`.
pub fn register(mgr: &Manager, signer: CsrSigner) {
    let ctx = Ctx {
        api: Api::all(mgr.client()),
        signer,
    };
    mgr.controller::<CertificateSigningRequest, _>("csrsigning-kube-apiserver-client", ctx)
        .register(reconcile);
}
