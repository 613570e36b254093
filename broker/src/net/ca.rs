//! Mint's own certificate authority, for HTTPS interception: the CA that signs a leaf
//! certificate for each host an agent opens a `CONNECT` tunnel to, so that Mint can terminate the
//! agent's TLS and run every request inside through the proxy's pipeline.
//!
//! [`CertificateAuthority::generate`] makes a new one (ECDSA P-256, one year, backdated five
//! minutes, `basicConstraints CA:TRUE, pathlen:0` critical, key usage `keyCertSign` and
//! `cRLSign`); [`CertificateAuthority::from_pem`] takes one back from its two files and refuses
//! what cannot serve: not a certificate, not a CA, outside its validity, a key that is not the
//! certificate's. Leaves ([`CertificateAuthority::leaf`]) hold the host alone as their subject
//! alternative name, an Authority Key Identifier (strict verifiers, such as Python 3.13's, refuse
//! a leaf without one), `serverAuth`, a random serial, and at most 24 hours of validity,
//! backdated five minutes and never past the CA's own end. [`LeafCache`] keeps the server
//! configurations of recent hosts, bounded.
//!
//! A CA may be name-constrained ([`CertificateAuthority::generate_name_constrained`], critical
//! `nameConstraints` from [`name_constraints`]): [`CertificateAuthority::from_pem`] reads its
//! constraints back, [`CertificateAuthority::permits`] tells whether a host is inside them, and
//! it never signs a leaf for a host outside them. Under constraints a leaf for an IP address has
//! an empty subject (its address in a critical subject alternative name alone): OpenSSL checks a
//! subject common name that reads as a dotted name, as `127.0.0.1` does, against the dNSName
//! subtrees, and would refuse the leaf.
//!
//! Pure of files: `config::ca_files` reads and writes them. This CA is never part of Mint's own
//! upstream trust (`net::tls`): it signs what Mint shows the agent, never what Mint believes.
//! The key never appears in a `Debug` output, a log line or an error.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use mint_policy::host::Host;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::{CertifiedKey, SigningKey};
use time::OffsetDateTime;
use zeroize::Zeroizing;

pub mod name_constraints;

use name_constraints::NameConstraints;

/// How long a new CA is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A CA closer than this to its end is warned about: by `mint serve` at start, by `mint doctor`.
pub const CA_EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

/// The longest validity of a leaf.
pub const LEAF_VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// How far back a certificate's `notBefore` is set, for clocks a little behind Mint's.
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// A cached leaf with less validity left than this is issued again.
const LEAF_RENEW_MARGIN: Duration = Duration::from_secs(3600);

/// How many hosts' leaves [`LeafCache`] keeps by default.
pub const LEAF_CACHE_CAPACITY: usize = 1024;

