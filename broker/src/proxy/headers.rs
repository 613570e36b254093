//! Header hygiene in both directions: framing checks on the agent's request, and what is never
//! copied across the proxy.
//!
//! Request: ambiguous framing (Content-Length with Transfer-Encoding, several Content-Length or
//! Host headers) is refused; upgrades are refused; a method-override header must repeat the method
//! (otherwise `POST` + `X-HTTP-Method-Override: DELETE` would slip past a rule on `DELETE`). Then
//! the capability, every `Mint-*` and `Proxy-*` header, every hop-by-hop header (and every header
//! `Connection` names), `Host`, `Content-Length`, `Expect` and `Accept-Encoding` are removed: Mint
//! sets the upstream's `Host`, length and `Accept-Encoding: identity` itself.
//!
//! Response: hop-by-hop, `Proxy-*` and `Mint-*` headers from the upstream are removed (an upstream
//! cannot forge Mint's own headers).

use http::Method;
use http::header::{self, HeaderMap, HeaderName};

use super::error::Invalid;

/// The headers that may carry a method override.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Hop-by-hop headers (RFC 9110 section 7.6.1), plus `Proxy-Connection` and `Keep-Alive`.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
];

/// Refuses a method that is not an uppercase token: the policy matches methods byte for byte,
/// and an upstream may read `delete` as `DELETE`.
pub(crate) fn check_method(method: &Method) -> Result<(), Invalid> {
    if method.as_str().bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(Invalid::Method("the method must be uppercase, e.g. `GET`"));
    }
    Ok(())
}

/// Refuses ambiguous framing, upgrades and method overrides that differ from the method.
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
    if headers.get_all(header::HOST).iter().count() > 1 {
        return Err(Invalid::Framing("several Host headers"));
    }
    if headers.contains_key(header::UPGRADE) {
        return Err(Invalid::Header(
            "protocol upgrades (WebSocket, h2c) are not supported through Mint",
        ));
    }
    for name in METHOD_OVERRIDES {
        for value in headers.get_all(name) {
            if value.as_bytes() != method.as_str().as_bytes() {
                return Err(Invalid::Method(
                    "a method-override header must repeat the request's own method",
                ));
            }
        }
    }
    Ok(())
}

/// Refuses a `_method` override parameter that names another method than the request's: Rails,
/// Laravel and Symfony read it from the query, a form body, a multipart body or a JSON body, so a
/// `POST` carrying `_method=DELETE` would otherwise slip past a rule on `DELETE`. Parameter names
/// are percent-decoded (`+` as space) the way those frameworks decode them; a multipart part
/// named `_method` or a JSON body with a top-level `_method` member is refused unless it repeats
/// the method.
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
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_start().to_ascii_lowercase())
        .unwrap_or_default();
    let overridden = if media.starts_with("application/x-www-form-urlencoded") {
        form_overrides(body, own)
    } else if media.starts_with("multipart/form-data") {
        // Any part named `_method` (its value is not parsed out of the multipart body).
        multipart_names_method(body)
    } else if crate::placeholder::body_is_json(headers)
        && (memchr::memmem::find(body, b"method").is_some()
            || memchr::memmem::find(body, b"\\u").is_some())
    {
        // Only a body that can spell `_method` (plainly or with escapes) is parsed.
        json_overrides(body, own)
    } else {
        false
    };
    if overridden { refused() } else { Ok(()) }
}

/// Whether a `key=value&...` string has a `_method` key whose value is not `own`.
fn form_overrides(pairs: &[u8], own: &[u8]) -> bool {
    pairs.split(|&b| b == b'&').any(|pair| {
        let (key, value) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (
                pair.get(..at).unwrap_or_default(),
                pair.get(at + 1..).unwrap_or_default(),
            ),
            None => (pair, &b""[..]),
        };
        form_decode(key).eq_ignore_ascii_case(b"_method")
            && !form_decode(value).eq_ignore_ascii_case(own)
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

/// Whether a multipart body has a part named `_method` (quoted or not, any case), or a part
/// name in the RFC 2231 extended form (`name*=`), which could spell it in another way.
fn multipart_names_method(body: &[u8]) -> bool {
    static NEEDLES: std::sync::LazyLock<Option<aho_corasick::AhoCorasick>> =
        std::sync::LazyLock::new(|| {
            aho_corasick::AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .build(["name=\"_method\"", "name=_method", "name*="])
                .ok()
        });
    // Without the automaton (it cannot fail to build for three short needles), refuse.
    NEEDLES
        .as_ref()
        .is_none_or(|needles| needles.is_match(body))
}

/// Whether a JSON body is an object with a top-level `_method` member that is not `own`.
fn json_overrides(body: &[u8], own: &[u8]) -> bool {
    let Ok(serde_json::Value::Object(members)) = serde_json::from_slice(body) else {
        return false;
    };
    members.iter().any(|(key, value)| {
        key == "_method"
            && value
                .as_str()
                .is_none_or(|text| !text.as_bytes().eq_ignore_ascii_case(own))
    })
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

/// Removes what must never be forwarded upstream.
pub(crate) fn strip_request(headers: &mut HeaderMap) {
    strip_common(headers);
    for name in [
        header::HOST,
        header::CONTENT_LENGTH,
        header::EXPECT,
        header::ACCEPT_ENCODING,
    ] {
        headers.remove(name);
    }
}

/// Removes what must never be passed back to the agent.
pub(crate) fn strip_response(headers: &mut HeaderMap) {
    strip_common(headers);
}

fn strip_common(headers: &mut HeaderMap) {
    let mut doomed: Vec<HeaderName> = Vec::new();
    for value in headers.get_all(header::CONNECTION) {
        let Ok(text) = value.to_str() else { continue };
        for token in text.split(',') {
            if let Ok(name) = HeaderName::from_bytes(token.trim().as_bytes()) {
                doomed.push(name);
            }
        }
    }
    for (name, _) in headers.iter() {
        let text = name.as_str();
        if text.starts_with("proxy-") || text.starts_with("mint-") || text == "keep-alive" {
            doomed.push(name.clone());
        }
    }
    for name in doomed.into_iter().chain(HOP_BY_HOP) {
        headers.remove(name);
    }
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
        assert!(check_override_params(&post, Some("my_method=DELETE"), &none, b"").is_ok());
        // A JSON body is not a form: its text is not read as parameters.
        assert!(check_override_params(&post, None, &none, b"_method=DELETE").is_ok());
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
