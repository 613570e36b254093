//! Canonical hosts and host patterns: the one reading of a request's host that policy matches and
//! the broker connects to, and the strict spelling a policy rule or alias declaration must use.
//!
//! Sits at the start of the request flow: `normalize` reads the target's host with
//! [`Host::parse_request`], rules and alias declarations hold [`HostPattern`]s, and evaluation
//! compares the two with [`HostPattern::matches`]. Byte-exact comparison is only sound because
//! both sides are canonical, so every other spelling of an address is either converted or refused.
//! Never resolves a name or opens a connection, and never puts the text it was given into an
//! error: an agent-controlled host may carry secret-looking bytes.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use idna::AsciiDenyList;

/// A canonical host: a lowercase ASCII DNS name (punycode, no trailing dot), or an IP address.
///
/// Build it with [`Host::parse_request`]; the variants are public for matching, and a value built
/// by hand is only canonical if its author made it so.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name: lowercase letters, digits, `-` and `.`, punycode for internationalized labels,
    /// no empty label and no trailing dot.
    Name(String),
    /// An IPv4 address, however it was spelled (IPv4-mapped IPv6 included).
    V4(Ipv4Addr),
    /// An IPv6 address that is not IPv4-mapped.
    V6(Ipv6Addr),
}

// === impl Host ===

impl Host {
    /// Reads a request's host leniently, into its canonical form.
    ///
    /// Lowercases, strips one trailing dot and converts Unicode to punycode (UTS-46, as browsers
    /// do). Accepts IPv6 in brackets (`[::1]`) or bare. Reads the other IPv4 spellings that
    /// WHATWG URL parsers and `inet_aton` accept (`2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`)
    /// as the address they name, and IPv4-mapped IPv6 (`::ffff:127.0.0.1`) as IPv4.
    ///
    /// Refuses an empty host, userinfo (`@`), a port, scoped IPv6 (`%zone`), empty labels,
    /// labels over 63 or names over 253 bytes, characters other than letters, digits, `-` and `.`
    /// after IDNA, labels that start or end with `-`, percent-escapes, whitespace and control
    /// characters, a name whose last label starts with a digit but that is not a valid IPv4
    /// address (`1.2.3.4.5`, `0x1g`): other parsers disagree on what such a name means, and the
    /// unspecified address (`0.0.0.0`, `0`, `::`), which reaches the local machine on Linux.
    pub fn parse_request(input: &str) -> Result<Host, HostError> {
        let host = Host::read_request(input)?;
        if host.ip().is_some_and(|ip| ip.is_unspecified()) {
            return Err(HostError::Unspecified);
        }
        Ok(host)
    }

    fn read_request(input: &str) -> Result<Host, HostError> {
        if input.is_empty() {
            return Err(HostError::Empty);
        }
        if input.len() > MAX_INPUT_LEN {
            return Err(HostError::TooLong);
        }
        if input.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(HostError::ControlOrWhitespace);
        }
        if input.contains('@') {
            return Err(HostError::Userinfo);
        }
        if let Some(rest) = input.strip_prefix('[') {
            return parse_bracketed(rest);
        }
        if input.contains(['/', '\\', '?', '#', '[', ']']) {
            return Err(HostError::InvalidCharacter);
        }
        if input.contains('%') {
            return Err(if input.contains(':') {
                HostError::ScopedIpv6
            } else {
                HostError::PercentEscape
            });
        }
        if input.contains(':') {
            // A bare IPv6 address, or a `host:port` that does not belong here.
            return input
                .parse::<Ipv6Addr>()
                .map(Host::from_ipv6)
                .map_err(|_| HostError::Port);
        }
        // UTS-46 also maps look-alikes of the ASCII delimiters (`。`, `＠`, `：`), so every check
        // below runs again on its output rather than trusting the ones above.
        let ascii = idna::domain_to_ascii_cow(input.as_bytes(), AsciiDenyList::EMPTY)
            .map_err(|_| HostError::Idna)?;
        let name = ascii.strip_suffix('.').unwrap_or(&ascii);
        parse_ascii_name(name)
    }

    /// The canonical text: the name, dotted-quad IPv4, or RFC 5952 IPv6 without brackets.
    pub fn as_text(&self) -> String {
        self.to_string()
    }

    /// The text for an authority: IPv6 in brackets, then `:port` when a port is given.
    pub fn authority(&self, port: Option<u16>) -> String {
        use fmt::Write as _;
        // One string of the right size: this runs for every proxied request.
        let mut text = String::with_capacity(match self {
            Host::Name(name) => name.len() + 6,
            Host::V4(_) | Host::V6(_) => 48,
        });
        // Writing into a `String` cannot fail.
        let _ = match self {
            Host::Name(name) => {
                text.push_str(name);
                Ok(())
            }
            Host::V4(addr) => write!(text, "{addr}"),
            Host::V6(addr) => write!(text, "[{addr}]"),
        };
        if let Some(port) = port {
            let _ = write!(text, ":{port}");
        }
        text
    }

    /// Whether this host is the local machine: `127.0.0.0/8`, `::1`, or the literal name
    /// `localhost` (a subdomain such as `foo.localhost` is a name like any other).
    pub fn is_loopback(&self) -> bool {
        match self {
            Host::Name(name) => name == "localhost",
            Host::V4(addr) => addr.is_loopback(),
            // A hand-built `V6` may still hold a mapped address: treat it as what it maps to.
            Host::V6(addr) => {
                addr.is_loopback() || addr.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
        }
    }

    /// The IP address when this host is an IP literal.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Name(_) => None,
            Host::V4(addr) => Some(IpAddr::V4(*addr)),
            Host::V6(addr) => Some(IpAddr::V6(*addr)),
        }
    }

    fn from_ipv6(addr: Ipv6Addr) -> Host {
        match addr.to_ipv4_mapped() {
            Some(v4) => Host::V4(v4),
            None => Host::V6(addr),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::V4(addr) => addr.fmt(f),
            Host::V6(addr) => addr.fmt(f),
        }
    }
}

