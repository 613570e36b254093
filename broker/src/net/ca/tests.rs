#![allow(clippy::unwrap_used, reason = "tests")]

use x509_parser::extensions::{GeneralName, ParsedExtension};

use super::*;

fn now() -> SystemTime {
    SystemTime::now()
}

fn ca() -> CertificateAuthority {
    let pem = CertificateAuthority::generate(now()).unwrap();
    CertificateAuthority::from_pem(&pem.cert, &pem.key, now()).unwrap()
}

fn secs(at: SystemTime) -> i64 {
    i64::try_from(at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()).unwrap()
}

#[test]
fn a_new_ca_is_a_p256_ca_for_one_year_backdated_five_minutes() {
    let at = now();
    let pem = CertificateAuthority::generate(at).unwrap();
    assert!(pem.key.contains("BEGIN PRIVATE KEY"));
    let der = CertificateDer::from_pem_slice(pem.cert.as_bytes()).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let constraints = cert.basic_constraints().unwrap().unwrap();
    assert!(constraints.critical);
    assert!(constraints.value.ca);
    assert_eq!(constraints.value.path_len_constraint, Some(0));
    let usage = cert.key_usage().unwrap().unwrap();
    assert!(usage.value.key_cert_sign() && usage.value.crl_sign());
    assert!(!usage.value.digital_signature());
    let validity = cert.validity();
    assert_eq!(
        validity.not_before.timestamp(),
        secs(at) - 300,
        "backdated 5 minutes"
    );
    assert_eq!(
        validity.not_after.timestamp() - validity.not_before.timestamp(),
        365 * 24 * 3600
    );
    // ECDSA P-256.
    assert_eq!(
        cert.public_key().algorithm.algorithm.to_id_string(),
        "1.2.840.10045.2.1"
    );
    assert!(cert.subject().to_string().contains("Mint interception CA"));
    // The key stays out of Debug.
    assert!(!format!("{pem:?}").contains("PRIVATE KEY"));
    let loaded = CertificateAuthority::from_pem(&pem.cert, &pem.key, at).unwrap();
    assert!(!format!("{loaded:?}").contains("PRIVATE"));
    assert_eq!(loaded.cert_der(), &der);
}

#[test]
fn leaves_name_the_host_alone_carry_an_aki_and_last_at_most_a_day() {
    let ca = ca();
    let at = now();
    for host in [
        "api.example.test",
        "127.0.0.1",
        "::1",
        "xn--bcher-kva.example",
    ] {
        let (chain, expires) = ca.leaf(host, at).unwrap();
        assert_eq!(chain.len(), 2, "leaf then CA");
        assert_eq!(&chain[1], ca.cert_der());
        let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).unwrap();
        let (_, ca_cert) = x509_parser::parse_x509_certificate(ca.cert_der()).unwrap();
        let validity = leaf.validity();
        assert_eq!(validity.not_before.timestamp(), secs(at) - 300);
        assert!(validity.not_after.timestamp() - validity.not_before.timestamp() <= 24 * 3600);
        assert_eq!(validity.not_after.timestamp(), secs(expires));
        assert!(!leaf.is_ca());
        let mut aki = None;
        let mut ski = None;
        for ext in ca_cert.extensions() {
            if let ParsedExtension::SubjectKeyIdentifier(id) = ext.parsed_extension() {
                ski = Some(id.0.to_vec());
            }
        }
        for ext in leaf.extensions() {
            if let ParsedExtension::AuthorityKeyIdentifier(id) = ext.parsed_extension() {
                aki = id.key_identifier.as_ref().map(|k| k.0.to_vec());
            }
        }
        assert!(aki.is_some(), "AKI on the leaf of {host}");
        assert_eq!(aki, ski, "the AKI names the CA's key");
        let san = leaf.subject_alternative_name().unwrap().unwrap();
        assert_eq!(san.value.general_names.len(), 1, "{host}");
        match &san.value.general_names[0] {
            GeneralName::DNSName(name) => assert_eq!(*name, host),
            GeneralName::IPAddress(bytes) => {
                let ip: std::net::IpAddr = host.parse().unwrap();
                let expected = match ip {
                    std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
                    std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
                };
                assert_eq!(bytes.to_vec(), expected);
            }
            other => panic!("unexpected SAN {other:?}"),
        }
        assert_eq!(leaf.issuer(), ca_cert.subject());
    }
    // Two leaves never share a serial.
    let (a, _) = ca.leaf("a.example", at).unwrap();
    let (b, _) = ca.leaf("a.example", at).unwrap();
    let serial = |der: &CertificateDer<'_>| {
        x509_parser::parse_x509_certificate(der)
            .unwrap()
            .1
            .raw_serial()
            .to_vec()
    };
    assert_ne!(serial(&a[0]), serial(&b[0]));
}

