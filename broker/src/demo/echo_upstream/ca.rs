//! The echo upstream's certificate authority and the leaf certificates it signs, and rustls
//! configurations built from them: the server's, and clients' that trust only this authority.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::EchoError;

/// The names every leaf certificate holds.
const LEAF_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The ALPN protocols offered by the server and, by default, by clients.
pub(super) const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A throwaway certificate authority for the echo upstream: a self-signed CA certificate whose
/// PEM a test writes to a file for the proxy's `--upstream-ca`. Each server gets its own leaf
/// certificate signed by it; the CA certificate is never served as an end entity.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    cert_pem: String,
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The private key stays out of debug output, test key or not.
        f.debug_struct("TestCa")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl TestCa {
    /// Generates a new authority (ECDSA P-256).
    pub fn generate() -> Result<Self, EchoError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "Mint echo upstream test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        let cert_pem = issuer.pem();
        Ok(Self { issuer, cert_pem })
    }

    /// The CA certificate in PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate in DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        self.issuer.der()
    }

    /// Writes the CA certificate as PEM to `path` (for `--upstream-ca` or `curl --cacert`).
    pub fn write_pem(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, &self.cert_pem)
    }

    /// A root store that holds this authority only.
    pub fn root_store(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        // INVARIANT: rcgen just produced this DER, so webpki parses it.
        let _ = roots.add(self.cert_der().clone());
        roots
    }

    /// A rustls client configuration that trusts this authority only, offering ALPN `h2` and
    /// `http/1.1`.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, EchoError> {
        self.client_config_with_alpn(&ALPN)
    }

    /// A rustls client configuration that trusts this authority only, offering `alpn` (empty:
    /// no ALPN).
    pub fn client_config_with_alpn(&self, alpn: &[&[u8]]) -> Result<Arc<ClientConfig>, EchoError> {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(self.root_store())
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }

    /// Issues a server certificate for `localhost`, `127.0.0.1` and `::1`, as PEM: the
    /// certificate and its PKCS #8 private key, for a server other than the echo upstream (a
    /// `redis-server --tls-port` in the shared-limits tests).
    pub fn leaf_pem(&self) -> Result<(String, String), EchoError> {
        let (leaf, key) = self.leaf(&[])?;
        Ok((leaf.pem(), key.serialize_pem()))
    }

    /// A leaf certificate signed by this authority for `localhost`, `127.0.0.1`, `::1` and
    /// `extra_names`, with its key.
    fn leaf(&self, extra_names: &[String]) -> Result<(rcgen::Certificate, KeyPair), EchoError> {
        let names: Vec<String> = LEAF_NAMES
            .iter()
            .map(|name| (*name).to_owned())
            .chain(extra_names.iter().cloned())
            .collect();
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "Mint echo upstream");
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let leaf = params.signed_by(&key, &self.issuer)?;
        Ok((leaf, key))
    }

    /// Issues a leaf certificate for `localhost`, `127.0.0.1`, `::1` and `extra_names`, and
    /// builds the server configuration that presents it (ALPN `h2`, `http/1.1`).
    pub fn server_config(&self, extra_names: &[String]) -> Result<Arc<ServerConfig>, EchoError> {
        let (leaf, key) = self.leaf(extra_names)?;
        let chain = vec![leaf.der().clone(), self.cert_der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// The `ring` provider, named explicitly: if another crate in the build enables rustls's
/// `aws-lc-rs` feature too, rustls can no longer pick a process default by itself.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