/// Why a request's host was refused. Names the kind of problem only, never the host text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// Nothing to read.
    #[error("host is empty")]
    Empty,
    /// The host, or the name it converts to, is longer than a DNS name can be (253 bytes).
    #[error("host is longer than 253 bytes")]
    TooLong,
    /// A label is longer than 63 bytes.
    #[error("host has a label longer than 63 bytes")]
    LabelTooLong,
    /// Two dots in a row, a leading dot, or more than one trailing dot.
    #[error("host has an empty label")]
    EmptyLabel,
    /// `user@host`: credentials in the authority are refused outright.
    #[error("host must not contain userinfo (`@`)")]
    Userinfo,
    /// `host:port` where only a host belongs.
    #[error("host must not contain a port here")]
    Port,
    /// An IPv6 zone identifier (`fe80::1%eth0`).
    #[error("scoped IPv6 addresses (`%zone`) are not allowed")]
    ScopedIpv6,
    /// Brackets around something that is not an IPv6 address.
    #[error("invalid IPv6 address")]
    InvalidIpv6,
    /// A percent-escape in a host.
    #[error("host must not contain percent-escapes")]
    PercentEscape,
    /// Whitespace or a control character.
    #[error("host contains whitespace or a control character")]
    ControlOrWhitespace,
    /// A character other than letters, digits, `-` and `.` (after IDNA).
    #[error("host contains a character other than letters, digits, `-` and `.`")]
    InvalidCharacter,
    /// A label that starts or ends with `-`.
    #[error("host has a label that starts or ends with `-`")]
    HyphenAtLabelEdge,
    /// Internationalized text that UTS-46 refuses to convert.
    #[error("host is not a valid internationalized domain name")]
    Idna,
    /// `0.0.0.0` or `::` (however spelled): the unspecified address, which Linux connects to
    /// the local machine.
    #[error("the unspecified address (`0.0.0.0`, `::`) is not a destination")]
    Unspecified,
    /// The last label starts with a digit, but the host is not a valid IPv4 address.
    #[error("host ends in a number but is not a valid IPv4 address")]
    AmbiguousNumber,
}

/// A host pattern as written in a policy rule or alias declaration: an exact canonical host, or
/// `*.suffix` for any name with one or more labels before the suffix.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this host.
    Exact(Host),
    /// Any DNS name ending in `.suffix` with at least one label before it.
    Wildcard {
        /// The canonical DNS name after `*.`, with at least two labels.
        suffix: String,
    },
}

// === impl HostPattern ===

