//! Client certificates as users (kube's x509 authenticator with its
//! `CommonNameUserConversion`): the subject's Common Name is the username
//! (no CN, no user), each Organization a group, the UID from subject
//! attribute OID 1.3.6.1.4.1.57683.2 (more than one is an error), and the
//! extra `authentication.kubernetes.io/credential-id:
//! ["X509SHA256=<hex sha256 of the DER>"]`. Chain verification is the
//! caller's (rustls' WebPKI verifier against the client CA).

use x509_parser::prelude::{FromDer, X509Certificate};

use crate::UserInfo;
use crate::user::ALL_AUTHENTICATED;

/// The subject attribute kube reads a user's UID from.
pub const UID_OID: &[u64] = &[1, 3, 6, 1, 4, 1, 57683, 2];

/// A client certificate that does not name a user.
#[derive(Debug, thiserror::Error)]
pub enum CertificateUserError {
    /// Not an X.509 certificate.
    #[error("the client certificate does not parse: {0}")]
    Parse(String),
    /// More than one UID attribute in the subject.
    #[error("expected at most one UID in the certificate subject, found {0}")]
    ManyUids(usize),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// When a certificate stops being valid (`notAfter`, Unix seconds), or
/// `None` when it does not parse.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// The user a (verified) client certificate names; `None` without a CN.
pub fn user_from_certificate(der: &[u8]) -> Result<Option<UserInfo>, CertificateUserError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| CertificateUserError::Parse(e.to_string()))?;
    let subject = cert.subject();
    let Some(cn) = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .filter(|cn| !cn.is_empty())
    else {
        return Ok(None);
    };
    let mut user = UserInfo::new(
        cn,
        subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok())
            .map(str::to_string)
            .collect::<Vec<_>>(),
    );
    if let Ok(oid) = x509_parser::der_parser::oid::Oid::from(UID_OID) {
        let uids: Vec<&str> = subject
            .iter_by_oid(&oid)
            .filter_map(|a| a.as_str().ok())
            .collect();
        match uids.as_slice() {
            [] => {}
            [one] => user.uid = (*one).to_string(),
            many => return Err(CertificateUserError::ManyUids(many.len())),
        }
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    user.extra.insert(
        "authentication.kubernetes.io/credential-id".into(),
        vec![format!("X509SHA256={}", hex(digest.as_ref()))],
    );
    if !user.in_group(ALL_AUTHENTICATED) {
        user.groups.push(ALL_AUTHENTICATED.to_string());
    }
    Ok(Some(user))
}

/// Why a certificate request does not read (kube's `ParseCSR` and
/// `CheckSignature`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CsrError {
    /// No PEM block, or not a `CERTIFICATE REQUEST` one.
    #[error("PEM block type must be CERTIFICATE REQUEST")]
    NotCsrPem,
    /// The block's DER is not a PKCS #10 request.
    #[error("x509: malformed certificate request: {0}")]
    Malformed(String),
    /// The request is not signed by the key it carries.
    #[error("x509: invalid signature: {0}")]
    Signature(String),
    /// A subject value in a string type Go's x509 reads but whose bytes do
    /// not decode, or in a type it refuses.
    #[error("x509: unsupported string type in the subject")]
    SubjectString,
}

/// A certificate request's subject as kube's `x509.CertificateRequest`
/// holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSubject {
    /// The Common Name, when there is one.
    pub common_name: Option<String>,
    /// Every Organization value, in order.
    pub organizations: Vec<String>,
}

/// An attribute value as Go's `parseASN1String` reads it: the text types,
/// T61String as its bytes, BMPString as UTF-16; anything else refused, so
/// no encoding hides a value from the checks made on it.
fn subject_string(a: &x509_parser::x509::AttributeTypeAndValue<'_>) -> Result<String, CsrError> {
    use x509_parser::der_parser::asn1_rs::Tag;
    if let Ok(s) = a.as_str() {
        return Ok(s.to_string());
    }
    let data = a.attr_value().data;
    match a.attr_value().tag() {
        Tag::T61String => String::from_utf8(data.to_vec()).map_err(|_| CsrError::SubjectString),
        Tag::BmpString if data.len() % 2 == 0 => {
            let units: Vec<u16> = data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).map_err(|_| CsrError::SubjectString)
        }
        _ => Err(CsrError::SubjectString),
    }
}

