//! Header hygiene in both directions: framing checks on the agent's request, and what is never
//! copied across the proxy.
//!
//! Request: ambiguous framing (Content-Length with Transfer-Encoding, several Content-Length or
//! Host headers) is refused; upgrades are refused, except a WebSocket opening handshake (which
//! keeps `Upgrade: websocket` and `Connection: Upgrade` on its way upstream, and loses any
//! `Sec-WebSocket-Extensions` offer: see `websocket.rs`); a method-override header must repeat the method
//! (otherwise `POST` + `X-HTTP-Method-Override: DELETE` would slip past a rule on `DELETE`). Then
//! the capability, every `Mint-*` and `Proxy-*` header, every hop-by-hop header (and every header
//! `Connection` names), `Host`, `Content-Length`, `Expect` and `Accept-Encoding` are removed: Mint
//! sets the upstream's `Host`, length and `Accept-Encoding: identity` itself.
//!
//! Response: hop-by-hop, `Proxy-*` and `Mint-*` headers from the upstream are removed (an upstream
//! cannot forge Mint's own headers).
//!
//! Header names are read as CGI gateways and PHP read them, `-` and `_` alike in any case
//! ([`reads_as`]), wherever a name is checked or stripped: `Mcp_Name` is checked as `Mcp-Name`,
//! `Mint_Capability` and `Keep_Alive` are stripped, and the underscore spellings of the headers
//! that frame, decode and type the body (`Content_Length`, `Transfer_Encoding`,
//! `Content_Encoding`, `Content_Type`) are refused: Mint reads the body by the hyphen forms, and a
//! receiver that read the other spelling would see another body.

use http::Method;
use http::header::{self, HeaderMap, HeaderName};

use super::error::Invalid;

/// The headers that may carry a method override.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Hop-by-hop headers (RFC 9110 section 7.6.1), plus `Keep-Alive` (`Proxy-Connection` goes with
/// every `Proxy-*` header).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authenticate",
    "keep-alive",
];

/// The headers by which Mint frames, decodes and types the request body: a request that also
/// spells one with `_` for `-` is refused, since a receiver reading that spelling would read
/// another body than the one Mint examined.
const BODY_HEADERS: [&str; 4] = [
    "content-length",
    "transfer-encoding",
    "content-encoding",
    "content-type",
];

/// Refuses a method that is not an uppercase token: the policy matches methods byte for byte,
/// and an upstream may read `delete` as `DELETE`.
pub(crate) fn check_method(method: &Method) -> Result<(), Invalid> {
    if method.as_str().bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(Invalid::Method("the method must be uppercase, e.g. `GET`"));
    }
    Ok(())
}

/// Refuses ambiguous framing, transfer codings other than `chunked`, upgrades other than a
/// well-formed WebSocket opening handshake ([`check_websocket_offer`]) and method overrides that
/// differ from the method.
pub(crate) fn check_request(method: &Method, headers: &HeaderMap) -> Result<(), Invalid> {
    let lengths = headers.get_all(header::CONTENT_LENGTH).iter().count();
    if lengths > 1 {
        return Err(Invalid::Framing("several Content-Length headers"));
    }
    if lengths == 1 && headers.contains_key(header::TRANSFER_ENCODING) {
        return Err(Invalid::Framing(
            "Content-Length together with Transfer-Encoding",
        ));
    }
    if let Some(length) = headers.get(header::CONTENT_LENGTH)
        && (length.is_empty() || !length.as_bytes().iter().all(u8::is_ascii_digit))
    {
        return Err(Invalid::Framing(
            "Content-Length must be one decimal number",
        ));
    }
    // A transfer coding besides `chunked` (`gzip, chunked`) is one Mint does not undo, so the
    // body it examined would not be the one a receiver decodes.
    let codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|coding| !coding.is_empty());
    for coding in codings {
        if !coding.eq_ignore_ascii_case(b"chunked") {
            return Err(Invalid::Framing("a transfer coding other than `chunked`"));
        }
    }
    if headers.get_all(header::HOST).iter().count() > 1 {
        return Err(Invalid::Framing("several Host headers"));
    }
    if headers
        .keys()
        .any(|name| is_underscore_spelling(name.as_str(), &BODY_HEADERS))
    {
        return Err(Invalid::Framing(
            "a framing or coding header spelled with `_` for `-` (`Content_Length`, `Transfer_Encoding`, `Content_Encoding`, `Content_Type`)",
        ));
    }
    if headers.contains_key(header::UPGRADE) {
        check_websocket_offer(method, headers)?;
    }
    for (name, value) in headers {
        if is_override_header(name.as_str()) && value.as_bytes() != method.as_str().as_bytes() {
            return Err(Invalid::Method(
                "a method-override header must repeat the request's own method",
            ));
        }
    }
    Ok(())
}