impl HostPattern {
    /// Reads a host pattern strictly: the text must already be canonical, so that what the
    /// operator reads in the file is exactly what is compared.
    ///
    /// A wildcard is only a whole leading label `*.` followed by at least two labels
    /// (`*.github.com`). Anything that reads as a host but is spelled otherwise (uppercase,
    /// trailing dot, Unicode, `[::1]`, `0:0::1`, `::ffff:127.0.0.1`, `2130706433`) is refused
    /// with the canonical text to write instead. A port, userinfo, scheme, path or other garbage
    /// is refused as invalid. A wildcard's suffix must be a DNS name, not an IP address, and not
    /// `localhost` or a name under it.
    pub fn parse(text: &str) -> Result<HostPattern, HostPatternError> {
        if text.is_empty() {
            return Err(HostPatternError::Invalid {
                reason: "a host pattern must not be empty",
            });
        }
        if text.contains("://") {
            return Err(HostPatternError::Invalid {
                reason: "a host pattern has no scheme; use the rule's `scheme` field",
            });
        }
        if text.contains('/') {
            return Err(HostPatternError::Invalid {
                reason: "a host pattern has no path",
            });
        }
        if !text.contains('*') {
            let host = Host::parse_request(text).map_err(invalid_pattern)?;
            let canonical = host.as_text();
            if canonical != text {
                return Err(HostPatternError::NotCanonical { canonical });
            }
            return Ok(HostPattern::Exact(host));
        }
        if text == "*" || text == "*." {
            return Err(HostPatternError::TooBroad);
        }
        let suffix = match text.strip_prefix("*.") {
            Some(suffix) if !suffix.contains('*') => suffix,
            _ => return Err(HostPatternError::NotLeadingLabel),
        };
        let Host::Name(name) = Host::parse_request(suffix).map_err(invalid_pattern)? else {
            return Err(HostPatternError::Invalid {
                reason: "a wildcard must be followed by a DNS name, not an IP address",
            });
        };
        if !name.contains('.') {
            return Err(HostPatternError::TooBroad);
        }
        if name.ends_with(".localhost") {
            return Err(HostPatternError::Invalid {
                reason: "a wildcard must not cover names under `localhost`",
            });
        }
        if name != suffix {
            return Err(HostPatternError::NotCanonical {
                canonical: format!("*.{name}"),
            });
        }
        Ok(HostPattern::Wildcard { suffix: name })
    }

    /// Whether `host` is covered: equality for an exact pattern; for a wildcard, a DNS name with
    /// one or more labels before `.suffix` (`*.github.com` covers `api.github.com` and
    /// `a.b.github.com`, never `github.com` nor `evilgithub.com`). A wildcard never covers an IP
    /// address or `localhost`.
    pub fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Exact(exact), host) => exact == host,
            (HostPattern::Wildcard { suffix }, Host::Name(name)) => name
                .strip_suffix(suffix.as_str())
                .and_then(|prefix| prefix.strip_suffix('.'))
                .is_some_and(|prefix| prefix.split('.').all(|label| !label.is_empty())),
            (HostPattern::Wildcard { .. }, Host::V4(_) | Host::V6(_)) => false,
        }
    }

    /// Whether this is a `*.suffix` pattern.
    pub fn is_wildcard(&self) -> bool {
        matches!(self, HostPattern::Wildcard { .. })
    }

    /// The pattern's canonical text (`*.github.com`, `api.github.com`, `::1`).
    pub fn as_text(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(host) => host.fmt(f),
            HostPattern::Wildcard { suffix } => write!(f, "*.{suffix}"),
        }
    }
}

/// Why a host pattern in a policy or alias file was refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum HostPatternError {
    /// `*` somewhere other than as the whole first label (`api*.x.com`, `a.*.com`, `**.x.com`).
    #[error("`*` must be a whole leading label, e.g. `*.github.com`")]
    NotLeadingLabel,
    /// A wildcard followed by fewer than two labels (`*`, `*.`, `*.com`).
    #[error("a wildcard must be followed by at least two labels, e.g. `*.github.com`")]
    TooBroad,
    /// A host spelled in a form other than its canonical one. The message never shows the
    /// canonical text: it is the input lowercased, and the input may be a pasted token.
    #[error(
        "host is not in canonical form; write it lowercase, in punycode, without a trailing dot, \
         and an IP address in its plain form"
    )]
    NotCanonical {
        /// The canonical text (the input, lowercased: may hold a pasted secret; never show it).
        canonical: String,
    },
    /// Not a host pattern at all.
    #[error("invalid host pattern: {reason}")]
    Invalid {
        /// What is wrong, in words; never the text itself.
        reason: &'static str,
    },
}

fn parse_bracketed(rest: &str) -> Result<Host, HostError> {
    let Some((inner, after)) = rest.split_once(']') else {
        return Err(HostError::InvalidIpv6);
    };
    if !after.is_empty() {
        return Err(if after.starts_with(':') {
            HostError::Port
        } else {
            HostError::InvalidIpv6
        });
    }
    if inner.contains('%') {
        return Err(HostError::ScopedIpv6);
    }
    inner
        .parse::<Ipv6Addr>()
        .map(Host::from_ipv6)
        .map_err(|_| HostError::InvalidIpv6)
}

