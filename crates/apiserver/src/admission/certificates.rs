//! The certificates admission plugins kube-apiserver runs by default
//! (`plugin/pkg/admission/certificates`), before the validating webhooks:
//!
//! - **CertificateSubjectRestriction** (create): a request for
//!   `kubernetes.io/kube-apiserver-client` may not name the
//!   `system:masters` group (an Organization of its subject): that group
//!   passes every authorization check, so whoever may create and approve
//!   requests would otherwise mint cluster-admin certificates. A request
//!   that does not read is refused too.
//! - **CertificateApproval** (`/approval`): approving or denying needs verb
//!   `approve` on `signers` (`certificates.k8s.io`) named the stored
//!   request's signer, or `<domain>/*`.
//! - **CertificateSigning** (`/status`): changing `status.certificate` or
//!   the conditions needs verb `sign` on that signer the same way.
//!
//! Refusals are kube's 403:
//! `certificatesigningrequests.certificates.k8s.io "x" is forbidden: user
//! not permitted to approve requests with signerName "example.com/s"`.

use kubeforge_apimachinery::gofmt::quote;
use kubeforge_authz::Attributes;
use serde_json::Value;

use super::{Operation, Request};
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult};

/// The signer whose certificates the API server accepts as clients.
pub(crate) const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

/// The group no client-certificate request may name.
const SYSTEM_MASTERS: &str = kubeforge_authz::user::SYSTEM_MASTERS;

fn signer_of(o: &Value) -> &str {
    o.pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Run the three plugins on a write of `obj` (the object about to be
/// stored) through `r`.
pub(crate) fn validate(ctx: &Ctx<'_>, r: &Request<'_>, obj: Option<&Value>) -> ApiResult<()> {
    if !crate::csr::is_csr(&ctx.def) {
        return Ok(());
    }
    let Some(obj) = obj else {
        return Ok(());
    };
    let forbidden = |why: &str| ApiError::forbidden(ctx.def.gr(), r.name, why);
    match (r.operation, r.subresource, r.old) {
        (Operation::Create, "", _) => {
            if signer_of(obj) != KUBE_APISERVER_CLIENT {
                return Ok(());
            }
            let subject = request_pem(obj)
                .and_then(|pem| {
                    kubeforge_authz::x509::parse_certificate_request(&pem)
                        .map_err(|e| e.to_string())
                })
                .map_err(|e| forbidden(&format!("failed to parse CSR: {e}")))?;
            if subject.organizations.iter().any(|o| o == SYSTEM_MASTERS) {
                return Err(forbidden(&format!(
                    "use of {KUBE_APISERVER_CLIENT} signer with {SYSTEM_MASTERS} group is not allowed"
                )));
            }
            Ok(())
        }
        (Operation::Update, "approval", Some(old)) => {
            let signer = signer_of(old);
            if authorized_for_signer(ctx, "approve", signer) {
                return Ok(());
            }
            Err(forbidden(&format!(
                "user not permitted to approve requests with signerName {}",
                quote(signer)
            )))
        }
        (Operation::Update, "status", Some(old)) => {
            let unchanged = |p: &str| obj.pointer(p) == old.pointer(p);
            if unchanged("/status/certificate") && unchanged("/status/conditions") {
                return Ok(());
            }
            let signer = signer_of(old);
            if authorized_for_signer(ctx, "sign", signer) {
                return Ok(());
            }
            Err(forbidden(&format!(
                "user not permitted to sign requests with signerName {}",
                quote(signer)
            )))
        }
        _ => Ok(()),
    }
}

/// `spec.request` decoded from its base64 (a `[]byte` field in JSON).
fn request_pem(obj: &Value) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let b64 = obj
        .pointer("/spec/request")
        .and_then(Value::as_str)
        .unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| e.to_string())
}

/// kube's `IsAuthorizedForSignerName`: `verb` on `signers` named
/// `signer`, else on `<domain>/*`, decided by the full chain (an access
/// policy's Deny included).
fn authorized_for_signer(ctx: &Ctx<'_>, verb: &str, signer: &str) -> bool {
    let access = &ctx.server.inner.access;
    let may = |name: &str| {
        let a = Attributes::resource(
            (*ctx.user).clone(),
            verb,
            "",
            "certificates.k8s.io",
            "*",
            "signers",
            "",
            name,
        );
        access.decide(ctx.server, &a).allowed()
    };
    if may(signer) {
        return true;
    }
    let domain = signer.split('/').next().unwrap_or_default();
    may(&format!("{domain}/*"))
}