/// The ALPN protocols the intercepted TLS offers, most preferred first.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Why a CA cannot be made, read or used. Names the problem, never a byte of the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaError {
    /// The certificate file holds no PEM certificate, or one that does not parse.
    #[error("the CA certificate is not a PEM X.509 certificate")]
    NotACertificate,
    /// The key file holds no PEM private key rcgen can sign with.
    #[error("the CA key is not a PEM PKCS#8 private key Mint can sign with")]
    NotAKey,
    /// The certificate is not a CA (no `basicConstraints CA:TRUE`, or no `keyCertSign`).
    #[error(
        "the CA certificate is not a certificate authority (basicConstraints CA:TRUE and keyCertSign are required)"
    )]
    NotACa,
    /// The certificate is not valid yet.
    #[error("the CA certificate is not valid before {not_before}; check the clock")]
    NotYetValid {
        /// Its `notBefore`, RFC 3339.
        not_before: String,
    },
    /// The certificate expired.
    #[error(
        "the CA certificate expired on {not_after}; run `mint ca rotate` and trust the new one"
    )]
    Expired {
        /// Its `notAfter`, RFC 3339.
        not_after: String,
    },
    /// The key is not the one the certificate certifies.
    #[error("the CA key does not belong to the CA certificate")]
    KeyMismatch,
    /// A host that cannot be a certificate name.
    #[error("`{host}` cannot be named in a certificate")]
    BadHost {
        /// The host.
        host: String,
    },
    /// The certificate's `nameConstraints` extension cannot be read (or holds an address range
    /// that is not 8 or 32 bytes).
    #[error("the CA certificate's name constraints cannot be read")]
    BadNameConstraints,
    /// A leaf for a host outside the CA's name constraints: clients would refuse it.
    #[error(
        "`{host}` is outside the CA's name constraints; bind an alias to it and run `mint ca rotate --name-constraints`"
    )]
    OutsideNameConstraints {
        /// The host.
        host: String,
    },
    /// rcgen could not generate or sign.
    #[error("cannot sign a certificate: {0}")]
    Sign(#[source] rcgen::Error),
    /// rustls refused the key or the configuration.
    #[error("cannot build the TLS configuration: {0}")]
    Rustls(#[source] rustls::Error),
}

/// A CA's two files, in PEM: what [`CertificateAuthority::generate`] makes and `config::ca_files`
/// writes. Its `Debug` leaves the key out.
pub struct CaPem {
    /// The certificate.
    pub cert: String,
    /// The private key (PKCS#8), wiped from memory when dropped.
    pub key: Zeroizing<String>,
}

impl fmt::Debug for CaPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaPem")
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

/// A loaded CA, ready to sign leaves.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
    not_after: SystemTime,
    /// The certificate's name constraints, if it has any.
    name_constraints: Option<NameConstraints>,
    /// The key every leaf of this run certifies: made at load, never written anywhere.
    leaf_key: KeyPair,
    leaf_signing_key: Arc<dyn SigningKey>,
    provider: Arc<CryptoProvider>,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("not_after", &self.not_after)
            .field("name_constraints", &self.name_constraints)
            .finish_non_exhaustive()
    }
}

// === impl CertificateAuthority ===

impl CertificateAuthority {
    /// A new CA, valid from `now` minus [`BACKDATE`] for [`CA_VALIDITY`].
    pub fn generate(now: SystemTime) -> Result<CaPem, CaError> {
        CertificateAuthority::generate_with(now, None)
    }

    /// A new CA as [`CertificateAuthority::generate`] makes, with a critical `nameConstraints`
    /// extension holding `constraints`.
    pub fn generate_name_constrained(
        now: SystemTime,
        constraints: &NameConstraints,
    ) -> Result<CaPem, CaError> {
        CertificateAuthority::generate_with(now, Some(constraints))
    }

