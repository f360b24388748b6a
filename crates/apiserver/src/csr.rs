//! CertificateSigningRequests (`certificates.k8s.io/v1`): kube's three
//! strategies (main resource, `/status`, `/approval`) and their validation,
//! after `pkg/registry/certificates/certificates/strategy.go` and
//! `pkg/apis/certificates/validation`.
//!
//! - create: the requestor (`spec.username`, `uid`, `groups`) is the
//!   request's user, and `status` starts empty — nobody creates an approved
//!   request;
//! - the main resource cannot change `spec` or `status`; `/status` cannot
//!   change `spec` or the Approved/Denied conditions (a signer sets
//!   `status.certificate`, or adds `Failed`);
//!   `/approval` changes only the conditions;
//! - `Approved` and `Denied` exclude each other, `Approved`/`Denied`/`Failed`
//!   may only be `True`, and none of them can be removed once set.
//!
//! The server signs nothing itself: `kubeforge up` runs the
//! `kube-apiserver-client` signer (`kubeforge_controllers::certificates`),
//! which writes `status.certificate` through `/status`. `spec.request`
//! must be a PEM `CERTIFICATE REQUEST` block whose DER parses and is
//! signed by the key it carries; `kubernetes.io/legacy-unknown` is kept
//! only on requests stored with it. Who may approve and sign is decided by
//! the certificates admission plugins (`admission/certificates.rs`).

use kubeforge_apimachinery::names::Cause as FieldCause;
use serde_json::{Value, json};

use crate::context::{Ctx, Sub};
use crate::error::{ApiResult, Cause};
use crate::registry::ResourceDef;

/// Whether a row is the CertificateSigningRequest resource.
pub(crate) fn is_csr(d: &ResourceDef) -> bool {
    d.group == "certificates.k8s.io" && d.plural == "certificatesigningrequests"
}

/// What kubectl prints in the CONDITION column: `Approved`, `Denied` or
/// `Pending`, then `,Failed` and `,Issued` when they apply.
pub(crate) fn condition_summary(o: &Value) -> String {
    let has = |t: &str| conditions(o).iter().any(|c| cond_type(c) == t);
    let mut s = if has("Denied") {
        "Denied".to_string()
    } else if has("Approved") {
        "Approved".to_string()
    } else {
        "Pending".to_string()
    };
    if has("Failed") {
        s.push_str(",Failed");
    }
    if o.pointer("/status/certificate")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty())
    {
        s.push_str(",Issued");
    }
    s
}