/// Refuses an `Upgrade` request that is not a WebSocket opening handshake as RFC 6455 section
/// 4.1 writes it: `GET`, one `Upgrade: websocket`, `Connection` naming `upgrade`, one
/// `Sec-WebSocket-Key`, `Sec-WebSocket-Version: 13`, and no body. Other upgrades (h2c, TLS) are
/// refused: Mint would relay bytes it cannot examine.
pub(crate) fn check_websocket_offer(method: &Method, headers: &HeaderMap) -> Result<(), Invalid> {
    let mut upgrades = headers.get_all(header::UPGRADE).iter();
    let websocket = match (upgrades.next(), upgrades.next()) {
        (Some(value), None) => value
            .as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"websocket"),
        _ => false,
    };
    if !websocket {
        return Err(Invalid::Header(
            "protocol upgrades other than WebSocket (h2c, TLS) are not supported through Mint",
        ));
    }
    if method != Method::GET {
        return Err(Invalid::Header(
            "a WebSocket opening handshake must be a `GET`",
        ));
    }
    let connection_upgrade = headers.get_all(header::CONNECTION).iter().any(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"upgrade"))
    });
    let single = |name: header::HeaderName| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => Some(value.as_bytes().trim_ascii().to_vec()),
            _ => None,
        }
    };
    let version = single(header::SEC_WEBSOCKET_VERSION);
    if !connection_upgrade
        || single(header::SEC_WEBSOCKET_KEY).is_none_or(|key| !is_websocket_nonce(&key))
        || version.as_deref() != Some(b"13".as_slice())
    {
        return Err(Invalid::Header(
            "a WebSocket opening handshake needs `Connection: Upgrade`, one `Sec-WebSocket-Key` (16 random bytes in base64, RFC 6455) and `Sec-WebSocket-Version: 13`",
        ));
    }
    let empty_length = headers
        .get(header::CONTENT_LENGTH)
        .is_none_or(|length| length.as_bytes() == b"0");
    if headers.contains_key(header::TRANSFER_ENCODING) || !empty_length {
        return Err(Invalid::Header("a WebSocket opening handshake has no body"));
    }
    Ok(())
}

/// The forwarded headers of a WebSocket opening handshake, after [`strip_request`] removed the
/// hop-by-hop ones: `Upgrade: websocket` and `Connection: Upgrade` again (the upgrade is the
/// request), and no `Sec-WebSocket-Extensions` in any spelling, so the upstream negotiates no
/// extension (`permessage-deflate` would compress frames past the scrubber).
pub(crate) fn restore_websocket_upgrade(headers: &mut HeaderMap) {
    let offers: Vec<HeaderName> = headers
        .keys()
        .filter(|name| reads_as(name.as_str(), "sec-websocket-extensions"))
        .cloned()
        .collect();
    for name in offers {
        headers.remove(name);
    }
    headers.insert(
        header::UPGRADE,
        header::HeaderValue::from_static("websocket"),
    );
    headers.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
}

/// Whether a header name is a method-override header as some receiver reads it ([`reads_as`]).
fn is_override_header(name: &str) -> bool {
    METHOD_OVERRIDES.iter().any(|known| reads_as(name, known))
}

/// Whether header name `name` is `known` (lowercase, with `-`) as a receiver may read it: `-`
/// and `_` are the same (CGI and PHP turn both into `_` of one server variable, and PHP's
/// built-in server keeps underscore headers), in any case (`HeaderName` is lowercase already,
/// and so is `name` wherever it comes from one).
pub(crate) fn reads_as(name: &str, known: &str) -> bool {
    name.len() == known.len()
        && name
            .bytes()
            .zip(known.bytes())
            .all(|(a, b)| a.to_ascii_lowercase() == b || (a == b'_' && b == b'-'))
}

/// Whether `name` spells one of `known` with `_` for at least one `-`.
fn is_underscore_spelling(name: &str, known: &[&str]) -> bool {
    name.contains('_') && known.iter().any(|known| reads_as(name, known))
}