#[test]
fn a_leaf_never_outlives_its_ca() {
    let issued = now() - Duration::from_secs(365 * 24 * 3600 - 3600);
    let pem = CertificateAuthority::generate(issued).unwrap();
    let ca = CertificateAuthority::from_pem(&pem.cert, &pem.key, now()).unwrap();
    let (_, expires) = ca.leaf("api.example.test", now()).unwrap();
    assert_eq!(secs(expires), secs(ca.not_after()));
    assert!(expires < now() + Duration::from_secs(3600));
}

#[test]
fn refuses_what_cannot_serve_as_the_ca() {
    let at = now();
    let pem = CertificateAuthority::generate(at).unwrap();
    let other = CertificateAuthority::generate(at).unwrap();
    let refused = |cert: &str, key: &str, at: SystemTime| {
        CertificateAuthority::from_pem(cert, key, at).unwrap_err()
    };
    assert!(matches!(
        refused("not a certificate", &pem.key, at),
        CaError::NotACertificate
    ));
    assert!(matches!(refused(&pem.cert, "no key", at), CaError::NotAKey));
    assert!(matches!(
        refused(&pem.cert, &other.key, at),
        CaError::KeyMismatch
    ));
    let expired = refused(
        &pem.cert,
        &pem.key,
        at + Duration::from_secs(366 * 24 * 3600),
    );
    assert!(matches!(expired, CaError::Expired { .. }));
    assert!(expired.to_string().contains("mint ca rotate"), "{expired}");
    assert!(matches!(
        refused(&pem.cert, &pem.key, at - Duration::from_secs(3600)),
        CaError::NotYetValid { .. }
    ));
    // A leaf (not a CA) with its own key.
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["leaf.example".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    assert!(matches!(
        refused(&leaf.pem(), &key.serialize_pem(), at),
        CaError::NotACa
    ));
    // No error shows a byte of the key.
    for error in [
        refused(&pem.cert, &other.key, at),
        refused(&pem.cert, "garbage", at),
    ] {
        let text = format!("{error} {error:?}");
        assert!(!text.contains("PRIVATE"), "{text}");
        assert!(!text.contains(&other.key[30..60]), "{text}");
    }
}

#[test]
fn the_leaf_cache_is_bounded_and_reuses_a_leaf() {
    let cache = LeafCache::new(Arc::new(ca()), 3);
    let at = now();
    let first = cache.server_config("a.example", at).unwrap();
    let again = cache.server_config("a.example", at).unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(
        first.alpn_protocols,
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    );
    for host in ["b.example", "c.example", "d.example", "e.example"] {
        cache.server_config(host, at).unwrap();
    }
    assert_eq!(cache.len(), 3);
    // The oldest went first: `a` is signed again.
    let renewed = cache.server_config("a.example", at).unwrap();
    assert!(!Arc::ptr_eq(&first, &renewed));
    assert_eq!(cache.len(), 3);
    // Close to its end, a leaf is issued again.
    let late = at + Duration::from_secs(23 * 3600 + 1800);
    let reissued = cache.server_config("a.example", late).unwrap();
    assert!(!Arc::ptr_eq(&renewed, &reissued));
    assert!(matches!(
        cache.server_config("", at),
        Err(CaError::BadHost { .. })
    ));
}