/// Read a PEM certificate request as kube does: the first PEM block must
/// be a `CERTIFICATE REQUEST`, its DER a PKCS #10 request signed by its
/// own key; its subject's CN and Organizations.
pub fn parse_certificate_request(pem: &[u8]) -> Result<RequestSubject, CsrError> {
    use x509_parser::certification_request::X509CertificationRequest;
    let block = x509_parser::pem::Pem::iter_from_buffer(pem)
        .next()
        .and_then(Result::ok)
        .filter(|b| b.label == "CERTIFICATE REQUEST")
        .ok_or(CsrError::NotCsrPem)?;
    let (rest, csr) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| CsrError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CsrError::Malformed("trailing data".into()));
    }
    csr.verify_signature()
        .map_err(|e| CsrError::Signature(e.to_string()))?;
    let subject = &csr.certification_request_info.subject;
    let common_name = subject
        .iter_common_name()
        .next()
        .map(subject_string)
        .transpose()?;
    let organizations = subject
        .iter_organization()
        .map(subject_string)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RequestSubject {
        common_name,
        organizations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate with this subject, made by the real
    /// `openssl` (rcgen keeps one value per attribute type; kube users put
    /// several O values in one certificate).
    fn cert(cn: Option<&str>, orgs: &[&str], uids: &[&str]) -> Vec<u8> {
        openssl_req(true, cn, orgs, uids)
    }

    /// A PEM certificate request with this subject, by the real `openssl`.
    fn request(cn: Option<&str>, orgs: &[&str]) -> Vec<u8> {
        openssl_req(false, cn, orgs, &[])
    }

    fn openssl_req(x509: bool, cn: Option<&str>, orgs: &[&str], uids: &[&str]) -> Vec<u8> {
        let dir = std::env::temp_dir().join(format!(
            "kubeforge-x509-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut dn = String::new();
        if let Some(cn) = cn {
            dn.push_str(&format!("CN = {cn}\n"));
        }
        for (i, o) in orgs.iter().enumerate() {
            dn.push_str(&format!("{i}.O = {o}\n"));
        }
        for (i, u) in uids.iter().enumerate() {
            dn.push_str(&format!("{i}.kubeuid = {u}\n"));
        }
        if dn.is_empty() {
            dn.push_str("0.O = nobody\n");
        }
        let cnf = dir.join("req.cnf");
        std::fs::write(
            &cnf,
            format!(
                "oid_section = new_oids\n[new_oids]\nkubeuid = 1.3.6.1.4.1.57683.2\n[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n{dn}"
            ),
        )
        .expect("config");
        let der = dir.join("cert.der");
        let out = std::process::Command::new("openssl")
            .arg("req")
            .args(if x509 { &["-x509"][..] } else { &[][..] })
            .arg("-config")
            .arg(&cnf)
            .args([
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
            ])
            .arg("-keyout")
            .arg(dir.join("key.pem"))
            .args(["-outform", if x509 { "DER" } else { "PEM" }, "-out"])
            .arg(&der)
            .output()
            .expect("openssl runs (the test script installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&der).expect("certificate");
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    }

    #[test]
    fn common_name_and_organizations_are_user_and_groups() {
        let der = cert(Some("alice"), &["devs", "ops"], &["u-1"]);
        let u = user_from_certificate(&der)
            .expect("parses")
            .expect("a user");
        assert_eq!(u.name, "alice");
        assert_eq!(u.uid, "u-1");
        assert_eq!(u.groups, vec!["devs", "ops", "system:authenticated"]);
        let id = &u.extra["authentication.kubernetes.io/credential-id"][0];
        assert!(id.starts_with("X509SHA256=") && id.len() == 11 + 64, "{id}");
    }

    /// Every Organization counts (rcgen keeps one per type; openssl, as
    /// users do, writes several), and what does not read is refused.
    #[test]
    fn certificate_requests_read_as_kube_reads_them() {
        let pem = request(Some("carol"), &["devs", "system:masters"]);
        assert_eq!(
            parse_certificate_request(&pem).expect("reads"),
            RequestSubject {
                common_name: Some("carol".into()),
                organizations: vec!["devs".into(), "system:masters".into()],
            }
        );
        let cases: &[(&[u8], CsrError)] = &[
            (b"", CsrError::NotCsrPem),
            (
                b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
                CsrError::NotCsrPem,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_certificate_request(input).as_ref(), Err(want));
        }
        assert!(matches!(
            parse_certificate_request(
                b"-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"
            ),
            Err(CsrError::Malformed(_))
        ));
    }

    #[test]
    fn no_common_name_is_no_user_and_two_uids_an_error() {
        assert!(
            user_from_certificate(&cert(None, &["devs"], &[]))
                .expect("parses")
                .is_none()
        );
        assert!(matches!(
            user_from_certificate(&cert(Some("a"), &[], &["1", "2"])),
            Err(CertificateUserError::ManyUids(2))
        ));
        assert!(user_from_certificate(b"not a certificate").is_err());
    }
}