/// Refuses a `_method` override parameter that names another method than the request's: Rails,
/// Laravel and Symfony read it from the query, a form body, a multipart body or a JSON body, so a
/// `POST` carrying `_method=DELETE` would otherwise slip past a rule on `DELETE`. Parameter names
/// are read the way such receivers register them ([`reads_as_method_param`]: percent-decoded,
/// leading spaces dropped, ` ` and `.` as `_`, cut at `[` and NUL, any case), so `.method`,
/// `+_method`, `%5Fmethod` and `_method[]` all count. Where it looks, in `body` (the body as a
/// receiver decodes it, after its content coding):
///
/// - the query, always;
/// - a form body: `application/x-www-form-urlencoded`, or no `Content-Type` at all (Rack reads a
///   `POST` without one as a form);
/// - a `multipart/*` body: any part named so, whatever its value (RFC 2231 `name*=` included);
/// - a body whose first character is `{` (after whitespace and a byte order mark), whatever its
///   `Content-Type`: a top-level member so named whose value is not a string that repeats the
///   method. Nested members are not parameters to any of these frameworks.
///
/// The scan borrows from `body`: no document is built, memory stays a few bytes besides the body.
pub(crate) fn check_override_params(
    method: &Method,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), Invalid> {
    let refused = || {
        Err(Invalid::Method(
            "a `_method` parameter must repeat the request's own method",
        ))
    };
    let own = method.as_str().as_bytes();
    if query.is_some_and(|q| form_overrides(q.as_bytes(), own)) {
        return refused();
    }
    if body.is_empty() {
        return Ok(());
    }
    let types = headers.get_all(header::CONTENT_TYPE);
    let media = |prefix: &str| {
        types.iter().any(|value| {
            value
                .as_bytes()
                .trim_ascii_start()
                .get(..prefix.len())
                .is_some_and(|start| start.eq_ignore_ascii_case(prefix.as_bytes()))
        })
    };
    // No `Content-Type`, or an empty one (Rack reads an empty value as none), is read as a form,
    // as Rack reads such a `POST` body.
    let untyped = types.iter().next().is_none()
        || types
            .iter()
            .any(|value| value.as_bytes().trim_ascii().is_empty());
    let form = untyped || media("application/x-www-form-urlencoded");
    let overridden = (form && form_overrides(body, own))
        || (media("multipart/") && multipart_names_method(body))
        || json_overrides(body, own);
    if overridden { refused() } else { Ok(()) }
}

/// Whether a `key=value&...` string has a `_method` key whose value is not `own`. Pairs are
/// split on `;` as well as `&`: old Rack, PHP with `arg_separator.input = "&;"`, Python before
/// 3.9.2 and Go before 1.17 read `a=1;_method=DELETE` as two parameters. Where a receiver does
/// not, the `;` stays inside a value, and refusing is only stricter than needed.
fn form_overrides(pairs: &[u8], own: &[u8]) -> bool {
    pairs.split(|&b| b == b'&' || b == b';').any(|pair| {
        let (key, value) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (
                pair.get(..at).unwrap_or_default(),
                pair.get(at + 1..).unwrap_or_default(),
            ),
            None => (pair, &b""[..]),
        };
        reads_as_method_param(&form_decode(key)) && !form_decode(value).eq_ignore_ascii_case(own)
    })
}

/// Whether a parameter name (already percent-decoded) is `_method` to a receiver that registers
/// names as PHP does: cut at the first NUL (names are C strings), leading spaces dropped, cut at
/// the first `[` (`_method[]` and `_method[x]` are arrays named `_method`; an unclosed `[`
/// becomes `_`, which the cut reads more broadly), ` ` and `.` as `_`; and compared in any case
/// (more than PHP, which compares exactly: refusing `_METHOD` too costs nothing).
pub(crate) fn reads_as_method_param(name: &[u8]) -> bool {
    let name = name.split(|&b| b == 0).next().unwrap_or_default();
    let start = name.iter().position(|&b| b != b' ').unwrap_or(name.len());
    let name = name.get(start..).unwrap_or_default();
    let base = name.split(|&b| b == b'[').next().unwrap_or_default();
    const TARGET: &[u8] = b"_method";
    base.len() == TARGET.len()
        && base.iter().zip(TARGET).all(|(&b, &t)| {
            let b = match b {
                b' ' | b'.' => b'_',
                other => other.to_ascii_lowercase(),
            };
            b == t
        })
}

