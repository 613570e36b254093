//! The request view that policy matches and the broker forwards: scheme, canonical host, port,
//! path and raw query, built once from a proxied URL.
//!
//! Runs right after authentication, before placeholders are looked for and before any rule is
//! evaluated; the broker builds the upstream request from the [`Target`] returned here and never
//! from the raw input ("match what you forward"). Anything that two HTTP stacks could read
//! differently is refused rather than guessed at. Never decodes or reorders the query, never
//! resolves a name, and never echoes its input in an error.

use std::fmt;
use std::str::FromStr;

use crate::host::{Host, HostError};

/// The scheme Mint uses toward the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// TLS; the only scheme allowed toward a host that is not loopback.
    Https,
    /// Plain HTTP, allowed only toward loopback hosts.
    Http,
}

// === impl Scheme ===

impl Scheme {
    /// Reads `https` or `http`, exactly and in lowercase; anything else is refused.
    pub fn parse(text: &str) -> Result<Scheme, NormalizeError> {
        match text {
            "https" => Ok(Scheme::Https),
            "http" => Ok(Scheme::Http),
            _ => Err(NormalizeError::InvalidScheme),
        }
    }

    /// The scheme's text: `https` or `http`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
        }
    }

    /// The port used when the authority names none: 443 or 80.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Https => 443,
            Scheme::Http => 80,
        }
    }
}

impl FromStr for Scheme {
    type Err = NormalizeError;

    fn from_str(text: &str) -> Result<Scheme, NormalizeError> {
        Scheme::parse(text)
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A canonical request target: what policy matches and exactly what the broker forwards.
///
/// `Debug` shows the query's parameter names only, never its values.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// The scheme used toward the upstream.
    pub scheme: Scheme,
    /// The canonical host.
    pub host: Host,
    /// The port, the scheme's default when the authority named none.
    pub port: u16,
    /// The normalized path (see [`normalize_path`]); `/` at least.
    pub path: String,
    /// The raw query text after `?`, checked but neither decoded nor reordered; `None` when the
    /// target had no `?`.
    pub query: Option<String>,
}

// === impl Target ===

impl Target {
    /// The URL to forward to, such as `https://api.github.com/x?y`: the default port is omitted
    /// and an IPv6 host is bracketed.
    pub fn url(&self) -> String {
        let mut url = format!("{}://{}{}", self.scheme, self.authority(), self.path);
        if let Some(query) = &self.query {
            url.push('?');
            url.push_str(query);
        }
        url
    }

    /// The authority for the outgoing `Host` header; the default port is omitted.
    pub fn authority(&self) -> String {
        let port = (self.port != self.scheme.default_port()).then_some(self.port);
        self.host.authority(port)
    }

    /// The names of the query parameters, in order and with repeats, for the audit log; never
    /// their values. A name is percent-decoded when the decoded bytes are UTF-8 and kept as
    /// written otherwise; `+` is left as it is.
    pub fn query_keys(&self) -> Vec<String> {
        let Some(query) = &self.query else {
            return Vec::new();
        };
        query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let key = pair.split_once('=').map_or(pair, |(key, _)| key);
                percent_decode_utf8(key).unwrap_or_else(|| key.to_owned())
            })
            .collect()
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("scheme", &self.scheme)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.path)
            .field("query_keys", &self.query_keys())
            .finish_non_exhaustive()
    }
}

