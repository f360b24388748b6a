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
            let request = obj
                .pointer("/spec/request")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let subject = crate::csr::request_subject(request)
                .map_err(|e| forbidden(&format!("failed to parse CSR: {e}")))?;
            if subject.organizations.iter().any(|o| o == SYSTEM_MASTERS) {
                return Err(forbidden(&format!(
                    "use of {KUBE_APISERVER_CLIENT} signer with {SYSTEM_MASTERS} group is not allowed"
                )));
            }
            Ok(())
        }
        (Operation::Update, "approval", Some(old)) => {
            require_on_signer(ctx, "approve", signer_of(old)).map_err(|m| forbidden(&m))
        }
        (Operation::Update, "status", Some(old)) => {
            let unchanged = |p: &str| obj.pointer(p) == old.pointer(p);
            if unchanged("/status/certificate") && unchanged("/status/conditions") {
                return Ok(());
            }
            require_on_signer(ctx, "sign", signer_of(old)).map_err(|m| forbidden(&m))
        }
        _ => Ok(()),
    }
}

/// `verb` (`approve`, `sign`) on `signer`, or kube's refusal text: `user
/// not permitted to <verb> requests with signerName "<signer>"`.
fn require_on_signer(ctx: &Ctx<'_>, verb: &str, signer: &str) -> Result<(), String> {
    if authorized_for_signer(ctx, verb, signer) {
        return Ok(());
    }
    Err(format!(
        "user not permitted to {verb} requests with signerName {}",
        quote(signer)
    ))
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