/// Percent-decodes a form component, `+` as space; a malformed escape stays as written.
fn form_decode(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        let hex = |at: usize| text.get(at).and_then(|c| (*c as char).to_digit(16));
        match b {
            b'+' => out.push(b' '),
            b'%' => match (hex(i + 1), hex(i + 2)) {
                (Some(hi), Some(lo)) => {
                    // INVARIANT: two hex digits make a value below 256.
                    out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'%'));
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    out
}

/// Whether a multipart body has a part whose name reads as `_method` ([`reads_as_method_param`],
/// also percent-decoded), or a name in the RFC 2231 extended form (`name*=`), which could spell
/// it in another way. Every `name` followed by `=` counts, wherever it sits (`filename=` too):
/// a receiver's parser may read the part headers differently, so over-matching is the safe side.
fn multipart_names_method(body: &[u8]) -> bool {
    let mut from = 0;
    while let Some(found) = body.get(from..).and_then(|rest| {
        rest.windows(4)
            .position(|w| w.eq_ignore_ascii_case(b"name"))
    }) {
        let mut pos = from + found + 4;
        from = pos;
        let skip = |mut pos: usize| {
            while matches!(body.get(pos), Some(b' ' | b'\t')) {
                pos += 1;
            }
            pos
        };
        pos = skip(pos);
        match body.get(pos) {
            Some(b'*') => return true,
            Some(b'=') => pos = skip(pos + 1),
            _ => continue,
        }
        let quote = body.get(pos).copied().filter(|&b| b == b'"' || b == b'\'');
        let value = if let Some(quote) = quote {
            // A quoted string, `\` escaping the next byte, ending at the quote or the line. PHP's
            // multipart parser takes single quotes as well as double ones.
            let mut name = Vec::new();
            let mut at = pos + 1;
            while let Some(&b) = body.get(at) {
                match b {
                    b'\r' | b'\n' => break,
                    b if b == quote => break,
                    b'\\' => {
                        if let Some(&next) = body.get(at + 1) {
                            name.push(next);
                        }
                        at += 2;
                        continue;
                    }
                    other => name.push(other),
                }
                at += 1;
                if name.len() > MAX_PART_NAME {
                    break;
                }
            }
            name
        } else {
            body.get(pos..)
                .unwrap_or_default()
                .iter()
                .take_while(|&&b| !matches!(b, b';' | b'\r' | b'\n' | b' ' | b'\t'))
                .take(MAX_PART_NAME)
                .copied()
                .collect()
        };
        if reads_as_method_param(&value) || reads_as_method_param(&form_decode(&value)) {
            return true;
        }
    }
    false
}

/// How much of a multipart part name is read: enough for `_method` after any run of leading
/// spaces a real client would send, and never a copy proportional to the body.
const MAX_PART_NAME: usize = 4096;

/// Whether a body holds a JSON object, at the top level, with a member whose name reads as
/// `_method` ([`reads_as_method_param`]) and whose value is not a string equal to `own` (any
/// case). Every JSON text of the body is read (JSON Lines, or a stream a decoder reads the first
/// value of), after one byte order mark. Borrowed and streaming: serde_json's deserializer with
/// every other value ignored ([`serde::de::IgnoredAny`]), so nothing proportional to the body is
/// built (member names with escapes are unescaped one at a time). A body that is not JSON from
/// its first character holds no such member.
fn json_overrides(body: &[u8], own: &[u8]) -> bool {
    use serde::de::DeserializeSeed as _;
    let body = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
    if body.trim_ascii_start().first() != Some(&b'{') {
        return false;
    }
    let mut texts = serde_json::Deserializer::from_slice(body);
    loop {
        match (TopLevelOverride { own }).deserialize(&mut texts) {
            Ok(true) => return true,
            Ok(false) => {}
            // Not JSON (any more): no receiver reads a member from it.
            Err(_) => return false,
        }
        if texts.end().is_ok() {
            return false;
        }
    }
}

/// Reads one JSON text: `true` when it is an object with an overriding `_method` member.
struct TopLevelOverride<'o> {
    own: &'o [u8],
}

impl<'de> serde::de::DeserializeSeed<'de> for TopLevelOverride<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TopLevelOverride<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut overridden = false;
        while let Some(is_method) = map.next_key_seed(MethodKey)? {
            if is_method {
                overridden |= map.next_value_seed(OverrideValue { own: self.own })?;
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(overridden)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(false)
    }

    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }
}

/// A member name: `true` when it reads as `_method`. Borrowed unless it holds escapes.
struct MethodKey;

impl<'de> serde::de::DeserializeSeed<'de> for MethodKey {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for MethodKey {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<bool, E> {
        Ok(reads_as_method_param(name.as_bytes()))
    }
}

/// The value of a `_method` member: `true` unless it is a string equal to the method.
struct OverrideValue<'o> {
    own: &'o [u8],
}

impl<'de> serde::de::DeserializeSeed<'de> for OverrideValue<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for OverrideValue<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a method")
    }

    fn visit_str<E>(self, value: &str) -> Result<bool, E> {
        Ok(!value.as_bytes().eq_ignore_ascii_case(self.own))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(true)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(true)
    }

    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(true)
    }

    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(true)
    }

    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(true)
    }

    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(true)
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(true)
    }
}

/// What the connection saw in the raw bytes of one request head before hyper parsed it: hyper
/// settles Content-Length with Transfer-Encoding (chunked wins) and merges repeated equal
/// Content-Length headers itself, so neither reaches `check_request`. The connection
/// (`serve/framing.rs`) finds every head of its byte stream, whatever its line endings and however
/// its bytes were split between reads, and hands each request the verdict on its own head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FramingWatch(u8);

const FRAMING_OK: u8 = 0;
const FRAMING_CL_TE: u8 = 1;
const FRAMING_SEVERAL_CL: u8 = 2;
const FRAMING_UNSEEN: u8 = 3;

// === impl FramingWatch ===

