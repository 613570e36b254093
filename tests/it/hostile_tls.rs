//! Issue 20: hostile TLS upstreams. An upstream the policy allows (and the alias is bound to)
//! presents a certificate whose names carry the alias's secret, the agent's capability token or
//! the placeholder spelling, or thousands of names, or control characters; or one that is
//! self-signed, expired, not valid yet, for another name, or a CA's. rustls refuses each, and
//! its errors quote the names the upstream chose (`NotValidForNameContext` carries them): Mint
//! answers every entry where it is the TLS client (the `/v1/proxy/` route, the forward proxy,
//! an intercepted tunnel over HTTP/1.1 and HTTP/2) with `502 upstream_failed` and a message
//! from a fixed vocabulary, audits a `failed` outcome, tries once, and writes none of the
//! names (nor any secret) to the agent, the audit log or its log, even with every crate's
//! debug lines on. It keeps serving the echo upstream meanwhile.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::sync::Arc;

use mint_tests::hostile::{
    CANARY, Entry, HOST, HostileCa, HostileLab, TlsHandler, TlsServer, leaf_params,
};
use rcgen::{CertificateParams, DnType, DnValue, SanType};

/// In every name of every hostile certificate: it must never show anywhere.
const MARKER: &str = "presented-name-marker-5Jx";

/// The ALPN protocols the hostile upstreams offer.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// One certificate, and the message its refusal must carry.
struct Case {
    name: &'static str,
    config: Arc<rustls::ServerConfig>,
    /// The whole message of Mint's `upstream_failed` answer.
    message: &'static str,
}

const NOT_FOR_NAME: &str = "TLS handshake with the upstream failed: the certificate is not valid for the host name; nothing was sent";
const UNTRUSTED: &str = "TLS handshake with the upstream failed: the certificate's issuer is not trusted; nothing was sent";
const EXPIRED: &str =
    "TLS handshake with the upstream failed: the certificate has expired; nothing was sent";
const NOT_YET: &str =
    "TLS handshake with the upstream failed: the certificate is not valid yet; nothing was sent";
const INVALID: &str =
    "TLS handshake with the upstream failed: the certificate is invalid; nothing was sent";
const HANDSHAKE: &str =
    "TLS handshake with the upstream failed: the TLS handshake failed; nothing was sent";

/// Names that carry the secret, the capability and the placeholder, all with [`MARKER`].
fn secret_names(cap: &str) -> Vec<String> {
    vec![
        format!("{CANARY}.{MARKER}.test"),
        format!("{cap}.{MARKER}.test"),
        format!("{{{{mint:echo}}}}.{MARKER}.test"),
        format!("*.{MARKER}.test"),
    ]
}

/// Leaf parameters with `names` as DNS names and a common name that carries the secret.
fn params_with(names: &[String]) -> CertificateParams {
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    leaf_params(&names, &format!("{CANARY} {MARKER}"))
}

