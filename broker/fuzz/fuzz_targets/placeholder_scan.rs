//! Fuzzes the placeholder scan over every part of a request: the target, a header, and a JSON,
//! form or text body (`mint_broker::secrets::placeholder`).
//!
//! Input: one flags byte (bits 0-1: no `Content-Type`, `application/json`, a form or
//! `text/plain`; bit 2: a `Content-Encoding: gzip`; bit 3: the aliases `github`, `slack` and `b`
//! have value-shaped placeholders, [`SHAPED`]), then scheme, authority, path, query, a
//! header value and a header name separated by NUL bytes; the rest is the body.
//!
//! Beyond "never panics", it checks every placeholder found against a reference decoder written
//! here from the module's documentation: the span lies within its part, decodes (percent escapes,
//! and in JSON string escapes first) to exactly `{{mint:ALIAS}}` with a valid alias name or to
//! that alias's shaped value, and a raw site is spelled raw; the query and the header value, scanned alone, hold exactly the
//! placeholders the reference finds after decoding them once (or the scan refuses them exactly
//! when the reference finds a malformed one); a JSON body site is, by serde_json's reading of the
//! body (duplicate keys refused), a string at the pointer the scan names holding the placeholder;
//! the limit of 16 only ever turns a result into `TooMany`; and the check for a body with a
//! content coding agrees with scanning the same body without the coding.

#![no_main]

#[path = "../shared/strict_json.rs"]
mod strict_json;

use std::sync::OnceLock;

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use mint_broker::secrets::placeholder::shaped::ShapedPlaceholders;
use mint_broker::secrets::placeholder::{
    BodyKind, Forbidden, Part, Place, PlaceholderError, Placeholders, RequestParts, body_kind,
    live_in_encoded_body, scan, scan_with_limit,
};

/// Value-shaped placeholders of three aliases, as `mint` derives them (a prefix, then letters and
/// digits; a JWT): no value holds another, none can sit inside `{{mint:NAME}}` (they hold
/// capitals), and no value's end is another's start, so the first match to end is also the
/// first to start and the reference below may look for the earliest start.
const SHAPED: [(&str, &str); 3] = [
    ("github", "ghp_R8fKq2ZxT4mWv9LpN3bYc7HsD1jGaE5uQ0Zt"),
    ("slack", "xoxb-4711-Q9dWm2KfZ7rTLc"),
    ("b", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJiIn0.Xq3Zk9PwV"),
];

/// No value-shaped placeholders, or the [`SHAPED`] ones.
fn shapes(on: bool) -> &'static ShapedPlaceholders {
    static NONE: OnceLock<ShapedPlaceholders> = OnceLock::new();
    static SOME: OnceLock<ShapedPlaceholders> = OnceLock::new();
    if on {
        SOME.get_or_init(|| {
            let values = SHAPED.iter().map(|(a, v)| (a.to_string(), v.to_string()));
            ShapedPlaceholders::from_values(values.collect()).unwrap()
        })
    } else {
        NONE.get_or_init(ShapedPlaceholders::default)
    }
}
use mint_policy::body::{BodyPlaces, NamedPlace};
use mint_policy::policy::is_alias_name;
use serde_json::Value;
use strict_json::Strict;