impl FramingWatch {
    /// The verdict on a head whose header names are `names`, in order.
    pub fn of_head<'a>(names: impl IntoIterator<Item = &'a str>) -> FramingWatch {
        let (mut lengths, mut encodings) = (0_usize, 0_usize);
        for name in names {
            if name.eq_ignore_ascii_case("content-length") {
                lengths += 1;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                encodings += 1;
            }
        }
        FramingWatch(if lengths > 0 && encodings > 0 {
            FRAMING_CL_TE
        } else if lengths > 1 {
            FRAMING_SEVERAL_CL
        } else {
            FRAMING_OK
        })
    }

    /// The verdict on a request whose head the connection did not see as hyper did: refused.
    pub fn unseen() -> FramingWatch {
        FramingWatch(FRAMING_UNSEEN)
    }

    /// Whether the head passes.
    pub fn is_ok(self) -> bool {
        self.0 == FRAMING_OK
    }

    /// The verdict on the request's head.
    pub(crate) fn take(&self) -> Result<(), Invalid> {
        match self.0 {
            FRAMING_OK => Ok(()),
            FRAMING_CL_TE => Err(Invalid::Framing(
                "Content-Length together with Transfer-Encoding",
            )),
            FRAMING_SEVERAL_CL => Err(Invalid::Framing("several Content-Length headers")),
            _ => Err(Invalid::Framing(
                "the request head could not be checked for ambiguous framing",
            )),
        }
    }
}

/// The declared request body length, when there is one (after [`check_request`]).
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Removes what must never be forwarded upstream: [`strip_common`]'s; `Host`, `Content-Length`,
/// `Expect` and `Accept-Encoding`, which Mint sets itself; and `Range` and `If-Range` (all in
/// either spelling).
///
/// A range request makes the upstream cut its answer where the agent says: against an upstream
/// that returns what it stored (or echoes), `bytes=8-23` then `bytes=24-39` bring a secret back
/// in pieces, none of which the scrubber can recognise as the secret. Without the header the
/// upstream sends the whole representation (a client must accept a 200 for a range request),
/// which the scrubber sees whole.
pub(crate) fn strip_request(headers: &mut HeaderMap) {
    strip_common(
        headers,
        &[
            "host",
            "content-length",
            "expect",
            "accept-encoding",
            "range",
            "if-range",
        ],
        &[],
    );
}

/// Removes what must never be passed back to the agent: [`strip_common`]'s, and the underscore
/// spellings of `Content-Length` and `Content-Encoding` (Mint sets or removes the hyphen forms
/// itself; a client reading `_` as `-` would frame or decode the body by the forged ones).
pub(crate) fn strip_response(headers: &mut HeaderMap) {
    strip_common(headers, &[], &["content-length", "content-encoding"]);
}

