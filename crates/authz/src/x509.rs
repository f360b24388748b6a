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

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate with this subject, made by the real
    /// `openssl` (rcgen keeps one value per attribute type; kube users put
    /// several O values in one certificate).
    fn cert(cn: Option<&str>, orgs: &[&str], uids: &[&str]) -> Vec<u8> {
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
            .args(["req", "-x509", "-config"])
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
            .args(["-outform", "DER", "-days", "1", "-out"])
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