const PREFIX: &[u8] = b"{{mint:";

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut fields = rest.splitn(7, |&b| b == 0);
    let mut next = || String::from_utf8_lossy(fields.next().unwrap_or_default()).into_owned();
    let (scheme, authority, path, query) = (next(), next(), next(), next());
    let (value, name) = (next(), next());
    let body = fields.next().unwrap_or_default().to_vec();
    let query = (!query.is_empty()).then_some(query);
    let shaped = shapes(flags & 8 != 0);

    let mut headers = HeaderMap::new();
    let content_type = match flags & 3 {
        1 => Some("application/json"),
        2 => Some("application/x-www-form-urlencoded"),
        3 => Some("text/plain"),
        _ => None,
    };
    if let Some(content_type) = content_type {
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
    }
    let coded = flags & 4 != 0;
    if coded {
        headers.insert(
            http::header::CONTENT_ENCODING,
            HeaderValue::from_static("gzip"),
        );
    }
    let header_name =
        HeaderName::from_bytes(name.as_bytes()).unwrap_or(http::header::AUTHORIZATION);
    let header_value = HeaderValue::from_bytes(value.as_bytes()).ok();
    if let Some(header_value) = &header_value {
        headers.append(header_name.clone(), header_value.clone());
    }

    let places = places();
    let parts = RequestParts {
        scheme: &scheme,
        authority: &authority,
        path: &path,
        query: query.as_deref(),
        headers: &headers,
        body: &body,
    };
    let all = scan_with_limit(&parts, places, shaped, usize::MAX);
    let limited = scan(&parts, places, shaped);
    match (&all, &limited) {
        (Ok(all), Ok(limited)) => assert_eq!(all, limited),
        (Ok(all), Err(PlaceholderError::TooMany { limit })) => assert!(all.found().len() > *limit),
        (Err(all), Err(limited)) if all == limited => {}
        (Err(_), Err(PlaceholderError::TooMany { .. })) => {}
        (all, limited) => panic!("the limit changed the result: {all:?} then {limited:?}"),
    }

    let kind = body_kind(&headers);
    if let Ok(found) = &all {
        check_found(found, &parts, kind, shaped);
        check_json_sites(found, &body, kind, shaped);
    }

    // The query and the header value alone, against the reference decoder.
    let no_headers = HeaderMap::new();
    if let Some(query) = &query {
        let alone = RequestParts {
            query: Some(query),
            ..empty_parts(&no_headers)
        };
        check_against_reference(
            scan_with_limit(&alone, places, shaped, usize::MAX),
            query.as_bytes(),
            shaped,
        );
    }
    if let Some(header_value) = header_value {
        let mut only = HeaderMap::new();
        // A name with no placeholder, so only the value is looked at.
        only.insert(http::header::AUTHORIZATION, header_value.clone());
        check_against_reference(
            scan_with_limit(&empty_parts(&only), places, shaped, usize::MAX),
            header_value.as_bytes(),
            shaped,
        );
    }

    // A coded body is never substituted in; the check on its decoded text must agree with a
    // scan of that text sent without the coding.
    let header_is_framing =
        header_name == http::header::CONTENT_TYPE || header_name == http::header::CONTENT_ENCODING;
    if coded && !header_is_framing {
        let mut plain = HeaderMap::new();
        if let Some(content_type) = content_type {
            plain.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(content_type),
            );
        }
        let live = live_in_encoded_body(&headers, &body, places, shaped);
        let scanned = scan_with_limit(
            &RequestParts {
                body: &body,
                ..empty_parts(&plain)
            },
            places,
            shaped,
            usize::MAX,
        );
        match (&live, &scanned) {
            (None, Ok(found)) => assert!(found.found().is_empty(), "{found:?}"),
            (Some(Some(alias)), Ok(found)) => {
                assert_eq!(found.found().first().map(|f| &f.alias), Some(alias));
            }
            (Some(None), Err(PlaceholderError::Malformed { .. })) => {}
            (live, scanned) => panic!("coded body check {live:?} but plain scan {scanned:?}"),
        }
    }
});