/// Removes every `Mint-*` and `Proxy-*` header, the hop-by-hop ones, every header `Connection`
/// names, and `also`, all in both spellings ([`reads_as`]); and the underscore spellings of
/// `underscored`.
fn strip_common(headers: &mut HeaderMap, also: &[&str], underscored: &[&str]) {
    let mut named: Vec<String> = Vec::new();
    for value in headers.get_all(header::CONNECTION) {
        let Ok(text) = value.to_str() else { continue };
        named.extend(
            text.split(',')
                .map(|token| token.trim().to_ascii_lowercase().replace('_', "-"))
                .filter(|token| !token.is_empty()),
        );
    }
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            let prefixed = |prefix: &str| {
                name.get(..prefix.len())
                    .is_some_and(|start| reads_as(start, prefix))
            };
            prefixed("proxy-")
                || prefixed("mint-")
                || HOP_BY_HOP
                    .iter()
                    .chain(also)
                    .any(|known| reads_as(name, known))
                || named.iter().any(|known| reads_as(name, known))
                || is_underscore_spelling(name, underscored)
        })
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// Whether `key` is what RFC 6455 section 4.1 asks of `Sec-WebSocket-Key`: 16 bytes in base64
/// (24 characters, `==` at the end). Nothing else is accepted, so a placeholder can never sit
/// there: the upstream answers with `Sec-WebSocket-Accept`, the SHA-1 of the key, and a secret
/// substituted into the key would come back to the agent as an unsalted hash to guess offline.
fn is_websocket_nonce(key: &[u8]) -> bool {
    use base64::Engine as _;
    key.len() == 24
        && base64::engine::general_purpose::STANDARD
            .decode(key)
            .is_ok_and(|bytes| bytes.len() == 16)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn refuses_ambiguous_framing() {
        let get = Method::GET;
        for pairs in [
            &[("content-length", "3"), ("content-length", "3")][..],
            &[("content-length", "3"), ("transfer-encoding", "chunked")][..],
            &[("content-length", "3, 3")][..],
            &[("content-length", "+3")][..],
            &[("host", "a.example"), ("host", "b.example")][..],
            &[("upgrade", "websocket")][..],
            &[("x-http-method-override", "DELETE")][..],
            &[("x-method-override", "GET"), ("x-method-override", "PUT")][..],
        ] {
            assert!(check_request(&get, &headers(pairs)).is_err(), "{pairs:?}");
        }
        assert!(check_request(&get, &headers(&[("x-http-method", "GET")])).is_ok());
        assert!(check_request(&get, &headers(&[("content-length", "12")])).is_ok());
    }

    #[test]
    fn only_a_well_formed_websocket_handshake_may_upgrade() {
        let handshake = [
            ("upgrade", "websocket"),
            ("connection", "keep-alive, Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
            ("sec-websocket-extensions", "permessage-deflate"),
        ];
        assert!(check_request(&Method::GET, &headers(&handshake)).is_ok());
        assert!(check_request(&Method::POST, &headers(&handshake)).is_err());
        let without = |name: &str| -> Vec<(&str, &str)> {
            handshake
                .iter()
                .copied()
                .filter(|(n, _)| *n != name)
                .collect()
        };
        for name in ["connection", "sec-websocket-key", "sec-websocket-version"] {
            assert!(
                check_request(&Method::GET, &headers(&without(name))).is_err(),
                "{name}"
            );
        }
        for (name, value) in [
            ("upgrade", "h2c"),
            ("sec-websocket-version", "8"),
            ("content-length", "5"),
            ("transfer-encoding", "chunked"),
        ] {
            let mut pairs = without(name);
            pairs.push((name, value));
            assert!(
                check_request(&Method::GET, &headers(&pairs)).is_err(),
                "{name}"
            );
        }
        let mut twice = handshake.to_vec();
        twice.push(("upgrade", "websocket"));
        assert!(check_request(&Method::GET, &headers(&twice)).is_err());

        // Forwarded: the upgrade restored, the extension offer gone in every spelling.
        let mut forwarded = headers(&handshake);
        forwarded.insert(
            HeaderName::from_static("sec_websocket_extensions"),
            HeaderValue::from_static("x"),
        );
        strip_request(&mut forwarded);
        restore_websocket_upgrade(&mut forwarded);
        assert_eq!(forwarded["upgrade"], "websocket");
        assert_eq!(forwarded["connection"], "Upgrade");
        assert_eq!(forwarded["sec-websocket-key"], "dGhlIHNhbXBsZSBub25jZQ==");
        assert!(!forwarded.contains_key("sec-websocket-extensions"));
        assert!(!forwarded.contains_key("sec_websocket_extensions"));
    }

    #[test]
    fn framing_verdicts_on_raw_heads() {
        assert!(
            FramingWatch::of_head(["Host", "content-length"])
                .take()
                .is_ok()
        );
        assert!(
            FramingWatch::of_head(["Transfer-Encoding", "Host"])
                .take()
                .is_ok()
        );
        for names in [
            &["Content-Length", "transfer-encoding"][..],
            &["TRANSFER-ENCODING", "content-length"][..],
            &["content-length", "Content-Length"][..],
        ] {
            assert!(FramingWatch::of_head(names.iter().copied()).take().is_err());
        }
        assert!(FramingWatch::unseen().take().is_err());
    }

    #[test]
    fn refuses_method_override_parameters_that_differ() {
        let post = Method::POST;
        let form = headers(&[("content-type", "application/x-www-form-urlencoded")]);
        let none = HeaderMap::new();
        for query in [
            "_method=DELETE",
            "a=1&_METHOD=put",
            "%5Fmethod=DELETE",
            "_m%65thod=DELETE",
            "%5F%6Dethod=DELETE",
            "_method",
        ] {
            assert!(
                check_override_params(&post, Some(query), &none, b"").is_err(),
                "{query}"
            );
        }
        assert!(check_override_params(&post, None, &form, b"x=1&_method=DELETE").is_err());
        assert!(check_override_params(&post, None, &form, b"_m%65thod=DELETE").is_err());
        let multipart = headers(&[("content-type", "multipart/form-data; boundary=x")]);
        let part =
            b"--x\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--x--\r\n";
        assert!(check_override_params(&post, None, &multipart, part).is_err());
        let json = headers(&[("content-type", "application/json")]);
        assert!(check_override_params(&post, None, &json, br#"{"_method":"DELETE"}"#).is_err());
        assert!(check_override_params(&post, None, &json, br#"{"_method":"POST"}"#).is_ok());
        assert!(
            check_override_params(&post, None, &json, br#"{"a":{"_method":"DELETE"}}"#).is_ok()
        );
        assert!(check_override_params(&post, Some("_method=post"), &none, b"").is_ok());
        // `;` separates parameters to old Rack, PHP's `arg_separator.input`, old Python and Go.
        for pairs in [
            "a=1;_method=DELETE",
            ";_method=DELETE",
            "a=1&b=2;.method=PUT",
        ] {
            assert!(
                check_override_params(&post, Some(pairs), &none, b"").is_err(),
                "{pairs}"
            );
            assert!(
                check_override_params(&post, None, &form, pairs.as_bytes()).is_err(),
                "{pairs}"
            );
        }
        assert!(check_override_params(&post, Some("a=1;b=2;_method=POST"), &none, b"").is_ok());
        assert!(check_override_params(&post, Some("my_method=DELETE"), &none, b"").is_ok());
        // A JSON body is not a form: its text is not read as parameters.
        assert!(check_override_params(&post, None, &json, b"_method=DELETE").is_ok());
        // No Content-Type: Rack reads a POST body as a form.
        assert!(check_override_params(&post, None, &none, b"_method=DELETE").is_err());
    }

    /// Issue 22: names as PHP registers them (`.` and ` ` as `_`, leading spaces dropped, cut at
    /// `[` and NUL), any case, after percent-decoding.
    #[test]
    fn method_parameter_names_read_as_php_registers_them() {
        for (name, reads) in [
            ("_method", true),
            ("_METHOD", true),
            ("_Method", true),
            (".method", true),
            (" _method", true),
            ("   .method", true),
            (" method", false),
            ("_method[]", true),
            ("_method[x]", true),
            ("_method[", true),
            (".method[0]", true),
            ("_method\0junk", true),
            ("_method_", false),
            ("_method ", false),
            ("__method", false),
            ("method", false),
            ("x_method", false),
            ("_metho", false),
            ("", false),
            ("[_method]", false),
        ] {
            assert_eq!(reads_as_method_param(name.as_bytes()), reads, "{name:?}");
        }
        let post = Method::POST;
        let none = HeaderMap::new();
        let form = headers(&[(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )]);
        for pairs in [
            ".method=DELETE",
            "+_method=DELETE",
            "%20_method=DELETE",
            "%2Emethod=DELETE",
            "_method%5B%5D=DELETE",
            "_method[]=DELETE",
            "_method%00x=DELETE",
            "a=1&+.method=PUT",
        ] {
            assert!(
                check_override_params(&post, Some(pairs), &none, b"").is_err(),
                "query {pairs}"
            );
            assert!(
                check_override_params(&post, None, &form, pairs.as_bytes()).is_err(),
                "form {pairs}"
            );
        }
        assert!(
            check_override_params(&post, Some(".method=POST&+_method=post"), &none, b"").is_ok()
        );
        assert!(check_override_params(&post, None, &form, b"a.method=DELETE").is_ok());
        // An empty or blank `Content-Type` is none to Rack, which then reads the body as a form
        // (outside review of issue 22).
        for blank in ["", " ", "\t"] {
            let untyped = headers(&[("content-type", blank)]);
            assert!(
                check_override_params(&post, None, &untyped, b"_method=DELETE").is_err(),
                "content-type {blank:?}"
            );
        }
        let json = headers(&[("content-type", "application/json")]);
        assert!(check_override_params(&post, None, &json, b"_method=DELETE").is_ok());
    }

    #[test]
    fn multipart_part_names_are_read_like_parameter_names() {
        let post = Method::POST;
        for content_type in [
            "multipart/form-data; boundary=x",
            "Multipart/Mixed; boundary=x",
        ] {
            let multipart = headers(&[("content-type", content_type)]);
            for disposition in [
                "form-data; name=\"_method\"",
                "form-data; name=\".method\"",
                "form-data; name=\" _method\"",
                "form-data; name=\"_method[]\"",
                "form-data; name=\"_METHOD\"",
                "form-data; name=_method",
                "form-data; name = \"_method\"",
                "form-data; NAME=.method",
                "form-data; name=\"\\_method\"",
                "form-data; name*=utf-8''%5Fmethod",
                // PHP's parser takes single quotes too (outside review of issue 22).
                "form-data; name='_method'",
                "form-data; name='.method'",
                "form-data; name=' _method'",
            ] {
                let body =
                    format!("--x\r\nContent-Disposition: {disposition}\r\n\r\nDELETE\r\n--x--\r\n");
                assert!(
                    check_override_params(&post, None, &multipart, body.as_bytes()).is_err(),
                    "{content_type}: {disposition}"
                );
            }
            let body = b"--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\n_method=DELETE\r\n--x--\r\n";
            assert!(check_override_params(&post, None, &multipart, body).is_ok());
        }
    }

    #[test]
    fn json_bodies_are_scanned_at_the_top_level_only() {
        let post = Method::POST;
        for (content_type, body, refused) in [
            ("application/json", r#"{"_method":"DELETE"}"#, true),
            ("application/json", r#"{"a":1,"_method":"DELETE"}"#, true),
            ("application/json", r#"{"\u005fmethod":"DELETE"}"#, true),
            ("application/json", r#"{"_m\u0065thod":"DELETE"}"#, true),
            ("application/json", r#"{".method":"DELETE"}"#, true),
            ("application/json", r#"{"_METHOD":"DELETE"}"#, true),
            ("application/json", r#"{"_method":["DELETE"]}"#, true),
            ("application/json", r#"{"_method":null}"#, true),
            (
                "application/json",
                r#"{"_method":"POST","_method":"DELETE"}"#,
                true,
            ),
            (
                "application/json",
                "\u{feff} {\"_method\":\"DELETE\"}",
                true,
            ),
            ("text/plain", r#"{"_method":"DELETE"}"#, true),
            ("application/json", "{\"a\":1}\n{\"_method\":\"PUT\"}", true),
            ("application/json", r#"{"_method":"post"}"#, false),
            ("application/json", r#"{"a":{"_method":"DELETE"}}"#, false),
            ("application/json", r#"[{"_method":"DELETE"}]"#, false),
            ("application/json", r#"{"method":"tools/call"}"#, false),
            ("application/json", r#"{"_method":"DELETE""#, false),
        ] {
            let map = headers(&[("content-type", content_type)]);
            assert_eq!(
                check_override_params(&post, None, &map, body.as_bytes()).is_err(),
                refused,
                "{content_type}: {body}"
            );
        }
        // Deep nesting and a long escaped key cost no recursion and no document.
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let json = headers(&[("content-type", "application/json")]);
        assert!(check_override_params(&post, None, &json, deep.as_bytes()).is_ok());
    }

    #[test]
    fn override_headers_are_matched_with_dashes_and_underscores_alike() {
        let post = Method::POST;
        for name in [
            "x-http-method-override",
            "x_http_method_override",
            "X_HTTP_METHOD_OVERRIDE",
            "x-http_method-override",
            "x_http_method",
            "x_method_override",
        ] {
            assert!(
                check_request(&post, &headers(&[(name, "DELETE")])).is_err(),
                "{name}"
            );
            assert!(
                check_request(&post, &headers(&[(name, "POST")])).is_ok(),
                "{name}"
            );
        }
        assert!(check_request(&post, &headers(&[("x-http-method-overrides", "DELETE")])).is_ok());
        for coding in ["gzip, chunked", "deflate,chunked", "identity"] {
            let map = headers(&[("transfer-encoding", coding)]);
            assert!(check_request(&post, &map).is_err(), "{coding}");
        }
        assert!(check_request(&post, &headers(&[("transfer-encoding", "Chunked")])).is_ok());
    }

    #[test]
    fn refuses_lowercase_methods() {
        assert!(check_method(&Method::from_bytes(b"delete").unwrap()).is_err());
        assert!(check_method(&Method::from_bytes(b"PATCH").unwrap()).is_ok());
    }

    #[test]
    fn strips_capability_proxy_hop_by_hop_and_connection_named_headers() {
        let mut map = headers(&[
            ("mint-capability", "mint_cap_x_y"),
            ("proxy-authorization", "Bearer t"),
            ("proxy-connection", "keep-alive"),
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("host", "127.0.0.1:8700"),
            ("content-length", "4"),
            ("accept-encoding", "gzip"),
            ("expect", "100-continue"),
            ("authorization", "Bearer {{mint:gh}}"),
            ("x-kept", "yes"),
        ]);
        strip_request(&mut map);
        // Removal may reorder what is left: compare the names as a set.
        let mut names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["authorization", "x-kept"]);
    }

    /// Issue 22 (outside attack on the merged binary): underscore spellings are stripped like
    /// the hyphen forms, and those of the body's framing and coding headers are refused.
    #[test]
    fn underscore_spellings_are_stripped_or_refused() {
        let mut map = headers(&[
            ("mint_capability", "mint_cap_x_y"),
            ("Mint-Debug", "1"),
            ("proxy_authorization", "Bearer t"),
            ("proxy_connection", "keep-alive"),
            ("keep_alive", "timeout=5"),
            ("accept_encoding", "gzip"),
            ("connection", "x_secret_hop, X-Other-Hop"),
            ("x-secret-hop", "1"),
            ("x_other_hop", "1"),
            ("range", "bytes=8-23"),
            ("If_Range", "\"v1\""),
            ("x_kept", "yes"),
        ]);
        strip_request(&mut map);
        let names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x_kept"]);
        let post = Method::POST;
        for name in [
            "content_length",
            "transfer_encoding",
            "Content_Encoding",
            "content_type",
            "content-length_",
        ] {
            let refused = !name.ends_with('_');
            assert_eq!(
                check_request(&post, &headers(&[(name, "1")])).is_err(),
                refused,
                "{name}"
            );
        }
        let mut answer = headers(&[
            ("mint_request_id", "forged"),
            ("content_length", "9"),
            ("content_encoding", "gzip"),
            ("transfer_encoding", "chunked"),
            ("content-length", "2"),
        ]);
        strip_response(&mut answer);
        let names: Vec<&str> = answer.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-length"]);
    }

    #[test]
    fn strips_forged_mint_headers_from_answers() {
        let mut map = headers(&[
            ("mint-request-id", "forged"),
            ("mint-outcome", "completed"),
            ("proxy-authenticate", "Basic"),
            ("content-type", "text/plain"),
        ]);
        strip_response(&mut map);
        let names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-type"]);
    }
}