fn conditions(o: &Value) -> &[Value] {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn cond_type(c: &Value) -> &str {
    c.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// The object an `/approval` write stores: the request's metadata and
/// conditions over the stored spec and the rest of the stored status.
pub(crate) fn approval_object(mut obj: Value, old: &Value) -> Value {
    let conds = obj
        .pointer("/status/conditions")
        .cloned()
        .unwrap_or(Value::Null);
    let mut status = old.get("status").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = status.as_object_mut() {
        if conds.is_null() {
            m.remove("conditions");
        } else {
            m.insert("conditions".into(), conds);
        }
    }
    if let Some(m) = obj.as_object_mut() {
        match old.get("spec") {
            Some(spec) => m.insert("spec".into(), spec.clone()),
            None => m.remove("spec"),
        };
        m.insert("status".into(), status);
    }
    obj
}

/// Create: the requestor and an empty status, then kube's create validation.
pub(crate) fn prepare_create(ctx: &Ctx<'_>, obj: &mut Value, name: &str) -> ApiResult<()> {
    if !is_csr(&ctx.def) {
        return Ok(());
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        // kube's PrepareForCreate: the requestor is who sent it.
        let u = &ctx.user;
        spec.insert("username".into(), json!(u.name));
        spec.insert("groups".into(), json!(u.groups));
        if u.uid.is_empty() {
            spec.remove("uid");
        } else {
            spec.insert("uid".into(), json!(u.uid));
        }
        if u.extra.is_empty() {
            spec.remove("extra");
        } else {
            spec.insert("extra".into(), json!(u.extra));
        }
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert("status".into(), json!({}));
    }
    check(ctx, name, validate(obj, None, Sub::Main))
}

/// Update through `sub`: keep what that endpoint may not change, then
/// kube's update validation for it.
pub(crate) fn prepare_update(
    ctx: &Ctx<'_>,
    sub: Sub,
    obj: &mut Value,
    old: &Value,
    name: &str,
) -> ApiResult<()> {
    if !is_csr(&ctx.def) {
        return Ok(());
    }
    let Some(m) = obj.as_object_mut() else {
        return Ok(());
    };
    match old.get("spec") {
        Some(spec) => m.insert("spec".into(), spec.clone()),
        None => m.remove("spec"),
    };
    match sub {
        Sub::Main => {
            match old.get("status") {
                Some(st) => m.insert("status".into(), st.clone()),
                None => m.remove("status"),
            };
        }
        Sub::Status => {
            // kube's csrStatusStrategy: the Approved and Denied instances
            // stay as they were (a signer adds Failed here); adding or
            // removing one is refused.
            let old_conditions = conditions(old).to_vec();
            let status = m.entry("status").or_insert_with(|| json!({}));
            if let Some(st) = status.as_object_mut() {
                let mut new_conditions: Vec<Value> = st
                    .get("conditions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for kind in ["Approved", "Denied"] {
                    let at = |cs: &[Value]| -> Vec<usize> {
                        cs.iter()
                            .enumerate()
                            .filter(|(_, c)| cond_type(c) == kind)
                            .map(|(i, _)| i)
                            .collect()
                    };
                    let (was, now) = (at(&old_conditions), at(&new_conditions));
                    if was.len() != now.len() {
                        let verb = if now.len() > was.len() {
                            "add"
                        } else {
                            "remove"
                        };
                        return check(
                            ctx,
                            name,
                            vec![FieldCause::forbidden(
                                "status.conditions",
                                &format!("updates may not {verb} a condition of type {:?}", kind),
                            )],
                        );
                    }
                    for (o, n) in was.into_iter().zip(now) {
                        new_conditions[n] = old_conditions[o].clone();
                    }
                }
                if new_conditions.is_empty() {
                    st.remove("conditions");
                } else {
                    st.insert("conditions".into(), Value::Array(new_conditions));
                }
            }
        }
        // approval_object already kept all but the conditions.
        // Subresources a CSR's row does not declare never reach it.
        Sub::Approval | Sub::Finalize | Sub::EphemeralContainers | Sub::Scale => {}
    }
    check(ctx, name, validate(obj, Some(old), sub))
}

fn check(ctx: &Ctx<'_>, name: &str, causes: Vec<FieldCause>) -> ApiResult<()> {
    ctx.def
        .check_causes(name, causes.into_iter().map(Cause::from).collect())
}

/// Key usages kube accepts.
const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// Condition types that may only be `True`.
const TRUE_ONLY: &[&str] = &["Approved", "Denied", "Failed"];

/// `validateCertificateSigningRequest` (+ the update rules when `old` is
/// set), with the tolerances kube keeps for data already stored that way.
fn validate(obj: &Value, old: Option<&Value>, sub: Sub) -> Vec<FieldCause> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    // spec.request: base64 of a PEM CERTIFICATE REQUEST that parses and
    // is signed by its own key (kube's `validateCSR`).
    let request = spec.get("request").and_then(Value::as_str).unwrap_or("");
    if let Err(e) = request_subject(request) {
        errs.push(FieldCause::invalid_rendered(
            "spec.request",
            "[]byte{...}",
            &e,
        ));
    }
    let usages: Vec<&str> = spec
        .get("usages")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let old_usages: Vec<&str> = old
        .and_then(|o| o.pointer("/spec/usages"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if usages.is_empty() {
        errs.push(FieldCause::required("spec.usages", ""));
    }
    if !old_usages.iter().any(|u| !USAGES.contains(u)) {
        for (i, u) in usages.iter().enumerate() {
            if !USAGES.contains(u) {
                errs.push(FieldCause::not_supported(
                    &format!("spec.usages[{i}]"),
                    u,
                    USAGES,
                ));
            }
        }
    }
    if !has_duplicates(&old_usages) {
        for (i, u) in usages.iter().enumerate() {
            if usages[..i].contains(u) {
                errs.push(FieldCause::duplicate(&format!("spec.usages[{i}]"), u));
            }
        }
    }
    let signer = spec.get("signerName").and_then(Value::as_str).unwrap_or("");
    let old_signer = old
        .and_then(|o| o.pointer("/spec/signerName"))
        .and_then(Value::as_str);
    if signer == LEGACY_UNKNOWN && old_signer != Some(LEGACY_UNKNOWN) {
        errs.push(FieldCause::invalid(
            "spec.signerName",
            signer,
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        validate_signer_name(signer, &mut errs);
    }
    if let Some(secs) = spec.get("expirationSeconds").and_then(Value::as_i64)
        && secs < 600
    {
        errs.push(FieldCause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: {secs}: may not specify a duration less than 600 seconds (10 minutes)"
            ),
            field: "spec.expirationSeconds".into(),
        });
    }
    validate_conditions(obj, old, &mut errs);
    let cert = |o: &Value| {
        o.pointer("/status/certificate")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let new_cert = cert(obj);
    let untouched = old.is_some_and(|o| cert(o) == new_cert);
    if !untouched && !new_cert.is_empty() && !is_pem_block(&new_cert, "CERTIFICATE") {
        errs.push(FieldCause::invalid(
            "status.certificate",
            "<certificate data>",
            "must contain at least one CERTIFICATE PEM block",
        ));
    }
    let Some(old) = old else {
        return errs;
    };
    for t in TRUE_ONLY {
        if of_type(obj, t).len() < of_type(old, t).len() {
            errs.push(FieldCause::forbidden(
                "status.conditions",
                &format!("updates may not remove a condition of type \"{t}\""),
            ));
        }
    }
    if sub != Sub::Approval {
        for t in ["Approved", "Denied"] {
            let (was, now) = (of_type(old, t), of_type(obj, t));
            if now.len() > was.len() {
                errs.push(FieldCause::forbidden(
                    "status.conditions",
                    &format!("updates may not add a condition of type \"{t}\""),
                ));
            } else if now.len() == was.len() && now != was {
                errs.push(FieldCause::forbidden(
                    "status.conditions",
                    &format!("updates may not modify a condition of type \"{t}\""),
                ));
            }
        }
    }
    let old_cert = cert(old);
    if new_cert != old_cert {
        if sub != Sub::Status {
            errs.push(FieldCause::forbidden(
                "status.certificate",
                "updates may not set certificate content",
            ));
        } else if !old_cert.is_empty() {
            errs.push(FieldCause::forbidden(
                "status.certificate",
                "updates may not modify existing certificate content",
            ));
        }
    }
    errs
}

fn of_type<'a>(o: &'a Value, t: &str) -> Vec<&'a Value> {
    conditions(o).iter().filter(|c| cond_type(c) == t).collect()
}

fn has_duplicates(v: &[&str]) -> bool {
    v.iter().enumerate().any(|(i, x)| v[..i].contains(x))
}

fn validate_conditions(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldCause>) {
    let old_conds = old.map(conditions).unwrap_or(&[]);
    let old_types: Vec<&str> = old_conds.iter().map(cond_type).collect();
    let allow_empty_type = old_types.contains(&"");
    let allow_duplicates = has_duplicates(&old_types);
    let allow_both = old_types.contains(&"Approved") && old_types.contains(&"Denied");
    let (mut approved, mut denied) = (false, false);
    let mut seen: Vec<&str> = Vec::new();
    for (i, c) in conditions(obj).iter().enumerate() {
        let field = format!("status.conditions[{i}]");
        let t = cond_type(c);
        if t.is_empty() && !allow_empty_type {
            errs.push(FieldCause::required(&format!("{field}.type"), ""));
        }
        let status = c.get("status").and_then(Value::as_str).unwrap_or("");
        let allowed: &[&str] = if TRUE_ONLY.contains(&t) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        if status.is_empty() {
            errs.push(FieldCause::required(&format!("{field}.status"), ""));
        } else if !allowed.contains(&status) {
            errs.push(FieldCause::not_supported(
                &format!("{field}.status"),
                status,
                allowed,
            ));
        }
        if !allow_both {
            let clash = match t {
                "Approved" => {
                    approved = true;
                    denied
                }
                "Denied" => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                errs.push(FieldCause::invalid(
                    &format!("{field}.type"),
                    t,
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !allow_duplicates && seen.contains(&t) {
            errs.push(FieldCause::duplicate(&format!("{field}.type"), t));
        }
        seen.push(t);
    }
}

/// `signerName` must be `<domain>/<path>` with a dotted DNS domain
/// (kube's `ValidateSignerName`).
fn validate_signer_name(signer: &str, errs: &mut Vec<FieldCause>) {
    use kubeforge_apimachinery::names::{is_dns1123_label, is_dns1123_subdomain};
    let field = "spec.signerName";
    if signer.is_empty() {
        errs.push(FieldCause::required(field, ""));
        return;
    }
    let segments: Vec<&str> = signer.split('/').collect();
    let [domain, path] = segments.as_slice() else {
        errs.push(FieldCause::invalid(
            field,
            signer,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return;
    };
    if domain.len() > 253 {
        errs.push(FieldCause::too_long(field, 253));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    for l in &labels {
        let problems = is_dns1123_label(l);
        for p in &problems {
            errs.push(FieldCause::invalid(
                field,
                domain,
                &format!("validating label \"{l}\": {p}"),
            ));
        }
        if !problems.is_empty() {
            break;
        }
    }
    if labels.len() < 2 {
        errs.push(FieldCause::invalid(
            field,
            domain,
            "should be a domain with at least two segments separated by dots",
        ));
    }
    for l in path.split('.') {
        let problems = is_dns1123_subdomain(l);
        for p in &problems {
            errs.push(FieldCause::invalid(
                field,
                path,
                &format!("validating label \"{l}\": {p}"),
            ));
        }
        if !problems.is_empty() {
            break;
        }
    }
    // A domain of 253 and a path of a subdomain (253) and a label (63).
    if signer.len() > 253 + (253 + 63 + 1) + 1 {
        errs.push(FieldCause::too_long(field, 571));
    }
}

/// The signer name v1 accepts only on requests stored with it.
const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// The subject of `b64` (`spec.request`, a `[]byte` field as JSON carries
/// it), or why it is not a certificate request kube would store (kube's
/// `ParseCSR` and `CheckSignature`); validation and the
/// CertificateSubjectRestriction plugin both read it so.
pub(crate) fn request_subject(b64: &str) -> Result<kubeforge_authz::x509::RequestSubject, String> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| kubeforge_authz::x509::CsrError::NotCsrPem.to_string())?;
    kubeforge_authz::x509::parse_certificate_request(&raw).map_err(|e| e.to_string())
}

/// Whether `b64` (a `[]byte` field as JSON carries it) decodes to text
/// holding a PEM block of type `kind`.
fn is_pem_block(b64: &str, kind: &str) -> bool {
    use base64::Engine;
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else {
        return false;
    };
    let text = String::from_utf8_lossy(&raw);
    let begin = format!("-----BEGIN {kind}-----");
    let end = format!("-----END {kind}-----");
    text.find(&begin)
        .is_some_and(|b| text[b + begin.len()..].contains(&end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real request, signed by its key.
    fn request_pem() -> String {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "carol");
        params
            .serialize_request(&key)
            .expect("request")
            .pem()
            .expect("pem")
    }

    fn csr(conds: Value) -> Value {
        use base64::Engine;
        let pem = request_pem();
        json!({
            "spec": {
                "request": base64::engine::general_purpose::STANDARD.encode(pem),
                "signerName": "example.com/signer",
                "usages": ["client auth"],
            },
            "status": {"conditions": conds},
        })
    }

    fn messages(c: Vec<FieldCause>) -> Vec<String> {
        c.iter().map(FieldCause::to_error_string).collect()
    }

    #[test]
    fn a_valid_request_passes() {
        assert!(validate(&csr(json!([])), None, Sub::Main).is_empty());
    }

    #[test]
    fn approved_and_denied_exclude_each_other() {
        let both = csr(json!([
            {"type": "Approved", "status": "True"},
            {"type": "Denied", "status": "True"},
        ]));
        assert_eq!(
            messages(validate(&both, Some(&csr(json!([]))), Sub::Approval)),
            [
                "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive"
            ]
        );
    }

    #[test]
    fn approval_cannot_be_removed_or_set_outside_approval() {
        let approved = csr(json!([{"type": "Approved", "status": "True"}]));
        let pending = csr(json!([]));
        assert_eq!(
            messages(validate(&pending, Some(&approved), Sub::Approval)),
            [
                "status.conditions: Forbidden: updates may not remove a condition of type \"Approved\""
            ]
        );
        assert_eq!(
            messages(validate(&approved, Some(&pending), Sub::Status)),
            ["status.conditions: Forbidden: updates may not add a condition of type \"Approved\""]
        );
        assert!(validate(&approved, Some(&pending), Sub::Approval).is_empty());
    }

    /// (request, the error on `spec.request`): kube's `validateCSR` cases.
    #[test]
    fn the_request_must_parse_and_be_signed_by_its_key() {
        use base64::Engine;
        let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
        let good = request_pem();
        // One byte of the signature flipped (it ends the DER).
        let tampered = {
            let body: String = good.lines().filter(|l| !l.starts_with("-----")).collect();
            let mut der = base64::engine::general_purpose::STANDARD
                .decode(body)
                .expect("der");
            let last = der.len() - 1;
            der[last] ^= 1;
            format!(
                "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
                b64(&der)
            )
        };
        let cases: Vec<(String, Option<&str>)> = vec![
            (b64(good.as_bytes()), None),
            ("not base64!".into(), Some("PEM block type must be CERTIFICATE REQUEST")),
            (b64(b"no pem at all"), Some("PEM block type must be CERTIFICATE REQUEST")),
            (
                b64(good.replace("CERTIFICATE REQUEST", "CERTIFICATE").as_bytes()),
                Some("PEM block type must be CERTIFICATE REQUEST"),
            ),
            (
                b64(b"-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"),
                Some("x509: malformed certificate request"),
            ),
            (b64(tampered.as_bytes()), Some("x509: invalid signature")),
        ];
        for (request, want) in cases {
            let mut obj = csr(json!([]));
            obj["spec"]["request"] = json!(request);
            let got = messages(validate(&obj, None, Sub::Main));
            match want {
                None => assert!(got.is_empty(), "{got:?}"),
                Some(w) => {
                    assert_eq!(got.len(), 1, "{got:?}");
                    assert!(
                        got[0].starts_with(&format!(
                            "spec.request: Invalid value: []byte{{...}}: {w}"
                        )),
                        "{got:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_legacy_signer_is_refused_on_create_and_kept_on_update() {
        let mut legacy = csr(json!([]));
        legacy["spec"]["signerName"] = json!("kubernetes.io/legacy-unknown");
        assert_eq!(
            messages(validate(&legacy, None, Sub::Main)),
            [
                "spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"
            ]
        );
        assert!(validate(&legacy, Some(&legacy), Sub::Main).is_empty());
    }

    #[test]
    fn bad_spec_is_reported_field_by_field() {
        let bad = json!({"spec": {"request": "eA==", "signerName": "nope", "usages": ["x", "x"]}});
        assert_eq!(
            messages(validate(&bad, None, Sub::Main)),
            [
                "spec.request: Invalid value: []byte{...}: PEM block type must be CERTIFICATE REQUEST",
                "spec.usages[0]: Unsupported value: \"x\": supported values: \"any\", \"cert sign\", \"client auth\", \"code signing\", \"content commitment\", \"crl sign\", \"data encipherment\", \"decipher only\", \"digital signature\", \"email protection\", \"encipher only\", \"ipsec end system\", \"ipsec tunnel\", \"ipsec user\", \"key agreement\", \"key encipherment\", \"microsoft sgc\", \"netscape sgc\", \"ocsp signing\", \"s/mime\", \"server auth\", \"signing\", \"timestamping\"",
                "spec.usages[1]: Unsupported value: \"x\": supported values: \"any\", \"cert sign\", \"client auth\", \"code signing\", \"content commitment\", \"crl sign\", \"data encipherment\", \"decipher only\", \"digital signature\", \"email protection\", \"encipher only\", \"ipsec end system\", \"ipsec tunnel\", \"ipsec user\", \"key agreement\", \"key encipherment\", \"microsoft sgc\", \"netscape sgc\", \"ocsp signing\", \"s/mime\", \"server auth\", \"signing\", \"timestamping\"",
                "spec.usages[1]: Duplicate value: \"x\"",
                "spec.signerName: Invalid value: \"nope\": must be a fully qualified domain and path of the form 'example.com/signer-name'",
            ]
        );
    }
}