/// Why a request target was refused. Names the kind of problem only, never the input text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum NormalizeError {
    /// The host is malformed or ambiguous.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A scheme other than `https` or `http`.
    #[error("scheme must be `https` or `http`")]
    InvalidScheme,
    /// An authority that is not `host`, `host:port`, `[v6]` or `[v6]:port`.
    #[error("authority must be `host`, `host:port` or `[ipv6]:port`")]
    InvalidAuthority,
    /// `user@host` in the authority.
    #[error("userinfo (`user@`) is not allowed in the target")]
    Userinfo,
    /// An empty, zero, too large or non-numeric port.
    #[error("port must be a number from 1 to 65535")]
    InvalidPort,
    /// `http` toward a host that is not loopback.
    #[error("plain `http` is allowed only to loopback hosts; use `https`")]
    PlainHttpNonLoopback,
    /// A `#` anywhere in the target.
    #[error("a fragment (`#`) is not allowed in the target")]
    Fragment,
    /// A path that does not start with `/`.
    #[error("path must start with `/`")]
    PathNotAbsolute,
    /// A `.` or `..` segment, however it is spelled.
    #[error("path must not contain `.` or `..` segments, encoded or not")]
    DotSegment,
    /// `//` in the path.
    #[error("path must not contain empty segments (`//`)")]
    EmptySegment,
    /// `%2F` or `%5C` in the path.
    #[error("path must not contain an encoded `/` or `\\` (`%2F`, `%5C`)")]
    EncodedSeparator,
    /// A raw `\` in the path.
    #[error("path must not contain `\\`")]
    Backslash,
    /// `;` in the path, raw or as `%3B`.
    #[error("path must not contain `;` (matrix parameters), encoded or not")]
    MatrixParameter,
    /// `%00` in the path.
    #[error("path must not contain an encoded NUL (`%00`)")]
    EncodedNul,
    /// `%` not followed by two hex digits.
    #[error("invalid percent-escape: `%` must be followed by two hex digits")]
    InvalidEscape,
    /// `%25` followed by two hex digits: an escape that a second decoding would turn into
    /// another character.
    #[error("path must not contain a double-encoded escape (`%25` and two hex digits)")]
    DoubleEncoded,
    /// A `?` in a path given on its own.
    #[error("path must not contain `?`")]
    QueryInPath,
    /// Whitespace or a control character in the path or query.
    #[error("target contains whitespace or a control character")]
    ControlOrWhitespace,
    /// A byte outside ASCII in the path or query.
    #[error("target contains a non-ASCII character; percent-encode it")]
    NonAscii,
    /// A path longer than `MAX_PATH_BYTES`.
    #[error("path is longer than 8192 bytes")]
    PathTooLong,
}

/// The longest path Mint accepts: 8 KiB.
pub const MAX_PATH_BYTES: usize = 8192;

/// Builds the canonical target from the three parts of a proxied URL
/// (`/v1/proxy/{scheme}/{authority}/{path...}`, or an absolute-form request).
///
/// `path_and_query` starts with `/`, or is empty or starts with `?`, meaning the path `/`.
/// `http` is accepted only toward a loopback host.
pub fn normalize_target(
    scheme: &str,
    authority: &str,
    path_and_query: &str,
) -> Result<Target, NormalizeError> {
    let scheme = Scheme::parse(scheme)?;
    let (host, port) = parse_authority(authority)?;
    if scheme == Scheme::Http && !host.is_loopback() {
        return Err(NormalizeError::PlainHttpNonLoopback);
    }
    if path_and_query.contains('#') {
        return Err(NormalizeError::Fragment);
    }
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    let path = if path.is_empty() {
        "/".to_owned()
    } else {
        normalize_path(path)?
    };
    if let Some(query) = query {
        check_query(query)?;
    }
    Ok(Target {
        scheme,
        host,
        port: port.unwrap_or(scheme.default_port()),
        path,
        query: query.map(str::to_owned),
    })
}

