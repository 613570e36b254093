#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::SystemTime;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::*;
use crate::net::ca::CertificateAuthority;

fn patterns(texts: &[&str]) -> Vec<HostPattern> {
    texts
        .iter()
        .map(|t| HostPattern::parse(t).unwrap())
        .collect()
}

fn constraints(texts: &[&str]) -> NameConstraints {
    NameConstraints::for_hosts(&patterns(texts)).unwrap()
}

fn host(text: &str) -> Host {
    Host::parse_request(text).unwrap()
}

fn shown(subtrees: &[Subtree]) -> Vec<String> {
    subtrees.iter().map(Subtree::to_string).collect()
}

#[test]
fn each_binding_becomes_its_subtree_and_unbound_families_are_closed() {
    let c = constraints(&["api.github.com", "*.example.com", "api.github.com"]);
    assert_eq!(shown(c.permitted()), ["api.github.com", "example.com"]);
    assert_eq!(shown(c.excluded()), ["0.0.0.0/0", "::/0"]);

    let c = constraints(&["api.github.com", "127.0.0.1"]);
    assert_eq!(shown(c.permitted()), ["api.github.com", "127.0.0.1/32"]);
    assert_eq!(shown(c.excluded()), ["::/0"]);

    // Addresses alone: DNS names are closed with the reserved name `invalid`.
    let c = constraints(&["::1", "10.1.2.3"]);
    assert_eq!(shown(c.permitted()), ["invalid", "10.1.2.3/32", "::1/128"]);
    assert!(c.excluded().is_empty());

    assert!(NameConstraints::for_hosts(&[]).is_none());
}

#[test]
fn a_dns_subtree_is_the_name_and_every_name_below_it() {
    let c = constraints(&["api.github.com", "*.example.com"]);
    for inside in [
        "api.github.com",
        "x.api.github.com",
        "a.b.api.github.com",
        "example.com",
        "www.example.com",
    ] {
        assert!(c.permits(&host(inside)), "{inside}");
    }
    for outside in [
        "github.com",
        "evilapi.github.com",
        "api.github.com.evil.test",
        "notexample.com",
        "127.0.0.1",
        "::1",
    ] {
        assert!(!c.permits(&host(outside)), "{outside}");
    }
}

#[test]
fn an_address_subtree_is_that_address_alone() {
    let c = constraints(&["api.github.com", "127.0.0.1", "2001:db8::1"]);
    assert!(c.permits(&host("127.0.0.1")));
    assert!(c.permits(&host("2001:db8::1")));
    assert!(!c.permits(&host("127.0.0.2")));
    assert!(!c.permits(&host("2001:db8::2")));
    // A permitted IPv4 subtree constrains IPv6 too (one kind of name, iPAddress).
    let c = constraints(&["127.0.0.1"]);
    assert!(!c.permits(&host("::1")));
    assert!(!c.permits(&host("github.com")));
    assert!(c.permits(&host("127.0.0.1")));
}

#[test]
fn a_pattern_is_permitted_only_when_all_it_covers_is() {
    let c = constraints(&["api.github.com", "*.example.com"]);
    for pattern in [
        "api.github.com",
        "*.api.github.com",
        "*.example.com",
        "*.a.example.com",
    ] {
        assert!(c.permits_pattern(&patterns(&[pattern])[0]), "{pattern}");
    }
    for pattern in ["*.github.com", "github.com", "127.0.0.1"] {
        assert!(!c.permits_pattern(&patterns(&[pattern])[0]), "{pattern}");
    }
}

#[test]
fn a_leading_dot_means_the_names_below_only() {
    assert!(dns_matches(".example.com", "a.example.com"));
    assert!(!dns_matches(".example.com", "example.com"));
    assert!(dns_matches("", "anything.test"));
    assert!(dns_matches("Example.COM", "a.example.com"));
    assert!(!dns_matches("example.com", "aexample.com"));
}

#[test]
fn a_constrained_ca_carries_them_critical_and_reads_them_back() {
    let now = SystemTime::now();
    let given = constraints(&["api.example.test", "*.example.org", "127.0.0.1"]);
    let pem = CertificateAuthority::generate_name_constrained(now, &given).unwrap();
    let der = CertificateDer::from_pem_slice(pem.cert.as_bytes()).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let extension = cert.name_constraints().unwrap().unwrap();
    assert!(extension.critical);
    // Every other property of a CA stays.
    let basic = cert.basic_constraints().unwrap().unwrap();
    assert!(basic.critical && basic.value.ca);
    assert_eq!(basic.value.path_len_constraint, Some(0));

    let ca = CertificateAuthority::from_pem(&pem.cert, &pem.key, now).unwrap();
    assert_eq!(ca.name_constraints(), Some(&given));
    assert!(ca.permits(&host("a.example.org")));
    assert!(!ca.permits(&host("github.com")));
    // No leaf outside them.
    assert!(matches!(
        ca.leaf("github.com", now),
        Err(CaError::OutsideNameConstraints { .. })
    ));
    assert!(ca.leaf("::1", now).is_err());
    // A leaf for a name inside names it in its subject too; one for an address has an empty
    // subject and a critical subject alternative name.
    let (chain, _) = ca.leaf("api.example.test", now).unwrap();
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).unwrap();
    assert_eq!(leaf.subject().to_string(), "CN=api.example.test");
    let (chain, _) = ca.leaf("127.0.0.1", now).unwrap();
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).unwrap();
    assert_eq!(leaf.subject().iter_common_name().count(), 0);
    assert!(leaf.subject_alternative_name().unwrap().unwrap().critical);

    // An unconstrained CA permits every host and names an address in the subject as before.
    let pem = CertificateAuthority::generate(now).unwrap();
    let ca = CertificateAuthority::from_pem(&pem.cert, &pem.key, now).unwrap();
    assert!(ca.name_constraints().is_none());
    assert!(ca.permits(&host("github.com")));
    let (chain, _) = ca.leaf("127.0.0.1", now).unwrap();
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).unwrap();
    assert_eq!(leaf.subject().to_string(), "CN=127.0.0.1");
}

#[test]
fn constraints_that_cannot_be_read_refuse_the_ca() {
    let now = SystemTime::now();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    // permittedSubtrees holding an iPAddress of 5 bytes (an address and mask are 8 or 32).
    let content = [
        0x30, 0x0b, 0xa0, 0x09, 0x30, 0x07, 0x87, 0x05, 1, 2, 3, 4, 5,
    ];
    let mut extension = rcgen::CustomExtension::from_oid_content(&[2, 5, 29, 30], content.to_vec());
    extension.set_criticality(true);
    params.custom_extensions = vec![extension];
    let cert = params.self_signed(&key).unwrap();
    let error = CertificateAuthority::from_pem(&cert.pem(), &key.serialize_pem(), now).unwrap_err();
    assert!(matches!(error, CaError::BadNameConstraints), "{error}");
}