/// Checks the ASCII output of UTS-46 (one trailing dot already stripped) and reads it as a name
/// or an IPv4 address.
fn parse_ascii_name(name: &str) -> Result<Host, HostError> {
    if name.is_empty() {
        return Err(HostError::Empty);
    }
    if let Some(bad) = name
        .bytes()
        .find(|b| !matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.'))
    {
        return Err(match bad {
            b'@' => HostError::Userinfo,
            b':' => HostError::Port,
            b'%' => HostError::PercentEscape,
            b' ' | 0x00..=0x1f | 0x7f => HostError::ControlOrWhitespace,
            _ => HostError::InvalidCharacter,
        });
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(HostError::LabelTooLong);
        }
    }
    if name.len() > MAX_NAME_LEN {
        return Err(HostError::TooLong);
    }
    // WHATWG URL parsers read a host whose last label is a number as IPv4; so does `inet_aton`.
    // Such a host is an address or an error, never a name: no top-level domain starts with a digit.
    let last_label = name.rsplit('.').next().unwrap_or(name);
    if last_label.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_ipv4_any(name)
            .map(Host::V4)
            .ok_or(HostError::AmbiguousNumber);
    }
    if name
        .split('.')
        .any(|label| label.starts_with('-') || label.ends_with('-'))
    {
        return Err(HostError::HyphenAtLabelEdge);
    }
    Ok(Host::Name(name.to_owned()))
}

/// The WHATWG IPv4 parser: one to four parts, each decimal, octal (leading `0`) or hex (`0x`);
/// the last part fills the remaining bytes.
fn parse_ipv4_any(text: &str) -> Option<Ipv4Addr> {
    let mut numbers = [0u64; 4];
    let mut count = 0usize;
    for part in text.split('.') {
        let slot = numbers.get_mut(count)?;
        *slot = parse_ipv4_number(part)?;
        count += 1;
    }
    let (last, init) = numbers.get(..count)?.split_last()?;
    if init.iter().any(|&n| n > 255) {
        return None;
    }
    // The last part covers the bytes the others left: 4 bytes alone, 1 byte after three parts.
    let last_bytes = u32::try_from(5 - count).ok()?;
    if *last >= 256u64.checked_pow(last_bytes)? {
        return None;
    }
    let mut address = *last;
    for (index, &n) in init.iter().enumerate() {
        let shift = 8 * (3 - index);
        address = address.checked_add(n.checked_shl(u32::try_from(shift).ok()?)?)?;
    }
    u32::try_from(address).ok().map(Ipv4Addr::from)
}

fn parse_ipv4_number(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 {
            match part.strip_prefix('0') {
                Some(octal) => (octal, 8),
                None => (part, 10),
            }
        } else {
            (part, 10)
        };
    let mut value: u64 = 0;
    for c in digits.chars() {
        let digit = c.to_digit(radix)?;
        value = value
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(digit))?;
    }
    Some(value)
}

fn invalid_pattern(error: HostError) -> HostPatternError {
    let reason = match error {
        HostError::Empty => "a host pattern must not be empty",
        HostError::TooLong => "the host is longer than 253 bytes",
        HostError::LabelTooLong => "a label is longer than 63 bytes",
        HostError::EmptyLabel => "a label is empty",
        HostError::Userinfo => "a host pattern has no userinfo (`@`)",
        HostError::Port => "a host pattern has no port; use the rule's `port` field",
        HostError::ScopedIpv6 => "scoped IPv6 addresses (`%zone`) are not allowed",
        HostError::InvalidIpv6 => "not a valid IPv6 address",
        HostError::PercentEscape => "a host pattern has no percent-escapes",
        HostError::ControlOrWhitespace => "whitespace or a control character",
        HostError::InvalidCharacter => "a character other than letters, digits, `-` and `.`",
        HostError::HyphenAtLabelEdge => "a label starts or ends with `-`",
        HostError::Idna => "not a valid internationalized domain name",
        HostError::AmbiguousNumber => "ends in a number but is not a valid IPv4 address",
        HostError::Unspecified => "the unspecified address (`0.0.0.0`, `::`) reaches no one host",
    };
    HostPatternError::Invalid { reason }
}