/// Reads an authority: `host`, `host:port`, `[v6]` or `[v6]:port`, with the host read by
/// [`Host::parse_request`]. IPv6 must be bracketed here. The port is `None` when absent.
pub fn parse_authority(authority: &str) -> Result<(Host, Option<u16>), NormalizeError> {
    if authority.contains('@') {
        return Err(NormalizeError::Userinfo);
    }
    let (host, port) = if authority.starts_with('[') {
        let end = authority
            .find(']')
            .ok_or(NormalizeError::Host(HostError::InvalidIpv6))?;
        // `]` is one byte, so `end + 1` is a character boundary; checked anyway.
        let (host, rest) = authority
            .split_at_checked(end + 1)
            .ok_or(NormalizeError::InvalidAuthority)?;
        match rest.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if rest.is_empty() => (host, None),
            None => return Err(NormalizeError::InvalidAuthority),
        }
    } else {
        match authority.split_once(':') {
            // More than one `:`: an unbracketed IPv6 address, or garbage.
            Some((_, port)) if port.contains(':') => return Err(NormalizeError::InvalidAuthority),
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let host = Host::parse_request(host)?;
    let port = port.map(parse_port).transpose()?;
    Ok((host, port))
}

/// Normalizes a request path, refusing anything an upstream could read as a different path.
///
/// The path must start with `/`. Refused: `.` and `..` segments, also spelled with `%2e`/`%2E`;
/// encoded `/` or `\` (`%2F`, `%5C`); a raw `\`; empty segments (`//`; one trailing `/` is
/// fine, as is `/` alone); `;` raw or as `%3B`; `%00`; `%25` followed by two hex digits (a
/// double-encoded escape); invalid escapes (`%`, `%4`, `%zz`); control characters, space,
/// non-ASCII, `#` and `?`. Escapes of unreserved characters (letters, digits, `-` `.` `_` `~`)
/// are decoded before the segments are checked; every other escape gets uppercase hex
/// (`%3a` becomes `%3A`). Idempotent: a normalized path normalizes to itself.
pub fn normalize_path(path: &str) -> Result<String, NormalizeError> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(NormalizeError::PathNotAbsolute);
    }
    // Bounds the work of matching a path against many globs.
    if bytes.len() > MAX_PATH_BYTES {
        return Err(NormalizeError::PathTooLong);
    }
    let mut out = String::with_capacity(path.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        index += 1;
        match byte {
            b'%' => {
                let value = bytes
                    .get(index..index + 2)
                    .and_then(decode_hex_pair)
                    .ok_or(NormalizeError::InvalidEscape)?;
                index += 2;
                match value {
                    0 => return Err(NormalizeError::EncodedNul),
                    b'/' | b'\\' => return Err(NormalizeError::EncodedSeparator),
                    b';' => return Err(NormalizeError::MatrixParameter),
                    // Unreserved characters, and the reserved ones a path segment may hold raw
                    // (`:`, `@` and the sub-delimiters but `;`): servers route `%3A` as `:`, so
                    // a rule written with `:` must see it that way too.
                    value if is_unreserved(value) || is_segment_delimiter(value) => {
                        out.push(char::from(value));
                    }
                    value => push_escape(&mut out, value),
                }
            }
            b'\\' => return Err(NormalizeError::Backslash),
            b';' => return Err(NormalizeError::MatrixParameter),
            b'#' => return Err(NormalizeError::Fragment),
            b'?' => return Err(NormalizeError::QueryInPath),
            b' ' | 0x00..=0x1f | 0x7f => return Err(NormalizeError::ControlOrWhitespace),
            0x80..=0xff => return Err(NormalizeError::NonAscii),
            byte => out.push(char::from(byte)),
        }
    }
    check_segments(&out)?;
    // Checked on the output: decoding `%25%34%31` leaves `%2541`, which must be caught too.
    if out.match_indices("%25").any(|(at, _)| {
        out.as_bytes()
            .get(at + 3..at + 5)
            .is_some_and(|pair| decode_hex_pair(pair).is_some())
    }) {
        return Err(NormalizeError::DoubleEncoded);
    }
    Ok(out)
}

fn check_segments(path: &str) -> Result<(), NormalizeError> {
    // The path starts with `/`, so the first item of the split is the empty text before it.
    let mut segments = path.split('/').skip(1).peekable();
    while let Some(segment) = segments.next() {
        if segment == "." || segment == ".." {
            return Err(NormalizeError::DotSegment);
        }
        if segment.is_empty() && segments.peek().is_some() {
            return Err(NormalizeError::EmptySegment);
        }
    }
    Ok(())
}

/// Checks the raw query: valid escapes, printable ASCII, no `#`. Leaves it as written, because
/// the broker substitutes placeholders into it later and the upstream reads it as sent.
fn check_query(query: &str) -> Result<(), NormalizeError> {
    let bytes = query.as_bytes();
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        index += 1;
        match byte {
            b'%' => {
                if bytes
                    .get(index..index + 2)
                    .and_then(decode_hex_pair)
                    .is_none()
                {
                    return Err(NormalizeError::InvalidEscape);
                }
                index += 2;
            }
            b'#' => return Err(NormalizeError::Fragment),
            b' ' | 0x00..=0x1f | 0x7f => return Err(NormalizeError::ControlOrWhitespace),
            0x80..=0xff => return Err(NormalizeError::NonAscii),
            _ => {}
        }
    }
    Ok(())
}