    fn generate_with(
        now: SystemTime,
        constraints: Option<&NameConstraints>,
    ) -> Result<CaPem, CaError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(CaError::Sign)?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::OrganizationName, "Mint");
        name.push(
            DnType::CommonName,
            format!("Mint interception CA {}", hex::encode(random_bytes::<4>())),
        );
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        // rcgen marks the extension critical (RFC 5280 requires it).
        params.name_constraints = constraints.map(|constraints| rcgen::NameConstraints {
            permitted_subtrees: constraints
                .permitted()
                .iter()
                .map(|s| s.to_rcgen())
                .collect(),
            excluded_subtrees: constraints
                .excluded()
                .iter()
                .map(|s| s.to_rcgen())
                .collect(),
        });
        params.serial_number = Some(random_serial());
        let not_before = now.checked_sub(BACKDATE).unwrap_or(now);
        params.not_before = to_datetime(not_before);
        params.not_after = to_datetime(not_before + CA_VALIDITY);
        let cert = params.self_signed(&key).map_err(CaError::Sign)?;
        Ok(CaPem {
            cert: cert.pem(),
            key: Zeroizing::new(key.serialize_pem()),
        })
    }

    /// The CA of `cert_pem` and `key_pem`, checked at `now`: a certificate authority
    /// (`basicConstraints CA:TRUE`, and `keyCertSign` when it lists key usages), inside its
    /// validity, `key_pem` its own key, and name constraints (if any) that can be read.
    pub fn from_pem(
        cert_pem: &str,
        key_pem: &str,
        now: SystemTime,
    ) -> Result<CertificateAuthority, CaError> {
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|_| CaError::NotACertificate)?;
        let key = KeyPair::from_pem(key_pem).map_err(|_| CaError::NotAKey)?;
        let (not_after, name_constraints) = check_ca_certificate(&cert_der, &key, now)?;
        let issuer = Issuer::from_ca_cert_der(&cert_der, key).map_err(CaError::Sign)?;
        let leaf_key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(CaError::Sign)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let leaf_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let leaf_signing_key = provider
            .key_provider
            .load_private_key(leaf_der)
            .map_err(CaError::Rustls)?;
        Ok(CertificateAuthority {
            issuer,
            cert_pem: pem_of(&cert_der),
            cert_der,
            not_after,
            name_constraints,
            leaf_key,
            leaf_signing_key,
            provider,
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// When the CA expires.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// The CA's name constraints, when it has some.
    pub fn name_constraints(&self) -> Option<&NameConstraints> {
        self.name_constraints.as_ref()
    }

    /// Whether this CA may sign a leaf for `host`: always, unless it is name-constrained and
    /// `host` is outside its constraints.
    pub fn permits(&self, host: &Host) -> bool {
        self.name_constraints
            .as_ref()
            .is_none_or(|constraints| constraints.permits(host))
    }

    /// A leaf for `host` (a canonical host name, or an IP address), valid from `now` minus
    /// [`BACKDATE`] for [`LEAF_VALIDITY`] or until the CA ends if that is sooner, with the chain
    /// leaf then CA. Returns the chain and when the leaf expires. Refuses a host outside the
    /// CA's name constraints.
    pub fn leaf(
        &self,
        host: &str,
        now: SystemTime,
    ) -> Result<(Vec<CertificateDer<'static>>, SystemTime), CaError> {
        let bad_host = || CaError::BadHost {
            host: host.to_owned(),
        };
        if host.is_empty() || host.ends_with('.') {
            return Err(bad_host());
        }
        let mut common_name = true;
        if let Some(constraints) = &self.name_constraints {
            let parsed = Host::parse_request(host).map_err(|_| bad_host())?;
            if !constraints.permits(&parsed) {
                return Err(CaError::OutsideNameConstraints {
                    host: host.to_owned(),
                });
            }
            // See the module header: an address as a common name breaks the constraints.
            common_name = parsed.ip().is_none();
        }
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(|_| bad_host())?;
        let mut name = DistinguishedName::new();
        if common_name {
            name.push(DnType::CommonName, host);
        }
        params.distinguished_name = name;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial());
        let not_before = now.checked_sub(BACKDATE).unwrap_or(now);
        let not_after = (not_before + LEAF_VALIDITY).min(self.not_after);
        params.not_before = to_datetime(not_before);
        params.not_after = to_datetime(not_after);
        let leaf = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(CaError::Sign)?;
        Ok((vec![leaf.der().clone(), self.cert_der.clone()], not_after))
    }

    /// The TLS server configuration that presents a fresh leaf for `host` (ALPN `h2`,
    /// `http/1.1`), and when that leaf expires.
    pub fn server_config(
        &self,
        host: &str,
        now: SystemTime,
    ) -> Result<(Arc<ServerConfig>, SystemTime), CaError> {
        let (chain, expires) = self.leaf(host, now)?;
        let certified = Arc::new(CertifiedKey::new(chain, Arc::clone(&self.leaf_signing_key)));
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(CaError::Rustls)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(OneCert(certified)));
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok((Arc::new(config), expires))
    }
}

/// Always the same certificate: the leaf of the tunnel's host. The host was checked against the
/// client's SNI before the handshake went on.
#[derive(Debug)]
struct OneCert(Arc<CertifiedKey>);

impl ResolvesServerCert for OneCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