fn cases(ca: &HostileCa, cap: &str) -> Vec<Case> {
    let mut carrying = params_with(&secret_names(cap));
    carrying.subject_alt_names.extend([
        SanType::URI(
            format!("https://{CANARY}@{MARKER}.test/{cap}")
                .try_into()
                .unwrap(),
        ),
        SanType::Rfc822Name(format!("{CANARY}@{MARKER}.test").try_into().unwrap()),
        SanType::IpAddress("10.9.8.7".parse().unwrap()),
    ]);
    carrying.distinguished_name.push(
        DnType::OrganizationName,
        format!("{cap} {{{{mint:echo}}}} {MARKER}"),
    );

    // About 36 KiB of names: refused for the name, each one quoted by rustls's error.
    let many: Vec<String> = (0..800)
        .map(|i| format!("{CANARY}-{i}.{MARKER}.test"))
        .collect();
    // Over 64 KiB of names: a handshake message larger than rustls takes.
    let huge: Vec<String> = (0..2000)
        .map(|i| format!("{CANARY}-{i}.{MARKER}.test"))
        .collect();

    let mut garbage = params_with(&[format!("{MARKER}\n\u{1b}[31m{CANARY}\r\n.test")]);
    garbage.distinguished_name.push(
        DnType::CommonName,
        DnValue::Utf8String(format!(
            "\u{1b}[2J\n2099-01-01T00:00:00Z  INFO mint_broker: Request allowed {CANARY} {MARKER}\u{0}\u{7f}"
        )),
    );

    let mut expired = params_with(&[HOST.to_owned(), format!("{CANARY}.{MARKER}.test")]);
    expired.not_before = rcgen::date_time_ymd(2001, 1, 1);
    expired.not_after = rcgen::date_time_ymd(2002, 1, 1);

    let mut not_yet = params_with(&[HOST.to_owned(), format!("{CANARY}.{MARKER}.test")]);
    not_yet.not_before = rcgen::date_time_ymd(2090, 1, 1);
    not_yet.not_after = rcgen::date_time_ymd(2091, 1, 1);

    let mut a_ca = params_with(&[HOST.to_owned(), format!("{CANARY}.{MARKER}.test")]);
    a_ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);

    vec![
        Case {
            name: "names carrying the secret, the capability and the placeholder",
            config: ca.server_config(carrying, &ALPN),
            message: NOT_FOR_NAME,
        },
        Case {
            name: "800 names carrying the secret",
            config: ca.server_config(params_with(&many), &ALPN),
            message: NOT_FOR_NAME,
        },
        Case {
            name: "a certificate over 64 KiB",
            config: ca.server_config(params_with(&huge), &ALPN),
            message: HANDSHAKE,
        },
        Case {
            name: "control characters, escapes and a fake log line",
            config: ca.server_config(garbage, &ALPN),
            message: NOT_FOR_NAME,
        },
        Case {
            name: "self-signed, for the right name, the secret in its subject",
            config: HostileCa::self_signed_config(
                params_with(&[HOST.to_owned(), format!("{CANARY}.{MARKER}.test")]),
                &ALPN,
            ),
            message: UNTRUSTED,
        },
        Case {
            name: "expired",
            config: ca.server_config(expired, &ALPN),
            message: EXPIRED,
        },
        Case {
            name: "not valid yet",
            config: ca.server_config(not_yet, &ALPN),
            message: NOT_YET,
        },
        Case {
            name: "for another name",
            config: ca.server_config(params_with(&["elsewhere.example.org".to_owned()]), &ALPN),
            message: NOT_FOR_NAME,
        },
        Case {
            name: "a CA certificate as the leaf",
            config: ca.server_config(a_ca, &ALPN),
            message: INVALID,
        },
    ]
}

/// Answers whatever comes after a handshake: it must never come.
fn answer_ok() -> Arc<TlsHandler> {
    Arc::new(|tls| {
        use std::io::Write as _;
        let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nreached");
    })
}

const ENTRIES: [Entry; 4] = [
    Entry::Route,
    Entry::Forward,
    Entry::Tunnel,
    Entry::TunnelHttp2,
];

#[test]
fn issue_20_hostile_certificates_are_refused_in_fixed_words_on_every_entry() {
    let ca = HostileCa::generate();
    // Every crate's debug lines (rustls's, hyper's): none may quote a presented name.
    let mut lab = HostileLab::start(&ca, 9, &["--connect-timeout", "2s"], "debug");
    let cases = cases(&ca, &lab.cap.clone());
    assert_eq!(cases.len(), 9);
    let servers: Vec<TlsServer> = cases
        .iter()
        .map(|case| TlsServer::start(lab.take_listener(), Arc::clone(&case.config), answer_ok()))
        .collect();
    let mut seen = String::new();
    for (case, server) in cases.iter().zip(&servers) {
        for (n, entry) in ENTRIES.into_iter().enumerate() {
            let what = format!("{} via {entry:?}", case.name);
            let response = lab.get(entry, HOST, server.port(), "/hostile");
            seen.push_str(&response.everything());
            assert_eq!(response.status, 502, "{what}: {response:?}");
            let json = response.json();
            assert_eq!(json["error"]["code"], "upstream_failed", "{what}: {json}");
            assert_eq!(json["error"]["message"], case.message, "{what}: {json}");
            let id = response.header("mint-request-id").unwrap().to_owned();
            assert_eq!(lab.broker.decision_of(&id)["decision"], "allow", "{what}");
            let outcome = lab.broker.outcome_of(&id);
            assert_eq!(outcome["outcome"], "failed", "{what}: {outcome}");
            assert_eq!(outcome["reason"], "upstream_failed", "{what}: {outcome}");
            // One connection each time: Mint never tries a failed handshake again.
            assert_eq!(server.connections(), n + 1, "{what}");
            assert_eq!(server.handshakes(), 0, "{what}");
            // And the well-behaved upstream is still served through the same entry.
            seen.push_str(&lab.assert_still_serving(entry).everything());
        }
    }
    let stderr = lab.broker.stderr();
    assert!(
        stderr.contains("Upstream exchange failed"),
        "the failures are logged: {stderr}"
    );
    lab.assert_clean(&seen, &[MARKER, "{{mint:echo}}."]);
    drop(servers);
}