/// Every placeholder found lies within its part and decodes there to itself: `{{mint:ALIAS}}`
/// or the alias's shaped value.
fn check_found(
    found: &Placeholders,
    parts: &RequestParts<'_>,
    kind: BodyKind,
    shaped: &ShapedPlaceholders,
) {
    for hit in found.found() {
        assert!(is_alias_name(&hit.alias), "alias {:?}", hit.alias);
        let spellings = spellings(&hit.alias, shaped);
        let candidates: Vec<(&[u8], Layer)> = match &hit.part {
            Part::Scheme => vec![(parts.scheme.as_bytes(), Layer::Percent)],
            Part::Authority => vec![(parts.authority.as_bytes(), Layer::Percent)],
            Part::Path => vec![(parts.path.as_bytes(), Layer::Percent)],
            Part::Query => vec![(parts.query.unwrap_or_default().as_bytes(), Layer::Percent)],
            Part::Header(name) if hit.place == Place::Forbidden(Forbidden::HeaderName) => {
                vec![(name.as_str().as_bytes(), Layer::Percent)]
            }
            Part::Header(name) => parts
                .headers
                .get_all(name)
                .iter()
                .map(|v| (v.as_bytes(), Layer::Percent))
                .collect(),
            Part::Body => match kind {
                BodyKind::Json => vec![(parts.body, Layer::JsonPercent)],
                BodyKind::Form => vec![(parts.body, Layer::Percent)],
                BodyKind::Text => panic!("a site in a text body: {hit:?}"),
            },
        };
        let spelled = candidates.iter().find_map(|(bytes, layer)| {
            let raw = bytes.get(hit.span.clone())?;
            let decoded = decode(raw, *layer)?;
            let expected = spellings.iter().find(|s| **s == decoded)?;
            Some((raw, expected.clone()))
        });
        let Some((raw, expected)) = spelled else {
            panic!("{hit:?} does not decode to its placeholder");
        };
        match hit.place {
            Place::Site(_) if hit.part == Part::Body && kind == BodyKind::Json => {
                assert_eq!(raw, expected.as_slice(), "escaped JSON site")
            }
            Place::Site(mint_policy::site::Site::Header) => {
                assert_eq!(raw, expected.as_slice(), "escaped header site")
            }
            Place::Forbidden(Forbidden::EncodedInHeader | Forbidden::EncodedInJson) => {
                assert_ne!(raw, expected.as_slice(), "raw spelling refused as encoded")
            }
            _ => {}
        }
        if matches!(hit.part, Part::Scheme | Part::Authority | Part::Path) {
            assert_eq!(hit.place, Place::Forbidden(Forbidden::Target));
        }
    }
}

/// Every JSON body site is, by serde_json's reading, a string at the named pointer holding it
/// (percent-decoded, for an escaped one).
fn check_json_sites(
    found: &Placeholders,
    body: &[u8],
    kind: BodyKind,
    shaped: &ShapedPlaceholders,
) {
    if kind != BodyKind::Json {
        return;
    }
    let sites: Vec<_> = found
        .found()
        .iter()
        .filter(|f| f.part == Part::Body)
        .collect();
    if sites.is_empty() {
        return;
    }
    let Some(texts) = serde_texts(body) else {
        // serde_json refuses some texts the scan reads (numbers past f64's range).
        return;
    };
    for site in sites {
        let Some(NamedPlace::Pointer(pointer)) = &site.matched else {
            panic!("JSON site without its pointer: {site:?}");
        };
        let needles = spellings(&site.alias, shaped);
        let there = texts.iter().any(|text| {
            text.pointer(pointer)
                .and_then(Value::as_str)
                .is_some_and(|s| {
                    // Escaped spellings (refused) are the placeholder once percent-decoded.
                    let decoded = decode(s.as_bytes(), Layer::Percent).unwrap_or_default();
                    needles
                        .iter()
                        .any(|needle| find(&decoded, needle).is_some())
                })
        });
        assert!(
            there,
            "serde_json finds no {:?} at {pointer} of {texts:?}",
            site.alias
        );
    }
}

/// The placeholders of one part scanned alone agree with the reference decoder.
fn check_against_reference(
    scanned: Result<Placeholders, PlaceholderError>,
    raw: &[u8],
    shaped: &ShapedPlaceholders,
) {
    let reference = reference_aliases(&decode(raw, Layer::Percent).unwrap_or_default(), shaped);
    match (scanned, reference) {
        (Ok(found), Some(aliases)) => {
            let ours: Vec<&str> = found.found().iter().map(|f| f.alias.as_str()).collect();
            assert_eq!(ours, aliases, "scan and reference disagree on {raw:?}");
        }
        (Err(PlaceholderError::Malformed { .. }), None) => {}
        (scanned, reference) => {
            panic!("scan {scanned:?} but reference {reference:?} on {raw:?}")
        }
    }
}

