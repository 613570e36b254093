//! The TLS client configuration the proxy uses toward upstreams.
//!
//! Built once at start from explicit inputs: Mozilla's roots compiled in (`webpki-roots`, so no
//! system store an agent could add a root to) plus, optionally, an operator CA file in PEM
//! (`--upstream-ca`, for private CAs and for tests). ALPN offers `h2` then `http/1.1`. Certificates
//! are verified for the target's host name (or IP address) by rustls's webpki verifier; nothing
//! here can turn verification off.
//!
//! Mint's own interception CA (`net::ca`) is never a trust anchor here: an operator CA file that
//! holds it (or any certificate of its key) is refused. The system store and the variables that
//! point at one (`SSL_CERT_FILE`, `SSL_CERT_DIR`) are never read, so a bundle made for agents with
//! `mint ca export --bundle` cannot make Mint trust its own leaves.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

use crate::config::secure_file::{SecureFileError, open_trusted};

/// Why the upstream TLS configuration could not be built. Names the file and the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// The CA file could not be read or holds something that is not a PEM certificate.
    #[error("cannot read upstream CA file `{}`: {problem}", path.display())]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        problem: String,
    },
    /// The CA file holds no certificate.
    #[error("upstream CA file `{}` holds no PEM certificate", path.display())]
    EmptyCaFile {
        /// The file.
        path: PathBuf,
    },
    /// A certificate of the CA file is not a usable trust anchor.
    #[error("certificate {index} of upstream CA file `{}` is not a usable CA certificate", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// Its position in the file, from 1.
        index: usize,
    },
    /// The CA file holds Mint's own interception CA.
    #[error(
        "upstream CA file `{}` holds Mint's own interception CA: Mint never trusts the CA it signs agents' leaves with; pass the upstream's CA instead",
        path.display()
    )]
    InterceptionCa {
        /// The file.
        path: PathBuf,
    },
    /// The CA file, a directory on its way or a link followed could be changed by another
    /// user (the message names the path and the fix).
    #[error("upstream CA file: {0}")]
    Unsafe(#[source] SecureFileError),
    /// rustls refused the configuration.
    #[error("cannot build the upstream TLS configuration")]
    Rustls(#[source] rustls::Error),
}

/// The largest upstream CA file read (a bundle of every public root is about 250 KiB).
const MAX_CA_FILE_BYTES: u64 = 4 << 20;

/// The ALPN protocols offered upstream, most preferred first.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The upstream client configuration: webpki roots, plus the certificates of `extra_ca` when
/// given, none of which may be `never_trust` (Mint's interception CA) or share its key.
pub fn upstream_client_config(
    extra_ca: Option<&Path>,
    never_trust: Option<&CertificateDer<'_>>,
) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let excluded_key = never_trust.and_then(|cert| public_key_of(cert));
    if let Some(path) = extra_ca {
        for (index, cert) in read_ca_file(path)?.into_iter().enumerate() {
            if excluded_key.is_some() && public_key_of(&cert) == excluded_key {
                return Err(TlsConfigError::InterceptionCa {
                    path: path.to_path_buf(),
                });
            }
            roots
                .add(cert)
                .map_err(|_| TlsConfigError::BadCertificate {
                    path: path.to_path_buf(),
                    index: index + 1,
                })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsConfigError::Rustls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The subject public key info of a certificate, DER; `None` when it does not parse.
fn public_key_of(cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(parsed.public_key().raw.to_vec())
}

/// Every certificate of a PEM file; other PEM sections (a key by mistake) are an error.
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let problem = |problem: String| TlsConfigError::CaFile {
        path: path.to_path_buf(),
        problem,
    };
    // The file decides whom Mint trusts with secrets: opened once through the checks of Mint's
    // other files (owner, mode, every directory and link on the way), read from that descriptor.
    let trusted = open_trusted(path).map_err(|error| match error {
        SecureFileError::Io { source, .. } => problem(source.kind().to_string()),
        other => TlsConfigError::Unsafe(other),
    })?;
    let mut bytes = Vec::new();
    trusted
        .file
        .take(MAX_CA_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| problem(e.kind().to_string()))?;
    if bytes.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(problem("larger than 4 MiB".to_owned()));
    }
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| problem("not a PEM certificate file".to_owned()))?;
    if certs.is_empty() {
        return Err(TlsConfigError::EmptyCaFile {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::demo::echo_upstream::TestCa;

    #[test]
    fn a_ca_file_another_user_could_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        TestCa::generate().unwrap().write_pem(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = upstream_client_config(Some(&path), None).unwrap_err();
        assert!(matches!(err, TlsConfigError::Unsafe(_)), "{err}");
        // In a directory others may write, another user could swap it.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = dir.path().join("shared");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let inside = open.join("ca.pem");
        std::fs::copy(&path, &inside).unwrap();
        let err = upstream_client_config(Some(&inside), None).unwrap_err();
        assert!(matches!(err, TlsConfigError::Unsafe(_)), "{err}");
        assert!(upstream_client_config(Some(&path), None).is_ok());
    }

    #[test]
    fn reads_an_operator_ca_and_offers_h2_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        let ca = TestCa::generate().unwrap();
        ca.write_pem(&path).unwrap();
        let config = upstream_client_config(Some(&path), None).unwrap();
        assert_eq!(
            config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    #[test]
    fn refuses_missing_empty_and_garbage_ca_files() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        assert!(matches!(
            upstream_client_config(Some(&missing), None),
            Err(TlsConfigError::CaFile { .. })
        ));
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        assert!(matches!(
            upstream_client_config(Some(&empty), None),
            Err(TlsConfigError::EmptyCaFile { .. })
        ));
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        assert!(upstream_client_config(Some(&garbage), None).is_err());
    }

    #[test]
    fn never_trusts_the_interception_ca() {
        let dir = tempfile::tempdir().unwrap();
        let now = std::time::SystemTime::now();
        let pem = crate::net::ca::CertificateAuthority::generate(now).unwrap();
        let ca = crate::net::ca::CertificateAuthority::from_pem(&pem.cert, &pem.key, now).unwrap();
        let other = TestCa::generate().unwrap();
        // A bundle that holds an upstream's CA and Mint's own: refused, naming the file.
        let bundle = dir.path().join("bundle.pem");
        std::fs::write(&bundle, format!("{}{}", other.cert_pem(), pem.cert)).unwrap();
        let error = upstream_client_config(Some(&bundle), Some(ca.cert_der())).unwrap_err();
        assert!(
            matches!(error, TlsConfigError::InterceptionCa { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("bundle.pem"), "{error}");
        // The upstream's CA alone is fine, as is no file.
        let alone = dir.path().join("alone.pem");
        other.write_pem(&alone).unwrap();
        upstream_client_config(Some(&alone), Some(ca.cert_der())).unwrap();
        upstream_client_config(None, Some(ca.cert_der())).unwrap();
    }
}