/// Longest text read at all: generous for a 253-byte name spelled in Unicode, small enough that
/// an attacker cannot make UTS-46 processing expensive.
const MAX_INPUT_LEN: usize = 1024;
const MAX_NAME_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn text(input: &str) -> String {
        Host::parse_request(input).unwrap().as_text()
    }

    #[test]
    fn reads_names_and_addresses_canonically() {
        assert_eq!(text("API.GitHub.com."), "api.github.com");
        assert_eq!(text("bücher.de"), "xn--bcher-kva.de");
        assert_eq!(text("a。b.com"), "a.b.com");
        assert_eq!(text("0x7f.1"), "127.0.0.1");
        assert_eq!(text("0xFFFFFFFF"), "255.255.255.255");
        assert_eq!(text("10.0x10.010"), "10.16.0.8");
        assert_eq!(text("１２７.０.０.１"), "127.0.0.1");
        assert_eq!(text("[::FFFF:7F00:1]"), "127.0.0.1");
        assert_eq!(text("0:0::1"), "::1");
        assert_eq!(text("[2001:DB8:0:0:0:0:0:1]"), "2001:db8::1");
    }

    #[test]
    fn refuses_ambiguous_or_foreign_text() {
        let cases: &[(&str, HostError)] = &[
            ("", HostError::Empty),
            (".", HostError::Empty),
            ("a..b", HostError::EmptyLabel),
            (".a", HostError::EmptyLabel),
            ("a.b..", HostError::EmptyLabel),
            ("a:80", HostError::Port),
            ("[::1]:80", HostError::Port),
            ("a＠b.com", HostError::Userinfo),
            ("a：80", HostError::Port),
            ("[fe80::1%eth0]", HostError::ScopedIpv6),
            ("[127.0.0.1]", HostError::InvalidIpv6),
            ("[::1", HostError::InvalidIpv6),
            ("a%2eb", HostError::PercentEscape),
            ("a b", HostError::ControlOrWhitespace),
            ("a_b.com", HostError::InvalidCharacter),
            ("-a.com", HostError::HyphenAtLabelEdge),
            ("1.2.3.4.5", HostError::AmbiguousNumber),
            ("1.2.3.256", HostError::AmbiguousNumber),
            ("4294967296", HostError::AmbiguousNumber),
            ("0x1g", HostError::AmbiguousNumber),
            ("089", HostError::AmbiguousNumber),
            ("99999999999999999999999", HostError::AmbiguousNumber),
        ];
        for (input, error) in cases {
            assert_eq!(Host::parse_request(input), Err(*error), "input {input:?}");
        }
        let long_label = "a".repeat(64);
        assert_eq!(
            Host::parse_request(&long_label),
            Err(HostError::LabelTooLong)
        );
        let long_name = ["a"; 128].join(".");
        assert_eq!(Host::parse_request(&long_name), Err(HostError::TooLong));
        assert!(Host::parse_request(&["a"; 127].join(".")).is_ok());
    }

    #[test]
    fn loopback_and_authority() {
        let host = |s| Host::parse_request(s).unwrap();
        assert!(host("127.200.0.1").is_loopback());
        assert!(host("::1").is_loopback());
        assert!(host("localhost.").is_loopback());
        assert!(!host("foo.localhost").is_loopback());
        for unspecified in ["0.0.0.0", "0", "0x0", "::", "[::]", "[::ffff:0.0.0.0]"] {
            assert_eq!(
                Host::parse_request(unspecified),
                Err(HostError::Unspecified),
                "{unspecified}"
            );
        }
        assert!(Host::V6("::ffff:127.0.0.1".parse().unwrap()).is_loopback());
        assert_eq!(host("::1").authority(Some(8080)), "[::1]:8080");
        assert_eq!(host("x.com").authority(None), "x.com");
        assert_eq!(host("x.com").ip(), None);
    }

    #[test]
    fn wildcard_matches_whole_labels_only() {
        let pattern = HostPattern::parse("*.github.com").unwrap();
        let host = |s| Host::parse_request(s).unwrap();
        assert!(pattern.matches(&host("api.github.com")));
        assert!(pattern.matches(&host("a.b.github.com")));
        assert!(!pattern.matches(&host("github.com")));
        assert!(!pattern.matches(&host("evilgithub.com")));
        assert!(!pattern.matches(&Host::Name(".github.com".into())));
        assert!(!pattern.matches(&Host::Name("a..github.com".into())));
        assert_eq!(
            HostPattern::parse("*.localhost"),
            Err(HostPatternError::TooBroad)
        );
        assert!(matches!(
            HostPattern::parse("*.a.localhost"),
            Err(HostPatternError::Invalid { .. })
        ));
        assert!(matches!(
            HostPattern::parse("*.1.2.3"),
            Err(HostPatternError::Invalid { .. })
        ));
    }
}
