//! Attack table and properties for request normalization: hosts, authorities, paths and host
//! patterns, each input paired with the canonical text it must become or the kind of error it
//! must produce. The policy matches what normalization returns, so every row here is a spelling
//! an attacker could use to make the policy and the upstream disagree.

use std::net::{Ipv4Addr, Ipv6Addr};

use mint_policy::host::{Host, HostError, HostPattern, HostPatternError};
use mint_policy::normalize::{NormalizeError, normalize_path, normalize_target};
use proptest::prelude::*;

/// The expected outcome of reading a host pattern.
#[derive(Debug)]
enum Pat {
    Ok(&'static str),
    NotLeadingLabel,
    TooBroad,
    NotCanonical(&'static str),
    Invalid,
}

#[derive(Debug)]
enum Row {
    /// `Host::parse_request(input)` gives this canonical text or error.
    Host(&'static str, Result<&'static str, HostError>),
    /// `Host::parse_request(input)` succeeds and is (or is not) loopback.
    Loopback(&'static str, bool),
    /// `normalize_target(scheme, authority, path_and_query)` gives this URL or error.
    Target(
        &'static str,
        &'static str,
        &'static str,
        Result<&'static str, NormalizeError>,
    ),
    /// `normalize_path(input)` gives this path or error.
    Path(&'static str, Result<&'static str, NormalizeError>),
    /// `HostPattern::parse(input)`.
    Pattern(&'static str, Pat),
    /// `HostPattern::parse(pattern).matches(Host::parse_request(host))`.
    Matches(&'static str, &'static str, bool),
}

use HostError as H;
use NormalizeError as N;

fn rows() -> Vec<Row> {
    use Row::*;
    vec![
        // Hosts: case, dots, IDNA.
        Host("API.GitHub.COM", Ok("api.github.com")),
        Host("api.github.com.", Ok("api.github.com")),
        Host("api.github.com..", Err(H::EmptyLabel)),
        Host(".api.github.com", Err(H::EmptyLabel)),
        Host("a..b", Err(H::EmptyLabel)),
        Host("bücher.de", Ok("xn--bcher-kva.de")),
        Host("BÜCHER.de", Ok("xn--bcher-kva.de")),
        Host("xn--bcher-kva.de", Ok("xn--bcher-kva.de")),
        Host("аpple.com", Ok("xn--pple-43d.com")), // Cyrillic `а`: not apple.com
        Host("ｇｉｔｈｕｂ.com", Ok("github.com")), // full-width letters fold to ASCII
        Host("github。com", Ok("github.com")),     // ideographic full stop is a dot
        Host("github.com。", Ok("github.com")),
        Host("git\u{200b}hub.com", Ok("github.com")), // UTS-46 drops zero-width space
        Host("github.com＠evil.com", Err(H::Userinfo)),
        Host("evil.com：443", Err(H::Port)),
        Host("evil.com／x", Err(H::InvalidCharacter)),
        Host("xn--zz.com", Err(H::Idna)),
        Host("a_b.example.com", Err(H::InvalidCharacter)),
        Host("-a.example.com", Err(H::HyphenAtLabelEdge)),
        Host("a-.example.com", Err(H::HyphenAtLabelEdge)),
        Host("a--b.example.com", Ok("a--b.example.com")),
        Host("", Err(H::Empty)),
        Host(".", Err(H::Empty)),
        Host("exa mple.com", Err(H::ControlOrWhitespace)),
        Host("example.com\n", Err(H::ControlOrWhitespace)),
        Host("example.com\u{3000}", Err(H::ControlOrWhitespace)),
        Host("exa%6dple.com", Err(H::PercentEscape)),
        Host("user@example.com", Err(H::Userinfo)),
        Host("example.com:443", Err(H::Port)),
        Host("https://example.com", Err(H::InvalidCharacter)),
        // Hosts: IPv4 in every spelling parsers accept.
        Host("127.0.0.1", Ok("127.0.0.1")),
        Host("2130706433", Ok("127.0.0.1")),
        Host("0x7f.1", Ok("127.0.0.1")),
        Host("0X7F.0.0.1", Ok("127.0.0.1")),
        Host("0177.0.0.1", Ok("127.0.0.1")),
        Host("127.1", Ok("127.0.0.1")),
        Host("127.0.1", Ok("127.0.0.1")),
        Host("0x7f000001", Ok("127.0.0.1")),
        Host("017700000001", Ok("127.0.0.1")),
        Host("127.0.0.1.", Ok("127.0.0.1")),
        Host("169.254.43518", Ok("169.254.169.254")),
        Host("0", Err(H::Unspecified)),
        Host("0.0.0.0", Err(H::Unspecified)),
        Host("[::]", Err(H::Unspecified)),
        Host("::", Err(H::Unspecified)),
        Host("１２７.０.０.１", Ok("127.0.0.1")),
        Host("1.2.3.4.5", Err(H::AmbiguousNumber)),
        Host("0x1g", Err(H::AmbiguousNumber)),
        Host("256.0.0.1", Err(H::AmbiguousNumber)),
        Host("127.0.0.0x100", Err(H::AmbiguousNumber)),
        Host("08.0.0.1", Err(H::AmbiguousNumber)),
        Host("4294967296", Err(H::AmbiguousNumber)),
        Host("example.123", Err(H::AmbiguousNumber)),
        Host("example.1com", Err(H::AmbiguousNumber)),
        Host("1.2.3.example.com", Ok("1.2.3.example.com")),
        // Hosts: IPv6.
        Host("::ffff:127.0.0.1", Ok("127.0.0.1")),
        Host("[::ffff:7f00:1]", Ok("127.0.0.1")),
        Host("[0:0:0:0:0:0:0:1]", Ok("::1")),
        Host("[::1]", Ok("::1")),
        Host("[2001:DB8::0:1]", Ok("2001:db8::1")),
        Host("[fe80::1%25eth0]", Err(H::ScopedIpv6)),
        Host("fe80::1%eth0", Err(H::ScopedIpv6)),
        Host("[::1]:443", Err(H::Port)),
        Host("[127.0.0.1]", Err(H::InvalidIpv6)),
        Host("[::1", Err(H::InvalidIpv6)),
        Host("[]", Err(H::InvalidIpv6)),
        // Loopback.
        Loopback("localhost.", true),
        Loopback("LOCALHOST", true),
        Loopback("foo.localhost", false),
        Loopback("localhost.localdomain", false),
        Loopback("127.0.0.5", true),
        Loopback("0x7f.1", true),
        Loopback("::ffff:127.0.0.1", true),
        Loopback("[::1]", true),
        // Targets: scheme, authority, port.
        Target(
            "https",
            "api.github.com",
            "/user",
            Ok("https://api.github.com/user"),
        ),
        Target(
            "https",
            "API.GITHUB.COM.:443",
            "/user",
            Ok("https://api.github.com/user"),
        ),
        Target(
            "https",
            "api.github.com:8443",
            "",
            Ok("https://api.github.com:8443/"),
        ),
        Target("HTTPS", "x.com", "/", Err(N::InvalidScheme)),
        Target("ftp", "x.com", "/", Err(N::InvalidScheme)),
        Target("https ", "x.com", "/", Err(N::InvalidScheme)),
        Target("https", "user@x.com", "/", Err(N::Userinfo)),
        Target("https", "user:pw@x.com", "/", Err(N::Userinfo)),
        Target("https", "x.com@evil.com", "/", Err(N::Userinfo)),
        Target("https", "x.com:0", "/", Err(N::InvalidPort)),
        Target("https", "x.com:65536", "/", Err(N::InvalidPort)),
        Target("https", "x.com:+80", "/", Err(N::InvalidPort)),
        Target("https", "x.com:-1", "/", Err(N::InvalidPort)),
        Target("https", "x.com:", "/", Err(N::InvalidPort)),
        Target("https", "x.com: 80", "/", Err(N::InvalidPort)),
        Target("https", "x.com:80:80", "/", Err(N::InvalidAuthority)),
        Target("https", "::1", "/", Err(N::InvalidAuthority)),
        Target("https", "", "/", Err(N::Host(H::Empty))),
        Target("http", "api.github.com", "/", Err(N::PlainHttpNonLoopback)),
        Target("http", "10.0.0.1", "/", Err(N::PlainHttpNonLoopback)),
        Target("http", "foo.localhost", "/", Err(N::PlainHttpNonLoopback)),
        Target(
            "http",
            "127.0.0.5:8080",
            "/x",
            Ok("http://127.0.0.5:8080/x"),
        ),
        Target("http", "localhost.:80", "/", Ok("http://localhost/")),
        Target("http", "2130706433", "/", Ok("http://127.0.0.1/")),
        Target("http", "[::1]:8080", "/", Ok("http://[::1]:8080/")),
        Target("http", "[::ffff:7f00:1]", "/", Ok("http://127.0.0.1/")),
        Target(
            "https",
            "[fe80::1%25eth0]",
            "/",
            Err(N::Host(H::ScopedIpv6)),
        ),
        Target("https", "[0:0:0:0:0:0:0:1]:443", "/", Ok("https://[::1]/")),
        // Targets: query and fragment.
        Target("https", "x.com", "/a?x#f", Err(N::Fragment)),
        Target("https", "x.com", "/a#f", Err(N::Fragment)),
        Target("https", "x.com", "/a?b=%zz", Err(N::InvalidEscape)),
        Target("https", "x.com", "/a?b=%2", Err(N::InvalidEscape)),
        Target("https", "x.com", "/a?b=c d", Err(N::ControlOrWhitespace)),
        Target("https", "x.com", "/a?b=ü", Err(N::NonAscii)),
        Target(
            "https",
            "x.com",
            "/a?b=%2e%2E&a=1",
            Ok("https://x.com/a?b=%2e%2E&a=1"),
        ),
        Target(
            "https",
            "x.com",
            "/a?b=/../c",
            Ok("https://x.com/a?b=/../c"),
        ),
        Target("https", "x.com", "/a/%2e%2e/b?q", Err(N::DotSegment)),
        // Paths: dot segments however spelled.
        Path("/a/../b", Err(N::DotSegment)),
        Path("/a/./b", Err(N::DotSegment)),
        Path("/a/%2e%2e/b", Err(N::DotSegment)),
        Path("/a/%2E./b", Err(N::DotSegment)),
        Path("/a/.%2e/b", Err(N::DotSegment)),
        Path("/a/%2e/b", Err(N::DotSegment)),
        Path("/%2e", Err(N::DotSegment)),
        Path("/..", Err(N::DotSegment)),
        Path("/a/..", Err(N::DotSegment)),
        Path("/a/...", Ok("/a/...")),
        Path("/a/.b", Ok("/a/.b")),
        // Paths: separators and empty segments.
        Path("/a//b", Err(N::EmptySegment)),
        Path("//a", Err(N::EmptySegment)),
        Path("/a//", Err(N::EmptySegment)),
        Path("/a/", Ok("/a/")),
        Path("/", Ok("/")),
        Path("/a/%2Fb", Err(N::EncodedSeparator)),
        Path("/a/%2fb", Err(N::EncodedSeparator)),
        Path("/a/%5cb", Err(N::EncodedSeparator)),
        Path("/a/%5Cb", Err(N::EncodedSeparator)),
        Path("/a\\b", Err(N::Backslash)),
        Path("/a/..\\b", Err(N::Backslash)),
        // Paths: matrix parameters, NUL, escapes, characters.
        Path("/a;x=1", Err(N::MatrixParameter)),
        Path("/a/..;/b", Err(N::MatrixParameter)),
        Path("/a%3bx=1", Err(N::MatrixParameter)),
        Path("/a%00", Err(N::EncodedNul)),
        Path("/a/%2", Err(N::InvalidEscape)),
        Path("/a/%", Err(N::InvalidEscape)),
        Path("/a/%zz", Err(N::InvalidEscape)),
        Path("/a/%g0", Err(N::InvalidEscape)),
        Path("/a/%252e%252e/b", Err(N::DoubleEncoded)),
        Path("/a/%25%32%65", Err(N::DoubleEncoded)),
        Path("/a/%25", Ok("/a/%25")),
        Path("/a/%25x", Ok("/a/%25x")),
        Path("/a b", Err(N::ControlOrWhitespace)),
        Path("/a\tb", Err(N::ControlOrWhitespace)),
        Path("/a\r\nHost: evil", Err(N::ControlOrWhitespace)),
        Path("/ü", Err(N::NonAscii)),
        Path("/a#b", Err(N::Fragment)),
        Path("/a?b", Err(N::QueryInPath)),
        Path("a/b", Err(N::PathNotAbsolute)),
        Path("", Err(N::PathNotAbsolute)),
        // Paths: decoding of unreserved characters, uppercase hex for the rest.
        Path("/a/%41", Ok("/a/A")),
        Path("/a/%7e", Ok("/a/~")),
        Path("/a/%7E%5F%2D%30", Ok("/a/~_-0")),
        // Reserved characters a segment may hold raw are decoded: servers route them so.
        Path("/a/%3a", Ok("/a/:")),
        Path("/v1/x%3Aaccess", Ok("/v1/x:access")),
        Path("/a/%40%21%24%26%27%28%29%2A%2B%2C%3D", Ok("/a/@!$&'()*+,=")),
        Path("/a/%3F%23", Ok("/a/%3F%23")),
        Path("/a/%c3%bc", Ok("/a/%C3%BC")),
        Path(
            "/a/%7B%7Bmint%3agithub%7d%7d",
            Ok("/a/%7B%7Bmint:github%7D%7D"),
        ),
        Path("/repos/o/r/issues", Ok("/repos/o/r/issues")),
        Path("/a:b@c!$&'()*+,=", Ok("/a:b@c!$&'()*+,=")),
        // Host patterns.
        Pattern("*.github.com", Pat::Ok("*.github.com")),
        Pattern("api.github.com", Pat::Ok("api.github.com")),
        Pattern("localhost", Pat::Ok("localhost")),
        Pattern("127.0.0.1", Pat::Ok("127.0.0.1")),
        Pattern("::1", Pat::Ok("::1")),
        Pattern("*.co.uk", Pat::Ok("*.co.uk")),
        Pattern("*.com", Pat::TooBroad),
        Pattern("*", Pat::TooBroad),
        Pattern("*.", Pat::TooBroad),
        Pattern("*.COM.", Pat::TooBroad),
        Pattern("*.localhost", Pat::TooBroad),
        Pattern("api.*.com", Pat::NotLeadingLabel),
        Pattern("a.*.com", Pat::NotLeadingLabel),
        Pattern("*api.github.com", Pat::NotLeadingLabel),
        Pattern("api*.github.com", Pat::NotLeadingLabel),
        Pattern("*github.com", Pat::NotLeadingLabel),
        Pattern("**.x.com", Pat::NotLeadingLabel),
        Pattern("*.*.x.com", Pat::NotLeadingLabel),
        Pattern("github.com.*", Pat::NotLeadingLabel),
        Pattern("API.github.com", Pat::NotCanonical("api.github.com")),
        Pattern("api.github.com.", Pat::NotCanonical("api.github.com")),
        Pattern("*.GitHub.com", Pat::NotCanonical("*.github.com")),
        Pattern("*.github.com.", Pat::NotCanonical("*.github.com")),
        Pattern("bücher.de", Pat::NotCanonical("xn--bcher-kva.de")),
        Pattern("*.bücher.de", Pat::NotCanonical("*.xn--bcher-kva.de")),
        Pattern("[::1]", Pat::NotCanonical("::1")),
        Pattern("0::1", Pat::NotCanonical("::1")),
        Pattern("0:0::1", Pat::NotCanonical("::1")),
        Pattern("::FFFF:127.0.0.1", Pat::NotCanonical("127.0.0.1")),
        Pattern("2130706433", Pat::NotCanonical("127.0.0.1")),
        Pattern("0x7f.1", Pat::NotCanonical("127.0.0.1")),
        Pattern("api.github.com:443", Pat::Invalid),
        Pattern("[::1]:443", Pat::Invalid),
        Pattern("https://x.com", Pat::Invalid),
        Pattern("x.com/path", Pat::Invalid),
        Pattern("user@x.com", Pat::Invalid),
        Pattern("", Pat::Invalid),
        Pattern(" x.com", Pat::Invalid),
        Pattern("*.127.0.0.1", Pat::Invalid),
        Pattern("*.a.localhost", Pat::Invalid),
        Pattern("*..com", Pat::Invalid),
        Pattern("*.x.com:443", Pat::Invalid),
        Pattern("x%2ecom", Pat::Invalid),
        Pattern("1.2.3.4.5", Pat::Invalid),
        // Matching.
        Matches("*.github.com", "api.github.com", true),
        Matches("*.github.com", "a.b.github.com", true),
        Matches("*.github.com", "API.GitHub.com.", true),
        Matches("*.github.com", "github.com", false),
        Matches("*.github.com", "evilgithub.com", false),
        Matches("*.github.com", "github.com.evil.com", false),
        Matches("*.github.com", "127.0.0.1", false),
        Matches("*.github.com", "::1", false),
        Matches("api.github.com", "api.github.com.", true),
        Matches("api.github.com", "x.api.github.com", false),
        Matches("127.0.0.1", "2130706433", true),
        Matches("127.0.0.1", "::ffff:127.0.0.1", true),
        Matches("127.0.0.1", "127.0.0.2", false),
        Matches("::1", "[0:0:0:0:0:0:0:1]", true),
        Matches("localhost", "LOCALHOST.", true),
        Matches("localhost", "foo.localhost", false),
        Matches("xn--bcher-kva.de", "bücher.de", true),
    ]
}

#[test]
fn attack_table() {
    let rows = rows();
    assert!(rows.len() >= 60, "the table must stay large");
    let mut failures = Vec::new();
    for row in &rows {
        let ok = match row {
            Row::Host(input, expected) => {
                let got = Host::parse_request(input).map(|h| h.as_text());
                got.as_deref().map_err(|e| *e) == *expected
            }
            Row::Loopback(input, expected) => {
                Host::parse_request(input).is_ok_and(|h| h.is_loopback() == *expected)
            }
            Row::Target(scheme, authority, rest, expected) => {
                let got = normalize_target(scheme, authority, rest).map(|t| t.url());
                got.as_deref().map_err(|e| *e) == *expected
            }
            Row::Path(input, expected) => {
                let got = normalize_path(input);
                got.as_deref().map_err(|e| *e) == *expected
            }
            Row::Pattern(input, expected) => {
                let got = HostPattern::parse(input);
                match (&got, expected) {
                    (Ok(p), Pat::Ok(text)) => p.as_text() == *text,
                    (Err(HostPatternError::NotLeadingLabel), Pat::NotLeadingLabel) => true,
                    (Err(HostPatternError::TooBroad), Pat::TooBroad) => true,
                    (
                        Err(HostPatternError::NotCanonical { canonical }),
                        Pat::NotCanonical(text),
                    ) => canonical == text,
                    (Err(HostPatternError::Invalid { .. }), Pat::Invalid) => true,
                    _ => false,
                }
            }
            Row::Matches(pattern, host, expected) => {
                let pattern = HostPattern::parse(pattern);
                let host = Host::parse_request(host);
                match (pattern, host) {
                    (Ok(p), Ok(h)) => p.matches(&h) == *expected,
                    _ => false,
                }
            }
        };
        if !ok {
            failures.push(format!("{row:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn pattern_error_messages_name_the_fix() {
    let error = HostPattern::parse("API.github.com").unwrap_err();
    assert_eq!(
        error.to_string(),
        "host is not in canonical form; write it lowercase, in punycode, without a trailing dot, \
         and an IP address in its plain form"
    );
    let error = HostPattern::parse("api*.github.com").unwrap_err();
    assert_eq!(
        error.to_string(),
        "`*` must be a whole leading label, e.g. `*.github.com`"
    );
}

#[test]
fn host_errors_never_echo_input() {
    for input in [
        "SECRET@x.com",
        "SECRET:1",
        "SECRET%41",
        "SECRET..x",
        "[SECRET]",
        "x.1SECRET",
    ] {
        let error = Host::parse_request(input).unwrap_err();
        assert!(!error.to_string().contains("SECRET"), "{error}");
        let error = HostPattern::parse(input).unwrap_err();
        assert!(
            !error.to_string().to_lowercase().contains("secret"),
            "{error}"
        );
    }
}

/// Path-like text built from the pieces that matter: separators, dots, escapes, hex digits.
fn path_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/".to_owned()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("%".to_owned()),
        Just("%2e".to_owned()),
        Just("%2E".to_owned()),
        Just("%2f".to_owned()),
        Just("%25".to_owned()),
        Just("%5c".to_owned()),
        Just("%3a".to_owned()),
        Just("%41".to_owned()),
        Just("%7e".to_owned()),
        Just(";".to_owned()),
        Just("\\".to_owned()),
        "[0-9a-fA-F]{1,2}",
        "[ -~]",
        "\\PC",
    ];
    (any::<bool>(), prop::collection::vec(piece, 0..16)).prop_map(|(slash, pieces)| {
        let body = pieces.concat();
        if slash { format!("/{body}") } else { body }
    })
}

/// Host-like text: labels of letters, digits, hyphens and a few Unicode look-alikes, joined by
/// dots, sometimes with a trailing dot; or an IP spelling; or anything at all.
fn host_text() -> impl Strategy<Value = String> {
    let label = prop_oneof![
        "[a-zA-Z0-9-]{1,10}",
        Just("bücher".to_owned()),
        Just("пример".to_owned()),
        Just("ＡＢＣ".to_owned()),
        Just("xn--bcher-kva".to_owned()),
        "0x[0-9a-f]{0,8}",
        "[0-9]{1,4}",
    ];
    let name = (
        prop::collection::vec(label, 1..5),
        prop_oneof![Just(""), Just("."), Just("。")],
    )
        .prop_map(|(labels, end)| format!("{}{end}", labels.join(".")));
    let v6 = any::<u128>().prop_map(|n| Ipv6Addr::from(n).to_string());
    let v6_bracketed = any::<u128>().prop_map(|n| format!("[{}]", Ipv6Addr::from(n)));
    let v4 = any::<u32>().prop_map(|n| Ipv4Addr::from(n).to_string());
    prop_oneof![
        name,
        v6,
        v6_bracketed,
        v4,
        "\\PC{0,24}",
        "[a-z0-9.:%@\\[\\]*-]{0,24}"
    ]
}

fn pattern_text() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just(""), Just("*."), Just("*"), Just("a*.")],
        host_text(),
    )
        .prop_map(|(prefix, host)| format!("{prefix}{host}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn normalize_path_never_panics(path in "\\PC*") {
        let _ = normalize_path(&path);
    }

    #[test]
    fn normalize_path_is_idempotent_and_clean(path in path_text()) {
        if let Ok(once) = normalize_path(&path) {
            prop_assert_eq!(normalize_path(&once), Ok(once.clone()));
            for bad in ["//", "/./", "/../", ";", "%2F", "%2f", "%5C", "%5c", "\\", "#", "?"] {
                prop_assert!(!once.contains(bad), "{:?} in {:?}", bad, once);
            }
            prop_assert!(!once.ends_with("/.") && !once.ends_with("/.."));
            prop_assert!(once.starts_with('/'));
        }
    }

    #[test]
    fn targets_round_trip_through_their_url_parts(path in path_text(), query in "[ -~]{0,12}") {
        let path_and_query = format!("{path}?{query}");
        if let Ok(target) = normalize_target("https", "x.com", &path_and_query) {
            let again = normalize_target("https", &target.authority(), &format!(
                "{}?{}", target.path, target.query.clone().unwrap_or_default()
            ));
            prop_assert_eq!(again, Ok(target));
        }
    }

    #[test]
    fn parsed_hosts_round_trip(input in host_text()) {
        if let Ok(host) = Host::parse_request(&input) {
            prop_assert_eq!(Host::parse_request(&host.as_text()), Ok(host.clone()));
            prop_assert_eq!(
                HostPattern::parse(&host.as_text()),
                Ok(HostPattern::Exact(host.clone()))
            );
        }
    }

    #[test]
    fn parsed_patterns_round_trip(input in pattern_text()) {
        match HostPattern::parse(&input) {
            Ok(pattern) => {
                prop_assert_eq!(pattern.as_text(), input.clone());
                prop_assert_eq!(HostPattern::parse(&pattern.as_text()), Ok(pattern));
            }
            Err(HostPatternError::NotCanonical { canonical }) => {
                let suggested = HostPattern::parse(&canonical);
                prop_assert!(suggested.is_ok(), "{:?} suggested {:?}", input, canonical);
            }
            Err(_) => {}
        }
    }

    #[test]
    fn every_ipv4_spelling_names_the_same_address(n in any::<u32>()) {
        let [a, b, c, d] = n.to_be_bytes();
        let expected = Ok(Host::V4(Ipv4Addr::from(n)));
        let low16 = u32::from(c) << 8 | u32::from(d);
        let low24 = u32::from(b) << 16 | low16;
        for spelling in [
            format!("{n}"),
            format!("0x{n:x}"),
            format!("0X{n:X}"),
            format!("0{n:o}"),
            format!("{a}.{b}.{c}.{d}"),
            format!("0x{a:x}.0{b:o}.{c}.0x{d:02x}"),
            format!("{a}.{b}.{low16}"),
            format!("{a}.{low24}"),
            format!("{a}.{b}.{c}.{d}."),
        ] {
            prop_assert_eq!(Host::parse_request(&spelling), expected.clone(), "{}", spelling);
        }
    }

    #[test]
    fn ipv6_reads_as_std_does(n in any::<u128>()) {
        let addr = Ipv6Addr::from(n);
        let expected = match addr.to_ipv4_mapped() {
            Some(v4) => Host::V4(v4),
            None => Host::V6(addr),
        };
        let full = addr.segments().map(|s| format!("{s:X}")).join(":");
        prop_assert_eq!(Host::parse_request(&full), Ok(expected.clone()));
        prop_assert_eq!(Host::parse_request(&format!("[{addr}]")), Ok(expected));
    }

    #[test]
    fn wildcards_match_only_strict_subdomains(
        sub in prop::collection::vec("[a-z0-9]{1,6}", 0..3),
        suffix in prop::collection::vec("[a-z][a-z0-9]{0,5}", 2..4),
        other in "[a-z][a-z0-9.]{0,12}",
    ) {
        let suffix = suffix.join(".");
        let pattern = HostPattern::parse(&format!("*.{suffix}")).unwrap();
        let name = if sub.is_empty() {
            suffix.clone()
        } else {
            format!("{}.{suffix}", sub.join("."))
        };
        let host = Host::parse_request(&name).unwrap();
        prop_assert_eq!(pattern.matches(&host), !sub.is_empty());
        if let Ok(host) = Host::parse_request(&format!("{other}{suffix}")) {
            let expected = host.as_text().strip_suffix(&suffix)
                .is_some_and(|p| p.ends_with('.') && p.len() > 1);
            prop_assert_eq!(pattern.matches(&host), expected);
        }
    }
}