/// The aliases of the placeholders in decoded text, in order: `{{mint:NAME}}` and the shaped
/// values, whichever starts first; `None` when `{{mint:` appears without a valid alias name and
/// `}}` after it (the scan's "malformed").
fn reference_aliases(decoded: &[u8], shaped: &ShapedPlaceholders) -> Option<Vec<String>> {
    let mut aliases = Vec::new();
    let mut at = 0;
    loop {
        let rest = decoded.get(at..)?;
        let value = shaped
            .iter()
            .filter_map(|(alias, value)| Some((find(rest, value.as_bytes())?, alias, value.len())))
            .min();
        let brace = find(rest, PREFIX);
        match (brace, value) {
            (None, None) => return Some(aliases),
            (Some(b), Some((v, alias, len))) if v < b => {
                aliases.push(alias.to_owned());
                at += v + len;
                continue;
            }
            (None, Some((v, alias, len))) => {
                aliases.push(alias.to_owned());
                at += v + len;
                continue;
            }
            _ => {}
        }
        let found = brace?;
        let name_start = at + found + PREFIX.len();
        let name_len = decoded
            .get(name_start..)?
            .iter()
            .take(65)
            .take_while(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || **b == b'_' || **b == b'-'
            })
            .count();
        let name = std::str::from_utf8(decoded.get(name_start..name_start + name_len)?).ok()?;
        let end = name_start + name_len;
        if decoded.get(end..end + 2) != Some(b"}}".as_slice()) || !is_alias_name(name) {
            return None;
        }
        aliases.push(name.to_owned());
        at = end + 2;
    }
}

#[derive(Clone, Copy)]
enum Layer {
    Percent,
    JsonPercent,
}

/// Decodes `raw` once as the receiver does: JSON string escapes first (for `JsonPercent`), then
/// `%XX` escapes (any hex case; a `%` without two hex digits is itself).
fn decode(raw: &[u8], layer: Layer) -> Option<Vec<u8>> {
    let text = match layer {
        Layer::Percent => raw.to_vec(),
        Layer::JsonPercent => {
            let mut quoted = Vec::with_capacity(raw.len() + 2);
            quoted.push(b'"');
            quoted.extend_from_slice(raw);
            quoted.push(b'"');
            serde_json::from_slice::<String>(&quoted).ok()?.into_bytes()
        }
    };
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let hex = |at: usize| text.get(at).and_then(|b| (*b as char).to_digit(16));
        match (text[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    Some(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn placeholder(alias: &str) -> Vec<u8> {
    format!("{{{{mint:{alias}}}}}").into_bytes()
}

/// The spellings that name `alias`: `{{mint:ALIAS}}`, and its shaped value if it has one.
fn spellings(alias: &str, shaped: &ShapedPlaceholders) -> Vec<Vec<u8>> {
    std::iter::once(placeholder(alias))
        .chain(shaped.value(alias).map(|v| v.as_bytes().to_vec()))
        .collect()
}

fn empty_parts(headers: &HeaderMap) -> RequestParts<'_> {
    RequestParts {
        scheme: "",
        authority: "",
        path: "",
        query: None,
        headers,
        body: b"",
    }
}

/// The places of the scanner's own tests: JSON pointers and form fields (loaded once).
fn places() -> &'static BodyPlaces {
    static PLACES: OnceLock<BodyPlaces> = OnceLock::new();
    PLACES.get_or_init(load_places)
}

fn load_places() -> BodyPlaces {
    let yaml = "aliases:
  - name: github
    hosts: [api.github.com]
    sites: [header, {body: [/token, /0]}]
  - name: slack
    hosts: [api.github.com]
    sites: [header, {body: [/nested/0/x, /1]}]
  - name: b
    hosts: [api.github.com]
    sites: [header, query, {body: [/v, /a~1b/0, /~0/1/x]}]
  - name: client
    hosts: [api.github.com]
    sites: [{form: [client_secret, client secret]}, {body: [/client_secret]}]
  - name: headeronly
    hosts: [api.github.com]
";
    let load = mint_policy::aliases::load_aliases(yaml.as_bytes(), "aliases.yaml");
    BodyPlaces::new(&load.aliases.unwrap())
}

/// The JSON texts of a body as serde_json reads them (one optional byte order mark, then one
/// or more texts), with duplicate member names refused; `None` when serde_json refuses it.
fn serde_texts(body: &[u8]) -> Option<Vec<Value>> {
    let body = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
    let mut stream = serde_json::Deserializer::from_slice(body).into_iter::<Strict>();
    let mut texts = Vec::new();
    loop {
        match stream.next() {
            None => return (!texts.is_empty()).then_some(texts),
            Some(Err(_)) => return None,
            Some(Ok(Strict(value))) => texts.push(value),
        }
    }
}
