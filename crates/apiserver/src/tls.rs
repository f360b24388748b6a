//! TLS, the first stage of the request path: the serving configuration and
//! the client certificates a connection presented.
//!
//! kube-apiserver asks for a client certificate without requiring one and
//! verifies the chain in its x509 authenticator, not in the handshake: a
//! certificate from another CA is then a 401, not a failed connection.
//! [`server_config`] does the same — the handshake only proves the client
//! holds the certificate's key; authentication (`authn.rs`) verifies the chain against
//! the client CA and maps the subject to a user.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// The certificates a client presented on its connection (leaf first),
/// put on each of its requests, with the user their chain was last
/// verified to name: a connection's certificates are checked once, and
/// again only when the authentication settings change or the chain's
/// earliest `notAfter` passes.
#[derive(Clone, Debug)]
pub(crate) struct PeerCertificates {
    /// The chain, leaf first.
    pub chain: Arc<Vec<CertificateDer<'static>>>,
    /// The last verification, shared by the connection's requests.
    pub verified: Arc<std::sync::Mutex<Option<Verified>>>,
}

/// `(authentication settings id, valid until (Unix seconds), user)`.
pub(crate) type Verified = (u64, i64, Arc<kubeforge_authz::UserInfo>);

impl PeerCertificates {
    /// The certificates of a new connection.
    pub fn new(chain: Vec<CertificateDer<'static>>) -> PeerCertificates {
        PeerCertificates {
            chain: Arc::new(chain),
            verified: Arc::default(),
        }
    }

    /// The earliest `notAfter` of the chain.
    pub fn valid_until(&self) -> Option<i64> {
        self.chain
            .iter()
            .map(|c| kubeforge_authz::x509::not_after(c))
            .try_fold(i64::MAX, |min, t| t.map(|t| min.min(t)))
    }
}

/// Asks for a client certificate, accepts any, and checks only that the
/// client holds its key; the chain is verified at authentication.
#[derive(Debug)]
struct AnyClientCertificate {
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AnyClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The crypto provider the server uses (ring).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A serving configuration for [`crate::ApiServer::serve_tls`]: `chain`
/// (leaf first) and its `key`, HTTP/1.1, client certificates asked for and
/// left to authentication.
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let provider = provider();
    let verifier = Arc::new(AnyClientCertificate {
        provider: provider.clone(),
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