/// Reads a port strictly: ASCII digits only (no sign), 1 to 65535. Leading zeros are accepted,
/// since the value is unambiguous and only the number is forwarded.
fn parse_port(text: &str) -> Result<u16, NormalizeError> {
    if text.is_empty() {
        return Err(NormalizeError::InvalidPort);
    }
    let mut value: u32 = 0;
    for byte in text.bytes() {
        if !byte.is_ascii_digit() {
            return Err(NormalizeError::InvalidPort);
        }
        value = value * 10 + u32::from(byte - b'0');
        if value > u32::from(u16::MAX) {
            return Err(NormalizeError::InvalidPort);
        }
    }
    match u16::try_from(value) {
        Ok(0) | Err(_) => Err(NormalizeError::InvalidPort),
        Ok(port) => Ok(port),
    }
}

fn decode_hex_pair(pair: &[u8]) -> Option<u8> {
    let [high, low] = pair else {
        return None;
    };
    let high = char::from(*high).to_digit(16)?;
    let low = char::from(*low).to_digit(16)?;
    u8::try_from(high * 16 + low).ok()
}

/// Reserved characters that RFC 3986 allows raw in a path segment, except `;` (refused).
fn is_segment_delimiter(byte: u8) -> bool {
    matches!(
        byte,
        b':' | b'@' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b'='
    )
}

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn push_escape(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    for nibble in [byte >> 4, byte & 0x0f] {
        // INVARIANT: a nibble is below 16, the length of `HEX`.
        out.push(char::from(HEX[usize::from(nibble)]));
    }
}

fn percent_decode_utf8(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        index += 1;
        if byte == b'%' {
            decoded.push(bytes.get(index..index + 2).and_then(decode_hex_pair)?);
            index += 2;
        } else {
            decoded.push(byte);
        }
    }
    String::from_utf8(decoded).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_forwarded_url() {
        let target = normalize_target("https", "API.github.com:443", "/x?y=1&z").unwrap();
        assert_eq!(target.url(), "https://api.github.com/x?y=1&z");
        assert_eq!(target.authority(), "api.github.com");
        let target = normalize_target("http", "[::1]:8080", "").unwrap();
        assert_eq!(target.url(), "http://[::1]:8080/");
        assert_eq!(target.query, None);
        let target = normalize_target("https", "x.com", "?").unwrap();
        assert_eq!(target.url(), "https://x.com/?");
        assert_eq!(target.query_keys(), Vec::<String>::new());
    }

    #[test]
    fn query_keys_never_show_values() {
        let target =
            normalize_target("https", "x.com", "/?a=SECRET&b%5Bc%5D=1&&%FF=2&d&a=3").unwrap();
        assert_eq!(target.query_keys(), ["a", "b[c]", "%FF", "d", "a"]);
        assert!(!format!("{target:?}").contains("SECRET"));
    }

    #[test]
    fn authority_forms() {
        let cases: &[(&str, Result<u16, NormalizeError>)] = &[
            ("x.com:0443", Ok(443)),
            ("x.com:65535", Ok(65535)),
            ("x.com:", Err(NormalizeError::InvalidPort)),
            ("x.com:0", Err(NormalizeError::InvalidPort)),
            ("x.com:99999999999", Err(NormalizeError::InvalidPort)),
            ("x.com:8a", Err(NormalizeError::InvalidPort)),
            ("::1", Err(NormalizeError::InvalidAuthority)),
            ("[::1]x", Err(NormalizeError::InvalidAuthority)),
            ("[::1", Err(NormalizeError::Host(HostError::InvalidIpv6))),
            ("a@x.com", Err(NormalizeError::Userinfo)),
        ];
        for (authority, expected) in cases {
            let got = normalize_target("https", authority, "/").map(|t| t.port);
            assert_eq!(&got, expected, "authority {authority:?}");
        }
    }

    #[test]
    fn errors_never_echo_input() {
        let secret = "ghp_SECRETSECRET";
        let inputs = [
            ("https", format!("{secret}@x.com"), "/".to_owned()),
            ("https", format!("{secret}:1"), "/".to_owned()),
            ("https", "x.com".to_owned(), format!("/{secret}/../a")),
            ("https", "x.com".to_owned(), format!("/a?{secret}#")),
            ("ftp", "x.com".to_owned(), format!("/{secret}")),
        ];
        for (scheme, authority, path) in &inputs {
            let error = normalize_target(scheme, authority, path).unwrap_err();
            assert!(!error.to_string().contains("SECRET"));
            assert!(!format!("{error:?}").contains("SECRET"));
        }
    }
}