/// The server configurations of the hosts intercepted lately, each presenting its host's leaf:
/// at most `capacity` hosts (the oldest entry leaves first), each reissued once it has less than
/// an hour of validity left. Cheap to share.
pub struct LeafCache {
    ca: Arc<CertificateAuthority>,
    capacity: usize,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_host: HashMap<String, (Arc<ServerConfig>, SystemTime)>,
    /// Hosts in the order they were inserted, for eviction.
    order: VecDeque<String>,
}

impl fmt::Debug for LeafCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeafCache")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

// === impl LeafCache ===

impl LeafCache {
    /// An empty cache of at most `capacity` hosts (at least one).
    pub fn new(ca: Arc<CertificateAuthority>, capacity: usize) -> LeafCache {
        LeafCache {
            ca,
            capacity: capacity.max(1),
            entries: Mutex::new(Entries::default()),
        }
    }

    /// The CA that signs the leaves.
    pub fn ca(&self) -> &CertificateAuthority {
        &self.ca
    }

    /// How many hosts are cached.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_host
            .len()
    }

    /// Whether no host is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The server configuration for `host`: cached, or signed now (outside the lock) and cached.
    pub fn server_config(&self, host: &str, now: SystemTime) -> Result<Arc<ServerConfig>, CaError> {
        {
            let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((config, expires)) = entries.by_host.get(host)
                && now + LEAF_RENEW_MARGIN < *expires
            {
                return Ok(Arc::clone(config));
            }
        }
        let (config, expires) = self.ca.server_config(host, now)?;
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let Entries { by_host, order } = &mut *entries;
        if by_host
            .insert(host.to_owned(), (Arc::clone(&config), expires))
            .is_none()
        {
            order.push_back(host.to_owned());
        }
        while by_host.len() > self.capacity {
            let Some(oldest) = order.pop_front() else {
                break;
            };
            by_host.remove(&oldest);
        }
        Ok(config)
    }
}

/// Checks a CA certificate against its key at `now`; returns its `notAfter` and its name
/// constraints.
fn check_ca_certificate(
    der: &CertificateDer<'_>,
    key: &KeyPair,
    now: SystemTime,
) -> Result<(SystemTime, Option<NameConstraints>), CaError> {
    use rcgen::PublicKeyData as _;
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|_| CaError::NotACertificate)?;
    let is_ca = matches!(cert.basic_constraints(), Ok(Some(ext)) if ext.value.ca);
    let can_sign = match cert.key_usage() {
        Ok(Some(usage)) => usage.value.key_cert_sign(),
        Ok(None) => true,
        Err(_) => false,
    };
    if !is_ca || !can_sign {
        return Err(CaError::NotACa);
    }
    let validity = cert.validity();
    let not_before = from_timestamp(validity.not_before.timestamp());
    let not_after = from_timestamp(validity.not_after.timestamp());
    if now < not_before {
        return Err(CaError::NotYetValid {
            not_before: rfc3339(not_before),
        });
    }
    if now >= not_after {
        return Err(CaError::Expired {
            not_after: rfc3339(not_after),
        });
    }
    if cert.public_key().subject_public_key.data.as_ref() != key.der_bytes() {
        return Err(CaError::KeyMismatch);
    }
    Ok((not_after, NameConstraints::from_certificate(&cert)?))
}

/// `time`'s view of `at` (seconds are enough for a certificate).
fn to_datetime(at: SystemTime) -> OffsetDateTime {
    let secs = match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    };
    OffsetDateTime::from_unix_timestamp(secs).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn from_timestamp(secs: i64) -> SystemTime {
    match u64::try_from(secs) {
        Ok(secs) => SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

fn pem_of(der: &CertificateDer<'_>) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in text.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// A positive serial of 16 random bytes (RFC 5280: at most 20 octets, positive, unique per CA).
fn random_serial() -> SerialNumber {
    let mut bytes = random_bytes::<16>();
    if let Some(first) = bytes.first_mut() {
        *first = (*first & 0x7f) | 0x01;
    }
    SerialNumber::from(bytes.to_vec())
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // A failed read leaves zeros: serials then repeat, which clients may refuse; never unsafe.
    let _ = getrandom::fill(&mut bytes);
    bytes
}

#[cfg(test)]
mod tests;
